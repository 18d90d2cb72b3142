//! The JSON-RPC 2.0 envelope, validated strictly and re-serialized canonically.
//!
//! [`Payload::parse`] is the only way bytes become messages: strict JSON first
//! ([`crate::strict`]), then the envelope rules below. The gateway classifies the resulting
//! [`Message`] and forwards [`Message::to_vec`], never the client's bytes, so fields this module
//! does not model can never reach an upstream unseen.
//!
//! Envelope rules (each refusal is an [`EnvelopeError`], JSON-RPC `-32600`):
//! - the body is an object, or a non-empty array of objects (a batch);
//! - `jsonrpc` is exactly the string `"2.0"`;
//! - top-level members come only from `jsonrpc`, `id`, `method`, `params`, `result`, `error`;
//! - no two keys at the top level, in `params` or in `params._meta` collide under
//!   [`fold_key`](crate::strict::fold_key);
//! - a request or notification has a visible-ASCII `method` of 1..=128 bytes, no
//!   `result`/`error`, and `params` (if present) is an object;
//! - the presence of `id` makes a request; a request id is an integer that fits `i64` or a
//!   string of at most 256 bytes (`null`, floats, booleans, objects and arrays are refused);
//! - a response has exactly one of `result` and `error`, no `params`; a result response has a
//!   valid id, an error response may have a `null` or absent id;
//! - an error object has exactly an integer `code`, a string `message` and optional `data`.

use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::strict::{self, ParseError, ParseLimits, SERDE_JSON_NUMBER_TOKEN};

#[cfg(test)]
mod tests;

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
    /// Validates an id value taken from a message.
    pub fn from_value(value: &Value) -> Result<RequestId, EnvelopeError> {
        match value {
            Value::Number(n) => {
                canonical_i64(n)
                    .map(RequestId::Number)
                    .ok_or(EnvelopeError::InvalidId {
                        reason: "number ids must be integers that fit in 64 bits",
                    })
            }
            Value::String(s) => {
                if s.len() > MAX_STRING_ID_BYTES {
                    Err(EnvelopeError::IdTooLong {
                        max: MAX_STRING_ID_BYTES,
                    })
                } else {
                    Ok(RequestId::String(s.clone()))
                }
            }
            Value::Null => Err(EnvelopeError::InvalidId {
                reason: "id must not be null",
            }),
            Value::Bool(_) | Value::Array(_) | Value::Object(_) => Err(EnvelopeError::InvalidId {
                reason: "id must be an integer or a string",
            }),
        }
    }

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
        canonical_i64(&number)
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
fn canonical_i64(n: &serde_json::Number) -> Option<i64> {
    let text = n.as_str();
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
    pub params: Option<Map<String, Value>>,
}

impl Request {
    /// `params[key]`, if `params` is present and has that member.
    pub fn param(&self, key: &str) -> Option<&Value> {
        self.params.as_ref()?.get(key)
    }
}

/// A JSON-RPC notification: no id, no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Option<Map<String, Value>>,
}

/// The `error` member of an error response.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl ErrorObject {
    fn from_value(value: Value) -> Result<ErrorObject, EnvelopeError> {
        let Value::Object(members) = value else {
            return Err(EnvelopeError::InvalidErrorObject {
                reason: "error must be an object",
            });
        };
        let (mut code, mut message, mut data) = (None, None, None);
        for (key, value) in members {
            match key.as_str() {
                "code" => code = Some(value),
                "message" => message = Some(value),
                "data" => data = Some(value),
                _ => return Err(EnvelopeError::UnknownMember { key }),
            }
        }
        let code = match code {
            Some(Value::Number(n)) => {
                canonical_i64(&n).ok_or(EnvelopeError::InvalidErrorObject {
                    reason: "error code must be an integer that fits in 64 bits",
                })?
            }
            Some(_) => {
                return Err(EnvelopeError::InvalidErrorObject {
                    reason: "error code must be an integer",
                });
            }
            None => {
                return Err(EnvelopeError::InvalidErrorObject {
                    reason: "error code is missing",
                });
            }
        };
        let message = match message {
            Some(Value::String(s)) => s,
            Some(_) => {
                return Err(EnvelopeError::InvalidErrorObject {
                    reason: "error message must be a string",
                });
            }
            None => {
                return Err(EnvelopeError::InvalidErrorObject {
                    reason: "error message is missing",
                });
            }
        };
        Ok(ErrorObject {
            code,
            message,
            data,
        })
    }

    /// The error object as a JSON value (`code`, `message`, then `data` when present).
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("code".to_owned(), Value::Number(self.code.into()));
        map.insert("message".to_owned(), Value::String(self.message.clone()));
        if let Some(data) = &self.data {
            map.insert("data".to_owned(), data.clone());
        }
        Value::Object(map)
    }
}

