//! MCP over Streamable HTTP in both eras: the session-based revisions (2025-03-26, 2025-06-18,
//! 2025-11-25) and the stateless 2026-07-28 one. Everything here is synchronous on an already
//! read body; `server.rs` owns the HTTP side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::store::DemoStore;
use crate::tools;

type Object = Map<String, Value>;

/// The stateless revision: no initialize, no session, version in every request's `_meta`.
const MODERN: &str = "2026-07-28";
/// Session revisions, newest first; the first is the answer to an unknown requested version.
const LEGACY: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// The only revision that allows JSON-RPC batches.
const BATCH_VERSION: &str = "2025-03-26";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// Bounds memory if a client initializes in a loop; a demo never needs more.
const MAX_SESSIONS: usize = 1024;
/// How long a 2026-07-28 client may cache `tools/list`; the catalog never changes.
const TOOLS_TTL_MS: u64 = 60_000;

pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

const INSTRUCTIONS: &str = "A demo toy store. Use list_products and get_order to look things up. \
create_order, adjust_stock, cancel_order and restock_all change the store's (in-memory) state.";

/// What to send back for one HTTP request to the MCP endpoint.
#[derive(Debug)]
pub(crate) enum Reply {
    /// 202, no body: the POST carried only notifications or responses.
    Accepted,
    /// 200, no body: a session was ended.
    Ended,
    /// A JSON body; `session` is set only on the response that carries an InitializeResult.
    Json {
        status: StatusCode,
        body: Value,
        session: Option<String>,
    },
}

impl Reply {
    fn json(status: StatusCode, body: Value) -> Self {
        let session = None; // only initialize sets one, and it builds its reply itself
        Self::Json {
            status,
            body,
            session,
        }
    }
}

/// A refusal of the whole exchange, decided before any method runs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    #[error("missing Mcp-Session-Id header; send initialize first")]
    MissingSession,
    #[error("session not found; send initialize to start a new one")]
    UnknownSession,
    #[error("too many open sessions")]
    TooManySessions,
    #[error("header mismatch: {0}")]
    HeaderMismatch(String),
    #[error("unsupported protocol version `{0}`")]
    UnsupportedVersion(String),
    #[error("origin not allowed")]
    ForbiddenOrigin,
    #[error("only POST and DELETE are served; this server sends no server-initiated messages")]
    MethodNotAllowed,
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    #[error("body too large")]
    BodyTooLarge,
    #[error("body not received in time")]
    BodyTimeout,
    #[error("could not read body")]
    BodyUnreadable,
}

impl Refusal {
    /// HTTP status and JSON-RPC code; no `_` arm, so a new variant forces a decision.
    fn status_and_code(&self) -> (StatusCode, i64) {
        match self {
            Self::Parse(_) => (StatusCode::BAD_REQUEST, -32700),
            Self::InvalidRequest(_) => (StatusCode::BAD_REQUEST, -32600),
            Self::MissingSession | Self::BodyUnreadable => (StatusCode::BAD_REQUEST, -32000),
            Self::UnknownSession => (StatusCode::NOT_FOUND, -32001),
            Self::TooManySessions => (StatusCode::SERVICE_UNAVAILABLE, -32000),
            Self::HeaderMismatch(_) => (StatusCode::BAD_REQUEST, -32020),
            Self::UnsupportedVersion(_) => (StatusCode::BAD_REQUEST, -32022),
            Self::ForbiddenOrigin => (StatusCode::FORBIDDEN, -32000),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, -32000),
            Self::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, -32000),
            Self::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, -32000),
            Self::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, -32000),
        }
    }

    /// The JSON-RPC error object; `id` is null when the request's id is not known.
    fn body(&self, id: Option<&Value>) -> Value {
        let code = self.status_and_code().1;
        let mut error = json!({"code": code, "message": self.to_string()});
        if let Self::UnsupportedVersion(requested) = self {
            let supported: Vec<&str> = [MODERN].into_iter().chain(LEGACY).collect();
            error["data"] = json!({"supported": supported, "requested": requested});
        }
        json!({"jsonrpc": "2.0", "id": id.cloned().unwrap_or(Value::Null), "error": error})
    }

    pub(crate) fn into_reply(self, id: Option<&Value>) -> Reply {
        Reply::json(self.status_and_code().0, self.body(id))
    }
}

