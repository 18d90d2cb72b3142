use std::convert::Infallible;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};

use super::{MessageObserver, Observer, SseRelay};
use crate::metrics::ProxyMetrics;

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
    let metrics = ProxyMetrics::unregistered();
    SseRelay::new(body, 1 << 20, metrics.stream_opened("store"), observer)
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
        data.extend(event.data());
    }
    assert_eq!(
        data,
        ["{\"seen\":1}"],
        "the client sees the data the gateway saw, no more"
    );
}
