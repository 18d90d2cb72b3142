//! The only body the forwarder accepts. A [`Cleared`] can be made only inside the approval
//! module, from the value the approval layer judged (with its approval artefacts stripped and
//! its arguments in the form that was hashed), so "what was approved" and "what is forwarded"
//! are one value by type, not by convention.

use bytes::Bytes;
use countersign_jsonrpc::message::{Message, Payload, Request};
use http::{HeaderName, HeaderValue};

/// A request body the approval layer let through.
#[derive(Debug)]
pub struct Cleared {
    payload: Option<Payload>,
    /// `Mcp-Method` / `Mcp-Name` for 2026-07-28, regenerated from the body at parse time.
    mirrored: Vec<(HeaderName, HeaderValue)>,
}

impl Cleared {
    /// Traffic that needs no approval, forwarded as parsed.
    pub(super) fn passed(payload: Payload, mirrored: Vec<(HeaderName, HeaderValue)>) -> Self {
        Self {
            payload: Some(payload),
            mirrored,
        }
    }

    /// One call, as the approval judged it.
    pub(super) fn call(call: Request, mirrored: Vec<(HeaderName, HeaderValue)>) -> Self {
        Self::passed(Payload::Single(Message::Request(call)), mirrored)
    }

    /// A payload as if the approval layer had let it through. Exists only for the forwarder's
    /// unit tests, which test forwarding alone; everything else gets a `Cleared` from approval.
    #[cfg(test)]
    pub(crate) fn for_tests(payload: Payload) -> Self {
        Self::passed(payload, Vec::new())
    }

    /// GET and DELETE, which carry no body.
    pub(super) fn no_body() -> Self {
        Self {
            payload: None,
            mirrored: Vec::new(),
        }
    }

    pub fn payload(&self) -> Option<&Payload> {
        self.payload.as_ref()
    }

    pub fn mirrored(&self) -> &[(HeaderName, HeaderValue)] {
        &self.mirrored
    }

    /// The bytes that go upstream: the serialization of exactly this value.
    pub fn to_bytes(&self) -> Bytes {
        self.payload
            .as_ref()
            .map_or_else(Bytes::new, |payload| Bytes::from(payload.to_vec()))
    }
}
