use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::{Message, Payload};
use countersign_policy::{CallFacts, Method, PinnedTool, Policy, Principal};
use http::{Request, Response};
use tower::Service;
use tracing::warn;

use super::call::{CallParts, gated_method};
use super::{Classification, Judged};
use crate::body::ResponseBody;
use crate::catalog::{CatalogSync, stateless_meta};
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::future::ResponseFuture;
use crate::identity::Caller;
use crate::metrics::ProxyMetrics;
use crate::parse::{InspectedPost, Parsed};
use crate::route::Route;
use crate::state::PolicyHandle;

/// Judges the gated calls of every POST; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct Classify<S> {
    pub(super) inner: S,
    pub(super) policy: Arc<PolicyHandle>,
    pub(super) catalog: CatalogSync,
    pub(super) metrics: ProxyMetrics,
}

/// A gated call before its decision: the pinned tool is known (`Some`) or must be listed.
struct Pending {
    index: usize,
    call: CallParts,
    pinned: Option<Option<PinnedTool>>,
    /// For the listing, when `pinned` is `None`: the request's 2026-07-28 `_meta`.
    stateless_meta: Option<RawJson>,
}

impl<S> Service<Request<Parsed>> for Classify<S>
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

    fn call(&mut self, mut request: Request<Parsed>) -> Self::Future {
        let Parsed::Message(post) = request.body() else {
            return ResponseFuture::inner(self.inner.call(request));
        };
        // One lookup for both: the route now, the caller once the calls are known.
        let context = request.extensions().context();
        let caller = context.and_then(|context| context.caller.as_ref());
        let Some(route) = context.and_then(|context| context.route.clone()) else {
            let error =
                ProxyError::Internal("request reached classification without a route".into());
            return ResponseFuture::answered(error.into_response(None));
        };
        let refuse = |error: ProxyError| {
            ResponseFuture::answered(error.answer(
                post.request_id(),
                &self.metrics,
                route.label,
                post.method_label(),
            ))
        };
        let mut pending = match self.gated_calls(&route, post) {
            Ok(pending) if pending.is_empty() => {
                return ResponseFuture::inner(self.inner.call(request));
            }
            Ok(pending) => pending,
            Err(error) => return refuse(error),
        };
        let principal = match caller {
            Some(Caller(Some(principal))) => principal.clone(),
            _ => return refuse(ProxyError::Unauthenticated),
        };
        let policy = self.policy.current();
        if pending.iter().all(|p| p.pinned.is_some()) {
            let classification = decide(&policy, &route, &principal, pending);
            request.extensions_mut().context_mut().classification = Some(classification);
            return ResponseFuture::inner(self.inner.call(request));
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let catalog = self.catalog.clone();
        ResponseFuture::working(async move {
            for call in &mut pending {
                if call.pinned.is_none() {
                    let pin = catalog
                        .pinned_tool(
                            &route,
                            request.headers(),
                            call.stateless_meta.take(),
                            &call.call.target,
                        )
                        .await;
                    call.pinned = Some(pin);
                }
            }
            let classification = decide(&policy, &route, &principal, pending);
            request.extensions_mut().context_mut().classification = Some(classification);
            match inner.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        })
    }
}

impl<S> Classify<S> {
    /// The gated calls of `post`, each with its pinned tool when the catalog can answer now.
    fn gated_calls(&self, route: &Route, post: &InspectedPost) -> Result<Vec<Pending>, ProxyError> {
        let messages = match &post.payload {
            Payload::Single(message) => std::slice::from_ref(message),
            Payload::Batch(messages) => messages.as_slice(),
        };
        let mut pending = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            // A call sent as a notification is judged like one sent as a request: otherwise
            // an id-less `tools/call` would reach the upstream unjudged.
            let (method, params) = match message {
                Message::Request(r) => (&r.method, r.params.as_ref()),
                Message::Notification(n) => (&n.method, n.params.as_ref()),
                Message::Response(_) => continue,
            };
            let Some(method) = gated_method(method) else {
                continue;
            };
            let call = CallParts::of(method, params)?;
            let pinned = match method {
                Method::ToolsCall => self.catalog.cached(&route.upstream.name, &call.target),
                Method::PromptsGet | Method::ResourcesRead => Some(None),
            };
            pending.push(Pending {
                index,
                call,
                stateless_meta: pinned.is_none().then(|| stateless_meta(params)).flatten(),
                pinned,
            });
        }
        Ok(pending)
    }
}

fn decide(
    policy: &Policy,
    route: &Route,
    principal: &Principal,
    pending: Vec<Pending>,
) -> Classification {
    let calls = pending
        .into_iter()
        .map(|Pending { index, call, pinned, .. }| {
            let pinned = pinned.flatten();
            let decision = policy.classify(&CallFacts {
                upstream: &route.upstream.name,
                method: call.method,
                target: &call.target,
                arguments: &call.arguments,
                principal,
                tool: pinned.as_ref(),
            });
            if let Some(error) = &decision.condition_error {
                warn!(rule = %decision.rule, error = %error, "policy condition failed; decided fail-closed");
            }
            Judged {
                index,
                call: call.with_definition(pinned.as_ref()),
                decision,
                pinned,
            }
        })
        .collect();
    Classification { calls }
}
