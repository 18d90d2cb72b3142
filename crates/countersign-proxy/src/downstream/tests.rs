//! The server against raw TCP clients: framing, keep-alive, refusals and streams, asserting
//! on what the service was handed as well as on what the client read.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::*;
use crate::body::{BoxError, ResponseBody, full};

/// Bounds waits so that a broken build fails instead of hanging; never a timing assertion.
const WAIT: Duration = Duration::from_secs(10);

/// What the service was handed: method, target, headers, and the body it read (or why not).
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    headers: http::HeaderMap,
    body: Result<Vec<u8>, String>,
}

struct Harness {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Frames for `/stream` answers; a stream ends when its sender is dropped.
    frames: Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>,
    /// Set when a `/stream` answer's body was dropped.
    dropped: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
    stop: watch::Sender<bool>,
}

impl Harness {
    /// The targets the service was handed, in order.
    fn seen_targets(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.target.clone())
            .collect()
    }

    /// The bodies the service read (or why it could not), in order.
    fn seen_bodies(&self) -> Vec<Result<Vec<u8>, String>> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.body.clone())
            .collect()
    }
}

fn settings(header_read_timeout: Duration) -> ConnectionSettings {
    ConnectionSettings {
        head: HeadLimits {
            max_headers: 20,
            max_head_bytes: 4096,
        },
        header_read_timeout,
    }
}

/// A body that tells `dropped` when it goes away.
struct Watched {
    inner: ResponseBody,
    dropped: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            let _ = dropped.send(());
        }
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }
}

async fn start(header_read_timeout: Duration) -> Harness {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let frames = Arc::new(Mutex::new(None::<mpsc::Receiver<Bytes>>));
    let dropped = Arc::new(Mutex::new(None));
    let (stop, stopping) = watch::channel(false);
    let (s, f, d) = (seen.clone(), frames.clone(), dropped.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (s, f, d) = (s.clone(), f.clone(), d.clone());
            let service = tower::service_fn(move |request: http::Request<RequestBody>| {
                let (s, f, d) = (s.clone(), f.clone(), d.clone());
                async move {
                    let target = request.uri().to_string();
                    let headers = request.headers().clone();
                    let (body, answer) = match target.as_str() {
                        "/ignore" => (Ok(Vec::new()), full("ignored")),
                        "/stream" => {
                            let frames = f.lock().unwrap().take().expect("frames for /stream");
                            let stream = tokio_stream_of(frames);
                            let watched = Watched {
                                inner: ResponseBody::new(StreamBody::new(stream)),
                                dropped: d.lock().unwrap().take(),
                            };
                            (Ok(Vec::new()), ResponseBody::new(watched))
                        }
                        _ => match request.into_body().collect().await {
                            Ok(collected) => {
                                let bytes = collected.to_bytes();
                                (Ok(bytes.to_vec()), full(bytes))
                            }
                            Err(error) => (Err(error.to_string()), full("unread")),
                        },
                    };
                    s.lock().unwrap().push(Seen {
                        target: target.clone(),
                        headers,
                        body,
                    });
                    let mut response = http::Response::new(answer);
                    if target == "/close" {
                        response
                            .headers_mut()
                            .insert(http::header::CONNECTION, "close".parse().unwrap());
                    }
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            tokio::spawn(serve_connection(
                stream,
                service,
                settings(header_read_timeout),
                stopping.clone(),
            ));
        }
    });
    Harness {
        addr,
        seen,
        frames,
        dropped,
        stop,
    }
}

fn tokio_stream_of(
    mut frames: mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Result<http_body::Frame<Bytes>, BoxError>> + Send {
    futures_util::stream::poll_fn(move |cx| frames.poll_recv(cx))
        .map(|bytes| Ok(http_body::Frame::data(bytes)))
}

/// One response as the client read it.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Reads one response from `stream`, `buf` holding what was read past earlier ones.
async fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Answer> {
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if !fill(stream, buf).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let status = head[9..12].parse().unwrap();
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(length) = header(&lower, "content-length") {
        let length: usize = length.parse().unwrap();
        while buf.len() < length {
            assert!(fill(stream, buf).await, "closed inside a body");
        }
        body = buf.drain(..length).collect();
    } else if header(&lower, "transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let line = read_line(stream, buf).await;
            let size = usize::from_str_radix(line.trim(), 16).unwrap();
            while buf.len() < size + 2 {
                assert!(fill(stream, buf).await, "closed inside a chunk");
            }
            body.extend(buf.drain(..size));
            buf.drain(..2);
            if size == 0 {
                break;
            }
        }
    } else {
        while fill(stream, buf).await {}
        body = std::mem::take(buf);
    }
    Some(Answer { status, head, body })
}

/// Sends `request` on `stream` and reads its answer.
async fn exchange(stream: &mut TcpStream, buf: &mut Vec<u8>, request: &str) -> Answer {
    stream.write_all(request.as_bytes()).await.unwrap();
    read_answer(stream, buf).await.expect("an answer")
}

fn header(lower_head: &str, name: &str) -> Option<String> {
    lower_head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        (n == name).then(|| v.trim().to_owned())
    })
}