impl Serialize for ErrorObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2 + usize::from(self.data.is_some())))?;
        map.serialize_entry("code", &self.code)?;
        map.serialize_entry("message", &self.message)?;
        if let Some(data) = &self.data {
            map.serialize_entry("data", data)?;
        }
        map.end()
    }
}

/// A JSON-RPC response. `id` is `None` only for error responses whose request id could not be
/// determined (serialized as `"id":null`, as JSON-RPC 2.0 requires).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Option<RequestId>,
    pub outcome: Result<Value, ErrorObject>,
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

/// Why a well-formed JSON value is not an acceptable JSON-RPC message. Every variant maps to
/// JSON-RPC `-32600` (Invalid Request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is a scalar or `null`.
    #[error("body must be a json-rpc object or a non-empty array of objects")]
    InvalidBody,
    /// `[]`.
    #[error("batch must not be empty")]
    EmptyBatch,
    /// A message (or batch element) is not an object.
    #[error("message must be a json object")]
    NotAnObject,
    /// One element of a batch is invalid; the whole batch is refused.
    #[error("batch element {index}: {error}")]
    InBatch {
        index: usize,
        #[source]
        error: Box<EnvelopeError>,
    },
    /// `jsonrpc` is missing.
    #[error("missing \"jsonrpc\" member")]
    MissingVersion,
    /// `jsonrpc` is present but not the string `"2.0"`.
    #[error("\"jsonrpc\" must be the string \"2.0\"")]
    InvalidVersion,
    /// A member outside the JSON-RPC envelope (top level or error object).
    #[error("unknown member {key:?}")]
    UnknownMember { key: String },
    /// A known member where this kind of message must not have it (`params` on a response).
    #[error("member {key:?} is not allowed in a {kind}")]
    UnexpectedMember {
        key: &'static str,
        kind: &'static str,
    },
    /// Two keys that a case-insensitive or NUL-stripping decoder would treat as one.
    #[error("keys {first:?} and {second:?} collide when case-folded")]
    KeyCollision { first: String, second: String },
    /// `method` is not a string.
    #[error("\"method\" must be a string")]
    MethodNotString,
    /// `method` is empty, too long, or has characters outside visible ASCII.
    #[error("invalid method name: {reason}")]
    InvalidMethod { reason: &'static str },
    /// Neither `method` nor `result`/`error`.
    #[error("message has neither \"method\" nor \"result\"/\"error\"")]
    MissingMethod,
    /// `method` together with `result` or `error`.
    #[error("message has both \"method\" and \"result\"/\"error\"")]
    AmbiguousMessage,
    /// `params` is present and not an object (MCP uses by-name params only).
    #[error("\"params\" must be an object")]
    ParamsNotObject,
    /// An id of the wrong type or shape.
    #[error("invalid id: {reason}")]
    InvalidId { reason: &'static str },
    /// A string id longer than [`MAX_STRING_ID_BYTES`].
    #[error("string id longer than {max} bytes")]
    IdTooLong { max: usize },
    /// A result response without an id.
    #[error("result response is missing \"id\"")]
    MissingResponseId,
    /// A response with both `result` and `error`.
    #[error("response has both \"result\" and \"error\"")]
    ResultAndError,
    /// A malformed error object.
    #[error("invalid error object: {reason}")]
    InvalidErrorObject { reason: &'static str },
}

impl EnvelopeError {
    /// The JSON-RPC error code for this failure: always `-32600` (Invalid Request).
    pub fn jsonrpc_code(&self) -> i32 {
        match self {
            EnvelopeError::InvalidBody
            | EnvelopeError::EmptyBatch
            | EnvelopeError::NotAnObject
            | EnvelopeError::InBatch { .. }
            | EnvelopeError::MissingVersion
            | EnvelopeError::InvalidVersion
            | EnvelopeError::UnknownMember { .. }
            | EnvelopeError::UnexpectedMember { .. }
            | EnvelopeError::KeyCollision { .. }
            | EnvelopeError::MethodNotString
            | EnvelopeError::InvalidMethod { .. }
            | EnvelopeError::MissingMethod
            | EnvelopeError::AmbiguousMessage
            | EnvelopeError::ParamsNotObject
            | EnvelopeError::InvalidId { .. }
            | EnvelopeError::IdTooLong { .. }
            | EnvelopeError::MissingResponseId
            | EnvelopeError::ResultAndError
            | EnvelopeError::InvalidErrorObject { .. } => INVALID_REQUEST,
        }
    }
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

/// Checks a method name: 1..=128 bytes of visible ASCII (0x21..=0x7E).
///
/// Stricter than "no whitespace or control characters": MCP method names are ASCII, and
/// zero-width, bidi or confusable characters in a method have no legitimate use.
pub fn validate_method(method: &str) -> Result<(), EnvelopeError> {
    if method.is_empty() {
        return Err(EnvelopeError::InvalidMethod {
            reason: "method is empty",
        });
    }
    if method.len() > MAX_METHOD_BYTES {
        return Err(EnvelopeError::InvalidMethod {
            reason: "method is longer than 128 bytes",
        });
    }
    if !method.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(EnvelopeError::InvalidMethod {
            reason: "method must be visible ascii without whitespace or control characters",
        });
    }
    Ok(())
}

fn check_folds(map: &Map<String, Value>) -> Result<(), EnvelopeError> {
    match strict::fold_collision(map) {
        Some((first, second)) => Err(EnvelopeError::KeyCollision {
            first: first.to_owned(),
            second: second.to_owned(),
        }),
        None => Ok(()),
    }
}

fn validate_params(params: Option<Value>) -> Result<Option<Map<String, Value>>, EnvelopeError> {
    match params {
        None => Ok(None),
        Some(Value::Object(map)) => {
            check_folds(&map)?;
            if let Some(Value::Object(meta)) = map.get("_meta") {
                check_folds(meta)?;
            }
            Ok(Some(map))
        }
        Some(_) => Err(EnvelopeError::ParamsNotObject),
    }
}

impl Message {
    /// Validates one message value against the envelope rules.
    pub fn from_value(value: Value) -> Result<Message, EnvelopeError> {
        let Value::Object(members) = value else {
            return Err(EnvelopeError::NotAnObject);
        };
        // Before the whitelist, so `Method` next to `method` is reported as the collision it is.
        check_folds(&members)?;

        let (mut version, mut id, mut method, mut params, mut result, mut error) =
            (None, None, None, None, None, None);
        for (key, value) in members {
            let slot = match key.as_str() {
                "jsonrpc" => &mut version,
                "id" => &mut id,
                "method" => &mut method,
                "params" => &mut params,
                "result" => &mut result,
                "error" => &mut error,
                _ => return Err(EnvelopeError::UnknownMember { key }),
            };
            *slot = Some(value);
        }

        match version {
            None => return Err(EnvelopeError::MissingVersion),
            Some(Value::String(v)) if v == JSONRPC_VERSION => {}
            Some(_) => return Err(EnvelopeError::InvalidVersion),
        }

        if let Some(method) = method {
            if result.is_some() || error.is_some() {
                return Err(EnvelopeError::AmbiguousMessage);
            }
            let Value::String(method) = method else {
                return Err(EnvelopeError::MethodNotString);
            };
            validate_method(&method)?;
            let params = validate_params(params)?;
            // Presence, not value, decides: `"id": null` is a broken request, not a notification.
            return Ok(match id {
                Some(id) => Message::Request(Request {
                    id: RequestId::from_value(&id)?,
                    method,
                    params,
                }),
                None => Message::Notification(Notification { method, params }),
            });
        }

        if params.is_some() {
            return Err(EnvelopeError::UnexpectedMember {
                key: "params",
                kind: "response",
            });
        }
        let outcome = match (result, error) {
            (Some(_), Some(_)) => return Err(EnvelopeError::ResultAndError),
            (None, None) => return Err(EnvelopeError::MissingMethod),
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(ErrorObject::from_value(error)?),
        };
        let id = match (id, &outcome) {
            (Some(Value::Null) | None, Err(_)) => None,
            (None, Ok(_)) => return Err(EnvelopeError::MissingResponseId),
            (Some(id), _) => Some(RequestId::from_value(&id)?),
        };
        Ok(Message::Response(Response { id, outcome }))
    }

    /// Strictly parses `bytes` as exactly one message (a batch is refused).
    pub fn parse(bytes: &[u8]) -> Result<Message, Error> {
        let value = strict::parse_strict(bytes)?;
        Ok(Message::from_value(value)?)
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
    pub fn params(&self) -> Option<&Map<String, Value>> {
        match self {
            Message::Request(r) => r.params.as_ref(),
            Message::Notification(n) => n.params.as_ref(),
            Message::Response(_) => None,
        }
    }

    /// The canonical envelope as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert(
            "jsonrpc".to_owned(),
            Value::String(JSONRPC_VERSION.to_owned()),
        );
        match self {
            Message::Request(r) => {
                map.insert("id".to_owned(), r.id.to_value());
                map.insert("method".to_owned(), Value::String(r.method.clone()));
                if let Some(params) = &r.params {
                    map.insert("params".to_owned(), Value::Object(params.clone()));
                }
            }
            Message::Notification(n) => {
                map.insert("method".to_owned(), Value::String(n.method.clone()));
                if let Some(params) = &n.params {
                    map.insert("params".to_owned(), Value::Object(params.clone()));
                }
            }
            Message::Response(r) => {
                map.insert(
                    "id".to_owned(),
                    r.id.as_ref().map_or(Value::Null, RequestId::to_value),
                );
                match &r.outcome {
                    Ok(result) => map.insert("result".to_owned(), result.clone()),
                    Err(error) => map.insert("error".to_owned(), error.to_value()),
                };
            }
        }
        Value::Object(map)
    }

    /// The canonical envelope, compact: `jsonrpc`, `id`, `method`, `params` for requests and
    /// notifications; `jsonrpc`, `id`, `result`|`error` for responses.
    pub fn to_vec(&self) -> Vec<u8> {
        to_vec(self)
    }
}

fn to_vec<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value)
        .expect("messages hold only string-keyed json values, which always serialize")
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(r) => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
                map.serialize_entry("id", &r.id)?;
                map.serialize_entry("method", &r.method)?;
                if let Some(params) = &r.params {
                    map.serialize_entry("params", params)?;
                }
                map.end()
            }
            Message::Notification(n) => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
                map.serialize_entry("method", &n.method)?;
                if let Some(params) = &n.params {
                    map.serialize_entry("params", params)?;
                }
                map.end()
            }
            Message::Response(r) => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
                map.serialize_entry("id", &r.id)?;
                match &r.outcome {
                    Ok(result) => map.serialize_entry("result", result)?,
                    Err(error) => map.serialize_entry("error", error)?,
                }
                map.end()
            }
        }
    }
}

