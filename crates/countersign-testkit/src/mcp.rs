//! A scripted MCP server to put behind [`RecordingUpstream`], and builders for the messages
//! tests send through the gateway.
//!
//! The server is deliberately plain: it opens sessions, lists a fixed catalog, and answers every
//! `tools/call` with `ran <tool>`. What it *received* is the point; read it back with
//! [`RecordingUpstream::tool_calls`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};

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

/// A fake MCP server: sessions, a fixed tool catalog, and `ran <tool>` for every call.
#[derive(Debug, Clone)]
pub struct ScriptedServer {
    tools: Vec<Value>,
    instructions: Option<String>,
    sessions: Arc<AtomicU64>,
}

impl ScriptedServer {
    /// A server listing exactly `tools` (full definitions: `name`, `inputSchema`,
    /// `annotations`, ...).
    pub fn new(tools: Vec<Value>) -> Self {
        Self {
            tools,
            instructions: None,
            sessions: Arc::new(AtomicU64::new(0)),
        }
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
            message => match self.result_for(&message) {
                None => Reply::status(202),
                Some((answer, None)) => Reply::json(200, answer),
                Some((answer, Some(session))) => {
                    Reply::json(200, answer).with_header("mcp-session-id", &session)
                }
            },
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
            "tools/list" => json!({"tools": self.tools}),
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
/// `_meta`, with `extra_params` merged into `params`.
pub fn stateless_tool_call(
    id: impl Into<Value>,
    tool: &str,
    arguments: Value,
    capabilities: Value,
    extra_params: Map<String, Value>,
) -> Value {
    let mut call = tool_call(id, tool, arguments);
    call["params"]["_meta"] = json!({
        META_PROTOCOL_VERSION: "2026-07-28",
        META_CLIENT_CAPABILITIES: capabilities,
    });
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

/// An `initialize` request of protocol `version` declaring `capabilities`.
pub fn initialize(id: impl Into<Value>, version: &str, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": capabilities,
        "clientInfo": {"name": "countersign-tests", "version": "1"}}})
}