async fn read_line(stream: &mut TcpStream, buf: &mut Vec<u8>) -> String {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 2);
            return line;
        }
        assert!(fill(stream, buf).await, "closed inside a chunk line");
    }
}

/// Reads more into `buf`; false at the close.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match tokio::time::timeout(WAIT, stream.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) => false,
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(_) => panic!("no answer within {WAIT:?}"),
    }
}

/// Whether the server closed the connection (after anything still unread).
async fn closes(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut rest))
        .await
        .is_ok()
}

fn post(target: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn requests_one_after_another_and_pipelined_share_one_connection() {
    let h = start(WAIT).await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let mut buf = Vec::new();
    let first = exchange(&mut stream, &mut buf, &post("/echo", "{\"a\":1}", "")).await;
    assert_eq!(
        (first.status, first.body.as_slice()),
        (200, &b"{\"a\":1}"[..])
    );
    assert!(first.head.to_ascii_lowercase().contains("\r\ndate: "));
    // Two requests in one write: both answered, in order.
    let two = post("/echo", "one", "") + &post("/echo", "second", "");
    stream.write_all(two.as_bytes()).await.unwrap();
    let a = read_answer(&mut stream, &mut buf).await.unwrap();
    let b = read_answer(&mut stream, &mut buf).await.unwrap();
    assert_eq!(
        (a.body.as_slice(), b.body.as_slice()),
        (&b"one"[..], &b"second"[..])
    );
    let bodies = h.seen_bodies();
    assert_eq!(
        bodies,
        vec![
            Ok(b"{\"a\":1}".to_vec()),
            Ok(b"one".to_vec()),
            Ok(b"second".to_vec())
        ]
    );
}

#[tokio::test]
async fn a_head_and_body_that_arrive_a_byte_at_a_time_are_read_whole() {
    let h = start(WAIT).await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    for byte in post("/echo", "{\"slow\":true}", "X-A: b\r\n").bytes() {
        stream.write_all(&[byte]).await.unwrap();
        tokio::task::yield_now().await;
    }
    let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
    assert_eq!(answer.body, b"{\"slow\":true}");
    assert_eq!(h.seen.lock().unwrap()[0].headers["x-a"], "b");
}

#[tokio::test]
async fn a_client_that_expects_100_continue_gets_it_before_it_sends_the_body() {
    let h = start(WAIT).await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let head =
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 6\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let interim = read_line(&mut stream, &mut buf).await;
    assert_eq!(interim, "HTTP/1.1 100 Continue");
    assert_eq!(read_line(&mut stream, &mut buf).await, "");
    stream.write_all(b"abc").await.unwrap();
    stream.write_all(b"def").await.unwrap();
    let answer = read_answer(&mut stream, &mut buf).await.unwrap();
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"abcdef"[..])
    );
}

