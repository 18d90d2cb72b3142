//! The command line: exit codes, `check`, `keygen` and `token inspect`.

use std::time::Duration;

use countersign_e2e::{countersign_binary, repo_root};
use countersign_testkit::{TempFile, free_port};
use tokio::process::Command;

async fn countersign(args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(countersign_binary()).args(args).output(),
    )
    .await
    .expect("countersign finished")
    .expect("countersign ran");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn configuration_errors_exit_with_2_and_say_why() {
    let bad = TempFile::new(
        "bad.yaml",
        "upstreams:\n  - url: http://127.0.0.1:1/mcp\nlisten_address: x\n",
    );
    let (code, _, stderr) = countersign(&["serve", "--config", bad.path_str()]).await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("listen_address"), "{stderr}");
    let (code, _, stderr) =
        countersign(&["serve", "--upstream", "ftp://x/mcp", "--admin", "off"]).await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("must be http:// or https://"), "{stderr}");
    let (code, _, _) = countersign(&["serve", "--bogus-flag"]).await;
    assert_eq!(code, Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_that_cannot_start_never_opens_its_port() {
    // A Redis that accepts connections and never answers: the gateway's start-up waits out its
    // connection timeout, then gives up.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let redis = format!("redis://{}", silent.local_addr().expect("address"));
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            connections.push(connection);
        }
    });
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut gateway = Command::new(countersign_binary())
        .args([
            "serve",
            "--upstream",
            "http://127.0.0.1:1/mcp",
            "--admin",
            "off",
        ])
        .args(["--listen", &listen, "--redis", &redis])
        .env(
            "COUNTERSIGN_SIGNING_KEYS",
            "k1:QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("countersign starts");

    // A port that opened while the gateway was still connecting would queue clients for a
    // gateway that then exits (and tell an orchestrator probing it that it was up).
    let mut connected = 0;
    let status = loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            connected += 1;
        }
        if let Some(status) = gateway.try_wait().expect("wait") {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    held.abort();
    let output = gateway.wait_with_output().await.expect("stderr");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!status.success());
    assert!(stderr.contains("connecting to Redis"), "{stderr}");
    assert_eq!(connected, 0, "the port accepted a connection: {stderr}");
}

#[tokio::test]
async fn check_explains_every_tool_of_a_snapshot() {
    let tools = TempFile::new(
        "tools.json",
        r#"{"tools":[{"name":"list_products","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
                     {"name":"restock_all","inputSchema":{"type":"object"}},
                     {"name":"cancel_order","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true}}]}"#,
    );
    let config = repo_root().join("examples/gateway.yaml");
    let (code, stdout, stderr) = countersign(&[
        "check",
        "--config",
        config.to_str().expect("utf-8"),
        "--tools",
        tools.path_str(),
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let row = |tool: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(tool))
            .unwrap_or_else(|| panic!("no row for {tool}:\n{stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("list_products")[1..3], ["read", "allow"]);
    assert_eq!(row("restock_all")[1..3], ["destructive", "deny"]);
    assert_eq!(row("cancel_order")[1..3], ["destructive", "confirm"]);

    let broken_policy = TempFile::new(
        "broken.yaml",
        "version: 1\nrules:\n  - id: x\n    tools: [a]\n    action: perhaps\n",
    );
    let (code, _, stderr) = countersign(&[
        "check",
        "--config",
        config.to_str().expect("utf-8"),
        "--policy",
        broken_policy.path_str(),
    ])
    .await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("perhaps"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keygen_entries_sign_tokens_that_inspect_verifies() {
    let (code, entry, _) = countersign(&["keygen"]).await;
    assert_eq!(code, Some(0));
    let entry = entry.trim().to_owned();
    let (kid, key) = entry.split_once(':').expect("kid:key");
    assert!(!kid.is_empty() && key.len() >= 43, "{entry}");

    // The demo gateway signs with the generated key; hold a call to get a token.
    let port = countersign_testkit::free_port();
    let mut demo = Command::new(countersign_binary());
    demo.args([
        "demo",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--admin",
        "off",
    ])
    .env("COUNTERSIGN_SIGNING_KEYS", &entry)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let _demo = countersign_e2e::Process::start_until_listening("demo", demo, port).await;
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"cancel_order","arguments":{"order_id":"ord-1001"}}}"#;
    let held = countersign_testkit::TestClient::default()
        .post_json(&format!("http://127.0.0.1:{port}/mcp"), &[], call)
        .await
        .json();
    let token = held["result"]["_meta"]["countersign/confirmation"]["confirmationToken"]
        .as_str()
        .expect("a held call carries a token")
        .to_owned();

    let (code, stdout, _) = countersign(&["token", "inspect", &token, "--keys", &entry]).await;
    assert_eq!(code, Some(0));
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(report["header"]["kid"], kid);
    assert_eq!(report["claims"]["tool"], "cancel_order");
    assert_eq!(
        report["verification"],
        "valid signature, within its lifetime"
    );

    let (_, other, _) = countersign(&["keygen"]).await;
    let (_, stdout, _) = countersign(&["token", "inspect", &token, "--keys", other.trim()]).await;
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    assert!(
        report["verification"]
            .as_str()
            .expect("verdict")
            .starts_with("rejected: unknown_key"),
        "{report}"
    );

    let (code, _, stderr) = countersign(&["token", "inspect", "mcp_cf_not.a.token"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not a confirmation token"), "{stderr}");
}
