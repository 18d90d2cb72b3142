//! The gateway is a security boundary: hostile or malformed requests are refused with a clear
//! error, and the upstream receives nothing. Every test asserts on what the upstream recorded.

mod common;

use std::time::Duration;

use common::{Harness, TOOLS_LIST};
use countersign_testkit::{RawResponse, RecordingUpstream, TestClient, raw_post, raw_request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);

async fn harness() -> Harness {
    Harness::start(RecordingUpstream::start().await, "").await
}

async fn send(h: &Harness, request: &[u8]) -> Option<RawResponse> {
    raw_request(h.addr(), request, WAIT).await
}

/// Sends a raw request and asserts the refusal status and that nothing reached the upstream.
async fn assert_refused(h: &Harness, request: &[u8], status: u16) -> RawResponse {
    let response = send(h, request).await.expect("the gateway answers");
    assert_eq!(response.status, status, "body: {}", response.body_text());
    assert!(
        h.upstream.requests().is_empty(),
        "the upstream must record nothing"
    );
    response
}

async fn assert_body_refused(body: &[u8], status: u16, code: i64) {
    let h = harness().await;
    let response = assert_refused(&h, &raw_post(h.addr(), body, ""), status).await;
    assert_eq!(
        response.json()["error"]["code"],
        code,
        "body: {}",
        response.body_text()
    );
}

#[tokio::test]
async fn duplicate_keys_are_refused_even_when_escaped() {
    assert_body_refused(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","name":"delete"}}"#, 400, -32700).await;
    assert_body_refused(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","n\u0061me":"delete"}}"#, 400, -32700).await;
    assert_body_refused(
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#,
        400,
        -32700,
    )
    .await;
}

#[tokio::test]
async fn case_and_fold_colliding_envelope_keys_are_refused() {
    assert_body_refused(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","Name":"delete"}}"#, 400, -32600).await;
    assert_body_refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"read\",\"na\u{212A}e\":1,\"nake\":2}}".as_bytes(), 400, -32600).await;
    assert_body_refused(
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}"#,
        400,
        -32600,
    )
    .await;
}

#[tokio::test]
async fn malformed_json_is_refused() {
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(TOOLS_LIST.as_bytes());
    assert_body_refused(&bom, 400, -32700).await;
    assert_body_refused(format!("{TOOLS_LIST} {{}}").as_bytes(), 400, -32700).await;
    assert_body_refused(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\xC0\xAF\"}}",
        400,
        -32700,
    )
    .await;
    assert_body_refused(
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"\ud800"}}"#,
        400,
        -32700,
    )
    .await;
    assert_body_refused(
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":NaN}}"#,
        400,
        -32700,
    )
    .await;
    assert_body_refused(
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1e400}}"#,
        400,
        -32700,
    )
    .await;
}

#[tokio::test]
async fn a_deep_nesting_bomb_is_refused_cheaply() {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":{}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_body_refused(body.as_bytes(), 400, -32700).await;
}

#[tokio::test]
async fn invalid_envelopes_are_refused() {
    for body in [
        &br#"42"#[..],
        br#"null"#,
        br#"[]"#,
        br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        br#"{"id":1,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","extra":true}"#,
    ] {
        let h = harness().await;
        let response = assert_refused(&h, &raw_post(h.addr(), body, ""), 400).await;
        assert_eq!(
            response.json()["error"]["code"],
            -32600,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[tokio::test]
async fn unknown_methods_are_refused_with_method_not_found() {
    for method in ["Tools/Call", "tools//call", "tools/call/", "x-vendor/exec"] {
        let h = harness().await;
        let body = format!(r#"{{"jsonrpc":"2.0","id":3,"method":"{method}","params":{{}}}}"#);
        let response = assert_refused(&h, &raw_post(h.addr(), body.as_bytes(), ""), 200).await;
        assert_eq!(response.json()["error"]["code"], -32601);
        assert_eq!(response.json()["id"], 3);
    }
}

#[tokio::test]
async fn malformed_method_names_are_invalid_requests() {
    for method in ["tools/call ", " tools/call", "tools/call\\u0000", ""] {
        let h = harness().await;
        let body = format!(r#"{{"jsonrpc":"2.0","id":3,"method":"{method}","params":{{}}}}"#);
        let response = assert_refused(&h, &raw_post(h.addr(), body.as_bytes(), ""), 400).await;
        assert_eq!(response.json()["error"]["code"], -32600, "{method:?}");
    }
}

#[tokio::test]
async fn batches_are_refused_on_revisions_without_them() {
    let h = harness().await;
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]"#;
    let response = assert_refused(
        &h,
        &raw_post(h.addr(), batch, "MCP-Protocol-Version: 2025-06-18\r\n"),
        400,
    )
    .await;
    assert_eq!(response.json()["error"]["code"], -32600);
}

#[tokio::test]
async fn batches_on_2025_03_26_are_parsed_element_by_element_and_forwarded() {
    let h = harness().await;
    let batch = br#"[ {"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","method":"notifications/initialized"} ]"#;
    send(&h, &raw_post(h.addr(), batch, ""))
        .await
        .expect("answer");
    let recorded = h.upstream.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        std::str::from_utf8(&recorded[0].body).expect("utf-8"),
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#
    );
    let bad_element = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"evil/exec"}]"#;
    let h = harness().await;
    assert_refused(&h, &raw_post(h.addr(), bad_element, ""), 400).await;
}

#[tokio::test]
async fn content_type_and_encoding_must_be_plain_json() {
    for (content_type, status) in [
        ("text/plain", 415),
        ("application/json; charset=utf-16", 415),
        ("application/x-www-form-urlencoded", 415),
    ] {
        let h = harness().await;
        let body = TOOLS_LIST.as_bytes();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOOLS_LIST}",
            h.addr(),
            body.len()
        );
        assert_refused(&h, request.as_bytes(), status).await;
    }
    for encoding in ["gzip", "br", "identity, gzip"] {
        let h = harness().await;
        assert_refused(
            &h,
            &raw_post(
                h.addr(),
                TOOLS_LIST.as_bytes(),
                &format!("Content-Encoding: {encoding}\r\n"),
            ),
            415,
        )
        .await;
    }
}

