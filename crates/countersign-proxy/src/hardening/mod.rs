//! HTTP hardening: the checks every request passes before its body is read.
//!
//! hyper is lenient in ways a security boundary must not be: it accepts absolute-form targets,
//! missing and duplicate `Host`, duplicate equal `Content-Length`, underscore header names and
//! `Upgrade` requests, and it resolves `Content-Length` + `Transfer-Encoding` silently. This layer
//! refuses all of them, routes by exact path, and enforces the `Host` and `Origin` allowlists
//! (DNS-rebinding protection). Refusals are HTTP responses carrying a JSON-RPC error, never
//! errors of the service.
//!
//! ```ignore
//! let service = tower::ServiceBuilder::new()
//!     .layer(HardeningLayer::new(Arc::new(rules)))
//!     .service(inner);
//! ```
//!
//! A request that passes carries its [`Route`](crate::route::Route) in its extensions.

mod layer;
mod service;

pub use layer::HardeningLayer;
pub use service::{Hardening, HardeningRules};

#[cfg(test)]
mod tests;
