use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::TlsAcceptor;

use crate::tls::TlsServer;

/// One request exactly as the upstream received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: Method,
    /// HTTP/1.1, or HTTP/2 when a TLS upstream negotiated `h2` by ALPN.
    pub version: http::Version,
    /// Path and query as sent on the request line.
    pub target: String,
    /// The request's authority: HTTP/2's `:authority`; `None` on HTTP/1.1, which names it in
    /// the Host header.
    pub authority: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl RecordedRequest {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("recorded body is JSON")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

type StreamRx = mpsc::Receiver<Bytes>;

/// What the fake upstream answers.
#[derive(Debug)]
pub enum Reply {
    /// A complete response.
    Full {
        status: StatusCode,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
    /// `text/event-stream` whose chunks the test feeds through the channel; the stream ends when
    /// the sender is dropped.
    Stream {
        headers: Vec<(String, String)>,
        chunks: StreamRx,
    },
    /// Waits, then answers.
    Delayed(Duration, Box<Reply>),
}

impl Reply {
    pub fn json(status: u16, body: serde_json::Value) -> Self {
        Reply::Full {
            status: StatusCode::from_u16(status).expect("valid status"),
            headers: vec![("content-type".into(), "application/json".into())],
            body: Bytes::from(body.to_string()),
        }
    }

    pub fn status(status: u16) -> Self {
        Reply::Full {
            status: StatusCode::from_u16(status).expect("valid status"),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// A whole SSE response with these raw event blocks.
    pub fn sse(events: &[&str]) -> Self {
        Reply::Full {
            status: StatusCode::OK,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Bytes::from(events.concat()),
        }
    }

    /// A streamed SSE response and the sender that feeds it.
    pub fn sse_stream() -> (Self, mpsc::Sender<Bytes>) {
        let (tx, rx) = mpsc::channel(16);
        (
            Reply::Stream {
                headers: vec![("content-type".into(), "text/event-stream".into())],
                chunks: rx,
            },
            tx,
        )
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        match &mut self {
            Reply::Full { headers, .. } | Reply::Stream { headers, .. } => {
                headers.push((name.into(), value.into()))
            }
            Reply::Delayed(_, inner) => {
                let inner_reply = std::mem::replace(inner.as_mut(), Reply::status(500));
                **inner = inner_reply.with_header(name, value);
            }
        }
        self
    }
}

type Responder = dyn Fn(&RecordedRequest) -> Reply + Send + Sync;

/// A fake MCP upstream on `127.0.0.1:0` that records every request and answers with the
/// responder's [`Reply`]. Stops when dropped.
pub struct RecordingUpstream {
    addr: SocketAddr,
    /// `http` or, behind TLS, `https`.
    scheme: &'static str,
    recorded: Arc<Mutex<Vec<RecordedRequest>>>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for RecordingUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RecordingUpstream {
    /// Answers requests with an empty JSON-RPC result echoing their id, notifications and
    /// responses with 202.
    pub async fn start() -> Self {
        Self::with_responder(default_reply).await
    }

    pub async fn with_responder(
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::serve(None, Arc::new(responder)).await
    }

    /// [`Self::start`] behind TLS: `https://127.0.0.1:<port>/mcp`, HTTP/2 or HTTP/1.1 as ALPN
    /// picks. A connection whose handshake fails records nothing.
    pub async fn start_tls(tls: &TlsServer) -> Self {
        Self::with_tls_responder(tls, default_reply).await
    }

    pub async fn with_tls_responder(
        tls: &TlsServer,
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::serve(Some(TlsAcceptor::from(tls.config())), Arc::new(responder)).await
    }

    async fn serve(tls: Option<TlsAcceptor>, responder: Arc<Responder>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake upstream");
        let addr = listener.local_addr().expect("local addr");
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = oneshot::channel::<()>();
        let log = recorded.clone();
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let log = log.clone();
                        let responder = responder.clone();
                        let tls = tls.clone();
                        tokio::spawn(serve_connection(stream, tls, log, responder));
                    }
                }
            }
        });
        Self {
            addr,
            scheme,
            recorded,
            _stop: stop,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/mcp`, or `https://…` behind TLS.
    pub fn url(&self) -> String {
        format!("{}://{}/mcp", self.scheme, self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.recorded.lock().expect("recording lock").clone()
    }

    /// Every JSON-RPC message received so far, in order, with batches flattened into their
    /// members. Bodies that are not JSON are left out.
    pub fn messages(&self) -> Vec<serde_json::Value> {
        self.requests()
            .iter()
            .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
            .flat_map(|body| match body {
                serde_json::Value::Array(members) => members,
                single => vec![single],
            })
            .collect()
    }

    /// The `params` of every `tools/call` received so far, in order: requests, id-less
    /// (notification-shaped) ones and batch members alike. "Nothing ran" is this being empty.
    pub fn tool_calls(&self) -> Vec<serde_json::Value> {
        self.messages()
            .into_iter()
            .filter(|m| m.get("method").and_then(serde_json::Value::as_str) == Some("tools/call"))
            .map(|m| m.get("params").cloned().unwrap_or(serde_json::Value::Null))
            .collect()
    }

    /// Every `tools/call` received so far, as [`Self::tool_calls`] lists them, each as its tool's
    /// name and the part of its `params` at the JSON `pointer`: `"/arguments"` for the
    /// arguments, `""` for the whole `params` (`Value::Null` where there is no such part).
    pub fn tool_calls_by_name(&self, pointer: &str) -> Vec<(String, serde_json::Value)> {
        self.tool_calls()
            .iter()
            .map(|params| {
                (
                    params["name"].as_str().unwrap_or_default().to_owned(),
                    params
                        .pointer(pointer)
                        .cloned()
                        .unwrap_or(serde_json::Value::Null),
                )
            })
            .collect()
    }
}

/// Serves one accepted connection: plain HTTP/1.1, or TLS with the protocol ALPN picked.
async fn serve_connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    log: Arc<Mutex<Vec<RecordedRequest>>>,
    responder: Arc<Responder>,
) {
    let service = service_fn(move |request: Request<Incoming>| {
        let log = log.clone();
        let responder = responder.clone();
        async move { Ok::<_, Infallible>(answer(request, &log, &*responder).await) }
    });
    let Some(acceptor) = tls else {
        let _ = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
        return;
    };
    let Ok(stream) = acceptor.accept(stream).await else {
        return;
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        let _ = http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    } else {
        let _ = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    }
}

async fn answer(
    request: Request<Incoming>,
    log: &Mutex<Vec<RecordedRequest>>,
    responder: &Responder,
) -> Response<BoxBody<Bytes, Infallible>> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let recorded = RecordedRequest {
        method: parts.method,
        version: parts.version,
        target: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        authority: parts.uri.authority().map(|a| a.to_string()),
        headers: parts.headers,
        body,
    };
    log.lock().expect("recording lock").push(recorded.clone());
    let mut reply = responder(&recorded);
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut response = Response::new(Full::new(body).boxed());
            *response.status_mut() = status;
            apply_headers(response.headers_mut(), &headers);
            response
        }
        Reply::Stream { headers, chunks } => {
            let frames = futures_stream(chunks);
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
            apply_headers(response.headers_mut(), &headers);
            response
        }
        Reply::Delayed(..) => unreachable!("delays are unwrapped above"),
    }
}

fn apply_headers(map: &mut HeaderMap, headers: &[(String, String)]) {
    for (name, value) in headers {
        map.append(
            header::HeaderName::try_from(name.as_str()).expect("valid header name"),
            HeaderValue::try_from(value.as_str()).expect("valid header value"),
        );
    }
}

fn futures_stream(
    mut chunks: StreamRx,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    futures_util::stream::poll_fn(move |cx| {
        chunks.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    })
}

fn default_reply(request: &RecordedRequest) -> Reply {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&request.body) else {
        return Reply::status(202);
    };
    match (value.get("id"), value.get("method")) {
        (Some(id), Some(_)) => Reply::json(
            200,
            serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        ),
        _ => Reply::status(202),
    }
}
