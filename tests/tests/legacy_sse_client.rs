//! A client that speaks only the 2024-11-05 HTTP+SSE transport — the Python SDK's
//! `mcp.client.sse.sse_client` — through the real gateway binary, in front of a real Python SDK
//! (Streamable HTTP) upstream, after the one-line URL swap to the gateway's `/sse`: its session
//! is the Streamable HTTP one, a risky call is held with the same token or question, and the
//! upstream's own `audit_log` proves that only what a person confirmed ran, exactly once.

use countersign_e2e::{
    Peer, deploy, policy, run_client, start_gateway, start_python_upstream, step,
};
use serde_json::{Value, json};

const SSE: Peer = Peer::PythonSse;

/// `script` with `options` through a gateway with the default policy (reads pass, the rest is
/// held), in front of a fresh upstream.
async fn through_default_gateway(script: &str, options: &[&str]) -> Value {
    let deployment = deploy(&[]).await;
    let transcript = run_client(SSE, &deployment.url, script, options).await;
    assert_eq!(transcript["transport"], "sse", "{transcript}");
    transcript
}

/// The step `name` of a confirm script, which must have run as scripted.
fn confirm_step<'a>(transcript: &'a Value, name: &str) -> &'a Value {
    let found = step(SSE, transcript, "step", name);
    for failure in ["error", "exception", "skipped"] {
        assert!(
            found.get(failure).is_none(),
            "step {name} did not run: {found}"
        );
    }
    found
}

fn assert_held(transcript: &Value, name: &str) {
    let confirmation = &confirm_step(transcript, name)["confirmation"];
    assert_eq!(
        confirmation["status"], "requires_confirmation",
        "{name}: {confirmation}"
    );
    assert_eq!(
        confirmation["tokenReturned"], true,
        "{name}: {confirmation}"
    );
    assert_eq!(
        confirmation["nextActionMatches"], true,
        "{name}: the guidance must repeat this very call with the token: {confirmation}"
    );
}

fn refusal_code<'a>(transcript: &'a Value, name: &str) -> &'a Value {
    let confirmation = &confirm_step(transcript, name)["confirmation"];
    assert_eq!(confirmation["status"], "rejected", "{name}: {confirmation}");
    &confirmation["code"]
}

/// What the upstream itself says it executed (its `audit_log`, read in the step `name`).
fn executed<'a>(transcript: &'a Value, key: &str, name: &str) -> &'a Value {
    &countersign_e2e::ran(SSE, step(SSE, transcript, key, name))["entries"]
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_session_through_the_gateway_matches_the_streamable_http_session() {
    let (_direct_upstream, direct_url) = start_python_upstream().await;
    let direct = run_client(Peer::PythonLegacy, &direct_url, "session", &[]).await;

    let (_upstream, upstream_url) = start_python_upstream().await;
    let (_gateway, gateway_url) =
        start_gateway(&upstream_url, &["--policy", &policy("allow-all.yaml")], &[]).await;
    let mut through = run_client(SSE, &gateway_url, "session", &[]).await;

    // The legacy stream is the client's one GET; the transport has no DELETE.
    assert_eq!(through["getStream"], 200, "{through}");
    assert_eq!(through["sessionDelete"], Value::Null, "{through}");
    assert!(
        through["unsolicitedNotifications"]
            .as_array()
            .is_some_and(|n| !n.is_empty()),
        "the upstream's GET-stream notifications must reach the legacy stream: {through}"
    );
    let slow_count = step(SSE, &through, "call", "slow_count");
    assert_eq!(
        slow_count["progress"].as_array().map(Vec::len),
        Some(5),
        "every progress notification arrives on the legacy stream: {slow_count}"
    );
    let through = through.as_object_mut().expect("a transcript is an object");
    through.remove("transport");
    through.insert("sessionDelete".into(), direct["sessionDelete"].clone());
    assert_eq!(direct, Value::Object(through.clone()));
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_confirmation_flow_runs_only_what_was_confirmed() {
    let t = through_default_gateway("confirm", &[]).await;
    assert_eq!(
        t["confirmationTokenArgument"],
        json!(["add_note", "confirm_delete", "delete_note", "touch"]),
        "tools/list over the legacy stream offers the token on exactly the held tools"
    );
    assert_held(&t, "held");
    assert_eq!(
        countersign_e2e::ran(SSE, confirm_step(&t, "confirmed")),
        &json!({"result": "created note 'held'"})
    );
    assert_eq!(refusal_code(&t, "replayed"), "replayed");
    assert_held(&t, "held-a");
    assert_eq!(refusal_code(&t, "changed-arguments"), "arguments_mismatch");
    assert_eq!(refusal_code(&t, "other-tool"), "tool_mismatch");
    assert_held(&t, "model-flag");
    assert_held(&t, "held-delete");
    assert_eq!(
        countersign_e2e::ran(SSE, confirm_step(&t, "confirmed-meta")),
        &json!({"result": "deleted note 'readme'"})
    );
    assert_eq!(
        executed(&t, "step", "audit"),
        &json!([
            {"tool": "add_note", "arguments": {"name": "held", "text": "t"}},
            {"tool": "delete_note", "arguments": {"name": "readme"}}
        ]),
        "the upstream's own audit log must show exactly the two confirmed calls"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_token_is_refused_in_another_legacy_session() {
    let t = through_default_gateway("confirm-cross-session", &[]).await;
    assert_held(&t, "held");
    assert_eq!(refusal_code(&t, "other-session"), "session_mismatch");
    assert_eq!(executed(&t, "step", "audit"), &json!([]), "nothing may run");
    assert_eq!(t["secondSession"]["getStream"], 200, "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_held_calls_ask_on_the_legacy_stream_and_run_once_approved() {
    let t = through_default_gateway("elicit", &["--gateway-answer", "accept"]).await;
    let asked = &step(SSE, &t, "call", "add_note")["elicitations"];
    assert_eq!(asked.as_array().map(Vec::len), Some(1), "{t}");
    assert_eq!(asked[0]["asker"], "gateway", "{t}");
    assert_eq!(asked[0]["tool"], "add_note");
    assert_eq!(
        asked[0]["argumentsShown"],
        json!({"name": "e", "text": "1"})
    );
    let asked = &step(SSE, &t, "call", "confirm_delete")["elicitations"];
    let askers: Vec<&Value> = asked
        .as_array()
        .map(|a| a.iter().map(|q| &q["asker"]).collect())
        .unwrap_or_default();
    assert_eq!(
        askers,
        ["gateway", "upstream"],
        "the gateway's question, then the upstream's own: {t}"
    );
    assert_eq!(
        executed(&t, "call", "audit_log"),
        &json!([
            {"tool": "add_note", "arguments": {"name": "e", "text": "1"}},
            {"tool": "confirm_delete", "arguments": {"name": "readme"}}
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_declined_calls_run_nothing() {
    let t = through_default_gateway("elicit", &["--gateway-answer", "decline"]).await;
    for call in ["add_note", "confirm_delete"] {
        let found = step(SSE, &t, "call", call);
        assert_eq!(
            found["result"]["_meta"]["countersign/confirmation"]["code"], "not_approved",
            "{call}: {found}"
        );
    }
    assert_eq!(
        executed(&t, "call", "audit_log"),
        &json!([]),
        "nothing may run"
    );
}
