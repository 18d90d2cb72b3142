//! The token channel: a held call is answered with a signed single-use confirmation token the
//! model presents on the repeated call (redeemed in [`super::redeem`]).

use countersign_jsonrpc::RawJson;
use countersign_policy::Method;
use http::StatusCode;

use super::answer::Answer;
use super::channel_name;
use super::context::Gated;
use super::results::{self, Held};
use crate::wire::{CONFIRMATION_META, HELD_ERROR_CODE};

/// The held answer, carrying a fresh token bound to this call.
pub(super) fn hold(
    gated: &Gated,
    arguments: &RawJson,
    ah: String,
    ph: Option<String>,
    preview: Option<&str>,
) -> Answer {
    let (token, ttl) = gated.issue(ah, ph, channel_name::TOKEN, "held");
    held_answer(gated, arguments, &token, ttl, preview, None)
}

/// The held answer carrying `token`; out of band, also the approval page's link.
pub(super) fn held_answer(
    gated: &Gated,
    arguments: &RawJson,
    token: &str,
    ttl: u64,
    preview: Option<&str>,
    approval_url: Option<&str>,
) -> Answer {
    let mut summary = gated.summary();
    if let Some(preview) = preview {
        // Escaped with the rest of the summary when the result's text is written.
        summary.push_str(&format!("\nPreview (dry run): {preview}"));
    }
    let held = Held {
        token,
        tool: gated.target(),
        upstream: gated.upstream(),
        risk: gated.judged.decision.risk.as_str(),
        rule: &gated.judged.decision.rule,
        summary: &summary,
        arguments,
        expires_in_secs: ttl,
        token_as_argument: gated.judged.call.token_argument_is_ours,
        approval_url,
    };
    match gated.method() {
        Method::ToolsCall => Answer::ToolResult(results::held(&held, gated.has_output_schema())),
        Method::PromptsGet | Method::ResourcesRead => {
            // A prompt's or resource's arguments are echoed only up to a bound (see
            // `results::ECHO_ARGUMENTS_MAX_BYTES`), so this tree stays small.
            let result = results::held(&held, true).finish().to_value();
            Answer::Error {
                status: StatusCode::OK,
                code: HELD_ERROR_CODE,
                message: result["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                data: result["_meta"][CONFIRMATION_META].clone(),
            }
        }
    }
}
