//! The confirmation flow: reads pass, risky calls are held with a token, and only a valid,
//! unspent token for exactly the same call lets it through, once. Every test judges by what
//! the fake upstream actually recorded.

mod common;

use std::sync::{Arc, Mutex};

use common::{Harness, policy_path};
use countersign_testkit::mcp::{
    ScriptedServer, confirmation, held_token, stateless_headers, stateless_tool_call, tool_call,
};
use countersign_testkit::{RecordedRequest, Reply, TempFile, TestClient};
use serde_json::{Value, json};

fn default_tools() -> Vec<Value> {
    vec![
        json!({"name": "list_orders", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
        json!({"name": "create_order", "description": "Create an order.",
               "inputSchema": {"type": "object", "properties": {"item": {"type": "string"}, "qty": {"type": "number"}}},
               "annotations": {"readOnlyHint": false, "destructiveHint": false}}),
        json!({"name": "delete_order", "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
               "annotations": {"destructiveHint": true}, "outputSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}),
        json!({"name": "touch", "inputSchema": {"type": "object"}}),
        json!({"name": "sign", "inputSchema": {"type": "object", "properties": {"confirmationToken": {"type": "string"}}},
               "annotations": {"destructiveHint": true}}),
    ]
}

/// A scripted store listing [`default_tools`], whose `initialize` says "A store.", and which
/// answers a `ping` on SSE after announcing that the tool list changed.
fn store() -> ScriptedServer {
    ScriptedServer::new(default_tools())
        .with_instructions("A store.")
        .with_handler(|message| {
            (message["method"] == "ping").then(|| {
                Reply::sse(&[
                    "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
                    &format!(
                        "data: {}\n\n",
                        json!({"jsonrpc": "2.0", "id": message["id"], "result": {}})
                    ),
                ])
            })
        })
}

/// The gateway (the spec-default policy; `extra_yaml` after the upstream entry) in front of a
/// fresh [`store`], and that store's catalog, to change.
async fn start(extra_yaml: &str) -> (Harness, Arc<Mutex<Vec<Value>>>) {
    let server = store();
    let tools = server.catalog();
    (
        Harness::start_with(server.start().await, "", extra_yaml).await,
        tools,
    )
}

async fn hold(h: &Harness, headers: &[(&str, &str)], tool: &str, arguments: Value) -> String {
    let answer = h.post_ok(headers, &tool_call(1, tool, arguments)).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    held_token(&answer)
}

fn with_token(mut arguments: Value, token: &str) -> Value {
    arguments["confirmationToken"] = Value::String(token.to_owned());
    arguments
}

#[tokio::test]
async fn read_calls_pass_at_once() {
    let (h, _) = start("").await;
    let answer = h
        .post_ok(&[], &tool_call(1, "list_orders", json!({})))
        .await;
    assert_eq!(answer["result"]["content"][0]["text"], "ran list_orders");
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("list_orders".to_owned(), json!({}))]
    );
}

#[tokio::test]
async fn risky_calls_are_held_and_nothing_runs() {
    let (h, _) = start("").await;
    for (tool, risk) in [
        ("create_order", "write"),
        ("delete_order", "destructive"),
        ("touch", "destructive"),
        ("no_such_tool", "unknown"),
    ] {
        let answer = h
            .post_ok(&[], &tool_call(1, tool, json!({"item": "book"})))
            .await;
        let held = confirmation(&answer);
        assert_eq!(held["status"], "requires_confirmation", "{tool}: {answer}");
        assert_eq!(held["risk"], risk, "{tool}");
        assert!(
            held["confirmationToken"]
                .as_str()
                .is_some_and(|t| t.starts_with("mcp_cf_"))
        );
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .expect("text");
        assert!(text.starts_with("Nothing was executed"), "{text}");
    }
    assert!(
        h.upstream.tool_calls_by_name("/arguments").is_empty(),
        "the upstream must not run a held call"
    );
}

#[tokio::test]
async fn held_results_respect_the_tools_output_schema() {
    let (h, _) = start("").await;
    let with_schema = h
        .post_ok(&[], &tool_call(1, "delete_order", json!({"id": "o1"})))
        .await;
    assert!(
        with_schema["result"].get("structuredContent").is_none(),
        "would violate the tool's outputSchema"
    );
    let without = h
        .post_ok(&[], &tool_call(2, "create_order", json!({"item": "a"})))
        .await;
    assert_eq!(
        without["result"]["structuredContent"]["status"],
        "requires_confirmation"
    );
}

#[tokio::test]
async fn a_confirmed_call_runs_exactly_once_without_the_token() {
    let (h, _) = start("").await;
    let arguments = json!({"item": "book", "qty": 2});
    let token = hold(&h, &[], "create_order", arguments.clone()).await;

    let answer = h
        .post_ok(
            &[],
            &tool_call(2, "create_order", with_token(arguments.clone(), &token)),
        )
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "ran create_order",
        "{answer}"
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("create_order".to_owned(), arguments.clone())],
        "token stripped, call run once"
    );

    let replay = h
        .post_ok(
            &[],
            &tool_call(3, "create_order", with_token(arguments, &token)),
        )
        .await;
    assert_eq!(confirmation(&replay)["code"], "replayed", "{replay}");
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments").len(),
        1,
        "a replayed token runs nothing"
    );
}

