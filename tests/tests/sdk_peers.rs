//! Real MCP SDK clients against a real Python SDK server, directly and through the real gateway
//! binary: every client must see exactly the same session either way — tool listing, calls with
//! progress and logs, an upstream-originated elicitation relayed to the client, GET-stream
//! notifications and DELETE — and the upstream's audit log must show the same executions.

use countersign_e2e::{Peer, policy, run_client, start_gateway, start_python_upstream, step};
use serde_json::Value;

/// Runs the client's session script against `url` and returns its transcript.
async fn session(peer: Peer, url: &str) -> Value {
    run_client(peer, url, "session", &[]).await
}

/// The same session against a fresh upstream, once directly and once through the gateway.
async fn direct_and_through_gateway(peer: Peer) -> (Value, Value) {
    let (_direct_upstream, direct_url) = start_python_upstream().await;
    let direct = session(peer, &direct_url).await;

    let (_upstream, upstream_url) = start_python_upstream().await;
    let (_gateway, gateway_url) =
        start_gateway(&upstream_url, &["--policy", &policy("allow-all.yaml")], &[]).await;
    let through = session(peer, &gateway_url).await;
    (direct, through)
}

/// The transcript must actually exercise the side channels, or comparing it proves little.
fn assert_session_is_rich(peer: Peer, transcript: &Value) {
    assert!(
        transcript["tools"].as_array().is_some_and(|t| t.len() >= 8),
        "{peer:?}: {transcript}"
    );
    let progress = step(peer, transcript, "call", "slow_count")["progress"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(progress, 5, "{peer:?} must see every progress notification");
    let elicitations = &step(peer, transcript, "call", "confirm_delete")["elicitations"];
    assert_eq!(
        elicitations[0]["action"], "accept",
        "{peer:?} must be asked by the upstream: {transcript}"
    );
    let executed =
        &step(peer, transcript, "call", "audit_log")["result"]["structuredContent"]["entries"];
    assert_eq!(
        executed,
        &serde_json::json!([
            {"tool": "add_note", "arguments": {"name": "groceries", "text": "milk, eggs"}},
            {"tool": "confirm_delete", "arguments": {"name": "groceries"}}
        ]),
        "{peer:?}: the upstream's own audit log"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_session_is_identical_through_the_gateway() {
    let (direct, through) = direct_and_through_gateway(Peer::PythonLegacy).await;
    assert_session_is_rich(Peer::PythonLegacy, &direct);
    assert_eq!(through["getStream"], 200);
    assert_eq!(through["sessionDelete"], 200);
    assert!(
        through["unsolicitedNotifications"]
            .as_array()
            .is_some_and(|n| !n.is_empty()),
        "GET-stream notifications must arrive: {through}"
    );
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_session_is_identical_through_the_gateway() {
    let (direct, through) = direct_and_through_gateway(Peer::PythonStateless).await;
    assert_session_is_rich(Peer::PythonStateless, &direct);
    assert_eq!(through["protocolVersion"], "2026-07-28");
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_session_is_identical_through_the_gateway() {
    let (direct, through) = direct_and_through_gateway(Peer::TypeScript).await;
    assert_session_is_rich(Peer::TypeScript, &direct);
    assert_eq!(through["getStream"], 200);
    assert_eq!(through["sessionDelete"], 200);
    assert_eq!(direct, through);
}
