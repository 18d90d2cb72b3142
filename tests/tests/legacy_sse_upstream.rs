//! Upstreams that speak only the legacy 2024-11-05 HTTP+SSE transport, through the real gateway
//! binary: the Python SDK notes store run with `transport: sse` (`upstream.py --transport sse`).
//!
//! Modern Streamable HTTP clients must see exactly the session they see against the same store
//! over Streamable HTTP, and a held write must not run until approved and then run once, judged
//! by the store's own audit log.

use countersign_e2e::session::{Session, assert_rich};
use countersign_e2e::{
    Peer, policy, run_client, start_gateway, start_python_sse_upstream, start_python_upstream,
};
use countersign_testkit::TestClient;
use serde_json::Value;

/// The same session script against the store over Streamable HTTP, and through the gateway in
/// front of the store over legacy SSE (everything allowed, so only the transport differs).
async fn direct_and_through_legacy_sse(peer: Peer) -> (Value, Value) {
    let (_direct, direct_url) = start_python_upstream().await;
    let direct = run_client(peer, &direct_url, "session", &[]).await;
    let (_upstream, sse_url) = start_python_sse_upstream().await;
    let (_gateway, url) = start_gateway(
        &format!("sse+{sse_url}"),
        &[
            "--path",
            "/mcp",
            "--policy",
            &policy("allow-all.yaml"),
            "--audit",
            "off",
        ],
        &[],
    )
    .await;
    let through = run_client(peer, &url, "session", &[]).await;
    (direct, through)
}

#[tokio::test(flavor = "multi_thread")]
async fn python_session_through_a_legacy_sse_upstream_equals_the_streamable_one() {
    let (direct, through) = direct_and_through_legacy_sse(Peer::PythonLegacy).await;
    assert_rich(Peer::PythonLegacy, &through);
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_session_through_a_legacy_sse_upstream_equals_the_streamable_one() {
    let (direct, through) = direct_and_through_legacy_sse(Peer::TypeScript).await;
    assert_rich(Peer::TypeScript, &through);
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_write_runs_on_the_legacy_sse_upstream_only_after_approval_and_only_once() {
    let (_upstream, sse_url) = start_python_sse_upstream().await;
    // The default policy: reads pass, writes wait for a person.
    let (_gateway, url) = start_gateway(
        &format!("sse+{sse_url}"),
        &["--path", "/mcp", "--audit", "off"],
        &[],
    )
    .await;
    let mut session = Session::open(&url).await;
    session.assert_held_delete_runs_once_approved().await;
    assert_eq!(session.delete().await, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_request_to_a_legacy_sse_upstream_is_told_to_open_a_session() {
    let (_upstream, sse_url) = start_python_sse_upstream().await;
    let (_gateway, url) = start_gateway(
        &format!("sse+{sse_url}"),
        &["--path", "/mcp", "--audit", "off"],
        &[],
    )
    .await;
    let answer = TestClient::default()
        .post_json(
            &url,
            &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")],
            r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("only the 2024-11-05 HTTP+SSE transport"),
        "{message}"
    );
}
