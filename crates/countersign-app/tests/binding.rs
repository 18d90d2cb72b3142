//! What an approval is bound to. A person (or the model, on the person's word) approves one
//! exact call; nothing else may ride on that approval: not a changed argument the tool owns, not
//! a later call that reuses a JSON-RPC id, not a refused question answered again, not a call the
//! gate never judged, not task or `_meta` flags added after the fact. And what the person is
//! shown must be what runs.
//!
//! Black box: every test speaks HTTP to an in-process gateway in front of a scripted fake
//! upstream and judges by what that upstream recorded.

mod common;

use std::time::Duration;

use common::{Harness, policy_path};
use countersign_testkit::mcp::{
    ScriptedServer, answer_question, confirmation, form_elicitation, held_token, hold_on_stream,
    initialize, open_session, stateless_headers, stateless_tool_call, tool_call,
    tool_call_notification, within,
};
use serde_json::{Map, Value, json};

/// `_meta` key the gateway reads a confirmation token from.
const TOKEN_META: &str = "countersign/confirmationToken";
/// Key of the gateway's own question in `inputRequests` / `inputResponses`.
const APPROVAL_KEY: &str = "countersign/approval";

fn tools() -> Vec<Value> {
    vec![
        json!({"name": "list_orders", "inputSchema": {"type": "object"},
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "create_order",
               "inputSchema": {"type": "object", "properties": {"item": {"type": "string"}, "qty": {"type": "number"}}},
               "annotations": {"readOnlyHint": false, "destructiveHint": false}}),
        json!({"name": "delete_order",
               "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
               "annotations": {"destructiveHint": true}}),
        // A tool with an argument of its own that happens to share the gateway's name.
        json!({"name": "sign",
               "inputSchema": {"type": "object", "properties": {"confirmationToken": {"type": "string"}}},
               "annotations": {"destructiveHint": true}}),
        json!({"name": "cancel_order",
               "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
               "annotations": {"destructiveHint": true}}),
        json!({"name": "restock_all", "inputSchema": {"type": "object"}}),
    ]
}

/// The gateway, with `policy` (a file of `policies/`; `None`: the spec defaults), in front of a
/// scripted store whose `initialize` says "Store server.".
async fn start(policy: Option<&str>) -> Harness {
    let upstream = ScriptedServer::new(tools())
        .with_instructions("Store server.")
        .start()
        .await;
    let policy = policy
        .map(|p| format!("policy: {}\n", policy_path(p).display()))
        .unwrap_or_default();
    Harness::start_with(upstream, &format!("elicitation_timeout: 60s\n{policy}"), "").await
}

/// A wrongly approved call is forwarded by a background task, a moment after the answer that
/// approved it was taken. This polls the upstream's recording for up to a second so such a call
/// is seen; it returns at once when one is.
async fn ran_after_settling(h: &Harness) -> Vec<(String, Value)> {
    for _ in 0..20 {
        if !h.upstream.tool_calls().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.upstream.tool_calls_by_name("/arguments")
}

// --- 1 -------------------------------------------------------------------------------------

#[tokio::test]
async fn tool_with_its_own_confirmation_token_argument_cannot_be_changed_after_approval() {
    let h = start(None).await;
    let approved = json!({"confirmationToken": "the tool's own value"});
    let held = h
        .post_ok(&[], &tool_call(1, "sign", approved.clone()))
        .await;
    let token = held_token(&held);
    let next = &confirmation(&held)["guidance"]["next_action"];
    assert_eq!(
        next["_meta"][TOKEN_META], token,
        "for this tool the token is offered in _meta: {held}"
    );
    assert_eq!(
        next["arguments"], approved,
        "the tool's own argument is not taken over by the gateway: {held}"
    );

    let mut changed = tool_call(
        2,
        "sign",
        json!({"confirmationToken": "a value the person never saw"}),
    );
    changed["params"]["_meta"] = json!({TOKEN_META: token});
    let answer = h.post_ok(&[], &changed).await;
    let calls = h.upstream.tool_calls_by_name("/arguments");
    assert!(
        calls.is_empty(),
        "a changed `confirmationToken` argument of the tool itself must not run on the approval \
         of another value; the upstream ran {calls:?}; the gateway answered {answer}"
    );
    assert_eq!(
        confirmation(&answer)["code"],
        "arguments_mismatch",
        "{answer}"
    );
}

/// Positive control for the test above.
#[tokio::test]
async fn tool_with_its_own_confirmation_token_argument_runs_with_it_unchanged() {
    let h = start(None).await;
    let approved = json!({"confirmationToken": "the tool's own value"});
    let token = held_token(
        &h.post_ok(&[], &tool_call(1, "sign", approved.clone()))
            .await,
    );
    let mut redeem = tool_call(2, "sign", approved.clone());
    redeem["params"]["_meta"] = json!({TOKEN_META: token});
    let answer = h.post_ok(&[], &redeem).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "ran sign",
        "{answer}"
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("sign".to_owned(), approved)],
        "runs once, with the tool's own argument exactly as approved"
    );
}

