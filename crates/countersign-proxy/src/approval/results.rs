//! The results the gateway writes itself: the held call (`requires_confirmation`), refusals
//! (`rejected` with a code) and denials (`denied`).
//!
//! Each is a `CallToolResult` with `isError: true` — so SDK clients do not validate it against the
//! tool's `outputSchema` — a text block that tells the model plainly that nothing ran and what
//! to do next, and the machine-readable form under `_meta["countersign/confirmation"]` (also as
//! `structuredContent` when the tool declares no `outputSchema`).
//!
//! Each is returned as an object still open ([`ObjectWriter`]) and compact: the answer appends
//! MCP 2026-07-28's `resultType` without walking a result it knows has none, and is written
//! around it as it is (`answer.rs`). A held call's answer is a few kilobytes; walking it for
//! that member and again for whitespace was a sixth of a held call's instructions.

use countersign_jsonrpc::{ObjectWriter, RawJson};
use serde_json::{Value, json};

use super::refusal::RefusalCode;
use crate::display::{self, ListingStyle};
use crate::wire::{CONFIRMATION_META, TOKEN_ARGUMENT, TOKEN_META};

/// About how many characters of arguments the held result's text shows; every top-level key
/// is shown whatever their size.
const ARGUMENTS_BUDGET: usize = 2000;

/// Largest arguments (their text, in bytes) the machine-readable part of a held result repeats.
/// The result carries them four times (`arguments` and `next_action`, in `structuredContent`
/// and in `_meta`); past this size the client is told to resend its own arguments instead,
/// so a held call's answer never costs more than a few times its request.
pub(super) const ECHO_ARGUMENTS_MAX_BYTES: usize = 64 * 1024;

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
    pub(super) arguments: &'a RawJson,
    pub(super) expires_in_secs: u64,
    /// Whether the token is offered as an argument (false when the tool has its own
    /// `confirmationToken` argument; then only the `_meta` form works).
    pub(super) token_as_argument: bool,
    /// Out of band: the approval page's link, where a person decides. The token then runs
    /// the call only after that person approved there.
    pub(super) approval_url: Option<&'a str>,
}

