//! The canonical serialization of messages: [`Message::to_value`], [`Message::to_vec`],
//! [`Payload::to_vec`] and [`error_response`].

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::{ErrorObject, JSONRPC_VERSION, Message, Payload, RequestId, Response};

impl ErrorObject {
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

impl Message {
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