/// Why a method could not run; answered as a JSON-RPC error for that request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MethodError {
    #[error("method not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidParams(String),
}

impl MethodError {
    fn code(&self) -> i64 {
        match self {
            Self::NotFound(_) => -32601,
            Self::InvalidParams(_) => -32602,
        }
    }

    fn status(&self, era: Era) -> StatusCode {
        match (self, era) {
            // 2026-07-28 servers answer unknown methods with 404 so dual-era clients can tell.
            (Self::NotFound(_), Era::Modern) => StatusCode::NOT_FOUND,
            (Self::NotFound(_), Era::Legacy) | (Self::InvalidParams(_), _) => StatusCode::OK,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    Legacy,
    Modern,
}

/// One JSON-RPC message, shape-checked.
#[derive(Debug)]
enum Message<'a> {
    Request {
        id: &'a Value,
        method: &'a str,
        params: Option<&'a Object>,
    },
    Notification {
        method: &'a str,
        params: Option<&'a Object>,
    },
    Response {
        id: &'a Value,
    },
}

impl<'a> Message<'a> {
    fn parse(value: &'a Value) -> Result<Self, Refusal> {
        let object = value
            .as_object()
            .ok_or(Refusal::InvalidRequest("a message must be a JSON object"))?;
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(Refusal::InvalidRequest("`jsonrpc` must be \"2.0\""));
        }
        let id = object.get("id");
        if let Some(id) = id
            && !(id.is_string() || id.is_number())
        {
            return Err(Refusal::InvalidRequest("`id` must be a string or a number"));
        }
        let params = match object.get("params") {
            None => None,
            Some(Value::Object(params)) => Some(params),
            Some(_) => return Err(Refusal::InvalidRequest("`params` must be an object")),
        };
        match (object.get("method"), id) {
            (Some(Value::String(method)), Some(id)) => Ok(Self::Request { id, method, params }),
            (Some(Value::String(method)), None) => Ok(Self::Notification { method, params }),
            (Some(_), _) => Err(Refusal::InvalidRequest("`method` must be a string")),
            (None, Some(id)) if object.contains_key("result") != object.contains_key("error") => {
                Ok(Self::Response { id })
            }
            (None, _) => Err(Refusal::InvalidRequest(
                "not a request, notification or response",
            )),
        }
    }

