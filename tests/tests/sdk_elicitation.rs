//! The approval channels that ask a person (docs/wire-formats.md): `elicitation/create` on the held
//! call's own SSE stream (2025-06-18+ sessions) and `input_required` (2026-07-28), driven by real
//! MCP SDK clients through the real gateway (default policy) in front of a real Python SDK
//! upstream whose `confirm_delete` then asks its own question. What the person was shown and
//! answered is checked, but the upstream's own `audit_log` judges what ran: exactly the calls a
//! person approved, nothing after a decline, a cancel, an unticked box or a failing client.
//!
//! Also: `approval: human` for a client that cannot ask (refused, never a token), and with raw
//! HTTP, since no SDK would send them, an answer posted from another session (refused; the
//! session's own answer then runs the call once), and a question nobody answers (times out as
//! `not_approved`).

use std::net::SocketAddr;
use std::time::Duration;

use countersign_e2e::{Peer, deploy, run_client, step};
use countersign_testkit::{
    RawResponse, TempFile, dechunk, parse_head, raw_post, raw_request, sse_data, sse_messages,
    take_sse_event,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one raw exchange (or one event on a held stream) may take.
const RAW_WAIT: Duration = Duration::from_secs(30);
const LEGACY_VERSION: &str = "2025-11-25";

/// How the gateway's question is identified: its JSON-RPC id on a session, its `inputRequests`
/// key on 2026-07-28.
fn gateway_question_id(peer: Peer) -> &'static str {
    match peer {
        Peer::PythonStateless => "countersign/approval",
        Peer::PythonLegacy | Peer::PythonSse | Peer::TypeScript | Peer::TypeScriptSse => {
            "countersign-<uuid>"
        }
    }
}

/// The `elicit` script through a gateway with the default policy, in front of a fresh upstream.
async fn elicit(peer: Peer, options: &[&str]) -> Value {
    let deployment = deploy(&[]).await;
    run_client(peer, &deployment.url, "elicit", options).await
}

fn questions<'a>(peer: Peer, transcript: &'a Value, call: &str) -> &'a [Value] {
    step(peer, transcript, "call", call)["elicitations"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// What the upstream itself says it executed.
fn executed(peer: Peer, transcript: &Value) -> Value {
    countersign_e2e::ran(peer, step(peer, transcript, "call", "audit_log"))["entries"].clone()
}

/// The gateway's question about `tool`: shown with the real arguments, answered as `answer`.
fn assert_gateway_question(
    peer: Peer,
    question: &Value,
    tool: &str,
    risk: &str,
    arguments: &Value,
    answer: &str,
) {
    assert_eq!(question["asker"], "gateway", "{peer:?}: {question}");
    assert_eq!(question["answer"], answer, "{peer:?}: {question}");
    assert_eq!(question["mode"], "form", "{peer:?}: {question}");
    assert_eq!(
        question["fields"],
        json!(["approve"]),
        "{peer:?}: {question}"
    );
    assert_eq!(
        question["id"],
        gateway_question_id(peer),
        "{peer:?}: {question}"
    );
    assert_eq!(question["tool"], tool, "{peer:?}: {question}");
    assert_eq!(question["risk"], risk, "{peer:?}: {question}");
    assert_eq!(
        &question["argumentsShown"], arguments,
        "{peer:?}: the person must see the real arguments: {question}"
    );
    let message = question["message"].as_str().expect("message");
    assert!(
        message.starts_with("An assistant wants to run a tool that needs your approval."),
        "{peer:?}: {message}"
    );
    assert!(message.contains(&format!("Tool: {tool}\n")), "{message}");
}

/// The upstream's own question of `confirm_delete`, relayed to the person.
fn assert_upstream_question(peer: Peer, question: &Value, answer: &str) {
    assert_eq!(question["asker"], "upstream", "{peer:?}: {question}");
    assert_eq!(question["answer"], answer, "{peer:?}: {question}");
    assert_eq!(
        question["fields"],
        json!(["confirm"]),
        "{peer:?}: {question}"
    );
    assert_eq!(
        question["message"], "Delete the note 'readme'?",
        "{peer:?}: {question}"
    );
    let expected_id = match peer {
        // The Python SDK's key for the upstream's Resolve(Elicit) in inputRequests.
        Peer::PythonStateless => "__main__:_ask_delete",
        Peer::PythonLegacy | Peer::PythonSse | Peer::TypeScript | Peer::TypeScriptSse => {
            "<integer>"
        }
    };
    assert_eq!(question["id"], expected_id, "{peer:?}: {question}");
}

fn assert_ran(peer: Peer, transcript: &Value, call: &str, expected: &str) {
    let found = step(peer, transcript, "call", call);
    assert_eq!(
        countersign_e2e::ran(peer, found),
        &json!({"result": expected}),
        "{peer:?}: {found}"
    );
}

/// A held call the person did not approve: refused by the gateway, nothing forwarded.
fn assert_not_approved(peer: Peer, transcript: &Value, call: &str) {
    let found = step(peer, transcript, "call", call);
    let result = &found["result"];
    assert_eq!(result["isError"], true, "{peer:?} {call}: {found}");
    let confirmation = &result["_meta"]["countersign/confirmation"];
    assert_eq!(
        confirmation["status"], "rejected",
        "{peer:?} {call}: {found}"
    );
    assert_eq!(
        confirmation["code"], "not_approved",
        "{peer:?} {call}: {found}"
    );
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("nothing was sent"),
        "{peer:?} {call}: the model must be told nothing ran: {text}"
    );
}

