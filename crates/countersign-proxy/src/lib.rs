//! The gateway's request path: HTTP hardening, the single strict inspection of every POST body,
//! forwarding of its re-serialization, and event-by-event SSE relay — tower layers over hyper.
//!
//! Owns everything that touches a live request. It must not load configuration files or set up
//! telemetry (that is `countersign-app`), and it depends only on `countersign-jsonrpc` among the
//! workspace crates.

#![forbid(unsafe_code)]

pub mod audit;
pub mod body;
pub mod catalog_fetch;
pub mod config;
pub mod elicit;
pub mod endpoint;
pub mod error;
pub mod forward;
pub mod gate;
pub mod hardening;
pub mod inspect;
pub mod metrics;
pub mod results;
pub mod rewrite;
pub mod server;
pub mod sessions;
pub mod sse;
pub mod stack;

pub use config::ProxyConfig;
pub use metrics::ProxyMetrics;
pub use server::serve;
pub use stack::{GatewayService, gateway_service};
