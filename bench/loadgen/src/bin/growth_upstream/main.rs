//! A purpose-built MCP upstream for `bench/growth.sh`: just enough of 2025-11-25 Streamable
//! HTTP to measure how the gateway's cost grows, and fast enough that the direct figures are
//! the machine's, not this server's.
//!
//! - `initialize` answers with a fresh `Mcp-Session-Id`; notifications get 202;
//! - `tools/list` lists `list_products`, `get_blob` and `--tools` more (`list_item_NNNN`), all
//!   read-only;
//! - `tools/call get_blob {"bytes": N, "format": "json" | "sse"}` answers with a text result of
//!   N bytes, as one JSON body (with `Content-Length`) or one SSE event (chunked); any other
//!   call answers a small fixed result;
//! - `GET /mcp` with `Accept: text/event-stream` opens a stream that stays silent;
//!   `POST /push` sends one `notifications/message` event to every open stream and answers
//!   with how many it reached; `GET /streams` says how many are open.
//!
//! Sessions are not checked: the gateway, not this server, is under test.
//!
//! Usage: growth-upstream --listen 127.0.0.1:PORT [--tools N]

mod body;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use body::{Pieces, Stream};

type Answer = Response<Either<Pieces, Either<Stream, Empty<Bytes>>>>;

struct Upstream {
    /// The `tools` array of every listing, serialized once.
    tools: Bytes,
    sessions: AtomicU64,
    streams: Mutex<Vec<mpsc::UnboundedSender<Bytes>>>,
    /// Payloads of `get_blob` answers by size, made once each.
    blobs: Mutex<HashMap<usize, Bytes>>,
}

fn tools(extra: usize) -> Bytes {
    let tool = |name: String, description: &str| {
        json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100}
            }},
            "annotations": {"readOnlyHint": true, "destructiveHint": false}
        })
    };
    let mut list = vec![
        tool("list_products".into(), "List the products of the store."),
        tool(
            "get_blob".into(),
            "A text result of `bytes` bytes, as JSON or as one SSE event.",
        ),
    ];
    for i in 0..extra {
        list.push(tool(
            format!("list_item_{i:04}"),
            "List the items of one catalog section, with prices.",
        ));
    }
    Bytes::from(serde_json::to_vec(&list).expect("serializable"))
}

fn json_answer(pieces: Vec<Bytes>) -> Answer {
    Response::builder()
        .header("content-type", "application/json")
        .body(Either::Left(Pieces::json(pieces)))
        .expect("valid response")
}

fn status(code: StatusCode) -> Answer {
    Response::builder()
        .status(code)
        .body(Either::Right(Either::Right(Empty::new())))
        .expect("valid response")
}

impl Upstream {
    fn blob(&self, size: usize) -> Bytes {
        let mut blobs = self.blobs.lock().expect("lock");
        blobs
            .entry(size)
            .or_insert_with(|| {
                (0..size)
                    .map(|i| b'a' + (i % 26) as u8)
                    .collect::<Vec<u8>>()
                    .into()
            })
            .clone()
    }

    fn post(&self, message: &Value) -> Answer {
        let Some(id) = message.get("id") else {
            return status(StatusCode::ACCEPTED);
        };
        let id = id.to_string();
        let method = message.get("method").and_then(Value::as_str).unwrap_or("");
        match method {
            "initialize" => {
                let session = self.sessions.fetch_add(1, Ordering::Relaxed);
                let body = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {"listChanged": true}},
                    "serverInfo": {"name": "growth-upstream", "version": "1"}
                }});
                let mut answer = json_answer(vec![Bytes::from(body.to_string())]);
                answer.headers_mut().insert(
                    "mcp-session-id",
                    format!("growth-{session}").parse().expect("ASCII"),
                );
                answer
            }
            "tools/list" => json_answer(vec![
                Bytes::from(format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":"#
                )),
                self.tools.clone(),
                Bytes::from_static(b"}}"),
            ]),
            "tools/call" => self.call(&id, &message["params"]),
            "ping" => json_answer(vec![Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#
            ))]),
            _ => json_answer(vec![Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"unknown method"}}}}"#
            ))]),
        }
    }

    fn call(&self, id: &str, params: &Value) -> Answer {
        let args = &params["arguments"];
        if params["name"] != "get_blob" {
            return json_answer(vec![Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"[{{\"sku\":\"T-100\",\"name\":\"Wooden train set\",\"price\":39.5}}]"}}]}}}}"#
            ))]);
        }
        let size = args["bytes"].as_u64().unwrap_or(0) as usize;
        let head = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
        );
        let tail = r#""}]}}"#;
        if args["format"] == "sse" {
            let pieces = vec![
                Bytes::from(format!("event: message\ndata: {head}")),
                self.blob(size),
                Bytes::from(format!("{tail}\n\n")),
            ];
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(Either::Left(Pieces::chunked(pieces)))
                .expect("valid response")
        } else {
            json_answer(vec![
                Bytes::from(head),
                self.blob(size),
                Bytes::from_static(tail.as_bytes()),
            ])
        }
    }

    fn open_stream(&self) -> Answer {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.streams.lock().expect("lock").push(sender);
        Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(Either::Right(Either::Left(Stream::new(receiver))))
            .expect("valid response")
    }

    /// Sends one notification to every open stream; returns how many took it.
    fn push(&self) -> usize {
        let event = Bytes::from_static(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"growth push\"}}\n\n",
        );
        let mut streams = self.streams.lock().expect("lock");
        streams.retain(|stream| stream.send(event.clone()).is_ok());
        streams.len()
    }

    fn open_streams(&self) -> usize {
        let mut streams = self.streams.lock().expect("lock");
        streams.retain(|stream| !stream.is_closed());
        streams.len()
    }

    async fn serve(self: Arc<Self>, request: Request<Incoming>) -> Result<Answer, Infallible> {
        let (parts, body) = request.into_parts();
        let answer = match (parts.method, parts.uri.path()) {
            (Method::POST, "/mcp") => match body.collect().await {
                Ok(bytes) => match serde_json::from_slice::<Value>(&bytes.to_bytes()) {
                    Ok(message) => self.post(&message),
                    Err(_) => status(StatusCode::BAD_REQUEST),
                },
                Err(_) => status(StatusCode::BAD_REQUEST),
            },
            (Method::GET, "/mcp") => self.open_stream(),
            (Method::DELETE, "/mcp") => status(StatusCode::OK),
            (Method::POST, "/push") => json_answer(vec![Bytes::from(self.push().to_string())]),
            (Method::GET, "/streams") => {
                json_answer(vec![Bytes::from(self.open_streams().to_string())])
            }
            _ => status(StatusCode::NOT_FOUND),
        };
        Ok(answer)
    }
}

fn main() {
    let mut listen = None;
    let mut extra = 0;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = Some(value),
            "--tools" => extra = value.parse().expect("--tools N"),
            other => panic!("unknown argument {other}"),
        }
    }
    let listen = listen.expect("--listen ADDR");
    // Worker threads from TOKIO_WORKER_THREADS (tokio's own default: one per core).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let upstream = Arc::new(Upstream {
            tools: tools(extra),
            sessions: AtomicU64::new(0),
            streams: Mutex::new(Vec::new()),
            blobs: Mutex::new(HashMap::new()),
        });
        let listener = TcpListener::bind(&listen).await.expect("bind");
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request| upstream.clone().serve(request));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
}