    fn id(&self) -> Option<&'a Value> {
        match self {
            Self::Request { id, .. } | Self::Response { id } => Some(id),
            Self::Notification { .. } => None,
        }
    }

    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`, as text even if mistyped.
    fn meta_version(&self) -> Option<String> {
        let params = match self {
            Self::Request { params, .. } | Self::Notification { params, .. } => (*params)?,
            Self::Response { .. } => return None,
        };
        let version = params.get("_meta")?.get(META_VERSION)?;
        Some(
            version
                .as_str()
                .map_or_else(|| version.to_string(), str::to_owned),
        )
    }
}

/// The MCP endpoint's state: the store plus the legacy sessions.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    store: DemoStore,
    sessions: Sessions,
}

impl Endpoint {
    pub(crate) fn new(store: DemoStore) -> Self {
        Self {
            store,
            sessions: Sessions::default(),
        }
    }

    /// Answers one POSTed body (already size-checked).
    pub(crate) fn post(&self, headers: &HeaderMap, body: &[u8]) -> Reply {
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(error) => return Refusal::Parse(error.to_string()).into_reply(None),
        };
        if let Value::Array(batch) = &value {
            return self
                .batch(headers, batch)
                .unwrap_or_else(|refusal| refusal.into_reply(None));
        }
        match Message::parse(&value) {
            Ok(message) => self
                .single(headers, &message)
                .unwrap_or_else(|refusal| refusal.into_reply(message.id())),
            Err(refusal) => refusal.into_reply(None),
        }
    }

    /// Ends the session named in the headers.
    pub(crate) fn delete(&self, headers: &HeaderMap) -> Reply {
        match self.sessions.close(headers) {
            Ok(()) => Reply::Ended,
            Err(refusal) => refusal.into_reply(None),
        }
    }

    fn single(&self, headers: &HeaderMap, message: &Message<'_>) -> Result<Reply, Refusal> {
        match era(headers, message)? {
            Era::Legacy => self.legacy(headers, message),
            Era::Modern => self.modern(headers, message),
        }
    }

    fn legacy(&self, headers: &HeaderMap, message: &Message<'_>) -> Result<Reply, Refusal> {
        // initialize is the one request that may (and must) arrive without a session.
        if let Message::Request {
            id,
            method: "initialize",
            params,
        } = message
        {
            return self.initialize(id, *params);
        }
        self.sessions.find(headers)?;
        let Message::Request { id, method, params } = message else {
            return Ok(Reply::Accepted);
        };
        let outcome = self.answer(Era::Legacy, method, *params);
        Ok(Reply::json(StatusCode::OK, response(id, outcome)))
    }

    fn initialize(&self, id: &Value, params: Option<&Object>) -> Result<Reply, Refusal> {
        let requested = params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = LEGACY
            .into_iter()
            .find(|v| Some(*v) == requested)
            .unwrap_or(LEGACY[0]);
        let session = self.sessions.open(version)?;
        tracing::debug!(version, "session opened");
        let result = json!({
            "protocolVersion": version,
            "capabilities": capabilities(),
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        });
        Ok(Reply::Json {
            status: StatusCode::OK,
            body: json!({"jsonrpc": "2.0", "id": id, "result": result}),
            session: Some(session),
        })
    }

    fn modern(&self, headers: &HeaderMap, message: &Message<'_>) -> Result<Reply, Refusal> {
        let (id, method, params) = match message {
            Message::Request { id, method, params } => (*id, *method, *params),
            Message::Notification { method, .. } => {
                expect_header(headers, METHOD_HEADER, method)?;
                return Ok(Reply::Accepted);
            }
            Message::Response { .. } => {
                return Err(Refusal::InvalidRequest(
                    "2026-07-28 clients must not send responses",
                ));
            }
        };
        // The headers let intermediaries route without parsing; a server that reads the body
        // must refuse any disagreement, or the two could be made to tell different stories.
        expect_header(headers, METHOD_HEADER, method)?;
        if method == "tools/call"
            && let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str)
        {
            expect_header(headers, NAME_HEADER, name)?;
        }
        let (status, body) = match self.answer(Era::Modern, method, params) {
            Ok(mut result) => {
                result.insert("resultType".into(), json!("complete"));
                (StatusCode::OK, response(id, Ok(result)))
            }
            Err(error) => (error.status(Era::Modern), response(id, Err(error))),
        };
        Ok(Reply::json(status, body))
    }

    /// JSON-RPC batches exist only in 2025-03-26; each element is answered on its own.
    fn batch(&self, headers: &HeaderMap, batch: &[Value]) -> Result<Reply, Refusal> {
        if self.sessions.find(headers)? != BATCH_VERSION {
            return Err(Refusal::InvalidRequest(
                "batches are only allowed in protocol revision 2025-03-26",
            ));
        }
        if batch.is_empty() {
            return Err(Refusal::InvalidRequest("empty batch"));
        }
        let responses: Vec<Value> = batch
            .iter()
            .filter_map(|item| self.batch_item(item))
            .collect();
        if responses.is_empty() {
            return Ok(Reply::Accepted);
        }
        Ok(Reply::json(StatusCode::OK, Value::Array(responses)))
    }

    fn batch_item(&self, item: &Value) -> Option<Value> {
        match Message::parse(item) {
            Err(refusal) => Some(refusal.body(None)),
            Ok(Message::Request {
                id,
                method: "initialize",
                ..
            }) => Some(
                Refusal::InvalidRequest("initialize must not be part of a batch").body(Some(id)),
            ),
            Ok(Message::Request { id, method, params }) => {
                Some(response(id, self.answer(Era::Legacy, method, params)))
            }
            Ok(Message::Notification { .. } | Message::Response { .. }) => None,
        }
    }

    fn answer(
        &self,
        era: Era,
        method: &str,
        params: Option<&Object>,
    ) -> Result<Object, MethodError> {
        let no_params = Map::new();
        match (era, method) {
            (_, "ping") => Ok(Map::new()),
            (_, "tools/list") => {
                let mut result = Map::new();
                result.insert("tools".into(), tools::definitions());
                if era == Era::Modern {
                    // 2026-07-28 list results must say how long and with whom they may be cached.
                    result.insert("ttlMs".into(), json!(TOOLS_TTL_MS));
                    result.insert("cacheScope".into(), json!("public"));
                }
                Ok(result)
            }
            (_, "tools/call") => tools::call(&self.store, params.unwrap_or(&no_params)),
            (Era::Modern, "server/discover") => Ok(discover()),
            _ => Err(MethodError::NotFound(method.to_owned())),
        }
    }
}

/// Which era a message belongs to. The `_meta` version and the `MCP-Protocol-Version` header
/// must agree; a modern header on a body without `_meta` is a mismatch too.
fn era(headers: &HeaderMap, message: &Message<'_>) -> Result<Era, Refusal> {
    let header = header_str(headers, VERSION_HEADER);
    match (message.meta_version().as_deref(), header) {
        (None, None) => Ok(Era::Legacy),
        (None, Some(version)) if LEGACY.contains(&version) => Ok(Era::Legacy),
        (None, Some(MODERN)) => Err(Refusal::HeaderMismatch(format!(
            "MCP-Protocol-Version is {MODERN} but params._meta has no protocol version"
        ))),
        (None, Some(version)) => Err(Refusal::UnsupportedVersion(version.to_owned())),
        (Some(meta), header) if header != Some(meta) => Err(Refusal::HeaderMismatch(format!(
            "MCP-Protocol-Version header {header:?} does not match params._meta version {meta:?}"
        ))),
        (Some(MODERN), _) => Ok(Era::Modern),
        (Some(meta), _) => Err(Refusal::UnsupportedVersion(meta.to_owned())),
    }
}

fn expect_header(headers: &HeaderMap, name: &str, expected: &str) -> Result<(), Refusal> {
    match header_str(headers, name) {
        Some(value) if value == expected => Ok(()),
        Some(value) => Err(Refusal::HeaderMismatch(format!(
            "{name} header {value:?} does not match the body's {expected:?}"
        ))),
        None => Err(Refusal::HeaderMismatch(format!("missing {name} header"))),
    }
}

/// A header's text; a value that is not visible ASCII reads as U+FFFD so it can never equal
/// an expected value (fail closed) rather than look absent.
fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .map(|value| value.to_str().unwrap_or("\u{fffd}"))
}

fn response(id: &Value, outcome: Result<Object, MethodError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": error.code(), "message": error.to_string()},
        }),
    }
}

fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

fn server_info() -> Value {
    json!({
        "name": "countersign-demo",
        "title": "countersign demo toy store",
        "version": env!("CARGO_PKG_VERSION"),
    })
}

fn discover() -> Object {
    let mut result = Map::new();
    result.insert("supportedVersions".into(), json!([MODERN]));
    result.insert("capabilities".into(), capabilities());
    result.insert("serverInfo".into(), server_info());
    result.insert("instructions".into(), json!(INSTRUCTIONS));
    result
}

/// Open legacy sessions and the revision each negotiated.
#[derive(Clone, Debug, Default)]
struct Sessions(Arc<Mutex<HashMap<String, &'static str>>>);

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, &'static str>> {
        // Every critical section is a single map operation, so a poisoned map is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self, version: &'static str) -> Result<String, Refusal> {
        let mut sessions = self.lock();
        if sessions.len() >= MAX_SESSIONS {
            return Err(Refusal::TooManySessions);
        }
        let id = Uuid::new_v4().to_string();
        sessions.insert(id.clone(), version);
        Ok(id)
    }

    fn find(&self, headers: &HeaderMap) -> Result<&'static str, Refusal> {
        let id = header_str(headers, SESSION_HEADER).ok_or(Refusal::MissingSession)?;
        self.lock().get(id).copied().ok_or(Refusal::UnknownSession)
    }

    fn close(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let id = header_str(headers, SESSION_HEADER).ok_or(Refusal::MissingSession)?;
        self.lock()
            .remove(id)
            .map(drop)
            .ok_or(Refusal::UnknownSession)
    }
}
