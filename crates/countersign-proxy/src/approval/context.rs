//! Everything known about one gated call while the approval layer decides it, and the answers,
//! claims and audit lines built from it.

use countersign_jsonrpc::RawJson;
use std::sync::{Arc, OnceLock};

use countersign_jsonrpc::mcp::ProtocolVersion;
use countersign_jsonrpc::message::Request;
use countersign_policy::{Approval, Method, Principal};
use countersign_token::{Claims, new_jti};
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Approvals;
use super::answer::Answer;
use super::question::{Question, elicitation_params};
use super::refusal::RefusalCode;
use super::results::{self, Refusal};
use crate::audit::{AuditRecord, CallAudit, timestamp};
use crate::classify::Judged;
use crate::route::Route;
use crate::wire::{CONFIRMATION_META, MISSING_CAPABILITY_CODE, REFUSED_ERROR_CODE};

/// `tdh` for a tool the catalog does not know: a later pin of that tool changes it, so an
/// approval for an unknown tool stops working once the tool's real definition is known.
const UNKNOWN_DEFINITION: &str = "unknown";

/// One gated call being decided.
#[derive(Debug)]
pub(super) struct Gated {
    pub(super) approvals: Arc<Approvals>,
    pub(super) route: Route,
    /// The client request's head: headers to forward with, extensions to carry on.
    pub(super) parts: http::request::Parts,
    pub(super) principal: Principal,
    /// Sessions exist only before 2026-07-28; a stateless request's header means nothing.
    pub(super) session: Option<String>,
    pub(super) stateless: bool,
    /// The revision the client negotiated, from its `MCP-Protocol-Version` header.
    pub(super) protocol_version: Option<ProtocolVersion>,
    pub(super) judged: Judged,
    pub(super) mirrored: Vec<(HeaderName, HeaderValue)>,
    pub(super) started: Instant,
    /// [`Gated::definition_hash`], once looked up: a redemption binds it twice (the check, and
    /// the `approved` state of a 2026-07-28 call).
    pub(super) tdh: OnceLock<String>,
}

impl Gated {
    pub(super) fn target(&self) -> &str {
        &self.judged.call.target
    }

    pub(super) fn method(&self) -> Method {
        self.judged.call.method
    }

    pub(super) fn upstream(&self) -> &str {
        &self.route.upstream.name
    }

    /// The `tdh` claim of this call's tool: the hash of its pinned definition.
    pub(super) fn definition_hash(&self) -> &str {
        self.tdh.get_or_init(|| match &self.judged.pinned {
            Some(pin) => self.approvals.definition_hashes.hash(
                self.upstream(),
                self.target(),
                &pin.definition,
            ),
            None => UNKNOWN_DEFINITION.to_owned(),
        })
    }

    pub(super) fn has_output_schema(&self) -> bool {
        self.judged.pinned.as_ref().is_some_and(|p| {
            p.definition
                .get("outputSchema")
                .is_some_and(|s| !s.is_null())
        })
    }

    /// The gateway's `elicitation/create` params for this call.
    pub(super) fn question(&self, arguments: &RawJson, preview: Option<&str>) -> Value {
        elicitation_params(&Question {
            tool: self.target(),
            upstream: self.upstream(),
            risk: self.judged.decision.risk.as_str(),
            summary: self.judged.decision.summary.as_deref(),
            arguments,
            preview,
        })
    }

    pub(super) fn summary(&self) -> String {
        self.judged
            .decision
            .summary
            .clone()
            .unwrap_or_else(|| format!("run {} on {}", self.target(), self.upstream()))
    }

    /// The refusal answer for `code`, with the standard message.
    pub(super) fn refusal(&self, code: RefusalCode) -> Answer {
        self.refusal_with(code, code.message(self.target()))
    }

    /// A policy denial, with the rule's reason when it gives one.
    pub(super) fn denial(&self) -> Answer {
        let message = match &self.judged.decision.reason {
            Some(reason) => {
                format!("This call is not allowed by policy, so nothing was sent: {reason}")
            }
            None => RefusalCode::PolicyDenied.text().next_step.to_owned(),
        };
        self.refusal_with(RefusalCode::PolicyDenied, message)
    }

