//! The single inspection point: one strict parse of a POST body and the envelope and header
//! checks. What comes out is a value; the client's bytes end here.

use std::borrow::Cow;

use bytes::Bytes;
use countersign_jsonrpc::mcp::{self, ProtocolVersion};
use countersign_jsonrpc::message::{Message, Payload, Request, RequestId};
use countersign_jsonrpc::strict::ParseLimits;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::error::ProxyError;
use crate::wire::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION};

/// A POST body that passed every check, ready to classify and forward.
#[derive(Debug)]
pub struct InspectedPost {
    pub payload: Payload,
    /// Revision the request claims, from the header or (2026-07-28) the body's `_meta`.
    pub version: Option<ProtocolVersion>,
    /// `Mcp-Method` / `Mcp-Name` values to send upstream, derived from the body alone.
    pub mirrored: Vec<(HeaderName, HeaderValue)>,
}

impl InspectedPost {
    /// The id to answer with when the request is refused after inspection.
    pub fn request_id(&self) -> Option<&RequestId> {
        match &self.payload {
            Payload::Single(message) => message.id(),
            Payload::Batch(_) => None,
        }
    }

    /// The request is MCP 2026-07-28 (stateless: no sessions, capabilities per request).
    pub fn stateless(&self) -> bool {
        self.version.is_some_and(ProtocolVersion::is_stateless)
    }

    /// Bounded label for metrics.
    pub fn method_label(&self) -> &'static str {
        match &self.payload {
            Payload::Single(Message::Request(r)) => crate::metrics::method_label(&r.method),
            Payload::Single(Message::Notification(n)) => crate::metrics::method_label(&n.method),
            Payload::Single(Message::Response(_)) => "response",
            Payload::Batch(_) => "batch",
        }
    }
}

/// A refusal, with the id of the offending request when the body got far enough to have one.
pub(super) type Refusal = (ProxyError, Option<RequestId>);

/// Inspects one POST body. The parsed payload keeps slices of `body` (no copy): its params are
/// read lazily, so inspecting costs about the body's own size in memory.
pub fn inspect_post(
    headers: &HeaderMap,
    body: Bytes,
    max_depth: usize,
) -> Result<InspectedPost, Refusal> {
    let payload = Payload::parse_with(body, &ParseLimits { max_depth })
        .map_err(|e| (ProxyError::Json(e), None))?;

    let header_version =
        match headers.get(MCP_PROTOCOL_VERSION) {
            None => None,
            Some(raw) => {
                let raw = raw.to_str().unwrap_or("<non-ASCII>");
                Some(ProtocolVersion::parse(raw).ok_or_else(|| {
                    (ProxyError::UnsupportedProtocolVersion(raw.to_owned()), None)
                })?)
            }
        };

    match payload {
        Payload::Batch(ref messages) => {
            // Without the header a client is on 2025-03-26 or earlier, where batches exist.
            let version = header_version.unwrap_or(ProtocolVersion::V2025_03_26);
            if !version.allows_batches() {
                return Err((
                    ProxyError::BatchNotAllowed(version.as_str().to_owned()),
                    None,
                ));
            }
            for message in messages {
                check_method(message).map_err(|e| (ProxyError::InvalidBatch(Box::new(e)), None))?;
            }
            Ok(InspectedPost {
                payload,
                version: Some(version),
                mirrored: Vec::new(),
            })
        }
        Payload::Single(ref message) => {
            let id = message.id().cloned();
            check_method(message).map_err(|e| (e, id.clone()))?;
            let body_version = match message {
                Message::Request(request) => {
                    body_protocol_version(request).map_err(|e| (e, id.clone()))?
                }
                _ => None,
            };
            let stateless = header_version.is_some_and(|v| v.is_stateless())
                || body_version.is_some_and(|v| v.is_stateless());
            let mirrored = if stateless {
                check_stateless_headers(headers, message, header_version, body_version)
                    .map_err(|e| (e, id.clone()))?
            } else {
                Vec::new()
            };
            let version = body_version.or(header_version);
            Ok(InspectedPost {
                payload,
                version,
                mirrored,
            })
        }
    }
}

