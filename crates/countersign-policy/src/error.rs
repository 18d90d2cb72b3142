//! Why a policy file was refused.

use thiserror::Error;

/// A policy file that cannot be loaded. Each message is complete on its own (which rule,
/// which field, why) because a refused reload is logged with `%err` and `countersign check`
/// prints it to an operator: a reason hidden in a `source()` chain would be lost there.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// Not YAML, a wrong type, a missing required field or an unknown key. The message comes
    /// from the YAML parser and carries the field path and line/column.
    #[error("invalid policy file: {0}")]
    Syntax(String),
    /// `version` is not 1.
    #[error("unsupported policy version {0}: only `version: 1` is understood")]
    Version(u64),
    /// `token_ttl` is not a duration in range.
    #[error("invalid token_ttl `{value}`: {reason}")]
    TokenTtl {
        /// The text as written.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// Two rules share an id, so audit lines could not tell them apart.
    #[error("duplicate rule id `{id}` (rules #{first} and #{second})")]
    DuplicateRuleId {
        /// The repeated id.
        id: String,
        /// 1-based position of the first rule with it.
        first: usize,
        /// 1-based position of the repeat.
        second: usize,
    },
    /// One field of one rule is invalid.
    #[error("rule `{rule}`: {field}: {reason}")]
    Rule {
        /// The rule's id, or `#<position>` when the id itself is unusable.
        rule: String,
        /// The offending field (`id`, `tools`, `upstream`, `when`, `summary`, …).
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },
}
