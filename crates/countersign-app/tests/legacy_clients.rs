//! Clients of the 2024-11-05 HTTP+SSE transport (`GET /sse`, then every message a POST to the
//! endpoint it announces) get the same gate as Streamable HTTP clients: their messages go down
//! the same layers, their answers (the gateway's held results included) arrive on their stream.
//! Every test judges by what the fake upstream actually recorded.

mod common;

use std::time::Duration;

use common::Harness;
use countersign_testkit::mcp::{ScriptedServer, held_token, initialize, tool_call, within};
use countersign_testkit::{
    Collected, RecordedRequest, RecordingUpstream, Reply, TestClient, raw_request, sse_data,
    take_sse_event,
};
use http::Method;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};

fn tools() -> Vec<Value> {
    vec![
        json!({"name": "list_orders", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
        json!({"name": "delete_order", "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
               "annotations": {"destructiveHint": true}}),
    ]
}

/// The gateway (default policy, the top-level YAML lines `settings`) in front of a scripted
/// store; the store's GET stream is answered by `on_get` when given.
async fn start_with(settings: &str, on_get: Option<fn() -> Reply>) -> Harness {
    let server = ScriptedServer::new(tools());
    let upstream = RecordingUpstream::with_responder(move |request: &RecordedRequest| {
        match (request.method == Method::GET, on_get) {
            (true, Some(on_get)) => on_get(),
            (true, None) => Reply::status(405),
            (false, _) => server.answer(request),
        }
    })
    .await;
    Harness::start_with(upstream, settings, "").await
}

async fn start() -> Harness {
    start_with("", None).await
}

/// A store that answers `ping` as some servers answer what they do not serve: plain text.
async fn start_with_plain_text_ping() -> Harness {
    let server = ScriptedServer::new(tools()).with_handler(|message| {
        (message["method"] == "ping").then(|| Reply::Full {
            status: http::StatusCode::METHOD_NOT_ALLOWED,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: bytes::Bytes::from_static(b"Method Not Allowed"),
        })
    });
    Harness::start_with(server.start().await, "", "").await
}

/// A legacy client's open stream.
struct LegacyStream {
    body: Incoming,
    pending: String,
    /// The messages path and query the `endpoint` event announced.
    endpoint: String,
}

impl LegacyStream {
    /// `GET /sse` with `headers`; reads the `endpoint` event.
    async fn open(h: &Harness, headers: &[(&str, &str)]) -> Self {
        let response = within(
            "the legacy stream",
            TestClient::default().send(
                Method::GET,
                &format!("http://{}/sse", h.addr()),
                headers,
                "",
            ),
        )
        .await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut stream = Self {
            body: response.into_body(),
            pending: String::new(),
            endpoint: String::new(),
        };
        let (event, data) = stream.next_event().await;
        assert_eq!(event.as_deref(), Some("endpoint"), "{data}");
        stream.endpoint = data;
        stream
    }

    /// The next event's type and data, skipping comments (keep-alives).
    async fn next_event(&mut self) -> (Option<String>, String) {
        loop {
            if let Some(event) = take_sse_event(&mut self.pending) {
                let Some(data) = sse_data(&event) else {
                    continue;
                };
                let kind = event
                    .lines()
                    .find_map(|l| l.strip_prefix("event:"))
                    .map(|k| k.trim().to_owned());
                return (kind, data);
            }
            let frame = within("an event on the legacy stream", self.body.frame())
                .await
                .expect("the legacy stream is open")
                .expect("the legacy stream has no error");
            if let Ok(data) = frame.into_data() {
                self.pending
                    .push_str(std::str::from_utf8(&data).expect("SSE is UTF-8"));
            }
        }
    }

    /// The next `event: message`, as JSON.
    async fn next_message(&mut self) -> Value {
        let (event, data) = self.next_event().await;
        assert_eq!(event.as_deref(), Some("message"), "{data}");
        serde_json::from_str(&data).expect("a message is JSON")
    }

    /// POSTs `message` to the announced endpoint, with `headers` besides.
    async fn post(&self, h: &Harness, headers: &[(&str, &str)], message: &Value) -> Collected {
        post_to(h, &self.endpoint, headers, message).await
    }

    /// Initializes the session as a legacy client does; returns the `initialize` result.
    async fn initialize(&mut self, h: &Harness, headers: &[(&str, &str)]) -> Value {
        let accepted = self
            .post(h, headers, &initialize(0, "2024-11-05", json!({})))
            .await;
        assert_eq!(accepted.status, 202, "{}", accepted.text());
        let result = self.next_message().await;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let accepted = self.post(h, headers, &initialized).await;
        assert_eq!(accepted.status, 202, "{}", accepted.text());
        result
    }
}

async fn post_to(
    h: &Harness,
    target: &str,
    headers: &[(&str, &str)],
    message: &Value,
) -> Collected {
    within(
        "the answer to a legacy POST",
        TestClient::default().post_json(
            &format!("http://{}{target}", h.addr()),
            headers,
            &message.to_string(),
        ),
    )
    .await
}

/// Polls the upstream's record until `found` holds (the gateway acts on its own time).
async fn recorded(h: &Harness, what: &str, found: impl Fn(&[RecordedRequest]) -> bool) {
    within(what, async {
        while !found(&h.upstream.requests()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn the_endpoint_event_names_a_path_on_the_gateway_and_nothing_upstream() {
    let h = start().await;
    let stream = LegacyStream::open(&h, &[]).await;

    let id = stream
        .endpoint
        .strip_prefix("/sse/messages?session_id=")
        .unwrap_or_else(|| panic!("not the gateway's messages path: {}", stream.endpoint));
    assert_eq!(id.len(), 32, "{id}");
    assert!(
        !stream.endpoint.contains(&h.upstream.addr().to_string()),
        "the endpoint must never name the upstream"
    );
    assert!(
        h.upstream.requests().is_empty(),
        "opening a legacy session sends nothing upstream"
    );
}

#[tokio::test]
async fn a_read_passes_and_its_answer_arrives_on_the_stream() {
    let h = start().await;
    let mut stream = LegacyStream::open(&h, &[]).await;

    let result = stream.initialize(&h, &[]).await;
    assert_eq!(result["result"]["serverInfo"]["name"], "store", "{result}");

    let accepted = stream
        .post(&h, &[], &tool_call(7, "list_orders", json!({})))
        .await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    let answer = stream.next_message().await;
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"]["content"][0]["text"], "ran list_orders");

    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("list_orders".to_owned(), json!({}))]
    );
    // The messages went to the route as Streamable HTTP POSTs of one upstream session.
    let posts: Vec<RecordedRequest> = h
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::POST && r.json()["method"] != "tools/list")
        .collect();
    assert_eq!(posts[0].json()["method"], "initialize");
    assert_eq!(posts[0].header("mcp-session-id"), None);
    for later in &posts[1..] {
        assert_eq!(later.target, "/mcp");
        assert_eq!(later.header("mcp-session-id"), Some("store-session-0"));
        assert_eq!(later.header("mcp-protocol-version"), Some("2024-11-05"));
    }
}

#[tokio::test]
async fn a_risky_call_is_held_its_result_arrives_on_the_stream_and_its_token_runs_it_once() {
    let h = start().await;
    let mut stream = LegacyStream::open(&h, &[]).await;
    stream.initialize(&h, &[]).await;

    let call = tool_call(3, "delete_order", json!({"id": "o1"}));
    let accepted = stream.post(&h, &[], &call).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    let held = stream.next_message().await;
    assert_eq!(held["id"], 3);
    let token = held_token(&held);
    assert!(
        h.upstream.tool_calls().is_empty(),
        "the upstream must not run a held call"
    );

    let confirmed = tool_call(
        4,
        "delete_order",
        json!({"id": "o1", "confirmationToken": token}),
    );
    stream.post(&h, &[], &confirmed).await;
    let ran = stream.next_message().await;
    assert_eq!(ran["id"], 4);
    assert_eq!(
        ran["result"]["content"][0]["text"], "ran delete_order",
        "{ran}"
    );
    stream.post(&h, &[], &confirmed).await;
    let replayed = stream.next_message().await;
    assert_eq!(replayed["id"], 4);
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        vec![("delete_order".to_owned(), json!({"id": "o1"}))],
        "exactly once, without the token: {replayed}"
    );
}

#[tokio::test]
async fn forged_unknown_and_closed_session_ids_are_404_and_nothing_is_forwarded() {
    let h = start().await;
    let call = tool_call(1, "list_orders", json!({}));
    for target in [
        "/sse/messages?session_id=0123456789abcdef0123456789abcdef",
        "/sse/messages?session_id=",
        "/sse/messages?session_id=../../mcp",
        "/sse/messages",
    ] {
        let refused = post_to(&h, target, &[], &call).await;
        assert_eq!(refused.status, 404, "{target}: {}", refused.text());
        let message = refused.json()["error"]["message"].clone();
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains("no legacy SSE session")),
            "{target}: {message}"
        );
    }

    let stream = LegacyStream::open(&h, &[]).await;
    let endpoint = stream.endpoint.clone();
    drop(stream);
    within("the closed session to be forgotten", async {
        while post_to(&h, &endpoint, &[], &call).await.status != 404 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        h.upstream.requests().is_empty(),
        "nothing may reach the upstream: {:?}",
        h.upstream.requests()
    );
}

#[tokio::test]
async fn a_session_answers_only_the_principal_that_opened_it() {
    let h = start_with("identity: { header: x-user }\n", None).await;
    let ada = [("x-user", "ada")];
    let mut stream = LegacyStream::open(&h, &ada).await;
    stream.initialize(&h, &ada).await;
    let before = h.upstream.requests().len();

    let call = tool_call(1, "list_orders", json!({}));
    let refused = stream.post(&h, &[("x-user", "mallory")], &call).await;
    assert_eq!(refused.status, 404, "{}", refused.text());
    // Without any identity the identity layer refuses it before the session is looked up.
    let refused = stream.post(&h, &[], &call).await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    // A client cannot step into an upstream session by naming it either.
    let smuggled = stream
        .post(
            &h,
            &[("x-user", "ada"), ("mcp-session-id", "store-session-9")],
            &call,
        )
        .await;
    assert_eq!(smuggled.status, 202);
    stream.next_message().await;
    let requests = h.upstream.requests();
    let forwarded: Vec<_> = requests[before..]
        .iter()
        .filter(|r| r.method == Method::POST && r.json()["method"] == "tools/call")
        .collect();
    assert_eq!(forwarded.len(), 1, "{forwarded:?}");
    assert_eq!(
        forwarded[0].header("mcp-session-id"),
        Some("store-session-0")
    );
    assert_eq!(forwarded[0].header("x-user"), Some("ada"));
}

#[tokio::test]
async fn hardening_refuses_smuggled_and_foreign_origin_legacy_requests() {
    let h = start().await;
    let host = h.addr();
    let wait = Duration::from_secs(10);
    let cases: [(&str, String, u16); 5] = [
        (
            "foreign Origin on the stream",
            format!(
                "GET /sse HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n"
            ),
            403,
        ),
        (
            "foreign Host on the stream",
            "GET /sse HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned(),
            421,
        ),
        (
            "chunked message",
            format!(
                "POST /sse/messages?session_id=0123456789abcdef0123456789abcdef HTTP/1.1\r\nHost: {host}\r\n\
                 Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
            ),
            411,
        ),
        (
            "message that is not JSON",
            format!(
                "POST /sse/messages?session_id=0123456789abcdef0123456789abcdef HTTP/1.1\r\nHost: {host}\r\n\
                 Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            ),
            415,
        ),
        (
            "query on the stream",
            format!("GET /sse?session_id=x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            400,
        ),
    ];
    for (what, request, status) in cases {
        let response = raw_request(h.addr(), request.as_bytes(), wait)
            .await
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(response.status, status, "{what}: {}", response.body_text());
    }
    let wrong_method = post_to(&h, "/sse", &[], &json!({})).await;
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.header("allow"), Some("GET"));
    assert!(
        h.upstream.requests().is_empty(),
        "the upstream must record nothing"
    );
}

#[tokio::test]
async fn a_session_stream_takes_one_of_its_clients_request_slots() {
    let h = start_with("connections: { max_requests_per_client: 2 }\n", None).await;
    let _first = LegacyStream::open(&h, &[]).await;
    let second = LegacyStream::open(&h, &[]).await;

    let refused = within(
        "the third stream's answer",
        TestClient::default().send(Method::GET, &format!("http://{}/sse", h.addr()), &[], ""),
    )
    .await;
    assert_eq!(refused.status(), 429);

    // Two streams hold both slots: a message has none left, and is refused before it is read.
    let refused = second
        .post(&h, &[], &initialize(0, "2024-11-05", json!({})))
        .await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(
        h.upstream.requests().is_empty(),
        "the upstream must record nothing"
    );
}

#[tokio::test]
async fn server_messages_on_the_upstream_stream_reach_the_legacy_client() {
    fn notifying() -> Reply {
        Reply::sse(&[
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
        ])
    }
    let h = start_with("", Some(notifying)).await;
    let mut stream = LegacyStream::open(&h, &[]).await;
    stream.initialize(&h, &[]).await;

    let notification = stream.next_message().await;
    assert_eq!(notification["method"], "notifications/tools/list_changed");
    let gets: Vec<_> = h
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::GET)
        .collect();
    assert_eq!(gets[0].header("mcp-session-id"), Some("store-session-0"));
    assert_eq!(gets[0].header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn closing_the_legacy_stream_ends_the_upstream_session() {
    let h = start().await;
    let mut stream = LegacyStream::open(&h, &[]).await;
    stream.initialize(&h, &[]).await;
    drop(stream);

    recorded(&h, "the upstream session's DELETE", |requests| {
        requests.iter().any(|r| {
            r.method == Method::DELETE && r.header("mcp-session-id") == Some("store-session-0")
        })
    })
    .await;
}

#[tokio::test]
async fn a_route_can_turn_its_legacy_endpoints_off() {
    let upstream = RecordingUpstream::start().await;
    let h = Harness::start_with(upstream, "", "    legacy_sse_path: 'off'\n").await;
    let refused = within(
        "the answer",
        TestClient::default().send(Method::GET, &format!("http://{}/sse", h.addr()), &[], ""),
    )
    .await;
    assert_eq!(refused.status(), 404);
    assert!(h.upstream.requests().is_empty());
}

#[tokio::test]
async fn a_request_answered_without_json_rpc_gets_an_error_on_the_stream() {
    let h = start_with_plain_text_ping().await;
    let mut stream = LegacyStream::open(&h, &[]).await;
    stream.initialize(&h, &[]).await;

    let accepted = stream
        .post(
            &h,
            &[],
            &json!({"jsonrpc": "2.0", "id": "p-1", "method": "ping"}),
        )
        .await;
    assert_eq!(accepted.status, 202);
    let answer = stream.next_message().await;
    assert_eq!(answer["id"], "p-1", "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("upstream `store`") && message.contains("405"),
        "the error names the upstream and what it answered: {message}"
    );
}

#[tokio::test]
async fn legacy_clients_get_the_same_credential_checks() {
    let key = "csk_0f4c2a9e7b1d3f5a8c6e0b2d4f6a8c1e";
    let keys = countersign_testkit::TempFile::new(
        "api-keys.yaml",
        &format!(
            "- {{ sha256: '{}', principal: ada }}\n",
            countersign_proxy::identity::hash_key(key)
        ),
    );
    let h = start_with(
        &format!(
            "identity:\n  methods:\n    - api_keys: {{ file: '{}' }}\n",
            keys.path_str()
        ),
        None,
    )
    .await;
    let wrong = [("authorization", "Bearer csk_wrong")];
    let refused = TestClient::default()
        .send(Method::GET, &format!("http://{}/sse", h.addr()), &wrong, "")
        .await;
    assert_eq!(refused.status(), 401, "no session for a bad key");
    assert!(refused.headers().contains_key("www-authenticate"));

    let good = format!("Bearer {key}");
    let ada = [("authorization", good.as_str())];
    let mut stream = LegacyStream::open(&h, &ada).await;
    stream.initialize(&h, &ada).await;
    let before = h.upstream.requests().len();
    let call = tool_call(1, "list_orders", json!({}));
    for headers in [&wrong[..], &[]] {
        let refused = stream.post(&h, headers, &call).await;
        assert_eq!(refused.status, 401, "{}", refused.text());
    }
    assert_eq!(h.upstream.requests().len(), before, "nothing was forwarded");
    assert!(
        h.upstream
            .requests()
            .iter()
            .all(|r| r.header("authorization").is_none()),
        "the key was the gateway's; the upstream never sees it"
    );
}