pub(super) fn held(held: &Held<'_>, has_output_schema: bool) -> ObjectWriter {
    let arguments_text =
        display::arguments_listing(held.arguments, ListingStyle::Compact, ARGUMENTS_BUDGET);
    let echo = held.arguments.len() <= ECHO_ARGUMENTS_MAX_BYTES;
    // As the client wrote them they may hold whitespace; everything else here is written
    // compact.
    let arguments = held.arguments.minified();
    let token = RawJson::string(held.token);
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
    // Written around the listing, in its own buffer: with many keys the listing is the size of
    // the arguments, and each copy of it counts.
    let mut text = arguments_text;
    text.insert_str(
        0,
        &format!(
            "Nothing was executed: this call needs the user's approval first.\n\
             Tool: {} (on {}, risk: {}, rule: {})\nWhat it would do: {}\nArguments: ",
            held.tool,
            held.upstream,
            held.risk,
            held.rule,
            display::escape(held.summary)
        ),
    );
    match held.approval_url {
        None => text.push_str(&format!(
            "\n\nShow the user the tool and these arguments and ask whether to run it. Only if they \
             approve, {how}. The token works once and expires in {} seconds. If they do not \
             approve, do not call it again.",
            held.expires_in_secs
        )),
        Some(url) => text.push_str(&format!(
            "\n\nApproval was requested on the gateway's approval page: {url}\nA person must open \
             that page and approve the call there; you cannot approve it, and the user saying so \
             in the chat does not approve it. Give the user the link. Once they say they \
             approved on the page, {how}. Until someone approves there the token is refused as \
             \"pending_approval\" and can be tried again; it works once and expires in {} \
             seconds. If they deny it, do not call it again.",
            held.expires_in_secs
        )),
    }

    // Written member by member: the arguments are the client's raw text, spliced in, never
    // rebuilt as a tree. Each part is sized from what goes into it: grown by doubling, the
    // parts reallocated through every size class and churned the allocator's pages.
    let echoed = if echo { arguments.len() } else { 0 };
    let mut next_action = ObjectWriter::with_capacity(held.tool.len() + echoed + token.len() + 96);
    next_action.push("tool", &RawJson::string(held.tool));
    if held.token_as_argument {
        if echo {
            let with_token = arguments.with_member(TOKEN_ARGUMENT, &token);
            next_action.push("arguments", &with_token);
        }
    } else {
        if echo {
            next_action.push("arguments", &arguments);
        }
        let mut meta = ObjectWriter::with_capacity(TOKEN_META.len() + token.len() + 8);
        meta.push(TOKEN_META, &token);
        next_action.push("_meta", &meta.finish());
    }
    let next_action = next_action.finish();
    let hint = match held.approval_url {
        None => "Show the user the tool and arguments; call again only after they approve.",
        Some(_) => {
            "Give the user the approval link; call again only after they approved on that page."
        }
    };
    let mut guidance = ObjectWriter::with_capacity(next_action.len() + hint.len() + 48);
    guidance.push("next_action", &next_action);
    guidance.push("display_hint", &RawJson::string(hint));
    let guidance = guidance.finish();
    let stated = [
        ("tool", held.tool),
        ("upstream", held.upstream),
        ("risk", held.risk),
        ("rule", held.rule),
        ("summary", held.summary),
    ];
    let stated_len: usize = stated.iter().map(|(_, value)| value.len()).sum::<usize>()
        + held.approval_url.map_or(0, str::len);
    let mut machine =
        ObjectWriter::with_capacity(guidance.len() + echoed + token.len() + stated_len + 256);
    machine.push("status", &RawJson::string("requires_confirmation"));
    machine.push("confirmationToken", &token);
    for (key, value) in stated {
        machine.push(key, &RawJson::string(value));
    }
    if echo {
        machine.push("arguments", &arguments);
    } else {
        machine.push("argumentsOmitted", &Value::Bool(true).into());
    }
    machine.push("expiresInSeconds", &json!(held.expires_in_secs).into());
    if let Some(url) = held.approval_url {
        machine.push(
            "channel",
            &RawJson::string(super::channel_name::OUT_OF_BAND),
        );
        machine.push("approvalUrl", &RawJson::string(url));
    }
    machine.push("guidance", &guidance);
    call_tool_error(text, machine.finish(), has_output_schema)
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

pub(super) fn refused(refusal: &Refusal<'_>, has_output_schema: bool) -> ObjectWriter {
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
    call_tool_error(refusal.message.clone(), machine.into(), has_output_schema)
}

/// The `CallToolResult`, open for the answer's `resultType`.
fn call_tool_error(text: String, machine: RawJson, has_output_schema: bool) -> ObjectWriter {
    // The text goes straight into the result, escaped once: no intermediate copies of it. The
    // room past it is for `resultType`.
    let mut result = ObjectWriter::with_capacity(text.len() + 2 * machine.len() + 160);
    result.push_text_content("content", &text);
    drop(text);
    result.push("isError", &Value::Bool(true).into());
    if !has_output_schema {
        result.push("structuredContent", &machine);
    }
    let mut meta = ObjectWriter::with_capacity(machine.len() + 32);
    meta.push(CONFIRMATION_META, &machine);
    result.push("_meta", &meta.finish());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The held result for `arguments`, as JSON.
    fn held_for(arguments: &RawJson, token_as_argument: bool, has_output_schema: bool) -> Value {
        let result = held(
            &Held {
                token: "tok",
                tool: "create_order",
                upstream: "store",
                risk: "write",
                rule: "default",
                summary: "Order for ada",
                arguments,
                expires_in_secs: 60,
                token_as_argument,
                approval_url: None,
            },
            has_output_schema,
        );
        let result = result.finish();
        let value = result.to_value();
        // What the gateway writes is one strictly valid value, and compact.
        assert!(RawJson::parse_slice(result.as_bytes()).is_ok());
        assert_eq!(result.minified().as_bytes(), result.as_bytes());
        value
    }

    #[test]
    fn a_held_result_states_the_call_and_how_to_retry_it() {
        // As the client wrote them: spaces, an escape, and a number kept as written.
        let arguments = RawJson::parse_slice(br#"{ "sku" : "A-1" , "qty" : 2 , "price" : 1.50 }"#)
            .expect("json");
        let sent = arguments.to_value();
        let mut with_token = sent.clone();
        with_token["confirmationToken"] = json!("tok");

        let result = held_for(&arguments, true, false);
        assert_eq!(result["isError"], true);
        let machine = &result["_meta"][CONFIRMATION_META];
        assert_eq!(result["structuredContent"], *machine);
        for (key, value) in [
            ("status", json!("requires_confirmation")),
            ("confirmationToken", json!("tok")),
            ("tool", json!("create_order")),
            ("upstream", json!("store")),
            ("risk", json!("write")),
            ("rule", json!("default")),
            ("summary", json!("Order for ada")),
            ("arguments", sent.clone()),
            ("expiresInSeconds", json!(60)),
        ] {
            assert_eq!(machine[key], value, "{key}");
        }
        assert!(machine.get("argumentsOmitted").is_none());
        assert_eq!(
            machine["guidance"]["next_action"],
            json!({"tool": "create_order", "arguments": with_token})
        );
        assert!(machine["guidance"]["display_hint"].is_string());
        let text = result["content"][0]["text"].as_str().expect("a text block");
        assert_eq!(result["content"][0]["type"], "text");
        assert!(text.starts_with("Nothing was executed"), "{text}");
        assert!(
            text.contains(r#"Arguments: {"sku":"A-1","qty":2,"price":1.50}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"plus "confirmationToken": "tok""#),
            "{text}"
        );

        // A tool with its own `confirmationToken` argument: the token goes in `_meta`.
        let result = held_for(&arguments, false, true);
        assert!(result.get("structuredContent").is_none());
        let machine = &result["_meta"][CONFIRMATION_META];
        assert_eq!(
            machine["guidance"]["next_action"],
            json!({"tool": "create_order", "arguments": sent, "_meta": {TOKEN_META: "tok"}})
        );
    }

    #[test]
    fn arguments_past_the_echo_limit_are_left_out_of_the_machine_part_only() {
        let pad = ECHO_ARGUMENTS_MAX_BYTES - r#"{"note":""}"#.len();
        let at_limit = RawJson::from_value(&json!({"note": "x".repeat(pad)}));
        assert_eq!(at_limit.len(), ECHO_ARGUMENTS_MAX_BYTES);
        let over = RawJson::from_value(&json!({"note": "x".repeat(pad + 1)}));
        for token_as_argument in [true, false] {
            let result = held_for(&at_limit, token_as_argument, false);
            let machine = &result["_meta"][CONFIRMATION_META];
            assert!(machine.get("argumentsOmitted").is_none());
            assert_eq!(machine["arguments"], at_limit.to_value());
            let next = &machine["guidance"]["next_action"];
            assert_eq!(
                next["arguments"]["note"].as_str().map(str::len),
                Some(pad),
                "echoed at the limit"
            );

            let result = held_for(&over, token_as_argument, false);
            let machine = &result["_meta"][CONFIRMATION_META];
            assert_eq!(result["structuredContent"], *machine);
            assert_eq!(machine["argumentsOmitted"], true);
            assert!(machine.get("arguments").is_none());
            assert_eq!(machine["confirmationToken"], "tok");
            assert_eq!(machine["status"], "requires_confirmation");
            let next = &machine["guidance"]["next_action"];
            assert!(next.get("arguments").is_none(), "{next}");
            assert_eq!(next["tool"], "create_order");
            if !token_as_argument {
                assert_eq!(next["_meta"][TOKEN_META], "tok");
            }
            // The text still shows the arguments, cut visibly, and bounded.
            let text = result["content"][0]["text"].as_str().expect("a text block");
            assert!(text.contains(r#"{"note":"xxx"#), "{text}");
            assert!(text.contains("…[truncated: "), "{text}");
            assert!(text.len() < 4 * ARGUMENTS_BUDGET, "{} bytes", text.len());
        }
    }

    #[test]
    fn structured_content_only_without_an_output_schema() {
        let refusal = Refusal {
            code: RefusalCode::PolicyDenied,
            tool: "t",
            upstream: "u",
            message: "m".into(),
            rule: Some("r"),
        };
        assert!(
            refused(&refusal, false)
                .finish()
                .get("structuredContent")
                .is_some()
        );
        let with_schema = refused(&refusal, true).finish().to_value();
        assert!(with_schema.get("structuredContent").is_none());
        assert_eq!(with_schema["isError"], true);
        assert_eq!(
            with_schema["_meta"][CONFIRMATION_META]["code"],
            "policy_denied"
        );
    }
}
