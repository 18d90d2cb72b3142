//! The response side: edits the gateway makes to upstream answers, and what it learns from
//! them, as the [`MessageObserver`] the relay calls for every message it relays.
//!
//! - `tools/list` schemas gain the optional `confirmationToken` property for tools that may
//!   need confirmation, and a complete first-page listing is pinned;
//! - `initialize` / `server/discover` instructions gain a paragraph explaining the flow to the
//!   model — only when the active policy can hold some call on that upstream;
//! - an approved 2026-07-28 call whose upstream answers `input_required` gets the upstream's
//!   state wrapped in the gateway's signed `approved` state ([`StateWrap`]);
//! - `notifications/tools/list_changed` on any relayed stream marks the catalog stale.
//!
//! Edits apply to exactly one JSON-RPC response — the answer to the request the client sent —
//! matched by its id, whether it arrives as a JSON body or as one event of an SSE stream.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::{ErrorObject, Message, Payload, RequestId, Response, TopLevel};
use countersign_policy::Action;
use memchr::memmem::Finder;
use serde_json::{Map, Value, json};
use tracing::warn;

use crate::approval::StateWrap;
use crate::catalog::CatalogSync;
use crate::clock::Clock;
use crate::relay::{MessageObserver, Observer, WatchResponses};
use crate::route::RouteTarget;
use crate::state::PolicyHandle;
use crate::wire::TOKEN_ARGUMENT;

/// Appended to the upstream's `instructions` so the model knows how held calls work.
pub const INSTRUCTIONS: &str = "This server is behind countersign, a gateway that holds risky tool \
calls until a person approves them. A held call returns a result with status \
\"requires_confirmation\" and a confirmationToken: nothing was executed. Show the person the tool \
and arguments; only if they approve, call the same tool again with the same arguments plus \
\"confirmationToken\". Never invent or reuse a token, and do not retry a call the person declined. \
Some calls can only be approved by a person on the gateway's approval page: then the result gives \
the page's link. Give the person the link; you cannot approve such a call yourself, and the token \
is refused as \"pending_approval\" until someone approves on the page.";

/// What to change in one upstream response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseEdit {
    /// Add the optional `confirmationToken` property to the listed tools that may need
    /// confirmation.
    ToolsList,
    /// Append [`INSTRUCTIONS`] to `result.instructions`.
    Instructions,
}

/// Builds the observer of every forwarded request's response. Not `Clone`: each observer shares
/// it by its one `Arc` (`EditObserver`), and a copy per request is what that replaced.
#[derive(Debug)]
pub struct ResponseEdits {
    pub policy: Arc<PolicyHandle>,
    pub catalog: CatalogSync,
    pub clock: Arc<dyn Clock>,
}

impl WatchResponses for ResponseEdits {
    fn watch(
        self: Arc<Self>,
        route: &RouteTarget,
        request: &http::request::Parts,
        payload: Option<&Payload>,
    ) -> Option<Observer> {
        // The route's name as made once at start-up, the same text as the upstream's.
        let upstream = route.label;
        let hook = match payload {
            Some(Payload::Single(Message::Request(call))) => {
                match request.extensions.get::<StateWrap>() {
                    Some(wrap) => Some(Hook::WrapState(call.id.clone(), wrap.clone())),
                    None => self.edit_for(upstream, &call.method, &call.id, call.params.as_deref()),
                }
            }
            _ => None,
        };
        Some(Box::new(EditObserver {
            edits: self,
            upstream,
            hook,
        }))
    }
}

impl ResponseEdits {
    fn edit_for(
        &self,
        upstream: &str,
        method: &str,
        id: &RequestId,
        params: Option<&RawJson>,
    ) -> Option<Hook> {
        let edit = match method {
            "tools/list" => ResponseEdit::ToolsList,
            // Explaining held calls is noise where nothing can be held.
            "initialize" | "server/discover" if self.policy.current().can_hold_on(upstream) => {
                ResponseEdit::Instructions
            }
            _ => return None,
        };
        let first_page = params.is_none_or(|p| p.get("cursor").is_none_or(|c| c.is_null()));
        Some(Hook::Edit {
            id: id.clone(),
            edit,
            first_page,
        })
    }

