//! Why the gateway refuses to run a gated call: each code of the refusal table, and the one
//! exhaustive mapping from a code to its wire name, its status and what the model is told.

use countersign_token::TokenRejection;

/// A refusal of a gated call. Every variant is a documented wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    Malformed,
    BadSignature,
    UnknownKey,
    Expired,
    Replayed,
    SubjectMismatch,
    SessionMismatch,
    UpstreamMismatch,
    ToolMismatch,
    ArgumentsMismatch,
    DefinitionChanged,
    StoreUnavailable,
    HumanApprovalUnavailable,
    NotApproved,
    PolicyDenied,
    UnsafeArguments,
    RateLimited,
    /// Out of band: nobody has decided on the approval page yet; the token stays valid.
    PendingApproval,
    /// Out of band: the page's approval is for a different call than the one presented.
    ApprovalMismatch,
}

/// How a refusal reads on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalText {
    /// The `code` member.
    pub code: &'static str,
    /// The `status` member: `denied` for policy, `rejected` for everything else.
    pub status: &'static str,
    /// What the model is told to do next.
    pub next_step: &'static str,
}

impl RefusalCode {
    /// The one mapping of a code to its wire form; no `_` arm, so a new code forces a decision.
    pub fn text(self) -> RefusalText {
        let (code, status, next_step) = match self {
            RefusalCode::Replayed => (
                "replayed",
                "rejected",
                "This confirmation token was already used. Nothing was sent again. If the user wants the call to run again, call the tool without a token to get a new confirmation.",
            ),
            RefusalCode::Expired => (
                "expired",
                "rejected",
                "This confirmation token has expired, so nothing was sent. Call the tool again without the token to ask the user again.",
            ),
            RefusalCode::ArgumentsMismatch => (
                "arguments_mismatch",
                "rejected",
                "The arguments differ from the ones the user approved, so nothing was sent. Call the tool without a token to get a confirmation for these arguments.",
            ),
            RefusalCode::ToolMismatch => (
                "tool_mismatch",
                "rejected",
                "This confirmation token was issued for a different tool, so nothing was sent.",
            ),
            RefusalCode::UpstreamMismatch => (
                "upstream_mismatch",
                "rejected",
                "This confirmation token was issued for a different server, so nothing was sent.",
            ),
            RefusalCode::SubjectMismatch => (
                "subject_mismatch",
                "rejected",
                "This confirmation token was issued to a different user, so nothing was sent.",
            ),
            RefusalCode::SessionMismatch => (
                "session_mismatch",
                "rejected",
                "This confirmation token was issued in a different session, so nothing was sent. Call the tool without a token to ask again.",
            ),
            RefusalCode::DefinitionChanged => (
                "definition_changed",
                "rejected",
                "The tool's definition changed since the user approved, so nothing was sent. Call the tool without a token to ask again.",
            ),
            RefusalCode::BadSignature => ("bad_signature", "rejected", INVALID_TOKEN),
            RefusalCode::UnknownKey => ("unknown_key", "rejected", INVALID_TOKEN),
            RefusalCode::Malformed => ("malformed", "rejected", INVALID_TOKEN),
            RefusalCode::StoreUnavailable => (
                "store_unavailable",
                "rejected",
                "The gateway could not record the confirmation, so nothing was sent (it fails closed). Try again shortly.",
            ),
            RefusalCode::HumanApprovalUnavailable => (
                "human_approval_unavailable",
                "rejected",
                "This call needs approval from a person through the client (elicitation) or the gateway's approval page, and neither can reach one here. Nothing was sent. Use a client that supports elicitation, or ask the operator to configure the approval page.",
            ),
            RefusalCode::NotApproved => (
                "not_approved",
                "rejected",
                "The user did not approve this call, so nothing was sent. Do not retry unless they ask.",
            ),
            RefusalCode::PolicyDenied => (
                "policy_denied",
                "denied",
                "This call is not allowed by policy, so nothing was sent. Do not retry it.",
            ),
            RefusalCode::UnsafeArguments => (
                "unsafe_arguments",
                "rejected",
                "The arguments contain numbers that cannot be confirmed exactly (integers beyond ±9007199254740991 or non-finite values), so nothing was sent. Send such values as strings.",
            ),
            RefusalCode::RateLimited => (
                "rate_limited",
                "rejected",
                "Too many of this user's calls are already waiting for approval, so nothing was sent and the user was not asked. Wait until they answer the waiting ones, then try again.",
            ),
            RefusalCode::PendingApproval => (
                "pending_approval",
                "rejected",
                "Nobody has approved this call on the approval page yet, so nothing was sent. Ask the user to open the approval link and decide there; you cannot approve it yourself. Call again with the same token only after they say they approved. The token stays valid until the request expires.",
            ),
            RefusalCode::ApprovalMismatch => (
                "approval_mismatch",
                "rejected",
                "The approval given on the approval page is for a different call, so nothing was sent. Call the tool without a token to request approval for this call.",
            ),
        };
        RefusalText {
            code,
            status,
            next_step,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.text().code
    }

    /// The model-facing message: the next step, with the tool and code it is about.
    pub fn message(self, tool: &str) -> String {
        let text = self.text();
        format!("{} (tool: {tool}, code: {})", text.next_step, text.code)
    }
}

const INVALID_TOKEN: &str = "This confirmation token is not valid, so nothing was sent. Use only tokens returned by the gateway, unchanged; call the tool without a token to get one.";

impl From<TokenRejection> for RefusalCode {
    fn from(rejection: TokenRejection) -> Self {
        match rejection {
            TokenRejection::Malformed => RefusalCode::Malformed,
            TokenRejection::BadSignature => RefusalCode::BadSignature,
            TokenRejection::UnknownKey => RefusalCode::UnknownKey,
            TokenRejection::Expired => RefusalCode::Expired,
            TokenRejection::SubjectMismatch => RefusalCode::SubjectMismatch,
            TokenRejection::SessionMismatch => RefusalCode::SessionMismatch,
            TokenRejection::UpstreamMismatch => RefusalCode::UpstreamMismatch,
            TokenRejection::ToolMismatch => RefusalCode::ToolMismatch,
            TokenRejection::ArgumentsMismatch => RefusalCode::ArgumentsMismatch,
            TokenRejection::DefinitionChanged => RefusalCode::DefinitionChanged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_rejections_keep_their_codes() {
        for rejection in [
            TokenRejection::Malformed,
            TokenRejection::BadSignature,
            TokenRejection::UnknownKey,
            TokenRejection::Expired,
            TokenRejection::SubjectMismatch,
            TokenRejection::SessionMismatch,
            TokenRejection::UpstreamMismatch,
            TokenRejection::ToolMismatch,
            TokenRejection::ArgumentsMismatch,
            TokenRejection::DefinitionChanged,
        ] {
            assert_eq!(RefusalCode::from(rejection).as_str(), rejection.code());
        }
    }

    #[test]
    fn only_policy_denials_are_denied_and_not_approved_says_not_to_retry() {
        assert_eq!(RefusalCode::PolicyDenied.text().status, "denied");
        assert_eq!(RefusalCode::Replayed.text().status, "rejected");
        let message = RefusalCode::NotApproved.message("create_order");
        assert!(message.contains("Do not retry unless they ask"));
        assert!(message.ends_with("(tool: create_order, code: not_approved)"));
    }
}
