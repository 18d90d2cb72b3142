//! HTTPS upstreams end to end: the real gateway binary in front of the real Python SDK upstream
//! served over TLS (uvicorn) with a certificate of a CA the test generates. A client's session
//! is the same as with a plain upstream, the approval gate holds a destructive call until it is
//! approved, and an upstream the gateway cannot verify — wrong host name, unknown CA — or one
//! that demands a client certificate the gateway lacks gets nothing: the client is told which
//! upstream failed and why, the gateway logs it, and the upstream's own `audit_log` (read
//! through a correctly configured gateway) shows nothing ran.

use std::process::Stdio;

use countersign_e2e::tls::{ConfiguredGateway, https_entry, start_python_tls_upstream};
use countersign_e2e::{Peer, countersign_binary, policy, ran, run_client, start_python_upstream};
use countersign_testkit::tls::{Identity, TestCa, Validity};
use countersign_testkit::{TempFile, TestClient};
use serde_json::{Value, json};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"countersign-e2e","version":"1"}}}"#;
const ADD_NOTE: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add_note","arguments":{"name":"x","text":"y"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

/// A server certificate for both names the upstream can be reached by.
fn upstream_identity(ca: &TestCa) -> Identity {
    ca.server("upstream", &["localhost", "127.0.0.1"], Validity::Current)
}

/// One `tools/call` by the Python SDK client (stateless 2026-07-28, so a confirmation token
/// works from one run to the next; no elicitation, so a held call answers with its token).
async fn call(url: &str, tool: &str, arguments: Value) -> Value {
    let transcript = run_client(
        Peer::PythonStateless,
        url,
        "call",
        &[
            "--tool",
            tool,
            "--args",
            &arguments.to_string(),
            "--no-elicitation",
        ],
    )
    .await;
    transcript["steps"][0].clone()
}

/// What the upstream executed, from its own `audit_log`.
async fn executed(url: &str) -> Value {
    let step = call(url, "audit_log", json!({})).await;
    ran(Peer::PythonStateless, &step)["entries"].clone()
}

/// The transcript of the `session` script.
async fn session(peer: Peer, url: &str) -> Value {
    run_client(peer, url, "session", &[]).await
}

