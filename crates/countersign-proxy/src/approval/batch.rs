//! Batches (2025-03-26): forwarded only when every gated call in them is allowed on its own. A
//! held call cannot be answered inside a batch, a confirmation is redeemed one call per request,
//! and answers to the gateway's questions come one per request, so any of those refuses the
//! batch whole.

use countersign_jsonrpc::message::Message;
use countersign_policy::Action;

use super::elicitation::is_our_question;
use crate::classify::Classification;
use crate::error::ProxyError;

/// `Ok` when the batch may be forwarded as it is.
pub(super) fn judge(
    messages: &[Message],
    classification: &Classification,
) -> Result<(), ProxyError> {
    for message in messages {
        if let Message::Response(answer) = message
            && is_our_question(answer)
        {
            return Err(ProxyError::RiskyBatch(
                "answers to the gateway's questions are sent one per request".into(),
            ));
        }
    }
    for judged in &classification.calls {
        let call = &judged.call;
        if call.carries_token() {
            return Err(ProxyError::RiskyBatch(format!(
                "`{}` carries a confirmation token; confirmations are redeemed one call per request",
                call.target
            )));
        }
        let decision = &judged.decision;
        let verdict = match decision.action {
            Action::Allow => continue,
            Action::Deny => "denied",
            Action::Confirm => "held for confirmation",
        };
        return Err(ProxyError::RiskyBatch(format!(
            "`{}` is {verdict} by rule `{}`; send that call on its own",
            call.target, decision.rule
        )));
    }
    Ok(())
}