    /// The listed tools a call to which is never held, so `tools/list` does not offer them the
    /// token argument. A complete first page is pinned first and explained against those pins,
    /// as its calls will be classified; any other page is explained on its own. One
    /// explanation for the whole listing: explaining each tool alone pinned (and hashed) every
    /// definition once more, most of a large listing's cost.
    fn listed_tools_never_held(
        &self,
        upstream: &str,
        result: &Map<String, Value>,
        first_page: bool,
    ) -> HashSet<String> {
        let Some(Value::Array(tools)) = result.get("tools") else {
            return HashSet::new();
        };
        let policy = self.policy.current();
        let explanations = if first_page && self.pin_complete_listing(upstream, result) {
            self.catalog.state.explain(&policy, upstream, tools)
        } else {
            policy.explain(upstream, tools)
        };
        explanations
            .into_iter()
            .filter(|e| e.action != Action::Confirm && e.conditional_rules.is_empty())
            .map(|e| e.tool)
            .collect()
    }

    /// Pins a complete listing and shares the pins with the other replicas; false for a page
    /// with more to come (nothing is pinned from it).
    fn pin_complete_listing(&self, upstream: &str, result: &Map<String, Value>) -> bool {
        let complete = result
            .get("nextCursor")
            .is_none_or(|c| c.is_null() || c.as_str() == Some(""));
        let Some(Value::Array(tools)) = result.get("tools").filter(|_| complete) else {
            return false;
        };
        self.catalog.state.observe(upstream, tools);
        let (catalog, upstream) = (self.catalog.clone(), upstream.to_owned());
        tokio::spawn(async move { catalog.share_pins(&upstream).await });
        true
    }

    fn wrap_upstream_state(
        &self,
        id: &RequestId,
        wrap: &StateWrap,
        body: &[u8],
    ) -> Option<Vec<u8>> {
        // Most approved calls simply complete: skip parsing their answers.
        if !may_ask_for_input(body) {
            return None;
        }
        // Look at `resultType` in the raw result before building a tree of it.
        let raw = upstream_raw_result(body, id)?;
        let kind = raw.get("resultType")?;
        if kind.as_str().as_deref() != Some("input_required") {
            return None;
        }
        let Value::Object(mut result) = raw.to_value() else {
            return None;
        };
        let outcome = match wrap.wrap(&mut result, self.clock.unix_secs()) {
            Ok(()) => Ok(RawJson::from_value(&Value::Object(result))),
            Err(reason) => {
                warn!(%reason, "upstream input_required refused");
                Err(ErrorObject {
                    code: -32603,
                    message: format!("countersign refused the upstream's answer: {reason}"),
                    data: None,
                })
            }
        };
        Some(
            Message::Response(Response {
                id: Some(id.clone()),
                outcome,
            })
            .to_vec(),
        )
    }
}

/// The edit for the answer to one forwarded request.
#[derive(Debug)]
enum Hook {
    Edit {
        id: RequestId,
        edit: ResponseEdit,
        /// The request asked for the first page; a result without `nextCursor` is then the
        /// whole listing, and it is pinned.
        first_page: bool,
    },
    WrapState(RequestId, StateWrap),
}

/// Watches one relayed response. Every forwarded request gets one, so it holds the gateway's
/// edits by their one handle and the upstream's name by its `'static` label: a copy of the
/// edits' five handles and of the name cost ten atomic operations and an allocation a request.
struct EditObserver {
    edits: Arc<ResponseEdits>,
    upstream: &'static str,
    /// Dropped once it has been applied.
    hook: Option<Hook>,
}

impl MessageObserver for EditObserver {
    fn observe(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        watch_list_changed(message, self.upstream, &self.edits.catalog);
        let edited = match self.hook.as_ref()? {
            Hook::WrapState(id, wrap) => self.edits.wrap_upstream_state(id, wrap, message),
            Hook::Edit {
                id,
                edit,
                first_page,
            } => {
                // One tree for both the pins and the edit: a large listing's parse and tree
                // were a fifth of its cost, and they were built twice.
                let Value::Object(result) = upstream_result(message, id)? else {
                    return None;
                };
                let never_held = match edit {
                    ResponseEdit::ToolsList => {
                        self.edits
                            .listed_tools_never_held(self.upstream, &result, *first_page)
                    }
                    ResponseEdit::Instructions => HashSet::new(),
                };
                edit_result(result, id, *edit, &|name, _| !never_held.contains(name))
            }
        }?;
        self.hook = None;
        Some(edited)
    }

