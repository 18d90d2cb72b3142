//! The JSON-RPC 2.0 envelope, validated strictly and re-serialized canonically.
//!
//! [`Payload::parse`] is the only way bytes become messages: strict JSON first
//! ([`crate::strict`]), then the envelope rules below. The gateway classifies the resulting
//! [`Message`] and forwards [`Message::to_vec`], never the client's bytes, so fields this module
//! does not model can never reach an upstream unseen.
//!
//! Params, results and error data stay [`RawJson`]: slices of the body, validated by the strict
//! parse and read lazily, so a message costs about its own size in memory however it is shaped.
//!
//! Envelope rules (each refusal is an [`EnvelopeError`], JSON-RPC `-32600`):
//! - the body is an object, or a non-empty array of objects (a batch);
//! - `jsonrpc` is exactly the string `"2.0"`;
//! - top-level members come only from `jsonrpc`, `id`, `method`, `params`, `result`, `error`;
//! - no two keys at the top level, in `params` or in `params._meta` collide under
//!   [`fold_key`](crate::fold::fold_key);
//! - a request or notification has a visible-ASCII `method` of 1..=128 bytes, no
//!   `result`/`error`, and `params` (if present) is an object;
//! - the presence of `id` makes a request; a request id is an integer that fits `i64` or a
//!   string of at most 256 bytes (`null`, floats, booleans, objects and arrays are refused);
//! - a response has exactly one of `result` and `error`, no `params`; a result response has a
//!   valid id, an error response may have a `null` or absent id;
//! - an error object has exactly an integer `code`, a string `message` and optional `data`.
//!
//! This file holds the message types, their accessors and the byte-level entry points
//! ([`Message::parse`], [`Payload::parse`]); the child module `envelope` checks the rules above
//! on a validated value, and `serialize` writes the canonical form.

use std::fmt;

use bytes::Bytes;
use serde::ser::{Serialize, Serializer};
use serde_json::Value;

use crate::raw::RawJson;
use crate::strict::{self, ParseError, ParseLimits, SERDE_JSON_NUMBER_TOKEN};

mod envelope;
mod params;
mod serialize;
#[cfg(test)]
mod tests;
mod top_level;

pub(crate) use envelope::KeyFolds;
pub use envelope::{EnvelopeError, validate_method};
pub use params::Params;
pub use serialize::{compact_result_response, error_response};
pub use top_level::{TopLevel, TopLevelScan, answer_id};

/// JSON-RPC "Parse error".
pub const PARSE_ERROR: i32 = -32700;
/// JSON-RPC "Invalid Request".
pub const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC "Method not found".
pub const METHOD_NOT_FOUND: i32 = -32601;
/// JSON-RPC "Invalid params".
pub const INVALID_PARAMS: i32 = -32602;
/// JSON-RPC "Internal error".
pub const INTERNAL_ERROR: i32 = -32603;

/// Longest accepted string request id, in bytes. Ids are echoed into logs, audit lines and
/// responses; nothing legitimate needs more.
pub const MAX_STRING_ID_BYTES: usize = 256;

/// Longest accepted method name, in bytes.
pub const MAX_METHOD_BYTES: usize = 128;

const JSONRPC_VERSION: &str = "2.0";

/// A JSON-RPC request id: an integer or a string, never `null`.
///
/// Ids are compared by type and value, so `1` and `"1"` are different ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    /// The id as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => Value::Number((*n).into()),
            RequestId::String(s) => Value::String(s.clone()),
        }
    }
}

/// Renders the id as JSON (`7`, `"7"`), so a number and a string never print alike.
impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{}", Value::String(s.clone())),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Number(n)
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Number(n) => serializer.serialize_i64(*n),
            RequestId::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for RequestId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RequestIdVisitor)
    }
}

struct RequestIdVisitor;

