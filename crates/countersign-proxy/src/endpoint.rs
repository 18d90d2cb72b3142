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
use countersign_jsonrpc::sse::SseEvent;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::Service;
use tracing::{debug, info};

use crate::body::{ResponseBody, collect_limited, full};
use crate::config::{Limits, Upstream};
use crate::error::ProxyError;
use crate::forward::{UpstreamClient, relay, upstream_request};
use crate::gate::{
    CallAudit, ForwardContext, Gate, GateRequest, KEEP_ALIVE, PendingQuestion, Settlement, Verdict,
};
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
pub(crate) struct Shared {
    routes: Vec<RouteTarget>,
    limits: Limits,
    metrics: ProxyMetrics,
    gate: Arc<Gate>,
    /// Held calls waiting on this replica, per session, so ending a session settles them.
    questions: std::sync::Mutex<std::collections::HashMap<String, Vec<RequestId>>>,
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
                questions: Default::default(),
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
        Box::pin(async move { Ok(Shared::handle(&shared, request).await) })
    }
}

/// What the client asked for, kept for the answer after the payload has moved on.
struct Asked {
    method: &'static str,
    id: Option<RequestId>,
    stateless: bool,
}

impl Shared {
    async fn handle(self: &Arc<Self>, request: Request<Incoming>) -> Response<ResponseBody> {
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
        self: &Arc<Self>,
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
        let initialize = initialize_params(&inspected.payload);
        let gate_request = GateRequest {
            upstream: &route.upstream,
            client: &route.client,
            headers: &parts.headers,
            max_event_bytes: self.limits.max_sse_event_bytes.get(),
            stateless: asked.stateless,
        };
        match self.gate.check(&gate_request, inspected.payload).await {
            Verdict::Forward(payload, context) => {
                let (audit, wrap) = match context.map(|c| *c) {
                    Some(ForwardContext { audit, wrap }) => (Some(audit), wrap),
                    None => (None, None),
                };
                let hook = match (wrap, &asked.id) {
                    (Some(wrap), Some(id)) => Some(ResponseHook::wrap_state(
                        id,
                        &route.upstream.name,
                        &self.gate,
                        wrap,
                    )),
                    _ => self.response_hook(route, &payload),
                };
                let upstream_request = upstream_request(
                    &route.upstream,
                    Method::POST,
                    &parts.headers,
                    Bytes::from(payload.to_vec()),
                    &mirrored,
                );
                let response = self
                    .forward(route, asked.method, upstream_request, asked.id, hook, audit)
                    .await;
                if let Some(params) = initialize {
                    self.remember_session(&parts.headers, &response, &params);
                }
                response
            }
            Verdict::Answer(result) => {
                self.metrics
                    .record_request(route.label, asked.method, "answered");
                answer(&asked, Ok(result))
            }
            Verdict::AnswerError {
                status,
                code,
                message,
                data,
            } => {
                self.metrics
                    .record_request(route.label, asked.method, "answered");
                let mut response = answer(&asked, Err((code, message, data)));
                *response.status_mut() = status;
                response
            }
            Verdict::Ask(pending) => {
                self.metrics
                    .record_request(route.label, asked.method, "asked");
                self.ask(route, parts.headers, *pending)
            }
            Verdict::Accepted => {
                self.metrics
                    .record_request(route.label, asked.method, "answer_taken");
                let mut response = Response::new(crate::body::empty());
                *response.status_mut() = StatusCode::ACCEPTED;
                response
            }
            Verdict::Refuse(error) => self.refuse(route, asked.method, error, asked.id.as_ref()),
        }
    }

    /// Learns who opened a session and whether its client can be asked, from the `initialize`
    /// exchange the gateway just relayed.
    fn remember_session(
        &self,
        headers: &HeaderMap,
        response: &Response<ResponseBody>,
        params: &serde_json::Map<String, Value>,
    ) {
        let Some(session) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        if let Some(principal) = self.gate.principal(headers) {
            self.gate
                .sessions
                .opened(session, &principal.id, Some(params));
        }
    }

