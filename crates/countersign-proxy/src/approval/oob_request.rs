//! Holding a call out of band: the call is written down as an [`ApprovalRequest`] and opened on
//! the approval page, and the client is given the link in the form it declared it can show
//! ([`Link`]). What the client answers never approves anything; only the page's decision does,
//! read back in [`super::oob_outcome`].

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::Request;
use countersign_policy::{MAX_TOKEN_TTL, RuleApprovers};
use countersign_token::{mint, normalize_numbers_raw, params_hash};
use serde_json::{Value, json};
use tracing::warn;

use super::answer::Answer;
use super::channel::Link;
use super::channel_name;
use super::context::{Gated, Verdict};
use super::elicitation;
use super::oob_stream::PendingLink;
use super::out_of_band::{ApprovalRequest, Approvers, Ticket};
use super::refusal::RefusalCode;
use super::token;
use crate::display;
use crate::wire::APPROVAL_KEY;

/// Opens `call` on the approval page and answers as `link` says.
pub(super) async fn hold(
    gated: &Gated,
    call: Request,
    link: Link,
    arguments: &RawJson,
    ah: String,
    ph: Option<String>,
    preview: Option<&str>,
) -> Verdict {
    let Ok(binding) = binding(gated, &ah, ph.as_deref()) else {
        return Verdict::Answer(gated.refusal(RefusalCode::UnsafeArguments));
    };
    let metrics = &gated.approvals.settings.metrics;
    let ticket = match open(gated, arguments, binding.clone(), preview).await {
        Ok(ticket) => ticket,
        Err(answer) => {
            metrics.record_out_of_band(link.label(), "failed");
            return Verdict::Answer(answer);
        }
    };
    metrics.record_out_of_band(link.label(), "opened");
    let outcome = match link {
        Link::HeldResult => "held",
        _ => "asked",
    };
    // The approval id names the request in the audit trail; its link never does (it carries
    // the signed id, and audit logs travel further than the page).
    gated.audit(
        "decision",
        outcome,
        Some(channel_name::OUT_OF_BAND),
        Some(&ticket.id),
        Some(&ah),
    );
    match link {
        Link::HeldResult => {
            let (state, ttl) = artefact(gated, ah, ph, &ticket);
            Verdict::Answer(token::held_answer(
                gated,
                arguments,
                &state,
                ttl,
                preview,
                Some(&ticket.url),
            ))
        }
        Link::InputRequiredUrl | Link::InputRequiredForm => {
            let (state, _) = artefact(gated, ah, ph, &ticket);
            let params = question(gated, &ticket, link == Link::InputRequiredUrl);
            Verdict::Answer(Answer::Result(
                json!({
                    "resultType": "input_required",
                    "inputRequests": {
                        APPROVAL_KEY: {"method": "elicitation/create", "params": params}
                    },
                    "requestState": state,
                })
                .into(),
            ))
        }
        Link::UrlElicitation | Link::FormElicitation => {
            let Some(session) = gated.session.clone() else {
                return Verdict::Answer(gated.human_unavailable());
            };
            let url_mode = link == Link::UrlElicitation;
            let Ok(call) = gated.judged.call.approved_call(call, false, arguments) else {
                return Verdict::Answer(gated.refusal(RefusalCode::UnsafeArguments));
            };
            let question_id = elicitation::question_id(&gated.approvals, &session, &call.id, &ah);
            let params = question(gated, &ticket, url_mode);
            let question = json!({"jsonrpc": "2.0", "id": question_id,
                                  "method": "elicitation/create", "params": params});
            let audit = gated.call_audit(
                Some(channel_name::OUT_OF_BAND),
                Some(ticket.id.clone()),
                Some(ah),
            );
            Verdict::AskOutOfBand(PendingLink {
                call,
                question,
                question_id,
                session,
                ticket,
                binding,
                url_mode,
                audit,
            })
        }
    }
}

