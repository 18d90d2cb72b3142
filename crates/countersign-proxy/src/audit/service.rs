use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::future::ResponseFuture;
use super::{AuditSink, ForwardReply};
use crate::body::ResponseBody;
use crate::clock::Clock;
use crate::context::RequestContextExt;

/// Writes the outcome line of every audited call once the inner service (the forwarder) answers
/// with its response and how forwarding ended.
#[derive(Debug, Clone)]
pub struct AuditOutcomes<S> {
    pub(super) inner: S,
    pub(super) sink: AuditSink,
    pub(super) clock: Arc<dyn Clock>,
}

impl<S, B> Service<Request<B>> for AuditOutcomes<S>
where
    S: Service<Request<B>, Response = ForwardReply>,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let context = request.extensions_mut().context_mut();
        // One call, or the allowed calls of a batch. Taken, not copied: nothing below reads them.
        let calls = std::mem::take(&mut context.audits);
        let pending = match &context.route {
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
