use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Method, Request, StatusCode};
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};

use super::{ParseLayer, Parsed};
use crate::config::Limits;
use crate::context::RequestContextExt;
use crate::error::code;
use crate::metrics::ProxyMetrics;
use crate::testing::{
    PATH, body_json, call_answering, json_response, mock_inner, payload_json, received_nothing,
};

const MAX_BODY_BYTES: usize = 256;
const BODY_TIMEOUT: Duration = Duration::from_secs(2);

fn limits() -> Limits {
    Limits {
        max_body_bytes: NonZeroUsize::new(MAX_BODY_BYTES).expect("non-zero"),
        body_timeout: BODY_TIMEOUT,
        ..Limits::default()
    }
}

fn request(method: Method, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(PATH)
        .header("content-type", "application/json")
        .header("mcp-session-id", "session-1")
        .body(Full::new(body.into()))
        .expect("a valid request")
}

/// What the inner service saw of a request: its method, headers and body.
struct Seen {
    method: Method,
    session: Option<String>,
    body: Option<Value>,
}

fn seen(request: &Request<Parsed>) -> Seen {
    Seen {
        method: request.method().clone(),
        session: request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: match request.body() {
            Parsed::Message(post) => Some(payload_json(&post.payload)),
            Parsed::NoBody => None,
        },
    }
}

fn ok(_: &Request<Parsed>) -> http::Response<crate::body::ResponseBody> {
    json_response(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
}

#[tokio::test]
async fn a_post_body_reaches_the_inner_service_as_its_parsed_value() {
    let (inner, mut handle) = mock_inner();
    let service = ParseLayer::new(limits(), ProxyMetrics::unregistered()).layer(inner);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "create_order", "arguments": {"qty": 2, "note": "é"}}});
    // Spacing the client chose is not part of the value.
    let sent = format!("  {}\n", serde_json::to_string_pretty(&body).expect("json"));

    let (response, received) =
        call_answering(service, request(Method::POST, sent), &mut handle, ok).await;

    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the inner answer is relayed"
    );
    let [request] = received.as_slice() else {
        panic!("expected one request inside, got {}", received.len());
    };
    let Parsed::Message(post) = request.body() else {
        panic!("a POST must reach the inner service as a parsed message");
    };
    assert_eq!(payload_json(&post.payload), body);
    assert_eq!(post.request_id().map(|id| id.to_value()), Some(json!(7)));
    let seen = seen(request);
    assert_eq!(seen.method, Method::POST);
    assert_eq!(
        seen.session.as_deref(),
        Some("session-1"),
        "headers pass on"
    );
}

#[tokio::test]
async fn a_body_in_any_number_of_frames_reaches_the_inner_service_whole() {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "create_order", "arguments": {"qty": 2}}});
    let text = Bytes::from(serde_json::to_vec(&body).expect("json"));
    let at = |cuts: &[usize]| {
        let mut frames = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&text.len()]) {
            frames.push(Ok::<_, Infallible>(Frame::data(text.slice(from..cut))));
            from = cut;
        }
        frames
    };
    // One frame (alone, after empty ones, before an empty one); two; many, with empty ones
    // first, between and last. And whether the parsed value keeps the one frame's bytes.
    for (frames, kept_in_place) in [
        (at(&[]), true),
        (at(&[0, 0]), true),
        (at(&[text.len()]), true),
        (at(&[9]), false),
        (at(&[0, 0, 1, 20, 20, 40, text.len()]), false),
    ] {
        let count = frames.len();
        let (inner, mut handle) = mock_inner();
        let service = ParseLayer::new(limits(), ProxyMetrics::unregistered()).layer(inner);
        let request = Request::post(PATH)
            .header("content-type", "application/json")
            .body(StreamBody::new(futures_util::stream::iter(frames)))
            .expect("a valid request");
        let (response, received) = call_answering(service, request, &mut handle, ok).await;
        assert_eq!(response.status(), StatusCode::OK, "{count} frames");
        let [request] = received.as_slice() else {
            panic!("expected one request inside, got {}", received.len());
        };
        assert_eq!(seen(request).body, Some(body.clone()), "{count} frames");
        let Parsed::Message(post) = request.body() else {
            panic!("a POST must reach the inner service as a parsed message");
        };
        let params = post.payload.messages()[0].params().expect("params");
        let sent = text.as_ptr_range();
        assert_eq!(
            sent.contains(&params.as_bytes().as_ptr()),
            kept_in_place,
            "{count} frames: the parsed value's bytes are the frame's"
        );
    }
}

