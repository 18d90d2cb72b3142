//! A scripted MCP server to put behind [`RecordingUpstream`], builders for the messages tests
//! send through the gateway, and the exchanges they repeat with it: opening a session, holding a
//! call until the gateway asks its question, answering that question.
//!
//! The server is deliberately plain: it opens sessions, lists its catalog, and answers every
//! `tools/call` with `ran <tool>`; a test that needs more lets a handler answer some requests
//! first ([`ScriptedServer::with_handler`]). What it *received* is the point; read it back with
//! [`RecordingUpstream::tool_calls`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use serde_json::{Map, Value, json};

use crate::client::{Collected, SseStream, TestClient};
use crate::upstream::{RecordedRequest, RecordingUpstream, Reply};

/// `_meta` key of a 2026-07-28 request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of a 2026-07-28 request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// How long a test waits for any one step (a response, an SSE event) before it fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test with `what` if it takes longer than [`STEP_TIMEOUT`].
pub async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(STEP_TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {STEP_TIMEOUT:?} waiting for {what}"))
}

/// What a [`ScriptedServer`] answers a request with instead of its script, or `None`.
type Handler = dyn Fn(&Value) -> Option<Reply> + Send + Sync;

/// A fake MCP server: sessions, a tool catalog, and `ran <tool>` for every call.
#[derive(Clone)]
pub struct ScriptedServer {
    tools: Arc<Mutex<Vec<Value>>>,
    instructions: Option<String>,
    handler: Option<Arc<Handler>>,
    sessions: Arc<AtomicU64>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("tools", &self.tools)
            .field("instructions", &self.instructions)
            .field("handler", &self.handler.as_ref().map(|_| "..."))
            .finish_non_exhaustive()
    }
}

