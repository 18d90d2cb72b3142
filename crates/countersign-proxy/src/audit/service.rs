use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::future::ResponseFuture;
use super::{AuditSink, CallAudit};
use crate::body::ResponseBody;
use crate::clock::Clock;
use crate::route::Route;

/// Writes the outcome line of every audited call once the inner service answers.
#[derive(Debug, Clone)]
pub struct AuditOutcomes<S> {
    pub(super) inner: S,
    pub(super) sink: AuditSink,
    pub(super) clock: Arc<dyn Clock>,
}

impl<S, B> Service<Request<B>> for AuditOutcomes<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>>,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let pending = match (
            request.extensions().get::<CallAudit>(),
            request.extensions().get::<Route>(),
        ) {
            (Some(audit), Some(route)) => Some(super::future::Pending {
                audit: audit.clone(),
                upstream: route.0.clone(),
                sink: self.sink.clone(),
                clock: self.clock.clone(),
            }),
            _ => None,
        };
        ResponseFuture::new(self.inner.call(request), pending)
    }
}
