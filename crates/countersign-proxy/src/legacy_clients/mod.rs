//! Clients of the 2024-11-05 HTTP+SSE transport, judged by the same layers as everyone else.
//!
//! A legacy client opens a session with `GET <sse path>` and gets an event stream whose first
//! event, `endpoint`, names where to POST its messages: `<messages path>?session_id=<id>`, a path
//! on the gateway (relative, so it resolves against whatever URL the client used to reach the
//! gateway, and never names the upstream). Each POST there is answered `202 Accepted` and turned
//! into an ordinary Streamable HTTP POST to the route, sent down **the same inner stack** —
//! client limit, parse, rate limits, classification, approval, audit, forwarder — so a legacy
//! client gets exactly the gate a Streamable HTTP client gets. Identity sits above this layer:
//! the `GET` that opens a session and every `POST` to it are identified (and refused with 401)
//! like any other request. Every message of the
//! stack's answer (a JSON body or the events of an SSE one, the gateway's own held results and
//! questions included) is written to the session's stream as `event: message`.
//!
//! The session behind it is an ordinary upstream session: the first POST (`initialize`) goes
//! without `Mcp-Session-Id`, the id the upstream answers with is sent on every later request
//! (with `MCP-Protocol-Version` once `initialize` has negotiated it), and once the upstream has
//! accepted a message of the initialized session the gateway opens the upstream's GET stream,
//! through the stack too, and relays what arrives on it — so server-initiated requests and
//! notifications reach the client. When the legacy stream closes, the session ends: later POSTs
//! get 404 and the upstream session is DELETEd.
//!
//! What fails closed, and how:
//! - An unknown `session_id`, one whose stream has closed, or one opened by another principal
//!   (the principal of each POST is compared with the one that opened the session) → 404,
//!   and nothing is sent anywhere. The client never sees the upstream's session id, so it cannot
//!   name another session; any `Mcp-Session-Id` it sends itself is dropped.
//! - A POST refused before the stack has read its body (the per-client request limit, the
//!   in-flight body budget, a body too slow) gets that refusal as its own HTTP answer: the
//!   message was not taken. Once the body has been read, the POST is answered 202 and every
//!   answer — a JSON-RPC error such as a rate-limit refusal included — arrives on the stream
//!   with the request's id, where legacy SDK clients deliver it to the waiting call. (The
//!   Python SDK stops sending altogether after one failed POST, so an HTTP error for a message
//!   it could correlate would cost the whole session.)
//! - Open sessions are capped at `connections.max_open` (each holds a connection anyway), and
//!   each session's stream holds one of its client's `connections.max_requests_per_client`
//!   slots; the upstream GET stream and each message in flight hold one more, as they do for
//!   Streamable HTTP clients.
//! - The queue toward a slow client holds [`QUEUE_MESSAGES`] messages; past that the relays
//!   wait (and so read nothing more from the upstream) rather than buffer.
//! - The stream gets a `: keep-alive` comment when quiet for `connections.sse_keep_alive`, and
//!   ends once neither the client nor the upstream has sent anything for
//!   `connections.sse_idle_timeout`.
//!
//! ```ignore
//! let service = tower::ServiceBuilder::new()
//!     .layer(HardeningLayer::new(rules)) // routes the legacy paths, attaches LegacyEndpoint
//!     .layer(LegacyClientsLayer::new(settings))
//!     .layer(ClientLimitLayer::new(&connections, metrics))
//!     .service(inner); // sees Request<AdaptedBody<B>>
//! ```

mod body;
mod deliver;
mod driver;
mod layer;
mod requests;
mod service;
mod sessions;
mod stream;

pub use body::AdaptedBody;
pub use layer::{LegacyClientsLayer, LegacySettings};
pub use service::LegacyClients;

/// Most messages queued toward one legacy client; relays wait while it is full.
pub const QUEUE_MESSAGES: usize = 32;

#[cfg(test)]
mod tests;
