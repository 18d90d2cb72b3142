//! Large plain-upstream answers passed on with `splice`, through the gateway's own server to a
//! raw TCP client: the bytes the client reads, and what becomes of the upstream connection
//! (back in the pool after an exact end, closed after anything else).

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use super::super::{PendingAnswers, QuietLimits, StreamSettings, relay};
use crate::body::{ResponseBody, full};
use crate::clock::SystemClock;
use crate::downstream::{ConnectionSettings, HeadLimits, RequestBody, serve_connection};
use crate::metrics::ProxyMetrics;
use crate::route::Route;
use crate::testing::{PATH, route, route_with_response_timeout};
use crate::upstream::Forwarded;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// Bounds waits so that a broken build fails instead of hanging; never a timing assertion.
const WAIT: Duration = Duration::from_secs(10);
/// Larger than the loopback socket buffers can hold at once, and within the test route's
/// 1 MiB `max_response_bytes`.
const LARGE: usize = 900 * 1024;

/// What the upstream does with each request, in order, one connection after another.
#[derive(Debug, Clone)]
enum Answer {
    /// `len` body bytes, all of them.
    Whole(usize),
    /// Declares `len` body bytes and sends `sent` of them; the rest once `resume` is
    /// notified (if ever: it keeps the connection open meanwhile).
    Pauses {
        len: usize,
        sent: usize,
        resume: Arc<Notify>,
    },
}

/// A body whose every byte depends on its position, so a byte lost, repeated or moved shows.
fn body_of(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i / 251) as u8)
        .collect()
}

struct Upstream {
    url: String,
    connections: Arc<AtomicUsize>,
}

/// An upstream that answers requests by `answers`, on however many connections they come.
async fn upstream(answers: Vec<Answer>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}{PATH}", listener.local_addr().expect("addr"));
    let connections = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.expect("accept");
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve_upstream(socket, answers.clone()));
        }
    });
    Upstream { url, connections }
}

async fn serve_upstream(mut socket: TcpStream, answers: Arc<Mutex<std::vec::IntoIter<Answer>>>) {
    let mut buf = Vec::new();
    while read_request(&mut socket, &mut buf).await {
        let Some(answer) = answers.lock().expect("lock").next() else {
            return;
        };
        let (len, sent, resume) = match answer {
            Answer::Whole(len) => (len, len, None),
            Answer::Pauses { len, sent, resume } => (len, sent, Some(resume)),
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
        );
        let body = body_of(len);
        let mut out = head.into_bytes();
        out.extend_from_slice(&body[..sent]);
        if socket.write_all(&out).await.is_err() {
            return;
        }
        if let Some(resume) = resume {
            if tokio::time::timeout(WAIT * 2, resume.notified())
                .await
                .is_err()
            {
                return;
            }
            if socket.write_all(&body[sent..]).await.is_err() {
                return;
            }
        }
    }
}

/// Where the message head at the front of `raw` ends (its empty line), and the head lowercased.
fn head_of(raw: &[u8]) -> Option<(usize, String)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((
        end,
        String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase(),
    ))
}

/// The `Content-Length` of a lowercased head.
fn declared_length(head: &str) -> Option<usize> {
    head.lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map(|value| value.trim().parse().expect("a length"))
}

/// Reads one request (head and `Content-Length` body) from the front of `buf` and the socket;
/// false once the gateway closed the connection.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    loop {
        if let Some((end, head)) = head_of(buf) {
            let length = declared_length(&head).unwrap_or(0);
            if buf.len() >= end + 4 + length {
                buf.drain(..end + 4 + length);
                return true;
            }
        }
        let mut chunk = [0; 4096];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The gateway's server with one route relaying to the upstream; records for each answer
/// whether it was a passthrough body (the kind the server splices). Every answer's body holds a
/// [`Counted`] (as the client limit holds a client's slot) until it is dropped.
struct Gateway {
    addr: std::net::SocketAddr,
    /// Where the relay's metrics are registered.
    registry: Registry,
    passthrough: Arc<Mutex<Vec<bool>>>,
    held: Arc<AtomicUsize>,
    _stop: watch::Sender<bool>,
}

impl Gateway {
    /// `countersign_passthrough_answers_total` for `by`, as `/metrics` would show it.
    fn passed_through(&self, by: &str) -> u64 {
        let mut scrape = String::new();
        encode(&mut scrape, &self.registry).expect("encodes");
        let series =
            format!("countersign_passthrough_answers_total{{upstream=\"store\",by=\"{by}\"}} ");
        scrape
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .map_or(0, |count| count.parse().expect("a count"))
    }

    /// How many answers' bodies are alive.
    fn bodies_alive(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// Counted in its counter while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Counted(counter.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn gateway(route: Route) -> Gateway {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let passthrough = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopping) = watch::channel(false);
    let mut registry = Registry::default();
    let metrics = ProxyMetrics::register(&mut registry);
    let held = Arc::new(AtomicUsize::new(0));
    let (seen, guard) = (passthrough.clone(), held.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.expect("accept");
            let (route, seen, guard) = (route.clone(), seen.clone(), guard.clone());
            let metrics = metrics.clone();
            let service = tower::service_fn(move |_request: Request<RequestBody>| {
                let (route, seen, guard) = (route.clone(), seen.clone(), guard.clone());
                let metrics = metrics.clone();
                async move {
                    let mut response = relay_call(&route, &metrics).await;
                    let spliceable = response.body_mut().passthrough_mut().is_some();
                    seen.lock().expect("lock").push(spliceable);
                    let counted = Counted::new(&guard);
                    Ok::<_, Infallible>(response.map(|body| body.hold(counted)))
                }
            });
            let settings = ConnectionSettings {
                head: HeadLimits {
                    max_headers: 20,
                    max_head_bytes: 4096,
                },
                header_read_timeout: WAIT,
            };
            tokio::spawn(serve_connection(
                stream,
                service,
                settings,
                stopping.clone(),
            ));
        }
    });
    Gateway {
        addr,
        registry,
        passthrough,
        held,
        _stop: stop,
    }
}

