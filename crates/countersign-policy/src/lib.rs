//! countersign-policy owns the decision of what happens to a call:
//!
//! - the **policy schema** ([`Policy::from_yaml`]): defaults, approval, token lifetime,
//!   per-upstream settings and ordered rules with globs, CEL conditions and summaries;
//! - the **pinned tool catalog** ([`Catalog`]): each upstream's tool definitions as first
//!   trusted, their hashes, and a risk that rises at once but only falls on re-pin;
//! - **classification** ([`Policy::classify`] → [`Decision`]) and its listing-wide form
//!   [`Policy::explain`] for `countersign check`.
//!
//! It is pure: it parses text it is given and must do no other IO — no tokio, no files
//! (the app crate reads the policy file and hands over its text), no clock, no network.
//! That keeps every decision a deterministic function of (policy, catalog, call) that tests,
//! benches and fuzz targets can drive directly.

#![forbid(unsafe_code)]

mod catalog;
mod classify;
mod condition;
mod error;
mod model;
mod policy;
mod summary;

pub use catalog::{
    Catalog, CatalogEvent, PinStatus, PinnedTool, RepinError, ToolAnnotations, definition_hash,
};
pub use classify::{CallFacts, DEFAULT_RULE, Decision, Explanation, INVALID_TOOL_NAME_RULE};
pub use condition::MAX_CONDITION_VALUES;
pub use error::PolicyError;
pub use model::{Action, Approval, Method, Principal, Risk, RuleApprovers, is_valid_tool_name};
pub use policy::{
    DEFAULT_TOKEN_TTL, Defaults, MAX_TOKEN_TTL, Policy, RESERVED_RULE_IDS, UpstreamSettings,
};

#[cfg(test)]
mod tests;