/// Unknown methods are refused rather than passed on: fail closed on what is not understood.
fn check_method(message: &Message) -> Result<(), ProxyError> {
    match message {
        Message::Request(r) if !mcp::is_known_method(&r.method) => {
            Err(ProxyError::UnknownMethod(r.method.clone()))
        }
        Message::Notification(n) if !mcp::is_known_method(&n.method) => {
            Err(ProxyError::UnknownNotification(n.method.clone()))
        }
        _ => Ok(()),
    }
}

fn body_protocol_version(request: &Request) -> Result<Option<ProtocolVersion>, ProxyError> {
    match mcp::request_protocol_version(request) {
        None => Ok(None),
        Some(raw) => ProtocolVersion::parse(&raw)
            .map(Some)
            .ok_or(ProxyError::UnsupportedProtocolVersion(raw)),
    }
}

/// MCP 2026-07-28 mirrors routing facts into headers; a load balancer may act on the header while
/// the server acts on the body, so the two must agree (SEP-2243). The gateway then regenerates the
/// headers from the body instead of forwarding the client's.
fn check_stateless_headers(
    headers: &HeaderMap,
    message: &Message,
    header_version: Option<ProtocolVersion>,
    body_version: Option<ProtocolVersion>,
) -> Result<Vec<(HeaderName, HeaderValue)>, ProxyError> {
    let method = match message {
        Message::Request(r) => &r.method,
        Message::Notification(n) => &n.method,
        Message::Response(_) => {
            return Err(ProxyError::HeaderMismatch(
                "clients do not send JSON-RPC responses on protocol revision 2026-07-28".into(),
            ));
        }
    };
    if matches!(message, Message::Request(_)) && header_version != body_version {
        return Err(ProxyError::HeaderMismatch(format!(
            "MCP-Protocol-Version header `{}` does not match the body's _meta protocolVersion `{}`",
            header_version.map_or("<absent>", |v| v.as_str()),
            body_version.map_or("<absent>", |v| v.as_str()),
        )));
    }
    let sent_method = headers.get(MCP_METHOD);
    let header_method = decoded_header(sent_method, &MCP_METHOD)?;
    if header_method.as_deref() != Some(method.as_str()) {
        return Err(ProxyError::HeaderMismatch(format!(
            "Mcp-Method header `{}` does not match the body's method `{method}`",
            header_method.as_deref().unwrap_or("<absent>"),
        )));
    }
    let mut mirrored = Vec::with_capacity(2);
    mirrored.push((MCP_METHOD, mirror(sent_method, method)?));
    if let Message::Request(request) = message {
        let expected = mcp::expected_mcp_name(request);
        let sent_name = headers.get(MCP_NAME);
        let header_name = decoded_header(sent_name, &MCP_NAME)?;
        if header_name.as_deref() != expected.as_deref() {
            return Err(ProxyError::HeaderMismatch(format!(
                "Mcp-Name header `{}` does not match the body's `{}`",
                header_name.as_deref().unwrap_or("<absent>"),
                expected.as_deref().unwrap_or("<absent>"),
            )));
        }
        if let Some(name) = &expected {
            mirrored.push((MCP_NAME, mirror(sent_name, name)?));
        }
    }
    Ok(mirrored)
}

/// The value the client sent as header `name` (`sent`), decoded.
fn decoded_header<'a>(
    sent: Option<&'a HeaderValue>,
    name: &HeaderName,
) -> Result<Option<Cow<'a, str>>, ProxyError> {
    let Some(raw) = sent else {
        return Ok(None);
    };
    let raw = raw
        .to_str()
        .map_err(|_| ProxyError::HeaderMismatch(format!("{name} header is not visible ASCII")))?;
    mcp::decode_header_value(raw)
        .map(Some)
        .map_err(|e| ProxyError::HeaderMismatch(format!("{name} header: {e}")))
}

/// The header to send upstream for the body's `value`: the client's own field (`sent`) when it
/// is already exactly that encoding (it decoded to `value`, so it usually is), else a new one.
fn mirror(sent: Option<&HeaderValue>, value: &str) -> Result<HeaderValue, ProxyError> {
    let encoded = mcp::encode_header_value(value);
    match sent {
        Some(sent) if sent.as_bytes() == encoded.as_bytes() => Ok(sent.clone()),
        _ => encode(&encoded),
    }
}

fn encode(encoded: &str) -> Result<HeaderValue, ProxyError> {
    HeaderValue::try_from(encoded)
        .map_err(|_| ProxyError::Internal("encoded header value is not a valid header".into()))
}
