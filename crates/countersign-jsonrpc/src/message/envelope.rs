//! The envelope rules: turning a strictly parsed JSON value into a [`Payload`] or [`Message`],
//! or refusing it with an [`EnvelopeError`].

use serde_json::{Map, Value};

use super::{
    ErrorObject, INVALID_REQUEST, JSONRPC_VERSION, MAX_METHOD_BYTES, MAX_STRING_ID_BYTES, Message,
    Notification, Payload, Request, RequestId, Response, canonical_i64,
};
use crate::strict;

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
}
