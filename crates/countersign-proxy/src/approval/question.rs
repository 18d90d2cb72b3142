//! Asking the person: the `elicitation/create` question the gateway sends (on the held call's
//! SSE stream, or inside an `input_required` result), and how an answer is judged.
//!
//! The question is security UI. It is built from the canonical arguments, the configured
//! upstream name and the policy's summary — never from model-written text such as the tool's
//! description — and every character that could hide or reorder what the person reads
//! (control characters, ANSI escapes, bidi overrides, zero-width characters) is shown escaped.

use countersign_jsonrpc::RawJson;
use serde_json::{Value, json};

use crate::display::{self, ListingStyle};

/// Longest argument listing shown; the rest is cut with a visible marker.
const MAX_ARGUMENTS_CHARS: usize = 1500;

/// What the person is asked about.
#[derive(Debug)]
pub(super) struct Question<'a> {
    pub(super) tool: &'a str,
    pub(super) upstream: &'a str,
    pub(super) risk: &'a str,
    pub(super) summary: Option<&'a str>,
    /// Canonical arguments, exactly as they will be forwarded.
    pub(super) arguments: &'a RawJson,
    /// Text of a dry-run preview, when the policy asked for one.
    pub(super) preview: Option<&'a str>,
}

/// `params` of the gateway's `elicitation/create`.
pub(super) fn elicitation_params(question: &Question<'_>) -> Value {
    json!({
        "mode": "form",
        "message": message(question),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Approve this call?", "default": false}
            },
            "required": ["approve"]
        }
    })
}

fn message(question: &Question<'_>) -> String {
    let mut text = format!(
        "An assistant wants to run a tool that needs your approval.\n\nTool: {}\nServer: {}\nRisk: {}\n",
        question.tool, question.upstream, question.risk
    );
    if let Some(summary) = question.summary {
        text.push_str(&format!("What it does: {}\n", display::escape(summary)));
    }
    text.push_str(&format!(
        "Arguments:\n{}\n",
        display::arguments_listing(
            question.arguments,
            ListingStyle::Pretty,
            MAX_ARGUMENTS_CHARS
        )
    ));
    if let Some(preview) = question.preview {
        text.push_str(&format!(
            "\nPreview (dry run):\n{}\n",
            display::escape(&display::truncate(preview, MAX_ARGUMENTS_CHARS))
        ));
    }
    text.push_str("\nApprove only if you expected this call. Nothing runs unless you approve.");
    text
}

/// Whether an `ElicitResult` approves: `action: "accept"` and `content.approve` exactly `true`.
/// Decline, cancel, an unticked box, a missing field or anything malformed is a refusal.
pub(super) fn approves(result: &RawJson) -> bool {
    result
        .get("action")
        .and_then(|a| a.as_str().map(|a| a == "accept"))
        == Some(true)
        && result
            .get("content")
            .and_then(|c| c.get("approve"))
            .and_then(|a| a.as_bool())
            == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(arguments: &RawJson) -> Question<'_> {
        Question {
            tool: "create_order",
            upstream: "store",
            risk: "write",
            summary: Some("Order for ada"),
            arguments,
            preview: None,
        }
    }

    #[test]
    fn only_an_accepted_ticked_box_approves() {
        assert!(approves(
            &json!({"action": "accept", "content": {"approve": true}}).into()
        ));
        // As a client may write it.
        let spaced = br#"{ "action" : "acc\u0065pt" , "content" : { "approve" : true } }"#;
        assert!(approves(&RawJson::parse_slice(spaced).expect("json")));
        for refusal in [
            json!({"action": "accept", "content": {"approve": false}}),
            json!({"action": "accept", "content": {"approve": "true"}}),
            json!({"action": "accept", "content": {}}),
            json!({"action": "accept"}),
            json!({"action": "decline"}),
            json!({"action": "cancel", "content": {"approve": true}}),
            json!({}),
        ] {
            assert!(!approves(&RawJson::from(&refusal)), "{refusal}");
        }
    }

    #[test]
    fn the_question_shows_arguments_with_hidden_characters_escaped() {
        let arguments: RawJson =
            json!({"to": "bob\u{202e}moc.evil\u{200b}", "note": "\u{1b}[2Jcleared"}).into();
        let params = elicitation_params(&question(&arguments));
        let message = params["message"].as_str().expect("message");
        assert!(message.contains("Tool: create_order") && message.contains("Server: store"));
        for hidden in ['\u{202e}', '\u{200b}', '\u{1b}'] {
            assert!(!message.contains(hidden), "{hidden:?} must be escaped");
        }
        assert!(message.contains("\\u{202e}") && message.contains("\\u{200b}"));
        assert_eq!(params["requestedSchema"]["required"], json!(["approve"]));
        assert_eq!(
            params["requestedSchema"]["properties"]["approve"]["default"],
            false
        );
    }

    #[test]
    fn long_arguments_are_cut_visibly() {
        let arguments: RawJson = json!({"blob": "x".repeat(10_000)}).into();
        let message = elicitation_params(&question(&arguments))["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(message.contains("…[truncated: "));
        assert!(message.chars().count() < 2500);
    }

    #[test]
    fn a_long_argument_cannot_push_another_out_of_sight() {
        let arguments: RawJson =
            json!({"note": "x".repeat(10_000), "to": "mallory\u{2028}@evil"}).into();
        let message = elicitation_params(&question(&arguments))["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(message.contains("\"to\"") && message.contains("mallory\\u{2028}@evil"));
        assert!(!message.contains('\u{2028}'));
    }
}
