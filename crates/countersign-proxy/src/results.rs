//! The results the gateway writes itself, in the exact shapes of DESIGN.md §7: the held call
//! (`requires_confirmation`), refusals (`rejected` with a code) and denials (`denied`).
//!
//! Each is a `CallToolResult` with `isError: true` — so SDK clients do not validate it against the
//! tool's `outputSchema` — a text block that tells the model plainly that nothing ran and what
//! to do next, and the machine-readable form under `_meta["countersign/confirmation"]` (also as
//! `structuredContent` when the tool declares no `outputSchema`).

use serde_json::{Map, Value, json};

/// `_meta` key of the machine-readable form.
pub const CONFIRMATION_META: &str = "countersign/confirmation";

/// Everything a held call's answer states.
#[derive(Debug)]
pub struct Held<'a> {
    pub token: &'a str,
    pub tool: &'a str,
    pub upstream: &'a str,
    pub risk: &'a str,
    pub rule: &'a str,
    pub summary: &'a str,
    /// The call's arguments without any token, as the gateway will forward them.
    pub arguments: &'a Value,
    pub expires_in_secs: u64,
    /// Whether the token is offered as an argument (false when the tool has its own
    /// `confirmationToken` argument; then only the `_meta` form works).
    pub token_as_argument: bool,
}

pub fn held(held: &Held<'_>, has_output_schema: bool) -> Value {
    let arguments_text = display_arguments(held.arguments);
    let (next_arguments, next_meta) = if held.token_as_argument {
        let mut next = held.arguments.as_object().cloned().unwrap_or_default();
        next.insert(
            "confirmationToken".into(),
            Value::String(held.token.to_owned()),
        );
        (Value::Object(next), None)
    } else {
        (
            held.arguments.clone(),
            Some(json!({"countersign/confirmationToken": held.token})),
        )
    };
    let how = if held.token_as_argument {
        format!(
            "call {} again with exactly the same arguments plus \"confirmationToken\": \"{}\"",
            held.tool, held.token
        )
    } else {
        format!(
            "call {} again with exactly the same arguments and put the token in the request's \
             _meta as \"countersign/confirmationToken\": \"{}\"",
            held.tool, held.token
        )
    };
    let text = format!(
        "Nothing was executed: this call needs the user's approval first.\n\
         Tool: {tool} (on {upstream}, risk: {risk}, rule: {rule})\n\
         What it would do: {summary}\n\
         Arguments: {arguments_text}\n\n\
         Show the user the tool and these arguments and ask whether to run it. Only if they \
         approve, {how}. The token works once and expires in {secs} seconds. If they do not \
         approve, do not call it again.",
        tool = held.tool,
        upstream = held.upstream,
        risk = held.risk,
        rule = held.rule,
        summary = held.summary,
        secs = held.expires_in_secs,
    );
    let mut next_action = json!({"tool": held.tool, "arguments": next_arguments});
    if let Some(meta) = next_meta {
        next_action["_meta"] = meta;
    }
    let machine = json!({
        "status": "requires_confirmation",
        "confirmationToken": held.token,
        "tool": held.tool,
        "upstream": held.upstream,
        "risk": held.risk,
        "rule": held.rule,
        "summary": held.summary,
        "arguments": held.arguments,
        "expiresInSeconds": held.expires_in_secs,
        "guidance": {
            "next_action": next_action,
            "display_hint": "Show the user the tool and arguments; call again only after they approve."
        }
    });
    call_tool_error(text, machine, has_output_schema)
}

/// Why a presented confirmation or a call was refused.
#[derive(Debug)]
pub struct Refusal<'a> {
    /// `rejected` or `denied`.
    pub status: &'static str,
    /// A DESIGN.md §7 code.
    pub code: &'a str,
    pub tool: &'a str,
    pub upstream: &'a str,
    /// The model-facing explanation and next step.
    pub message: String,
    pub rule: Option<&'a str>,
}

pub fn refused(refusal: &Refusal<'_>, has_output_schema: bool) -> Value {
    let mut machine = json!({
        "status": refusal.status,
        "code": refusal.code,
        "tool": refusal.tool,
        "upstream": refusal.upstream,
        "message": refusal.message,
    });
    if let Some(rule) = refusal.rule {
        machine["rule"] = Value::String(rule.to_owned());
    }
    call_tool_error(refusal.message.clone(), machine, has_output_schema)
}