impl<'de> serde::de::Visitor<'de> for RequestIdVisitor {
    type Value = RequestId;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an integer that fits in 64 bits or a string of at most {MAX_STRING_ID_BYTES} bytes"
        )
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RequestId, E> {
        Ok(RequestId::Number(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RequestId, E> {
        i64::try_from(v)
            .map(RequestId::Number)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RequestId, E> {
        if v.len() > MAX_STRING_ID_BYTES {
            return Err(E::invalid_length(v.len(), &self));
        }
        Ok(RequestId::String(v.to_owned()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RequestId, A::Error> {
        // With `arbitrary_precision`, serde_json hands over integers beyond u64 and all
        // non-integers as a single-entry map holding the number text.
        let key: Option<String> = map.next_key()?;
        if key.as_deref() != Some(SERDE_JSON_NUMBER_TOKEN) {
            return Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Map,
                &self,
            ));
        }
        let text = map.next_value_seed(strict::NumberTextSeed)?;
        if map.next_key::<serde::de::IgnoredAny>()?.is_some() {
            return Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Map,
                &self,
            ));
        }
        let number: serde_json::Number = text.parse().map_err(|_| {
            serde::de::Error::invalid_value(serde::de::Unexpected::Str(&text), &self)
        })?;
        canonical_i64(number.as_str())
            .map(RequestId::Number)
            .ok_or_else(|| {
                serde::de::Error::invalid_value(serde::de::Unexpected::Str(&text), &self)
            })
    }
}

/// The integer a number's text denotes, only when re-serializing it gives back the same text.
///
/// Refuses fractions and exponents (`1.0`, `1e2`), values outside `i64`, and `-0`, which would
/// otherwise be echoed back as `0`.
fn canonical_i64(text: &str) -> Option<i64> {
    if text == "-0" {
        return None;
    }
    text.parse::<i64>().ok()
}

/// A JSON-RPC request: has an id and expects a response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    /// Always an object when present.
    pub params: Option<Params>,
}

impl Request {
    /// `params[key]`, if `params` is present and has that member.
    pub fn param(&self, key: &str) -> Option<RawJson> {
        self.params.as_ref()?.get(key)
    }
}

/// A JSON-RPC notification: no id, no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    /// Always an object when present.
    pub params: Option<Params>,
}

/// The `error` member of an error response.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    pub data: Option<RawJson>,
}

/// A JSON-RPC response. `id` is `None` only for error responses whose request id could not be
/// determined (serialized as `"id":null`, as JSON-RPC 2.0 requires).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Option<RequestId>,
    pub outcome: Result<RawJson, ErrorObject>,
}

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// A POST body: one message or a batch (JSON-RPC batches exist in MCP 2024-11-05 and 2025-03-26).
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Single(Message),
    Batch(Vec<Message>),
}

/// Any reason bytes did not become a [`Payload`] or [`Message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
}

impl Error {
    /// `-32700` for parse failures, `-32600` for envelope failures.
    pub fn jsonrpc_code(&self) -> i32 {
        match self {
            Error::Parse(e) => e.jsonrpc_code(),
            Error::Envelope(e) => e.jsonrpc_code(),
        }
    }
}

impl Message {
    /// Strictly parses `bytes` as exactly one message (a batch is refused).
    pub fn parse(bytes: &[u8]) -> Result<Message, Error> {
        Self::parse_bytes(Bytes::copy_from_slice(bytes))
    }

    /// [`Message::parse`] keeping `bytes` as the message's storage (no copy).
    pub fn parse_bytes(bytes: Bytes) -> Result<Message, Error> {
        let (raw, folds, members) = RawJson::parse_noting_keys(bytes, &ParseLimits::default())?;
        Ok(Message::from_raw_with(&raw, folds, members.as_ref())?)
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) => None,
        }
    }

    /// The id of a request or response.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request(r) => Some(&r.id),
            Message::Notification(_) => None,
            Message::Response(r) => r.id.as_ref(),
        }
    }

    /// The params of a request or notification.
    pub fn params(&self) -> Option<&RawJson> {
        match self {
            Message::Request(r) => r.params.as_deref(),
            Message::Notification(n) => n.params.as_deref(),
            Message::Response(_) => None,
        }
    }
}

impl Payload {
    /// Strict parse with [`ParseLimits::default`], then [`Payload::from_raw`].
    pub fn parse(bytes: &[u8]) -> Result<Payload, Error> {
        Self::parse_with(Bytes::copy_from_slice(bytes), &ParseLimits::default())
    }

    /// Strict parse with explicit limits, then [`Payload::from_raw`]. The messages keep slices
    /// of `bytes`; nothing is copied.
    pub fn parse_with(bytes: Bytes, limits: &ParseLimits) -> Result<Payload, Error> {
        let (raw, folds, members) = RawJson::parse_noting_keys(bytes, limits)?;
        Ok(Payload::from_raw_with(&raw, folds, members.as_ref())?)
    }

    /// The messages in order (one for a single message).
    pub fn messages(&self) -> &[Message] {
        match self {
            Payload::Single(m) => std::slice::from_ref(m),
            Payload::Batch(ms) => ms,
        }
    }

    /// The ids of its requests, in order: the answers the body is owed (notifications and
    /// responses are owed none).
    pub fn request_ids(&self) -> Vec<RequestId> {
        self.owed().cloned().collect()
    }

    /// [`Payload::request_ids`], borrowed.
    pub fn owed(&self) -> impl Iterator<Item = &RequestId> {
        self.messages().iter().filter_map(|message| match message {
            Message::Request(request) => Some(&request.id),
            Message::Notification(_) | Message::Response(_) => None,
        })
    }

    /// Whether the body was a JSON array.
    pub fn is_batch(&self) -> bool {
        matches!(self, Payload::Batch(_))
    }
}
