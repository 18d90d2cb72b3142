//! Invariant checks shared by the cargo-fuzz targets in `fuzz/` and the corpus replay tests in
//! `tests/fuzz_corpus.rs`. Not part of the supported API: each function panics when an invariant
//! is broken, which is what a fuzzer reports as a crash.

use crate::sse::{SseDecoder, SseError, SseEvent};
use crate::strict::{ParseLimits, parse_strict_with};

/// Depth limit the `strict_json` target parses with.
pub const STRICT_JSON_MAX_DEPTH: usize = 64;

/// Event size bound the `sse_decoder` target decodes with.
pub const SSE_MAX_EVENT_BYTES: usize = 4096;

/// `strict_json`: parse `data` strictly; an accepted value re-serializes to bytes the strict
/// parser accepts again, as an equal value that serializes to the same bytes.
pub fn check_strict_json(data: &[u8]) {
    let limits = ParseLimits {
        max_depth: STRICT_JSON_MAX_DEPTH,
    };
    let Ok(value) = parse_strict_with(data, &limits) else {
        return;
    };
    let bytes = serde_json::to_vec(&value).expect("a parsed value serializes");
    let again = parse_strict_with(&bytes, &limits).unwrap_or_else(|e| {
        panic!(
            "re-serialization {:?} of an accepted value is refused: {e}",
            String::from_utf8_lossy(&bytes)
        )
    });
    assert_eq!(value, again, "re-parse changed the value");
    let bytes_again = serde_json::to_vec(&again).expect("a parsed value serializes");
    assert_eq!(bytes, bytes_again, "re-serialization is not a fixed point");
}

/// Everything a decoder yields for `chunks`, then the final result once the stream ends
/// (`Ok(())`, or the error that stopped it).
fn decode_all(chunks: &[&[u8]], max_event_bytes: usize) -> (Vec<SseEvent>, Result<(), SseError>) {
    let mut decoder = SseDecoder::new(max_event_bytes);
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => events.push(event),
                Ok(None) => break,
                Err(e) => return (events, Err(e)),
            }
        }
    }
    loop {
        match decoder.finish() {
            Ok(Some(event)) => events.push(event),
            Ok(None) => return (events, Ok(())),
            Err(e) => return (events, Err(e)),
        }
    }
}

/// `sse_decoder`: the first byte chooses where the rest of the input is split into two chunks.
/// Decoding the two chunks gives the same events (and outcome) as decoding the whole input in
/// one chunk; re-encoding the events and decoding that gives the same events again.
pub fn check_sse_decoder(data: &[u8]) {
    let Some((&selector, stream)) = data.split_first() else {
        return;
    };
    let split = if stream.is_empty() {
        0
    } else {
        usize::from(selector) % (stream.len() + 1)
    };
    let (head, tail) = stream.split_at(split);
    let (events, outcome) = decode_all(&[head, tail], SSE_MAX_EVENT_BYTES);
    let (whole_events, whole_outcome) = decode_all(&[stream], SSE_MAX_EVENT_BYTES);
    assert_eq!(
        events, whole_events,
        "chunking at {split} changed the events"
    );
    assert_eq!(
        outcome, whole_outcome,
        "chunking at {split} changed the outcome"
    );

    for event in &events {
        assert!(
            !event.fields.is_empty(),
            "the decoder yielded an empty event"
        );
    }
    let mut encoded = Vec::new();
    for event in &events {
        event.encode(&mut encoded);
    }
    SseEvent::guard_stream_start(&mut encoded);
    // Encoding can grow an event (`data` becomes `data: `), so the bound is the whole buffer.
    let (decoded, result) = decode_all(&[&encoded], encoded.len().max(1));
    assert_eq!(result, Ok(()), "re-encoded events are refused");
    assert_eq!(decoded, events, "re-encoded events decode differently");
}