#[tokio::test]
async fn a_body_the_service_leaves_unread_is_never_read_as_a_request() {
    let h = start(WAIT).await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    // Arrived with its head: it is off the socket, and the connection serves on after it.
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let mut buf = Vec::new();
    let answer = exchange(&mut stream, &mut buf, &post("/ignore", smuggled, "")).await;
    assert_eq!(answer.body, b"ignored");
    let next = exchange(&mut stream, &mut buf, &post("/echo", "next", "")).await;
    assert_eq!(next.body, b"next");
    // Still to come when the answer is written: the connection ends instead of reading it.
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let mut buf = Vec::new();
    let request = post("/ignore", smuggled, "");
    let (head, body) = request.split_at(request.find("\r\n\r\n").unwrap() + 4);
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, &mut buf).await.unwrap();
    assert!(answer.head.contains("connection: close"), "{}", answer.head);
    let _ = stream.write_all(body.as_bytes()).await;
    assert!(closes(&mut stream).await);
    let targets = h.seen_targets();
    assert_eq!(targets, vec!["/ignore", "/echo", "/ignore"]);
}

#[tokio::test]
async fn malformed_heads_are_refused_before_any_service_sees_them() {
    let h = start(WAIT).await;
    let many: String = (0..25).map(|i| format!("X-Filler-{i}: y\r\n")).collect();
    let huge = format!("X-Big: {}\r\n", "y".repeat(5000));
    let cases = [
        (
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
                .to_owned(),
            400,
        ),
        (
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}".to_owned(),
            400,
        ),
        ("GARBAGE\r\n\r\n".to_owned(), 400),
        (format!("GET /echo HTTP/1.1\r\nHost: x\r\n{many}\r\n"), 431),
        (format!("GET /echo HTTP/1.1\r\nHost: x\r\n{huge}\r\n"), 431),
        (
            "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 0\r\n\r\n"
                .to_owned(),
            417,
        ),
    ];
    for (request, status) in cases {
        let mut stream = TcpStream::connect(h.addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
        assert_eq!(answer.status, status, "for {request:?}");
        assert!(closes(&mut stream).await, "still open after {request:?}");
    }
    assert!(h.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_transfer_encoded_body_is_never_read_and_ends_the_connection() {
    let h = start(WAIT).await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let request = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
    assert_eq!(answer.body, b"unread");
    assert!(closes(&mut stream).await);
    let seen = h.seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        1,
        "the bytes after the body were read as a request"
    );
    assert!(seen[0].body.is_err());
    assert!(!seen[0].headers.contains_key("content-length"));
}

/// A client connection that asked for `/stream`, whose answer is the frames sent to `frames`.
async fn open_stream(h: &Harness, frames: mpsc::Receiver<Bytes>) -> TcpStream {
    *h.frames.lock().unwrap() = Some(frames);
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    stream
}

#[tokio::test]
async fn a_stream_goes_out_chunk_by_chunk_and_the_connection_serves_on() {
    let h = start(WAIT).await;
    let (send, frames) = mpsc::channel(4);
    let mut stream = open_stream(&h, frames).await;
    let mut buf = Vec::new();
    send.send(Bytes::from_static(b"event: one\n\n"))
        .await
        .unwrap();
    // The first event arrives while the stream is still open: nothing waits for the end.
    while !String::from_utf8_lossy(&buf).contains("event: one") {
        assert!(fill(&mut stream, &mut buf).await);
    }
    assert!(String::from_utf8_lossy(&buf).contains("transfer-encoding: chunked"));
    send.send(Bytes::from_static(b"event: two\n\n"))
        .await
        .unwrap();
    drop(send);
    let answer = read_answer(&mut stream, &mut buf).await.unwrap();
    assert_eq!(answer.body, b"event: one\n\nevent: two\n\n");
    let next = exchange(&mut stream, &mut buf, &post("/echo", "after", "")).await;
    assert_eq!(next.body, b"after");
}

#[tokio::test]
async fn large_frames_reach_a_slow_reader_whole_and_in_order() {
    let h = start(WAIT).await;
    let (send, frames) = mpsc::channel(2);
    let mut stream = open_stream(&h, frames).await;
    // Frames far larger than a socket buffer, each a different byte, so a write that went out
    // in part and was not resumed where it stopped shows as a wrong or missing byte.
    let sizes = [300_000, 17, 1 << 20, 16 * 1024, 700_001];
    let expected: Vec<u8> = sizes
        .iter()
        .enumerate()
        .flat_map(|(n, size)| std::iter::repeat_n(b'a' + n as u8, *size))
        .collect();
    let sender = tokio::spawn(async move {
        for (n, size) in sizes.into_iter().enumerate() {
            let frame = Bytes::from(vec![b'a' + n as u8; size]);
            send.send(frame).await.unwrap();
        }
    });
    let mut buf = Vec::new();
    let answer = tokio::time::timeout(WAIT, async {
        loop {
            // A slow reader: small reads, with pauses, so the server's writes fill the socket.
            let mut piece = [0u8; 4096];
            let n = stream.read(&mut piece).await.unwrap();
            buf.extend_from_slice(&piece[..n]);
            tokio::task::yield_now().await;
            if n == 0 || buf.ends_with(b"0\r\n\r\n") {
                break;
            }
        }
        buf.clone()
    })
    .await
    .expect("the whole answer arrives");
    sender.await.unwrap();
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = dechunk(&answer[head_end..]);
    assert_eq!(body.len(), expected.len());
    assert!(body == expected, "bytes out of place");
}

/// The payload of a complete chunked body.
fn dechunk(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = chunked.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&chunked[..line_end]).unwrap(), 16).unwrap();
        chunked = &chunked[line_end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&chunked[..size]);
        assert_eq!(&chunked[size..size + 2], b"\r\n");
        chunked = &chunked[size + 2..];
    }
}

