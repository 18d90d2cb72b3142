//! JSON (non-SSE) bodies: streamed when no observer needs them, within the upstream's size and
//! time bounds. Each test reads what a client receives over HTTP/1.1 from the gateway's
//! response, framing included, since a cut body must not look complete.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::super::{
    BodyBounds, JsonRelay, MessageObserver, Observer, PendingAnswers, QuietLimits, StreamSettings,
    relay,
};
use crate::body::ResponseBody;
use crate::clock::{Clock, SystemClock};
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;
use crate::testing::{PATH, route};
use crate::upstream::Forwarded;

/// The test route's `max_response_bytes`.
const LIMIT: usize = 1 << 20;

/// What a fake upstream does on its one connection, in order, after reading the request.
enum Step {
    Write(Vec<u8>),
    /// Waits until the test says so (or gives up on the test).
    Wait(oneshot::Receiver<()>),
}

/// An upstream that serves one connection by `steps`, then closes it; returns its URL.
async fn scripted_upstream(steps: Vec<Step>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut request = Vec::new();
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut buf = [0; 4096];
            let n = socket.read(&mut buf).await.expect("read the request");
            assert!(n > 0, "the gateway closed before sending its request");
            request.extend_from_slice(&buf[..n]);
        }
        for step in steps {
            match step {
                // The gateway may close early (a cut body): later writes may then fail.
                Step::Write(bytes) => {
                    if socket.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Step::Wait(go) => {
                    let _ = go.await;
                }
            }
        }
    });
    format!("http://{addr}{PATH}")
}

fn head(declared_length: Option<usize>) -> Vec<u8> {
    let framing = match declared_length {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{framing}\r\n\r\n").into_bytes()
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

fn settings() -> StreamSettings {
    StreamSettings {
        max_event_bytes: 1 << 20,
        quiet: QuietLimits {
            keep_alive: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
        },
        clock: Arc::new(SystemClock),
    }
}

/// Relays one `tools/call` to the upstream at `url` (limit [`LIMIT`], `response_timeout` 10 s).
async fn relay_call(
    url: &str,
    observer: Option<Observer>,
) -> Result<Response<ResponseBody>, ProxyError> {
    let route = route(url);
    let headers = HeaderMap::new();
    let request = Forwarded {
        method: Method::POST,
        client_headers: &headers,
        body: Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#),
        extra: &[],
    };
    relay(
        &route,
        request,
        &ProxyMetrics::unregistered(),
        &settings(),
        observer,
        PendingAnswers::new(Vec::new()),
    )
    .await
}

/// What a client reading one response over HTTP/1.1 got.
#[derive(Debug)]
struct Received {
    status: u16,
    content_length: Option<usize>,
    body: Vec<u8>,
    /// The body's framing ended properly (all of its Content-Length, or the final chunk).
    complete: bool,
}

/// Serves `response` to a client over an in-memory HTTP/1.1 connection and reads it raw.
async fn client_receives(response: Response<ResponseBody>) -> Received {
    client_receives_signalling(response, None).await
}

/// [`client_receives`], firing `signal.1` once the client has read the head and `signal.0`
/// bytes after it.
async fn client_receives_signalling(
    response: Response<ResponseBody>,
    mut signal: Option<(usize, oneshot::Sender<()>)>,
) -> Received {
    let (client, server) = tokio::io::duplex(1 << 16);
    let response = Mutex::new(Some(response));
    let service = hyper::service::service_fn(move |_request| {
        let response = response.lock().expect("lock").take().expect("one request");
        async move { Ok::<_, Infallible>(response) }
    });
    let serving = tokio::spawn(
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(server), service),
    );
    let (mut read, mut write) = tokio::io::split(client);
    write
        .write_all(b"GET /mcp HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
        .await
        .expect("write the request");
    let mut raw = Vec::new();
    loop {
        let mut buf = [0; 16 * 1024];
        let n = read.read(&mut buf).await.expect("read the response");
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        let body_read = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| raw.len() - at - 4);
        if let Some((wanted, _)) = &signal
            && body_read.is_some_and(|read| read >= *wanted)
            && let Some((_, go)) = signal.take()
        {
            let _ = go.send(());
        }
    }
    let _ = serving.await;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Received {
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole response head");
    let head = std::str::from_utf8(&raw[..at]).expect("ASCII head");
    let rest = &raw[at + 4..];
    let status = head[9..12].parse().expect("status");
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let content_length = header("content-length").map(|v| v.parse().expect("length"));
    if let Some(length) = content_length {
        let body = rest[..rest.len().min(length)].to_vec();
        let complete = rest.len() == length;
        return Received {
            status,
            content_length,
            body,
            complete,
        };
    }
    assert_eq!(header("transfer-encoding").as_deref(), Some("chunked"));
    let (mut body, mut at, mut complete) = (Vec::new(), 0, false);
    while let Some(end) = rest[at..].windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[at..at + end]).expect("chunk size");
        let size = usize::from_str_radix(size, 16).expect("hex chunk size");
        at += end + 2;
        if size == 0 {
            complete = rest[at..] == *b"\r\n";
            break;
        }
        if rest.len() < at + size + 2 {
            break;
        }
        body.extend_from_slice(&rest[at..at + size]);
        at += size + 2;
    }
    Received {
        status,
        content_length,
        body,
        complete,
    }
}

