//! Body read and the one strict parse: `Request<Incoming>` becomes `Request<Parsed>`.
//!
//! This is where the client's bytes end. The body is read within the size limit and the
//! whole-body deadline, parsed once by the strict parser (duplicate keys, lone surrogates,
//! depth and the rest are refused), and the envelope and 2026-07-28 mirrored headers are
//! checked. Every layer below sees only the parsed value, so what is classified, approved and
//! forwarded is one value; nothing downstream can reach the raw body.
//!
//! Every body is also counted against the listener's in-flight body budget
//! ([`HeldBody`], `limits.max_in_flight_body_bytes`) as it is read and until its request is
//! dropped; a body whose declared length does not fit is refused with 503 unread.
//!
//! ```ignore
//! let service = tower::ServiceBuilder::new()
//!     .layer(ParseLayer::new(limits, metrics))
//!     .service(inner); // a Service<Request<Parsed>>
//! ```

mod budget;
mod inspect;
mod layer;
mod service;

pub use budget::HeldBody;
pub use inspect::{InspectedPost, inspect_post};
pub use layer::ParseLayer;
pub use service::Parse;

/// Put in a request's extensions by a transport adapter that cannot hand an HTTP status on to
/// its client (the [legacy HTTP+SSE layer](crate::legacy_clients)): the parse layer then puts
/// the ids of the requests the body carried in the response's extensions as [`RequestIds`], so
/// the adapter can answer each of them when the response holds no JSON-RPC message.
#[derive(Debug, Clone, Copy)]
pub struct WantRequestIds;

/// The ids of the requests (not notifications or responses) of a POST, in its response's
/// extensions when the request asked with [`WantRequestIds`].
#[derive(Debug, Clone, Default)]
pub struct RequestIds(pub Vec<countersign_jsonrpc::message::RequestId>);

/// The body of every request past the parse layer.
#[derive(Debug)]
pub enum Parsed {
    /// A POST body after the one strict parse.
    Message(InspectedPost),
    /// GET and DELETE: MCP endpoints take no body with them, so whatever a client sent is
    /// dropped unread.
    NoBody,
}

#[cfg(test)]
mod tests;
