//! Helpers for the layers' unit tests: the proxy-internal values a layer expects to find on a
//! request (its route, its parsed body, its caller), the settings the layers are built with, a
//! mock inner service, and an audit sink whose lines a test can read back. Built for
//! `cargo test` only.

use std::convert::Infallible;
use std::io::Write;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use countersign_jsonrpc::message::Payload;
use countersign_policy::{Policy, Principal};
use countersign_store::{LocalPins, MemoryAnswerHandover, MemoryReplayStore};
use countersign_token::Keyring;
use http::uri::Scheme;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::util::MapErr;
use tower::{Service, ServiceExt};
use tower_test::mock;

use crate::approval::{ApprovalSettings, QuestionCaps};
use crate::audit::AuditSink;
use crate::body::{BoxError, ResponseBody};
use crate::catalog::CatalogSync;
use crate::classify::ClassifyLayer;
use crate::clock::{Clock, SystemClock};
use crate::config::{TlsSettings, Transport, Upstream, UpstreamAuth};
use crate::context::RequestContextExt;
use crate::identity::Caller;
use crate::limits::RateLimits;
use crate::metrics::ProxyMetrics;
use crate::parse::{Parsed, inspect_post};
use crate::relay::{Observer, WatchResponses};
use crate::route::{Route, RouteTarget};
use crate::state::{CatalogState, PolicyHandle, SessionBook};
use crate::upstream::UpstreamClient;

/// The upstream every test route forwards to, as policy rules and metrics name it.
pub(crate) const UPSTREAM: &str = "store";
/// The gateway path of every test route.
pub(crate) const PATH: &str = "/mcp";
/// Largest SSE event the test layers accept.
pub(crate) const MAX_EVENT_BYTES: usize = 1 << 20;

/// The route `PATH` → the upstream at `url` (`http://host:port/path`).
pub(crate) fn route(url: &str) -> Route {
    route_with_response_timeout(url, Duration::from_secs(10))
}

/// [`route`] with the upstream's `response_timeout` set to `response_timeout`.
pub(crate) fn route_with_response_timeout(url: &str, response_timeout: Duration) -> Route {
    let url: Uri = url.parse().expect("a valid upstream URL");
    let upstream = Upstream {
        name: UPSTREAM.to_owned(),
        transport: Transport::StreamableHttp,
        tls: TlsSettings::default(),
        scheme: url.scheme().cloned().unwrap_or(Scheme::HTTP),
        authority: url.authority().cloned().expect("the URL has a host"),
        url,
        auth: UpstreamAuth::Forward,
        connect_timeout: Duration::from_secs(5),
        response_timeout,
        max_response_bytes: NonZeroUsize::new(1 << 20).expect("non-zero"),
    };
    Route(Arc::new(RouteTarget {
        path: PATH.to_owned(),
        client: UpstreamClient::new(&upstream),
        upstream,
        label: UPSTREAM,
        legacy: None,
    }))
}

/// A loopback URL nothing listens on: an ephemeral port bound and released at once, so a
/// connection to it is refused.
pub(crate) fn unreachable_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    format!("http://{addr}{PATH}")
}

/// A route for tests in which nothing may reach the upstream: if something does, it is refused
/// and the test sees an upstream error.
pub(crate) fn unused_route() -> Route {
    route(&unreachable_url())
}

pub(crate) fn principal(id: &str) -> Principal {
    Principal {
        id: id.to_owned(),
        groups: Vec::new(),
        claims: Default::default(),
    }
}

/// A POST as the parse layer hands it on: `body` through the one strict parse, with `route`
/// and the caller (`None`: the identity header was missing) in its context. Panics if the
/// parse refuses the body.
pub(crate) fn parsed_post(
    route: &Route,
    caller: Option<&str>,
    headers: &[(&str, &str)],
    body: &Value,
) -> Request<Parsed> {
    parsed_post_text(route, caller, headers, &body.to_string())
}

