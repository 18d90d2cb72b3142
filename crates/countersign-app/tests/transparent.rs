//! The gateway is transparent: what a client sends arrives upstream (re-serialized, with
//! regenerated framing), and what the upstream answers reaches the client — streams included.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Harness, TOOLS_LIST};
use countersign_testkit::{RecordingUpstream, Reply, TempFile, TestClient, collect};
use http::Method;
use http_body_util::BodyExt;
use serde_json::json;

#[tokio::test]
async fn post_is_forwarded_as_the_reserialization_of_the_parsed_body() {
    let upstream = RecordingUpstream::with_responder(|_| {
        Reply::json(200, json!({"jsonrpc":"2.0","id":7,"result":{"tools":[]}}))
            .with_header("mcp-session-id", "s-1")
    })
    .await;
    let h = Harness::start(upstream, "").await;
    let body = "  {\"id\" : 7, \"jsonrpc\":\"2.0\",\n \"method\":\"\\u0074ools/list\", \"params\":{\"cursor\":\"c\", \"n\": 1.50}}  ";
    let response = TestClient::default()
        .post_json(&h.url(), &[("mcp-session-id", "s-1")], body)
        .await;

    assert_eq!(response.status, 200);
    assert_eq!(
        response.json(),
        json!({"jsonrpc":"2.0","id":7,"result":{"tools":[]}})
    );
    assert_eq!(response.header("mcp-session-id"), Some("s-1"));
    let recorded = h.upstream.requests();
    assert_eq!(recorded.len(), 1);
    // Canonical envelope order, compact, the escape decoded, the number kept exactly as sent.
    assert_eq!(
        std::str::from_utf8(&recorded[0].body).expect("utf-8"),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"c","n":1.50}}"#
    );
    assert_eq!(
        recorded[0].header("content-length"),
        Some(recorded[0].body.len().to_string().as_str())
    );
    assert_eq!(recorded[0].header("mcp-session-id"), Some("s-1"));
}

#[tokio::test]
async fn host_is_rewritten_and_hop_by_hop_and_spoofing_headers_are_dropped() {
    let upstream = RecordingUpstream::start().await;
    let upstream_authority = upstream.addr().to_string();
    let h = Harness::start(upstream, "").await;
    TestClient::default()
        .post_json(
            &h.url(),
            &[
                ("origin", "http://localhost:5173"),
                ("authorization", "Bearer user-token"),
                ("x-forwarded-host", "evil.example"),
                ("x-original-url", "/admin"),
                ("connection", "x-hop"),
                ("x-hop", "secret"),
                ("x-trace", "abc"),
                ("mcp-protocol-version", "2025-06-18"),
            ],
            TOOLS_LIST,
        )
        .await;
    let recorded = &h.upstream.requests()[0];
    assert_eq!(recorded.header("host"), Some(upstream_authority.as_str()));
    assert_eq!(recorded.header("authorization"), Some("Bearer user-token"));
    assert_eq!(recorded.header("x-trace"), Some("abc"));
    assert_eq!(recorded.header("mcp-protocol-version"), Some("2025-06-18"));
    for dropped in [
        "origin",
        "x-forwarded-host",
        "x-original-url",
        "x-hop",
        "transfer-encoding",
    ] {
        assert_eq!(
            recorded.header(dropped),
            None,
            "{dropped} must not reach the upstream"
        );
    }
}

#[tokio::test]
async fn auth_replace_sends_the_gateway_credential_instead_of_the_clients() {
    let secret = TempFile::new("upstream-authorization", "Bearer gateway-credential\n");
    let upstream = RecordingUpstream::start().await;
    let h = Harness::start(
        upstream,
        &format!(
            "    auth: {{ replace: {{ file: {} }} }}\n",
            secret.path().display()
        ),
    )
    .await;
    TestClient::default()
        .post_json(
            &h.url(),
            &[("authorization", "Bearer user-token")],
            TOOLS_LIST,
        )
        .await;
    let recorded = &h.upstream.requests()[0];
    assert_eq!(
        recorded.header("authorization"),
        Some("Bearer gateway-credential")
    );
}