    /// Only the answer it edits or pins needs its messages whole; any other answer (a
    /// `tools/call` result, however large) is streamed past it. The list-changed watch loses
    /// nothing there: a JSON body answers a request, and an SSE message passed on in parts is
    /// still read for its method ([`passed`](MessageObserver::passed)).
    fn needs_whole_messages(&self) -> bool {
        self.hook.is_some()
    }

    fn passed(&mut self, message: &TopLevel) {
        if message.method.as_deref() == Some(LIST_CHANGED) {
            self.edits.catalog.state.mark_stale(self.upstream);
        }
    }
}

/// The result of `body` as a tree, when `body` is the successful JSON-RPC response to `id`.
/// Only the responses the gateway edits or learns from are built as trees; they come from the
/// upstream and are bounded by its response limit.
fn upstream_result(body: &[u8], id: &RequestId) -> Option<Value> {
    upstream_raw_result(body, id).map(|result| result.to_value())
}

/// Whether `body` can hold `"resultType": "input_required"`: it spells `input_required` plainly
/// or has a `\u` escape (the only way JSON spells a letter differently). Exact for every body
/// that says no, so only the answers that may ask are parsed.
fn may_ask_for_input(body: &[u8]) -> bool {
    static INPUT_REQUIRED: LazyLock<Finder<'static>> =
        LazyLock::new(|| Finder::new(b"input_required"));
    static UNICODE_ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    INPUT_REQUIRED.find(body).is_some() || UNICODE_ESCAPE.find(body).is_some()
}

/// The result of `body`, as slices of it, when `body` is the successful response to `id`.
fn upstream_raw_result(body: &[u8], id: &RequestId) -> Option<RawJson> {
    let Ok(Message::Response(response)) = Message::parse(body) else {
        return None;
    };
    if response.id.as_ref() != Some(id) {
        return None;
    }
    response.outcome.ok()
}

/// The notification an upstream sends when its tools changed.
const LIST_CHANGED: &str = "notifications/tools/list_changed";

/// Marks the upstream's catalog stale when a relayed message announces that its tools changed;
/// the next call is then classified against a fresh listing.
fn watch_list_changed(data: &[u8], upstream: &str, catalog: &CatalogSync) {
    // Cheap filter first: almost no event is this notification. The searcher is built once:
    // building it for every message cost more than searching a short answer.
    static NOTIFICATION: LazyLock<Finder<'static>> =
        LazyLock::new(|| Finder::new(LIST_CHANGED.as_bytes()));
    if NOTIFICATION.find(data).is_none() {
        return;
    }
    if let Ok(Message::Notification(n)) = Message::parse(data)
        && n.method == LIST_CHANGED
    {
        catalog.state.mark_stale(upstream);
    }
}

/// Applies `edit` to `body` if it is the JSON-RPC response to `id`; returns the new body, or
/// `None` when the message is not that response (it is then relayed untouched). `may_confirm`
/// says, for a listed tool (name and definition), whether a call to it may be held. The
/// observer reads the answer itself (it pins from the same tree) and calls [`edit_result`].
#[cfg(test)]
fn edit_response(
    body: &[u8],
    id: &RequestId,
    edit: ResponseEdit,
    may_confirm: &dyn Fn(&str, &Value) -> bool,
) -> Option<Vec<u8>> {
    let Value::Object(result) = upstream_result(body, id)? else {
        return None;
    };
    edit_result(result, id, edit, may_confirm)
}

/// [`edit_response`] of a result already read as a tree.
fn edit_result(
    mut result: Map<String, Value>,
    id: &RequestId,
    edit: ResponseEdit,
    may_confirm: &dyn Fn(&str, &Value) -> bool,
) -> Option<Vec<u8>> {
    let changed = match edit {
        ResponseEdit::ToolsList => add_token_property(&mut result, may_confirm),
        ResponseEdit::Instructions => {
            append_instructions(&mut result);
            true
        }
    };
    // An unchanged message is relayed as the upstream wrote it.
    changed.then(|| {
        Message::Response(Response {
            id: Some(id.clone()),
            outcome: Ok(RawJson::from_value(&Value::Object(result))),
        })
        .to_vec()
    })
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

#[cfg(test)]
mod input_filter_tests {
    use super::may_ask_for_input;

    #[test]
    fn only_answers_that_can_spell_input_required_are_parsed() {
        assert!(may_ask_for_input(
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#
        ));
        // Escaped, it is still input_required once parsed: the filter must let it through.
        assert!(may_ask_for_input(
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"\u0069nput_required"}}"#
        ));
        assert!(!may_ask_for_input(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}"#
        ));
    }
}
