//! The envelope rules: turning a strictly parsed JSON value into a [`Payload`] or [`Message`],
//! or refusing it with an [`EnvelopeError`].

use serde_json::Value;

use super::{
    ErrorObject, INVALID_REQUEST, JSONRPC_VERSION, MAX_METHOD_BYTES, MAX_STRING_ID_BYTES, Message,
    Notification, Params, Payload, Request, RequestId, Response, canonical_i64,
};
use crate::fold::{self, KeyCheck};
use crate::raw::{Kind, MemberAt, RawJson};
use crate::strict::MessageMembers;

/// What is known of a body's keys before the envelope reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFolds {
    /// Nothing: the envelope checks the objects it reads (the message, `params`, `_meta`) for
    /// keys that fold together.
    Unchecked,
    /// The strict parse saw no two keys of any one object fold together in every object the
    /// envelope checks (see the strict scanner's `ENVELOPE_DEPTH`), so there is nothing left
    /// to check.
    NoneInBody,
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

fn check_folds(object: &RawJson) -> Result<(), EnvelopeError> {
    match fold::fold_collision(object) {
        Some((first, second)) => Err(EnvelopeError::KeyCollision { first, second }),
        None => Ok(()),
    }
}

fn validate_params(
    params: Option<RawJson>,
    folds: KeyFolds,
) -> Result<Option<RawJson>, EnvelopeError> {
    match params {
        None => Ok(None),
        Some(map) if map.is_object() && folds == KeyFolds::NoneInBody => Ok(Some(map)),
        Some(map) if map.is_object() => {
            let found =
                fold::fold_collision_finding(&map, Some("_meta")).expect("params is an object");
            let meta =
                found.map_err(|(first, second)| EnvelopeError::KeyCollision { first, second })?;
            if let Some(meta) = meta {
                check_folds(&meta)?;
            }
            Ok(Some(map))
        }
        Some(_) => Err(EnvelopeError::ParamsNotObject),
    }
}

impl RequestId {
    /// Validates an id value taken from a message.
    pub fn from_value(value: &Value) -> Result<RequestId, EnvelopeError> {
        Self::from_raw(&RawJson::from_value(value))
    }

    /// Validates an id taken from a message.
    pub fn from_raw(value: &RawJson) -> Result<RequestId, EnvelopeError> {
        match value.kind() {
            Kind::Number => {
                let text = value.as_text();
                canonical_i64(text)
                    .map(RequestId::Number)
                    .ok_or(EnvelopeError::InvalidId {
                        reason: "number ids must be integers that fit in 64 bits",
                    })
            }
            Kind::String => {
                let s = value.as_str().unwrap_or_default();
                if s.len() > MAX_STRING_ID_BYTES {
                    Err(EnvelopeError::IdTooLong {
                        max: MAX_STRING_ID_BYTES,
                    })
                } else {
                    Ok(RequestId::String(s.into_owned()))
                }
            }
            Kind::Null => Err(EnvelopeError::InvalidId {
                reason: "id must not be null",
            }),
            Kind::Bool | Kind::Array | Kind::Object => Err(EnvelopeError::InvalidId {
                reason: "id must be an integer or a string",
            }),
        }
    }
}