async fn session_through_https_is_identical_to_direct(peer: Peer) {
    let (_direct_upstream, direct_url) = start_python_upstream().await;
    let direct = session(peer, &direct_url).await;

    let ca = TestCa::new("countersign e2e CA");
    let (_upstream, url) = start_python_tls_upstream(&upstream_identity(&ca), None).await;
    let gateway = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), ""),
        Some(&policy("allow-all.yaml")),
        &[],
    )
    .await;
    let through = session(peer, &gateway.url).await;

    assert!(
        through["tools"].as_array().is_some_and(|t| t.len() >= 8),
        "{peer:?}: {through}"
    );
    assert_eq!(
        through["steps"]
            .as_array()
            .and_then(|steps| steps.iter().find(|s| s["call"] == "audit_log"))
            .map(|s| s["result"]["structuredContent"]["entries"].clone()),
        Some(json!([
            {"tool": "add_note", "arguments": {"name": "groceries", "text": "milk, eggs"}},
            {"tool": "confirm_delete", "arguments": {"name": "groceries"}}
        ])),
        "{peer:?}: the upstream's own audit log"
    );
    assert_eq!(direct, through, "{peer:?}\n{}", gateway.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn python_session_through_an_https_upstream_is_identical_to_the_direct_one() {
    session_through_https_is_identical_to_direct(Peer::PythonLegacy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_session_through_an_https_upstream_is_identical_to_the_direct_one() {
    session_through_https_is_identical_to_direct(Peer::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn held_delete_through_an_https_upstream_runs_only_once_approved() {
    let ca = TestCa::new("countersign e2e CA");
    let (_upstream, url) = start_python_tls_upstream(&upstream_identity(&ca), None).await;
    // The default policy: reads pass, everything else is held.
    let gateway =
        ConfiguredGateway::start(&https_entry(&url, &ca.cert_file(), ""), None, &[]).await;

    let held = call(&gateway.url, "delete_note", json!({"name": "readme"})).await;
    let confirmation = &held["result"]["_meta"]["countersign/confirmation"];
    assert_eq!(
        confirmation["status"],
        "requires_confirmation",
        "{held}\n{}",
        gateway.log()
    );
    assert_eq!(
        executed(&gateway.url).await,
        json!([]),
        "held: nothing may run"
    );

    let token = confirmation["confirmationToken"]
        .as_str()
        .expect("a held call returns its token");
    let approved = call(
        &gateway.url,
        "delete_note",
        json!({"name": "readme", "confirmationToken": token}),
    )
    .await;
    assert_eq!(
        ran(Peer::PythonStateless, &approved)["result"],
        "deleted note 'readme'"
    );
    assert_eq!(
        executed(&gateway.url).await,
        json!([{"tool": "delete_note", "arguments": {"name": "readme"}}])
    );
}

/// Sends an `initialize` and an allowed `add_note` through `refused`; both must come back as
/// a 502 JSON-RPC error naming the upstream and `cause`, the gateway must log the failure, and
/// the upstream — asked through `verified`, a gateway that can reach it — must have run nothing.
async fn assert_refused(refused: &ConfiguredGateway, cause: &str, verified: &ConfiguredGateway) {
    let client = TestClient::default();
    let stateless = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "add_note"),
    ];
    for (body, headers) in [(INITIALIZE, &[][..]), (ADD_NOTE, &stateless[..])] {
        let response = client.post_json(&refused.url, headers, body).await;
        assert_eq!(response.status, 502, "{}", response.text());
        let message = response.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.starts_with(&format!("upstream `hosted` is unreachable: {cause}")),
            "the client must be told which upstream failed and why: {message}"
        );
    }
    let log = refused.log();
    assert!(
        log.contains("WARN") && log.contains("upstream request failed") && log.contains(cause),
        "the gateway must log the failure with its cause:\n{log}"
    );
    assert_eq!(
        executed(&verified.url).await,
        json!([]),
        "the upstream must have run nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_certificate_for_another_host_name_is_refused() {
    let ca = TestCa::new("countersign e2e CA");
    // Valid for the address, not for the name the refused gateway uses.
    let identity = ca.server("upstream", &["127.0.0.1"], Validity::Current);
    let (_upstream, url) = start_python_tls_upstream(&identity, None).await;
    let allow_all = policy("allow-all.yaml");
    let refused = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), ""),
        Some(&allow_all),
        &[],
    )
    .await;
    let by_address = url.replace("localhost", "127.0.0.1");
    let verified = ConfiguredGateway::start(
        &https_entry(&by_address, &ca.cert_file(), ""),
        Some(&allow_all),
        &[],
    )
    .await;
    assert_refused(
        &refused,
        "TLS: invalid peer certificate: certificate not valid for name \"localhost\"",
        &verified,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_certificate_of_an_unknown_ca_is_refused() {
    let upstream_ca = TestCa::new("the upstream's CA");
    let other_ca = TestCa::new("a CA the upstream does not use");
    let (_upstream, url) = start_python_tls_upstream(&upstream_identity(&upstream_ca), None).await;
    let allow_all = policy("allow-all.yaml");
    let refused = ConfiguredGateway::start(
        &https_entry(&url, &other_ca.cert_file(), ""),
        Some(&allow_all),
        &[],
    )
    .await;
    let verified = ConfiguredGateway::start(
        &https_entry(&url, &upstream_ca.cert_file(), ""),
        Some(&allow_all),
        &[],
    )
    .await;
    assert_refused(
        &refused,
        "TLS: invalid peer certificate: UnknownIssuer",
        &verified,
    )
    .await;
}

/// `client_cert` and `client_key` of a client certificate of `ca`, for `tls:`.
fn client_certificate(ca: &TestCa) -> String {
    let client = ca.client("gateway", "countersign-gateway");
    format!(
        "client_cert: '{}', client_key: '{}'",
        client.cert_file.display(),
        client.key_file.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_requiring_a_client_certificate_refuses_a_gateway_without_one() {
    let ca = TestCa::new("countersign e2e CA");
    let (_upstream, url) =
        start_python_tls_upstream(&upstream_identity(&ca), Some(&ca.cert_file())).await;
    let allow_all = policy("allow-all.yaml");
    let refused = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), ""),
        Some(&allow_all),
        &[],
    )
    .await;
    let verified = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), &client_certificate(&ca)),
        Some(&allow_all),
        &[],
    )
    .await;
    assert_refused(
        &refused,
        "TLS: the upstream asked for a client certificate and none is configured \
         (tls.client_cert, tls.client_key); ",
        &verified,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_with_a_client_certificate_reaches_an_upstream_that_requires_one() {
    let ca = TestCa::new("countersign e2e CA");
    let (_upstream, url) =
        start_python_tls_upstream(&upstream_identity(&ca), Some(&ca.cert_file())).await;
    let gateway = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), &client_certificate(&ca)),
        Some(&policy("allow-all.yaml")),
        &[],
    )
    .await;
    let added = call(&gateway.url, "add_note", json!({"name": "x", "text": "y"})).await;
    assert_eq!(
        ran(Peer::PythonStateless, &added)["result"],
        "created note 'x'",
        "{}",
        gateway.log()
    );
    assert_eq!(
        executed(&gateway.url).await,
        json!([{"tool": "add_note", "arguments": {"name": "x", "text": "y"}}])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn system_roots_trust_the_ca_the_system_store_names() {
    // rustls-native-certs reads SSL_CERT_FILE instead of the platform's store when it is set,
    // as OpenSSL does: the way to point a container at a corporate CA bundle.
    let ca = TestCa::new("countersign e2e CA");
    let (_upstream, url) = start_python_tls_upstream(&upstream_identity(&ca), None).await;
    let ca_file = ca.cert_file();
    let entry = format!("name: hosted\n    url: {url}\n    tls: {{ roots: system }}");
    let gateway = ConfiguredGateway::start(
        &entry,
        Some(&policy("allow-all.yaml")),
        &[("SSL_CERT_FILE", ca_file.to_str().expect("UTF-8 path"))],
    )
    .await;
    assert_eq!(executed(&gateway.url).await, json!([]), "{}", gateway.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn check_and_serve_refuse_a_missing_ca_file_naming_the_key_and_path() {
    let config = TempFile::new(
        "countersign.yaml",
        "admin: 'off'\nupstreams:\n  - name: hosted\n    url: https://mcp.example.com/mcp\n    tls: { ca_file: /nonexistent/ca.pem }\n",
    );
    for command in ["check", "serve"] {
        let output = tokio::process::Command::new(countersign_binary())
            .args([command, "--config", config.path_str()])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("run countersign");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains("tls.ca_file `/nonexistent/ca.pem` cannot be read"),
            "{command} must name the key and the path: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificate_the_upstream_does_not_accept_is_refused() {
    let ca = TestCa::new("countersign e2e CA");
    let stranger = TestCa::new("a CA the upstream does not know");
    let (_upstream, url) =
        start_python_tls_upstream(&upstream_identity(&ca), Some(&ca.cert_file())).await;
    let allow_all = policy("allow-all.yaml");
    let refused = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), &client_certificate(&stranger)),
        Some(&allow_all),
        &[],
    )
    .await;
    let verified = ConfiguredGateway::start(
        &https_entry(&url, &ca.cert_file(), &client_certificate(&ca)),
        Some(&allow_all),
        &[],
    )
    .await;
    assert_refused(
        &refused,
        "TLS: the upstream asked for a client certificate, was sent tls.client_cert, and closed \
         the connection",
        &verified,
    )
    .await;
}