    fn refusal_with(&self, code: RefusalCode, message: String) -> Answer {
        let refusal = Refusal {
            code,
            tool: self.target(),
            upstream: self.upstream(),
            message,
            rule: Some(&self.judged.decision.rule),
        };
        match self.method() {
            Method::ToolsCall => {
                Answer::ToolResult(results::refused(&refusal, self.has_output_schema()))
            }
            Method::PromptsGet | Method::ResourcesRead => {
                let result = results::refused(&refusal, true).finish().to_value();
                Answer::Error {
                    status: StatusCode::OK,
                    code: REFUSED_ERROR_CODE,
                    message: refusal.message.clone(),
                    data: result["_meta"][CONFIRMATION_META].clone(),
                }
            }
        }
    }

    /// The policy wants a person and this client cannot ask one. On 2026-07-28 that is the
    /// protocol's `MissingRequiredClientCapability` (-32021, HTTP 400) — except for an
    /// `out_of_band` rule, which no client capability could satisfy (the approval page is
    /// missing), so it is refused like any other call.
    pub(super) fn human_unavailable(&self) -> Answer {
        let code = RefusalCode::HumanApprovalUnavailable;
        if self.stateless && self.judged.decision.approval != Approval::OutOfBand {
            return Answer::Error {
                status: StatusCode::BAD_REQUEST,
                code: MISSING_CAPABILITY_CODE,
                message: code.message(self.target()),
                data: json!({
                    "requiredCapabilities": {"elicitation": {"form": {}}},
                    "status": "rejected",
                    "code": code.as_str(),
                    "tool": self.target(),
                    "upstream": self.upstream(),
                }),
            };
        }
        self.refusal(code)
    }

    /// The claims of an approval artefact for this call on channel `ch`, with its lifetime.
    pub(super) fn claims(&self, ah: String, ph: Option<String>, ch: &str) -> (Claims, u64) {
        self.claims_with_jti(ah, ph, ch, new_jti())
    }

    /// [`Gated::claims`] with the given `jti`.
    pub(super) fn claims_with_jti(
        &self,
        ah: String,
        ph: Option<String>,
        ch: &str,
        jti: String,
    ) -> (Claims, u64) {
        let settings = &self.approvals.settings;
        let now = settings.clock.unix_secs();
        let ttl = self.judged.decision.ttl.as_secs().max(1);
        let claims = Claims {
            v: 1,
            iss: settings.issuer.clone(),
            sub: self.principal.id.clone(),
            sid: self.session.clone(),
            up: self.upstream().to_owned(),
            m: self.method().as_str().to_owned(),
            tool: self.target().to_owned(),
            ah,
            ph,
            tdh: self.definition_hash().to_owned(),
            rule: self.judged.decision.rule.clone(),
            ch: ch.to_owned(),
            iat: now,
            exp: now + ttl,
            jti,
            st: None,
            aid: None,
        };
        (claims, ttl)
    }

    /// Mints the signed artefact of a held call for channel `ch` and records the decision
    /// (`outcome`); returns it with its lifetime in seconds.
    pub(super) fn issue(
        &self,
        ah: String,
        ph: Option<String>,
        ch: &'static str,
        outcome: &str,
    ) -> (String, u64) {
        let (claims, ttl) = self.claims(ah, ph, ch);
        let minted = countersign_token::mint(&self.approvals.settings.keyring, &claims);
        self.audit(
            "decision",
            outcome,
            Some(ch),
            Some(&claims.jti),
            Some(&claims.ah),
        );
        (minted, ttl)
    }

