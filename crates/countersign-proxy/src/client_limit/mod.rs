//! Per-client concurrency: at most `connections.max_requests_per_client` requests in flight at
//! once from one client address; the next gets 429 with `Retry-After` and a JSON-RPC error
//! naming the limit, before its body is read and without anything reaching the upstream.
//!
//! A request counts from the moment it passes hardening until its response body has ended, so
//! a long-lived GET stream and a call held while a person decides each keep their slot: those
//! are what one client could otherwise open without bound.
//!
//! The client is the TCP peer by default ([`PeerAddr`], set by the accept loop). Behind a proxy
//! every client shares the proxy's address; [`ClientAddress::Header`](crate::config::ClientAddress)
//! reads a header the proxy sets instead.
//!
//! ```ignore
//! let service = tower::ServiceBuilder::new()
//!     .layer(ClientLimitLayer::new(connections, metrics))
//!     .service(inner);
//! ```

mod future;
mod layer;
mod service;
mod slots;

pub use future::ResponseFuture;
pub use layer::ClientLimitLayer;
pub use service::ClientLimit;
pub use slots::ClientSlot;

use std::net::SocketAddr;

/// The TCP peer of the connection a request came on, in its request context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

#[cfg(test)]
mod tests;
