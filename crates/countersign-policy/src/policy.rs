//! The policy file: its YAML schema, validation, and the compiled form `classify` runs on.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use serde_json::Value;

use crate::condition::{CelEnv, Condition};
use crate::error::PolicyError;
use crate::model::{Action, Approval, Method, Risk, RuleApprovers};
use crate::summary::Template;

/// `token_ttl` when the file does not set one.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(300);
/// Longest accepted `token_ttl`: a confirmation is a decision about one call, made now; a
/// token that lives longer is a standing permission in the model's context.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Rule ids the gateway itself puts in decisions; a rule may not take them, so an audit
/// line always says whether a person or the built-in behaviour decided.
pub const RESERVED_RULE_IDS: [&str; 2] = [crate::DEFAULT_RULE, crate::INVALID_TOOL_NAME_RULE];

// ---------------------------------------------------------------------------------------
// Raw schema: exactly what the file may say. Plain strings, structs and Options only —
// serde_yaml_ng maps externally tagged enums to `!tags`, which nobody would write.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: u64,
    defaults: Option<RawDefaults>,
    approval: Option<Approval>,
    token_ttl: Option<String>,
    // `Option` values so `store:` with nothing under it means "all defaults".
    upstreams: Option<BTreeMap<String, Option<RawUpstream>>>,
    rules: Option<Vec<RawRule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    read: Option<Action>,
    write: Option<Action>,
    destructive: Option<Action>,
    unknown: Option<Action>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    trust_annotations: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: String,
    upstream: Option<String>,
    tools: Option<Vec<String>>,
    method: Option<Method>,
    when: Option<String>,
    action: Option<Action>,
    risk: Option<Risk>,
    approval: Option<Approval>,
    reason: Option<String>,
    summary: Option<String>,
    preview: Option<RawPreview>,
    approvers: Option<RawApprovers>,
    four_eyes: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApprovers {
    users: Option<Vec<String>>,
    groups: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreview {
    arguments: serde_json::Map<String, Value>,
}

// ---------------------------------------------------------------------------------------
// Compiled form.

/// The action for each risk when no rule sets one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Default `allow`.
    pub read: Action,
    /// Default `confirm`.
    pub write: Action,
    /// Default `confirm`.
    pub destructive: Action,
    /// Default `confirm`.
    pub unknown: Action,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            read: Action::Allow,
            write: Action::Confirm,
            destructive: Action::Confirm,
            unknown: Action::Confirm,
        }
    }
}

impl Defaults {
    /// The default action for `risk`.
    pub fn action_for(&self, risk: Risk) -> Action {
        match risk {
            Risk::Read => self.read,
            Risk::Write => self.write,
            Risk::Destructive => self.destructive,
            Risk::Unknown => self.unknown,
        }
    }
}

/// Per-upstream policy settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamSettings {
    /// Whether the upstream's tool annotations decide risk. When false, every tool no rule
    /// matches is `unknown`. Default true.
    pub trust_annotations: bool,
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        UpstreamSettings {
            trust_annotations: true,
        }
    }
}

/// One compiled rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) id: String,
    pub(crate) method: Method,
    pub(crate) upstream: Option<GlobMatcher>,
    /// Globs on the target (tool name, prompt name or resource URI); `None` = every target.
    pub(crate) targets: Option<GlobSet>,
    pub(crate) when: Option<Condition>,
    pub(crate) action: Option<Action>,
    pub(crate) risk: Option<Risk>,
    pub(crate) approval: Option<Approval>,
    pub(crate) reason: Option<String>,
    pub(crate) summary: Option<Template>,
    pub(crate) preview: Option<Value>,
    /// Who may decide the call when it goes to the approval page.
    pub(crate) approvers: RuleApprovers,
}

impl Rule {
    /// Whether method, upstream and target globs select this call (conditions aside).
    pub(crate) fn selects(&self, method: Method, upstream: &str, target: &str) -> bool {
        self.method == method
            && self.upstream.as_ref().is_none_or(|g| g.is_match(upstream))
            && self.targets.as_ref().is_none_or(|g| g.is_match(target))
    }
}

/// A loaded, validated policy. Cheap to clone (rules are shared), `Send + Sync`, so the app
/// can swap it atomically on reload.
#[derive(Clone, Debug)]
pub struct Policy {
    pub(crate) defaults: Defaults,
    pub(crate) approval: Approval,
    pub(crate) token_ttl: Duration,
    pub(crate) upstreams: HashMap<String, UpstreamSettings>,
    pub(crate) rules: Arc<[Rule]>,
    pub(crate) env: CelEnv,
}

