//! Clients that speak only the 2024-11-05 HTTP+SSE transport — the Python SDK's
//! `mcp.client.sse.sse_client` and the TypeScript SDK's `SSEClientTransport` — through the real
//! gateway binary, in front of a real Python SDK (Streamable HTTP) upstream, after the one-line
//! URL swap to the gateway's `/sse`: their session is the Streamable HTTP one, a risky call is
//! held with the same token or question, and the upstream's own `audit_log` proves that only
//! what a person confirmed ran, exactly once. In front of an upstream that speaks only the
//! legacy transport too, the same swap works for legacy and Streamable HTTP clients alike.

use countersign_e2e::{
    Peer, deploy, policy, run_client, start_gateway, start_python_sse_upstream,
    start_python_upstream, step,
};
use serde_json::{Value, json};

/// The Streamable HTTP peer of the same SDK, for comparing transcripts.
fn streamable(peer: Peer) -> Peer {
    match peer {
        Peer::PythonSse => Peer::PythonLegacy,
        Peer::TypeScriptSse => Peer::TypeScript,
        other => panic!("{other:?} is not a legacy SSE peer"),
    }
}

/// `script` with `options` through a gateway with the default policy (reads pass, the rest is
/// held), in front of a fresh upstream.
async fn through_default_gateway(peer: Peer, script: &str, options: &[&str]) -> Value {
    let deployment = deploy(&[]).await;
    let transcript = run_client(peer, &deployment.url, script, options).await;
    assert_eq!(transcript["transport"], "sse", "{peer:?}: {transcript}");
    transcript
}

/// The step `name` of a confirm script, which must have run as scripted.
fn confirm_step<'a>(peer: Peer, transcript: &'a Value, name: &str) -> &'a Value {
    let found = step(peer, transcript, "step", name);
    for failure in ["error", "exception", "skipped"] {
        assert!(
            found.get(failure).is_none(),
            "{peer:?}: step {name} did not run: {found}"
        );
    }
    found
}

fn assert_held(peer: Peer, transcript: &Value, name: &str) {
    let confirmation = &confirm_step(peer, transcript, name)["confirmation"];
    assert_eq!(
        confirmation["status"], "requires_confirmation",
        "{peer:?} {name}: {confirmation}"
    );
    assert_eq!(
        confirmation["tokenReturned"], true,
        "{peer:?} {name}: {confirmation}"
    );
    assert_eq!(
        confirmation["nextActionMatches"], true,
        "{peer:?} {name}: the guidance must repeat this very call with the token: {confirmation}"
    );
}

fn refusal_code<'a>(peer: Peer, transcript: &'a Value, name: &str) -> &'a Value {
    let confirmation = &confirm_step(peer, transcript, name)["confirmation"];
    assert_eq!(
        confirmation["status"], "rejected",
        "{peer:?} {name}: {confirmation}"
    );
    &confirmation["code"]
}

/// What the upstream itself says it executed (its `audit_log`, read in the step `name`).
fn executed<'a>(peer: Peer, transcript: &'a Value, key: &str, name: &str) -> &'a Value {
    &countersign_e2e::ran(peer, step(peer, transcript, key, name))["entries"]
}

async fn session_matches_the_streamable_http_session(peer: Peer) {
    let (_direct_upstream, direct_url) = start_python_upstream().await;
    let direct = run_client(streamable(peer), &direct_url, "session", &[]).await;

    let (_upstream, upstream_url) = start_python_upstream().await;
    let (_gateway, gateway_url) =
        start_gateway(&upstream_url, &["--policy", &policy("allow-all.yaml")], &[]).await;
    let mut through = run_client(peer, &gateway_url, "session", &[]).await;

    // The legacy stream is the client's one GET; the transport has no DELETE.
    assert_eq!(through["getStream"], 200, "{peer:?}: {through}");
    assert_eq!(through["sessionDelete"], Value::Null, "{peer:?}: {through}");
    assert!(
        through["unsolicitedNotifications"]
            .as_array()
            .is_some_and(|n| !n.is_empty()),
        "{peer:?}: the upstream's GET-stream notifications must reach the legacy stream: {through}"
    );
    let mut direct = direct;
    if peer == Peer::TypeScriptSse {
        // The TypeScript SDK's SSEClientTransport hands the events of one network read to the
        // client synchronously, which runs notification handlers a microtask later but
        // settles a response at once: a progress notification the server sends right before
        // the result (slow_count's last) is dropped as "unknown token" whenever both arrive
        // in one read, in front of any legacy SSE server. Only that last one may be missing.
        let shown = take_progress(&mut through);
        let sent = take_progress(&mut direct);
        assert!(
            shown.len() + 1 >= sent.len() && sent.starts_with(&shown),
            "{peer:?}: progress shown {shown:?}, sent {sent:?}"
        );
    } else {
        let slow_count = step(peer, &through, "call", "slow_count");
        assert_eq!(
            slow_count["progress"].as_array().map(Vec::len),
            Some(5),
            "{peer:?}: every progress notification arrives on the legacy stream: {slow_count}"
        );
    }
    let through = through.as_object_mut().expect("a transcript is an object");
    through.remove("transport");
    through.insert("sessionDelete".into(), direct["sessionDelete"].clone());
    assert_eq!(direct, Value::Object(through.clone()), "{peer:?}");
}