#[tokio::test]
async fn get_and_delete_reach_the_inner_service_without_a_body() {
    for method in [Method::GET, Method::DELETE] {
        let (inner, mut handle) = mock_inner();
        let service = ParseLayer::new(limits(), ProxyMetrics::unregistered()).layer(inner);
        // Whatever a client sends with them is dropped unread, even something that is not JSON.
        let request = request(method.clone(), "not json at all");

        let (response, received) = call_answering(service, request, &mut handle, ok).await;

        assert_eq!(response.status(), StatusCode::OK);
        let [request] = received.as_slice() else {
            panic!(
                "{method}: expected one request inside, got {}",
                received.len()
            );
        };
        let seen = seen(request);
        assert_eq!(seen.method, method);
        assert!(seen.body.is_none(), "{method} must become Parsed::NoBody");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_413_and_never_reaches_the_inner_service() {
    let (inner, mut handle) = mock_inner();
    let service = ParseLayer::new(limits(), ProxyMetrics::unregistered()).layer(inner);
    let padding = "x".repeat(MAX_BODY_BYTES);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": padding}});

    let (response, received) = call_answering(
        service,
        request(Method::POST, body.to_string()),
        &mut handle,
        ok,
    )
    .await;

    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        response.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..]),
        "the rest of a refused body may still be on the wire"
    );
    assert!(received.is_empty() && received_nothing(&mut handle));
}

#[tokio::test]
async fn duplicate_keys_are_a_parse_error_and_never_reach_the_inner_service() {
    let (inner, mut handle) = mock_inner();
    let service = ParseLayer::new(limits(), ProxyMetrics::unregistered()).layer(inner);
    // Which `name` would run depends on who reads it: refused, not resolved.
    let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_products","name":"delete_all"}}"#;

    let (response, received) =
        call_answering(service, request(Method::POST, body), &mut handle, ok).await;

    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let answer = body_json(response).await;
    assert_eq!(answer["error"]["code"], json!(code::PARSE_ERROR));
    assert_eq!(answer["id"], Value::Null, "an unparsed body has no id");
    assert!(received.is_empty() && received_nothing(&mut handle));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_finishes_is_answered_408_at_the_body_deadline() {
    let (inner, mut handle) = mock_inner();
    let mut service = ParseLayer::new(limits(), ProxyMetrics::unregistered()).layer(inner);
    // A client that sent its headers and then nothing more.
    type Never = StreamBody<futures_util::stream::Pending<Result<Frame<Bytes>, Infallible>>>;
    let request: Request<Never> = Request::post(PATH)
        .header("content-type", "application/json")
        .body(StreamBody::new(futures_util::stream::pending()))
        .expect("a valid request");

    let ready = ServiceExt::<Request<Never>>::ready(&mut service).await;
    let response = ready.expect("ready").call(request);
    tokio::pin!(response);
    assert!(
        response.as_mut().now_or_never().is_none(),
        "the read starts"
    );
    tokio::time::advance(BODY_TIMEOUT - Duration::from_millis(1)).await;
    assert!(
        response.as_mut().now_or_never().is_none(),
        "still waiting just before the deadline"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    let Some(Ok(response)) = response.as_mut().now_or_never() else {
        panic!("no answer at the deadline");
    };

    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(
        body_json(response).await["error"]["code"],
        json!(code::TRANSPORT)
    );
    assert!(received_nothing(&mut handle));
}

const BUDGET: usize = 300;

fn budgeted() -> Limits {
    Limits {
        max_in_flight_body_bytes: NonZeroUsize::new(BUDGET).expect("non-zero"),
        ..limits()
    }
}

/// A `ping` padded to exactly `length` bytes, as `Content-Length` declares it.
fn ping_of(length: usize) -> String {
    let bare =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": ""}}).to_string();
    let padded = json!({"jsonrpc": "2.0", "id": 1, "method": "ping",
                        "params": {"pad": "x".repeat(length - bare.len())}});
    padded.to_string()
}

fn declared(body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    let body = body.into();
    Request::post(PATH)
        .header("content-type", "application/json")
        .header("content-length", body.len().to_string())
        .body(Full::new(body))
        .expect("a valid request")
}

/// Calls `service` once it is ready, returning the response future unpolled.
async fn started<S, R>(service: &mut S, request: R) -> S::Future
where
    S: tower::Service<R, Error = Infallible>,
{
    let Ok(()) = std::future::poll_fn(|cx| service.poll_ready(cx)).await;
    service.call(request)
}

/// A request body fed by the test, chunk by chunk, that knows its declared length as the
/// server's bodies do (an exact size hint) and counts how often it was read.
struct TrickledBody {
    frames: StreamBody<futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>>,
    length: u64,
    reads: Arc<AtomicUsize>,
}

impl http_body::Body for TrickledBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Pin::new(&mut self.frames).poll_frame(cx)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.length)
    }
}

/// A body of declared `length` whose bytes the test sends through the returned channel.
fn trickled(length: usize) -> (tokio::sync::mpsc::Sender<Bytes>, Request<TrickledBody>) {
    let (sender, request, _) = trickled_counting_reads(length);
    (sender, request)
}

/// [`trickled`], and how often the service read its body.
fn trickled_counting_reads(
    length: usize,
) -> (
    tokio::sync::mpsc::Sender<Bytes>,
    Request<TrickledBody>,
    Arc<AtomicUsize>,
) {
    use futures_util::StreamExt;
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    let frames = futures_util::stream::poll_fn(move |cx| {
        receiver
            .poll_recv(cx)
            .map(|chunk| chunk.map(|data| Ok(Frame::data(data))))
    });
    let reads = Arc::new(AtomicUsize::new(0));
    let body = TrickledBody {
        frames: StreamBody::new(frames.boxed()),
        length: length as u64,
        reads: reads.clone(),
    };
    let request = Request::post(PATH)
        .header("content-type", "application/json")
        .header("content-length", length.to_string())
        .body(body)
        .expect("a valid request");
    (sender, request, reads)
}