impl Default for Policy {
    /// The spec defaults with no rules: what `policies/default.yaml` says.
    fn default() -> Self {
        Policy {
            defaults: Defaults::default(),
            approval: Approval::Any,
            token_ttl: DEFAULT_TOKEN_TTL,
            upstreams: HashMap::new(),
            rules: Arc::from(Vec::new()),
            env: CelEnv::default(),
        }
    }
}

impl Policy {
    /// Parses and validates a policy file's text. Every glob, condition and summary
    /// template is compiled here, so nothing can fail to compile later, mid-call.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        let raw: RawPolicy =
            serde_yaml_ng::from_str(text).map_err(|e| PolicyError::Syntax(e.to_string()))?;
        if raw.version != 1 {
            return Err(PolicyError::Version(raw.version));
        }
        let defaults = match raw.defaults {
            None => Defaults::default(),
            Some(d) => {
                let base = Defaults::default();
                Defaults {
                    read: d.read.unwrap_or(base.read),
                    write: d.write.unwrap_or(base.write),
                    destructive: d.destructive.unwrap_or(base.destructive),
                    unknown: d.unknown.unwrap_or(base.unknown),
                }
            }
        };
        let token_ttl = match raw.token_ttl {
            None => DEFAULT_TOKEN_TTL,
            Some(text) => parse_ttl(&text)?,
        };
        let upstreams = raw
            .upstreams
            .unwrap_or_default()
            .into_iter()
            .map(|(name, settings)| {
                let trust = settings.and_then(|s| s.trust_annotations).unwrap_or(true);
                (
                    name,
                    UpstreamSettings {
                        trust_annotations: trust,
                    },
                )
            })
            .collect();

        let approval = raw.approval.unwrap_or_default();
        let env = CelEnv::default();
        let raw_rules = raw.rules.unwrap_or_default();
        let mut rules = Vec::with_capacity(raw_rules.len());
        let mut ids: HashMap<String, usize> = HashMap::new();
        for (index, raw_rule) in raw_rules.into_iter().enumerate() {
            let position = index + 1;
            let rule = compile_rule(&env, approval, position, raw_rule)?;
            if let Some(first) = ids.insert(rule.id.clone(), position) {
                return Err(PolicyError::DuplicateRuleId {
                    id: rule.id,
                    first,
                    second: position,
                });
            }
            rules.push(rule);
        }

        Ok(Policy {
            defaults,
            approval,
            token_ttl,
            upstreams,
            rules: Arc::from(rules),
            env,
        })
    }

    /// The action for each risk when no rule sets one.
    pub fn defaults(&self) -> &Defaults {
        &self.defaults
    }

    /// The policy-wide approval requirement.
    pub fn approval(&self) -> Approval {
        self.approval
    }

    /// How long a confirmation stays valid.
    pub fn token_ttl(&self) -> Duration {
        self.token_ttl
    }

    /// Settings for `upstream` (the defaults when the file does not name it).
    pub fn upstream(&self, upstream: &str) -> UpstreamSettings {
        self.upstreams.get(upstream).copied().unwrap_or_default()
    }

    /// Upstream names the file configures under `upstreams:`, so the app can warn about
    /// names that match no configured upstream.
    pub fn upstream_names(&self) -> impl Iterator<Item = &str> {
        self.upstreams.keys().map(String::as_str)
    }

    /// Rule ids in file order.
    pub fn rule_ids(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.id.as_str())
    }

    /// Whether some call on `upstream` could be held for confirmation under this policy: a
    /// default action is `confirm`, or a rule that may apply to the upstream confirms. Rules
    /// that only set a risk defer to the defaults, so they are covered by the first test.
    /// Conditions are ignored: a rule that confirms *sometimes* can hold.
    pub fn can_hold_on(&self, upstream: &str) -> bool {
        let defaults = &self.defaults;
        let default_confirms = [
            defaults.read,
            defaults.write,
            defaults.destructive,
            defaults.unknown,
        ]
        .contains(&Action::Confirm);
        default_confirms
            || self.rules.iter().any(|rule| {
                rule.action == Some(Action::Confirm)
                    && rule.upstream.as_ref().is_none_or(|g| g.is_match(upstream))
            })
    }
}

fn parse_ttl(text: &str) -> Result<Duration, PolicyError> {
    let refuse = |reason: String| PolicyError::TokenTtl {
        value: text.to_owned(),
        reason,
    };
    let ttl = humantime::parse_duration(text.trim())
        .map_err(|e| refuse(format!("{e} (write e.g. 30s, 5m or 1h)")))?;
    if ttl.subsec_nanos() != 0 {
        return Err(refuse("token lifetimes are whole seconds".into()));
    }
    if ttl.is_zero() || ttl > MAX_TOKEN_TTL {
        return Err(refuse("must be between 1s and 1h".into()));
    }
    Ok(ttl)
}

