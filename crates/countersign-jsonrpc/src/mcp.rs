//! MCP vocabulary on top of the JSON-RPC model: protocol revisions, the standard method set,
//! reserved `_meta` keys, and the SEP-2243 mirrored-header value codec (MCP 2026-07-28).

use std::borrow::Cow;
use std::fmt;

use crate::raw::RawJson;

use crate::message::Request;

#[cfg(test)]
mod tests;

/// `_meta` key carrying the request's protocol revision (MCP 2026-07-28, required).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client's capabilities for this request (MCP 2026-07-28, required).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// 2026-07-28 request `_meta` key: the client's name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// 2026-07-28 request `_meta` key: the log level the client wants for this request.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// MCP error: HTTP headers do not match the body (2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP error: the request needs a client capability it did not declare (2026-07-28).
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP error: the requested protocol revision is not supported (2026-07-28).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// An MCP protocol revision. Ordered by date, so `>=` means "this revision or newer".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// Legacy HTTP+SSE transport.
    V2024_11_05,
    /// First Streamable HTTP revision; the last one with JSON-RPC batches.
    V2025_03_26,
    /// Batches removed; elicitation and `MCP-Protocol-Version` added.
    V2025_06_18,
    /// Tasks, URL elicitation, SSE polling.
    V2025_11_25,
    /// Stateless: no sessions, per-request `_meta`, mirrored headers, MRTR.
    V2026_07_28,
}

impl ProtocolVersion {
    /// The newest revision this crate knows.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// Every known revision, oldest first.
    pub const ALL: [ProtocolVersion; 5] = [
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2026_07_28,
    ];

    /// Exact, case-sensitive match on the revision string (`"2025-06-18"`).
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The revision string as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether a POST body may be a JSON-RPC batch. Batching was removed in 2025-06-18; the
    /// JSON-RPC layer of 2024-11-05 did not forbid it, so both older revisions allow it.
    pub fn allows_batches(self) -> bool {
        match self {
            ProtocolVersion::V2024_11_05 | ProtocolVersion::V2025_03_26 => true,
            ProtocolVersion::V2025_06_18
            | ProtocolVersion::V2025_11_25
            | ProtocolVersion::V2026_07_28 => false,
        }
    }

