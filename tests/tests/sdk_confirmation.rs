//! The confirmation-token channel (docs/confirmation-token.md and docs/wire-formats.md) driven by real MCP SDK clients through the
//! real gateway with its default policy, in front of a real Python SDK upstream: a risky call is
//! held, redeemed once with its token (in the arguments or in `_meta`), and every misuse — replay,
//! changed arguments, another tool, a forged signature, a model-written `confirm` flag, another
//! session — is refused with its code. What the gateway says is checked, but the upstream's own
//! `audit_log` judges: it must list exactly the two calls a person confirmed.

use countersign_e2e::{Peer, deploy, run_client};
use serde_json::{Value, json};

/// Runs `script` once through a gateway with the default policy (no `--policy`) in front of a
/// fresh upstream, and returns the client's transcript.
async fn through_default_gateway(peer: Peer, script: &str) -> Value {
    let deployment = deploy(&[]).await;
    let transcript = run_client(peer, &deployment.url, script, &[]).await;
    assert!(
        !transcript.to_string().contains("mcp_cf_"),
        "{peer:?}: the transcript must not carry tokens (it would not be deterministic)"
    );
    transcript
}

/// The step the confirm script named `name`, which must have run as scripted.
fn step<'a>(peer: Peer, transcript: &'a Value, name: &str) -> &'a Value {
    let found = countersign_e2e::step(peer, transcript, "step", name);
    for failure in ["error", "exception", "skipped"] {
        assert!(
            found.get(failure).is_none(),
            "{peer:?}: step {name} did not run as scripted: {found}"
        );
    }
    found
}

/// A held call: nothing ran, a token came back, and the guidance names this very call.
fn assert_held(peer: Peer, transcript: &Value, name: &str) {
    let confirmation = &step(peer, transcript, name)["confirmation"];
    assert_eq!(
        confirmation["status"], "requires_confirmation",
        "{peer:?} {name}: {confirmation}"
    );
    assert_eq!(confirmation["isError"], true, "{peer:?} {name}");
    assert_eq!(confirmation["tokenReturned"], true, "{peer:?} {name}");
    assert_eq!(
        confirmation["nextActionMatches"], true,
        "{peer:?} {name}: guidance.next_action must repeat the call with the token"
    );
}

/// A refused redemption, with the code it was refused for.
fn refusal_code<'a>(peer: Peer, transcript: &'a Value, name: &str) -> &'a str {
    let confirmation = &step(peer, transcript, name)["confirmation"];
    assert_eq!(
        confirmation["status"], "rejected",
        "{peer:?} {name}: {confirmation}"
    );
    assert_eq!(confirmation["isError"], true, "{peer:?} {name}");
    assert_eq!(confirmation["tokenReturned"], false, "{peer:?} {name}");
    confirmation["code"]
        .as_str()
        .unwrap_or_else(|| panic!("{peer:?} {name}: refusal without a code: {confirmation}"))
}

/// The upstream's real result of a call that ran.
fn ran<'a>(peer: Peer, transcript: &'a Value, name: &str) -> &'a Value {
    countersign_e2e::ran(peer, step(peer, transcript, name))
}

fn executed(peer: Peer, transcript: &Value) -> &Value {
    &ran(peer, transcript, "audit")["entries"]
}

async fn confirm_flow(peer: Peer) -> Value {
    let t = through_default_gateway(peer, "confirm").await;
    assert_eq!(
        t["confirmationTokenArgument"],
        json!(["add_note", "confirm_delete", "delete_note", "touch"]),
        "{peer:?}: tools/list must offer confirmationToken on exactly the held tools"
    );

    assert_held(peer, &t, "held");
    assert_eq!(
        ran(peer, &t, "confirmed"),
        &json!({"result": "created note 'held'"})
    );
    assert_eq!(refusal_code(peer, &t, "replayed"), "replayed");

    assert_held(peer, &t, "held-a");
    assert_eq!(
        refusal_code(peer, &t, "changed-arguments"),
        "arguments_mismatch"
    );
    assert_eq!(refusal_code(peer, &t, "other-tool"), "tool_mismatch");
    let forged = refusal_code(peer, &t, "forged");
    assert!(
        matches!(forged, "bad_signature" | "malformed"),
        "{peer:?}: a forged signature was refused as {forged}"
    );

    assert_held(peer, &t, "model-flag");

    assert_held(peer, &t, "held-delete");
    assert_eq!(
        ran(peer, &t, "confirmed-meta"),
        &json!({"result": "deleted note 'readme'"})
    );

    assert_eq!(
        executed(peer, &t),
        &json!([
            {"tool": "add_note", "arguments": {"name": "held", "text": "t"}},
            {"tool": "delete_note", "arguments": {"name": "readme"}}
        ]),
        "{peer:?}: the upstream's own audit log must show exactly the two confirmed calls"
    );
    t
}

async fn cross_session(peer: Peer) {
    let t = through_default_gateway(peer, "confirm-cross-session").await;
    assert_held(peer, &t, "held");
    assert_eq!(refusal_code(peer, &t, "other-session"), "session_mismatch");
    assert_eq!(executed(peer, &t), &json!([]), "{peer:?}: nothing may run");
    // Two real sessions: each had its own GET stream and was DELETEd on its own.
    for session in [&t, &t["secondSession"]] {
        assert_eq!(session["getStream"], 200, "{peer:?}: {t}");
        assert_eq!(session["sessionDelete"], 200, "{peer:?}: {t}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_confirmation_flow_runs_only_what_was_confirmed() {
    let t = confirm_flow(Peer::PythonLegacy).await;
    assert_eq!(t["protocolVersion"], "2025-11-25");
    assert_eq!(t["sessionDelete"], 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_confirmation_flow_runs_only_what_was_confirmed() {
    let t = confirm_flow(Peer::PythonStateless).await;
    assert_eq!(t["protocolVersion"], "2026-07-28");
    assert_eq!(t["sessionDelete"], Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_confirmation_flow_runs_only_what_was_confirmed() {
    let t = confirm_flow(Peer::TypeScript).await;
    assert_eq!(t["protocolVersion"], "2025-11-25");
    assert_eq!(t["sessionDelete"], 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_token_is_refused_in_another_session() {
    cross_session(Peer::PythonLegacy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_token_is_refused_in_another_session() {
    cross_session(Peer::TypeScript).await;
}