fn compile_rule(
    env: &CelEnv,
    policy_approval: Approval,
    position: usize,
    raw: RawRule,
) -> Result<Rule, PolicyError> {
    let valid_id = !raw.id.is_empty()
        && raw
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !valid_id {
        return Err(PolicyError::Rule {
            rule: format!("#{position}"),
            field: "id",
            reason: format!("`{}` is not a valid id (use [A-Za-z0-9_.-]+)", raw.id),
        });
    }
    let id = raw.id;
    let refuse = |field: &'static str, reason: String| PolicyError::Rule {
        rule: id.clone(),
        field,
        reason,
    };
    if RESERVED_RULE_IDS.contains(&id.as_str()) {
        return Err(refuse(
            "id",
            format!("`{id}` is reserved for the gateway's own decisions"),
        ));
    }
    if raw.action.is_none() && raw.risk.is_none() {
        return Err(refuse(
            "action",
            "a rule must set `action`, `risk`, or both".into(),
        ));
    }

    let upstream = raw
        .upstream
        .map(|pattern| glob(&pattern).map(|g| g.compile_matcher()))
        .transpose()
        .map_err(|reason| refuse("upstream", reason))?;

    let targets = match raw.tools {
        None => None,
        Some(patterns) if patterns.is_empty() => {
            return Err(refuse(
                "tools",
                "an empty list matches nothing; omit `tools` to match every target".into(),
            ));
        }
        Some(patterns) => {
            let mut set = GlobSetBuilder::new();
            for pattern in &patterns {
                set.add(glob(pattern).map_err(|reason| refuse("tools", reason))?);
            }
            Some(set.build().map_err(|e| refuse("tools", e.to_string()))?)
        }
    };

    let when = raw
        .when
        .map(|source| Condition::compile(env, &source))
        .transpose()
        .map_err(|reason| refuse("when", format!("invalid CEL: {reason}")))?;

    let summary = raw
        .summary
        .map(|text| Template::parse(&text))
        .transpose()
        .map_err(|reason| refuse("summary", reason))?;

    let preview = raw.preview.map(|p| {
        let mut object = serde_json::Map::new();
        object.insert("arguments".to_owned(), Value::Object(p.arguments));
        Value::Object(object)
    });

    let approval = raw.approval.unwrap_or(policy_approval);
    let approvers = compile_approvers(approval, raw.approvers, raw.four_eyes)
        .map_err(|(field, reason)| refuse(field, reason))?;

    Ok(Rule {
        id,
        method: raw.method.unwrap_or_default(),
        upstream,
        targets,
        when,
        action: raw.action,
        risk: raw.risk,
        approval: raw.approval,
        reason: raw.reason,
        summary,
        preview,
        approvers,
    })
}

/// `approvers:` and `four_eyes:` of a rule whose calls are approved as `approval` says.
/// Refused when they could never apply (the token channel has no approver) or would leave
/// nobody able to approve, so a mistake shows when the policy loads, not as calls that can
/// never run.
fn compile_approvers(
    approval: Approval,
    raw: Option<RawApprovers>,
    four_eyes: Option<bool>,
) -> Result<RuleApprovers, (&'static str, String)> {
    if approval == Approval::Token {
        if raw.is_some() {
            return Err((
                "approvers",
                "the rule's approval is `token`, which has no approver; use `approval: \
                 out_of_band` (or `human`/`any`) to name who approves"
                    .into(),
            ));
        }
        if four_eyes.is_some() {
            return Err((
                "four_eyes",
                "the rule's approval is `token`, which has no approver; use `approval: \
                 out_of_band` (or `human`/`any`)"
                    .into(),
            ));
        }
    }
    let (users, groups) = match raw {
        None => (Vec::new(), Vec::new()),
        Some(raw) => (
            raw.users.unwrap_or_default(),
            raw.groups.unwrap_or_default(),
        ),
    };
    if users
        .iter()
        .chain(&groups)
        .any(|name| name.trim().is_empty())
    {
        return Err((
            "approvers",
            "an empty user or group name names nobody".into(),
        ));
    }
    let four_eyes = four_eyes.unwrap_or(false);
    if four_eyes && users.is_empty() && groups.is_empty() {
        return Err((
            "four_eyes",
            "with no `approvers` users or groups only the requester may approve, and \
             four_eyes forbids that: nobody could approve; name approvers"
                .into(),
        ));
    }
    Ok(RuleApprovers {
        users,
        groups,
        four_eyes,
    })
}

/// Globs compare byte-exact and case-sensitive; `*` also crosses `/` (resource URIs).
fn glob(pattern: &str) -> Result<Glob, String> {
    if pattern.is_empty() {
        return Err("empty glob".into());
    }
    GlobBuilder::new(pattern)
        .case_insensitive(false)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("invalid glob `{pattern}`: {}", e.kind()))
}
