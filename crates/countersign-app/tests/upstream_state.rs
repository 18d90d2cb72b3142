//! What the gateway says about its upstreams (issue 10): a start-up probe, `/readyz` listing each
//! upstream's state with the cause of a failure, and a per-request error that names the upstream
//! and why it cannot be reached.

mod common;

use bytes::Bytes;
use common::Harness;
use countersign_testkit::mcp::within;
use countersign_testkit::{RecordingUpstream, Reply, TestClient, collect};
use http::Method;
use serde_json::json;

/// A loopback URL nothing listens on.
fn unreachable_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}/mcp")
}

async fn readyz(h: &Harness) -> (u16, String) {
    let admin = h.gateway.admin_addr.expect("admin listener");
    let response = collect(
        TestClient::default()
            .send(
                Method::GET,
                &format!("http://{admin}/readyz"),
                &[],
                Bytes::new(),
            )
            .await,
    )
    .await;
    (response.status.as_u16(), response.text())
}

#[tokio::test]
async fn readyz_lists_every_upstream_with_the_cause_of_a_failure() {
    let upstream = RecordingUpstream::with_responder(|_| {
        Reply::json(200, json!({"jsonrpc": "2.0", "id": "x", "result": {}}))
    })
    .await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\naudit: {{ path: 'off' }}\npolicy: {}\n\
         upstreams:\n  - name: store\n    url: {}\n  - name: gone\n    url: {}\n    path: /gone\n",
        common::policy_path("allow-all.yaml").display(),
        upstream.url(),
        unreachable_url(),
    );
    let h = Harness::from_yaml(upstream, &yaml).await;

    // The start-up probe reaches both upstreams without anyone calling them.
    let body = within("the probes to settle", async {
        loop {
            let (status, body) = readyz(&h).await;
            assert_eq!(
                status, 200,
                "an upstream's trouble does not take the gateway out: {body}"
            );
            if !body.contains("not contacted yet") {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(body.starts_with("ready\n"), "{body}");
    assert!(
        body.contains("upstream store (streamable-http): ready\n"),
        "{body}"
    );
    let gone = body
        .lines()
        .find(|line| line.starts_with("upstream gone (streamable-http): failing: "))
        .unwrap_or_else(|| panic!("the failing upstream is listed: {body}"));
    assert!(
        gone.contains("upstream `gone` is unreachable") && gone.contains("refused"),
        "names the cause: {gone}"
    );
    assert!(
        h.upstream.requests().is_empty(),
        "the probe connects and sends nothing"
    );

    // A request to the failing upstream gets the same cause as a JSON-RPC error.
    let response = TestClient::default()
        .post_json(
            &format!("http://{}/gone", h.addr()),
            &[],
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#,
        )
        .await;
    assert_eq!(response.status, 502);
    let answer = response.json();
    assert_eq!(answer["id"], 5);
    let message = answer["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("upstream `gone` is unreachable") && message.contains("refused"),
        "{message}"
    );
}