#[tokio::test]
async fn the_token_may_come_in_meta() {
    let (h, _) = start("").await;
    let token = hold(&h, &[], "delete_order", json!({"id": "o1"})).await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "delete_order", "arguments": {"id": "o1"}, "_meta": {"countersign/confirmationToken": token}}});
    h.post_ok(&[], &body.to_string()).await;
    let forwarded: Vec<Value> = h
        .upstream
        .requests()
        .iter()
        .map(RecordedRequest::json)
        .filter(|b| b["method"] == "tools/call")
        .collect();
    assert_eq!(forwarded.len(), 1);
    assert!(
        forwarded[0]["params"]["_meta"]
            .get("countersign/confirmationToken")
            .is_none(),
        "token stripped from _meta"
    );
}

#[tokio::test]
async fn a_token_only_fits_the_exact_call() {
    let (h, _) = start("").await;
    let token = hold(&h, &[], "create_order", json!({"item": "book", "qty": 2})).await;
    let cases = [
        (
            "create_order",
            json!({"item": "book", "qty": 3}),
            "arguments_mismatch",
        ),
        (
            "create_order",
            json!({"item": "book"}),
            "arguments_mismatch",
        ),
        (
            "create_order",
            json!({"item": "book", "qty": 2, "gift": true}),
            "arguments_mismatch",
        ),
        (
            "delete_order",
            json!({"item": "book", "qty": 2}),
            "tool_mismatch",
        ),
    ];
    for (tool, arguments, code) in cases {
        let answer = h
            .post_ok(&[], &tool_call(2, tool, with_token(arguments, &token)))
            .await;
        assert_eq!(confirmation(&answer)["code"], code, "{tool}: {answer}");
    }
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
    // The same arguments, reordered and spelled differently, are the same call.
    let same = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"create_order","arguments":{"qty":2.0,"item":"b\u006fok","confirmationToken":"TOKEN"}}}"#
        .replace("TOKEN", &token);
    h.post_ok(&[], &same).await;
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("create_order".to_owned(), json!({"qty": 2, "item": "book"}))],
        "forwarded in canonical form"
    );
}

