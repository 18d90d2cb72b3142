//! `classify`: one call in, one decision out; and `explain`, the same over a listing.

use std::collections::HashSet;
use std::time::Duration;

use countersign_jsonrpc::RawJson;
use serde::Serialize;
use serde_json::Value;

use crate::catalog::{Catalog, PinStatus, PinnedTool};
use crate::condition::{Bound, Facts};
use crate::model::{Action, Approval, Method, Principal, Risk, RuleApprovers, is_valid_tool_name};
use crate::policy::{Policy, Rule};
use crate::summary::Scope;

/// `Decision::rule` when no rule matched.
pub const DEFAULT_RULE: &str = "default";
/// `Decision::rule` for a `tools/call` whose name is outside `[A-Za-z0-9_.-]{1,128}`.
pub const INVALID_TOOL_NAME_RULE: &str = "invalid_tool_name";

/// Everything `classify` looks at for one call.
#[derive(Clone, Copy, Debug)]
pub struct CallFacts<'a> {
    /// The configured upstream's name.
    pub upstream: &'a str,
    /// The method being called.
    pub method: Method,
    /// Tool name, prompt name or resource URI, exactly as in the request.
    pub target: &'a str,
    /// The call's `arguments` (`null` when absent), as the client sent them.
    pub arguments: &'a RawJson,
    /// The caller.
    pub principal: &'a Principal,
    /// The pinned tool from the catalog; `None` means not in the catalog (unknown).
    /// Only consulted for `tools/call`.
    pub tool: Option<&'a PinnedTool>,
}

/// What to do with a call, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The call's risk.
    pub risk: Risk,
    /// What to do.
    pub action: Action,
    /// The id of the rule that decided, or [`DEFAULT_RULE`] / [`INVALID_TOOL_NAME_RULE`].
    pub rule: String,
    /// Which channels may approve it (meaningful for `confirm`).
    pub approval: Approval,
    /// The rule's `reason`, shown on deny.
    pub reason: Option<String>,
    /// The rule's rendered `summary`.
    pub summary: Option<String>,
    /// How long a confirmation stays valid.
    pub ttl: Duration,
    /// The rule's `preview` object (`{"arguments": {…}}`), verbatim.
    pub preview: Option<Value>,
    /// Who may decide the call on the approval page (the rule's `approvers:`/`four_eyes:`);
    /// the default, the requester alone, when no rule decided.
    pub approvers: RuleApprovers,
    /// Set when a `when:` condition could not be evaluated while deciding (naming the rule
    /// and the error); the decision was then taken fail-closed. For the audit log.
    pub condition_error: Option<String>,
}

/// One line of `countersign check`: how a listed tool would be treated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    /// Tool name as listed (empty when the entry had none).
    pub tool: String,
    /// How the catalog pinned it.
    pub status: Option<PinStatus>,
    /// Risk of a call without arguments from no particular principal.
    pub risk: Risk,
    /// Action for that call.
    pub action: Action,
    /// Deciding rule id.
    pub rule: String,
    /// Approval requirement.
    pub approval: Approval,
    /// Rules with a `when:` that select this tool and come before the deciding rule: they
    /// were skipped here, and may decide a real call instead.
    pub conditional_rules: Vec<String>,
}

/// How `when:` conditions are treated in one pass over the rules.
enum Conditions<'a> {
    /// Evaluate them against the call.
    Evaluate,
    /// Skip them and record which rules were skipped (for `explain`).
    Skip(&'a mut Vec<String>),
}

/// What a call looks like to the rules, computed once.
struct Subject<'a> {
    call: &'a CallFacts<'a>,
    /// The pin, when it really is this call's tool.
    tool: Option<&'a PinnedTool>,
    /// Risk a rule that sets only `action` gets: the catalog's.
    catalog_risk: Risk,
    /// Risk when no rule matches: the catalog's, or unknown for untrusted annotations.
    unmatched_risk: Risk,
    /// A suspicious pin is never allowed, whatever a rule or default says.
    suspicious: bool,
}

