//! The plain-upstream pool against a real TCP server that counts its connections.

use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::clock::{Clock, SystemClock};
use crate::workers::Workers;

/// A server that answers every request on a connection with `answer`, and counts connections
/// and requests. `close_after` ends each connection after that many answers.
struct Server {
    url: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    targets: Arc<Mutex<Vec<String>>>,
}

async fn server(close_after: Option<usize>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp?x=1", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let targets = Arc::new(Mutex::new(Vec::new()));
    let (c, r, t) = (connections.clone(), requests.clone(), targets.clone());
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            c.fetch_add(1, Ordering::SeqCst);
            let (r, t) = (r.clone(), t.clone());
            tokio::spawn(async move {
                let mut answered = 0;
                let mut buffer = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(n) = stream.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    // Requests here are a head and a 2-byte body.
                    while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        if buffer.len() < end + 4 + 2 {
                            break;
                        }
                        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
                        t.lock()
                            .unwrap()
                            .push(head.lines().next().unwrap_or("").to_owned());
                        buffer.drain(..end + 4 + 2);
                        r.fetch_add(1, Ordering::SeqCst);
                        answered += 1;
                        let close = close_after.is_some_and(|max| answered >= max);
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{}\r\nok",
                            if close { "connection: close\r\n" } else { "" }
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() || close {
                            return;
                        }
                    }
                }
            });
        }
    });
    Server {
        url,
        connections,
        requests,
        targets,
    }
}

fn pool_for(url: &str) -> Http1Pool {
    Http1Pool::new(&crate::testing::route(url).upstream)
}

fn request() -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1/mcp?x=1")
        .header(http::header::HOST, "127.0.0.1")
        .header(http::header::CONTENT_LENGTH, "2")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

/// A deadline no answer here comes near.
fn far() -> Instant {
    SystemClock.now() + Duration::from_secs(60)
}

async fn read_all(pool: &Http1Pool) -> Bytes {
    read_all_by(pool, far()).await
}

