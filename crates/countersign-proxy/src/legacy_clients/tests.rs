use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt};

use super::{AdaptedBody, LegacyClients, LegacyClientsLayer, LegacySettings, QUEUE_MESSAGES};
use crate::body::{BoxError, ResponseBody};
use crate::client_limit::{ClientLimitLayer, PeerAddr};
use crate::clock::SystemClock;
use crate::config::{ConnectionLimits, LegacyPaths};
use crate::context::RequestContextExt;
use crate::metrics::ProxyMetrics;
use crate::relay::QuietLimits;
use crate::route::{LegacyEndpoint, Route, RouteTarget};
use crate::testing::{MockHandle, json_response, received_nothing, unused_route};

type Body = Full<Bytes>;
type Handle = MockHandle<AdaptedBody<Body>>;

/// The tower-test mock with its errors mapped to `Infallible` by a service of its own: the
/// sessions' tasks are spawned, and a mapping function in their type trips the compiler's
/// higher-ranked `Send` check.
#[derive(Clone)]
struct Inner(tower_test::mock::Mock<Request<AdaptedBody<Body>>, Response<ResponseBody>>);

impl tower::Service<Request<AdaptedBody<Body>>> for Inner {
    type Response = Response<ResponseBody>;
    type Error = std::convert::Infallible;
    type Future =
        futures_util::future::BoxFuture<'static, Result<Response<ResponseBody>, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map(|ready| {
            ready.expect("the mock is ready");
            Ok(())
        })
    }

    fn call(&mut self, request: Request<AdaptedBody<Body>>) -> Self::Future {
        let answer = self.0.call(request);
        Box::pin(async move { Ok(answer.await.expect("the test answers every request")) })
    }
}

const KEEP_ALIVE: Duration = Duration::from_secs(15);
const IDLE: Duration = Duration::from_secs(60);

struct Gateway {
    service: LegacyClients<Inner>,
    handle: Handle,
    route: Route,
}

fn gateway(max_sessions: usize) -> Gateway {
    let connections = ConnectionLimits {
        max_requests_per_client: NonZeroUsize::new(100).expect("non-zero"),
        ..ConnectionLimits::default()
    };
    let layer = LegacyClientsLayer::new(LegacySettings {
        client_limit: ClientLimitLayer::new(&connections, ProxyMetrics::unregistered()),
        quiet: QuietLimits {
            keep_alive: KEEP_ALIVE,
            idle_timeout: IDLE,
        },
        max_sessions,
        max_message_bytes: 1 << 20,
        clock: Arc::new(SystemClock),
        metrics: ProxyMetrics::unregistered(),
    });
    let (inner, handle) = tower_test::mock::pair();
    let inner = Inner(inner);
    let plain = unused_route();
    let route = Route(Arc::new(RouteTarget {
        path: plain.path.clone(),
        upstream: plain.upstream.clone(),
        label: plain.label,
        client: plain.client.clone(),
        legacy: Some(LegacyPaths::new("/sse")),
    }));
    Gateway {
        service: layer.layer(inner),
        handle,
        route,
    }
}

impl Gateway {
    fn request(
        &self,
        method: Method,
        target: &str,
        endpoint: LegacyEndpoint,
        body: &str,
    ) -> Request<Body> {
        let mut request = Request::builder()
            .method(method)
            .uri(target)
            .header("host", "localhost:8080")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .expect("a valid request");
        let extensions = request.extensions_mut();
        extensions.insert(endpoint);
        let context = extensions.context_mut();
        context.route = Some(self.route.clone());
        context.peer = Some(PeerAddr("127.0.0.1:5000".parse().expect("an address")));
        request
    }