/// [`parsed_post`] of a body given as its exact text, as a client may write it (whitespace,
/// escapes, numbers as written).
pub(crate) fn parsed_post_text(
    route: &Route,
    caller: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Request<Parsed> {
    let mut request = Request::post(PATH);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(()).expect("a valid request");
    let bytes = Bytes::copy_from_slice(body.as_bytes());
    let inspected = inspect_post(request.headers(), bytes, 64)
        .unwrap_or_else(|(error, _)| panic!("the test body is refused by the parse: {error}"));
    let mut request = request.map(|()| Parsed::Message(inspected));
    let context = request.extensions_mut().context_mut();
    context.route = Some(route.clone());
    context.caller = Some(Caller(caller.map(principal)));
    request
}

/// A tool definition as an upstream lists it: read-only, or an additive write.
pub(crate) fn tool(name: &str, read_only: bool) -> Value {
    json!({"name": name, "description": format!("the {name} tool"),
           "inputSchema": {"type": "object"},
           "annotations": {"readOnlyHint": read_only, "destructiveHint": false}})
}

/// A catalog that already pinned `tools` of [`UPSTREAM`] from a listing made just now.
pub(crate) fn pinned_catalog(tools: &[Value]) -> Arc<CatalogState> {
    let state = Arc::new(CatalogState::default());
    state.observe(UPSTREAM, tools);
    state.mark_listed(UPSTREAM, SystemClock.now());
    state
}

pub(crate) fn catalog_sync(state: Arc<CatalogState>) -> CatalogSync {
    CatalogSync {
        state,
        pins: Arc::new(LocalPins),
        clock: Arc::new(SystemClock),
        max_event_bytes: MAX_EVENT_BYTES,
    }
}

/// The policy of a YAML text (`version: 1` is added).
pub(crate) fn policy(rules_yaml: &str) -> Policy {
    Policy::from_yaml(&format!("version: 1\n{rules_yaml}")).expect("a valid test policy")
}

pub(crate) fn classify_layer(policy: Policy, catalog: Arc<CatalogState>) -> ClassifyLayer {
    ClassifyLayer::new(
        Arc::new(PolicyHandle::new(policy)),
        catalog_sync(catalog),
        ProxyMetrics::unregistered(),
    )
}

/// Confirmation leeway of [`approval_settings`], seconds.
pub(crate) const LEEWAY_SECS: u64 = 5;
/// How long [`approval_settings`] waits for a person's answer; shorter than the keep-alive
/// interval, so a waiting question stream stays silent until it ends.
pub(crate) const ELICITATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Approval settings with a fresh signing key, in-memory replay store and hand-over, no audit
/// trail and the given clock.
pub(crate) fn approval_settings(clock: Arc<dyn Clock>) -> ApprovalSettings {
    ApprovalSettings {
        issuer: "test-gateway".to_owned(),
        keyring: Arc::new(Keyring::generate()),
        store: Arc::new(MemoryReplayStore::new(1024)),
        handover: Arc::new(MemoryAnswerHandover::new(64)),
        elicitation_timeout: ELICITATION_TIMEOUT,
        audit: AuditSink::disabled(),
        leeway_secs: LEEWAY_SECS,
        metrics: ProxyMetrics::unregistered(),
        clock,
        sessions: Arc::new(SessionBook::default()),
        max_event_bytes: MAX_EVENT_BYTES,
        question_caps: QuestionCaps::default(),
        rate_limits: Arc::new(RateLimits::off()),
        out_of_band: None,
    }
}

/// Watches no response: the forwarder relays upstream answers unedited.
#[derive(Debug)]
pub(crate) struct NoEdits;

impl WatchResponses for NoEdits {
    fn watch(
        self: Arc<Self>,
        _route: &RouteTarget,
        _request: &http::request::Parts,
        _payload: Option<&Payload>,
    ) -> Option<Observer> {
        None
    }
}

/// An audit sink whose lines the test reads back with [`AuditLines::collect`].
pub(crate) fn recording_audit() -> (AuditSink, AuditLines) {
    let (sender, receiver) = mpsc::channel();
    (
        AuditSink::new(Box::new(ChannelWriter(sender)), false),
        AuditLines(receiver),
    )
}

struct ChannelWriter(mpsc::Sender<Vec<u8>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::other("the test stopped reading audit lines"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a [`recording_audit`] sink wrote.
#[derive(Debug)]
pub(crate) struct AuditLines(mpsc::Receiver<Vec<u8>>);

impl AuditLines {
    /// Every line written, once every clone of the sink is dropped (which ends its writer
    /// thread): call it after dropping the services that hold the sink.
    pub(crate) fn collect(self) -> Vec<Value> {
        let mut text = Vec::new();
        loop {
            match self.0.recv_timeout(Duration::from_secs(10)) {
                Ok(bytes) => text.extend_from_slice(&bytes),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the audit writer did not stop: is a clone of the sink still alive?")
                }
            }
        }
        String::from_utf8(text)
            .expect("audit lines are UTF-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("each audit line is JSON"))
            .collect()
    }
}

/// A mock inner service (tower-test) that records each request it gets until the test answers
/// it through the [`MockHandle`]. Its errors are mapped to `Infallible`, as the layers require:
/// the handle never sends one.
pub(crate) type MockInner<B> =
    MapErr<mock::Mock<Request<B>, Response<ResponseBody>>, fn(BoxError) -> Infallible>;
pub(crate) type MockHandle<B> = mock::Handle<Request<B>, Response<ResponseBody>>;

pub(crate) fn mock_inner<B>() -> (MockInner<B>, MockHandle<B>) {
    let (service, handle) = mock::pair();
    let unexpected: fn(BoxError) -> Infallible =
        |error| panic!("the mock inner service failed: {error}");
    (service.map_err(unexpected), handle)
}

/// Calls `service` with `request`, answering every request that reaches the mock with
/// `answer`, and returns the client's response with everything the mock received, in order.
pub(crate) async fn call_answering<S, R, B>(
    service: S,
    request: R,
    handle: &mut MockHandle<B>,
    answer: impl Fn(&Request<B>) -> Response<ResponseBody>,
) -> (Response<ResponseBody>, Vec<Request<B>>)
where
    S: Service<R, Response = Response<ResponseBody>, Error = Infallible>,
{
    let response = service.oneshot(request);
    tokio::pin!(response);
    let mut received = Vec::new();
    loop {
        tokio::select! {
            biased;
            Some((request, reply)) = handle.next_request() => {
                reply.send_response(answer(&request));
                received.push(request);
            }
            response = &mut response => {
                let Ok(response) = response;
                return (response, received);
            }
        }
    }
}

/// Whether the mock has received nothing (so far, or ever once every mock clone is gone).
pub(crate) fn received_nothing<B>(handle: &mut MockHandle<B>) -> bool {
    matches!(
        handle.poll_request(),
        std::task::Poll::Pending | std::task::Poll::Ready(None)
    )
}

/// A JSON response, as an upstream would answer.
pub(crate) fn json_response(body: &Value) -> Response<ResponseBody> {
    let mut response = Response::new(crate::body::full(Bytes::from(body.to_string())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The upstream's result for a request: `{"ran": <tool>}` under the request's id.
pub(crate) fn ran(request: &Request<crate::approval::Cleared>) -> Response<ResponseBody> {
    let message = request
        .body()
        .payload()
        .and_then(|payload| payload.messages().first())
        .expect("a forwarded message");
    let id = message.id().map_or(Value::Null, |id| id.to_value());
    let tool = message
        .params()
        .and_then(|p| p.get("name"))
        .map_or(Value::Null, |name| name.to_value());
    json_response(&json!({"jsonrpc": "2.0", "id": id, "result": {"ran": tool}}))
}

/// The body of a response, read to the end.
pub(crate) async fn body_bytes(response: Response<ResponseBody>) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("the response body can be read")
        .to_bytes()
}

/// The body of a response as JSON.
pub(crate) async fn body_json(response: Response<ResponseBody>) -> Value {
    let bytes = body_bytes(response).await;
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "body is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// A payload as JSON, as it would be serialized upstream.
pub(crate) fn payload_json(payload: &Payload) -> Value {
    serde_json::from_slice(&payload.to_vec()).expect("a payload serializes to JSON")
}