    /// Whether this is a stateless revision (no `initialize`, no sessions, per-request `_meta`,
    /// mirrored `Mcp-*` headers).
    pub fn is_stateless(self) -> bool {
        match self {
            ProtocolVersion::V2026_07_28 => true,
            ProtocolVersion::V2024_11_05
            | ProtocolVersion::V2025_03_26
            | ProtocolVersion::V2025_06_18
            | ProtocolVersion::V2025_11_25 => false,
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every standard request method, either direction, across 2024-11-05 … 2026-07-28.
pub const KNOWN_REQUEST_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
];

/// Every standard notification method, either direction, across 2024-11-05 … 2026-07-28.
pub const KNOWN_NOTIFICATION_METHODS: &[&str] = &[
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/message",
    "notifications/roots/list_changed",
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/elicitation/complete",
    "notifications/tasks/status",
    "notifications/subscriptions/acknowledged",
];

/// Whether `method` is a standard MCP request method (exact, case-sensitive).
pub fn is_known_request_method(method: &str) -> bool {
    KNOWN_REQUEST_METHODS.contains(&method)
}

/// Whether `method` is a standard MCP notification method (exact, case-sensitive).
pub fn is_known_notification_method(method: &str) -> bool {
    KNOWN_NOTIFICATION_METHODS.contains(&method)
}

/// Whether `method` is any standard MCP method of any revision, in either direction.
/// Exact byte comparison: `Tools/Call`, `tools/call ` and `tools//call` are unknown.
pub fn is_known_method(method: &str) -> bool {
    is_known_request_method(method) || is_known_notification_method(method)
}

fn request_meta(req: &Request) -> Option<RawJson> {
    req.param("_meta").filter(RawJson::is_object)
}

/// `params._meta["io.modelcontextprotocol/protocolVersion"]`, when it is a string.
pub fn request_protocol_version(req: &Request) -> Option<String> {
    Some(
        request_meta(req)?
            .get(META_PROTOCOL_VERSION)?
            .as_str()?
            .into_owned(),
    )
}

/// `params._meta["io.modelcontextprotocol/clientCapabilities"]`, when it is an object.
pub fn request_client_capabilities(req: &Request) -> Option<RawJson> {
    request_meta(req)?
        .get(META_CLIENT_CAPABILITIES)
        .filter(RawJson::is_object)
}

/// The body value the `Mcp-Name` header must mirror: `params.name` for `tools/call` and
/// `prompts/get`, `params.uri` for `resources/read`; `None` for other methods or when the
/// member is missing or not a string.
pub fn expected_mcp_name(req: &Request) -> Option<String> {
    let key = match req.method.as_str() {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    Some(req.param(key)?.as_str()?.into_owned())
}

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// Why a mirrored header value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderValueError {
    /// A plain value with a character outside space and visible ASCII.
    #[error("header value contains a character outside visible ascii")]
    InvalidCharacter,
    /// The sentinel markers overlap (`=?base64?=`).
    #[error("malformed base64 sentinel")]
    MalformedSentinel,
    /// The payload between the markers is not canonical, padded standard base64.
    #[error("invalid base64 in header value")]
    InvalidBase64,
    /// The decoded bytes are not UTF-8.
    #[error("decoded header value is not valid utf-8")]
    InvalidUtf8,
}

fn looks_like_sentinel(value: &str) -> bool {
    value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX)
}

/// Decodes a mirrored header value (`Mcp-Name`, `Mcp-Param-*`).
///
/// `=?base64?…?=` (markers exactly as written, lowercase) is decoded as strict padded standard
/// base64 that must yield UTF-8. Any other value is returned unchanged after checking it holds
/// only space and visible ASCII, so `=?BASE64?…?=` is a plain value and will not match the body.
/// A plain value is borrowed: every 2026-07-28 request has two of these headers to check.
pub fn decode_header_value(raw: &str) -> Result<Cow<'_, str>, HeaderValueError> {
    if looks_like_sentinel(raw) {
        let payload = raw
            .get(SENTINEL_PREFIX.len()..raw.len() - SENTINEL_SUFFIX.len())
            .ok_or(HeaderValueError::MalformedSentinel)?;
        let bytes = base64_decode(payload).ok_or(HeaderValueError::InvalidBase64)?;
        return String::from_utf8(bytes)
            .map(Cow::Owned)
            .map_err(|_| HeaderValueError::InvalidUtf8);
    }
    if raw.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        Ok(Cow::Borrowed(raw))
    } else {
        Err(HeaderValueError::InvalidCharacter)
    }
}

/// Encodes a body value for a mirrored header: the value itself when it is space and visible
/// ASCII without leading or trailing space and does not look like a sentinel, otherwise
/// `=?base64?<standard base64 of the UTF-8>?=`. A plain value is borrowed.
pub fn encode_header_value(value: &str) -> Cow<'_, str> {
    let plain = value.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !looks_like_sentinel(value);
    if plain {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(SENTINEL_PREFIX.len() + value.len().div_ceil(3) * 4 + 2);
    out.push_str(SENTINEL_PREFIX);
    base64_encode(value.as_bytes(), &mut out);
    out.push_str(SENTINEL_SUFFIX);
    Cow::Owned(out)
}

const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(input: &[u8], out: &mut String) {
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(BASE64_ALPHABET[((n >> shift) & 0x3F) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
}

fn base64_value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Strict RFC 4648 §4 decoding: padding required, no whitespace, and the unused bits of the
/// last group must be zero, so every byte string has exactly one accepted encoding.
fn base64_decode(input: &str) -> Option<Vec<u8>> {
    let input = input.as_bytes();
    if !input.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let groups = input.len() / 4;
    for (i, group) in input.chunks_exact(4).enumerate() {
        let last = i + 1 == groups;
        let padding = match group {
            [_, _, b'=', b'='] if last => 2,
            [_, _, _, b'='] if last => 1,
            _ => 0,
        };
        let mut n: u32 = 0;
        for &c in &group[..4 - padding] {
            n = (n << 6) | base64_value(c)?;
        }
        match padding {
            0 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]),
            1 => {
                if n & 0x3 != 0 {
                    return None;
                }
                let n = n >> 2;
                out.extend_from_slice(&[(n >> 8) as u8, n as u8]);
            }
            _ => {
                if n & 0xF != 0 {
                    return None;
                }
                out.push((n >> 4) as u8);
            }
        }
    }
    Some(out)
}