    /// Opens a session; returns its stream (the `endpoint` event read) and its messages URL.
    async fn open(&self) -> (ResponseBody, String) {
        let request = self.request(Method::GET, "/sse", LegacyEndpoint::Stream, "");
        let Ok(response) = self.service.clone().oneshot(request).await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut stream = response.into_body();
        let endpoint = text(next_frame(&mut stream).await.expect("the endpoint event"));
        let url = endpoint
            .strip_prefix("event: endpoint\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not an endpoint event: {endpoint:?}"))
            .to_owned();
        (stream, url)
    }

    /// POSTs `message` to `url` in a task of its own; its answer comes through the handle.
    fn post(&self, url: &str, message: &Value) -> tokio::task::JoinHandle<Response<ResponseBody>> {
        let request = self.request(
            Method::POST,
            url,
            LegacyEndpoint::Messages,
            &message.to_string(),
        );
        let service = self.service.clone();
        tokio::spawn(async move {
            let Ok(response) = service.oneshot(request).await;
            response
        })
    }

    /// The next request the stack below received, its body read as the parse layer reads it.
    async fn next_inner(
        &mut self,
    ) -> (
        Request<Bytes>,
        tower_test::mock::SendResponse<Response<ResponseBody>>,
    ) {
        let (request, reply) = self
            .handle
            .next_request()
            .await
            .expect("a request reaches the stack");
        let (parts, body) = request.into_parts();
        let bytes = body.collect().await.expect("a readable body").to_bytes();
        (Request::from_parts(parts, bytes), reply)
    }

    /// Initializes a session: answers `initialize` with session `s-1` and the `initialized`
    /// notification with 202, and the GET stream with `get`.
    async fn initialize(
        &mut self,
        url: &str,
        stream: &mut ResponseBody,
        get: Response<ResponseBody>,
    ) {
        let post = self.post(
            url,
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}),
        );
        let (request, reply) = self.next_inner().await;
        assert!(request.headers().get("mcp-session-id").is_none());
        let mut answer = json_response(&json!({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "serverInfo": {"name": "store"}}}));
        answer
            .headers_mut()
            .insert("mcp-session-id", HeaderValue::from_static("s-1"));
        reply.send_response(answer);
        assert_eq!(post.await.expect("the POST").status(), StatusCode::ACCEPTED);
        assert_eq!(next_message(stream).await["id"], 0);

        let post = self.post(
            url,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        let (request, reply) = self.next_inner().await;
        assert_eq!(request.headers()["mcp-session-id"], "s-1");
        assert_eq!(request.headers()["mcp-protocol-version"], "2025-03-26");
        reply.send_response(status(202));
        let (request, reply) = self.next_inner().await;
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.headers()["mcp-session-id"], "s-1");
        assert_eq!(request.headers()["accept"], "text/event-stream");
        // Everything else has gone as far as it can: the POST still waits for the stream.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !post.is_finished(),
            "the first message after initialize is answered once the GET stream is"
        );
        reply.send_response(get);
        assert_eq!(post.await.expect("the POST").status(), StatusCode::ACCEPTED);
    }
}

fn status(code: u16) -> Response<ResponseBody> {
    let mut response = Response::new(crate::body::empty());
    *response.status_mut() = StatusCode::from_u16(code).expect("a status");
    response
}

/// An event stream the test feeds through the returned sender, one event per chunk.
fn event_stream(capacity: usize) -> (Response<ResponseBody>, mpsc::Sender<Bytes>) {
    let (sender, mut chunks) = mpsc::channel::<Bytes>(capacity);
    let frames = futures_util::stream::poll_fn(move |cx| {
        chunks
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok::<_, BoxError>(http_body::Frame::data(c))))
    });
    let mut response = Response::new(ResponseBody::new(StreamBody::new(frames)));
    response.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    (response, sender)
}

fn event(message: &Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}

async fn next_frame(stream: &mut ResponseBody) -> Option<Bytes> {
    stream.frame().await.map(|frame| {
        frame
            .expect("no stream error")
            .into_data()
            .expect("a data frame")
    })
}

fn text(bytes: Bytes) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// The next `event: message` on the stream (keep-alive comments skipped), as JSON.
async fn next_message(stream: &mut ResponseBody) -> Value {
    loop {
        let frame = text(next_frame(stream).await.expect("the stream is open"));
        if frame.starts_with(':') {
            continue;
        }
        let data = frame
            .strip_prefix("event: message\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not a message event: {frame:?}"));
        return serde_json::from_str(data).expect("a JSON message");
    }
}

#[tokio::test(start_paused = true)]
async fn a_quiet_session_gets_keep_alives_and_ends_once_idle() {
    let mut g = gateway(10);
    let (mut stream, _) = g.open().await;

    let mut keep_alives = 0;
    while let Some(frame) = next_frame(&mut stream).await {
        assert_eq!(frame, ": keep-alive\n\n");
        keep_alives += 1;
    }
    assert_eq!(
        keep_alives, 3,
        "at 15 s, 30 s and 45 s; the stream ends at 60 s"
    );
    assert!(
        received_nothing(&mut g.handle),
        "nothing was sent for an idle session"
    );
}

#[tokio::test(start_paused = true)]
async fn sessions_past_the_cap_are_refused_until_one_ends() {
    let mut g = gateway(1);
    let (first, _) = g.open().await;

    let request = g.request(Method::GET, "/sse", LegacyEndpoint::Stream, "");
    let Ok(refused) = g.service.clone().oneshot(request).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "1");

    drop(first);
    g.open().await;
    assert!(received_nothing(&mut g.handle));
}

