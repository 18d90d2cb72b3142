use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tokio::sync::mpsc;

use countersign_jsonrpc::message::RequestId;

use super::{MessageObserver, Observer, PendingAnswers, QuietLimits, SseRelay, StreamSettings};
use crate::clock::{Clock, SystemClock};
use crate::metrics::ProxyMetrics;

mod json;
mod passing;
mod passthrough;

const KEEP_ALIVE: Duration = Duration::from_secs(15);
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// An upstream body that delivers `chunks` one frame each.
fn upstream(
    chunks: &[&'static str],
) -> StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>>> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes()))))
        .collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

/// Reads every frame the relay produces, as text.
async fn frames(
    relay: SseRelay<impl http_body::Body<Data = Bytes, Error = Infallible>>,
) -> Vec<String> {
    let mut relay = std::pin::pin!(relay);
    let mut out = Vec::new();
    while let Some(frame) = relay.frame().await {
        let data = frame.expect("relay frame").into_data().expect("data frame");
        out.push(String::from_utf8(data.to_vec()).expect("utf-8"));
    }
    out
}

fn relay<B>(body: B, observer: Option<Observer>) -> SseRelay<B> {
    relay_measured(body, observer, &ProxyMetrics::unregistered())
}

fn relay_measured<B>(body: B, observer: Option<Observer>, metrics: &ProxyMetrics) -> SseRelay<B> {
    relay_for(body, observer, metrics, Vec::new(), 1 << 20)
}

/// A relay of the stream answering the requests `pending`, with events up to `max_event_bytes`.
fn relay_for<B>(
    body: B,
    observer: Option<Observer>,
    metrics: &ProxyMetrics,
    pending: Vec<RequestId>,
    max_event_bytes: usize,
) -> SseRelay<B> {
    let settings = StreamSettings {
        max_event_bytes,
        quiet: QuietLimits {
            keep_alive: KEEP_ALIVE,
            idle_timeout: IDLE_TIMEOUT,
        },
        clock: Arc::new(SystemClock),
    };
    SseRelay::new(
        body,
        &settings,
        metrics,
        "store",
        observer,
        PendingAnswers::new(pending),
    )
}

/// An upstream body the test feeds chunk by chunk; it stays open until the sender is dropped.
fn live_upstream() -> (
    mpsc::Sender<Bytes>,
    StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>>>,
) {
    let (sender, receiver) = mpsc::channel::<Bytes>(4);
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        Some((Ok(Frame::data(chunk)), receiver))
    });
    (sender, StreamBody::new(frames))
}

/// The relay's next frame as text; `None` at its end.
async fn next_frame<B>(relay: &mut std::pin::Pin<&mut SseRelay<B>>) -> Option<String>
where
    B: http_body::Body<Data = Bytes, Error = Infallible>,
{
    let frame = relay.frame().await?.expect("relay frame");
    let data = frame.into_data().expect("data frame");
    Some(String::from_utf8(data.to_vec()).expect("utf-8"))
}

#[tokio::test]
async fn each_complete_event_is_relayed_as_soon_as_it_arrives_with_its_fields() {
    let body = upstream(&[
        "id: 1\nretry: 500\ndata: {\"a\":",
        "1}\n\n: keep-alive\n\ndata: {\"b\":2}\n",
        "\n",
    ]);

    let frames = frames(relay(body, None)).await;

    assert_eq!(
        frames,
        [
            // Nothing is held back past the first event's end, and half an event is not sent.
            "id: 1\nretry: 500\ndata: {\"a\":1}\n\n: keep-alive\n\n",
            "data: {\"b\":2}\n\n",
        ]
    );
}

#[tokio::test]
async fn an_event_cut_off_by_the_end_of_the_stream_is_dropped_as_clients_would() {
    // SSE: an event without its closing blank line is discarded at the end of the stream; the
    // gateway must not complete it into one the client would then act on.
    let frames = frames(relay(
        upstream(&["data: {\"whole\":1}\n\n", "data: {\"cut\":true}\n"]),
        None,
    ))
    .await;
    assert_eq!(frames, ["data: {\"whole\":1}\n\n"]);
}

#[tokio::test]
async fn lines_ended_by_cr_reach_the_client_ended_by_lf() {
    // A client that splits lines on LF only would read `x\rid: 3` as one data line: the event
    // is re-encoded, never passed on with the CRs it arrived with.
    let body = upstream(&["data: {\"a\":1}\r\ndata: x\rid: 3\r\n\r\ndata: {\"b\":2}\n\n"]);
    let frames = frames(relay(body, None)).await;
    assert_eq!(
        frames,
        ["data: {\"a\":1}\ndata: x\nid: 3\n\ndata: {\"b\":2}\n\n"]
    );
}