#[tokio::test]
async fn a_body_the_in_flight_budget_cannot_hold_is_refused_with_503_unread() {
    let (inner, mut handle) = mock_inner();
    let mut service = ParseLayer::new(budgeted(), ProxyMetrics::unregistered()).layer(inner);
    // A client that declared 200 bytes and has sent 190 of them.
    let body = ping_of(200);
    let (sender, slow) = trickled(body.len());
    let mut slow = started(&mut service, slow).await;
    sender
        .send(Bytes::copy_from_slice(&body.as_bytes()[..190]))
        .await
        .expect("the body is read");
    assert!(
        (&mut slow).now_or_never().is_none(),
        "the slow body is being read"
    );

    // The next client declares 200 bytes and has sent them all.
    let (next_sender, next, reads) = trickled_counting_reads(body.len());
    next_sender
        .send(Bytes::from(body.clone()))
        .await
        .expect("the channel has room");
    let refused = started(&mut service, next).await.await.expect("infallible");

    assert_eq!(
        refused.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "not 413: the body was fine"
    );
    assert_eq!(
        reads.load(Ordering::Relaxed),
        0,
        "refused from its declared length, before a byte of it was read"
    );
    assert_eq!(
        refused.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let answer = body_json(refused).await;
    assert_eq!(answer["error"]["code"], json!(code::TRANSPORT));
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in-flight body budget")),
        "{answer}"
    );
    assert!(received_nothing(&mut handle));

    // The slow client gives up: its bytes go back to the budget.
    drop(slow);
    let (response, received) =
        call_answering(service, declared(ping_of(200)), &mut handle, ok).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(received.len(), 1);
}

#[tokio::test]
async fn a_body_that_outgrows_what_is_left_while_it_is_read_is_refused() {
    let (inner, mut handle) = mock_inner();
    let mut service = ParseLayer::new(budgeted(), ProxyMetrics::unregistered()).layer(inner);
    // Both fit when they start; the first one's bytes arrive first.
    let body = ping_of(200);
    let (first_sender, first) = trickled(body.len());
    let (second_sender, second) = trickled(body.len());
    let mut first = started(&mut service, first).await;
    let mut second = started(&mut service, second).await;
    assert!((&mut first).now_or_never().is_none());
    assert!((&mut second).now_or_never().is_none());
    first_sender
        .send(Bytes::copy_from_slice(&body.as_bytes()[..190]))
        .await
        .expect("the body is read");
    assert!((&mut first).now_or_never().is_none());

    second_sender
        .send(Bytes::copy_from_slice(body.as_bytes()))
        .await
        .expect("the body is read");
    let Some(Ok(refused)) = (&mut second).now_or_never() else {
        panic!("the second body is refused as soon as it does not fit");
    };

    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        refused.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..]),
        "the rest of the body may still be on the wire"
    );
    assert!(received_nothing(&mut handle));
}

#[tokio::test]
async fn a_declared_body_holds_no_budget_until_its_bytes_arrive() {
    let (inner, mut handle) = mock_inner();
    let mut service = ParseLayer::new(budgeted(), ProxyMetrics::unregistered()).layer(inner);
    // A client that declares the largest body and sends nothing blocks nobody.
    let (_sender, idle) = trickled(MAX_BODY_BYTES);
    let mut idle = started(&mut service, idle).await;
    assert!((&mut idle).now_or_never().is_none());

    let (response, received) =
        call_answering(service, declared(ping_of(200)), &mut handle, ok).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(received.len(), 1);
}

#[tokio::test]
async fn a_parsed_request_keeps_its_body_counted_until_it_is_dropped() {
    let (inner, mut handle) = mock_inner();
    let mut service = ParseLayer::new(budgeted(), ProxyMetrics::unregistered()).layer(inner);
    let ready = ServiceExt::<Request<Full<Bytes>>>::ready(&mut service).await;
    let first = tokio::spawn(ready.expect("ready").call(declared(ping_of(200))));
    // Below parse, the request waits (as a held call waits for a person) with its body parsed.
    let (held, reply) = handle
        .next_request()
        .await
        .expect("the first request is parsed");
    assert!(
        held.extensions()
            .context()
            .is_some_and(|c| c.held_body.is_some())
    );

    let ready = ServiceExt::<Request<Full<Bytes>>>::ready(&mut service).await;
    let refused = ready
        .expect("ready")
        .call(declared(ping_of(200)))
        .await
        .expect("infallible");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);

    drop(held);
    reply.send_response(ok_response());
    first
        .await
        .expect("the first request ends")
        .expect("infallible");
    let (response, _) = call_answering(service, declared(ping_of(200)), &mut handle, ok).await;
    assert_eq!(response.status(), StatusCode::OK, "the budget came back");
}

fn ok_response() -> http::Response<crate::body::ResponseBody> {
    json_response(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
}