async fn relay_call(route: &Route, metrics: &ProxyMetrics) -> Response<ResponseBody> {
    let headers = http::HeaderMap::new();
    let request = Forwarded {
        method: Method::POST,
        client_headers: &headers,
        body: Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#),
        extra: &[],
    };
    let settings = StreamSettings {
        max_event_bytes: 1 << 20,
        quiet: QuietLimits {
            keep_alive: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
        },
        clock: Arc::new(SystemClock),
    };
    let pending = PendingAnswers::new(Vec::new());
    match relay(route, request, metrics, &settings, None, pending).await {
        Ok(response) => response,
        Err(error) => {
            let mut response = Response::new(full(error.to_string()));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

/// One answer as a client read it: its body (as much as came) and whether it came whole.
#[derive(Debug)]
struct Received {
    status: u16,
    body: Vec<u8>,
    complete: bool,
}

/// Sends one request on `client` and reads its answer; `stop_after` reads only that many body
/// bytes, then returns (the client may then drop the connection mid-answer).
async fn call(client: &mut TcpStream, stop_after: Option<usize>) -> Received {
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: gateway\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .expect("send the request");
    let mut raw = Vec::new();
    let read = async {
        loop {
            if let Some((end, head)) = head_of(&raw) {
                let length = declared_length(&head).expect("a declared length");
                let body = raw.len() - end - 4;
                if body >= length || stop_after.is_some_and(|n| body >= n) {
                    return Received {
                        status: head[9..12].parse().expect("status"),
                        body: raw[end + 4..].to_vec(),
                        complete: body == length,
                    };
                }
            }
            let mut chunk = vec![0; 64 * 1024];
            let n = client.read(&mut chunk).await.expect("read the answer");
            if n == 0 {
                let (end, head) = head_of(&raw).expect("a head before the close");
                return Received {
                    status: head[9..12].parse().expect("status"),
                    body: raw[end + 4..].to_vec(),
                    complete: false,
                };
            }
            raw.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the answer within the wait")
}

#[tokio::test]
async fn large_answers_pass_whole_and_their_upstream_connection_carries_the_next() {
    let up = upstream(vec![
        Answer::Whole(LARGE),
        Answer::Whole(LARGE),
        Answer::Whole(300),
    ])
    .await;
    let gw = gateway(route(&up.url)).await;
    let mut client = TcpStream::connect(gw.addr).await.expect("connect");

    for _ in 0..2 {
        let received = call(&mut client, None).await;
        assert_eq!(received.status, 200);
        assert!(received.complete);
        assert!(
            received.body == body_of(LARGE),
            "the body changed on its way"
        );
    }
    // A small answer, on the same client connection, is relayed by copies.
    let small = call(&mut client, None).await;
    assert!(small.complete && small.body == body_of(300));

    assert_eq!(*gw.passthrough.lock().unwrap(), [true, true, false]);
    // Sent by the server with splice, not read through the body: counted as such.
    assert_eq!(gw.passed_through("splice"), 2);
    assert_eq!(gw.passed_through("copy"), 0);
    assert_eq!(
        up.connections.load(Ordering::SeqCst),
        1,
        "each spliced answer ended exactly, so its connection went back to the pool"
    );
}

#[tokio::test]
async fn an_answer_that_stalls_is_cut_at_the_deadline_and_its_connection_closed() {
    let stalls = Answer::Pauses {
        len: LARGE,
        sent: 200 * 1024,
        resume: Arc::new(Notify::new()),
    };
    let up = upstream(vec![stalls, Answer::Whole(LARGE)]).await;
    let gw = gateway(route_with_response_timeout(
        &up.url,
        Duration::from_millis(300),
    ))
    .await;

    let mut client = TcpStream::connect(gw.addr).await.expect("connect");
    let cut = call(&mut client, None).await;
    assert_eq!(cut.status, 200);
    assert!(!cut.complete, "a cut answer must not look whole");
    assert!(cut.body.len() < LARGE && body_of(LARGE).starts_with(&cut.body));

    // The cut connection, with the rest of its answer unread, carries nothing more.
    let mut client = TcpStream::connect(gw.addr).await.expect("connect");
    let next = call(&mut client, None).await;
    assert!(next.complete && next.body == body_of(LARGE));
    assert_eq!(*gw.passthrough.lock().unwrap(), [true, true]);
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_client_that_leaves_mid_answer_takes_the_upstream_connection_with_it() {
    let resume = Arc::new(Notify::new());
    let pauses = Answer::Pauses {
        len: LARGE,
        sent: 200 * 1024,
        resume: resume.clone(),
    };
    let up = upstream(vec![pauses, Answer::Whole(LARGE)]).await;
    let gw = gateway(route(&up.url)).await;

    let mut client = TcpStream::connect(gw.addr).await.expect("connect");
    let partial = call(&mut client, Some(64 * 1024)).await;
    assert!(!partial.complete);
    // What the body holds (a client's slot, in the gateway) is held while it is spliced.
    assert_eq!(gw.bodies_alive(), 1);
    // Gone with bytes unread (a reset); only then does the upstream send the rest.
    drop(client);
    resume.notify_one();

    let mut client = TcpStream::connect(gw.addr).await.expect("connect");
    let next = call(&mut client, None).await;
    assert!(next.complete && next.body == body_of(LARGE));
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    // Both bodies went, and with them what they held.
    tokio::time::timeout(WAIT, async {
        while gw.bodies_alive() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every body dropped");
}