#[tokio::test]
async fn a_large_event_goes_out_as_its_own_frame_of_the_bytes_that_arrived() {
    let large: &'static str = Box::leak(
        format!("id: 2\ndata:{{\"text\":\"{}\"}}\n\n", "x".repeat(100_000)).into_boxed_str(),
    );
    let (head, tail) = large.split_at(20_000);
    let first: &'static str = Box::leak(format!("data: {{\"n\":1}}\n\n{head}").into_boxed_str());
    let last: &'static str = Box::leak(format!("{tail}data: {{\"n\":3}}\n\n").into_boxed_str());
    let frames = frames(relay(upstream(&[first, last]), None)).await;
    // Small events are gathered, the large one is its own frame, as received (`data:` without
    // a space and all): its first 20,000 bytes are under the length at which a line still
    // arriving is passed on in parts, and the rest completes it.
    assert_eq!(
        frames,
        ["data: {\"n\":1}\n\n", large, "data: {\"n\":3}\n\n"]
    );
}

struct Renamer;

impl MessageObserver for Renamer {
    fn observe(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        (message == br#"{"id":1}"#).then(|| br#"{"id":1,"edited":true}"#.to_vec())
    }
}

#[tokio::test]
async fn the_observer_replaces_only_the_events_it_edits_keeping_their_ids() {
    let body = upstream(&["id: 7\ndata: {\"id\":1}\n\ndata: {\"id\":2}\n\n"]);

    let frames = frames(relay(body, Some(Box::new(Renamer)))).await;

    assert_eq!(
        frames,
        ["id: 7\ndata: {\"id\":1,\"edited\":true}\n\ndata: {\"id\":2}\n\n"]
    );
}

#[tokio::test]
async fn a_field_named_after_a_byte_order_mark_cannot_become_data_at_the_clients_stream_start() {
    // Two BOMs: the gateway's decoder strips one and keeps an unknown field `\u{feff}data`.
    // Re-encoded bare as the client's first bytes, the client would strip that BOM and read a
    // `data` line the gateway never saw as one.
    let body = upstream(&["\u{feff}\u{feff}data: {\"hidden\":true}\n\ndata: {\"seen\":1}\n\n"]);

    let frames = frames(relay(body, None)).await;
    let sent = frames.concat();

    let mut client = countersign_jsonrpc::sse::SseDecoder::new(1 << 20);
    client.push(sent.as_bytes());
    let mut data = Vec::new();
    while let Some(event) = client.next_event().expect("decodes") {
        data.extend(event.data().map(std::borrow::Cow::into_owned));
    }
    assert_eq!(
        data,
        ["{\"seen\":1}"],
        "the client sees the data the gateway saw, no more"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_stream_gets_a_keep_alive_comment_each_interval_until_the_upstream_speaks() {
    let (upstream, body) = live_upstream();
    let relay = relay(body, None);
    let mut relay = std::pin::pin!(relay);
    let start = SystemClock.now();

    assert!(
        relay.frame().now_or_never().is_none(),
        "nothing to send yet"
    );
    assert_eq!(
        next_frame(&mut relay).await.as_deref(),
        Some(": keep-alive\n\n")
    );
    assert_eq!(SystemClock.now() - start, KEEP_ALIVE);
    assert_eq!(
        next_frame(&mut relay).await.as_deref(),
        Some(": keep-alive\n\n")
    );
    assert_eq!(SystemClock.now() - start, KEEP_ALIVE * 2);

    upstream
        .send(Bytes::from_static(b"data: {\"n\":1}\n\n"))
        .await
        .expect("the relay reads on");
    assert_eq!(
        next_frame(&mut relay).await.as_deref(),
        Some("data: {\"n\":1}\n\n")
    );
    assert_eq!(
        next_frame(&mut relay).await.as_deref(),
        Some(": keep-alive\n\n")
    );
    assert_eq!(
        SystemClock.now() - start,
        KEEP_ALIVE * 3,
        "an event sent to the client restarts the keep-alive interval"
    );
}

#[tokio::test(start_paused = true)]
async fn an_upstream_silent_for_the_idle_timeout_is_dropped_and_the_stream_ends_cleanly() {
    let (upstream, body) = live_upstream();
    let metrics = ProxyMetrics::unregistered();
    let relay = relay_measured(body, None, &metrics);
    let mut relay = std::pin::pin!(relay);
    let start = SystemClock.now();

    // Keep-alives go to the client, but only the upstream's own bytes count as it speaking.
    let mut comments = 0;
    while let Some(frame) = next_frame(&mut relay).await {
        assert_eq!(frame, ": keep-alive\n\n");
        comments += 1;
    }

    assert_eq!(SystemClock.now() - start, IDLE_TIMEOUT);
    assert_eq!(comments, 3, "at 15 s, 30 s and 45 s");
    assert!(
        upstream.is_closed(),
        "the upstream body is dropped as the stream ends, closing its connection"
    );
    assert!(next_frame(&mut relay).await.is_none(), "and stays ended");
}

#[tokio::test(start_paused = true)]
async fn upstream_bytes_restart_the_idle_clock_but_half_an_event_is_never_sent() {
    let (upstream, body) = live_upstream();
    let relay = relay(body, None);
    let mut relay = std::pin::pin!(relay);
    let start = SystemClock.now();

    // A keep-alive from the upstream is traffic: it keeps the stream up.
    tokio::time::sleep(IDLE_TIMEOUT - Duration::from_secs(1)).await;
    upstream
        .send(Bytes::from_static(b": upstream ping\n\ndata: {\"cut\":"))
        .await
        .expect("the relay reads on");

    let mut sent = Vec::new();
    while let Some(frame) = next_frame(&mut relay).await {
        sent.push(frame);
    }

    assert_eq!(
        SystemClock.now() - start,
        IDLE_TIMEOUT - Duration::from_secs(1) + IDLE_TIMEOUT,
        "ended one idle timeout after the upstream's last bytes"
    );
    assert!(sent.contains(&": upstream ping\n\n".to_owned()));
    assert!(
        sent.iter().all(|frame| !frame.contains("cut")),
        "the event the upstream never finished is not sent: {sent:?}"
    );
}

/// The JSON-RPC messages in the `data:` lines of `frames`.
fn messages(frames: &[String]) -> Vec<serde_json::Value> {
    frames
        .iter()
        .flat_map(|frame| frame.lines())
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).expect("JSON data"))
        .collect()
}

#[tokio::test]
async fn an_oversized_answer_ends_the_stream_with_a_clear_error_for_the_request() {
    let big = format!(
        "data: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n\n",
        "x".repeat(300)
    );
    let chunks = [
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n",
        Box::leak(big.into_boxed_str()),
    ];
    let body = upstream(&chunks);
    let metrics = ProxyMetrics::unregistered();

    let frames = frames(relay_for(
        body,
        None,
        &metrics,
        vec![RequestId::Number(7.into())],
        256,
    ))
    .await;

    let messages = messages(&frames);
    assert_eq!(
        messages.len(),
        2,
        "the progress notification, then the error: {frames:?}"
    );
    assert_eq!(messages[0]["method"], "notifications/progress");
    assert_eq!(messages[1]["id"], 7);
    assert_eq!(messages[1]["error"]["code"], -32603);
    let text = messages[1]["error"]["message"].as_str().expect("message");
    assert!(
        text.contains("upstream `store`") && text.contains("larger than 256 bytes"),
        "names the upstream and the limit: {text}"
    );
    assert!(frames[1].starts_with("event: message\n"), "{frames:?}");
}

#[tokio::test]
async fn a_cut_stream_answers_only_the_requests_still_waiting() {
    let big = format!("data: {{\"pad\":\"{}\"}}\n\n", "x".repeat(300));
    let chunks = [
        "data: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n\n",
        Box::leak(big.into_boxed_str()),
    ];
    let body = upstream(&chunks);
    let pending = vec![RequestId::String("a".into()), RequestId::String("b".into())];

    let frames = frames(relay_for(
        body,
        None,
        &ProxyMetrics::unregistered(),
        pending,
        256,
    ))
    .await;

    let messages = messages(&frames);
    assert_eq!(messages.len(), 2, "{frames:?}");
    assert_eq!(
        messages[0]["result"],
        serde_json::json!({}),
        "a's own answer"
    );
    assert_eq!(messages[1]["id"], "b", "only b is still owed an answer");
    assert!(messages[1]["error"].is_object());
}

#[tokio::test]
async fn a_cut_stream_with_nothing_pending_just_ends() {
    let big = format!("data: {{\"pad\":\"{}\"}}\n\n", "x".repeat(300));
    let chunks = ["data: {\"n\":1}\n\n", Box::leak(big.into_boxed_str())];
    let body = upstream(&chunks);

    let frames = frames(relay_for(
        body,
        None,
        &ProxyMetrics::unregistered(),
        Vec::new(),
        256,
    ))
    .await;

    assert_eq!(frames, ["data: {\"n\":1}\n\n"]);
}