#[tokio::test]
async fn first_sse_event_reaches_the_client_before_the_upstream_finishes() {
    let (reply, feed) = Reply::sse_stream();
    let reply = std::sync::Mutex::new(Some(reply));
    let upstream = RecordingUpstream::with_responder(move |request| {
        if request.json()["method"] == "tools/list" {
            // The gateway lists the tools itself before it classifies the first call.
            let id = request.json()["id"].clone();
            let tool = json!({"name": "slow", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}});
            return Reply::json(200, json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [tool]}}));
        }
        reply.lock().expect("lock").take().unwrap_or_else(|| Reply::status(500))
    })
    .await;
    let h = Harness::start(upstream, "").await;
    let response = TestClient::default()
        .send(
            Method::POST,
            &h.url(),
            &[("content-type", "application/json"), ("accept", "application/json, text/event-stream")],
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{}}}"#,
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();

    feed.send(Bytes::from_static(b"id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n"))
        .await
        .expect("upstream stream open");
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the first event arrives while the upstream stream is still open")
        .expect("a frame")
        .expect("no error")
        .into_data()
        .expect("data");
    assert!(
        std::str::from_utf8(&first)
            .expect("utf-8")
            .starts_with("id: e1\ndata: ")
    );

    feed.send(Bytes::from_static(
        b"id: e2\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
    ))
    .await
    .expect("upstream stream open");
    drop(feed);
    let rest = body
        .collect()
        .await
        .expect("stream ends cleanly")
        .to_bytes();
    assert_eq!(
        &rest[..],
        b"id: e2\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
    );
}

#[tokio::test]
async fn sse_priming_retry_comments_and_ids_pass_intact() {
    let upstream = RecordingUpstream::with_responder(|_| {
        Reply::sse(&[
            "id: 0a1b\r\ndata: \r\n\r\n",
            "retry: 1500\n\n",
            ": keep-alive\n\n",
            "event: message\nid: 0a1c\ndata: {\"jsonrpc\":\"2.0\",\n",
            "data: \"id\":1,\"result\":{}}\n\n",
        ])
    })
    .await;
    let h = Harness::start(upstream, "").await;
    let response = TestClient::default()
        .post_json(&h.url(), &[], TOOLS_LIST)
        .await;
    assert_eq!(response.header("x-accel-buffering"), Some("no"));
    assert_eq!(
        response.text(),
        "id: 0a1b\ndata: \n\nretry: 1500\n\n: keep-alive\n\nevent: message\nid: 0a1c\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}\n\n"
    );
}

#[tokio::test]
async fn get_stream_carries_session_and_last_event_id_upstream() {
    let upstream = RecordingUpstream::with_responder(|r| {
        if r.method == Method::GET {
            Reply::sse(&["id: 9\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"])
        } else {
            Reply::status(500)
        }
    })
    .await;
    let h = Harness::start(upstream, "").await;
    let response = collect(
        TestClient::default()
            .send(
                Method::GET,
                &h.url(),
                &[
                    ("accept", "text/event-stream"),
                    ("mcp-session-id", "abc"),
                    ("last-event-id", "8"),
                ],
                Bytes::new(),
            )
            .await,
    )
    .await;
    assert_eq!(response.status, 200);
    assert!(response.text().contains("notifications/tools/list_changed"));
    let recorded = &h.upstream.requests()[0];
    assert_eq!(recorded.method, Method::GET);
    assert_eq!(recorded.header("mcp-session-id"), Some("abc"));
    assert_eq!(recorded.header("last-event-id"), Some("8"));
    assert!(recorded.body.is_empty());
}

