//! The audit trail. [`AuditSink`] writes the JSON lines; the audit layer, just above the
//! forwarder, writes the one `outcome` line of every call the approval layer let through, from
//! the [`CallAudit`] that layer attached to the request and the [`ForwardOutcome`] the forwarder
//! answers with, beside its response. Decisions (held, denied, confirmed…) are written where they are
//! made, by the approval layer.

mod future;
mod layer;
mod line;
mod service;
mod sink;
mod writer;

pub use future::ResponseFuture;
pub use layer::AuditLayer;
pub use service::AuditOutcomes;
pub use sink::{AuditRecord, AuditSink, PageDecisionRecord, Timestamp, timestamp};

use tokio::time::Instant;

/// What the outcome line of a forwarded call says, in the request context.
#[derive(Debug, Clone)]
pub struct CallAudit {
    pub principal: String,
    pub session: Option<String>,
    pub method: &'static str,
    pub target: String,
    pub risk: &'static str,
    pub rule: String,
    pub action: &'static str,
    pub channel: Option<&'static str>,
    pub jti: Option<String>,
    pub args_hash: Option<String>,
    /// When the gateway started judging the call, for the outcome's latency.
    pub started: Instant,
}

/// How forwarding ended (`forwarded`, `upstream_error`, …): the forwarder answers with it
/// beside the response ([`ForwardReply`]). A response's type map would cost three allocations a
/// call to carry this one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardOutcome(pub &'static str);

/// What the forwarder answers the audit layer with: the response, and how forwarding ended.
pub type ForwardReply = (http::Response<crate::body::ResponseBody>, ForwardOutcome);

#[cfg(test)]
mod tests;