impl ErrorObject {
    fn from_raw(value: &RawJson) -> Result<ErrorObject, EnvelopeError> {
        let Some(members) = value.members() else {
            return Err(EnvelopeError::InvalidErrorObject {
                reason: "error must be an object",
            });
        };
        let (mut code, mut message, mut data) = (None, None, None);
        for (key, value) in members {
            match &*key {
                "code" => code = Some(value),
                "message" => message = Some(value),
                "data" => data = Some(value),
                _ => {
                    return Err(EnvelopeError::UnknownMember {
                        key: key.into_owned(),
                    });
                }
            }
        }
        let code = match code {
            Some(n) if n.kind() == Kind::Number => {
                canonical_i64(n.as_text()).ok_or(EnvelopeError::InvalidErrorObject {
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
        let message = match message.as_ref().and_then(RawJson::as_str) {
            Some(s) => s.into_owned(),
            None if message.is_some() => {
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
        Self::from_raw(&RawJson::from_value(&value))
    }

    /// Validates one strictly parsed message against the envelope rules. The message keeps
    /// slices of `raw`.
    pub fn from_raw(raw: &RawJson) -> Result<Message, EnvelopeError> {
        Self::from_raw_with(raw, KeyFolds::Unchecked, None)
    }

    /// [`Message::from_raw`], sparing the fold checks the strict parse already settled, and
    /// the walks over its members and its params' when the parse noted them (`noted`, found
    /// in `raw`'s text).
    pub(super) fn from_raw_with(
        raw: &RawJson,
        key_folds: KeyFolds,
        noted: Option<&MessageMembers>,
    ) -> Result<Message, EnvelopeError> {
        let Some(walk) = raw.member_walk() else {
            return Err(EnvelopeError::NotAnObject);
        };
        let mut walked;
        let mut listed;
        let members: &mut dyn Iterator<Item = MemberAt> = match noted {
            Some(noted) => {
                listed = noted.top.iter();
                &mut listed
            }
            None => {
                walked = walk.clone();
                &mut walked
            }
        };
        // One pass fills the slots and gathers the keys for the fold check, which is decided
        // first, so `Method` next to `method` is reported as the collision it is.
        let mut folds = KeyCheck::new();
        let mut unknown = None;
        let (mut version, mut id, mut method, mut params, mut result, mut error) =
            (None, None, None, None, None, None);
        let unchecked = key_folds == KeyFolds::Unchecked;
        for member in members {
            if unchecked {
                folds.add(&walk, &member);
            }
            if unknown.is_some() {
                continue;
            }
            let slot = match &*walk.key_bytes(&member) {
                b"jsonrpc" => &mut version,
                b"id" => &mut id,
                b"method" => &mut method,
                b"params" => &mut params,
                b"result" => &mut result,
                b"error" => &mut error,
                _ => {
                    unknown = Some(walk.key(&member));
                    continue;
                }
            };
            *slot = Some(raw.walked_value(&member));
        }
        if unchecked && let Some((first, second)) = folds.collision(raw) {
            return Err(EnvelopeError::KeyCollision { first, second });
        }
        if let Some(key) = unknown {
            return Err(EnvelopeError::UnknownMember {
                key: key.into_owned(),
            });
        }

        match version.as_ref().map(|v| v.as_str()) {
            None => return Err(EnvelopeError::MissingVersion),
            Some(Some(v)) if v == JSONRPC_VERSION => {}
            Some(_) => return Err(EnvelopeError::InvalidVersion),
        }

        if let Some(method) = method {
            if result.is_some() || error.is_some() {
                return Err(EnvelopeError::AmbiguousMessage);
            }
            let Some(method) = method.as_str() else {
                return Err(EnvelopeError::MethodNotString);
            };
            validate_method(&method)?;
            let method = method.into_owned();
            let params_members = noted.and_then(|noted| noted.params);
            let params = validate_params(params, key_folds)?
                .map(|params| Params::noted(params, params_members));
            // Presence, not value, decides: `"id": null` is a broken request, not a notification.
            return Ok(match id {
                Some(id) => Message::Request(Request {
                    id: RequestId::from_raw(&id)?,
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
            (None, Some(error)) => Err(ErrorObject::from_raw(&error)?),
        };
        let id = match (id, &outcome) {
            (None, Err(_)) => None,
            (Some(id), Err(_)) if id.is_null() => None,
            (None, Ok(_)) => return Err(EnvelopeError::MissingResponseId),
            (Some(id), _) => Some(RequestId::from_raw(&id)?),
        };
        Ok(Message::Response(Response { id, outcome }))
    }
}

impl Payload {
    /// Validates a parsed body: one message object or a non-empty batch of them.
    pub fn from_value(value: Value) -> Result<Payload, EnvelopeError> {
        Self::from_raw(&RawJson::from_value(&value))
    }

    /// Validates a strictly parsed body: one message object or a non-empty batch of them.
    pub fn from_raw(raw: &RawJson) -> Result<Payload, EnvelopeError> {
        Self::from_raw_with(raw, KeyFolds::Unchecked, None)
    }

    /// [`Payload::from_raw`], sparing the fold checks the strict parse already settled, and
    /// the walks over a single message's members and params' when the parse noted them.
    pub(crate) fn from_raw_with(
        raw: &RawJson,
        folds: KeyFolds,
        noted: Option<&MessageMembers>,
    ) -> Result<Payload, EnvelopeError> {
        match raw.kind() {
            Kind::Object => Ok(Payload::Single(Message::from_raw_with(raw, folds, noted)?)),
            Kind::Array => {
                let messages = raw
                    .items()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(index, item)| {
                        Message::from_raw_with(&item, folds, None).map_err(|error| {
                            EnvelopeError::InBatch {
                                index,
                                error: Box::new(error),
                            }
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if messages.is_empty() {
                    return Err(EnvelopeError::EmptyBatch);
                }
                Ok(Payload::Batch(messages))
            }
            Kind::Null | Kind::Bool | Kind::Number | Kind::String => {
                Err(EnvelopeError::InvalidBody)
            }
        }
    }
}