fn note_e() -> Value {
    json!({"name": "e", "text": "1"})
}

fn readme() -> Value {
    json!({"name": "readme"})
}

/// Accept everywhere: the gateway asks before each risky call, the person approves, and
/// `confirm_delete`'s own question reaches the person afterwards.
async fn approved_calls_run_once(peer: Peer) -> Value {
    let t = elicit(
        peer,
        &["--gateway-answer", "accept", "--upstream-answer", "accept"],
    )
    .await;

    let asked = questions(peer, &t, "add_note");
    assert_eq!(asked.len(), 1, "{peer:?}: one question per held call: {t}");
    assert_gateway_question(peer, &asked[0], "add_note", "write", &note_e(), "accept");
    let message = asked[0]["message"].as_str().expect("message");
    assert!(
        message.contains(r#""name": "e""#) && message.contains(r#""text": "1""#),
        "{peer:?}: {message}"
    );
    assert_ran(peer, &t, "add_note", "created note 'e'");

    let asked = questions(peer, &t, "confirm_delete");
    assert_eq!(
        asked.len(),
        2,
        "{peer:?}: the gateway's question, then the upstream's own: {t}"
    );
    assert_gateway_question(
        peer,
        &asked[0],
        "confirm_delete",
        "destructive",
        &readme(),
        "accept",
    );
    assert_upstream_question(peer, &asked[1], "accept");
    assert_ran(
        peer,
        &t,
        "confirm_delete",
        "deleted note 'readme' after confirmation",
    );

    assert!(
        questions(peer, &t, "audit_log").is_empty(),
        "{peer:?}: a read is never held: {t}"
    );
    assert_eq!(
        executed(peer, &t),
        json!([
            {"tool": "add_note", "arguments": note_e()},
            {"tool": "confirm_delete", "arguments": readme()}
        ]),
        "{peer:?}: the upstream's own audit log must show both approved calls, once each"
    );
    t
}

/// The person refuses the gateway's question (`answer`): nothing reaches the upstream, so its
/// own question is never asked.
async fn refused_calls_never_run(peer: Peer, answer: &str) {
    let t = elicit(peer, &["--gateway-answer", answer]).await;
    for (call, risk, arguments) in [
        ("add_note", "write", note_e()),
        ("confirm_delete", "destructive", readme()),
    ] {
        let asked = questions(peer, &t, call);
        assert_eq!(
            asked.len(),
            1,
            "{peer:?} {answer}: only the gateway may have asked: {t}"
        );
        assert_gateway_question(peer, &asked[0], call, risk, &arguments, answer);
        if peer == Peer::PythonStateless && answer == "throw" {
            // The SDK's input_required loop stops at a failing handler and never retries, so
            // the gateway sees no answer at all; the call fails on the client side.
            let found = step(peer, &t, "call", call);
            assert!(
                found["exception"]
                    .as_str()
                    .is_some_and(|e| e.contains("HandlerFailure")),
                "{peer:?}: {found}"
            );
        } else {
            assert_not_approved(peer, &t, call);
        }
    }
    assert_eq!(
        executed(peer, &t),
        json!([]),
        "{peer:?} {answer}: nothing may run"
    );
}

/// Approved by the person at the gateway, then refused at the upstream's own question: the
/// upstream keeps the note, and the refusal is the upstream's answer, passed through.
async fn upstream_refusal_is_relayed(peer: Peer) {
    let t = elicit(
        peer,
        &["--gateway-answer", "accept", "--upstream-answer", "decline"],
    )
    .await;
    assert_ran(peer, &t, "add_note", "created note 'e'");
    let asked = questions(peer, &t, "confirm_delete");
    assert_eq!(asked.len(), 2, "{peer:?}: {t}");
    assert_gateway_question(
        peer,
        &asked[0],
        "confirm_delete",
        "destructive",
        &readme(),
        "accept",
    );
    assert_upstream_question(peer, &asked[1], "decline");
    assert_ran(
        peer,
        &t,
        "confirm_delete",
        "kept note 'readme': the user did not confirm (decline)",
    );
    assert_eq!(
        executed(peer, &t),
        json!([{"tool": "add_note", "arguments": note_e()}]),
        "{peer:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_approved_calls_run_once() {
    let t = approved_calls_run_once(Peer::PythonLegacy).await;
    assert_eq!(t["protocolVersion"], LEGACY_VERSION);
    assert_eq!(t["sessionDelete"], 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_approved_calls_run_once() {
    let t = approved_calls_run_once(Peer::PythonStateless).await;
    assert_eq!(t["protocolVersion"], "2026-07-28");
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_approved_calls_run_once() {
    let t = approved_calls_run_once(Peer::TypeScript).await;
    assert_eq!(t["protocolVersion"], LEGACY_VERSION);
    assert_eq!(t["sessionDelete"], 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_and_typescript_see_the_same_questions() {
    let deployment = deploy(&[]).await;
    let python = run_client(Peer::PythonLegacy, &deployment.url, "elicit", &[]).await;
    let deployment = deploy(&[]).await;
    let typescript = run_client(Peer::TypeScript, &deployment.url, "elicit", &[]).await;
    let without_peer = |t: &Value| {
        let mut t = t.clone();
        t.as_object_mut().expect("object").remove("peer");
        t
    };
    assert_eq!(without_peer(&python), without_peer(&typescript));
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_decline_runs_nothing() {
    refused_calls_never_run(Peer::PythonLegacy, "decline").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_cancel_runs_nothing() {
    refused_calls_never_run(Peer::PythonLegacy, "cancel").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_unticked_box_runs_nothing() {
    refused_calls_never_run(Peer::PythonLegacy, "untick").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_failing_handler_runs_nothing() {
    refused_calls_never_run(Peer::PythonLegacy, "throw").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_decline_runs_nothing() {
    refused_calls_never_run(Peer::PythonStateless, "decline").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_cancel_runs_nothing() {
    refused_calls_never_run(Peer::PythonStateless, "cancel").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_unticked_box_runs_nothing() {
    refused_calls_never_run(Peer::PythonStateless, "untick").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_failing_handler_runs_nothing() {
    refused_calls_never_run(Peer::PythonStateless, "throw").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_decline_runs_nothing() {
    refused_calls_never_run(Peer::TypeScript, "decline").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_cancel_runs_nothing() {
    refused_calls_never_run(Peer::TypeScript, "cancel").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_unticked_box_runs_nothing() {
    refused_calls_never_run(Peer::TypeScript, "untick").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_failing_handler_runs_nothing() {
    refused_calls_never_run(Peer::TypeScript, "throw").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_upstream_question_is_answered_by_the_person() {
    upstream_refusal_is_relayed(Peer::PythonLegacy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_upstream_question_is_answered_by_the_person() {
    upstream_refusal_is_relayed(Peer::PythonStateless).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_upstream_question_is_answered_by_the_person() {
    upstream_refusal_is_relayed(Peer::TypeScript).await;
}

// ---- approval: human ----

const HUMAN_POLICY: &str = "version: 1\napproval: human\n";

/// `approval: human` and a client that declares no elicitation: refused, never a token.
async fn human_approval_needs_a_client_that_can_ask(peer: Peer) {
    let policy = TempFile::new("human.yaml", HUMAN_POLICY);
    let deployment = deploy(&["--policy", policy.path_str()]).await;
    let t = run_client(peer, &deployment.url, "elicit", &["--no-elicitation"]).await;
    for call in ["add_note", "confirm_delete"] {
        let found = step(peer, &t, "call", call);
        assert!(
            questions(peer, &t, call).is_empty(),
            "{peer:?}: nobody can be asked: {found}"
        );
        if peer == Peer::PythonStateless {
            // 2026-07-28: a JSON-RPC error (-32021, HTTP 400).
            assert_eq!(found["error"]["code"], -32021, "{peer:?}: {found}");
            let message = found["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("human_approval_unavailable"),
                "{peer:?}: {found}"
            );
        } else {
            let result = &found["result"];
            assert_eq!(result["isError"], true, "{peer:?}: {found}");
            let confirmation = &result["_meta"]["countersign/confirmation"];
            assert_eq!(confirmation["status"], "rejected", "{peer:?}: {found}");
            assert_eq!(
                confirmation["code"], "human_approval_unavailable",
                "{peer:?}: {found}"
            );
            assert!(
                confirmation.get("confirmationToken").is_none(),
                "{peer:?}: approval: human must never offer a token: {found}"
            );
        }
    }
    assert_eq!(executed(peer, &t), json!([]), "{peer:?}: nothing may run");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_human_approval_is_unavailable_without_elicitation() {
    human_approval_needs_a_client_that_can_ask(Peer::PythonLegacy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_human_approval_is_unavailable_without_elicitation() {
    human_approval_needs_a_client_that_can_ask(Peer::PythonStateless).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_human_approval_is_unavailable_without_elicitation() {
    human_approval_needs_a_client_that_can_ask(Peer::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn human_approval_asks_clients_that_can() {
    let policy = TempFile::new("human-ask.yaml", HUMAN_POLICY);
    for peer in [Peer::PythonLegacy, Peer::PythonStateless, Peer::TypeScript] {
        let deployment = deploy(&["--policy", policy.path_str()]).await;
        let t = run_client(peer, &deployment.url, "elicit", &[]).await;
        assert_eq!(
            questions(peer, &t, "add_note")[0]["asker"],
            "gateway",
            "{peer:?}: {t}"
        );
        assert_ran(peer, &t, "add_note", "created note 'e'");
        assert_eq!(
            executed(peer, &t),
            json!([
                {"tool": "add_note", "arguments": note_e()},
                {"tool": "confirm_delete", "arguments": readme()}
            ]),
            "{peer:?}: {t}"
        );
    }
}

// ---- raw HTTP: the held call's stream, its question and who may answer it ----

/// The gateway's address, from the URL `start_gateway` returned.
fn gateway_addr(url: &str) -> SocketAddr {
    let port = url
        .trim_start_matches("http://localhost:")
        .trim_end_matches("/mcp")
        .parse::<u16>()
        .unwrap_or_else(|e| panic!("no port in {url}: {e}"));
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A POST of `body` to the gateway at `addr` as `localhost`, on `session` if any.
fn post_request(addr: SocketAddr, session: Option<&str>, body: &Value) -> Vec<u8> {
    let session_headers = session
        .map(|session| {
            format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {LEGACY_VERSION}\r\n")
        })
        .unwrap_or_default();
    raw_post(
        format!("localhost:{}", addr.port()),
        body.to_string().as_bytes(),
        &session_headers,
    )
}

async fn post(addr: SocketAddr, session: Option<&str>, body: &Value) -> RawResponse {
    raw_request(addr, &post_request(addr, session, body), RAW_WAIT)
        .await
        .unwrap_or_else(|| panic!("no answer to {body}"))
}

/// The JSON-RPC messages of a whole response: one JSON body, or every `data:` of an SSE body.
fn messages(response: &RawResponse) -> Vec<Value> {
    if response
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        return vec![response.json()];
    }
    sse_messages(&response.body_text())
}

/// The answer to request `id` among `messages`.
fn answer_to(messages: &[Value], id: i64) -> Value {
    messages
        .iter()
        .find(|m| m["id"] == id && (m.get("result").is_some() || m.get("error").is_some()))
        .cloned()
        .unwrap_or_else(|| panic!("no answer to request {id} in {messages:?}"))
}

/// A legacy session opened by hand: `initialize` (declaring form elicitation) and `initialized`.
async fn open_session(addr: SocketAddr) -> String {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "countersign-e2e-raw", "version": "1.0.0"}
        }
    });
    let response = post(addr, None, &initialize).await;
    assert_eq!(response.status, 200, "initialize: {}", response.body_text());
    let session = response
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("initialize without a session id: {response:?}"))
        .to_owned();
    let result = answer_to(&messages(&response), 1);
    assert_eq!(
        result["result"]["protocolVersion"], LEGACY_VERSION,
        "{result}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post(addr, Some(&session), &initialized).await;
    assert_eq!(
        response.status,
        202,
        "initialized: {}",
        response.body_text()
    );
    session
}

async fn call_tool(
    addr: SocketAddr,
    session: &str,
    id: i64,
    name: &str,
    arguments: Value,
) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments}});
    let response = post(addr, Some(session), &call).await;
    assert_eq!(response.status, 200, "{name}: {}", response.body_text());
    answer_to(&messages(&response), id)
}

async fn audit_entries(addr: SocketAddr, session: &str, id: i64) -> Value {
    let answer = call_tool(addr, session, id, "audit_log", json!({})).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    answer["result"]["structuredContent"]["entries"].clone()
}

/// A POST whose SSE answer is read event by event while it is still open.
struct HeldStream {
    tcp: TcpStream,
    /// Bytes received and not yet decoded (chunk framing).
    raw: Vec<u8>,
    /// Decoded body text not yet split into events.
    text: String,
    finished: bool,
    status: u16,
    content_type: String,
    /// The raw text of the event the last message came in.
    last_event: String,
}

impl HeldStream {
    async fn post(addr: SocketAddr, session: &str, body: &Value) -> Self {
        let mut tcp = TcpStream::connect(addr).await.expect("connect to gateway");
        tcp.write_all(&post_request(addr, Some(session), body))
            .await
            .expect("send the call");
        let mut stream = Self {
            tcp,
            raw: Vec::new(),
            text: String::new(),
            finished: false,
            status: 0,
            content_type: String::new(),
            last_event: String::new(),
        };
        let (head, body_start) = loop {
            if let Some(parsed) = parse_head(&stream.raw) {
                break parsed;
            }
            assert!(
                stream.read_more().await,
                "the gateway closed before answering"
            );
        };
        let head_text = String::from_utf8_lossy(&stream.raw[..body_start - 4]).into_owned();
        stream.raw.drain(..body_start);
        stream.status = head.status;
        stream.content_type = head.header("content-type").unwrap_or_default().to_owned();
        assert_eq!(
            head.header("transfer-encoding"),
            Some("chunked"),
            "a held call's stream stays open, so it is chunked: {head_text}"
        );
        stream
    }

    async fn read_more(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout(RAW_WAIT, self.tcp.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => false,
            Ok(Ok(n)) => {
                self.raw.extend_from_slice(&chunk[..n]);
                true
            }
            Err(_) => panic!("the held stream was silent for {RAW_WAIT:?}"),
        }
    }

    /// Moves every complete chunk from `raw` to `text`.
    fn decode(&mut self) {
        let chunks = dechunk(&self.raw).unwrap_or_else(|e| panic!("{e}"));
        self.text.push_str(&String::from_utf8_lossy(&chunks.data));
        if chunks.finished {
            self.finished = true;
            self.raw.clear();
        } else {
            self.raw.drain(..chunks.consumed);
        }
    }

    /// The next JSON-RPC message on the stream; `None` once it has ended.
    async fn next_message(&mut self) -> Option<Value> {
        loop {
            self.decode();
            if let Some(event) = take_sse_event(&mut self.text) {
                if let Some(data) = sse_data(&event) {
                    self.last_event = event;
                    return Some(
                        serde_json::from_str(&data)
                            .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}")),
                    );
                }
                continue;
            }
            if self.finished || !self.read_more().await {
                return None;
            }
        }
    }

    /// Reads until a message satisfies `wanted`; panics if the stream ends first.
    async fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let mut seen = Vec::new();
        while let Some(message) = self.next_message().await {
            if wanted(&message) {
                return message;
            }
            seen.push(message);
        }
        panic!("the stream ended without {what}; it carried {seen:?}")
    }
}

fn approval(id: &str, content: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": content}})
}

#[tokio::test(flavor = "multi_thread")]
async fn answer_from_another_session_is_refused() {
    let deployment = deploy(&[]).await;
    let addr = gateway_addr(&deployment.url);

    let session_a = open_session(addr).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "add_note", "arguments": {"name": "x", "text": "y"}}});
    let mut held = HeldStream::post(addr, &session_a, &call).await;
    assert_eq!(held.status, 200);
    assert!(
        held.content_type.starts_with("text/event-stream"),
        "a held call of a session that can elicit is answered as SSE: {}",
        held.content_type
    );
    let question = held
        .until("the gateway's question", |m| {
            m["method"] == "elicitation/create"
        })
        .await;
    assert!(
        !held.last_event.lines().any(|line| line.starts_with("id:")),
        "events the gateway injects carry no SSE id: {}",
        held.last_event
    );
    let question_id = question["id"].as_str().expect("string id").to_owned();
    assert!(
        question_id.starts_with("countersign-"),
        "the gateway's own id space: {question}"
    );
    assert_eq!(
        question["params"]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    let message = question["params"]["message"].as_str().expect("message");
    assert!(message.contains(r#""name": "x""#), "{message}");

    // Session B (same principal, another session) answers A's question: refused, not handed over.
    let session_b = open_session(addr).await;
    assert_ne!(session_a, session_b);
    let stolen = post(
        addr,
        Some(&session_b),
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    assert!(
        (400..500).contains(&stolen.status),
        "an answer from another session must be refused, got {}: {}",
        stolen.status,
        stolen.body_text()
    );
    // Nor without a session, nor with one that does not exist.
    let sessionless = post(
        addr,
        None,
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    assert!(
        (400..500).contains(&sessionless.status),
        "an answer without a session must be refused, got {}: {}",
        sessionless.status,
        sessionless.body_text()
    );
    let invented = post(
        addr,
        Some("00000000000000000000000000000000"),
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    assert!(
        (400..500).contains(&invented.status),
        "an answer from an unknown session must be refused, got {}: {}",
        invented.status,
        invented.body_text()
    );
    assert_eq!(
        audit_entries(addr, &session_b, 20).await,
        json!([]),
        "nothing may run on an answer from elsewhere"
    );

    // Session A's own answer is taken (202, never forwarded) and the call runs on A's stream.
    let answered = post(
        addr,
        Some(&session_a),
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    assert_eq!(answered.status, 202, "{}", answered.body_text());
    let result = held
        .until("the call's result", |m| {
            m["id"] == 7 && m.get("method").is_none()
        })
        .await;
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert_eq!(
        result["result"]["structuredContent"],
        json!({"result": "created note 'x'"})
    );
    assert_eq!(
        held.next_message().await,
        None,
        "the stream ends after the result"
    );

    // The question is spent: answering it again is refused, and nothing runs twice.
    let again = post(
        addr,
        Some(&session_a),
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    assert!(
        (400..500).contains(&again.status),
        "a second answer must be refused, got {}: {}",
        again.status,
        again.body_text()
    );
    assert_eq!(
        audit_entries(addr, &session_b, 21).await,
        json!([{"tool": "add_note", "arguments": {"name": "x", "text": "y"}}])
    );
}

/// Session A holds `add_note {"name": name, "text": "y"}` (request `id`) and reads its stream up
/// to the gateway's question; returns the stream and the question's id.
async fn hold_add_note(
    addr: SocketAddr,
    session: &str,
    id: i64,
    name: &str,
) -> (HeldStream, String) {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "add_note", "arguments": {"name": name, "text": "y"}}});
    let mut held = HeldStream::post(addr, session, &call).await;
    let question = held
        .until("the gateway's question", |m| {
            m["method"] == "elicitation/create"
        })
        .await;
    let question_id = question["id"].as_str().expect("string id").to_owned();
    (held, question_id)
}

#[tokio::test(flavor = "multi_thread")]
async fn unanswered_question_times_out_as_not_approved() {
    let config = TempFile::new("timeout.yaml", "elicitation_timeout: 1s\nupstreams: []\n");
    let deployment = deploy(&["--config", config.path_str()]).await;
    let addr = gateway_addr(&deployment.url);
    let session = open_session(addr).await;
    let (mut held, question_id) = hold_add_note(addr, &session, 7, "late").await;
    let result = held
        .until("the call's result", |m| {
            m["id"] == 7 && m.get("method").is_none()
        })
        .await;
    let confirmation = &result["result"]["_meta"]["countersign/confirmation"];
    assert_eq!(result["result"]["isError"], true, "{result}");
    assert_eq!(confirmation["code"], "not_approved", "{result}");
    // An answer after the deadline finds no question waiting.
    let late = post(
        addr,
        Some(&session),
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    assert!(
        (400..500).contains(&late.status),
        "an answer after the timeout must be refused, got {}: {}",
        late.status,
        late.body_text()
    );
    assert_eq!(audit_entries(addr, &session, 20).await, json!([]));
}

/// MCP cancellation: after `notifications/cancelled` for a held call the client has abandoned it
/// (the TypeScript SDK sends it when its request timeout, 60 s by default, expires while the
/// person is still deciding). An approval arriving afterwards must not run the call.
#[tokio::test(flavor = "multi_thread")]
async fn cancelled_held_call_is_never_forwarded() {
    let deployment = deploy(&[]).await;
    let addr = gateway_addr(&deployment.url);
    let session = open_session(addr).await;
    let (_held, question_id) = hold_add_note(addr, &session, 7, "cancelled").await;
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 7, "reason": "request timed out"}});
    let response = post(addr, Some(&session), &cancelled).await;
    assert_eq!(response.status, 202, "{}", response.body_text());
    let _ = post(
        addr,
        Some(&session),
        &approval(&question_id, json!({"approve": true})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        audit_entries(addr, &session, 20).await,
        json!([]),
        "a cancelled call must never reach the upstream"
    );
}
