//! The 2026-07-28 `input_required` channel: a held call is answered with the gateway's question
//! and a signed `requestState` bound to the call; the client's retry carries the person's answer
//! under `inputResponses["countersign/approval"]` and is redeemed in [`super::redeem`].
//!
//! When an approved call's upstream itself answers `input_required`, its `requestState` is
//! wrapped inside a signed `approved` state ([`StateWrap`]), so the retry is forwarded without
//! asking the person again and the upstream's state comes back byte-exact.

use countersign_jsonrpc::RawJson;
use std::sync::Arc;

use countersign_jsonrpc::message::Request;
use countersign_token::{Claims, Keyring, mint, new_jti};
use serde_json::{Map, Value, json};

use super::answer::Answer;
use super::channel_name;
use super::context::Gated;
use crate::wire::APPROVAL_KEY;

/// Answers with the gateway's question; the signed `requestState` binds it to this exact call.
pub(super) fn ask(
    gated: &Gated,
    arguments: &RawJson,
    ah: String,
    ph: Option<String>,
    preview: Option<&str>,
) -> Answer {
    let (state, _) = gated.issue(ah, ph, channel_name::INPUT_REQUIRED, "asked");
    let question = gated.question(arguments, preview);
    Answer::Result(
        json!({
            "resultType": "input_required",
            "inputRequests": { APPROVAL_KEY: {"method": "elicitation/create", "params": question} },
            "requestState": state,
        })
        .into(),
    )
}

/// The person's answer on a retry, if the retry carries one.
pub(super) fn answer(call: &Request) -> Option<RawJson> {
    call.params
        .as_ref()?
        .get("inputResponses")?
        .get(APPROVAL_KEY)
}

/// The `requestState` a retry presents.
pub(super) fn request_state(call: &Request) -> Option<String> {
    Some(
        call.params
            .as_ref()?
            .get("requestState")?
            .as_str()?
            .into_owned(),
    )
}

/// The bindings of an approved 2026-07-28 call, to mint `approved` states from. Travels in the
/// forwarded request's extensions to the response edits.
///
/// Every approved 2026-07-28 call carries one, and almost none is used (only an upstream that
/// itself answers `input_required` needs it), so it is shared rather than copied on its way to
/// the edits, and holds no `jti`: each state minted from it gets a fresh one.
#[derive(Debug, Clone)]
pub struct StateWrap {
    claims: Arc<Claims>,
    ttl_secs: u64,
    keyring: Arc<Keyring>,
}

impl StateWrap {
    pub(super) fn for_approved(gated: &Gated, ah: String, ph: Option<String>) -> Self {
        let (mut claims, ttl_secs) =
            gated.claims_with_jti(ah, ph, channel_name::APPROVED, String::new());
        claims.sid = None;
        Self {
            claims: Arc::new(claims),
            ttl_secs,
            keyring: gated.approvals.settings.keyring.clone(),
        }
    }

    /// Wraps an upstream's `input_required` result: its `requestState` goes inside a fresh
    /// signed `approved` state. An upstream that asks under the gateway's own key could make
    /// its question look like the gateway's approval, so that answer is refused.
    pub fn wrap(&self, result: &mut Map<String, Value>, now_unix: u64) -> Result<(), String> {
        if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return Ok(());
        }
        if result
            .get("inputRequests")
            .and_then(|r| r.get(APPROVAL_KEY))
            .is_some()
        {
            return Err(format!(
                "the upstream used the gateway's reserved input key `{APPROVAL_KEY}`"
            ));
        }
        let upstream_state = match result.get("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(state)) => Some(state.clone()),
            Some(_) => return Err("the upstream's requestState is not a string".into()),
        };
        let claims = Claims {
            iat: now_unix,
            exp: now_unix + self.ttl_secs,
            jti: new_jti(),
            st: upstream_state,
            ..Claims::clone(&self.claims)
        };
        result.insert(
            "requestState".into(),
            Value::String(mint(&self.keyring, &claims)),
        );
        Ok(())
    }
}