#[tokio::test]
async fn tokens_are_bound_to_the_session() {
    let (h, _) = start("").await;
    let token = hold(
        &h,
        &[("mcp-session-id", "session-a")],
        "create_order",
        json!({"item": "a"}),
    )
    .await;
    let answer = h
        .post_ok(
            &[("mcp-session-id", "session-b")],
            &tool_call(2, "create_order", with_token(json!({"item": "a"}), &token)),
        )
        .await;
    assert_eq!(confirmation(&answer)["code"], "session_mismatch");
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn tokens_are_bound_to_the_principal() {
    let (h, _) = start("identity: { header: x-user }\n").await;
    let token = hold(
        &h,
        &[("x-user", "ada")],
        "create_order",
        json!({"item": "a"}),
    )
    .await;
    let answer = h
        .post_ok(
            &[("x-user", "mallory")],
            &tool_call(2, "create_order", with_token(json!({"item": "a"}), &token)),
        )
        .await;
    assert_eq!(confirmation(&answer)["code"], "subject_mismatch");
    let anonymous = h.post(&[], &tool_call(3, "list_orders", json!({}))).await;
    assert_eq!(
        anonymous.status, 401,
        "the identity header is required once configured"
    );
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn forged_and_malformed_tokens_are_rejected() {
    let (h, _) = start("").await;
    let token = hold(&h, &[], "create_order", json!({"item": "a"})).await;
    let mut flipped = token.clone().into_bytes();
    let last = flipped.len() - 3;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).expect("ascii");
    let other_keyring = {
        // A token from another deployment's gateway: same shape, different key.
        let (other, _) = start("").await;
        hold(&other, &[], "create_order", json!({"item": "a"})).await
    };
    for (presented, codes) in [
        (flipped.as_str(), &["bad_signature", "malformed"][..]),
        ("mcp_cf_garbage", &["malformed"][..]),
        ("confirm", &["malformed"][..]),
        (
            other_keyring.as_str(),
            &["unknown_key", "bad_signature"][..],
        ),
    ] {
        let answer = h
            .post_ok(
                &[],
                &tool_call(
                    2,
                    "create_order",
                    with_token(json!({"item": "a"}), presented),
                ),
            )
            .await;
        let code = confirmation(&answer)["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(codes.contains(&code.as_str()), "{presented}: {answer}");
    }
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn a_model_written_confirm_flag_is_not_a_confirmation() {
    let (h, _) = start("").await;
    for arguments in [
        json!({"item": "a", "confirm": true}),
        json!({"item": "a", "confirmed": "yes", "approved": true}),
    ] {
        let answer = h
            .post_ok(&[], &tool_call(1, "create_order", arguments))
            .await;
        assert_eq!(confirmation(&answer)["status"], "requires_confirmation");
    }
    let with_meta = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "create_order", "arguments": {"item": "a"}, "_meta": {"confirm": true}}});
    let answer = h.post_ok(&[], &with_meta.to_string()).await;
    assert_eq!(confirmation(&answer)["status"], "requires_confirmation");
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn concurrent_redemptions_of_one_token_run_the_call_once() {
    let (h, _) = start("").await;
    let token = hold(&h, &[], "delete_order", json!({"id": "o1"})).await;
    let url = h.url();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (url, token) = (url.clone(), token.clone());
            tokio::spawn(async move {
                TestClient::default()
                    .post_json(
                        &url,
                        &[],
                        &tool_call(
                            100 + i,
                            "delete_order",
                            with_token(json!({"id": "o1"}), &token),
                        )
                        .to_string(),
                    )
                    .await
            })
        })
        .collect();
    let mut codes = Vec::new();
    for task in tasks {
        let answer = task.await.expect("task").json();
        codes.push(
            confirmation(&answer)["code"]
                .as_str()
                .unwrap_or("ran")
                .to_owned(),
        );
    }
    assert_eq!(codes.iter().filter(|c| *c == "ran").count(), 1, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| *c == "replayed").count(),
        49,
        "{codes:?}"
    );
    assert_eq!(h.upstream.tool_calls_by_name("/arguments").len(), 1);
}