#[tokio::test]
async fn content_type_is_matched_case_insensitively() {
    let h = harness().await;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: Application/JSON; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOOLS_LIST}",
        h.addr(),
        TOOLS_LIST.len()
    );
    let response = send(&h, request.as_bytes()).await.expect("answer");
    assert_eq!(response.status, 200);
    assert_eq!(h.upstream.requests().len(), 1);
}

#[tokio::test]
async fn oversized_bodies_are_refused_before_they_are_read() {
    let h = Harness::start(
        RecordingUpstream::start().await,
        "limits:\n  max_body_bytes: 1KiB\n",
    )
    .await;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n",
        h.addr()
    );
    let response = assert_refused(&h, request.as_bytes(), 413).await;
    assert_eq!(response.header("connection"), Some("close"));
}

#[tokio::test]
async fn request_smuggling_shapes_are_refused() {
    let h = harness().await;
    let addr = h.addr();
    let cases: Vec<(String, u16)> = vec![
        // CL + TE
        (
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            ),
            411,
        ),
        // TE alone: refused so CL+TE can never hide behind it
        (
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            ),
            411,
        ),
        // duplicate equal Content-Length
        (
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{{}}"
            ),
            400,
        ),
        // duplicate Host
        (
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nHost: other\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            ),
            400,
        ),
        // missing Host
        (
            "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                .to_owned(),
            400,
        ),
        // absolute-form target
        (
            format!(
                "POST http://evil.example/mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            ),
            400,
        ),
        // underscore header name
        (
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nMcp_Session_Id: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            ),
            400,
        ),
        // upgrades
        (
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            ),
            400,
        ),
        (
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n"
            ),
            400,
        ),
        // lowercase method is another method
        (
            format!(
                "post /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            ),
            405,
        ),
        (
            format!("PUT /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"),
            405,
        ),
        // duplicate MCP singleton header
        (
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nMcp-Session-Id: a\r\nMcp-Session-Id: b\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            ),
            400,
        ),
    ];
    for (request, status) in cases {
        let response = send(&h, request.as_bytes()).await;
        let status_seen = response.as_ref().map(|r| r.status);
        assert!(
            status_seen == Some(status) || (status == 400 && status_seen.is_none()),
            "expected {status} (or a closed connection) for {request:?}, got {status_seen:?}"
        );
        assert!(
            h.upstream.requests().is_empty(),
            "nothing may reach the upstream for {request:?}"
        );
    }
}

#[tokio::test]
async fn only_configured_paths_are_served() {
    let h = harness().await;
    for path in [
        "//mcp",
        "/mcp/",
        "/MCP",
        "/%6dcp",
        "/mcp%2f",
        "/public/../mcp",
        "/mcp;x=1",
        "/./mcp",
        "/admin",
        "/messages",
        "/sse/",
        "/SSE",
        "/sse/messages/",
        "/sse/%6dessages",
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOOLS_LIST}",
            h.addr(),
            TOOLS_LIST.len()
        );
        assert_refused(&h, request.as_bytes(), 404).await;
    }
    let with_query = format!(
        "POST /mcp?sessionId=x HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOOLS_LIST}",
        h.addr(),
        TOOLS_LIST.len()
    );
    assert_refused(&h, with_query.as_bytes(), 400).await;
    // The legacy HTTP+SSE endpoint beside `/mcp` is served, for GET only.
    let legacy = format!(
        "POST /sse HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOOLS_LIST}",
        h.addr(),
        TOOLS_LIST.len()
    );
    let refused = assert_refused(&h, legacy.as_bytes(), 405).await;
    assert_eq!(refused.header("allow"), Some("GET"));
}