// --- 2 -------------------------------------------------------------------------------------

#[tokio::test]
async fn answer_to_a_cancelled_question_does_not_approve_a_later_call_with_the_same_id() {
    let h = start(None).await;
    let session = open_session(&h.url(), json!({"elicitation": {}})).await;
    let approve = json!({"action": "accept", "content": {"approve": true}});

    // Call A, id 7, is held and then cancelled by the client.
    let (question_a, mut stream_a) = hold_on_stream(
        &h.url(),
        &session,
        &tool_call(7, "delete_order", json!({"id": "A"})),
    )
    .await;
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    h.post(&[("mcp-session-id", &session)], &cancel).await;
    let settled = within("A's settlement", stream_a.next_message()).await;
    assert_eq!(confirmation(&settled)["code"], "not_approved", "{settled}");
    assert!(
        h.upstream.tool_calls_by_name("/arguments").is_empty(),
        "the cancelled call ran nothing"
    );

    // Call B reuses id 7 with other arguments and is held in turn.
    let b_arguments = json!({"id": "B"});
    let (question_b, mut stream_b) = hold_on_stream(
        &h.url(),
        &session,
        &tool_call(7, "delete_order", b_arguments.clone()),
    )
    .await;

    // A late "yes" to A's question must not approve B.
    let late = answer_question(&h.url(), &session, &question_a["id"], approve.clone())
        .await
        .status
        .as_u16();
    let calls = ran_after_settling(&h).await;
    assert!(
        calls.is_empty(),
        "an answer to cancelled question {} (HTTP {late}) approved call B, asked as {}; the \
         upstream ran {calls:?}",
        question_a["id"],
        question_b["id"]
    );

    // Positive control: B's own question still approves B, exactly once.
    assert_eq!(
        answer_question(&h.url(), &session, &question_b["id"], approve)
            .await
            .status,
        202,
        "B's own question is still open"
    );
    let result = within("B's result", stream_b.next_message()).await;
    assert_eq!(result["id"], 7, "{result}");
    assert_eq!(
        result["result"]["content"][0]["text"], "ran delete_order",
        "{result}"
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("delete_order".to_owned(), b_arguments)]
    );
}

// --- 3 -------------------------------------------------------------------------------------

/// A 2026-07-28 retry of `delete_order` carrying `state` and `response` to the gateway's question.
fn retry(id: u64, arguments: &Value, state: &str, response: Value) -> Value {
    let mut extra = Map::new();
    extra.insert("requestState".into(), json!(state));
    extra.insert("inputResponses".into(), json!({ APPROVAL_KEY: response }));
    stateless_tool_call(
        id,
        "delete_order",
        arguments.clone(),
        form_elicitation(),
        extra,
    )
}

