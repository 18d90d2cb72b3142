//! Which channel can reach a person for a held call.

use countersign_jsonrpc::mcp::{META_CLIENT_CAPABILITIES, ProtocolVersion};
use countersign_jsonrpc::message::Request;
use countersign_policy::Approval;

use super::context::Gated;
use crate::state::declares_form_elicitation;

/// How an approval for a held call is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Channel {
    Token,
    Elicitation,
    InputRequired,
}

/// The channel for `call`, or `None` when the policy demands a person and none can be reached.
pub(super) fn pick(gated: &Gated, call: &Request) -> Option<Channel> {
    let approval = gated.judged.decision.approval;
    if approval == Approval::Token {
        return Some(Channel::Token);
    }
    let reachable = if gated.stateless {
        // 2026-07-28: capabilities are declared per request, and only these count.
        let declared = call
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
            .is_some_and(|c| declares_form_elicitation(&c));
        declared.then_some(Channel::InputRequired)
    } else {
        // Elicitation exists from 2025-06-18 on; such clients send the negotiated version on
        // every request, so a request without it is an older session.
        let version_can_elicit = gated
            .protocol_version
            .is_some_and(|v| v >= ProtocolVersion::V2025_06_18);
        let settings = &gated.approvals.settings;
        gated
            .session
            .as_deref()
            .filter(|_| version_can_elicit)
            .and_then(|s| {
                settings
                    .sessions
                    .get(s, &gated.principal.id, settings.clock.now())
            })
            .filter(|s| s.can_elicit)
            .map(|_| Channel::Elicitation)
    };
    match (reachable, approval) {
        (Some(channel), _) => Some(channel),
        (None, Approval::Human) => None,
        (None, _) => Some(Channel::Token),
    }
}