    /// Answers a held call with an SSE stream: the gateway's question first, keep-alives while
    /// the person decides, then either the upstream's answer to the approved call (streamed as
    /// it arrives) or a `not_approved` result.
    fn ask(
        self: &Arc<Self>,
        route: &RouteTarget,
        headers: HeaderMap,
        pending: PendingQuestion,
    ) -> Response<ResponseBody> {
        let (events, receiver) = mpsc::channel::<Bytes>(16);
        let shared = Arc::clone(self);
        let index = self
            .routes
            .iter()
            .position(|r| std::ptr::eq(r, route))
            .unwrap_or(0);
        tokio::spawn(async move { shared.run_question(index, headers, pending, events).await });
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver
                .recv()
                .await
                .map(|bytes| (Ok::<_, crate::body::BoxError>(Frame::data(bytes)), receiver))
        });
        let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, no-transform"),
        );
        headers.insert(
            http::HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        );
        response
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
        if request.method() == Method::DELETE
            && let Some(session) = request
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
        {
            self.gate.sessions.closed(session);
            // Calls still waiting for an answer in that session will never get one.
            let pending = self
                .questions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(session)
                .cloned()
                .unwrap_or_default();
            self.gate.end_session(session, &pending).await;
        }
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
        audit: Option<CallAudit>,
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

    fn track_question(&self, session: &str, call_id: &RequestId, waiting: bool) {
        let mut questions = self.questions.lock().unwrap_or_else(|p| p.into_inner());
        let ids = questions.entry(session.to_owned()).or_default();
        if waiting {
            ids.push(call_id.clone());
        } else {
            ids.retain(|id| id != call_id);
            if ids.is_empty() {
                questions.remove(session);
            }
        }
    }

    /// The life of one question stream (see [`Shared::ask`]). Ends early, forwarding nothing,
    /// when the client goes away.
    async fn run_question(
        self: Arc<Self>,
        route_index: usize,
        headers: HeaderMap,
        pending: PendingQuestion,
        events: mpsc::Sender<Bytes>,
    ) {
        let Some(route) = self.routes.get(route_index) else {
            return;
        };
        let PendingQuestion {
            call,
            question,
            handover_key,
            question_id,
            audit,
        } = pending;
        let call_id = call.id.clone();
        let session = audit.session.clone().unwrap_or_default();
        // Register for the answer before asking, so a quick answer is never lost.
        let mut waiting = self
            .gate
            .settings
            .handover
            .wait(&handover_key, self.gate.settings.elicitation_timeout);
        self.track_question(&session, &call_id, true);
        debug!(upstream = route.label, tool = %audit.target, "asking the person on the call's stream");
        let settled = if events.send(event(&question)).await.is_err() {
            Err("client_gone")
        } else {
            let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
            keep_alive.tick().await;
            loop {
                tokio::select! {
                    settled = &mut waiting => break Ok(settled),
                    // A client that goes away can no longer see the result; nothing runs.
                    () = events.closed() => break Err("client_gone"),
                    _ = keep_alive.tick() => {
                        // A comment keeps clients and intermediaries from dropping a quiet
                        // stream. (Progress would be out of order with the tool's own.)
                        if events.send(Bytes::from_static(b": waiting for the user's approval\n\n")).await.is_err() {
                            break Err("client_gone");
                        }
                    }
                }
            }
        };
        self.track_question(&session, &call_id, false);
        let (approved, outcome) = match &settled {
            Err(gone) => (false, *gone),
            Ok(Ok(Some(bytes))) => match Settlement::decode(bytes) {
                Some(Settlement::Answer {
                    question_id: answered,
                    principal,
                    response,
                }) if answered == question_id && principal == audit.principal => {
                    match response.get("result") {
                        Some(result) if crate::elicit::approves(result) => (true, "approved"),
                        Some(_) => (false, "rejected:not_approved"),
                        None => (false, "rejected:not_approved(client_error)"),
                    }
                }
                Some(Settlement::Cancelled) => (false, "rejected:not_approved(cancelled)"),
                _ => (false, "rejected:not_approved(unknown_answer)"),
            },
            Ok(Ok(None)) => (false, "rejected:not_approved(timeout)"),
            Ok(Err(_)) => (false, "rejected:store_unavailable"),
        };
        info!(upstream = route.label, tool = %audit.target, outcome, "question settled");
        if outcome == "client_gone" {
            self.gate
                .audit_outcome(&audit, &route.upstream.name, outcome);
            return;
        }
        if !approved {
            self.gate
                .audit_outcome(&audit, &route.upstream.name, outcome);
            let refusal = crate::results::refused(
                &crate::results::Refusal {
                    status: "rejected",
                    code: "not_approved",
                    tool: &audit.target,
                    upstream: &route.upstream.name,
                    message: crate::results::rejection_message("not_approved", &audit.target),
                    rule: Some(&audit.rule),
                },
                true,
            );
            let _ = events
                .send(event(
                    &json!({"jsonrpc": "2.0", "id": call_id.to_value(), "result": refusal}),
                ))
                .await;
            return;
        }
        // Approved: forward the call and stream the upstream's answer on this same response.
        let upstream_request = upstream_request(
            &route.upstream,
            Method::POST,
            &headers,
            Bytes::from(Message::Request(call).to_vec()),
            &[],
        );
        let response = self
            .forward(
                route,
                "tools/call",
                upstream_request,
                Some(call_id.clone()),
                None,
                Some(audit),
            )
            .await;
        let is_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let status = response.status();
        let mut body = response.into_body();
        if is_stream {
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data()
                    && events.send(data).await.is_err()
                {
                    return;
                }
            }
            return;
        }
        let bytes = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let message = if status.is_success() && !bytes.is_empty() {
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            json!({"jsonrpc": "2.0", "id": call_id.to_value(),
                   "error": {"code": -32603, "message": format!("the upstream answered HTTP {status}")}})
            .to_string()
        };
        let mut out = Vec::new();
        SseEvent::message(&message).encode(&mut out);
        let _ = events.send(Bytes::from(out)).await;
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

/// One SSE `message` event, without an id: the gateway's events must never be mistaken for
/// the upstream's resumable ones.
fn event(message: &Value) -> Bytes {
    let mut out = Vec::new();
    SseEvent::message(&message.to_string()).encode(&mut out);
    Bytes::from(out)
}

/// The `initialize` params of a single initialize request, to learn the client's capabilities.
fn initialize_params(payload: &Payload) -> Option<serde_json::Map<String, Value>> {
    match payload {
        Payload::Single(Message::Request(r)) if r.method == "initialize" => r.params.clone(),
        _ => None,
    }
}

/// The gateway's own JSON-RPC answer to a request it did not forward.
fn answer(asked: &Asked, outcome: Result<Value, (i64, String, Value)>) -> Response<ResponseBody> {
    let body = match outcome {
        Ok(mut result) => {
            // 2026-07-28 results say whether they are complete.
            if let (true, Value::Object(map)) = (asked.stateless, &mut result) {
                map.entry("resultType")
                    .or_insert_with(|| Value::String("complete".into()));
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
