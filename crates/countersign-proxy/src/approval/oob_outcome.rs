//! Reading the approval page's decision back and acting on it exactly once.
//!
//! Whatever channel carries the outcome (a waiting stream, a retried `requestState`, a retried
//! token), the call runs only when the page says `Approved` with the binding of exactly this
//! call, and only after `oob:<approval id>` was consumed in the replay store: one approval runs
//! one call, on whichever replica gets there first. Any doubt — store down, unknown id,
//! another call's binding — refuses and forwards nothing.

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::Request;
use countersign_store::StoreError;
use countersign_token::Claims;
use tracing::warn;

use super::context::{Gated, Verdict};
use super::input_required;
use super::oob_request;
use super::out_of_band::ApprovalStatus;
use super::refusal::RefusalCode;
use super::{ApprovalSettings, channel_name};

/// What the page's answer means for the held call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decided {
    /// Approved for this very call: consume, then forward.
    Run,
    /// Nobody decided yet.
    Pending,
    /// Refused with this code; the audit outcome says why.
    Refused(RefusalCode, &'static str),
}

/// Judges `status` for a call whose binding is `binding`.
pub(super) fn judge(status: Result<ApprovalStatus, StoreError>, binding: &str) -> Decided {
    match status {
        Ok(ApprovalStatus::Approved { binding: b, .. }) if b == binding => Decided::Run,
        Ok(ApprovalStatus::Approved { .. }) => {
            Decided::Refused(RefusalCode::ApprovalMismatch, "rejected:approval_mismatch")
        }
        Ok(ApprovalStatus::Pending) => Decided::Pending,
        Ok(ApprovalStatus::Denied { .. }) => {
            Decided::Refused(RefusalCode::NotApproved, "rejected:not_approved(denied)")
        }
        Ok(ApprovalStatus::Gone) => Decided::Refused(RefusalCode::Expired, "rejected:expired"),
        Err(error) => {
            warn!(%error, "the approval page's records could not be read; refusing the call");
            Decided::Refused(RefusalCode::StoreUnavailable, "rejected:store_unavailable")
        }
    }
}

/// Consumes approval `id` once, across replicas, until the request's expiry: the last step
/// before an out-of-band approval is forwarded.
pub(super) async fn consume(
    settings: &ApprovalSettings,
    id: &str,
    expires_at: u64,
) -> Result<(), RefusalCode> {
    super::redeem::spend_once(settings, &format!("oob:{id}"), expires_at).await
}

/// Redeems a verified, bound `out_of_band` token or `requestState` (`via` says which) whose
/// `arguments` (the value hashed into `ah`) are safe: asks the page, then consumes and forwards
/// them.
///
/// A token (no elicitation at all) is only checked: `pending_approval` leaves it unspent, so
/// the model can try again once the person decided. A `requestState` comes back after the
/// person answered the client's question, and in URL mode that only means they opened the
/// link; so the retry waits for the page's decision, at most until the request expires, rather
/// than end the client's tool call with nothing it could retry. A declined question is final:
/// the approval is consumed, so no later retry can run it.
pub(super) async fn redeem(
    gated: &Gated,
    call: Request,
    arguments: &RawJson,
    claims: Claims,
    ah: String,
    ph: Option<String>,
    via: &'static str,
) -> Verdict {
    let settings = &gated.approvals.settings;
    let audit_refusal = |outcome: &str, code: RefusalCode| {
        gated.audit(
            "outcome",
            outcome,
            Some(channel_name::OUT_OF_BAND),
            claims.aid.as_deref(),
            Some(&ah),
        );
        Verdict::Answer(gated.refusal(code))
    };
    let (Some(page), Some(id)) = (settings.out_of_band.as_ref(), claims.aid.as_deref()) else {
        // An out-of-band artefact without a page to ask, or without an id: nothing can say
        // a person approved.
        return audit_refusal(
            "rejected:human_approval_unavailable",
            RefusalCode::HumanApprovalUnavailable,
        );
    };
    let Ok(binding) = oob_request::binding(gated, &ah, ph.as_deref()) else {
        return audit_refusal("rejected:unsafe_arguments", RefusalCode::UnsafeArguments);
    };
    if via == channel_name::INPUT_REQUIRED
        && input_required::answer(&call).is_some_and(|answer| !accepted(&answer))
    {
        let outcome = match consume(settings, id, claims.exp).await {
            Ok(()) => "rejected:not_approved(declined)",
            Err(_) => "rejected:not_approved(declined,unrecorded)",
        };
        return audit_refusal(outcome, RefusalCode::NotApproved);
    }
    let mut decided = judge(page.status(id).await, &binding);
    if decided == Decided::Pending && via == channel_name::INPUT_REQUIRED {
        let left = claims.exp.saturating_sub(settings.clock.unix_secs());
        let waited = page.wait(id, std::time::Duration::from_secs(left)).await;
        decided = match judge(waited, &binding) {
            // Waited until the request's expiry: it expired undecided.
            Decided::Pending => Decided::Refused(RefusalCode::Expired, "rejected:expired"),
            other => other,
        };
    }
    match decided {
        Decided::Run => {}
        Decided::Pending => {
            return audit_refusal("rejected:pending_approval", RefusalCode::PendingApproval);
        }
        Decided::Refused(code, outcome) => return audit_refusal(outcome, code),
    }
    if let Err(code) = consume(settings, id, claims.exp).await {
        return audit_refusal(&format!("rejected:{}", code.as_str()), code);
    }
    gated.audit(
        "decision",
        "confirmed",
        Some(channel_name::OUT_OF_BAND),
        Some(id),
        Some(&ah),
    );
    let Ok(forwarded) = gated.judged.call.approved_call(call, true, arguments) else {
        return audit_refusal("rejected:unsafe_arguments", RefusalCode::UnsafeArguments);
    };
    let wrap = gated
        .stateless
        .then(|| input_required::StateWrap::for_approved(gated, ah.clone(), ph));
    Verdict::Forward {
        call: forwarded,
        audit: gated.call_audit(
            Some(channel_name::OUT_OF_BAND),
            Some(id.to_owned()),
            Some(ah),
        ),
        wrap,
    }
}

/// Whether an `ElicitResult` is an accept. For the out-of-band questions that is never an
/// approval — in URL mode it means the person agreed to open the link, in form mode nothing —
/// but anything else (decline, cancel, malformed) ends the request as not approved.
pub(super) fn accepted(result: &countersign_jsonrpc::RawJson) -> bool {
    result
        .get("action")
        .and_then(|a| a.as_str().map(|a| a == "accept"))
        == Some(true)
}
