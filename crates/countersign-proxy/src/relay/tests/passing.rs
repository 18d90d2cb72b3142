//! Long SSE answers passed on in parts as they arrive, for observers that do not edit them.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::FutureExt as _;
use http_body_util::BodyExt as _;

use countersign_jsonrpc::message::{RequestId, TopLevel};
use countersign_jsonrpc::sse::{CUT_EVENT, SseDecoder, SseEvent};

use super::{frames, live_upstream, relay, relay_for, upstream};
use crate::metrics::ProxyMetrics;
use crate::relay::MessageObserver;

/// An answer to `id` whose single data line is about `bytes` long.
fn long_answer(id: u32, bytes: usize) -> String {
    format!(
        "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"text\":\"{}\"}}}}\n\n",
        "x".repeat(bytes)
    )
}

/// The events a client reads from everything the relay sent.
fn client_events(sent: &[String]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new(usize::MAX);
    decoder.push(sent.concat().as_bytes());
    let mut events = Vec::new();
    while let Some(event) = decoder.finish().expect("the client reads the stream") {
        events.push(event);
    }
    events
}

/// The type a client dispatches `event` as.
fn event_type(event: &SseEvent) -> String {
    event
        .fields
        .iter()
        .rev()
        .find_map(|field| match field {
            countersign_jsonrpc::sse::SseField::Event(kind) => Some(kind.clone()),
            _ => None,
        })
        .unwrap_or_else(|| "message".to_owned())
}

#[tokio::test]
async fn a_long_answer_reaches_the_client_before_the_upstream_finished_sending_it() {
    let answer = long_answer(1, 300_000);
    let (head, tail) = answer.split_at(100_000);
    let (sender, body) = live_upstream();
    let mut relay = std::pin::pin!(relay(body, None));

    sender
        .send(Bytes::from(head.to_owned()))
        .await
        .expect("relay listens");
    let first = relay
        .frame()
        .now_or_never()
        .expect("a frame without waiting for the rest of the answer")
        .expect("the stream goes on")
        .expect("a data frame")
        .into_data()
        .expect("data");
    assert_eq!(first, head.as_bytes()[..first.len()]);

    sender
        .send(Bytes::from(tail.to_owned()))
        .await
        .expect("relay listens");
    drop(sender);
    let mut sent = first.to_vec();
    while let Some(frame) = relay.frame().await {
        sent.extend_from_slice(&frame.expect("frame").into_data().expect("data"));
    }
    assert_eq!(sent, answer.as_bytes(), "the answer, exactly as it arrived");
}

/// Records what it is told of passed messages; it edits nothing.
#[derive(Clone, Default)]
struct Reader {
    passed: Arc<Mutex<Vec<TopLevel>>>,
    needs_whole: bool,
}

impl MessageObserver for Reader {
    fn observe(&mut self, _message: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn needs_whole_messages(&self) -> bool {
        self.needs_whole
    }

    fn passed(&mut self, message: &TopLevel) {
        self.passed
            .lock()
            .expect("not poisoned")
            .push(message.clone());
    }
}

#[tokio::test]
async fn the_observer_learns_what_a_passed_message_is() {
    let padded = format!(
        "data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\",\"params\":{{\"_meta\":{{\"pad\":\"{}\"}}}}}}\n\n",
        "p".repeat(100_000)
    );
    let answer = long_answer(4, 100_000);
    let chunks: Vec<&'static str> = [padded, answer]
        .iter()
        .flat_map(|event| event.as_bytes().chunks(16 * 1024))
        .map(|chunk| &*Box::leak(std::str::from_utf8(chunk).expect("ascii").into()))
        .collect();
    let reader = Reader::default();

    frames(relay(upstream(&chunks), Some(Box::new(reader.clone())))).await;

    let passed = reader.passed.lock().expect("not poisoned").clone();
    assert_eq!(
        passed,
        [
            TopLevel {
                answer_id: None,
                method: Some("notifications/tools/list_changed".to_owned()),
            },
            TopLevel {
                answer_id: Some(RequestId::Number(4)),
                method: None,
            },
        ]
    );
}

#[tokio::test]
async fn an_observer_that_may_edit_sees_a_long_event_whole() {
    let answer = long_answer(1, 200_000);
    let chunks: Vec<&'static str> = answer
        .as_bytes()
        .chunks(16 * 1024)
        .map(|chunk| &*Box::leak(std::str::from_utf8(chunk).expect("ascii").into()))
        .collect();
    let reader = Reader {
        needs_whole: true,
        ..Reader::default()
    };

    let frames = frames(relay(upstream(&chunks), Some(Box::new(reader.clone())))).await;

    assert_eq!(frames, [answer], "one frame, once the event was whole");
    assert!(reader.passed.lock().expect("not poisoned").is_empty());
}

#[tokio::test]
async fn a_passed_answer_settles_its_request_and_a_cut_one_is_no_message_to_the_client() {
    let settled = long_answer(1, 150_000);
    let too_large = long_answer(2, 300_000);
    let chunks: Vec<&'static str> = [settled.clone(), too_large]
        .iter()
        .flat_map(|event| event.as_bytes().chunks(32 * 1024))
        .map(|chunk| &*Box::leak(std::str::from_utf8(chunk).expect("ascii").into()))
        .collect();
    let pending = vec![RequestId::Number(1), RequestId::Number(2)];

    let sent = frames(relay_for(
        upstream(&chunks),
        None,
        &ProxyMetrics::unregistered(),
        pending,
        200_000,
    ))
    .await;

    assert!(sent.len() > 3, "passed in parts: {} frames", sent.len());
    let events = client_events(&sent);
    let kinds: Vec<String> = events.iter().map(event_type).collect();
    assert_eq!(kinds, ["message", CUT_EVENT, "message"], "{kinds:?}");
    let messages: Vec<serde_json::Value> = events
        .iter()
        .filter(|event| event_type(event) == "message")
        .map(|event| serde_json::from_str(&event.data().expect("data")).expect("JSON"))
        .collect();
    assert_eq!(messages[0]["id"], 1);
    assert_eq!(
        messages[0]["result"]["text"].as_str().map(str::len),
        Some(150_000)
    );
    assert_eq!(messages[1]["id"], 2, "only 2 is still owed an answer");
    assert_eq!(messages[1]["error"]["code"], -32603);
}

#[tokio::test(start_paused = true)]
async fn a_passed_event_the_upstream_leaves_unfinished_ends_cut_when_the_stream_goes_idle() {
    let answer = long_answer(1, 100_000);
    let (upstream, body) = live_upstream();
    let mut relay = std::pin::pin!(relay(body, None));
    upstream
        .send(Bytes::from(answer[..80_000].to_owned()))
        .await
        .expect("relay listens");

    let mut sent = Vec::new();
    while let Some(frame) = relay.frame().await {
        let data = frame.expect("frame").into_data().expect("data");
        sent.push(String::from_utf8(data.to_vec()).expect("utf-8"));
    }

    assert!(upstream.is_closed(), "ended for idleness");
    assert!(
        sent[0].starts_with("event: message\ndata: {"),
        "passed: {:?}",
        &sent[0][..30]
    );
    let events = client_events(&sent);
    let kinds: Vec<String> = events.iter().map(event_type).collect();
    assert_eq!(kinds, [CUT_EVENT], "no message reaches the client");
}
