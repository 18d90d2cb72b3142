use std::task::{Context, Poll};

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::{Message, Payload};
use http::Request;
use tower::Service;
use tracing::Instrument;
use tracing::field::Empty;
use tracing::instrument::Instrumented;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::propagation;
use crate::client_limit::PeerAddr;
use crate::context::RequestContextExt;
use crate::parse::Parsed;

/// Runs each request in its span; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct RequestSpans<S> {
    pub(super) inner: S,
    pub(super) enabled: bool,
}

impl<S> Service<Request<Parsed>> for RequestSpans<S>
where
    S: Service<Request<Parsed>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Parsed>) -> Self::Future {
        if !self.enabled {
            // A disabled span: entering it is a branch on `None`, so tracing costs nothing.
            return self.inner.call(request).instrument(tracing::Span::none());
        }
        let span = request_span(&request);
        // Everything below runs in the span, the inner layers' `call` included, so their audit
        // lines and the upstream request find it as the current span.
        let future = span.in_scope(|| self.inner.call(request));
        future.instrument(span)
    }
}

/// The span of one request, its parent the client's trace context when it sent one.
fn request_span(request: &Request<Parsed>) -> tracing::Span {
    let message = match request.body() {
        Parsed::Message(post) => match &post.payload {
            Payload::Single(message) => Some(message),
            Payload::Batch(_) => None,
        },
        Parsed::NoBody => None,
    };
    let method = match (request.body(), message) {
        (_, Some(message)) => message.method().unwrap_or("response"),
        (Parsed::Message(_), None) => "batch",
        (Parsed::NoBody, None) => request.method().as_str(),
    };
    let params = message.and_then(Message::params);
    let target = |key: &str| params.and_then(|p| p.get(key)).and_then(|v| string(&v));
    let (tool, prompt, resource) = match method {
        "tools/call" => (target("name"), None, None),
        "prompts/get" => (None, target("name"), None),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            (None, None, target("uri"))
        }
        _ => (None, None, None),
    };
    // `{mcp.method.name} {target}`, the target the tool or prompt name (never the resource URI,
    // which is high-cardinality).
    let name = match tool.as_deref().or(prompt.as_deref()) {
        Some(target) => format!("{method} {target}"),
        None => method.to_owned(),
    };
    let span = tracing::info_span!(
        target: super::TARGET,
        "mcp.request",
        otel.name = name,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = method,
        mcp.session.id = Empty,
        mcp.protocol.version = Empty,
        mcp.resource.uri = Empty,
        jsonrpc.request.id = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        gen_ai.operation.name = Empty,
        error.type = Empty,
        network.transport = "tcp",
        network.protocol.name = "http",
        client.address = Empty,
        countersign.upstream = Empty,
        countersign.principal = Empty,
        countersign.risk = Empty,
        countersign.rule = Empty,
        countersign.action = Empty,
        countersign.channel = Empty,
        countersign.outcome = Empty,
    );
    if let Some(id) = message.and_then(Message::id) {
        span.record("jsonrpc.request.id", id.to_string().trim_matches('"'));
    }
    if let Some(tool) = &tool {
        span.record("gen_ai.tool.name", tool.as_str());
        span.record("gen_ai.operation.name", "execute_tool");
    }
    if let Some(prompt) = &prompt {
        span.record("gen_ai.prompt.name", prompt.as_str());
    }
    if let Some(resource) = &resource {
        span.record("mcp.resource.uri", resource.as_str());
    }
    if let Some(session) = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        span.record("mcp.session.id", session);
    }
    if let Parsed::Message(post) = request.body()
        && let Some(version) = post.version
    {
        span.record("mcp.protocol.version", version.as_str());
    }
    if let Some(PeerAddr(peer)) = request.extensions().peer() {
        span.record("client.address", peer.ip().to_string());
    }
    let meta = params.and_then(|p| p.get("_meta"));
    let parent = propagation::extract(request.headers(), meta.as_ref());
    let _ = span.set_parent(parent);
    span
}

fn string(value: &RawJson) -> Option<String> {
    value.as_str().map(|s| s.into_owned())
}
