//! The innermost service: one MCP endpoint per route. POST bodies go through the one strict
//! inspection and the approval gate; GET and DELETE are forwarded as they are.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use countersign_jsonrpc::mcp::ProtocolVersion;
use countersign_jsonrpc::message::{Message, Payload, RequestId, error_response};
use http::{HeaderValue, Method, Request, Response, header};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tower::Service;
use tracing::debug;

use crate::body::{ResponseBody, collect_limited, full};
use crate::config::{Limits, Upstream};
use crate::error::ProxyError;
use crate::forward::{UpstreamClient, relay, upstream_request};
use crate::gate::{CallAudit, Gate, GateRequest, Verdict};
use crate::hardening::RouteIndex;
use crate::inspect::inspect_post;
use crate::metrics::ProxyMetrics;
use crate::rewrite::ResponseHook;
use crate::sse::RelayObserver;

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
    gate: Arc<Gate>,
}

/// Forwards requests that passed hardening to their route's upstream.
#[derive(Debug, Clone)]
pub struct McpEndpoints {
    shared: Arc<Shared>,
}

impl McpEndpoints {
    pub fn new(
        routes: Vec<RouteTarget>,
        limits: Limits,
        metrics: ProxyMetrics,
        gate: Arc<Gate>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                routes,
                limits,
                metrics,
                gate,
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

/// What the client asked for, kept for the answer after the payload has moved on.
struct Asked {
    method: &'static str,
    id: Option<RequestId>,
    stateless: bool,
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
        let asked = Asked {
            method: inspected.method_label(),
            id: inspected.request_id().cloned(),
            stateless: inspected.version.is_some_and(ProtocolVersion::is_stateless),
        };
        let mirrored = inspected.mirrored;
        let gate_request = GateRequest {
            upstream: &route.upstream,
            client: &route.client,
            headers: &parts.headers,
            max_event_bytes: self.limits.max_sse_event_bytes.get(),
        };
        match self.gate.check(&gate_request, inspected.payload).await {
            Verdict::Forward(payload, audit) => {
                let hook = self.response_hook(route, &payload);
                let upstream_request = upstream_request(
                    &route.upstream,
                    Method::POST,
                    &parts.headers,
                    Bytes::from(payload.to_vec()),
                    &mirrored,
                );
                self.forward(route, asked.method, upstream_request, asked.id, hook, audit)
                    .await
            }
            Verdict::Answer(result) => {
                self.metrics
                    .record_request(route.label, asked.method, "answered");
                answer(&asked, Ok(result))
            }
            Verdict::AnswerError {
                code,
                message,
                data,
            } => {
                self.metrics
                    .record_request(route.label, asked.method, "answered");
                answer(&asked, Err((code, message, data)))
            }
            Verdict::Refuse(error) => self.refuse(route, asked.method, error, asked.id.as_ref()),
        }
    }

    fn response_hook(&self, route: &RouteTarget, payload: &Payload) -> Option<ResponseHook> {
        let Payload::Single(Message::Request(request)) = payload else {
            return None;
        };
        let first_page = request
            .params
            .as_ref()
            .is_none_or(|p| p.get("cursor").is_none_or(Value::is_null));
        ResponseHook::for_request(
            &request.method,
            &request.id,
            first_page,
            &route.upstream.name,
            &self.gate,
        )
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
        self.forward(route, method, upstream_request, None, None, None)
            .await
    }

    async fn forward(
        &self,
        route: &RouteTarget,
        method: &'static str,
        upstream_request: Request<http_body_util::Full<Bytes>>,
        id: Option<RequestId>,
        hook: Option<ResponseHook>,
        audit: Option<Box<CallAudit>>,
    ) -> Response<ResponseBody> {
        // Every relayed stream is watched for list_changed, so the catalog never trusts a
        // listing the upstream itself declared outdated.
        let observer = RelayObserver {
            gate: self.gate.clone(),
            upstream: route.upstream.name.clone(),
            hook,
        };
        let result = relay(
            &route.upstream,
            route.label,
            &route.client,
            upstream_request,
            &self.metrics,
            self.limits.max_sse_event_bytes.get(),
            Some(observer),
        )
        .await;
        match result {
            Ok(response) => {
                self.metrics
                    .record_request(route.label, method, "forwarded");
                if let Some(audit) = &audit {
                    self.gate
                        .audit_outcome(audit, &route.upstream.name, "forwarded");
                }
                response
            }
            Err(error) => {
                if let Some(audit) = &audit {
                    self.gate
                        .audit_outcome(audit, &route.upstream.name, error.outcome());
                }
                self.refuse(route, method, error, id.as_ref())
            }
        }
    }

    fn refuse(
        &self,
        route: &RouteTarget,
        method: &'static str,
        error: ProxyError,
        id: Option<&RequestId>,
    ) -> Response<ResponseBody> {
        debug!(upstream = route.label, %error, side = error.side().as_str(), "request not forwarded");
        self.metrics
            .record_request(route.label, method, error.outcome());
        error.into_response(id)
    }
}

/// The gateway's own JSON-RPC answer to a request it did not forward.
fn answer(asked: &Asked, outcome: Result<Value, (i64, String, Value)>) -> Response<ResponseBody> {
    let body = match outcome {
        Ok(mut result) => {
            // 2026-07-28 results say whether they are complete.
            if let (true, Value::Object(map)) = (asked.stateless, &mut result) {
                map.insert("resultType".into(), Value::String("complete".into()));
            }
            let id = asked.id.as_ref().map_or(Value::Null, RequestId::to_value);
            Bytes::from(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
        }
        Err((code, message, data)) => {
            Bytes::from(error_response(asked.id.as_ref(), code, message, Some(data)))
        }
    };
    let mut response = Response::new(full(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