/// The next step the model is told for each refusal code.
pub fn rejection_message(code: &str, tool: &str) -> String {
    let what = match code {
        "replayed" => {
            "This confirmation token was already used. Nothing was sent again. If the user wants the call to run again, call the tool without a token to get a new confirmation."
        }
        "expired" => {
            "This confirmation token has expired, so nothing was sent. Call the tool again without the token to ask the user again."
        }
        "arguments_mismatch" => {
            "The arguments differ from the ones the user approved, so nothing was sent. Call the tool without a token to get a confirmation for these arguments."
        }
        "tool_mismatch" => {
            "This confirmation token was issued for a different tool, so nothing was sent."
        }
        "upstream_mismatch" => {
            "This confirmation token was issued for a different server, so nothing was sent."
        }
        "subject_mismatch" => {
            "This confirmation token was issued to a different user, so nothing was sent."
        }
        "session_mismatch" => {
            "This confirmation token was issued in a different session, so nothing was sent. Call the tool without a token to ask again."
        }
        "definition_changed" => {
            "The tool's definition changed since the user approved, so nothing was sent. Call the tool without a token to ask again."
        }
        "bad_signature" | "unknown_key" | "malformed" => {
            "This confirmation token is not valid, so nothing was sent. Use only tokens returned by the gateway, unchanged; call the tool without a token to get one."
        }
        "store_unavailable" => {
            "The gateway could not record the confirmation, so nothing was sent (it fails closed). Try again shortly."
        }
        "human_approval_unavailable" => {
            "This call needs approval from a person through the client (elicitation), and this client cannot ask. Nothing was sent. Use a client that supports elicitation."
        }
        "not_approved" => {
            "The user did not approve this call, so nothing was sent. Do not retry unless they ask."
        }
        "unsafe_arguments" => {
            "The arguments contain numbers that cannot be confirmed exactly (integers beyond ±9007199254740991 or non-finite values), so nothing was sent. Send such values as strings."
        }
        _ => "The call was refused, so nothing was sent.",
    };
    format!("{what} (tool: {tool}, code: {code})")
}

fn call_tool_error(text: String, machine: Value, has_output_schema: bool) -> Value {
    let mut result = Map::new();
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result.insert("isError".into(), Value::Bool(true));
    if !has_output_schema {
        result.insert("structuredContent".into(), machine.clone());
    }
    result.insert("_meta".into(), json!({ CONFIRMATION_META: machine }));
    Value::Object(result)
}

/// Arguments as people and models read them: compact JSON, control and invisible characters
/// escaped, long text cut with a visible marker.
pub fn display_arguments(arguments: &Value) -> String {
    const LIMIT: usize = 2000;
    let compact = arguments.to_string();
    let mut out = String::with_capacity(compact.len().min(LIMIT) + 16);
    for c in compact.chars() {
        if out.len() >= LIMIT {
            out.push_str("…[truncated]");
            return out;
        }
        match c {
            // serde_json already escapes C0 controls; these are the invisible or reordering
            // characters it leaves as they are.
            '\u{7f}'..='\u{9f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{feff}' => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_bidi_characters_are_escaped_in_displayed_arguments() {
        let shown = display_arguments(&json!({"to": "a\u{202e}b\u{200b}c\u{1b}[31m"}));
        assert!(
            !shown.contains('\u{202e}') && !shown.contains('\u{200b}') && !shown.contains('\u{1b}')
        );
        assert!(
            shown.contains("\\u{202e}") && shown.contains("\\u{200b}") && shown.contains("\\u001b")
        );
    }

    #[test]
    fn long_arguments_are_truncated_visibly() {
        let shown = display_arguments(&json!({"blob": "x".repeat(5000)}));
        assert!(shown.len() < 2100);
        assert!(shown.ends_with("…[truncated]"));
    }

    #[test]
    fn structured_content_only_without_an_output_schema() {
        let refusal = Refusal {
            status: "denied",
            code: "policy_denied",
            tool: "t",
            upstream: "u",
            message: "m".into(),
            rule: Some("r"),
        };
        assert!(refused(&refusal, false).get("structuredContent").is_some());
        let with_schema = refused(&refusal, true);
        assert!(with_schema.get("structuredContent").is_none());
        assert_eq!(with_schema["isError"], true);
        assert_eq!(
            with_schema["_meta"][CONFIRMATION_META]["code"],
            "policy_denied"
        );
    }
}
