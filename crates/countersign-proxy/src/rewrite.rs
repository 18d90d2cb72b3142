//! Edits the gateway makes to upstream answers: `tools/list` schemas gain the optional
//! `confirmationToken` property for tools that may need confirmation, and `initialize` /
//! `server/discover` instructions gain a paragraph explaining the flow to the model.
//!
//! Edits apply to exactly one JSON-RPC response — the answer to the request the client sent —
//! matched by its id, whether it arrives as a JSON body or as one event of an SSE stream.

use std::sync::Arc;

use countersign_jsonrpc::message::{Message, RequestId};
use countersign_jsonrpc::strict::parse_strict;
use serde_json::{Map, Value, json};

use crate::gate::{Gate, StateWrap};

/// The argument name clients use to present a confirmation token.
pub const TOKEN_ARGUMENT: &str = "confirmationToken";
/// The `_meta` key clients use to present a confirmation token.
pub const TOKEN_META: &str = "countersign/confirmationToken";

/// Appended to the upstream's `instructions` so the model knows how held calls work.
pub const INSTRUCTIONS: &str = "This server is behind countersign, a gateway that holds risky tool \
calls until a person approves them. A held call returns a result with status \
\"requires_confirmation\" and a confirmationToken: nothing was executed. Show the person the tool \
and arguments; only if they approve, call the same tool again with the same arguments plus \
\"confirmationToken\". Never invent or reuse a token, and do not retry a call the person declined.";

/// What to change in one upstream response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseEdit {
    /// Add the optional `confirmationToken` property to the listed tools that may need
    /// confirmation.
    ToolsList,
    /// Append [`INSTRUCTIONS`] to `result.instructions`.
    Instructions,
    /// Wrap an upstream's `input_required` state into the gateway's signed `approved` state.
    WrapState,
}

/// The edit for one forwarded request's response, plus what the gateway learns from it.
#[derive(Debug, Clone)]
pub struct ResponseHook {
    pub id: RequestId,
    pub edit: ResponseEdit,
    pub upstream: String,
    pub gate: Arc<Gate>,
    /// The request asked for the first page; a result without `nextCursor` is then the whole
    /// listing, and it is pinned.
    pub first_page: bool,
    /// For [`ResponseEdit::WrapState`]: the approved call's bindings.
    pub wrap: Option<StateWrap>,
}

impl ResponseHook {
    /// The hook for a forwarded request, if its answer needs one.
    pub fn for_request(
        method: &str,
        id: &RequestId,
        first_page: bool,
        upstream: &str,
        gate: &Arc<Gate>,
    ) -> Option<Self> {
        let edit = match method {
            "tools/list" => ResponseEdit::ToolsList,
            "initialize" | "server/discover" => ResponseEdit::Instructions,
            _ => return None,
        };
        Some(Self {
            id: id.clone(),
            edit,
            upstream: upstream.to_owned(),
            gate: gate.clone(),
            first_page,
            wrap: None,
        })
    }

    /// The hook for an approved 2026-07-28 call, whose upstream may answer `input_required`.
    pub fn wrap_state(id: &RequestId, upstream: &str, gate: &Arc<Gate>, wrap: StateWrap) -> Self {
        Self {
            id: id.clone(),
            edit: ResponseEdit::WrapState,
            upstream: upstream.to_owned(),
            gate: gate.clone(),
            first_page: false,
            wrap: Some(wrap),
        }
    }

    /// The edited message, or `None` to relay `body` as it is.
    pub fn apply(&self, body: &[u8]) -> Option<Vec<u8>> {
        if let (ResponseEdit::WrapState, Some(wrap)) = (self.edit, &self.wrap) {
            return self.wrap_upstream_state(body, wrap);
        }
        if self.edit == ResponseEdit::ToolsList && self.first_page {
            self.pin_complete_listing(body);
        }
        let gate = &self.gate;
        let upstream = self.upstream.as_str();
        edit_response(body, &self.id, self.edit, &|_, tool| {
            gate.may_confirm(upstream, tool)
        })
    }

    fn wrap_upstream_state(&self, body: &[u8], wrap: &StateWrap) -> Option<Vec<u8>> {
        let Ok(Message::Response(mut response)) = Message::from_value(parse_strict(body).ok()?)
        else {
            return None;
        };
        if response.id.as_ref() != Some(&self.id) {
            return None;
        }
        let Ok(Value::Object(result)) = &mut response.outcome else {
            return None;
        };
        if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return None;
        }
        if let Err(reason) = self.gate.wrap_upstream_state(wrap, result) {
            tracing::warn!(upstream = %self.upstream, %reason, "upstream input_required refused");
            response.outcome = Err(countersign_jsonrpc::message::ErrorObject {
                code: -32603,
                message: format!("countersign refused the upstream's answer: {reason}"),
                data: None,
            });
        }
        Some(Message::Response(response).to_vec())
    }

    fn pin_complete_listing(&self, body: &[u8]) {
        let Some(Ok(Message::Response(response))) =
            parse_strict(body).ok().map(Message::from_value)
        else {
            return;
        };
        if response.id.as_ref() != Some(&self.id) {
            return;
        }
        let Ok(Value::Object(result)) = &response.outcome else {
            return;
        };
        let complete = result
            .get("nextCursor")
            .is_none_or(|c| c.is_null() || c.as_str() == Some(""));
        if let (true, Some(Value::Array(tools))) = (complete, result.get("tools")) {
            self.gate.catalog.observe(&self.upstream, tools);
            let (gate, upstream) = (self.gate.clone(), self.upstream.clone());
            tokio::spawn(async move { gate.share_pins(&upstream).await });
        }
    }
}

