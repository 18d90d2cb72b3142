//! The small vocabulary shared by the policy file, the catalog and decisions.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

/// How risky a call is. The order is meaningful: `read < write < destructive < unknown`,
/// so "the riskier of two" is `max`, and a pinned risk only ever moves up on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Does not modify its environment (`readOnlyHint: true`).
    Read,
    /// Modifies its environment, additively only (`destructiveHint: false`).
    Write,
    /// May perform destructive updates (the spec default when annotations are absent).
    Destructive,
    /// Nothing trustworthy is known: not in the catalog, removed, suspicious, or the
    /// upstream's annotations are not trusted.
    Unknown,
}

impl Risk {
    /// Every risk, lowest first.
    pub const ALL: [Risk; 4] = [Risk::Read, Risk::Write, Risk::Destructive, Risk::Unknown];

    /// The lowercase name used in policy files, tokens and audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Read => "read",
            Risk::Write => "write",
            Risk::Destructive => "destructive",
            Risk::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the gateway does with a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Forward it.
    Allow,
    /// Hold it until a confirmation arrives.
    Confirm,
    /// Refuse it.
    Deny,
}

impl Action {
    /// The lowercase name used in policy files and audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Confirm => "confirm",
            Action::Deny => "deny",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which confirmation channels may approve a held call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Whatever the client supports: elicitation when it can, else a confirmation token.
    #[default]
    Any,
    /// Only a channel that reaches a person (elicitation / input_required); refuse when the
    /// client cannot elicit.
    Human,
    /// Only the confirmation-token channel.
    Token,
    /// Only the gateway's own approval page, which the model cannot reach; refused when no
    /// approval page is configured.
    #[serde(rename = "out_of_band")]
    OutOfBand,
}

impl Approval {
    /// The lowercase name used in policy files and audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Any => "any",
            Approval::Human => "human",
            Approval::Token => "token",
            Approval::OutOfBand => "out_of_band",
        }
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who may decide a call held out of band (`approvers:` and `four_eyes:` on a rule). The
/// default names nobody, which means the requesting principal decides their own call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleApprovers {
    /// Principals that may decide (`approvers.users`).
    pub users: Vec<String>,
    /// Groups whose members may decide (`approvers.groups`).
    pub groups: Vec<String>,
    /// Forbid the requesting principal from deciding their own call. Default false.
    pub four_eyes: bool,
}

/// The MCP methods a rule can match. Everything else is decided outside this crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    /// `tools/call`; the target is the tool name.
    #[default]
    #[serde(rename = "tools/call")]
    ToolsCall,
    /// `prompts/get`; the target is the prompt name.
    #[serde(rename = "prompts/get")]
    PromptsGet,
    /// `resources/read`; the target is the resource URI.
    #[serde(rename = "resources/read")]
    ResourcesRead,
}

impl Method {
    /// The JSON-RPC method name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::ToolsCall => "tools/call",
            Method::PromptsGet => "prompts/get",
            Method::ResourcesRead => "resources/read",
        }
    }

    /// The method for a JSON-RPC method name, if rules can match it.
    pub fn from_name(name: &str) -> Option<Method> {
        match name {
            "tools/call" => Some(Method::ToolsCall),
            "prompts/get" => Some(Method::PromptsGet),
            "resources/read" => Some(Method::ResourcesRead),
            _ => None,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is calling, as established by the identity layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Stable subject id (the token's `sub`).
    pub id: String,
    /// Group names, compared byte-exact by rule conditions.
    pub groups: Vec<String>,
    /// The verified token's claims (`principal.claims` in conditions); empty for callers named
    /// by a trusted header or an API key.
    pub claims: Arc<Claims>,
}

/// A verified token's claims, by name.
pub(crate) type Claims = serde_json::Map<String, serde_json::Value>;

impl Default for Principal {
    /// No id, no groups, no claims. The empty claims are one map every such principal shares:
    /// callers named by a trusted header or an API key, and anonymous ones, are made per
    /// request, and a map of their own was an allocation each.
    fn default() -> Self {
        static NO_CLAIMS: LazyLock<Arc<Claims>> = LazyLock::new(Default::default);
        Self {
            id: String::new(),
            groups: Vec::new(),
            claims: NO_CLAIMS.clone(),
        }
    }
}

/// Whether `name` is an acceptable MCP tool name: `[A-Za-z0-9_.-]{1,128}`.
///
/// Restricting names to this ASCII set (the 2025-11-25 spec's SHOULD) takes homoglyphs,
/// fullwidth forms, zero-width and bidi characters and Unicode case folding out of the threat
/// model: what is left compares byte-exact.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn risk_orders_read_write_destructive_unknown() {
        assert!(Risk::Read < Risk::Write);
        assert!(Risk::Write < Risk::Destructive);
        assert!(Risk::Destructive < Risk::Unknown);
        assert_eq!(Risk::ALL.iter().max(), Some(&Risk::Unknown));
    }

    #[test]
    fn tool_names_outside_the_ascii_set_are_invalid() {
        assert!(is_valid_tool_name("delete_repo"));
        assert!(is_valid_tool_name("a.b-c_D9"));
        assert!(is_valid_tool_name(&"x".repeat(128)));
        for bad in [
            "",
            "d\u{435}lete_repo",
            "\u{ff44}elete_repo",
            "delete\u{200b}_repo",
            "delete_repo ",
            "\u{202e}oper_eteled",
            "server/tool",
            &"x".repeat(129),
        ] {
            assert!(!is_valid_tool_name(bad), "{bad:?} must be invalid");
        }
    }

    #[test]
    fn method_names_round_trip() {
        for m in [Method::ToolsCall, Method::PromptsGet, Method::ResourcesRead] {
            assert_eq!(Method::from_name(m.as_str()), Some(m));
        }
        assert_eq!(Method::from_name("tools/list"), None);
    }
}
