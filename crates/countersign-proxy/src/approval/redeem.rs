//! Redeeming a presented approval — a confirmation token, or a 2026-07-28 `requestState` — for
//! exactly the call it was minted for. Order is fixed: verify the MAC and times → hash this
//! request's arguments and bound params, refusing unsafe numbers → check every binding against
//! them → spend the `jti` once → forward. An
//! `out_of_band` artefact, after the same checks, asks the approval page instead of spending its
//! `jti` ([`super::oob_outcome`]).

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::Request;
use countersign_policy::{Approval, MAX_TOKEN_TTL};
use countersign_store::Consumption;
use countersign_token::{
    Claims, Expectation, VerifyRules, arguments_hash_raw, check_binding, params_hash_raw, verify,
};
use tracing::warn;

use super::context::{Gated, Verdict};
use super::input_required::{self, StateWrap};
use super::oob_outcome;
use super::question::approves;
use super::refusal::RefusalCode;
use super::{ApprovalSettings, channel_name};

/// Redeems `presented` (arriving through channel `via`) for `call`.
pub(super) async fn redeem(
    gated: &Gated,
    call: Request,
    presented: &str,
    via: &'static str,
) -> Verdict {
    let reject = |code: RefusalCode| Verdict::Answer(gated.reject(code, Some(via)));
    let settings = &gated.approvals.settings;
    let rules = VerifyRules {
        leeway_secs: settings.leeway_secs,
        max_ttl_secs: MAX_TOKEN_TTL.as_secs(),
    };
    let claims = match verify(
        &settings.keyring,
        presented,
        settings.clock.unix_secs(),
        &rules,
    ) {
        Ok(claims) => claims,
        Err(rejection) => return reject(rejection.into()),
    };
    // The hashes refuse unsafe numbers (`check_safe_numbers`) as they walk, so nothing that
    // passes here carries one.
    let arguments = gated.judged.call.arguments_without_token();
    let (Ok(ah), Ok(ph)) = (
        arguments_hash_raw(Some(&arguments)),
        bound_params_hash(gated),
    ) else {
        return reject(RefusalCode::UnsafeArguments);
    };
    let tdh = gated.definition_hash();
    let expected = Expectation {
        sub: &gated.principal.id,
        sid: gated.session.as_deref(),
        up: gated.upstream(),
        m: gated.method().as_str(),
        tool: gated.target(),
        ah: &ah,
        ph: ph.as_deref(),
        tdh,
    };
    if let Err(rejection) = check_binding(&claims, &expected) {
        return reject(rejection.into());
    }
    if claims.iss != settings.issuer {
        return reject(RefusalCode::BadSignature);
    }
    // Each channel's artefact works only in its own place: a requestState is not a token the
    // model can present, and a token does not answer the gateway's question.
    let upstream_state = match (via, claims.ch.as_str()) {
        (channel_name::TOKEN, channel_name::TOKEN) => {
            if matches!(
                gated.judged.decision.approval,
                Approval::Human | Approval::OutOfBand
            ) {
                return reject(RefusalCode::HumanApprovalUnavailable);
            }
            None
        }
        (channel_name::INPUT_REQUIRED, channel_name::INPUT_REQUIRED) => {
            // Only the page approves such a call; a question answered in the client does not
            // (the state may predate a policy that now says so).
            if gated.judged.decision.approval == Approval::OutOfBand {
                return reject(RefusalCode::HumanApprovalUnavailable);
            }
            match input_required::answer(&call) {
                // The retry lacks the answer: ask again rather than fail.
                None => return super::hold::hold(gated, call).await,
                Some(answer) if !approves(&answer) => {
                    // A decline is final: the state is spent, so the same requestState
                    // cannot be retried with a different answer.
                    let outcome = match spend(gated, &claims).await {
                        Ok(()) => "rejected:not_approved",
                        Err(_) => "rejected:not_approved(unrecorded)",
                    };
                    gated.audit("outcome", outcome, Some(via), Some(&claims.jti), Some(&ah));
                    return Verdict::Answer(gated.refusal(RefusalCode::NotApproved));
                }
                Some(_) => None,
            }
        }
        (channel_name::INPUT_REQUIRED, channel_name::APPROVED) => Some(claims.st.clone()),
        // Out of band, the token or state only says which request the page decides; the
        // page's decision is read once the cheaper checks passed.
        (channel_name::TOKEN | channel_name::INPUT_REQUIRED, channel_name::OUT_OF_BAND) => {
            return oob_outcome::redeem(gated, call, &arguments, claims.clone(), ah, ph, via).await;
        }
        _ => return reject(RefusalCode::Malformed),
    };
    // Last check before forwarding: spend the approval. Any store failure refuses.
    if let Err(code) = spend(gated, &claims).await {
        return reject(code);
    }
    gated.audit(
        "decision",
        "confirmed",
        Some(via),
        Some(&claims.jti),
        Some(&ah),
    );
    // The upstream must receive exactly what was hashed and shown, not `1.0` where the person
    // approved `1`.
    let Ok(mut forwarded) = gated.judged.call.approved_call(call, true, &arguments) else {
        return reject(RefusalCode::UnsafeArguments);
    };
    if let Some(state) = upstream_state {
        // The upstream gets its own state back byte for byte (or none, if it sent none).
        if let (Some(params), Some(state)) = (forwarded.params.as_mut(), state) {
            *params = params
                .with_member("requestState", &RawJson::string(&state))
                .into();
        }
    }
    let wrap = gated
        .stateless
        .then(|| StateWrap::for_approved(gated, ah.clone(), ph));
    Verdict::Forward {
        call: forwarded,
        audit: gated.call_audit(Some(via), Some(claims.jti), Some(ah)),
        wrap,
    }
}

/// The `ph` of this call: the hash of the other params it binds, if it has any.
pub(super) fn bound_params_hash(gated: &Gated) -> Result<Option<String>, ()> {
    gated
        .judged
        .call
        .bound_params()
        .as_ref()
        .map(params_hash_raw)
        .transpose()
        .map_err(|_| ())
}

/// Spends the approval's `jti` in the replay store, once.
async fn spend(gated: &Gated, claims: &Claims) -> Result<(), RefusalCode> {
    spend_once(&gated.approvals.settings, &claims.jti, claims.exp).await
}

/// Records `key` as spent in the replay store until `expires_at` (Unix seconds, plus the
/// leeway): `Ok` for the first spend on any replica, `replayed` after, `store_unavailable` when
/// the store cannot say (fail closed). The last step before an approved call is forwarded,
/// whichever channel approved it.
pub(super) async fn spend_once(
    settings: &ApprovalSettings,
    key: &str,
    expires_at: u64,
) -> Result<(), RefusalCode> {
    let expires_at_ms = (expires_at + settings.leeway_secs + 1) * 1000;
    let started = settings.clock.now();
    let consumed = settings.store.consume(key, expires_at_ms).await;
    let outcome = match &consumed {
        Ok(Consumption::First) => "consumed",
        Ok(Consumption::AlreadySpent) => "replayed",
        Err(_) => "error",
    };
    settings
        .metrics
        .observe_store(outcome, settings.clock.now().duration_since(started));
    match consumed {
        Ok(Consumption::First) => Ok(()),
        Ok(Consumption::AlreadySpent) => Err(RefusalCode::Replayed),
        Err(error) => {
            warn!(%error, "replay store failed; refusing the approved call");
            Err(RefusalCode::StoreUnavailable)
        }
    }
}
