use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use countersign_jsonrpc::message::{Message, Payload, RequestId};
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Map};
use http::request::Parts;
use http::{Method, Request};
use tower::Service;

use crate::approval::Cleared;
use crate::audit::{ForwardOutcome, ForwardReply};
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::metrics::{ProxyMetrics, method_label};
use crate::relay::{PendingAnswers, StreamSettings, WatchResponses, relay};
use crate::upstream::Forwarded;

/// Forwards cleared requests to their route's upstream.
#[derive(Debug, Clone)]
pub struct Forwarder {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    watch: Arc<dyn WatchResponses>,
    metrics: ProxyMetrics,
    streams: StreamSettings,
}

impl Forwarder {
    pub fn new(
        watch: Arc<dyn WatchResponses>,
        metrics: ProxyMetrics,
        streams: StreamSettings,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                watch,
                metrics,
                streams,
            }),
        }
    }
}

impl Service<Request<Cleared>> for Forwarder {
    type Response = ForwardReply;
    type Error = Infallible;
    type Future =
        Map<BoxFuture<'static, ForwardReply>, fn(ForwardReply) -> Result<ForwardReply, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Cleared>) -> Self::Future {
        // Taken apart here and handed to the `async fn` as its arguments: a request it took
        // apart itself, or an async block around it, would each keep a second copy of the
        // request in the boxed state, which is moved whole into its box on every call.
        let (parts, cleared) = request.into_parts();
        let forward: BoxFuture<'static, ForwardReply> =
            Box::pin(Shared::forward(self.shared.clone(), parts, cleared));
        forward.map(Ok)
    }
}

impl Shared {
    async fn forward(self: Arc<Self>, parts: Parts, cleared: Cleared) -> ForwardReply {
        let Some(route) = parts.extensions.route() else {
            let error =
                ProxyError::Internal("request reached the forwarder without a route".into());
            return (error.into_response(None), ForwardOutcome("internal_error"));
        };
        let (method, id) = labels(&parts.method, cleared.payload());
        let forwarded = Forwarded {
            method: parts.method.clone(),
            client_headers: &parts.headers,
            body: cleared.to_bytes(),
            extra: cleared.mirrored(),
        };
        // Every relayed response is watched, so the catalog never trusts a listing the
        // upstream itself declared outdated.
        let observer = self.watch.clone().watch(route, &parts, cleared.payload());
        send_with_the_burst().await;
        let relayed = relay(
            route,
            forwarded,
            &self.metrics,
            &self.streams,
            observer,
            PendingAnswers::new(
                cleared
                    .payload()
                    .into_iter()
                    .flat_map(Payload::owed)
                    .cloned(),
            ),
        )
        .await;
        match relayed {
            Ok(response) => {
                self.metrics
                    .record_request(route.label, method, "forwarded");
                (response, ForwardOutcome("forwarded"))
            }
            Err(error) => {
                let outcome = ForwardOutcome(error.outcome());
                let response = error.answer(id.as_ref(), &self.metrics, route.label, method);
                (response, outcome)
            }
        }
    }
}

/// Lets every other task ready on this worker run before the request goes upstream, so the
/// requests that arrived together are sent together.
///
/// Sending is what wakes the upstream. Sent one at a time as each request cleared the stack, a
/// local upstream (a sidecar's server, anything else sharing the gateway's cores) was woken per
/// request, and on a shared core the kernel let it preempt the gateway at every send: the two
/// ran in lockstep, one request per wake-up, 0.72–0.76 forced context switches per request
/// (`bench/yardstick.sh`, pinned; 0.34–0.40 since). Deferred to the end of the worker's turn, a
/// burst's sends follow one another and the upstream answers them in one wake-up. The cost is
/// one turn of the worker's loop before each send: when nothing else is ready, a poll of the
/// event queue that returns at once.
async fn send_with_the_burst() {
    tokio::task::yield_now().await;
}

/// The metric label and the id to answer an upstream failure with.
fn labels(method: &Method, payload: Option<&Payload>) -> (&'static str, Option<RequestId>) {
    match payload {
        Some(Payload::Single(Message::Request(r))) => (method_label(&r.method), Some(r.id.clone())),
        Some(Payload::Single(Message::Notification(n))) => (method_label(&n.method), None),
        Some(Payload::Single(Message::Response(_))) => ("response", None),
        Some(Payload::Batch(_)) => ("batch", None),
        None if method == Method::GET => ("GET", None),
        None => ("DELETE", None),
    }
}