#[tokio::test]
async fn unsafe_numbers_in_risky_arguments_are_refused() {
    let (h, _) = start("").await;
    for number in ["9007199254740993", "-9007199254740993", "1e300"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"create_order","arguments":{{"qty":{number}}}}}}}"#
        );
        let answer = h.post_ok(&[], &body).await;
        assert_eq!(
            confirmation(&answer)["code"],
            "unsafe_arguments",
            "{number}: {answer}"
        );
    }
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn policy_denials_say_why_and_run_nothing() {
    let (h, _) = start(&format!(
        "policy: {}\n",
        policy_path("store.yaml").display()
    ))
    .await;
    // store.yaml denies restock_all on the upstream named `store`.
    let answer = h
        .post_ok(&[], &tool_call(1, "restock_all", json!({})))
        .await;
    assert_eq!(confirmation(&answer)["status"], "denied");
    assert_eq!(confirmation(&answer)["code"], "policy_denied");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .expect("text")
            .contains("warehouse team")
    );
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn human_only_approval_is_refused_without_elicitation() {
    let (h, _) = start(&format!(
        "policy: {}\n",
        policy_path("store.yaml").display()
    ))
    .await;
    let items: Vec<Value> = (0..6)
        .map(|i| json!({"sku": format!("S{i}"), "quantity": 1}))
        .collect();
    let answer = h
        .post_ok(
            &[],
            &tool_call(
                1,
                "create_order",
                json!({"customer": "ada", "items": items}),
            ),
        )
        .await;
    assert_eq!(
        confirmation(&answer)["code"],
        "human_approval_unavailable",
        "{answer}"
    );
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn invalid_tool_names_are_refused() {
    let (h, _) = start("").await;
    for name in [
        "d\u{0435}lete_order",
        "delete\u{200b}_order",
        "delete_order ",
        "ｄelete_order",
    ] {
        let answer = h.post_ok(&[], &tool_call(1, name, json!({}))).await;
        assert_eq!(
            confirmation(&answer)["status"],
            "denied",
            "{name:?}: {answer}"
        );
    }
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn a_tool_with_its_own_confirmation_token_argument_keeps_it() {
    let (h, _) = start("").await;
    let held = h
        .post_ok(
            &[],
            &tool_call(
                1,
                "sign",
                json!({"confirmationToken": "the tool's own value"}),
            ),
        )
        .await;
    let token = confirmation(&held)["confirmationToken"]
        .as_str()
        .expect("token")
        .to_owned();
    assert!(
        held["result"]["content"][0]["text"]
            .as_str()
            .expect("text")
            .contains("_meta")
    );
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sign", "arguments": {"confirmationToken": "the tool's own value"}, "_meta": {"countersign/confirmationToken": token}}});
    h.post_ok(&[], &body.to_string()).await;
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![(
            "sign".to_owned(),
            json!({"confirmationToken": "the tool's own value"})
        )]
    );
}

#[tokio::test]
async fn a_changed_tool_definition_invalidates_the_token() {
    let (h, tools) = start("").await;
    let token = hold(&h, &[], "create_order", json!({"item": "a"})).await;
    tools.lock().expect("lock")[1]["description"] = json!("Create an order. Also emails everyone.");
    // The upstream announces the change on a relayed stream; the gateway re-lists.
    post_sse(&h, r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#).await;
    let answer = h
        .post_ok(
            &[],
            &tool_call(2, "create_order", with_token(json!({"item": "a"}), &token)),
        )
        .await;
    assert_eq!(
        confirmation(&answer)["code"],
        "definition_changed",
        "{answer}"
    );
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn an_annotation_flip_does_not_lower_a_pinned_risk() {
    let h = delete_order_pinned_then_claiming_read_only().await;
    let answer = h
        .post_ok(&[], &tool_call(2, "delete_order", json!({"id": "o1"})))
        .await;
    assert_eq!(
        confirmation(&answer)["status"],
        "requires_confirmation",
        "rug pull must not unlock the tool: {answer}"
    );
    assert_eq!(confirmation(&answer)["risk"], "destructive");
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

#[tokio::test]
async fn a_tool_that_lowers_its_claim_is_still_offered_the_token_its_calls_need() {
    let h = delete_order_pinned_then_claiming_read_only().await;
    // The listing is explained against the pins calls are classified by: the pinned risk
    // stays destructive, so the tool keeps the argument a held call's token goes in.
    let answer = h
        .post_ok(&[], r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#)
        .await;
    let listed = answer["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|tool| tool["name"] == "delete_order")
        .expect("listed");
    assert_eq!(
        listed["annotations"]["readOnlyHint"], true,
        "the upstream's new claim is relayed"
    );
    assert_eq!(
        listed["inputSchema"]["properties"]["confirmationToken"]["type"], "string",
        "{listed}"
    );
    let answer = h
        .post_ok(&[], &tool_call(7, "delete_order", json!({"id": "o1"})))
        .await;
    assert_eq!(confirmation(&answer)["status"], "requires_confirmation");
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}

/// A gateway that pinned `delete_order` destructive (one of its calls was held), after which
/// the upstream re-lists it claiming `readOnlyHint` and the gateway has seen the change.
async fn delete_order_pinned_then_claiming_read_only() -> Harness {
    let (h, tools) = start("").await;
    hold(&h, &[], "delete_order", json!({"id": "o1"})).await;
    tools.lock().expect("lock")[2]["annotations"] = json!({"readOnlyHint": true});
    post_sse(&h, r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#).await;
    h
}

async fn post_sse(h: &Harness, body: &str) {
    let response = h.post(&[], body).await;
    assert!(
        response.text().contains("list_changed"),
        "the notification is relayed"
    );
}

#[tokio::test]
async fn batches_holding_a_risky_call_are_refused_whole() {
    let (h, _) = start("").await;
    let batch = format!(
        "[{},{}]",
        tool_call(1, "list_orders", json!({})),
        tool_call(2, "delete_order", json!({"id": "o1"}))
    );
    let response = h.post(&[], &batch).await;
    assert_eq!(response.status, 400);
    assert!(
        response.text().contains("delete_order"),
        "{}",
        response.text()
    );
    assert!(
        h.upstream.tool_calls_by_name("/arguments").is_empty(),
        "not even the read in the batch runs"
    );
    let reads = format!(
        "[{},{}]",
        tool_call(1, "list_orders", json!({})),
        tool_call(2, "list_orders", json!({}))
    );
    h.post(&[], &reads).await;
    assert_eq!(
        h.upstream
            .requests()
            .iter()
            .filter(|r| r.body.starts_with(b"["))
            .count(),
        1,
        "a read-only batch is forwarded"
    );
}

#[tokio::test]
async fn tools_list_offers_the_token_argument_only_for_risky_tools() {
    let (h, _) = start("").await;
    let answer = h
        .post_ok(&[], r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    let tools = answer["result"]["tools"].as_array().expect("tools");
    let property = |name: &str| {
        tools.iter().find(|t| t["name"] == name).expect("listed")["inputSchema"]["properties"]["confirmationToken"].clone()
    };
    assert_eq!(property("list_orders"), Value::Null);
    assert_eq!(property("create_order")["type"], "string");
    assert_eq!(property("delete_order")["type"], "string");
    assert_eq!(
        property("sign")["type"],
        "string",
        "the tool's own property is left as it is"
    );
    let initialize = h.post_ok(&[], r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#).await;
    let instructions = initialize["result"]["instructions"]
        .as_str()
        .expect("instructions");
    assert!(
        instructions.starts_with("A store.") && instructions.contains("confirmationToken"),
        "{instructions}"
    );
}

#[tokio::test]
async fn stateless_clients_get_held_results_with_result_type() {
    let (h, _) = start("").await;
    let body = stateless_tool_call(
        1,
        "create_order",
        json!({"item": "a"}),
        json!({}),
        Value::Null,
    );
    let headers = stateless_headers("create_order");
    let answer = h.post_ok(&headers, &body).await;
    assert_eq!(answer["result"]["resultType"], "complete");
    let token = confirmation(&answer)["confirmationToken"]
        .as_str()
        .expect("token")
        .to_owned();
    let mut redeem = body.clone();
    redeem["id"] = json!(2);
    redeem["params"]["arguments"]["confirmationToken"] = json!(token);
    h.post_ok(&headers, &redeem).await;
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("create_order".to_owned(), json!({"item": "a"}))]
    );
}

#[tokio::test]
async fn an_invalid_policy_reload_keeps_the_old_policy() {
    let file = TempFile::new(
        "reload-policy.yaml",
        "version: 1\nrules:\n  - id: block\n    tools: [list_orders]\n    action: deny\n",
    );
    let (h, _) = start(&format!("policy: {}\n", file.path().display())).await;
    let denied = h
        .post_ok(&[], &tool_call(1, "list_orders", json!({})))
        .await;
    assert_eq!(confirmation(&denied)["status"], "denied");

    std::fs::write(
        file.path(),
        "version: 1\nrules:\n  - id: block\n    tools: [list_orders]\n    action: maybe\n",
    )
    .expect("write");
    wait_for_reload().await;
    let still = h
        .post_ok(&[], &tool_call(2, "list_orders", json!({})))
        .await;
    assert_eq!(
        confirmation(&still)["status"],
        "denied",
        "the invalid file must not replace the policy"
    );

    std::fs::write(file.path(), "version: 1\n").expect("write");
    let mut allowed = false;
    for _ in 0..20 {
        wait_for_reload().await;
        let answer = h
            .post_ok(&[], &tool_call(3, "list_orders", json!({})))
            .await;
        if answer["result"]["content"][0]["text"] == "ran list_orders" {
            allowed = true;
            break;
        }
    }
    assert!(allowed, "a valid new policy is picked up without a restart");
}

/// The reloader polls the file's modification time; give it a poll or two.
async fn wait_for_reload() {
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
}

#[tokio::test]
async fn prompts_and_resources_are_gated_when_a_rule_names_them() {
    let file = TempFile::new(
        "prompts-policy.yaml",
        "version: 1\nrules:\n  - id: secrets\n    method: resources/read\n    tools: ['secret://*']\n    action: deny\n    reason: Secrets stay put.\n  - id: prompt-review\n    method: prompts/get\n    tools: [deploy]\n    action: confirm\n",
    );
    let (h, _) = start(&format!("policy: {}\n", file.path().display())).await;
    let read = |id: u64, uri: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}})
            .to_string()
    };
    let denied = h.post_ok(&[], &read(1, "secret://db-password")).await;
    assert_eq!(denied["error"]["data"]["code"], "policy_denied", "{denied}");
    let allowed = h.post_ok(&[], &read(2, "file:///readme")).await;
    assert!(allowed.get("result").is_some(), "{allowed}");

    let prompt = |id: u64, meta: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "prompts/get", "params": {"name": "deploy", "arguments": {"env": "prod"}, "_meta": meta}}).to_string()
    };
    let held = h.post_ok(&[], &prompt(3, json!({}))).await;
    assert_eq!(
        held["error"]["data"]["status"], "requires_confirmation",
        "{held}"
    );
    let token = held["error"]["data"]["confirmationToken"]
        .as_str()
        .expect("token")
        .to_owned();
    let answered = h
        .post_ok(
            &[],
            &prompt(4, json!({"countersign/confirmationToken": token})),
        )
        .await;
    assert!(answered.get("result").is_some(), "{answered}");

    let forwarded: Vec<Value> = h
        .upstream
        .requests()
        .iter()
        .map(RecordedRequest::json)
        .collect();
    let methods: Vec<&str> = forwarded
        .iter()
        .filter_map(|b| b["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        ["resources/read", "prompts/get"],
        "only the allowed read and the confirmed prompt"
    );
    assert_eq!(forwarded[0]["params"]["uri"], "file:///readme");
    assert!(
        forwarded[1]["params"]["_meta"]
            .get("countersign/confirmationToken")
            .is_none()
    );
}

#[tokio::test]
async fn every_decision_and_outcome_is_audited_without_arguments() {
    let log = TempFile::new("audit.log", "");
    let upstream = store().start().await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 'off'\naudit: {{ path: {} }}\nidentity: {{ header: x-user }}\nupstreams:\n  - name: store\n    url: {}\n",
        log.path().display(),
        upstream.url()
    );
    let h = Harness::from_yaml(upstream, &yaml).await;
    let user = [("x-user", "ada")];
    let token = hold(&h, &user, "create_order", json!({"item": "secret-sauce"})).await;
    h.post_ok(
        &user,
        &tool_call(
            2,
            "create_order",
            with_token(json!({"item": "secret-sauce"}), &token),
        ),
    )
    .await;

    // Audit lines are written by a background thread; wait for it to catch up.
    let mut text = String::new();
    for _ in 0..500 {
        text = std::fs::read_to_string(log.path()).unwrap_or_default();
        if text.lines().count() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        !text.contains("secret-sauce"),
        "arguments stay out of the audit log by default"
    );
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let outcomes: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["event"].as_str().expect("event"),
                l["outcome"].as_str().expect("outcome"),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("decision", "held"),
            ("decision", "confirmed"),
            ("outcome", "forwarded")
        ],
        "{text}"
    );
    assert!(lines.iter().all(|l| l["principal"] == "ada"
        && l["tool"] == "create_order"
        && l["upstream"] == "store"));
    assert_eq!(
        lines[0]["jti"], lines[2]["jti"],
        "the held token is the one that ran"
    );
    assert_eq!(lines[0]["args_hash"], lines[1]["args_hash"]);
}

#[tokio::test]
async fn an_unknown_tool_does_not_make_every_call_list_the_tools_again() {
    let (h, _) = start("").await;
    for id in 0..5 {
        let answer = h
            .post_ok(&[], &tool_call(id, "no_such_tool", json!({})))
            .await;
        assert_eq!(confirmation(&answer)["risk"], "unknown");
    }
    let listings = h
        .upstream
        .requests()
        .iter()
        .filter(|r| r.json()["method"] == "tools/list")
        .count();
    assert_eq!(
        listings, 1,
        "one listing answers for a while; it is not repeated per call"
    );
    assert!(h.upstream.tool_calls_by_name("/arguments").is_empty());
}