#[tokio::test]
async fn foreign_origins_get_403_and_foreign_hosts_421() {
    let h = harness().await;
    for origin in [
        "http://evil.example.com",
        "null",
        "http://localhost.evil.example",
    ] {
        assert_refused(
            &h,
            &raw_post(
                h.addr(),
                TOOLS_LIST.as_bytes(),
                &format!("Origin: {origin}\r\n"),
            ),
            403,
        )
        .await;
    }
    let rebinding = format!(
        "POST /mcp HTTP/1.1\r\nHost: evil.example.com\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOOLS_LIST}",
        TOOLS_LIST.len()
    );
    assert_refused(&h, rebinding.as_bytes(), 421).await;

    let allowed = raw_post(
        h.addr(),
        TOOLS_LIST.as_bytes(),
        &format!("Origin: http://localhost:{}\r\n", h.addr().port()),
    );
    assert_eq!(send(&h, &allowed).await.expect("answer").status, 200);
    assert_eq!(h.upstream.requests().len(), 1);
}

#[tokio::test]
async fn stateless_requests_need_headers_that_match_the_body() {
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"delete_repo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let cases = [
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nMcp-Name: delete_repo\r\n",
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: read_file\r\n",
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n",
        "MCP-Protocol-Version: 2025-11-25\r\nMcp-Method: tools/call\r\nMcp-Name: delete_repo\r\n",
        "Mcp-Method: tools/call\r\nMcp-Name: delete_repo\r\n",
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: =?base64?cmVhZF9maWxl?=\r\n",
    ];
    for headers in cases {
        let h = harness().await;
        let response = assert_refused(&h, &raw_post(h.addr(), call.as_bytes(), headers), 400).await;
        assert_eq!(
            response.json()["error"]["code"],
            -32020,
            "{headers:?}: {}",
            response.body_text()
        );
    }
}

#[tokio::test]
async fn stateless_requests_are_forwarded_with_headers_regenerated_from_the_body() {
    let h = harness().await;
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"delete_repo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let headers = "MCP-Protocol-Version: 2026-07-28\r\nmcp-method: tools/call\r\nMcp-Name: =?base64?ZGVsZXRlX3JlcG8=?=\r\n";
    let response = send(&h, &raw_post(h.addr(), call.as_bytes(), headers))
        .await
        .expect("answer");
    assert_eq!(response.status, 200, "{}", response.body_text());
    let requests = h.upstream.requests();
    // The gateway lists the tools itself first (the tool is not pinned yet), then forwards.
    let recorded = requests
        .iter()
        .find(|r| r.json()["method"] == "tools/call")
        .expect("the call was forwarded");
    assert_eq!(recorded.header("mcp-method"), Some("tools/call"));
    assert_eq!(recorded.header("mcp-name"), Some("delete_repo"));
    assert_eq!(recorded.header("mcp-protocol-version"), Some("2026-07-28"));
}

#[tokio::test]
async fn slowloris_headers_are_cut_at_the_header_read_timeout() {
    let h = Harness::start(
        RecordingUpstream::start().await,
        "limits:\n  header_read_timeout: 300ms\n",
    )
    .await;
    let mut stream = tokio::net::TcpStream::connect(h.addr())
        .await
        .expect("connect");
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let mut buffer = Vec::new();
    // The gateway must close the connection on its own; the generous bound only keeps a broken
    // build from hanging the suite.
    let closed = tokio::time::timeout(WAIT, stream.read_to_end(&mut buffer)).await;
    assert!(
        closed.is_ok(),
        "the gateway never closed a connection whose headers stalled"
    );
    assert!(h.upstream.requests().is_empty());
}

#[tokio::test]
async fn a_drip_fed_body_is_cut_at_the_body_deadline() {
    let h = Harness::start(
        RecordingUpstream::start().await,
        "limits:\n  body_timeout: 300ms\n",
    )
    .await;
    let mut stream = tokio::net::TcpStream::connect(h.addr())
        .await
        .expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{",
        h.addr()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut buffer = Vec::new();
    let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut buffer)).await;
    let text = String::from_utf8_lossy(&buffer);
    assert!(text.starts_with("HTTP/1.1 408"), "got {text:?}");
    assert!(h.upstream.requests().is_empty());
}

#[tokio::test]
async fn too_many_headers_get_431() {
    let h = Harness::start(
        RecordingUpstream::start().await,
        "limits:\n  max_headers: 20\n",
    )
    .await;
    let extra: String = (0..30).map(|i| format!("X-Filler-{i}: y\r\n")).collect();
    let response = send(&h, &raw_post(h.addr(), TOOLS_LIST.as_bytes(), &extra))
        .await
        .expect("answer");
    assert_eq!(response.status, 431);
    assert!(h.upstream.requests().is_empty());
}

#[tokio::test]
async fn the_gateway_keeps_serving_after_refusals() {
    let h = harness().await;
    for _ in 0..20 {
        send(&h, b"GARBAGE\r\n\r\n").await;
    }
    let ok = TestClient::default()
        .post_json(&h.url(), &[], TOOLS_LIST)
        .await;
    assert_eq!(ok.status, 200);
}
