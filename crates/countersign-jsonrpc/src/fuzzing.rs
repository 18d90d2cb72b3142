//! Invariant checks shared by the cargo-fuzz targets in `fuzz/` and the corpus replay tests in
//! `tests/fuzz_corpus.rs`. Not part of the supported API: each function panics when an invariant
//! is broken, which is what a fuzzer reports as a crash.

use bytes::Bytes;
use serde_json::{Map, Number, Value};

use crate::message::{Error, Message, Payload};
use crate::raw::{Kind, RawJson};
use crate::sse::{SseDecoder, SseError, SseEvent};
use crate::strict::{ParseLimits, parse_strict_with};

/// Depth limit the `strict_json` target parses with.
pub const STRICT_JSON_MAX_DEPTH: usize = 64;

/// Event size bound the `sse_decoder` target decodes with.
pub const SSE_MAX_EVENT_BYTES: usize = 4096;

/// Objects up to this many members also have every member looked up with `get` (quadratic).
const GET_CHECK_MAX_MEMBERS: usize = 256;

/// `strict_json`: parse `data` strictly; an accepted value re-serializes to bytes the strict
/// parser accepts again, as an equal value that serializes to the same bytes.
///
/// The lazy reading agrees with the tree: [`RawJson::parse`] accepts exactly what
/// `parse_strict_with` accepts (refusing with the same error), its `to_value` is the tree, and
/// walking it with `members`/`items` rebuilds the tree in member order. [`Payload::parse_with`]
/// of the same bytes refuses with that parse error or judges the envelope without panicking,
/// and an accepted payload re-serializes to an equal payload at a fixed point.
pub fn check_strict_json(data: &[u8]) {
    let limits = ParseLimits {
        max_depth: STRICT_JSON_MAX_DEPTH,
    };
    let strict = parse_strict_with(data, &limits);
    let lazy = RawJson::parse(Bytes::copy_from_slice(data), &limits);
    assert_eq!(
        strict.as_ref().err(),
        lazy.as_ref().err(),
        "RawJson::parse and parse_strict disagree"
    );
    check_payload(data, &limits, strict.as_ref().err());
    let (Ok(value), Ok(lazy)) = (strict, lazy) else {
        return;
    };
    assert_same_tree(&lazy.to_value(), &value, "RawJson::to_value");
    assert_same_tree(&walk(&lazy), &value, "walking RawJson");
    check_gets(&lazy);
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

/// [`Payload::parse_with`] refuses exactly the bytes the strict parser refuses (with its error);
/// an accepted payload round-trips through its canonical serialization.
fn check_payload(data: &[u8], limits: &ParseLimits, parse_error: Option<&crate::ParseError>) {
    let parsed = Payload::parse_with(Bytes::copy_from_slice(data), limits);
    // The envelope reads the top-level members the strict scan noted; walking the parsed text
    // instead must come to the same message or the same refusal.
    if let Ok(raw) = RawJson::parse(Bytes::copy_from_slice(data), limits) {
        let walked = Payload::from_raw(&raw).map_err(Error::Envelope);
        assert_eq!(parsed, walked, "the noted members and a walk disagree");
    }
    let payload = match parsed {
        Ok(payload) => payload,
        Err(Error::Parse(e)) => {
            assert_eq!(
                Some(&e),
                parse_error,
                "Payload::parse_with refused valid json"
            );
            return;
        }
        Err(Error::Envelope(_)) => {
            assert_eq!(parse_error, None, "envelope judged invalid json");
            return;
        }
    };
    assert_eq!(
        parse_error, None,
        "Payload::parse_with accepted invalid json"
    );
    let bytes = payload.to_vec();
    let again = Payload::parse_with(Bytes::from(bytes.clone()), limits).unwrap_or_else(|e| {
        panic!(
            "re-serialization {:?} of an accepted payload is refused: {e}",
            String::from_utf8_lossy(&bytes)
        )
    });
    // What is forwarded is minified: the re-parse holds the minified params and results.
    assert_eq!(minified(&payload), again, "re-parse changed the payload");
    assert_eq!(
        bytes,
        again.to_vec(),
        "payload re-serialization is not a fixed point"
    );
}

/// `payload` with its params, results and error data minified, as its re-serialization holds.
fn minified(payload: &Payload) -> Payload {
    let minify = |m: &Message| match m.clone() {
        Message::Request(mut r) => {
            r.params = r.params.as_deref().map(|p| RawJson::minified(p).into());
            Message::Request(r)
        }
        Message::Notification(mut n) => {
            n.params = n.params.as_deref().map(|p| RawJson::minified(p).into());
            Message::Notification(n)
        }
        Message::Response(mut r) => {
            r.outcome = match r.outcome {
                Ok(result) => Ok(result.minified()),
                Err(mut error) => {
                    error.data = error.data.as_ref().map(RawJson::minified);
                    Err(error)
                }
            };
            Message::Response(r)
        }
    };
    match payload {
        Payload::Single(m) => Payload::Single(minify(m)),
        Payload::Batch(ms) => Payload::Batch(ms.iter().map(minify).collect()),
    }
}

/// Rebuilds the tree from the scanner alone. Recursion is bounded by the parse depth limit.
fn walk(value: &RawJson) -> Value {
    match value.kind() {
        Kind::Null => {
            assert_eq!(value.as_bytes(), b"null", "null kind");
            Value::Null
        }
        Kind::Bool => Value::Bool(value.as_bool().expect("a bool reads as one")),
        Kind::Number => {
            let text = value.number_text().expect("a number has number text");
            Value::Number(text.parse::<Number>().unwrap_or_else(|e| {
                panic!("scanned number {text:?} does not parse: {e}");
            }))
        }
        Kind::String => Value::String(value.as_str().expect("a string reads as one").into_owned()),
        Kind::Array => Value::Array(
            value
                .items()
                .expect("an array has items")
                .map(|item| walk(&item))
                .collect(),
        ),
        Kind::Object => {
            let mut map = Map::new();
            for (key, member) in value.members().expect("an object has members") {
                let key = key.into_owned();
                let member = walk(&member);
                assert!(
                    map.insert(key.clone(), member).is_none(),
                    "member {key:?} scanned twice"
                );
            }
            Value::Object(map)
        }
    }
}

/// Equal values with equal serializations: `Map`'s `==` ignores member order.
fn assert_same_tree(got: &Value, expected: &Value, what: &str) {
    assert_eq!(got, expected, "{what} differs from the strict tree");
    let got = serde_json::to_vec(got).expect("a value serializes");
    let expected = serde_json::to_vec(expected).expect("a value serializes");
    assert_eq!(got, expected, "{what} changed the member order");
}

/// `get` finds each member of each (not too wide) object as the member itself.
fn check_gets(value: &RawJson) {
    if let Some(members) = value.members() {
        let wide = value.members().into_iter().flatten().count() > GET_CHECK_MAX_MEMBERS;
        for (key, member) in members {
            if !wide {
                assert_eq!(value.get(&key).as_ref(), Some(&member), "get({key:?})");
            }
            check_gets(&member);
        }
    } else if let Some(items) = value.items() {
        for item in items {
            check_gets(&item);
        }
    }
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