/// The body of one request's answer, whose head must arrive by `by`.
async fn read_all_by(pool: &Http1Pool, by: Instant) -> Bytes {
    let body = pool.send(request(), by).await.unwrap().into_body();
    body.collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn sequential_requests_share_one_connection_and_send_the_origin_form() {
    let server = server(None).await;
    let pool = pool_for(&server.url);
    for _ in 0..5 {
        assert_eq!(read_all(&pool).await, "ok");
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 5);
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
    assert!(
        server
            .targets
            .lock()
            .unwrap()
            .iter()
            .all(|line| line == "POST /mcp?x=1 HTTP/1.1"),
        "{:?}",
        server.targets.lock().unwrap()
    );
}

#[tokio::test]
async fn each_worker_reuses_only_the_connections_it_drives() {
    let server = server(None).await;
    let pool = pool_for(&server.url);
    let workers = Workers::start(std::num::NonZeroUsize::new(2).unwrap()).unwrap();
    for _ in 0..3 {
        // This runtime is worker 0.
        assert_eq!(read_all(&pool).await, "ok");
        let on_worker_1 = pool.clone();
        let answer = workers.spawn_on(1, async move { read_all(&on_worker_1).await });
        assert_eq!(answer.await.unwrap(), "ok");
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 6);
    // A connection is driven by the worker that opened it; one per worker, each reused.
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_response_still_being_read_keeps_its_connection_from_others() {
    let server = server(None).await;
    let pool = pool_for(&server.url);
    let first = pool.send(request(), far()).await.unwrap();
    // The first body is not read yet: the second request needs a connection of its own.
    assert_eq!(read_all(&pool).await, "ok");
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    let body = first.into_body();
    assert_eq!(body.collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(pool.idle_count(), 2);
}

#[tokio::test]
async fn a_body_dropped_before_its_end_closes_its_connection() {
    let server = server(None).await;
    let pool = pool_for(&server.url);
    drop(pool.send(request(), far()).await.unwrap());
    assert_eq!(pool.idle_count(), 0);
    assert_eq!(read_all(&pool).await, "ok");
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_the_upstream_closes_is_replaced() {
    // Every connection carries one answer and `connection: close`.
    let server = server(Some(1)).await;
    let pool = pool_for(&server.url);
    for _ in 0..3 {
        assert_eq!(read_all(&pool).await, "ok");
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
    assert_eq!(server.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_connect_error_naming_the_address() {
    let url = crate::testing::unreachable_url();
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let pool = pool_for(&url);
    let error = pool.send(request(), far()).await.unwrap_err();
    let chain = crate::upstream::ConnectFailure::plain(error).to_string();
    assert!(
        chain.contains(&format!("tcp connect error to {address}")),
        "{chain}"
    );
    assert!(pool.connect_only().await.is_err());
}

#[test]
fn the_address_keeps_ipv6_brackets_and_defaults_the_port() {
    let pool = pool_for("http://[::1]:8080/mcp");
    assert_eq!(pool.shared.address, "[::1]:8080");
    let pool = pool_for("http://store.internal/mcp");
    assert_eq!(pool.shared.address, "store.internal:80");
}

#[tokio::test(start_paused = true)]
async fn connections_idle_past_the_timeout_are_not_reused() {
    let server = server(None).await;
    let pool = pool_for(&server.url);
    assert_eq!(read_all(&pool).await, "ok");
    tokio::time::advance(IDLE_TIMEOUT + Duration::from_secs(1)).await;
    assert_eq!(read_all(&pool).await, "ok");
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

/// Reads from `stream` until `buffer` holds a whole request (a head and a 2-byte body) and
/// takes it out; false once the client has closed.
async fn next_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n")
            && buffer.len() >= end + 6
        {
            buffer.drain(..end + 6);
            return true;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A server that hands each connection it accepts to `serve`, in a task of its own. Returns
/// the URL and the connection count.
async fn accepting<F, Fut>(serve: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream));
        }
    });
    (url, connections)
}

/// A server that answers each request (a head and a 2-byte body) with `answer`, written in
/// pieces of `step` bytes, and then closes the connection if `close` says so (without saying
/// so in the answer). Returns the URL, the connection count, and a notice sent whenever it has
/// closed a connection.
async fn scripted(
    answer: &'static [u8],
    step: usize,
    close: bool,
) -> (String, Arc<AtomicUsize>, Arc<tokio::sync::Notify>) {
    let closed = Arc::new(tokio::sync::Notify::new());
    let notify = closed.clone();
    let (url, connections) = accepting(move |mut stream| {
        let notify = notify.clone();
        async move {
            let mut buffer = Vec::new();
            while next_request(&mut stream, &mut buffer).await {
                for piece in answer.chunks(step) {
                    if stream.write_all(piece).await.is_err() {
                        return;
                    }
                    stream.flush().await.unwrap();
                    tokio::task::yield_now().await;
                }
                if close {
                    drop(stream);
                    notify.notify_one();
                    return;
                }
            }
        }
    })
    .await;
    (url, connections, closed)
}

const CHUNKED: &[u8] =
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

#[tokio::test]
async fn a_chunked_answer_in_small_pieces_is_read_whole_and_its_connection_reused() {
    let (url, connections, _) = scripted(CHUNKED, 3, false).await;
    let pool = pool_for(&url);
    for _ in 0..3 {
        assert_eq!(read_all(&pool).await, "hello world");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_framed_two_ways_is_read_as_chunked_and_its_connection_never_reused() {
    // Read by its Content-Length, this answer would leave "hello\r\n0..." to be taken as the
    // next request's answer.
    const BOTH: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let (url, connections, _) = scripted(BOTH, 7, false).await;
    let pool = pool_for(&url);
    assert_eq!(read_all(&pool).await, "hello");
    assert_eq!(read_all(&pool).await, "hello");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn differing_content_lengths_fail_the_request_and_close_the_connection() {
    const TWO: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 7\r\n\r\nokSMUGGLE";
    let (url, connections, _) = scripted(TWO, 64, false).await;
    let pool = pool_for(&url);
    let error = pool.send(request(), far()).await.unwrap_err();
    assert!(
        error.to_string().contains("content-lengths differ"),
        "{error}"
    );
    assert!(pool.send(request(), far()).await.is_err());
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_silently_is_not_used() {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let (url, connections, closed) = scripted(OK, 64, true).await;
    let pool = pool_for(&url);
    assert_eq!(read_all(&pool).await, "ok");
    closed.notified().await;
    // The pool still holds the connection; the request must not be lost on it.
    assert_eq!(read_all(&pool).await, "ok");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_body_cut_short_by_the_upstream_is_an_error_not_an_end() {
    const SHORT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
    let (url, _, _) = scripted(SHORT, 64, true).await;
    let pool = pool_for(&url);
    let body = pool.send(request(), far()).await.unwrap().into_body();
    let error = body.collect().await.unwrap_err();
    assert!(
        error.to_string().contains("before the response ended"),
        "{error}"
    );
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn a_large_answer_arrives_whole_in_reads_that_grow_up_to_their_cap() {
    const BODY: usize = 3 << 20;
    let body: Vec<u8> = (0..BODY).map(|i| b'a' + (i % 26) as u8).collect();
    let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {BODY}\r\n\r\n").into_bytes();
    answer.extend_from_slice(&body);
    let (url, connections, _) = scripted(answer.leak(), BODY, false).await;
    let pool = pool_for(&url);
    for _ in 0..2 {
        let mut response = pool.send(request(), far()).await.unwrap().into_body();
        let mut received = Vec::new();
        let mut largest = 0;
        while let Some(frame) = response.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            // What one answer holds in the gateway at a time is bounded, however large it is.
            assert!(data.len() <= 256 * 1024, "a frame of {} bytes", data.len());
            largest = largest.max(data.len());
            received.extend_from_slice(&data);
        }
        assert!(received == body, "the answer arrived changed");
        // The server wrote the whole answer at once, so reads found more waiting than 16 KiB:
        // each one is a frame, and they grew.
        assert!(largest > 16 * 1024, "no read grew past 16 KiB");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// A server that answers the `n`th request it reads (over all its connections) `delays[n]`
/// after reading it, with a 2-byte body. Returns the URL and the connection count.
async fn answering_after(delays: Vec<Duration>) -> (String, Arc<AtomicUsize>) {
    let delays = Arc::new(Mutex::new(delays.into_iter()));
    accepting(move |mut stream| {
        let delays = delays.clone();
        async move {
            let mut buffer = Vec::new();
            while next_request(&mut stream, &mut buffer).await {
                let delay = delays.lock().unwrap().next().unwrap_or_default();
                tokio::time::sleep(delay).await;
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn each_request_on_a_reused_connection_waits_for_its_head_until_its_own_deadline() {
    let timeout = Duration::from_secs(2);
    // Each answer comes late enough that the request surely waits on the connection's timer.
    let (url, connections) = answering_after(vec![
        Duration::from_secs(1),
        Duration::from_secs(1),
        Duration::from_secs(3),
    ])
    .await;
    let pool = pool_for(&url);
    assert_eq!(read_all_by(&pool, SystemClock.now() + timeout).await, "ok");
    // Long past the first request's deadline: the next one gets a deadline of its own.
    tokio::time::advance(timeout * 3).await;
    assert_eq!(read_all_by(&pool, SystemClock.now() + timeout).await, "ok");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "the connection was reused"
    );

    let error = pool
        .send(request(), SystemClock.now() + timeout)
        .await
        .expect_err("the head comes a second after the deadline");
    assert!(error.is::<HeadOverdue>(), "{error}");
    // The late answer must not be read as the next request's: its connection is not kept.
    assert_eq!(pool.idle_count(), 0);
}