/// Removes the progress notifications of the session script's `slow_count` step.
fn take_progress(transcript: &mut Value) -> Vec<Value> {
    let steps = transcript["steps"].as_array_mut().expect("steps");
    let slow_count = steps
        .iter_mut()
        .find(|s| s["call"] == "slow_count")
        .expect("a slow_count step");
    match slow_count
        .as_object_mut()
        .and_then(|s| s.remove("progress"))
    {
        Some(Value::Array(progress)) => progress,
        _ => Vec::new(),
    }
}

async fn confirmation_flow_runs_only_what_was_confirmed(peer: Peer) {
    let t = through_default_gateway(peer, "confirm", &[]).await;
    assert_eq!(
        t["confirmationTokenArgument"],
        json!(["add_note", "confirm_delete", "delete_note", "touch"]),
        "{peer:?}: tools/list over the legacy stream offers the token on exactly the held tools"
    );
    assert_held(peer, &t, "held");
    assert_eq!(
        countersign_e2e::ran(peer, confirm_step(peer, &t, "confirmed")),
        &json!({"result": "created note 'held'"})
    );
    assert_eq!(refusal_code(peer, &t, "replayed"), "replayed");
    assert_held(peer, &t, "held-a");
    assert_eq!(
        refusal_code(peer, &t, "changed-arguments"),
        "arguments_mismatch"
    );
    assert_eq!(refusal_code(peer, &t, "other-tool"), "tool_mismatch");
    assert_held(peer, &t, "model-flag");
    assert_held(peer, &t, "held-delete");
    assert_eq!(
        countersign_e2e::ran(peer, confirm_step(peer, &t, "confirmed-meta")),
        &json!({"result": "deleted note 'readme'"})
    );
    assert_eq!(
        executed(peer, &t, "step", "audit"),
        &json!([
            {"tool": "add_note", "arguments": {"name": "held", "text": "t"}},
            {"tool": "delete_note", "arguments": {"name": "readme"}}
        ]),
        "{peer:?}: the upstream's own audit log must show exactly the two confirmed calls"
    );
}

async fn token_is_refused_in_another_legacy_session(peer: Peer) {
    let t = through_default_gateway(peer, "confirm-cross-session", &[]).await;
    assert_held(peer, &t, "held");
    assert_eq!(refusal_code(peer, &t, "other-session"), "session_mismatch");
    assert_eq!(
        executed(peer, &t, "step", "audit"),
        &json!([]),
        "{peer:?}: nothing may run"
    );
    assert_eq!(t["secondSession"]["getStream"], 200, "{peer:?}: {t}");
}

async fn held_calls_ask_on_the_legacy_stream_and_run_once_approved(peer: Peer) {
    let t = through_default_gateway(peer, "elicit", &["--gateway-answer", "accept"]).await;
    let asked = &step(peer, &t, "call", "add_note")["elicitations"];
    assert_eq!(asked.as_array().map(Vec::len), Some(1), "{peer:?}: {t}");
    assert_eq!(asked[0]["asker"], "gateway", "{peer:?}: {t}");
    assert_eq!(asked[0]["tool"], "add_note", "{peer:?}");
    assert_eq!(
        asked[0]["argumentsShown"],
        json!({"name": "e", "text": "1"}),
        "{peer:?}"
    );
    let asked = &step(peer, &t, "call", "confirm_delete")["elicitations"];
    let askers: Vec<&Value> = asked
        .as_array()
        .map(|a| a.iter().map(|q| &q["asker"]).collect())
        .unwrap_or_default();
    assert_eq!(
        askers,
        ["gateway", "upstream"],
        "{peer:?}: the gateway's question, then the upstream's own: {t}"
    );
    assert_eq!(
        executed(peer, &t, "call", "audit_log"),
        &json!([
            {"tool": "add_note", "arguments": {"name": "e", "text": "1"}},
            {"tool": "confirm_delete", "arguments": {"name": "readme"}}
        ]),
        "{peer:?}"
    );
}

