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
//! Usage: floor proxy|proxy-inline LISTEN UPSTREAM | floor hello LISTEN
//! (CT=1: current-thread runtime)
//! Build: cargo build --release --target-dir ../../target/floor

use std::convert::Infallible;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let listen = args[2].clone();
    let upstream = args.get(3).cloned();
    let rt = if std::env::var("CT").is_ok() { tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap() } else { tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap() };
    rt.block_on(async move {
        let l = TcpListener::bind(&listen).await.unwrap();
        loop {
            let (s, _) = l.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let mode = mode.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if mode == "hello" {
                    let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(&[b'x'; 445]))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
                } else {
                    let u = TcpStream::connect(upstream.unwrap()).await.unwrap();
                    u.set_nodelay(true).unwrap();
                    let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(u)).await.unwrap();
                    let inline = mode == "proxy-inline";
                    let conn = if inline { Some(conn) } else { tokio::spawn(conn); None };
                    let sender = std::sync::Arc::new(tokio::sync::Mutex::new(sender));
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let sender = sender.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let mut r = Request::builder().method(parts.method).uri(parts.uri.path()).header("host", "127.0.0.1").header("content-type", "application/json");
                            for (k, v) in parts.headers.iter() { if k.as_str().starts_with("mcp") || k == "accept" { r = r.header(k, v); } }
                            let mut s = sender.lock().await;
                            s.ready().await.unwrap();
                            let resp = s.send_request(r.body(Full::new(body)).unwrap()).await.unwrap();
                            drop(s);
                            let (p, b) = resp.into_parts();
                            let b = b.collect().await.unwrap().to_bytes();
                            Ok::<_, Infallible>(Response::from_parts(p, Full::new(b)))
                        }
                    });
                    let served = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc);
                    match conn {
                        // Both connections polled by this one task; the upstream's ends when the
                        // client's has ended and dropped the sender.
                        Some(conn) => { let _ = tokio::join!(served, conn); }
                        None => { let _ = served.await; }
                    }
                }
            });
        }
    });
}
