use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::{Admission, Limit, LimitHit, RateLimits};
use crate::body::ResponseBody;
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::future::ResponseFuture;
use crate::identity::Caller;
use crate::metrics::ProxyMetrics;
use crate::parse::{InspectedPost, Parsed};

/// Refuses the tool calls of a principal over its `calls` limit before anything else is done
/// for them; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct LimitCalls<S> {
    pub(super) inner: S,
    pub(super) limits: Arc<RateLimits>,
    pub(super) metrics: ProxyMetrics,
}

impl<S> Service<Request<Parsed>> for LimitCalls<S>
where
    S: Service<Request<Parsed>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Parsed>) -> Self::Future {
        if !self.limits.is_on(Limit::Calls) {
            return ResponseFuture::inner(self.inner.call(request));
        }
        let Parsed::Message(post) = request.body() else {
            return ResponseFuture::inner(self.inner.call(request));
        };
        let calls = tool_calls(post);
        // Without a principal or a route the layers below refuse the request themselves.
        let context = request.extensions().context();
        let (Some(Caller(Some(principal))), Some(route), true) = (
            context.and_then(|context| context.caller.as_ref()),
            context.and_then(|context| context.route.as_ref()),
            calls > 0,
        ) else {
            return ResponseFuture::inner(self.inner.call(request));
        };
        let label = route.label;
        match self.limits.admit_calls(&principal.id, label, calls) {
            Admission::Ready(Ok(())) => ResponseFuture::inner(self.inner.call(request)),
            Admission::Ready(Err(hit)) => {
                ResponseFuture::answered(refusal(hit, request.body(), &self.metrics, label))
            }
            Admission::Pending(admission) => {
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let metrics = self.metrics.clone();
                ResponseFuture::working(async move {
                    match admission.await {
                        Ok(()) => {
                            let Ok(response) = inner.call(request).await;
                            response
                        }
                        Err(hit) => refusal(hit, request.body(), &metrics, label),
                    }
                })
            }
        }
    }
}

/// The 429 (or 503) for a refused request; nothing of it reaches the upstream.
fn refusal(
    hit: LimitHit,
    body: &Parsed,
    metrics: &ProxyMetrics,
    label: &'static str,
) -> Response<ResponseBody> {
    let (id, method) = match body {
        Parsed::Message(post) => (post.request_id(), post.method_label()),
        Parsed::NoBody => (None, "POST"),
    };
    ProxyError::RateLimited(hit).answer(id, metrics, label, method)
}

/// The `tools/call`s in a POST, requests and notification-shaped alike: each one counts, or a
/// client could batch its way past the limit.
fn tool_calls(post: &InspectedPost) -> u32 {
    let count = post
        .payload
        .messages()
        .iter()
        .filter(|message| message.method() == Some("tools/call"))
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}