/// Marks the upstream's catalog stale when a relayed message announces that its tools changed;
/// the next call is then classified against a fresh listing.
pub fn watch_list_changed(data: &str, upstream: &str, gate: &Gate) {
    // Cheap filter first: almost no event is this notification.
    if !data.contains("notifications/tools/list_changed") {
        return;
    }
    if let Some(Ok(Message::Notification(n))) =
        parse_strict(data.as_bytes()).ok().map(Message::from_value)
        && n.method == "notifications/tools/list_changed"
    {
        gate.catalog.mark_stale(upstream);
    }
}

/// Applies `edit` to `body` if it is the JSON-RPC response to `id`; returns the new body, or
/// `None` when the message is not that response (it is then relayed untouched). `may_confirm`
/// says, for a listed tool (name and definition), whether a call to it may be held.
pub fn edit_response(
    body: &[u8],
    id: &RequestId,
    edit: ResponseEdit,
    may_confirm: &dyn Fn(&str, &Value) -> bool,
) -> Option<Vec<u8>> {
    let value = parse_strict(body).ok()?;
    let Ok(Message::Response(mut response)) = Message::from_value(value) else {
        return None;
    };
    if response.id.as_ref() != Some(id) {
        return None;
    }
    let Ok(result) = &mut response.outcome else {
        return None;
    };
    let Value::Object(result) = result else {
        return None;
    };
    let changed = match edit {
        ResponseEdit::ToolsList => add_token_property(result, may_confirm),
        ResponseEdit::Instructions => {
            append_instructions(result);
            true
        }
        ResponseEdit::WrapState => false,
    };
    // An unchanged message is relayed as the upstream wrote it.
    changed.then(|| Message::Response(response).to_vec())
}

/// Returns whether any schema changed.
fn add_token_property(
    result: &mut Map<String, Value>,
    may_confirm: &dyn Fn(&str, &Value) -> bool,
) -> bool {
    let Some(Value::Array(tools)) = result.get_mut("tools") else {
        return false;
    };
    let mut changed = false;
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) else {
            continue;
        };
        if !may_confirm(&name, tool) {
            continue;
        }
        let Some(Value::Object(schema)) = tool.get_mut("inputSchema") else {
            continue;
        };
        let properties = schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(properties) = properties else {
            continue;
        };
        // A tool with its own `confirmationToken` argument keeps it; only the `_meta` form is
        // offered for that tool, so the gateway never shadows an upstream argument.
        if properties.contains_key(TOKEN_ARGUMENT) {
            continue;
        }
        properties.insert(
            TOKEN_ARGUMENT.to_owned(),
            json!({
                "type": "string",
                "description": "Confirmation token from a previous requires_confirmation result. \
                                Only send it after the person approved this exact call."
            }),
        );
        changed = true;
    }
    changed
}

fn append_instructions(result: &mut Map<String, Value>) {
    let combined = match result.get("instructions").and_then(Value::as_str) {
        Some(existing) if !existing.trim().is_empty() => format!("{existing}\n\n{INSTRUCTIONS}"),
        _ => INSTRUCTIONS.to_owned(),
    };
    result.insert("instructions".to_owned(), Value::String(combined));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes(_: &str, _: &Value) -> bool {
        true
    }

    #[test]
    fn tools_list_gains_the_token_property_unless_the_tool_has_one() {
        let body = br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[
            {"name":"a","inputSchema":{"type":"object","properties":{"x":{"type":"integer"}},"additionalProperties":false}},
            {"name":"b","inputSchema":{"type":"object","properties":{"confirmationToken":{"type":"integer"}}}},
            {"name":"c","inputSchema":{"type":"object"}}]}}"#;
        let edited = edit_response(body, &RequestId::Number(3), ResponseEdit::ToolsList, &yes)
            .expect("edited");
        let value: Value = serde_json::from_slice(&edited).expect("json");
        let tools = &value["result"]["tools"];
        assert_eq!(
            tools[0]["inputSchema"]["properties"]["confirmationToken"]["type"],
            "string"
        );
        assert_eq!(
            tools[0]["inputSchema"]["properties"]["x"]["type"],
            "integer"
        );
        assert_eq!(
            tools[1]["inputSchema"]["properties"]["confirmationToken"]["type"],
            "integer"
        );
        assert_eq!(
            tools[2]["inputSchema"]["properties"]["confirmationToken"]["type"],
            "string"
        );
    }

    #[test]
    fn only_the_answer_to_the_tracked_request_is_edited() {
        let body = br#"{"jsonrpc":"2.0","id":"3","result":{"instructions":"x"}}"#;
        assert!(
            edit_response(
                body,
                &RequestId::Number(3),
                ResponseEdit::Instructions,
                &yes
            )
            .is_none()
        );
        let notification = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        assert!(
            edit_response(
                notification,
                &RequestId::Number(3),
                ResponseEdit::Instructions,
                &yes
            )
            .is_none()
        );
    }

    #[test]
    fn instructions_are_appended_or_created() {
        let with = br#"{"jsonrpc":"2.0","id":1,"result":{"instructions":"Store server."}}"#;
        let edited = edit_response(
            with,
            &RequestId::Number(1),
            ResponseEdit::Instructions,
            &yes,
        )
        .expect("edited");
        let value: Value = serde_json::from_slice(&edited).expect("json");
        let text = value["result"]["instructions"].as_str().expect("string");
        assert!(text.starts_with("Store server.\n\n"));
        assert!(text.contains("requires_confirmation"));
        let without = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let edited = edit_response(
            without,
            &RequestId::Number(1),
            ResponseEdit::Instructions,
            &yes,
        )
        .expect("edited");
        assert!(
            String::from_utf8(edited)
                .expect("utf-8")
                .contains("countersign")
        );
    }
}
