//! The raw events of the decoder: the bytes an event arrived as, and when they may be passed on.

use std::borrow::Cow;

use proptest::prelude::*;

use super::*;
use crate::sse::tests::{MAX, arb_event, data, ev};

/// Every raw event of `stream`, fed in one chunk.
fn decode_raw(stream: &[u8]) -> Vec<RawEvent> {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(stream);
    let mut events = Vec::new();
    while let Some(event) = decoder.finish_raw().expect("valid") {
        events.push(event);
    }
    events
}

#[test]
fn an_lf_only_event_is_passed_on_as_the_bytes_it_arrived_as() {
    let stream = b"\n\n: hi\nid: 7\ndata: {\"a\":1}\n\nevent: x\ndata:y\nfoo\n\n";
    let events = decode_raw(stream);
    let wires: Vec<&[u8]> = events
        .iter()
        .map(|e| e.wire().expect("LF only").as_ref())
        .collect();
    // Leading blank lines belong to no event; each event ends with its blank line.
    assert_eq!(
        wires,
        [
            &b": hi\nid: 7\ndata: {\"a\":1}\n\n"[..],
            b"event: x\ndata:y\nfoo\n\n"
        ]
    );
    assert!(matches!(events[0].data(), Some(Cow::Borrowed("{\"a\":1}"))));
    assert_eq!(
        events[1].clone().into_event(),
        ev(vec![
            SseField::Event("x".into()),
            data("y"),
            SseField::Other {
                name: "foo".into(),
                value: String::new()
            }
        ])
    );
}

#[test]
fn an_event_with_a_cr_line_end_is_never_passed_on_as_received() {
    for stream in [
        &b"data: a\r\n\r\n"[..],
        b"data: a\rdata: b\n\n",
        b"data: a\n\r",
        b"data: a\r\n\n",
    ] {
        let events = decode_raw(stream);
        assert_eq!(events.len(), 1, "{stream:?}");
        assert!(events[0].wire().is_none(), "{stream:?}");
    }
    // The next event, LF only, is passed on again.
    let events = decode_raw(b"data: a\r\n\r\ndata: b\n\n");
    assert_eq!(
        events[1].wire().map(|b| b.as_ref()),
        Some(&b"data: b\n\n"[..])
    );
}

proptest! {
    #[test]
    fn the_wire_bytes_of_an_encoded_event_are_its_encoding(
        events in prop::collection::vec(arb_event(), 0..6),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut stream = Vec::new();
        for event in &events {
            event.encode(&mut stream);
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut decoder = SseDecoder::new(MAX);
        let mut wires = Vec::new();
        let mut last = 0;
        for p in points.into_iter().chain([stream.len()]) {
            decoder.push(&stream[last..p]);
            last = p;
            while let Some(event) = decoder.next_raw_event().expect("valid") {
                wires.push(event.wire().expect("the encoder writes LF only").to_vec());
            }
        }
        let expected: Vec<Vec<u8>> = events
            .iter()
            .filter(|e| !e.fields.is_empty())
            .map(SseEvent::to_vec)
            .collect();
        prop_assert_eq!(wires, expected);
    }
}