#[tokio::test]
async fn delete_and_upstream_error_statuses_are_relayed_faithfully() {
    let upstream = RecordingUpstream::with_responder(|r| match r.method {
        Method::DELETE => Reply::status(200),
        _ => Reply::json(404, json!({"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}})),
    })
    .await;
    let h = Harness::start(upstream, "").await;
    let client = TestClient::default();
    let deleted = collect(
        client
            .send(
                Method::DELETE,
                &h.url(),
                &[("mcp-session-id", "abc")],
                Bytes::new(),
            )
            .await,
    )
    .await;
    assert_eq!(deleted.status, 200);
    let missing = client
        .post_json(&h.url(), &[("mcp-session-id", "abc")], TOOLS_LIST)
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["code"], -32001);
    assert_eq!(h.upstream.requests()[0].method, Method::DELETE);
}

#[tokio::test]
async fn notifications_get_the_upstreams_202() {
    let upstream = RecordingUpstream::start().await;
    let h = Harness::start(upstream, "").await;
    let response = TestClient::default()
        .post_json(
            &h.url(),
            &[],
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
    assert_eq!(response.status, 202);
    assert!(response.body.is_empty());
    assert_eq!(h.upstream.requests().len(), 1);
}

#[tokio::test]
async fn unreachable_upstream_gives_a_json_rpc_error_and_the_gateway_stays_up() {
    let dead_port = countersign_testkit::free_port();
    let upstream = RecordingUpstream::start().await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 'off'\naudit: {{ path: 'off' }}\nupstreams:\n  - name: dead\n    path: /dead\n    url: http://127.0.0.1:{dead_port}/mcp\n  - name: live\n    path: /mcp\n    url: {}\n",
        upstream.url()
    );
    let h = Harness::from_yaml(upstream, &yaml).await;
    let client = TestClient::default();
    let dead = client
        .post_json(&format!("http://{}/dead", h.addr()), &[], TOOLS_LIST)
        .await;
    assert_eq!(dead.status, 502);
    assert_eq!(dead.json()["id"], 1);
    assert_eq!(dead.json()["error"]["code"], -32603);
    assert!(
        dead.json()["error"]["message"]
            .as_str()
            .expect("message")
            .contains("dead")
    );
    let live = client.post_json(&h.url(), &[], TOOLS_LIST).await;
    assert_eq!(live.status, 200);
}

#[tokio::test]
async fn slow_upstream_gives_504_with_the_request_id() {
    let upstream = RecordingUpstream::with_responder(|_| {
        Reply::Delayed(Duration::from_secs(30), Box::new(Reply::status(200)))
    })
    .await;
    let h = Harness::start(upstream, "    response_timeout: 200ms\n").await;
    let response = TestClient::default()
        .post_json(&h.url(), &[], TOOLS_LIST)
        .await;
    assert_eq!(response.status, 504);
    assert_eq!(response.json()["id"], 1);
}

#[tokio::test]
async fn oversized_upstream_response_is_refused_with_502() {
    let upstream = RecordingUpstream::with_responder(|_| {
        Reply::json(
            200,
            json!({"jsonrpc":"2.0","id":1,"result":{"blob":"x".repeat(4096)}}),
        )
    })
    .await;
    let h = Harness::start(upstream, "    max_response_bytes: 1KiB\n").await;
    let response = TestClient::default()
        .post_json(&h.url(), &[], TOOLS_LIST)
        .await;
    assert_eq!(response.status, 502);
    assert!(
        response.json()["error"]["message"]
            .as_str()
            .expect("message")
            .contains("larger than")
    );
}

#[tokio::test]
async fn oversized_upstream_event_ends_the_stream_with_an_error_for_the_request() {
    let big = format!(
        "event: message\ndata: {}\n\n",
        json!({"jsonrpc":"2.0","id":1,"result":{"blob":"x".repeat(4096)}})
    );
    let upstream = RecordingUpstream::with_responder(move |_| Reply::sse(&[big.as_str()])).await;
    let h = Harness::start(upstream, "    max_response_bytes: 1KiB\n").await;
    let response = TestClient::default()
        .post_json(&h.url(), &[], TOOLS_LIST)
        .await;
    assert_eq!(response.status, 200, "the stream had already begun");
    let data: Vec<serde_json::Value> = response
        .text()
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).expect("JSON"))
        .collect();
    assert_eq!(
        data.len(),
        1,
        "one answer, not silence: {}",
        response.text()
    );
    assert_eq!(data[0]["id"], 1);
    let message = data[0]["error"]["message"].as_str().expect("an error");
    assert!(
        message.contains("upstream `store`") && message.contains("larger than 1024 bytes"),
        "{message}"
    );
}

#[tokio::test]
async fn metrics_are_exposed_under_their_documented_names() {
    let upstream = RecordingUpstream::with_responder(|_| {
        Reply::json(200, json!({"jsonrpc":"2.0","id":1,"result":{"tools":[]}}))
    })
    .await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\naudit: {{ path: 'off' }}\npolicy: {}\nupstreams:\n  - name: store\n    url: {}\n",
        common::policy_path("allow-all.yaml").display(),
        upstream.url()
    );
    let h = Harness::from_yaml(upstream, &yaml).await;
    let listed = TestClient::default()
        .post_json(&h.url(), &[], TOOLS_LIST)
        .await;
    assert_eq!(listed.status, 200);

    let admin = h.gateway.admin_addr.expect("admin listener");
    let scraped = collect(
        TestClient::default()
            .send(
                Method::GET,
                &format!("http://{admin}/metrics"),
                &[],
                Bytes::new(),
            )
            .await,
    )
    .await;
    let text = scraped.text();
    assert!(
        text.lines()
            .any(|line| line.starts_with("countersign_requests_total{")
                && line.contains("method=\"tools/list\"")
                && line.contains("outcome=\"forwarded\"")),
        "{text}"
    );
    assert!(
        text.contains("countersign_upstream_response_seconds"),
        "{text}"
    );
}