impl Payload {
    /// Validates a parsed body: one message object or a non-empty batch of them.
    pub fn from_value(value: Value) -> Result<Payload, EnvelopeError> {
        match value {
            Value::Object(_) => Ok(Payload::Single(Message::from_value(value)?)),
            Value::Array(items) => {
                if items.is_empty() {
                    return Err(EnvelopeError::EmptyBatch);
                }
                let messages = items
                    .into_iter()
                    .enumerate()
                    .map(|(index, item)| {
                        Message::from_value(item).map_err(|error| EnvelopeError::InBatch {
                            index,
                            error: Box::new(error),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Payload::Batch(messages))
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
                Err(EnvelopeError::InvalidBody)
            }
        }
    }

    /// Strict parse with [`ParseLimits::default`], then [`Payload::from_value`].
    pub fn parse(bytes: &[u8]) -> Result<Payload, Error> {
        Self::parse_with(bytes, &ParseLimits::default())
    }

    /// Strict parse with explicit limits, then [`Payload::from_value`].
    pub fn parse_with(bytes: &[u8], limits: &ParseLimits) -> Result<Payload, Error> {
        let value = strict::parse_strict_with(bytes, limits)?;
        Ok(Payload::from_value(value)?)
    }

    /// The messages in order (one for a single message).
    pub fn messages(&self) -> &[Message] {
        match self {
            Payload::Single(m) => std::slice::from_ref(m),
            Payload::Batch(ms) => ms,
        }
    }

    /// Whether the body was a JSON array.
    pub fn is_batch(&self) -> bool {
        matches!(self, Payload::Batch(_))
    }

    /// The canonical serialization: one envelope or an array of them, compact.
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Payload::Single(m) => m.to_vec(),
            Payload::Batch(ms) => to_vec(ms),
        }
    }
}

/// Builds a serialized error response (`{"jsonrpc":"2.0","id":…,"error":{…}}`); with no id the
/// response carries `"id":null`.
pub fn error_response(
    id: Option<&RequestId>,
    code: i64,
    message: impl Into<String>,
    data: Option<Value>,
) -> Vec<u8> {
    Message::Response(Response {
        id: id.cloned(),
        outcome: Err(ErrorObject {
            code,
            message: message.into(),
            data,
        }),
    })
    .to_vec()
}