#[tokio::test(start_paused = true)]
async fn a_message_refused_before_its_body_is_read_gets_that_refusal_as_its_answer() {
    let mut g = gateway(10);
    let (_stream, url) = g.open().await;
    let post = g.post(&url, &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    let (_request, reply) = g.handle.next_request().await.expect("the message");
    reply.send_response(status(429));
    assert_eq!(
        post.await.expect("the POST").status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_read_then_refused_is_accepted_and_its_refusal_arrives_on_the_stream() {
    let mut g = gateway(10);
    let (mut stream, url) = g.open().await;
    let post = g.post(
        &url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
    );
    let (request, reply) = g.next_inner().await;
    assert_eq!(request.uri(), "/mcp");
    assert_eq!(
        request.headers()["accept"],
        "application/json, text/event-stream"
    );
    assert!(request.extensions().get::<LegacyEndpoint>().is_none());
    assert_eq!(post.await.expect("the POST").status(), StatusCode::ACCEPTED);

    let error =
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32029, "message": "rate limited"}});
    let mut refusal = json_response(&error);
    *refusal.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    reply.send_response(refusal);
    assert_eq!(next_message(&mut stream).await, error);
}

#[tokio::test(start_paused = true)]
async fn a_slow_client_holds_the_relay_back_instead_of_buffering() {
    let mut g = gateway(10);
    let (mut stream, url) = g.open().await;
    let post = g.post(
        &url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
    );
    let (_request, reply) = g.next_inner().await;
    let (answer, events) = event_stream(1);
    reply.send_response(answer);
    post.await.expect("the POST");

    let produced = Arc::new(AtomicUsize::new(0));
    let producer = {
        let produced = produced.clone();
        tokio::spawn(async move {
            for n in 0..200 {
                if events.send(event(&json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"n": n}}))).await.is_err() {
                    return;
                }
                produced.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    // Nobody reads the legacy stream: every task waits, and paused time moves on.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held_back = produced.load(Ordering::SeqCst);
    assert!(
        held_back <= QUEUE_MESSAGES + 3,
        "{held_back} events were taken from the upstream for a client that reads nothing"
    );
    for n in 0..200 {
        assert_eq!(next_message(&mut stream).await["params"]["n"], n);
    }
    producer.await.expect("the producer");
}

#[tokio::test(start_paused = true)]
async fn an_upstream_404_inside_the_session_ends_it() {
    let mut g = gateway(10);
    let (mut stream, url) = g.open().await;
    g.initialize(&url, &mut stream, status(405)).await;

    let post = g.post(&url, &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    let (_request, reply) = g.next_inner().await;
    reply.send_response(status(404));
    post.await.expect("the POST");
    assert_eq!(
        next_frame(&mut stream).await,
        None,
        "the stream ends with the session"
    );

    let Ok(after) = g
        .service
        .clone()
        .oneshot(g.request(Method::POST, &url, LegacyEndpoint::Messages, "{}"))
        .await;
    assert_eq!(after.status(), StatusCode::NOT_FOUND);
    // The upstream ended the session itself: no DELETE follows.
    tokio::time::sleep(IDLE).await;
    assert!(received_nothing(&mut g.handle));
}

#[tokio::test(start_paused = true)]
async fn the_upstream_stream_is_relayed_and_reopened_after_it_ends_but_not_after_405() {
    let mut g = gateway(10);
    let (mut stream, url) = g.open().await;
    let (get, events) = event_stream(4);
    g.initialize(&url, &mut stream, get).await;

    let notification = json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"});
    events
        .send(event(&notification))
        .await
        .expect("the stream is read");
    assert_eq!(next_message(&mut stream).await, notification);
    drop(events);

    let (request, reply) = g.next_inner().await;
    assert_eq!(
        request.method(),
        Method::GET,
        "the ended stream is reopened"
    );
    reply.send_response(status(405));
    tokio::time::sleep(IDLE / 2).await;
    assert!(
        received_nothing(&mut g.handle),
        "an upstream without GET streams is not asked again"
    );
}

#[tokio::test(start_paused = true)]
async fn closing_the_stream_deletes_the_upstream_session() {
    let mut g = gateway(10);
    let (mut stream, url) = g.open().await;
    g.initialize(&url, &mut stream, status(405)).await;
    drop(stream);

    let (request, reply) = g.next_inner().await;
    assert_eq!(request.method(), Method::DELETE);
    assert_eq!(request.headers()["mcp-session-id"], "s-1");
    reply.send_response(status(200));

    let Ok(after) = g
        .service
        .clone()
        .oneshot(g.request(Method::POST, &url, LegacyEndpoint::Messages, "{}"))
        .await;
    assert_eq!(after.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn requests_to_the_streamable_http_endpoint_pass_through_untouched() {
    let mut g = gateway(10);
    let mut request = g.request(Method::POST, "/mcp", LegacyEndpoint::Stream, "{}");
    request.extensions_mut().remove::<LegacyEndpoint>();
    let call = tokio::spawn(g.service.clone().oneshot(request));
    let (request, reply) = g.next_inner().await;
    assert_eq!(request.body().as_ref(), b"{}");
    assert!(
        request.headers().get("accept").is_none(),
        "nothing is added"
    );
    reply.send_response(status(202));
    let Ok(response) = call.await.expect("the call");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}
