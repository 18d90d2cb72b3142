//! The results the gateway writes itself: the held call (`requires_confirmation`), refusals
//! (`rejected` with a code) and denials (`denied`).
//!
//! Each is a `CallToolResult` with `isError: true` — so SDK clients do not validate it against the
//! tool's `outputSchema` — a text block that tells the model plainly that nothing ran and what
//! to do next, and the machine-readable form under `_meta["countersign/confirmation"]` (also as
//! `structuredContent` when the tool declares no `outputSchema`).

use serde_json::{Map, Value, json};

use super::refusal::RefusalCode;
use crate::display::{self, ListingStyle};
use crate::wire::{CONFIRMATION_META, TOKEN_ARGUMENT, TOKEN_META};

/// About how many characters of arguments the held result's text shows; every top-level key
/// is shown whatever their size.
const ARGUMENTS_BUDGET: usize = 2000;

/// Everything a held call's answer states.
#[derive(Debug)]
pub(super) struct Held<'a> {
    pub(super) token: &'a str,
    pub(super) tool: &'a str,
    pub(super) upstream: &'a str,
    pub(super) risk: &'a str,
    pub(super) rule: &'a str,
    pub(super) summary: &'a str,
    /// The call's arguments without any token, as the gateway will forward them.
    pub(super) arguments: &'a Value,
    pub(super) expires_in_secs: u64,
    /// Whether the token is offered as an argument (false when the tool has its own
    /// `confirmationToken` argument; then only the `_meta` form works).
    pub(super) token_as_argument: bool,
}

pub(super) fn held(held: &Held<'_>, has_output_schema: bool) -> Value {
    let arguments_text =
        display::arguments_listing(held.arguments, ListingStyle::Compact, ARGUMENTS_BUDGET);
    let (next_arguments, next_meta) = if held.token_as_argument {
        let mut next = held.arguments.as_object().cloned().unwrap_or_default();
        next.insert(TOKEN_ARGUMENT.into(), Value::String(held.token.to_owned()));
        (Value::Object(next), None)
    } else {
        (
            held.arguments.clone(),
            Some(json!({ TOKEN_META: held.token })),
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
        summary = display::escape(held.summary),
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
pub(super) struct Refusal<'a> {
    pub(super) code: RefusalCode,
    pub(super) tool: &'a str,
    pub(super) upstream: &'a str,
    /// The model-facing explanation and next step.
    pub(super) message: String,
    pub(super) rule: Option<&'a str>,
}

pub(super) fn refused(refusal: &Refusal<'_>, has_output_schema: bool) -> Value {
    let text = refusal.code.text();
    let mut machine = json!({
        "status": text.status,
        "code": text.code,
        "tool": refusal.tool,
        "upstream": refusal.upstream,
        "message": refusal.message,
    });
    if let Some(rule) = refusal.rule {
        machine["rule"] = Value::String(rule.to_owned());
    }
    call_tool_error(refusal.message.clone(), machine, has_output_schema)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_content_only_without_an_output_schema() {
        let refusal = Refusal {
            code: RefusalCode::PolicyDenied,
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
