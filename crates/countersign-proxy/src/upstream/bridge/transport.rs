//! The HTTP side of the bridge: what a request asks for, and the answers a well-behaved
//! Streamable HTTP server gives (the status codes and JSON-RPC errors of the MCP SDKs'
//! servers, so clients recover the way they do with those).

use bytes::Bytes;
use countersign_jsonrpc::message::{Message, Payload, RequestId, error_response};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::stream::EventStream;
use crate::body::{ResponseBody, empty, full};
use crate::wire::MCP_PROTOCOL_VERSION;

/// The session header, as the gateway assigns and reads it.
pub(super) const MCP_SESSION_ID: &str = "mcp-session-id";
/// JSON-RPC code of "Session not found" (the TypeScript SDK's; clients re-initialize on 404).
const SESSION_NOT_FOUND: i64 = -32001;
/// The first stateless revision: requests of it or later carry no session.
const FIRST_STATELESS_REVISION: &str = "2026-07-28";
/// `_meta` key of a 2026-07-28 request's protocol version.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// The client's session id, when it sent one.
pub(super) fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(MCP_SESSION_ID).and_then(|v| v.to_str().ok())
}

/// Whether the client accepts `text/event-stream` (and, for a POST, JSON too), as the
/// Streamable HTTP transport requires.
pub(super) fn accepts(headers: &HeaderMap, also_json: bool) -> bool {
    let mut event_stream = false;
    let mut json = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for media in value.split(',') {
            let essence = media.split(';').next().unwrap_or_default().trim();
            match essence.to_ascii_lowercase().as_str() {
                "text/event-stream" => event_stream = true,
                "application/json" => json = true,
                "*/*" => {
                    event_stream = true;
                    json = true;
                }
                _ => {}
            }
        }
    }
    event_stream && (json || !also_json)
}

/// A request of the stateless 2026-07-28 revision: by its `MCP-Protocol-Version` header, or by
/// the protocol version in the `_meta` of one of its messages.
pub(super) fn is_stateless(headers: &HeaderMap, payload: Option<&Payload>) -> bool {
    let by_header = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_stateless_revision);
    by_header
        || payload.is_some_and(|payload| {
            payload.messages().iter().any(|m| {
                m.params()
                    .and_then(|p| p.get("_meta"))
                    .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
                    .and_then(|v| v.as_str().map(|v| is_stateless_revision(&v)))
                    .unwrap_or(false)
            })
        })
}

fn is_stateless_revision(version: &str) -> bool {
    // Revisions are dates: later ones sort later.
    version.len() == FIRST_STATELESS_REVISION.len() && version >= FIRST_STATELESS_REVISION
}

/// The single `initialize` request of a body, if that is what it is.
pub(super) fn initialize(payload: &Payload) -> Option<&countersign_jsonrpc::message::Request> {
    match payload {
        Payload::Single(Message::Request(request)) if request.method == "initialize" => {
            Some(request)
        }
        _ => None,
    }
}

/// A body's messages, read as the bytes the forwarder sent.
pub(super) async fn read_payload(
    body: http_body_util::Full<Bytes>,
) -> Result<Payload, Response<ResponseBody>> {
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    Payload::parse_with(bytes, &countersign_jsonrpc::ParseLimits::default()).map_err(|error| {
        json_error(
            StatusCode::BAD_REQUEST,
            None,
            i64::from(error.jsonrpc_code()),
            &error.to_string(),
        )
    })
}

/// A JSON-RPC error as the whole answer.
pub(super) fn json_error(
    status: StatusCode,
    id: Option<&RequestId>,
    code: i64,
    message: &str,
) -> Response<ResponseBody> {
    let mut response = Response::new(full(error_response(id, code, message, None)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// 404 for an unknown, ended or reaped session: the client starts a new one.
pub(super) fn session_not_found() -> Response<ResponseBody> {
    json_error(
        StatusCode::NOT_FOUND,
        None,
        SESSION_NOT_FOUND,
        "Session not found",
    )
}

/// 400 for a request that needs a session but names none.
pub(super) fn session_required() -> Response<ResponseBody> {
    json_error(
        StatusCode::BAD_REQUEST,
        None,
        crate::error::code::TRANSPORT,
        "Bad Request: Mcp-Session-Id header is required",
    )
}

/// 400 for a 2026-07-28 request to an upstream that only has sessions. The error is not one of
/// the modern revision's own, so a dual-era client falls back to `initialize`, as the revision's
/// version negotiation prescribes.
pub(super) fn sessions_only(upstream: &str) -> Response<ResponseBody> {
    json_error(
        StatusCode::BAD_REQUEST,
        None,
        crate::error::code::TRANSPORT,
        &format!(
            "Bad Request: upstream `{upstream}` speaks only the 2024-11-05 HTTP+SSE transport; \
             open a session with initialize"
        ),
    )
}

/// 406 for a client that does not accept what the transport answers with.
pub(super) fn not_acceptable(also_json: bool) -> Response<ResponseBody> {
    let what = if also_json {
        "Not Acceptable: Client must accept both application/json and text/event-stream"
    } else {
        "Not Acceptable: Client must accept text/event-stream"
    };
    json_error(
        StatusCode::NOT_ACCEPTABLE,
        None,
        crate::error::code::TRANSPORT,
        what,
    )
}

/// 202 for a body of notifications and responses only.
pub(super) fn accepted() -> Response<ResponseBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// 200 with an empty body (a DELETE that ended its session).
pub(super) fn ok() -> Response<ResponseBody> {
    Response::new(empty())
}

/// 405 for a method the endpoint does not serve (GET and DELETE of a stateless client).
pub(super) fn method_not_allowed() -> Response<ResponseBody> {
    let mut response = json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        crate::error::code::TRANSPORT,
        "Method Not Allowed: this revision has no GET stream or DELETE",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

/// 200 `text/event-stream` carrying the messages of `rx`; `guards` live as long as the body.
pub(super) fn event_stream(
    rx: mpsc::Receiver<Bytes>,
    guards: Vec<Box<dyn Send>>,
    session: Option<&str>,
) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::new(EventStream::new(rx, guards)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(session) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert(MCP_SESSION_ID, session);
    }
    response
}
