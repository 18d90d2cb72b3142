//! The innermost service: one MCP endpoint per route, forwarding POST, GET and DELETE upstream.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tower::Service;
use tracing::debug;

use crate::body::{ResponseBody, collect_limited};
use crate::config::{Limits, Upstream};
use crate::error::ProxyError;
use crate::forward::{UpstreamClient, relay, upstream_request};
use crate::hardening::RouteIndex;
use crate::inspect::inspect_post;
use crate::metrics::ProxyMetrics;

/// One route's upstream with its pooled client and static metric label.
#[derive(Debug)]
pub struct RouteTarget {
    pub upstream: Upstream,
    pub label: &'static str,
    pub client: UpstreamClient,
}

#[derive(Debug)]
struct Shared {
    routes: Vec<RouteTarget>,
    limits: Limits,
    metrics: ProxyMetrics,
}

/// Forwards requests that passed hardening to their route's upstream.
#[derive(Debug, Clone)]
pub struct McpEndpoints {
    shared: Arc<Shared>,
}

impl McpEndpoints {
    pub fn new(routes: Vec<RouteTarget>, limits: Limits, metrics: ProxyMetrics) -> Self {
        Self {
            shared: Arc::new(Shared {
                routes,
                limits,
                metrics,
            }),
        }
    }
}

impl Service<Request<Incoming>> for McpEndpoints {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    // Boxed once, here at the edge of the stack; every layer above has a named future.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move { Ok(shared.handle(request).await) })
    }
}

impl Shared {
    async fn handle(&self, request: Request<Incoming>) -> Response<ResponseBody> {
        let Some(RouteIndex(index)) = request.extensions().get::<RouteIndex>().copied() else {
            return ProxyError::Internal("request reached the endpoint without a route".into())
                .into_response(None);
        };
        let Some(route) = self.routes.get(index) else {
            return ProxyError::Internal("route index out of range".into()).into_response(None);
        };
        match *request.method() {
            Method::POST => self.post(route, request).await,
            _ => self.passthrough(route, request).await,
        }
    }

    async fn post(
        &self,
        route: &RouteTarget,
        request: Request<Incoming>,
    ) -> Response<ResponseBody> {
        let (parts, body) = request.into_parts();
        let bytes = match collect_limited(
            body,
            self.limits.max_body_bytes.get(),
            self.limits.body_timeout,
        )
        .await
        {
            Ok(bytes) => bytes,
            Err(error) => return self.refuse(route, "POST", error, None),
        };
        let inspected = match inspect_post(&parts.headers, &bytes, self.limits.max_json_depth.get())
        {
            Ok(inspected) => inspected,
            Err((error, id)) => return self.refuse(route, "POST", error, id.as_ref()),
        };
        let method = inspected.method_label();
        let upstream_request = upstream_request(
            &route.upstream,
            Method::POST,
            &parts.headers,
            inspected.forward_body(),
            &inspected.mirrored,
        );
        let id = inspected.request_id().cloned();
        self.forward(route, method, upstream_request, id).await
    }

    async fn passthrough(
        &self,
        route: &RouteTarget,
        request: Request<Incoming>,
    ) -> Response<ResponseBody> {
        let method = if request.method() == Method::GET {
            "GET"
        } else {
            "DELETE"
        };
        // GET and DELETE carry no body on MCP endpoints; whatever a client sends is not forwarded.
        let upstream_request = upstream_request(
            &route.upstream,
            request.method().clone(),
            request.headers(),
            Bytes::new(),
            &[],
        );
        self.forward(route, method, upstream_request, None).await
    }

    async fn forward(
        &self,
        route: &RouteTarget,
        method: &'static str,
        upstream_request: Request<http_body_util::Full<Bytes>>,
        id: Option<countersign_jsonrpc::message::RequestId>,
    ) -> Response<ResponseBody> {
        match relay(
            &route.upstream,
            route.label,
            &route.client,
            upstream_request,
            &self.metrics,
            self.limits.max_sse_event_bytes.get(),
        )
        .await
        {
            Ok(response) => {
                self.metrics
                    .record_request(route.label, method, "forwarded");
                response
            }
            Err(error) => self.refuse(route, method, error, id.as_ref()),
        }
    }

    fn refuse(
        &self,
        route: &RouteTarget,
        method: &'static str,
        error: ProxyError,
        id: Option<&countersign_jsonrpc::message::RequestId>,
    ) -> Response<ResponseBody> {
        debug!(upstream = route.label, %error, side = error.side().as_str(), "request not forwarded");
        self.metrics
            .record_request(route.label, method, error.outcome());
        error.into_response(id)
    }
}
