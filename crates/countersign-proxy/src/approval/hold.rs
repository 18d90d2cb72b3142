//! Holding a call that needs confirmation: pick the channel that can reach a person, bind the
//! exact arguments (and the other params that can change what runs), optionally show a dry-run
//! preview, and ask.

use countersign_jsonrpc::message::Request;
use countersign_token::arguments_hash_raw;
use tracing::debug;

use super::answer::Answer;
use super::channel::{self, Channel};
use super::context::{Gated, Verdict};
use super::redeem::bound_params_hash;
use super::refusal::RefusalCode;
use super::{elicitation, input_required, oob_request, preview, token};
use crate::error::ProxyError;

pub(super) async fn hold(gated: &Gated, call: Request) -> Verdict {
    let Some(channel) = channel::pick(gated, &call) else {
        gated.audit(
            "decision",
            "rejected:human_approval_unavailable",
            None,
            None,
            None,
        );
        return Verdict::Answer(gated.human_unavailable());
    };
    let arguments = gated.judged.call.arguments_without_token();
    let (Ok(ah), Ok(ph)) = (
        arguments_hash_raw(Some(&arguments)),
        bound_params_hash(gated),
    ) else {
        debug!("unsafe numbers in risky arguments");
        gated.audit("decision", "rejected:unsafe_arguments", None, None, None);
        return Verdict::Answer(gated.refusal(RefusalCode::UnsafeArguments));
    };
    if let Err(answer) = admit_hold(gated, channel).await {
        return Verdict::Answer(answer);
    }
    let preview = match preview::run(gated, &call, &arguments).await {
        Ok(preview) => preview,
        Err(answer) => return Verdict::Answer(answer),
    };
    let preview = preview.as_deref();
    match channel {
        Channel::Token => Verdict::Answer(token::hold(gated, &arguments, ah, ph, preview)),
        Channel::InputRequired => {
            Verdict::Answer(input_required::ask(gated, &arguments, ah, ph, preview))
        }
        Channel::Elicitation => elicitation::ask(gated, call, &arguments, ah, preview),
        Channel::OutOfBand(link) => {
            oob_request::hold(gated, call, link, &arguments, ah, ph, preview).await
        }
    }
}

/// The `held` and `questions` rate limits, checked once a call would really be held and before
/// its preview runs anything upstream.
async fn admit_hold(gated: &Gated, channel: Channel) -> Result<(), Answer> {
    // Out of band, every channel ends with a person asked on the approval page.
    let asks_person = matches!(
        channel,
        Channel::Elicitation | Channel::InputRequired | Channel::OutOfBand(_)
    );
    let limits = &gated.approvals.settings.rate_limits;
    let admission = limits.admit_hold(&gated.principal.id, gated.route.label, asks_person);
    admission.outcome().await.map_err(|hit| {
        gated.audit("decision", hit.audit_outcome(), None, None, None);
        Answer::Refuse(ProxyError::RateLimited(hit))
    })
}