/// `n` bytes of a JSON string's content, varied so a reordering or a lost chunk shows.
fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

#[tokio::test]
async fn a_large_json_body_is_streamed_unchanged_before_the_upstream_has_finished() {
    let body = payload(LIMIT);
    let (first, second) = body.split_at(LIMIT / 2);
    let (go, wait) = oneshot::channel();
    let mut start = head(Some(body.len()));
    start.extend_from_slice(first);
    let url = scripted_upstream(vec![
        Step::Write(start),
        Step::Wait(wait),
        Step::Write(second.to_vec()),
    ])
    .await;

    // The upstream sends its second half only once the client has the headers and the first
    // bytes: a relay that buffered the body would wait for it until `response_timeout`.
    let response = relay_call(&url, None).await.expect("relayed");
    let received = client_receives_signalling(response, Some((first.len(), go))).await;

    assert_eq!(received.status, 200);
    assert_eq!(
        received.content_length,
        Some(body.len()),
        "the declared length is kept"
    );
    assert!(received.complete);
    assert!(received.body == body, "the upstream's bytes, unchanged");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_any_of_the_body_is_read() {
    // The upstream declares one byte too many and then sends nothing: only the declared length
    // can tell the gateway, at once.
    let (_keep, wait) = oneshot::channel::<()>();
    let url = scripted_upstream(vec![Step::Write(head(Some(LIMIT + 1))), Step::Wait(wait)]).await;

    let refused = relay_call(&url, None).await.expect_err("refused");

    assert!(
        matches!(
            refused,
            ProxyError::UpstreamResponseTooLarge { limit: LIMIT, .. }
        ),
        "{refused:?}"
    );
    let received = client_receives(refused.into_response(None)).await;
    assert_eq!(received.status, 502);
    let error: serde_json::Value = serde_json::from_slice(&received.body).expect("JSON-RPC");
    assert_eq!(error["error"]["code"], -32603);
    assert!(
        !String::from_utf8_lossy(&received.body).contains("aaaa"),
        "no upstream bytes reach the client"
    );
}

#[tokio::test]
async fn a_body_without_a_length_is_cut_before_it_passes_the_limit() {
    let piece = payload(LIMIT / 4);
    let mut steps = vec![Step::Write(head(None))];
    for _ in 0..5 {
        steps.push(Step::Write(chunk(&piece)));
    }
    steps.push(Step::Write(b"0\r\n\r\n".to_vec()));
    let url = scripted_upstream(steps).await;

    let response = relay_call(&url, None).await.expect("headers relayed");
    let received = client_receives(response).await;

    assert_eq!(
        received.status, 200,
        "the headers left before the body grew"
    );
    assert!(
        !received.complete,
        "the client must see a broken body, never a complete-looking one"
    );
    let sent = piece.repeat(5);
    assert!(
        received.body.len() <= LIMIT && sent.starts_with(&received.body),
        "only the upstream's bytes, unchanged, and nothing past the limit: {} bytes",
        received.body.len()
    );
}

#[tokio::test]
async fn an_upstream_body_that_fails_mid_stream_reaches_the_client_as_a_broken_body() {
    // Chunked: one chunk, which the client receives; then half a chunk and the connection
    // closes.
    let first = chunk(b"{\"jsonrpc\":\"2.0\",");
    let mut start = head(None);
    start.extend_from_slice(&first);
    let (go, wait) = oneshot::channel();
    let url = scripted_upstream(vec![
        Step::Write(start),
        Step::Wait(wait),
        Step::Write(b"40\r\n\"id\":1,".to_vec()),
    ])
    .await;

    let response = relay_call(&url, None).await.expect("headers relayed");
    let received = client_receives_signalling(response, Some((first.len(), go))).await;

    assert_eq!(received.status, 200);
    assert!(!received.complete, "{received:?}");
    assert!(
        br#"{"jsonrpc":"2.0","id":1,"#.starts_with(&received.body),
        "what arrived, unchanged: {received:?}"
    );
}

/// Sees every JSON body whole and marks it.
struct Marker;

impl MessageObserver for Marker {
    fn observe(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        let mut edited = message.to_vec();
        edited.extend_from_slice(b" ");
        Some(edited)
    }
}

#[tokio::test]
async fn an_observer_that_needs_the_body_still_gets_it_whole_and_its_edit_is_sent() {
    let body = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let mut steps = vec![Step::Write(head(None))];
    for piece in body.chunks(8) {
        steps.push(Step::Write(chunk(piece)));
    }
    steps.push(Step::Write(b"0\r\n\r\n".to_vec()));
    let url = scripted_upstream(steps).await;

    let response = relay_call(&url, Some(Box::new(Marker)))
        .await
        .expect("relayed");
    let received = client_receives(response).await;

    let mut expected = body.to_vec();
    expected.push(b' ');
    assert_eq!(received.body, expected, "one edit of the whole body");
    assert!(received.complete);
}

/// `body` relayed as an upstream's JSON answer with no declared length, within the test
/// route's size limit and a 10 s deadline.
fn relayed_within_ten_seconds<B>(body: B) -> ResponseBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<crate::body::BoxError>,
{
    let bounds = BodyBounds {
        max_bytes: LIMIT,
        deadline: Duration::from_secs(10),
    };
    ResponseBody::new(
        JsonRelay::new(
            body,
            bounds,
            SystemClock.now(),
            &ProxyMetrics::unregistered(),
            "store",
        )
        .expect("no declared length"),
    )
}

#[tokio::test(start_paused = true)]
async fn a_dripping_upstream_is_cut_at_the_response_deadline() {
    // One byte a second for an hour: within the size limit all along.
    let drip = futures_util::stream::unfold(0_u32, |sent| async move {
        if sent == 3600 {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b" "))),
            sent + 1,
        ))
    });
    let body = relayed_within_ten_seconds(StreamBody::new(drip));

    let received = client_receives(Response::new(body)).await;

    assert_eq!(received.status, 200);
    assert!(!received.complete, "cut, and the client can tell");
    assert!(
        received.body.len() < 3600,
        "ended long before the upstream would have: {} bytes",
        received.body.len()
    );
}

#[tokio::test(start_paused = true)]
async fn an_upstream_always_ready_is_still_cut_at_the_deadline_when_the_client_reads_slowly() {
    // Every byte is there at once, so reading never waits on the upstream: only the client,
    // which takes one frame a second, makes the body slow.
    let ready = futures_util::stream::iter(
        (0..3600).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from_static(b" ")))),
    );
    let mut body = relayed_within_ten_seconds(StreamBody::new(ready));

    let mut relayed = 0;
    let ended = loop {
        match body.frame().await {
            Some(Ok(_)) => relayed += 1,
            Some(Err(error)) => break error.to_string(),
            None => panic!("all 3600 frames relayed over an hour, past the 10 s deadline"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };

    assert!(ended.contains("did not answer"), "{ended}");
    assert!(relayed <= 11, "cut at the deadline, after {relayed} frames");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_has_ended_is_not_cut_however_late_the_client_asks_for_its_end() {
    // The whole body is relayed at once; the client asks for the end only after the deadline.
    let whole = http_body_util::Full::new(Bytes::from_static(b"{}"));
    let mut body = relayed_within_ten_seconds(whole);

    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.into_data().expect("data"), Bytes::from_static(b"{}"));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(body.frame().await.is_none(), "ended cleanly");
}
