//! The canonical serialization of messages: [`Message::to_value`], [`Message::to_vec`],
//! [`Payload::to_vec`], [`error_response`] and [`compact_result_response`].

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::{ErrorObject, JSONRPC_VERSION, Message, Payload, RequestId, Response};
use crate::raw::RawJson;

impl ErrorObject {
    /// The error object as a JSON value (`code`, `message`, then `data` when present).
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("code".to_owned(), Value::Number(self.code.into()));
        map.insert("message".to_owned(), Value::String(self.message.clone()));
        if let Some(data) = &self.data {
            map.insert("data".to_owned(), data.to_value());
        }
        Value::Object(map)
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"code\":");
        out.extend_from_slice(self.code.to_string().as_bytes());
        out.extend_from_slice(b",\"message\":");
        write_json(out, &self.message);
        if let Some(data) = &self.data {
            out.extend_from_slice(b",\"data\":");
            data.write_minified(out);
        }
        out.push(b'}');
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
    /// The canonical envelope as a JSON value (builds the whole tree: for tests and small
    /// messages).
    pub fn to_value(&self) -> Value {
        serde_json::from_slice(&self.to_vec()).expect("a message serializes to valid json")
    }

    /// The canonical envelope, compact: `jsonrpc`, `id`, `method`, `params` for requests and
    /// notifications; `jsonrpc`, `id`, `result`|`error` for responses. Params and results are
    /// copied as the exact text that was judged, without the whitespace between its tokens.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.serialized_len_hint());
        self.write(&mut out);
        out
    }

    fn serialized_len_hint(&self) -> usize {
        let carried = match self {
            Message::Request(r) => r.params.as_deref().map_or(0, RawJson::len) + r.method.len(),
            Message::Notification(n) => {
                n.params.as_deref().map_or(0, RawJson::len) + n.method.len()
            }
            Message::Response(r) => match &r.outcome {
                Ok(result) => result.len(),
                Err(error) => error.message.len() + error.data.as_ref().map_or(0, RawJson::len),
            },
        };
        carried + 96
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(ENVELOPE_START);
        match self {
            Message::Request(r) => {
                out.extend_from_slice(b",\"id\":");
                write_json(out, &r.id);
                write_method(out, &r.method, r.params.as_deref());
            }
            Message::Notification(n) => write_method(out, &n.method, n.params.as_deref()),
            Message::Response(r) => {
                write_response_id(out, r.id.as_ref());
                match &r.outcome {
                    Ok(result) => {
                        out.extend_from_slice(b",\"result\":");
                        result.write_minified(out);
                    }
                    Err(error) => {
                        out.extend_from_slice(b",\"error\":");
                        error.write(out);
                    }
                }
            }
        }
        out.push(b'}');
    }
}

/// How every envelope this module writes begins.
const ENVELOPE_START: &[u8] = b"{\"jsonrpc\":\"2.0\"";

fn write_response_id(out: &mut Vec<u8>, id: Option<&RequestId>) {
    out.extend_from_slice(b",\"id\":");
    match id {
        Some(id) => write_json(out, id),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_method(out: &mut Vec<u8>, method: &str, params: Option<&RawJson>) {
    out.extend_from_slice(b",\"method\":");
    crate::raw::write_json_string(out, method);
    if let Some(params) = params {
        out.extend_from_slice(b",\"params\":");
        params.write_minified(out);
    }
}

fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("ids and strings always serialize");
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
            Payload::Batch(ms) => {
                let mut out = Vec::with_capacity(ms.iter().map(Message::serialized_len_hint).sum());
                out.push(b'[');
                for (i, m) in ms.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    m.write(&mut out);
                }
                out.push(b']');
                out
            }
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
            data: data.as_ref().map(RawJson::from_value),
        }),
    })
    .to_vec()
}

/// The response to `id` with `result`, a value the caller wrote itself and knows to hold no
/// whitespace between its tokens: the same bytes as [`Message::to_vec`] gives, with the result
/// copied as it is instead of walked for whitespace to drop. A held call's answer is a few
/// kilobytes of the gateway's own text, and that walk was a twentieth of its instructions
/// (`bash bench/instructions.sh`).
pub fn compact_result_response(id: Option<&RequestId>, result: &RawJson) -> Vec<u8> {
    debug_assert!(
        result.minified().as_bytes() == result.as_bytes(),
        "a result written around as it is must be compact"
    );
    let mut out = Vec::with_capacity(result.len() + 48);
    out.extend_from_slice(ENVELOPE_START);
    write_response_id(&mut out, id);
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result.as_bytes());
    out.push(b'}');
    out
}