impl Policy {
    /// Decides one call. Rules are tried in file order and the first that matches decides;
    /// otherwise the catalog risk and the defaults do.
    ///
    /// Fail-closed conditions: when a `when:` cannot be evaluated, a rule that would
    /// restrict (sets `confirm`/`deny`, or only a risk at or above the unmatched risk)
    /// counts as matching, one that would relax counts as not matching. Evaluation then
    /// continues down the list and the stricter of that rule's decision and the rest's
    /// wins, so an erroring `confirm` rule can never shadow a later `deny`.
    pub fn classify(&self, call: &CallFacts<'_>) -> Decision {
        self.decide(call, Conditions::Evaluate)
    }

    /// How every tool of one `tools/list` result would be treated: a call with empty
    /// arguments from an anonymous principal, conditional rules skipped and reported.
    pub fn explain(&self, upstream: &str, tools: &[Value]) -> Vec<Explanation> {
        let mut catalog = Catalog::new();
        catalog.observe(upstream, tools);
        self.explain_pinned(upstream, tools, &catalog)
    }

    /// [`Policy::explain`] against the pins `catalog` already holds for `upstream`, as calls
    /// would be classified against them: for a listing the gateway has just pinned, so it is
    /// not pinned (and every definition hashed) a second time. A listed tool `catalog` has no
    /// pin for is explained as an unknown tool.
    pub fn explain_pinned(
        &self,
        upstream: &str,
        tools: &[Value],
        catalog: &Catalog,
    ) -> Vec<Explanation> {
        let principal = Principal::default();
        let arguments = RawJson::empty_object();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for tool in tools {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            if !seen.insert(name) {
                continue;
            }
            let pin = catalog.get(upstream, name);
            let call = CallFacts {
                upstream,
                method: Method::ToolsCall,
                target: name,
                arguments: &arguments,
                principal: &principal,
                tool: pin,
            };
            let mut conditional_rules = Vec::new();
            let decision = self.decide(&call, Conditions::Skip(&mut conditional_rules));
            out.push(Explanation {
                tool: name.to_owned(),
                status: pin.map(|p| p.status),
                risk: decision.risk,
                action: decision.action,
                rule: decision.rule,
                approval: decision.approval,
                conditional_rules,
            });
        }
        out
    }

    fn decide(&self, call: &CallFacts<'_>, mut conditions: Conditions<'_>) -> Decision {
        if call.method == Method::ToolsCall && !is_valid_tool_name(call.target) {
            return Decision {
                risk: Risk::Unknown,
                action: Action::Deny,
                rule: INVALID_TOOL_NAME_RULE.to_owned(),
                approval: self.approval,
                reason: Some("tool names must match [A-Za-z0-9_.-]{1,128}".to_owned()),
                summary: None,
                ttl: self.token_ttl,
                preview: None,
                approvers: RuleApprovers::default(),
                condition_error: None,
            };
        }
        let subject = self.subject(call);
        let facts = Facts {
            args: call.arguments,
            principal: call.principal,
            tool: call.target,
            annotations: subject.tool.and_then(PinnedTool::annotations_value),
            upstream: call.upstream,
            method: call.method.as_str(),
        };
        let mut bound: Option<Bound> = None;
        // The strictest decision of a restrictive rule whose condition failed.
        let mut pending: Option<Decision> = None;
        let mut first_error: Option<String> = None;
        let mut decided = None;

        for rule in self.rules.iter() {
            if !rule.selects(call.method, call.upstream, call.target) {
                continue;
            }
            if let Some(condition) = &rule.when {
                if let Conditions::Skip(skipped) = &mut conditions {
                    skipped.push(rule.id.clone());
                    continue;
                }
                let bound = bound.get_or_insert_with(|| facts.bind(&self.env));
                match condition.evaluate(bound) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(why) => {
                        let note = format!("rule `{}`: when: {why}", rule.id);
                        if self.restricts(rule, &subject) {
                            let mut candidate = self.rule_decision(rule, &subject);
                            candidate.condition_error = Some(note.clone());
                            pending = Some(stricter(pending, candidate));
                        }
                        first_error.get_or_insert(note);
                        continue;
                    }
                }
            }
            decided = Some(self.rule_decision(rule, &subject));
            break;
        }

