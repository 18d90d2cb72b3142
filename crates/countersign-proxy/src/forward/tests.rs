use std::sync::Arc;
use std::time::Duration;

use countersign_jsonrpc::message::Payload;
use countersign_testkit::RecordingUpstream;
use futures_util::FutureExt;
use http::{Request, StatusCode};
use serde_json::json;
use tower::{Service, ServiceExt};

use super::Forwarder;
use crate::approval::Cleared;
use crate::audit::ForwardOutcome;
use crate::clock::SystemClock;
use crate::context::RequestContextExt;
use crate::error::code;
use crate::metrics::ProxyMetrics;
use crate::relay::{QuietLimits, StreamSettings};
use crate::route::Route;
use crate::testing::{MAX_EVENT_BYTES, NoEdits, PATH, body_json, route, unreachable_url};

fn forwarder() -> Forwarder {
    Forwarder::new(
        Arc::new(NoEdits),
        ProxyMetrics::unregistered(),
        StreamSettings {
            max_event_bytes: MAX_EVENT_BYTES,
            quiet: QuietLimits {
                keep_alive: Duration::from_secs(15),
                idle_timeout: Duration::from_secs(3600),
            },
            clock: Arc::new(SystemClock),
        },
    )
}

/// A cleared `tools/call` whose number keeps the client's spelling (`1.50`).
fn cleared_call() -> Cleared {
    let text = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"create_order","arguments":{"sku":"A-1","price":1.50}}}"#;
    Cleared::for_tests(Payload::parse(text).expect("a valid payload"))
}

fn request(route: Route, cleared: Cleared) -> Request<Cleared> {
    let mut request = Request::post(PATH)
        .header("host", "gateway.example:8443")
        .header("content-type", "application/json")
        .header("content-length", "999")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "for the next hop only")
        .header("keep-alive", "timeout=5")
        .header("te", "trailers")
        .header("origin", "http://localhost:3000")
        .header("authorization", "Bearer client-token")
        .header("mcp-session-id", "session-1")
        .body(cleared)
        .expect("a valid request");
    request.extensions_mut().context_mut().route = Some(route);
    request
}

#[tokio::test]
async fn the_upstream_receives_exactly_the_cleared_bytes_with_framing_rebuilt() {
    let upstream = RecordingUpstream::start().await;
    let cleared = cleared_call();
    let expected = cleared.to_bytes();

    let (response, outcome) = forwarder()
        .oneshot(request(route(&upstream.url()), cleared))
        .await
        .expect("infallible");

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(outcome, ForwardOutcome("forwarded"));
    assert_eq!(
        body_json(response).await,
        json!({"jsonrpc": "2.0", "id": 5, "result": {}})
    );
    let requests = upstream.requests();
    let [received] = requests.as_slice() else {
        panic!("expected one request upstream, got {requests:?}");
    };
    assert_eq!(received.target, "/mcp");
    assert_eq!(received.body, expected, "exactly Cleared::to_bytes()");
    assert!(
        std::str::from_utf8(&received.body)
            .expect("utf-8")
            .contains(r#""price":1.50"#),
        "the number is sent as the client wrote it"
    );
    assert_eq!(
        received.header("host"),
        Some(upstream.addr().to_string().as_str())
    );
    assert_eq!(
        received.header("content-length"),
        Some(expected.len().to_string().as_str())
    );
    for dropped in ["x-hop", "keep-alive", "te", "origin"] {
        assert_eq!(
            received.header(dropped),
            None,
            "{dropped} was copied upstream"
        );
    }
    assert!(
        received
            .headers
            .get_all("connection")
            .iter()
            .all(|v| !v.to_str().unwrap_or_default().contains("x-hop")),
        "the client's Connection header was copied"
    );
    assert_eq!(
        received.header("authorization"),
        Some("Bearer client-token")
    );
    assert_eq!(received.header("mcp-session-id"), Some("session-1"));
}

#[tokio::test]
async fn an_unreachable_upstream_is_answered_502_with_the_call_id() {
    let (response, outcome) = forwarder()
        .oneshot(request(route(&unreachable_url()), cleared_call()))
        .await
        .expect("infallible");

    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(outcome, ForwardOutcome("upstream_error"));
    let answer = body_json(response).await;
    assert_eq!(answer["id"], json!(5));
    assert_eq!(answer["error"]["code"], json!(code::INTERNAL_ERROR));
}

/// A request is not sent upstream in the poll that brought it to the forwarder: the worker's
/// other ready requests get to the same point first, and the upstream is woken once for them all
/// rather than once per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_goes_upstream_only_after_the_worker_ran_its_other_ready_work() {
    let upstream = RecordingUpstream::start().await;
    let route = route(&upstream.url());
    let mut forwarder = forwarder();
    // The first call leaves an open connection in the pool, ready for writing: the second call
    // could be written in its first poll.
    let (first, _) = forwarder
        .call(request(route.clone(), cleared_call()))
        .await
        .expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
    // Read to its end, the answer gives its connection back to the pool.
    body_json(first).await;

    let mut second = std::pin::pin!(forwarder.call(request(route, cleared_call())));
    let answered_in_first_poll = second.as_mut().now_or_never().is_some();
    // The upstream runs on another worker thread: whatever the first poll wrote, it records.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        (answered_in_first_poll, upstream.requests().len()),
        (false, 1),
        "the second request was sent in the poll that brought it to the forwarder"
    );

    let (response, _) = second.await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(upstream.requests().len(), 2);
}
