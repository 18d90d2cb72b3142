//! Classification: every gated call in a parsed payload (`tools/call`, and `prompts/get` /
//! `resources/read` for rules to match) — requests and notification-shaped calls alike, alone
//! or in a batch — is judged against the active policy and the pinned catalog, and the
//! [`Classification`] goes into the request's context for the approval layer.
//!
//! A tool the catalog cannot answer for is listed first ([`CatalogSync`]); that is the only
//! time this layer awaits anything. Calls with invalid params, and gated calls without a
//! principal, are refused here: there is nothing sound to judge.
//!
//! [`CatalogSync`]: crate::catalog::CatalogSync

mod call;
mod layer;
mod service;

pub use call::{CallParts, gated_method};
pub use layer::ClassifyLayer;
pub use service::Classify;

use countersign_policy::{Decision, PinnedTool};

/// What classification decided for one payload, in the request context. Empty when nothing in
/// the payload is gated.
#[derive(Debug, Clone, Default)]
pub struct Classification {
    pub calls: Vec<Judged>,
}

/// One gated call and its decision.
#[derive(Debug, Clone)]
pub struct Judged {
    /// Position in the batch; 0 for a single message.
    pub index: usize,
    pub call: CallParts,
    pub decision: Decision,
    /// The pinned definition the decision used; `None` for an unknown tool (and for prompts
    /// and resources, which the catalog does not pin).
    pub pinned: Option<PinnedTool>,
}

#[cfg(test)]
mod tests;