    /// What audit lines about this call name.
    pub(super) fn subject(&self) -> Subject<'_> {
        Subject {
            approvals: &self.approvals,
            upstream: self.upstream(),
            principal: &self.principal.id,
            session: self.session.as_deref(),
            judged: &self.judged,
            started: self.started,
        }
    }

    /// What the audit layer writes the outcome line from.
    pub(super) fn call_audit(
        &self,
        channel: Option<&'static str>,
        jti: Option<String>,
        args_hash: Option<String>,
    ) -> CallAudit {
        self.subject().call_audit(channel, jti, args_hash)
    }

    /// Writes one audit line about this call.
    pub(super) fn audit(
        &self,
        event: &'static str,
        outcome: &str,
        channel: Option<&str>,
        jti: Option<&str>,
        args_hash: Option<&str>,
    ) {
        self.subject()
            .audit(event, outcome, channel, jti, args_hash);
    }

    /// Writes the outcome line of a call that ends here, refused, and returns the refusal.
    pub(super) fn reject(&self, code: RefusalCode, channel: Option<&str>) -> Answer {
        self.audit(
            "outcome",
            &format!("rejected:{}", code.as_str()),
            channel,
            None,
            None,
        );
        self.refusal(code)
    }
}

/// A gated call as the audit trail names it: who, where, what and how it was decided. Calls
/// that go on without a hold (allowed ones, alone, as notifications or in a batch) are audited
/// from this alone.
#[derive(Debug, Clone, Copy)]
pub(super) struct Subject<'a> {
    pub(super) approvals: &'a Approvals,
    pub(super) upstream: &'a str,
    /// The principal's id.
    pub(super) principal: &'a str,
    pub(super) session: Option<&'a str>,
    pub(super) judged: &'a Judged,
    pub(super) started: Instant,
}

impl Subject<'_> {
    /// What the audit layer writes the outcome line from.
    pub(super) fn call_audit(
        &self,
        channel: Option<&'static str>,
        jti: Option<String>,
        args_hash: Option<String>,
    ) -> CallAudit {
        let decision = &self.judged.decision;
        CallAudit {
            principal: self.principal.to_owned(),
            session: self.session.map(str::to_owned),
            method: self.judged.call.method.as_str(),
            target: self.judged.call.target.clone(),
            risk: decision.risk.as_str(),
            rule: decision.rule.clone(),
            action: decision.action.as_str(),
            channel,
            jti,
            args_hash,
            started: self.started,
        }
    }

    /// Writes one audit line about this call.
    pub(super) fn audit(
        &self,
        event: &'static str,
        outcome: &str,
        channel: Option<&str>,
        jti: Option<&str>,
        args_hash: Option<&str>,
    ) {
        let settings = &self.approvals.settings;
        let decision = &self.judged.decision;
        let arguments = settings
            .audit
            .include_arguments()
            .then(|| self.judged.call.arguments.minified());
        settings.metrics.record_decision(
            self.upstream,
            event,
            decision.action.as_str(),
            channel,
            &decision.rule,
            outcome,
        );
        let trace = crate::trace::TraceIds::current();
        settings.audit.record(&AuditRecord {
            ts: timestamp(settings.clock.wall()),
            event,
            principal: self.principal,
            upstream: self.upstream,
            method: self.judged.call.method.as_str(),
            tool: &self.judged.call.target,
            session: self.session,
            risk: Some(decision.risk.as_str()),
            rule: Some(&decision.rule),
            action: Some(decision.action.as_str()),
            channel,
            jti,
            args_hash,
            outcome,
            latency_ms: None,
            trace_id: trace.as_ref().map(crate::trace::TraceIds::trace_id),
            span_id: trace.as_ref().map(crate::trace::TraceIds::span_id),
            arguments: arguments.as_ref(),
        });
    }
}

/// What the approval layer does with one gated call.
// One verdict per call, moved once and never stored: boxing the large variant would only add
// an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Verdict {
    /// Forward this call (approval artefacts stripped, risky arguments in canonical form).
    Forward {
        call: Request,
        audit: CallAudit,
        /// For an approved 2026-07-28 call: how to wrap the upstream's own `input_required`.
        wrap: Option<super::StateWrap>,
    },
    /// Answer the client; nothing goes upstream.
    Answer(Answer),
    /// Ask the person on an SSE stream, then forward or refuse.
    Ask(super::elicitation::PendingQuestion),
    /// Give the person the approval page's link on an SSE stream, wait for the page's
    /// decision, then forward or refuse.
    AskOutOfBand(super::oob_stream::PendingLink),
}
