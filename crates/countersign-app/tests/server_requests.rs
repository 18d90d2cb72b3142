//! Requests from the server on a call's own stream: the upstream answers a `tools/call` with an
//! SSE stream that first asks the client something (`sampling/createMessage`), and sends the
//! tool's result on that same stream only once the client's answer — a separate POST carrying a
//! JSON-RPC response — has reached it. Both legs are open at once on different connections, so
//! any relay that holds an event back, pooled connection that queues the answer behind the open
//! stream, or answer routing that swallows it turns into a hang, not a wrong value.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::Harness;
use countersign_testkit::{RecordedRequest, RecordingUpstream, Reply, TestClient};
use futures_util::StreamExt;
use http::Method;
use serde_json::{Value, json};
use tokio::sync::oneshot;

const EXCHANGES: u64 = 200;
const CONCURRENCY: usize = 16;
/// A bound, not a measurement: one exchange takes milliseconds, a lost message never ends.
const EXCHANGE_BOUND: Duration = Duration::from_secs(10);
const SESSION: &str = "s-back-channel";

/// The upstream's sampling requests still waiting for the client's answer, by request id.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// The id of the sampling request the upstream sends for call `call`: distinct from every call
/// id, like the upstream's own request counter would be.
fn sampling_id(call: u64) -> u64 {
    1_000_000 + call
}

fn message_event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// A fake upstream that lists one read-only tool and runs every call as: priming event, sampling
/// request, wait for the answer POST, tool result carrying the sampled text.
fn back_channel_upstream(waiting: Waiting) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync {
    move |request| {
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return Reply::status(202);
        };
        let id = body["id"].clone();
        match body["method"].as_str() {
            Some("tools/list") => {
                // The gateway lists the tools itself before it classifies the first call.
                let tool = json!({"name": "ask_model", "inputSchema": {"type": "object"},
                                  "annotations": {"readOnlyHint": true}});
                Reply::json(
                    200,
                    json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [tool]}}),
                )
            }
            Some("tools/call") => {
                let call = id.as_u64().expect("the test's call ids are numbers");
                let (answered, answer) = oneshot::channel();
                waiting
                    .lock()
                    .expect("waiting lock")
                    .insert(sampling_id(call), answered);
                let (reply, feed) = Reply::sse_stream();
                let ask = json!({"jsonrpc": "2.0", "id": sampling_id(call),
                    "method": "sampling/createMessage",
                    "params": {"messages": [{"role": "user",
                        "content": {"type": "text", "text": format!("call {call}")}}],
                        "maxTokens": 16}});
                let mut opening = format!("id: {call}-0\nretry: 1000\ndata: \n\n").into_bytes();
                opening.extend_from_slice(&message_event(&ask));
                let opening = Bytes::from(opening);
                // Half the calls have their first events queued before the headers go out, half
                // only after, so the relay sees events arriving with and after the headers.
                let early = call % 2 == 0;
                if early {
                    feed.try_send(opening.clone())
                        .expect("a fresh stream has room");
                }
                tokio::spawn(async move {
                    if !early && feed.send(opening).await.is_err() {
                        return;
                    }
                    // The gateway gone (or the test over) drops the sender: nothing to finish.
                    let Ok(answer) = answer.await else { return };
                    let text = answer["result"]["content"]["text"].clone();
                    let result = json!({"jsonrpc": "2.0", "id": call,
                        "result": {"content": [{"type": "text", "text": text}]}});
                    let _ = feed.send(message_event(&result)).await;
                });
                reply
            }
            Some(_) => Reply::json(200, json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            None => {
                // A JSON-RPC response: the client's answer to one of the sampling requests.
                if let Some(answered) = body["id"]
                    .as_u64()
                    .and_then(|id| waiting.lock().expect("waiting lock").remove(&id))
                {
                    let _ = answered.send(body);
                }
                Reply::status(202)
            }
        }
    }
}

const HEADERS: [(&str, &str); 4] = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
    ("mcp-session-id", SESSION),
    ("mcp-protocol-version", "2025-11-25"),
];

/// One whole exchange, as an MCP client runs it: call, read the question on the call's stream,
/// answer it with a second POST while that stream stays open, read the result.
async fn exchange(client: &TestClient, url: &str, call: u64) {
    let request = json!({"jsonrpc": "2.0", "id": call, "method": "tools/call",
                         "params": {"name": "ask_model", "arguments": {}}});
    let response = client
        .send(Method::POST, url, &HEADERS, request.to_string())
        .await;
    assert_eq!(response.status(), 200, "call {call}");
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "call {call}"
    );
    let mut stream = response.into_body();
    let mut pending = String::new();

    let ask = countersign_testkit::next_sse_message(&mut stream, &mut pending).await;
    assert_eq!(ask["method"], "sampling/createMessage", "call {call}");
    assert_eq!(ask["id"], sampling_id(call), "call {call}");

    let sampled = format!("sampled for call {call}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": sampled},
                   "model": "test-model", "stopReason": "endTurn"}});
    let answered = client
        .send(Method::POST, url, &HEADERS, answer.to_string())
        .await;
    assert_eq!(answered.status(), 202, "answer of call {call}");

    let result = countersign_testkit::next_sse_message(&mut stream, &mut pending).await;
    assert_eq!(result["id"], call, "call {call}");
    assert_eq!(
        result["result"]["content"][0]["text"], sampled,
        "call {call}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_requests_on_call_streams_are_answered_under_concurrency() {
    let waiting: Waiting = Arc::default();
    let upstream = RecordingUpstream::with_responder(back_channel_upstream(waiting.clone())).await;
    let h = Harness::start(upstream, "").await;
    let url = h.url();
    // One pooled client for every exchange, as a real client reuses its connections.
    let client = TestClient::default();

    let mut outcomes = futures_util::stream::iter(1..=EXCHANGES)
        .map(|call| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                tokio::time::timeout(EXCHANGE_BOUND, exchange(&client, &url, call))
                    .await
                    .map_err(|_| call)
            }
        })
        .buffer_unordered(CONCURRENCY);
    let mut finished = 0;
    while let Some(outcome) = outcomes.next().await {
        // The first hung exchange ends the test: the others would only wait as long.
        if let Err(call) = outcome {
            panic!(
                "call {call} did not finish within {EXCHANGE_BOUND:?}; \
                 {finished} of {EXCHANGES} exchanges had finished"
            );
        }
        finished += 1;
    }
    assert_eq!(finished, EXCHANGES);

    let recorded = h.upstream.requests();
    let mut answers: Vec<u64> = recorded
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|body| body.get("method").is_none() && body.get("result").is_some())
        .filter_map(|body| body["id"].as_u64())
        .collect();
    answers.sort_unstable();
    let expected: Vec<u64> = (1..=EXCHANGES).map(sampling_id).collect();
    assert_eq!(
        answers, expected,
        "the upstream received every answer exactly once"
    );
    assert!(
        waiting.lock().expect("waiting lock").is_empty(),
        "no sampling request is left waiting"
    );
}
