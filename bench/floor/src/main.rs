//! The yardstick for the gateway's HTTP plumbing: a proxy with hyper's HTTP/1.1 server in front
//! and one hyper `client::conn` connection per client connection behind, forwarding the body
//! and a few headers and inspecting nothing. What it costs per request (bench/instructions.sh
//! style callgrind counts, or CPU per request under wrk) is what hyper and tokio cost before the
//! gateway does any work of its own. `hello` mode answers by itself: hyper's server alone.
//!
//! `proxy-inline` is the same proxy with the upstream connection driven in the client
//! connection's own task instead of a task of its own: what keeping the connection in the
//! request's task would save (no cross-task wake-up per request and per response).
//!
//! `raw` is a proxy without hyper: `httparse` on both sides, one read and one write per message
//! in each direction, Content-Length bodies only. It answers how much of the distance to nginx
//! is hyper's and tokio's plumbing rather than the kernel's.
//!
//! `hybrid` is hyper's server in front of the raw proxy's upstream side: which half of hyper's
//! cost is the server's and which the client's.
//!
//! Usage: floor proxy|proxy-inline|raw|hybrid LISTEN UPSTREAM | floor hello LISTEN
//! (CT=1: current-thread runtime)
//! Build: cargo build --release --target-dir ../../target/floor

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let listen = args[2].clone();
    let upstream = args.get(3).cloned();
    let rt = if std::env::var("CT").is_ok() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    rt.block_on(async move {
        let l = TcpListener::bind(&listen).await.unwrap();
        loop {
            let (s, _) = l.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let mode = mode.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if mode == "raw" {
                    let _ = raw::serve(s, upstream.unwrap()).await;
                } else if mode == "hybrid" {
                    let _ = raw::serve_hybrid(s, upstream.unwrap()).await;
                } else if mode == "hello" {
                    let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                            &[b'x'; 445],
                        ))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                } else {
                    let u = TcpStream::connect(upstream.unwrap()).await.unwrap();
                    u.set_nodelay(true).unwrap();
                    let (sender, conn) =
                        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(u))
                            .await
                            .unwrap();
                    let inline = mode == "proxy-inline";
                    let conn = if inline {
                        Some(conn)
                    } else {
                        tokio::spawn(conn);
                        None
                    };
                    let sender = std::sync::Arc::new(tokio::sync::Mutex::new(sender));
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let sender = sender.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let mut r = Request::builder()
                                .method(parts.method)
                                .uri(parts.uri.path())
                                .header("host", "127.0.0.1")
                                .header("content-type", "application/json");
                            for (k, v) in parts.headers.iter() {
                                if k.as_str().starts_with("mcp") || k == "accept" {
                                    r = r.header(k, v);
                                }
                            }
                            let mut s = sender.lock().await;
                            s.ready().await.unwrap();
                            let resp = s
                                .send_request(r.body(Full::new(body)).unwrap())
                                .await
                                .unwrap();
                            drop(s);
                            let (p, b) = resp.into_parts();
                            let b = b.collect().await.unwrap().to_bytes();
                            Ok::<_, Infallible>(Response::from_parts(p, Full::new(b)))
                        }
                    });
                    let served = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc);
                    match conn {
                        // Both connections polled by this one task; the upstream's ends when the
                        // client's has ended and dropped the sender.
                        Some(conn) => {
                            let _ = tokio::join!(served, conn);
                        }
                        None => {
                            let _ = served.await;
                        }
                    }
                }
            });
        }
    });
}

mod raw {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// One message read into `buf`: the length of its head and the Content-Length of its body.
    fn head_len(buf: &[u8], request: bool) -> Option<(usize, usize)> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let (status, hs) = if request {
            let mut r = httparse::Request::new(&mut headers);
            (r.parse(buf).ok()?, r.headers)
        } else {
            let mut r = httparse::Response::new(&mut headers);
            (r.parse(buf).ok()?, r.headers)
        };
        let httparse::Status::Complete(n) = status else {
            return None;
        };
        let len = hs
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
            .unwrap_or(0);
        Some((n, len))
    }

    /// Reads one whole message into `buf` (which may hold the start of it), returning head and
    /// body lengths.
    async fn read_message(
        io: &mut TcpStream,
        buf: &mut Vec<u8>,
        request: bool,
    ) -> std::io::Result<Option<(usize, usize)>> {
        loop {
            if let Some((h, b)) = head_len(buf, request) {
                if buf.len() >= h + b {
                    return Ok(Some((h, b)));
                }
            }
            buf.reserve(4096);
            if io.read_buf(buf).await? == 0 {
                return Ok(None);
            }
        }
    }

    pub async fn serve(mut client: TcpStream, upstream: String) -> std::io::Result<()> {
        let mut up = TcpStream::connect(&upstream).await?;
        up.set_nodelay(true)?;
        let mut inbuf = Vec::with_capacity(4096);
        let mut upbuf = Vec::with_capacity(4096);
        let mut out = Vec::with_capacity(4096);
        loop {
            let Some((h, b)) = read_message(&mut client, &mut inbuf, true).await? else {
                return Ok(());
            };
            out.clear();
            out.extend_from_slice(
                b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n",
            );
            {
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut r = httparse::Request::new(&mut headers);
                let _ = r.parse(&inbuf[..h]);
                for hd in r.headers.iter() {
                    if hd.name.len() > 3 && hd.name[..3].eq_ignore_ascii_case("mcp")
                        || hd.name.eq_ignore_ascii_case("accept")
                    {
                        out.extend_from_slice(hd.name.as_bytes());
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(hd.value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
            }
            out.extend_from_slice(format!("content-length: {b}\r\n\r\n").as_bytes());
            out.extend_from_slice(&inbuf[h..h + b]);
            inbuf.drain(..h + b);
            up.write_all(&out).await?;
            let Some((rh, rb)) = read_message(&mut up, &mut upbuf, false).await? else {
                return Ok(());
            };
            out.clear();
            out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
            out.extend_from_slice(format!("content-length: {rb}\r\n\r\n").as_bytes());
            out.extend_from_slice(&upbuf[rh..rh + rb]);
            upbuf.drain(..rh + rb);
            client.write_all(&out).await?;
        }
    }

    /// hyper's server in front, the raw upstream side behind, in the request's own task.
    pub async fn serve_hybrid(client: TcpStream, upstream: String) -> std::io::Result<()> {
        use bytes::Bytes;
        use http_body_util::{BodyExt, Full};
        use hyper::{Request, Response, body::Incoming};
        use std::sync::Arc;
        use tokio::sync::Mutex;
        let up = TcpStream::connect(&upstream).await?;
        up.set_nodelay(true)?;
        let up = Arc::new(Mutex::new((
            up,
            Vec::with_capacity(4096),
            Vec::with_capacity(4096),
        )));
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let up = up.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                let mut guard = up.lock().await;
                let (io, upbuf, out) = &mut *guard;
                out.clear();
                out.extend_from_slice(
                    b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n",
                );
                for (k, v) in parts.headers.iter() {
                    if k.as_str().starts_with("mcp") || k == "accept" {
                        out.extend_from_slice(k.as_str().as_bytes());
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(v.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                }
                out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
                out.extend_from_slice(&body);
                io.write_all(out).await.unwrap();
                let (rh, rb) = read_message(io, upbuf, false).await.unwrap().unwrap();
                let answer = Bytes::copy_from_slice(&upbuf[rh..rh + rb]);
                upbuf.drain(..rh + rb);
                drop(guard);
                let mut response = Response::new(Full::new(answer));
                response.headers_mut().insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(client), svc)
            .await;
        Ok(())
    }
}