/// Writes the call down and opens it on the page. A page that cannot record it refuses the
/// call: nothing is held that could never be decided.
async fn open(
    gated: &Gated,
    arguments: &RawJson,
    binding: String,
    preview: Option<&str>,
) -> Result<Ticket, Answer> {
    let settings = &gated.approvals.settings;
    let Some(page) = settings.out_of_band.as_ref() else {
        // `channel::pick` only goes out of band with a page configured; stay closed anyway.
        return Err(gated.human_unavailable());
    };
    let decision = &gated.judged.decision;
    let client_name = gated.session.as_deref().and_then(|session| {
        settings
            .sessions
            .get(session, &gated.principal.id, settings.clock.now())
            .and_then(|info| info.client_name)
    });
    let request = ApprovalRequest {
        principal: gated.principal.id.clone(),
        principal_groups: gated.principal.groups.clone(),
        client_name,
        session: gated.session.clone(),
        upstream: gated.upstream().to_owned(),
        tool: gated.target().to_owned(),
        risk: decision.risk.as_str().to_owned(),
        // The built-in decisions name no rule of the file.
        rule: (!countersign_policy::RESERVED_RULE_IDS.contains(&decision.rule.as_str()))
            .then(|| decision.rule.clone()),
        // Exactly what will be forwarded: the numbers in the canonical text the hash covers.
        arguments: normalize_numbers_raw(arguments)
            .map_err(|_| gated.refusal(RefusalCode::UnsafeArguments))?
            .minified()
            .to_string(),
        preview: preview.map(str::to_owned),
        approvers: approvers(&decision.approvers),
        binding,
    };
    page.open(request).await.map_err(|error| {
        warn!(%error, "the approval page could not record the request; refusing the call");
        gated.reject(
            RefusalCode::StoreUnavailable,
            Some(channel_name::OUT_OF_BAND),
        )
    })
}

fn approvers(rule: &RuleApprovers) -> Approvers {
    Approvers {
        users: rule.users.clone(),
        groups: rule.groups.clone(),
        four_eyes: rule.four_eyes,
    }
}

/// The digest binding a decision to this exact call: the token binding's own hashes
/// (arguments, bound params, tool definition) with who asked, where, and in which session,
/// through the same canonical SHA-256. The layer compares it before it forwards, so an approval
/// of one call can never run another.
pub(super) fn binding(gated: &Gated, ah: &str, ph: Option<&str>) -> Result<String, ()> {
    params_hash(&json!({
        "v": 1,
        "sub": gated.principal.id,
        "sid": gated.session,
        "up": gated.upstream(),
        "m": gated.method().as_str(),
        "tool": gated.target(),
        "tdh": gated.definition_hash(),
        "ah": ah,
        "ph": ph,
    }))
    .map_err(|_| ())
}

/// A signed token or `requestState` of the `out_of_band` channel for `ticket`: bound like any
/// other, carrying the approval id (`aid`), and expiring with the request (at most
/// [`MAX_TOKEN_TTL`], the longest any token lives). Returns it with its lifetime in seconds.
pub(super) fn artefact(
    gated: &Gated,
    ah: String,
    ph: Option<String>,
    ticket: &Ticket,
) -> (String, u64) {
    let (mut claims, _) = gated.claims(ah, ph, channel_name::OUT_OF_BAND);
    claims.exp = ticket
        .expires_at
        .clamp(claims.iat + 1, claims.iat + MAX_TOKEN_TTL.as_secs());
    claims.aid = Some(ticket.id.clone());
    let ttl = claims.exp - claims.iat;
    (mint(&gated.approvals.settings.keyring, &claims), ttl)
}

/// `params` of the `elicitation/create` that gives the person the link: URL mode where the
/// client declared it, else a form whose message carries the link. The form asks nothing: its
/// answer never approves (hooks can auto-answer forms), and the message says so.
pub(super) fn question(gated: &Gated, ticket: &Ticket, url_mode: bool) -> Value {
    let mut message = format!(
        "An assistant wants to run a tool that needs your approval on the approval page.\n\n\
         Tool: {}\nServer: {}\nRisk: {}\n",
        gated.target(),
        gated.upstream(),
        gated.judged.decision.risk.as_str()
    );
    if let Some(summary) = gated.judged.decision.summary.as_deref() {
        message.push_str(&format!("What it does: {}\n", display::escape(summary)));
    }
    if url_mode {
        message.push_str(
            "\nOpen the approval page to see the exact call and approve or deny it there. \
             Nothing runs unless you approve on the page.",
        );
        json!({
            "mode": "url",
            "message": message,
            "url": ticket.url,
            "elicitationId": ticket.id,
        })
    } else {
        message.push_str(&format!(
            "\nApprove or deny it on the approval page: {}\n\nAnswering this dialog does not \
             approve the call; only the page does. Nothing runs unless you approve there.",
            ticket.url
        ));
        json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {}},
        })
    }
}