impl ScriptedServer {
    /// A server listing exactly `tools` (full definitions: `name`, `inputSchema`,
    /// `annotations`, ...).
    pub fn new(tools: Vec<Value>) -> Self {
        Self {
            tools: Arc::new(Mutex::new(tools)),
            instructions: None,
            handler: None,
            sessions: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The catalog it lists, shared: a change shows in the next `tools/list` answer.
    pub fn catalog(&self) -> Arc<Mutex<Vec<Value>>> {
        self.tools.clone()
    }

    /// Lets `handler` answer requests first: whatever reply it returns for a request (a message
    /// sent alone, not in a batch) is sent instead of the script's; `None` leaves the request to
    /// the script.
    pub fn with_handler(
        mut self,
        handler: impl Fn(&Value) -> Option<Reply> + Send + Sync + 'static,
    ) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// The `instructions` its `initialize` result carries.
    pub fn with_instructions(mut self, instructions: &str) -> Self {
        self.instructions = Some(instructions.to_owned());
        self
    }

    /// Starts it behind a [`RecordingUpstream`].
    pub async fn start(self) -> RecordingUpstream {
        RecordingUpstream::with_responder(move |request| self.answer(request)).await
    }

    /// The reply to one HTTP request. Batches get a JSON array with one response per request in
    /// them; notifications and responses get 202.
    pub fn answer(&self, request: &RecordedRequest) -> Reply {
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return Reply::status(202);
        };
        match body {
            Value::Array(messages) => {
                let answers: Vec<Value> = messages
                    .iter()
                    .filter_map(|m| self.result_for(m).map(|(answer, _)| answer))
                    .collect();
                if answers.is_empty() {
                    Reply::status(202)
                } else {
                    Reply::json(200, Value::Array(answers))
                }
            }
            message => match self.handler.as_ref().and_then(|handler| handler(&message)) {
                Some(reply) => reply,
                None => self.scripted_reply(&message),
            },
        }
    }

    fn scripted_reply(&self, message: &Value) -> Reply {
        match self.result_for(message) {
            None => Reply::status(202),
            Some((answer, None)) => Reply::json(200, answer),
            Some((answer, Some(session))) => {
                Reply::json(200, answer).with_header("mcp-session-id", &session)
            }
        }
    }

    /// The JSON-RPC response to `message` (with a new session id for `initialize`), or `None`
    /// for anything that is not a request.
    fn result_for(&self, message: &Value) -> Option<(Value, Option<String>)> {
        let id = message.get("id")?.clone();
        let method = message.get("method")?.as_str()?;
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let mut session = None;
        let result = match method {
            "initialize" => {
                let version = params["protocolVersion"].as_str().unwrap_or("2025-11-25");
                let mut result = json!({"protocolVersion": version, "capabilities": {"tools": {}},
                    "serverInfo": {"name": "store", "version": "1"}});
                if let Some(instructions) = &self.instructions {
                    result["instructions"] = Value::String(instructions.clone());
                }
                let n = self.sessions.fetch_add(1, Ordering::Relaxed);
                session = Some(format!("store-session-{n}"));
                result
            }
            "tools/list" => {
                let tools = self.tools.lock().expect("catalog lock").clone();
                json!({"tools": tools})
            }
            "tools/call" => {
                let tool = params["name"].as_str().unwrap_or_default();
                let mut result =
                    json!({"content": [{"type": "text", "text": format!("ran {tool}")}]});
                if params["_meta"].get(META_PROTOCOL_VERSION).is_some() {
                    result["resultType"] = json!("complete");
                }
                result
            }
            _ => json!({}),
        };
        Some((
            json!({"jsonrpc": "2.0", "id": id, "result": result}),
            session,
        ))
    }
}

/// A `tools/call` request.
pub fn tool_call(id: impl Into<Value>, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

/// A `tools/call` without an id: shaped as a JSON-RPC notification.
pub fn tool_call_notification(tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// An MCP 2026-07-28 (stateless) `tools/call`, its protocol version and client capabilities in
/// `_meta`, with `extra_params` (an object, or `Value::Null` for none) merged into `params`.
pub fn stateless_tool_call(
    id: impl Into<Value>,
    tool: &str,
    arguments: Value,
    capabilities: Value,
    extra_params: impl Into<Value>,
) -> Value {
    let mut call = tool_call(id, tool, arguments);
    call["params"]["_meta"] = json!({
        META_PROTOCOL_VERSION: "2026-07-28",
        META_CLIENT_CAPABILITIES: capabilities,
    });
    let extra_params = match extra_params.into() {
        Value::Object(extra) => extra,
        Value::Null => Map::new(),
        other => panic!("extra params must be an object, not {other}"),
    };
    if let Value::Object(params) = &mut call["params"] {
        params.extend(extra_params);
    }
    call
}

/// The headers a 2026-07-28 client sends with a `tools/call` of `tool`.
pub fn stateless_headers(tool: &str) -> [(&'static str, &str); 3] {
    [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ]
}

/// Client capabilities declaring form elicitation (2026-07-28 `_meta`, or `initialize`).
pub fn form_elicitation() -> Value {
    json!({"elicitation": {"form": {}}})
}

/// An `initialize` request of protocol `version` declaring `capabilities`.
pub fn initialize(id: impl Into<Value>, version: &str, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": capabilities,
        "clientInfo": {"name": "countersign-tests", "version": "1"}}})
}

/// The protocol version of the sessions [`open_session`] opens.
pub const SESSION_PROTOCOL_VERSION: &str = "2025-11-25";

/// The gateway's verdict in a `tools/call` answer: `result._meta["countersign/confirmation"]`
/// (`Value::Null` when the call simply ran).
pub fn confirmation(answer: &Value) -> &Value {
    &answer["result"]["_meta"]["countersign/confirmation"]
}

/// The confirmation token of a call the gateway held on the token channel; fails the test unless
/// `answer` is such a hold.
pub fn held_token(answer: &Value) -> String {
    assert_eq!(
        confirmation(answer)["status"],
        "requires_confirmation",
        "the call is held: {answer}"
    );
    confirmation(answer)["confirmationToken"]
        .as_str()
        .expect("a held call carries a token")
        .to_owned()
}

/// Opens a [`SESSION_PROTOCOL_VERSION`] session at `url` for a client declaring `capabilities`;
/// returns its `mcp-session-id`.
pub async fn open_session(url: &str, capabilities: Value) -> String {
    let body = initialize(0, SESSION_PROTOCOL_VERSION, capabilities).to_string();
    let response = within(
        "the answer to initialize",
        TestClient::default().post_json(url, &[], &body),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response
        .header("mcp-session-id")
        .expect("the store opens a session")
        .to_owned()
}

/// Sends a risky `call` on `session` (one whose client declared elicitation) and reads the held
/// call's event stream up to the gateway's `elicitation/create` question; returns the question
/// and the stream, still open.
pub async fn hold_on_stream(url: &str, session: &str, call: &Value) -> (Value, SseStream) {
    let response = within(
        "the held call's response",
        TestClient::default().send(
            Method::POST,
            url,
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("mcp-session-id", session),
                ("mcp-protocol-version", SESSION_PROTOCOL_VERSION),
            ],
            call.to_string(),
        ),
    )
    .await;
    assert_eq!(
        response.headers()[http::header::CONTENT_TYPE],
        "text/event-stream"
    );
    let mut stream = SseStream::new(response);
    let question = within("the gateway's question", stream.next_message()).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert!(question["id"].is_string(), "{question}");
    (question, stream)
}

/// Answers the gateway's question `question_id` on `session` with `result`.
pub async fn answer_question(
    url: &str,
    session: &str,
    question_id: &Value,
    result: Value,
) -> Collected {
    let answer = json!({"jsonrpc": "2.0", "id": question_id, "result": result});
    within(
        "the answer to the gateway's question",
        TestClient::default().post_json(
            url,
            &[
                ("mcp-session-id", session),
                ("mcp-protocol-version", SESSION_PROTOCOL_VERSION),
            ],
            &answer.to_string(),
        ),
    )
    .await
}