async fn declined_calls_run_nothing(peer: Peer) {
    let t = through_default_gateway(peer, "elicit", &["--gateway-answer", "decline"]).await;
    for call in ["add_note", "confirm_delete"] {
        let found = step(peer, &t, "call", call);
        assert_eq!(
            found["result"]["_meta"]["countersign/confirmation"]["code"], "not_approved",
            "{peer:?} {call}: {found}"
        );
    }
    assert_eq!(
        executed(peer, &t, "call", "audit_log"),
        &json!([]),
        "{peer:?}: nothing may run"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_session_through_the_gateway_matches_the_streamable_http_session() {
    session_matches_the_streamable_http_session(Peer::PythonSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_sse_session_through_the_gateway_matches_the_streamable_http_session() {
    session_matches_the_streamable_http_session(Peer::TypeScriptSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_confirmation_flow_runs_only_what_was_confirmed() {
    confirmation_flow_runs_only_what_was_confirmed(Peer::PythonSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_sse_confirmation_flow_runs_only_what_was_confirmed() {
    confirmation_flow_runs_only_what_was_confirmed(Peer::TypeScriptSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_token_is_refused_in_another_legacy_session() {
    token_is_refused_in_another_legacy_session(Peer::PythonSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_sse_token_is_refused_in_another_legacy_session() {
    token_is_refused_in_another_legacy_session(Peer::TypeScriptSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_held_calls_ask_on_the_legacy_stream_and_run_once_approved() {
    held_calls_ask_on_the_legacy_stream_and_run_once_approved(Peer::PythonSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_sse_held_calls_ask_on_the_legacy_stream_and_run_once_approved() {
    held_calls_ask_on_the_legacy_stream_and_run_once_approved(Peer::TypeScriptSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sse_declined_calls_run_nothing() {
    declined_calls_run_nothing(Peer::PythonSse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_sse_declined_calls_run_nothing() {
    declined_calls_run_nothing(Peer::TypeScriptSse).await;
}

/// In front of a server that speaks only legacy HTTP+SSE, the one-line swap works for both kinds
/// of client: `--upstream sse+http://server/sse` serves `/sse` on the gateway, where a legacy
/// client's GET opens a legacy session and a Streamable HTTP client's POSTs are its own.
#[tokio::test(flavor = "multi_thread")]
async fn python_sse_client_in_front_of_a_legacy_sse_upstream_needs_only_the_url_swap() {
    let (_upstream, sse_url) = start_python_sse_upstream().await;
    let (_gateway, url) = start_gateway(&format!("sse+{sse_url}"), &["--audit", "off"], &[]).await;
    let swapped = countersign_e2e::legacy_sse_url(&url);

    let t = run_client(Peer::PythonSse, &swapped, "confirm", &[]).await;
    assert_held(Peer::PythonSse, &t, "held");
    assert_eq!(
        countersign_e2e::ran(
            Peer::PythonSse,
            confirm_step(Peer::PythonSse, &t, "confirmed")
        ),
        &json!({"result": "created note 'held'"})
    );
    assert_eq!(refusal_code(Peer::PythonSse, &t, "replayed"), "replayed");
    assert_eq!(
        executed(Peer::PythonSse, &t, "step", "audit"),
        &json!([
            {"tool": "add_note", "arguments": {"name": "held", "text": "t"}},
            {"tool": "delete_note", "arguments": {"name": "readme"}}
        ]),
        "the legacy server's own audit log must show exactly the two confirmed calls"
    );

    let modern = run_client(
        Peer::PythonLegacy,
        &swapped,
        "call",
        &["--tool", "list_notes"],
    )
    .await;
    let listed = countersign_e2e::ran(Peer::PythonLegacy, &modern["steps"][0]);
    assert_eq!(listed, &json!({"names": ["held"]}), "{modern}");
}
