//! The gateway's request path: tower layers behind its own HTTP/1.1 server (`downstream`),
//! composed in [`stack::gateway_service`]
//! — hardening, the legacy HTTP+SSE client adapter, the per-client request limit, the one
//! strict parse, identity, classification, approval, audit and the upstream forwarder — plus
//! the state they share, the upstream client, the SSE relay and the accept loop.
//!
//! Owns everything that touches a live request. It must not load configuration files or set up
//! telemetry (that is `countersign-app`). Among the workspace crates it depends on
//! `countersign-jsonrpc`, `countersign-policy`, `countersign-token` and `countersign-store`.

#![forbid(unsafe_code)]

pub mod approval;
pub mod audit;
#[doc(hidden)]
pub mod benching;
pub mod body;
pub mod catalog;
pub mod classify;
pub mod client_limit;
pub mod clock;
pub mod config;
pub mod context;
mod deadline_timer;
pub mod discovery;
pub mod display;
pub mod downstream;
pub mod edits;
pub mod error;
pub mod forward;
pub mod future;
#[doc(hidden)]
pub mod fuzzing;
pub mod hardening;
mod http_fields;
pub mod identity;
pub mod legacy_clients;
pub mod limits;
pub mod metrics;
pub mod outbound;
pub mod parse;
pub mod relay;
pub mod route;
pub mod server;
mod socket;
mod splice;
pub mod stack;
pub mod state;
pub mod trace;
pub mod upstream;
pub mod wire;
pub mod workers;

#[cfg(test)]
mod testing;

pub use config::ProxyConfig;
pub use metrics::ProxyMetrics;
pub use server::{ListenerLimits, serve};
pub use stack::{Gateway, GatewayService, gateway_service, routes};
