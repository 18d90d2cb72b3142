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
        let extensions = request.extensions();
        // One call, or the allowed calls of a batch.
        let calls = match (
            extensions.get::<CallAudit>(),
            extensions.get::<Vec<CallAudit>>(),
        ) {
            (Some(audit), _) => vec![audit.clone()],
            (None, Some(audits)) => audits.clone(),
            (None, None) => Vec::new(),
        };
        let pending = match extensions.get::<Route>() {
            Some(route) if !calls.is_empty() => Some(super::future::Pending {
                calls,
                upstream: route.0.clone(),
                sink: self.sink.clone(),
                clock: self.clock.clone(),
            }),
            _ => None,
        };
        ResponseFuture::new(self.inner.call(request), pending)
    }
}
