//! Capacity limits of a running gateway (issue 9): open connections, requests in flight per
//! client, quiet streams, the in-flight body budget and the pinned catalog's size. Each test
//! fills a limit, checks the refusal and what the upstream received, then checks that the
//! gateway serves normally again once the load is gone.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::Harness;
use countersign_testkit::mcp::{
    ScriptedServer, answer_question, form_elicitation, hold_on_stream, open_session, tool_call,
    within,
};
use countersign_testkit::{
    RawResponse, RecordedRequest, RecordingUpstream, Reply, TestClient, collect, parse_head,
    raw_post, raw_request,
};
use http::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

/// A gateway with the admin listener on (the tests read `/metrics`), the audit trail off and the
/// YAML lines `settings`, in front of `upstream` as `store`.
async fn gateway(upstream: RecordingUpstream, settings: &str) -> Harness {
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\naudit: {{ path: 'off' }}\n{settings}upstreams:\n  - name: store\n    url: {}\n",
        upstream.url()
    );
    Harness::from_yaml(upstream, &yaml).await
}

fn allow_all() -> String {
    format!(
        "policy: {}\n",
        common::policy_path("allow-all.yaml").display()
    )
}

/// The value of the metric line that starts with `series` (name and labels, as exposed).
async fn metric(h: &Harness, series: &str) -> Option<f64> {
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
    scraped.text().lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// Waits until the metric `series` reads `value`: the gateway counts what it did, so a test can
/// wait for it instead of guessing how long it takes.
async fn metric_reaches(h: &Harness, series: &str, value: f64) {
    within(&format!("{series} to reach {value}"), async {
        while metric(h, series).await != Some(value) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Reads one response from a kept-alive connection (the gateway frames JSON answers with
/// `Content-Length`).
async fn read_response(stream: &mut TcpStream) -> RawResponse {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((mut head, start)) = parse_head(&buffer) {
            let length: usize = head
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .expect("a Content-Length framed answer");
            if buffer.len() >= start + length {
                head.body = buffer[start..start + length].to_vec();
                return head;
            }
        }
        let n = stream.read(&mut chunk).await.expect("the connection reads");
        assert!(n > 0, "the gateway closed the connection without answering");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A POST of `body` that keeps its connection open afterwards.
fn keep_alive_post(h: &Harness, body: &str) -> Vec<u8> {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        h.addr(),
        body.len()
    )
    .into_bytes()
}

/// Opens a connection and has one request answered on it, so the gateway has accepted it; the
/// connection then stays open and idle.
async fn idle_connection(h: &Harness) -> TcpStream {
    let mut stream = TcpStream::connect(h.addr()).await.expect("connect");
    stream
        .write_all(&keep_alive_post(h, PING))
        .await
        .expect("write");
    let answer = within("the ping's answer", read_response(&mut stream)).await;
    assert_eq!(answer.status, 200, "{}", answer.body_text());
    stream
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_closes_and_are_then_served() {
    let h = gateway(
        RecordingUpstream::start().await,
        // Idle keep-alive connections would otherwise be closed by the header timeout.
        &format!(
            "{}connections: {{max_open: 2}}\nlimits: {{header_read_timeout: 60s}}\n",
            allow_all()
        ),
    )
    .await;
    let first = idle_connection(&h).await;
    let _second = idle_connection(&h).await;
    metric_reaches(&h, "countersign_open_connections", 2.0).await;
    metric_reaches(
        &h,
        "countersign_limit_hits_total{limit=\"connections\"}",
        1.0,
    )
    .await;

    // The kernel completes the handshake; the gateway does not accept, so nothing is read.
    let mut third = TcpStream::connect(h.addr()).await.expect("connect");
    third
        .write_all(&keep_alive_post(&h, PING))
        .await
        .expect("write");
    let waited = tokio::time::timeout(Duration::from_millis(300), read_response(&mut third)).await;
    assert!(
        waited.is_err(),
        "a connection past the cap must not be served while the cap is held"
    );
    assert_eq!(h.upstream.requests().len(), 2);

    drop(first);
    let answer = within("the waiting connection's answer", read_response(&mut third)).await;
    assert_eq!(answer.status, 200, "{}", answer.body_text());
    assert_eq!(
        h.upstream.requests().len(),
        3,
        "served once a slot was free"
    );
    assert_eq!(metric(&h, "countersign_open_connections").await, Some(2.0));
}

/// An upstream that answers `tools/call`s of `hold` with an event stream the test ends by
/// dropping its feed, and everything else as the default upstream does.
fn holding_upstream(
    feeds: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>,
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync {
    move |request| {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        if body["method"] == "tools/call" && body["params"]["name"] == "hold" {
            let (reply, feed) = Reply::sse_stream();
            feeds.lock().expect("feeds lock").push(feed);
            return reply;
        }
        match body.get("id") {
            Some(id) => Reply::json(200, json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            None => Reply::status(202),
        }
    }
}

async fn call(h: &Harness, id: u64, tool: &str) -> http::Response<hyper::body::Incoming> {
    within(
        "the gateway's answer",
        TestClient::default().send(
            Method::POST,
            &h.url(),
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
            ],
            tool_call(id, tool, json!({})).to_string(),
        ),
    )
    .await
}

#[tokio::test]
async fn a_client_past_its_concurrent_request_cap_gets_429_and_the_upstream_nothing() {
    let feeds = Arc::new(Mutex::new(Vec::new()));
    let upstream = RecordingUpstream::with_responder(holding_upstream(feeds.clone())).await;
    let h = gateway(
        upstream,
        &format!(
            "{}connections: {{max_requests_per_client: 2}}\n",
            allow_all()
        ),
    )
    .await;
    let first = call(&h, 1, "hold").await;
    let _second = call(&h, 2, "hold").await;
    assert_eq!(
        h.upstream.tool_calls().len(),
        2,
        "both streams are open upstream"
    );

    let refused = within("the refusal", collect(call(&h, 3, "hold").await)).await;

    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    let error = &refused.json()["error"];
    assert_eq!(error["code"], -32000);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("connections.max_requests_per_client")),
        "the error names the limit: {error}"
    );
    assert_eq!(
        h.upstream.tool_calls().len(),
        2,
        "nothing more reached the upstream"
    );
    assert_eq!(
        metric(
            &h,
            "countersign_limit_hits_total{limit=\"requests_per_client\"}"
        )
        .await,
        Some(1.0)
    );

    // One stream ends: its slot comes back.
    drop(feeds.lock().expect("feeds lock").remove(0));
    within("the first stream's end", collect(first)).await;
    let after = within("the next call", collect(call(&h, 4, "quick").await)).await;
    assert_eq!(after.status, 200, "{}", after.text());
    assert_eq!(h.upstream.tool_calls().len(), 3);
}

/// An upstream whose GET stream sends one event and then nothing, never closing on its own.
fn quiet_stream_upstream(
    feeds: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>,
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync {
    move |request| {
        if request.method == Method::GET {
            let (reply, feed) = Reply::sse_stream();
            feed.try_send(Bytes::from_static(b"id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hello\"}}\n\n"))
                .expect("a fresh stream has room");
            feeds.lock().expect("feeds lock").push(feed);
            return reply;
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        Reply::json(
            200,
            json!({"jsonrpc": "2.0", "id": body["id"], "result": {}}),
        )
    }
}

async fn open_get_stream(h: &Harness) -> http::Response<hyper::body::Incoming> {
    let response = within(
        "the GET stream's headers",
        TestClient::default().send(
            Method::GET,
            &h.url(),
            &[("accept", "text/event-stream")],
            Bytes::new(),
        ),
    )
    .await;
    assert_eq!(response.status(), 200);
    response
}

#[tokio::test]
async fn an_upstream_stream_that_stays_quiet_is_ended_and_the_gateway_serves_on() {
    let feeds = Arc::new(Mutex::new(Vec::new()));
    let upstream = RecordingUpstream::with_responder(quiet_stream_upstream(feeds.clone())).await;
    let h = gateway(
        upstream,
        &format!("{}connections: {{sse_idle_timeout: 300ms}}\n", allow_all()),
    )
    .await;

    let stream = open_get_stream(&h).await;
    let ended = within("the quiet stream's end", collect(stream)).await;

    let text = ended.text();
    assert!(
        text.contains("\"data\":\"hello\""),
        "the event before the quiet came through: {text}"
    );
    let feed = feeds.lock().expect("feeds lock").remove(0);
    within("the upstream connection to close", feed.closed()).await;
    metric_reaches(&h, "countersign_open_streams{upstream=\"store\"}", 0.0).await;
    assert_eq!(
        metric(
            &h,
            "countersign_limit_hits_total{limit=\"sse_idle_timeout\"}"
        )
        .await,
        Some(1.0)
    );
    let after = h.post_ok(&[], PING).await;
    assert_eq!(after["result"], json!({}));
}

#[tokio::test]
async fn a_quiet_stream_gets_keep_alive_comments_while_it_lasts() {
    let feeds = Arc::new(Mutex::new(Vec::new()));
    let upstream = RecordingUpstream::with_responder(quiet_stream_upstream(feeds.clone())).await;
    let h = gateway(
        upstream,
        &format!("{}connections: {{sse_keep_alive: 100ms}}\n", allow_all()),
    )
    .await;

    let mut body = open_get_stream(&h).await.into_body();
    let mut seen = String::new();
    within("a keep-alive comment", async {
        while !seen.contains(": keep-alive\n\n") {
            let frame = http_body_util::BodyExt::frame(&mut body)
                .await
                .expect("the stream stays open")
                .expect("the stream has no error");
            if let Ok(data) = frame.into_data() {
                seen.push_str(std::str::from_utf8(&data).expect("SSE is UTF-8"));
            }
        }
    })
    .await;
    assert!(
        seen.starts_with("id: 1\n"),
        "the upstream's event came first: {seen}"
    );
    assert!(
        !feeds.lock().expect("feeds lock")[0].is_closed(),
        "the stream is still up"
    );
}

#[tokio::test]
async fn a_question_waiting_for_the_person_is_not_cut_by_the_stream_idle_timeout() {
    let store = ScriptedServer::new(vec![json!({"name": "delete_order",
        "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": true}})]);
    let h = gateway(
        store.start().await,
        "connections: {sse_idle_timeout: 200ms}\nelicitation_timeout: 30s\n",
    )
    .await;
    let session = open_session(&h.url(), form_elicitation()).await;
    let (question, mut stream) = hold_on_stream(
        &h.url(),
        &session,
        &tool_call(7, "delete_order", json!({"id": "o-1"})),
    )
    .await;

    // The person takes several idle timeouts to decide; the gateway's own stream waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered = answer_question(
        &h.url(),
        &session,
        &question["id"],
        json!({"action": "accept", "content": {"approve": true}}),
    )
    .await;
    assert_eq!(answered.status, 202);

    let result = within("the approved call's result", stream.next_message()).await;
    assert_eq!(result["id"], 7, "{result}");
    assert_eq!(
        result["result"]["content"][0]["text"], "ran delete_order",
        "{result}"
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        [("delete_order".to_owned(), json!({"id": "o-1"}))]
    );
}

/// A `ping` padded to exactly `length` bytes.
fn ping_of(length: usize) -> String {
    let bare =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": ""}}).to_string();
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping",
           "params": {"pad": "x".repeat(length - bare.len())}})
    .to_string()
}

#[tokio::test]
async fn slow_uploads_that_fill_the_body_budget_make_the_next_request_wait_with_503() {
    let h = gateway(
        RecordingUpstream::start().await,
        &format!(
            "{}limits: {{max_body_bytes: 1000, max_in_flight_body_bytes: 2000}}\n",
            allow_all()
        ),
    )
    .await;
    // Two clients send all but the last bytes of the largest body allowed.
    let body = ping_of(1000);
    let request = keep_alive_post(&h, &body);
    let split = request.len() - 10;
    let mut uploads = Vec::new();
    for _ in 0..2 {
        let mut upload = TcpStream::connect(h.addr()).await.expect("connect");
        upload.write_all(&request[..split]).await.expect("write");
        uploads.push(upload);
    }
    metric_reaches(&h, "countersign_in_flight_body_bytes", 1980.0).await;

    let refused = raw_request(
        h.addr(),
        &raw_post(h.addr(), PING.as_bytes(), ""),
        Duration::from_secs(10),
    )
    .await
    .expect("the gateway answers");

    assert_eq!(
        refused.status,
        503,
        "not 413: the body was fine: {}",
        refused.body_text()
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    let error = &refused.json()["error"];
    assert_eq!(error["code"], -32000);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("in-flight body budget")),
        "{error}"
    );
    assert!(
        h.upstream.requests().is_empty(),
        "nothing reached the upstream"
    );
    assert_eq!(
        metric(
            &h,
            "countersign_limit_hits_total{limit=\"in_flight_body_bytes\"}"
        )
        .await,
        Some(1.0)
    );

    // The uploads finish and are served; their bytes go back to the budget.
    for upload in &mut uploads {
        upload.write_all(&request[split..]).await.expect("write");
        let answer = within("the upload's answer", read_response(upload)).await;
        assert_eq!(answer.status, 200, "{}", answer.body_text());
    }
    metric_reaches(&h, "countersign_in_flight_body_bytes", 0.0).await;
    h.post_ok(&[], PING).await;
    assert_eq!(
        h.upstream.requests().len(),
        3,
        "the two uploads and the call after them"
    );
}

#[tokio::test]
async fn tools_past_the_catalog_bound_are_not_pinned_and_are_held_as_unknown() {
    let read_only = |name: &str| {
        json!({"name": name, "inputSchema": {"type": "object"},
                                        "annotations": {"readOnlyHint": true}})
    };
    let store = ScriptedServer::new(vec![
        read_only("list_a"),
        read_only("list_b"),
        read_only("list_c"),
    ]);
    // The default policy: reads run, unknown calls are held.
    let h = gateway(store.start().await, "limits: {max_tools_per_upstream: 2}\n").await;

    let pinned = h.post_ok(&[], &tool_call(1, "list_a", json!({}))).await;
    assert_eq!(
        pinned["result"]["content"][0]["text"], "ran list_a",
        "{pinned}"
    );
    let unpinned = h.post_ok(&[], &tool_call(2, "list_c", json!({}))).await;

    let verdict = &unpinned["result"]["_meta"]["countersign/confirmation"];
    assert_eq!(verdict["status"], "requires_confirmation", "{unpinned}");
    assert_eq!(
        verdict["risk"], "unknown",
        "an unpinned tool is never trusted by its annotations"
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        [("list_a".to_owned(), json!({}))],
        "only the pinned read ran"
    );
    assert_eq!(
        metric(&h, "countersign_catalog_tools{upstream=\"store\"}").await,
        Some(2.0)
    );
    assert!(
        metric(
            &h,
            "countersign_catalog_pins_refused_total{upstream=\"store\"}"
        )
        .await
        .is_some_and(|refused| refused >= 1.0)
    );
}