#[tokio::test]
async fn a_client_that_goes_away_ends_its_stream_without_waiting_for_an_event() {
    let h = start(WAIT).await;
    let (_send, frames) = mpsc::channel(4);
    let (dropped_tx, dropped) = tokio::sync::oneshot::channel();
    *h.dropped.lock().unwrap() = Some(dropped_tx);
    let mut stream = open_stream(&h, frames).await;
    let mut buf = Vec::new();
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        assert!(fill(&mut stream, &mut buf).await);
    }
    drop(stream);
    let ended = tokio::time::timeout(WAIT, dropped).await;
    assert!(ended.is_ok(), "the stream outlived its client");
}

#[tokio::test]
async fn an_http_1_0_stream_is_ended_by_the_close() {
    let h = start(WAIT).await;
    let (send, frames) = mpsc::channel(4);
    *h.frames.lock().unwrap() = Some(frames);
    send.send(Bytes::from_static(b"data: x\n\n")).await.unwrap();
    drop(send);
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
    let head = answer.head.to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(answer.body, b"data: x\n\n");
}

#[tokio::test]
async fn connection_close_from_either_side_ends_the_connection_after_the_answer() {
    let h = start(WAIT).await;
    for (target, extra) in [("/echo", "Connection: close\r\n"), ("/close", "")] {
        let mut stream = TcpStream::connect(h.addr).await.unwrap();
        stream
            .write_all(post(target, "x", extra).as_bytes())
            .await
            .unwrap();
        let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
        assert_eq!(answer.status, 200);
        assert!(answer.head.contains("connection: close"), "{}", answer.head);
        assert!(closes(&mut stream).await, "{target} stayed open");
    }
}

#[tokio::test]
async fn an_idle_connection_is_closed_at_the_header_read_timeout_and_at_shutdown() {
    let h = start(Duration::from_millis(200)).await;
    let mut idle = TcpStream::connect(h.addr).await.unwrap();
    assert!(closes(&mut idle).await, "an idle connection stayed open");

    let h = start(WAIT).await;
    let mut idle = TcpStream::connect(h.addr).await.unwrap();
    idle.write_all(post("/echo", "x", "").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    read_answer(&mut idle, &mut buf).await.unwrap();
    h.stop.send_replace(true);
    assert!(
        closes(&mut idle).await,
        "shutdown left an idle connection open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_connection_in_use_outlives_the_header_read_timeout_which_counts_from_its_last_answer() {
    let timeout = Duration::from_secs(2);
    let h = start(timeout).await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let mut buf = Vec::new();
    // Each request comes a little over half the timeout after the last answer, so the
    // connection is in use for more than twice the timeout: each wait counts on its own.
    for i in 0..5 {
        tokio::time::sleep(timeout * 6 / 10).await;
        let body = i.to_string();
        let answer = exchange(&mut stream, &mut buf, &post("/echo", &body, "")).await;
        assert_eq!(answer.body, body.as_bytes(), "request {i}");
    }
    assert!(
        closes(&mut stream).await,
        "the connection stayed open past the header read timeout after its last answer"
    );
    assert_eq!(h.seen_targets().len(), 5);
}