        let mut decision = decided.unwrap_or_else(|| self.unmatched_decision(&subject));
        if let Some(candidate) = pending {
            decision = stricter(Some(candidate), decision);
        }
        if decision.condition_error.is_none() {
            decision.condition_error = first_error;
        }
        decision
    }

    fn subject<'a>(&self, call: &'a CallFacts<'a>) -> Subject<'a> {
        match call.method {
            Method::ToolsCall => {
                // A pin for another name would classify the wrong tool; treat it as absent.
                let tool = call.tool.filter(|t| t.name == call.target);
                let catalog_risk = tool.map_or(Risk::Unknown, PinnedTool::effective_risk);
                let unmatched_risk = if self.upstream(call.upstream).trust_annotations {
                    catalog_risk
                } else {
                    Risk::Unknown
                };
                Subject {
                    call,
                    tool,
                    catalog_risk,
                    unmatched_risk,
                    suspicious: tool.is_some_and(|t| t.status == PinStatus::Suspicious),
                }
            }
            // Prompts and resources are reads unless a rule says otherwise.
            Method::PromptsGet | Method::ResourcesRead => Subject {
                call,
                tool: None,
                catalog_risk: Risk::Read,
                unmatched_risk: Risk::Read,
                suspicious: false,
            },
        }
    }

    /// Whether a rule, if it matched, would make the outcome stricter than no rule would.
    fn restricts(&self, rule: &Rule, subject: &Subject<'_>) -> bool {
        match (rule.action, rule.risk) {
            (Some(Action::Confirm | Action::Deny), _) => true,
            (Some(Action::Allow), _) => false,
            (None, Some(risk)) => risk >= subject.unmatched_risk,
            (None, None) => false,
        }
    }

    fn rule_decision(&self, rule: &Rule, subject: &Subject<'_>) -> Decision {
        let call = subject.call;
        let risk = rule.risk.unwrap_or(subject.catalog_risk);
        let action = rule
            .action
            .unwrap_or_else(|| self.defaults.action_for(risk));
        let summary = rule.summary.as_ref().map(|t| {
            t.render(&Scope {
                args: call.arguments,
                tool: call.target,
                upstream: call.upstream,
            })
        });
        self.finish(
            subject,
            Decision {
                risk,
                action,
                rule: rule.id.clone(),
                approval: rule.approval.unwrap_or(self.approval),
                reason: rule.reason.clone(),
                summary,
                ttl: self.token_ttl,
                preview: rule.preview.clone(),
                approvers: rule.approvers.clone(),
                condition_error: None,
            },
        )
    }

    fn unmatched_decision(&self, subject: &Subject<'_>) -> Decision {
        let risk = subject.unmatched_risk;
        let action = match subject.call.method {
            Method::ToolsCall => self.defaults.action_for(risk),
            Method::PromptsGet | Method::ResourcesRead => Action::Allow,
        };
        self.finish(
            subject,
            Decision {
                risk,
                action,
                rule: DEFAULT_RULE.to_owned(),
                approval: self.approval,
                reason: None,
                summary: None,
                ttl: self.token_ttl,
                preview: None,
                approvers: RuleApprovers::default(),
                condition_error: None,
            },
        )
    }

    fn finish(&self, subject: &Subject<'_>, mut decision: Decision) -> Decision {
        if subject.suspicious {
            // Two tools answering to one case-folded name, or a repeated name: whichever
            // the call reaches, a person looks at it first.
            decision.risk = Risk::Unknown;
            if decision.action == Action::Allow {
                decision.action = Action::Confirm;
            }
        }
        decision
    }
}

/// The stricter of two decisions (deny > confirm > allow, then higher risk); the earlier
/// one on a tie, so a fail-closed rule keeps its own approval and summary.
fn stricter(earlier: Option<Decision>, later: Decision) -> Decision {
    match earlier {
        Some(e) if (e.action, e.risk) >= (later.action, later.risk) => e,
        _ => later,
    }
}
