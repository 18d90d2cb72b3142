//! HTTP hardening: the checks every request passes before its body is read.
//!
//! HTTP/1.1 servers (the gateway's own, `downstream/`, as hyper's before it) accept what a
//! security boundary must not: absolute-form targets, missing and duplicate `Host`, duplicate
//! equal `Content-Length`, underscore header names and `Upgrade` requests, and they resolve
//! `Content-Length` + `Transfer-Encoding` by dropping the length. This layer refuses all of them, routes by exact path, and enforces the `Host` and `Origin` allowlists
//! (DNS-rebinding protection). Refusals are HTTP responses carrying a JSON-RPC error, never
//! errors of the service.
//!
//! ```ignore
//! let service = tower::ServiceBuilder::new()
//!     .layer(HardeningLayer::new(Arc::new(rules)))
//!     .service(inner);
//! ```
//!
//! A request that passes carries its [`Route`](crate::route::Route) in its request context.

mod fields;
mod layer;
mod service;

pub use layer::HardeningLayer;
pub use service::{Hardening, HardeningRules};

#[cfg(test)]
mod tests;
