//! countersign-approvals owns the out-of-band approval page: a web page the gateway serves on
//! its own listener, where an authenticated person approves or denies a held call that the
//! model cannot complete. It implements the approval layer's
//! [`OutOfBand`](countersign_proxy::approval::out_of_band::OutOfBand) seam over an
//! [`ApprovalBook`](countersign_store::ApprovalBook) (memory or Redis), so the page, the held
//! call and its retry may each reach a different replica.
//!
//! - [`link`]: request ids and the links that carry them, signed under the link key;
//! - [`page`]: [`ApprovalPage`], the requests' lifecycle (open, read, decide once) and the
//!   `OutOfBand` implementation;
//! - [`server`]: the listener, its routes and security headers;
//! - [`auth`]: who the approver is (trusted header or OpenID Connect), the page's cookies and
//!   CSRF tokens;
//! - [`jwt`]: the gateway's JWKS-backed token verifier (`countersign_proxy::identity::jwt`),
//!   shared with bearer-token identity;
//! - [`webhooks`]: notifications of opened requests.
//!
//! It must not be imported by `countersign-proxy` (which knows only the seam) and knows
//! nothing of MCP beyond the seam's types.

#![forbid(unsafe_code)]

mod approve;
pub mod auth;
/// Outgoing HTTP, shared with the gateway's JWKS fetches.
pub use countersign_proxy::outbound as client;
pub mod config;
mod html;
pub use countersign_proxy::identity::jwt;
pub mod link;
pub mod metrics;
pub mod page;
pub mod record;
pub mod server;
#[cfg(test)]
mod testing;
mod views;
pub mod webhooks;

pub use config::{AuthConfig, OidcConfig, PageConfig, Secret, WebhookConfig, WebhookFormat};
pub use link::LinkKey;
pub use metrics::PageMetrics;
pub use page::ApprovalPage;
pub use server::serve;