#[tokio::test]
async fn declined_input_required_state_is_spent() {
    let headers = stateless_headers("delete_order");
    let arguments = json!({"id": "o-1"});
    let mut failures = Vec::new();
    for refusal in ["decline", "cancel"] {
        let h = start(None).await;
        let asked = h
            .post_ok(
                &headers,
                &stateless_tool_call(
                    1,
                    "delete_order",
                    arguments.clone(),
                    form_elicitation(),
                    Map::new(),
                ),
            )
            .await;
        assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
        let state = asked["result"]["requestState"]
            .as_str()
            .expect("requestState")
            .to_owned();

        let refused = h
            .post_ok(
                &headers,
                &retry(2, &arguments, &state, json!({"action": refusal})),
            )
            .await;
        assert_eq!(
            confirmation(&refused)["code"],
            "not_approved",
            "{refusal}: {refused}"
        );

        let again = h
            .post_ok(
                &headers,
                &retry(
                    3,
                    &arguments,
                    &state,
                    json!({"action": "accept", "content": {"approve": true}}),
                ),
            )
            .await;
        let calls = h.upstream.tool_calls_by_name("/arguments");
        if !calls.is_empty() || confirmation(&again)["code"] != "replayed" {
            failures.push(format!(
                "after `{refusal}`, an accepting retry with the same requestState: the upstream \
                 ran {calls:?}; the gateway answered {again}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "a refused requestState must be spent (code `replayed`, nothing runs):\n{}",
        failures.join("\n")
    );
}

// --- 4 -------------------------------------------------------------------------------------

#[tokio::test]
async fn notification_shaped_tool_call_is_never_forwarded_unjudged() {
    // store.yaml: list_* are reads (allowed), cancel_order needs a confirmation, restock_all is
    // denied.
    let h = start(Some("store.yaml")).await;
    let legacy = [("mcp-protocol-version", "2025-03-26")];
    let risky = [
        (
            "held",
            tool_call_notification("cancel_order", json!({"order_id": "o-1"})),
        ),
        ("denied", tool_call_notification("restock_all", json!({}))),
    ];
    let mut outcomes = Vec::new();
    for (kind, notification) in &risky {
        let response = h.post(&legacy, notification).await;
        outcomes.push((format!("{kind} call alone"), response));
        let batch = json!([tool_call(1, "list_orders", json!({})), notification]);
        let response = h.post(&legacy, &batch).await;
        outcomes.push((format!("{kind} call in a batch with a read"), response));
    }
    let calls = h.upstream.tool_calls_by_name("/arguments");
    let statuses: Vec<String> = outcomes
        .iter()
        .map(|(case, r)| format!("{case}: HTTP {} {}", r.status, r.text()))
        .collect();
    assert!(
        calls.is_empty(),
        "an id-less tools/call of a risky tool reached the upstream: it ran {calls:?}\n{}",
        statuses.join("\n")
    );
    for (case, response) in &outcomes {
        assert!(
            response.status.is_client_error(),
            "{case}: expected an HTTP 4xx, got {} {}",
            response.status,
            response.text()
        );
    }
}

/// Positive control for the test above: a read the policy allows may go through without an id.
#[tokio::test]
async fn notification_shaped_read_call_may_be_forwarded() {
    let h = start(Some("store.yaml")).await;
    let response = h
        .post(
            &[("mcp-protocol-version", "2025-03-26")],
            &tool_call_notification("list_orders", json!({})),
        )
        .await;
    assert!(
        response.status.is_success(),
        "{} {}",
        response.status,
        response.text()
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("list_orders".to_owned(), json!({}))]
    );
}

// --- 5 -------------------------------------------------------------------------------------

#[tokio::test]
async fn confirmation_binds_task_and_acted_on_meta() {
    let arguments = json!({"item": "book", "qty": 2});
    // (what changed, extra params of the held call, how the redeeming call differs)
    type Change = fn(&mut Value);
    let cases: [(&str, Option<Value>, Change); 3] = [
        ("params.task added", None, |call| {
            call["params"]["task"] = json!({"ttl": 60000});
        }),
        ("params.task changed", Some(json!({"ttl": 1000})), |call| {
            call["params"]["task"] = json!({"ttl": 60000});
        }),
        ("an unknown _meta key added", None, |call| {
            call["params"]["_meta"]["com.example/dry_run"] = json!(false);
        }),
    ];
    let mut failures = Vec::new();
    for (case, task, change) in cases {
        let h = start(None).await;
        let mut held_call = tool_call(1, "create_order", arguments.clone());
        if let Some(task) = &task {
            held_call["params"]["task"] = task.clone();
        }
        let token = held_token(&h.post_ok(&[], &held_call).await);
        let mut redeem = held_call.clone();
        redeem["id"] = json!(2);
        redeem["params"]["_meta"] = json!({TOKEN_META: token});
        change(&mut redeem);
        let answer = h.post_ok(&[], &redeem).await;
        let calls = h.upstream.tool_calls();
        if !calls.is_empty() || confirmation(&answer)["status"] != "rejected" {
            failures.push(format!(
                "{case}: the upstream received {calls:?}; the gateway answered {answer}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "a token approves the call as held, not one with task or _meta flags changed since:\n{}",
        failures.join("\n")
    );
}

/// Positive control for the test above: a progress token is transport, not part of the call.
#[tokio::test]
async fn confirmation_survives_an_added_progress_token() {
    let h = start(None).await;
    let arguments = json!({"item": "book", "qty": 2});
    let token = held_token(
        &h.post_ok(&[], &tool_call(1, "create_order", arguments.clone()))
            .await,
    );
    let mut redeem = tool_call(2, "create_order", arguments.clone());
    redeem["params"]["_meta"] = json!({TOKEN_META: token, "progressToken": "p-1"});
    let answer = h.post_ok(&[], &redeem).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "ran create_order",
        "{answer}"
    );
    let calls = h.upstream.tool_calls();
    assert_eq!(calls.len(), 1, "runs once: {calls:?}");
    assert_eq!(calls[0]["arguments"], arguments);
    assert_eq!(calls[0]["_meta"]["progressToken"], "p-1");
}

// --- 6 -------------------------------------------------------------------------------------

#[tokio::test]
async fn question_text_escapes_separators_and_shows_every_key() {
    let h = start(None).await;
    let to = "mallory\u{2028}@evil\u{00ad}.com\u{e0041}";
    // `note` comes first, so a listing cut after a fixed length never reaches `to`.
    let arguments = json!({"note": "x".repeat(5000), "to": to});
    let hidden = [
        ('\u{2028}', &["\\u{2028}"][..]),
        ('\u{00ad}', &["\\u{00ad}", "\\u{ad}"][..]),
        ('\u{e0041}', &["\\u{e0041}"][..]),
    ];
    let mut problems = Vec::new();

    // input_required: the question the person reads.
    let asked = h
        .post_ok(
            &stateless_headers("delete_order"),
            &stateless_tool_call(
                1,
                "delete_order",
                arguments.clone(),
                form_elicitation(),
                Map::new(),
            ),
        )
        .await;
    let message = asked["result"]["inputRequests"][APPROVAL_KEY]["params"]["message"]
        .as_str()
        .expect("the gateway's question")
        .to_owned();
    for (c, escapes) in hidden {
        if message.contains(c) {
            problems.push(format!("question: raw U+{:04X}", c as u32));
        }
        if !escapes.iter().any(|e| message.contains(e)) {
            problems.push(format!("question: no escape {escapes:?}"));
        }
    }
    if !message.contains("\"to\"") || !message.contains("mallory") {
        problems.push("question: the key `to` and its value are not shown".into());
    }
    if !message.contains("truncated") {
        problems.push("question: no truncation marker for `note`".into());
    }

    // Token channel: the text block the model relays to the person.
    let held = h
        .post_ok(&[], &tool_call(2, "delete_order", arguments.clone()))
        .await;
    let text = held["result"]["content"][0]["text"]
        .as_str()
        .expect("the held result's text")
        .to_owned();
    for (c, _) in hidden {
        if text.contains(c) {
            problems.push(format!("held text: raw U+{:04X}", c as u32));
        }
    }
    if !text.contains("\"to\"") || !text.contains("mallory") {
        problems.push("held text: the key `to` and its value are not shown".into());
    }

    let calls = h.upstream.tool_calls_by_name("/arguments");
    assert!(calls.is_empty(), "nothing runs while held: {calls:?}");
    assert!(
        problems.is_empty(),
        "{}\n--- question ({} chars, tail): {}\n--- held text ({} chars, tail): {}",
        problems.join("\n"),
        message.chars().count(),
        tail(&message),
        text.chars().count(),
        tail(&text),
    );
}

/// The last 200 characters, escaped, for failure messages.
fn tail(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let tail: String = chars[chars.len().saturating_sub(200)..].iter().collect();
    tail.escape_debug().to_string()
}

// --- 7 -------------------------------------------------------------------------------------

async fn initialize_instructions(h: &Harness) -> String {
    let answer = h
        .post_ok(&[], &initialize(1, "2025-11-25", json!({})))
        .await;
    let initializes = h
        .upstream
        .messages()
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count();
    assert_eq!(initializes, 1, "the initialize reached the upstream");
    assert!(
        h.upstream.tool_calls().is_empty(),
        "initialize runs no tool"
    );
    answer["result"]["instructions"]
        .as_str()
        .expect("instructions")
        .to_owned()
}

#[tokio::test]
async fn allow_all_policy_leaves_instructions_untouched() {
    let h = start(Some("allow-all.yaml")).await;
    assert_eq!(
        initialize_instructions(&h).await,
        "Store server.",
        "nothing can be held under allow-all, so the gateway has nothing to explain"
    );
}

/// Positive control for the test above.
#[tokio::test]
async fn holding_policy_appends_the_gateway_paragraph() {
    let h = start(None).await;
    let instructions = initialize_instructions(&h).await;
    assert!(
        instructions.starts_with("Store server.\n\n") && instructions.contains("confirmationToken"),
        "{instructions}"
    );
}
