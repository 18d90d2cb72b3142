use bytes::Bytes;
use proptest::prelude::*;

use super::{CUT_EVENT, PASS_FROM_BYTES, Piece};
use crate::sse::{SseDecoder, SseError};

const MAX: usize = 1 << 20;

/// What a relay passing long data sends on, and the messages it reads.
#[derive(Debug, Default, PartialEq, Eq)]
struct Relayed {
    /// Every byte sent on, in order.
    wire: Vec<u8>,
    /// The data of each event, whole or passed.
    messages: Vec<Vec<u8>>,
    /// Events passed on in parts.
    passed: usize,
    /// The most bytes one part carried.
    largest_part: usize,
}

impl Relayed {
    fn take(&mut self, passing: &mut Option<Vec<u8>>, piece: Piece) {
        match piece {
            Piece::Event(event) => {
                self.wire
                    .extend_from_slice(event.wire().expect("LF stream"));
                self.messages.push(
                    event
                        .data()
                        .map(|data| data.as_bytes().to_vec())
                        .unwrap_or_default(),
                );
            }
            Piece::Part(part) => {
                let data = passing.get_or_insert_with(Vec::new);
                part.data().for_each(|piece| data.extend_from_slice(piece));
                self.largest_part = self.largest_part.max(part.wire().len());
                self.wire.extend_from_slice(part.wire());
                if part.ends_event() {
                    self.passed += 1;
                    self.messages.extend(passing.take());
                }
            }
        }
    }
}

/// Relays `stream` pushed in `chunks`-byte chunks, passing long data on.
fn relay(stream: &[u8], chunk: usize) -> Result<Relayed, (SseError, Relayed)> {
    let mut decoder = SseDecoder::new(MAX);
    let mut relayed = Relayed::default();
    let mut passing = None;
    for piece in stream.chunks(chunk) {
        decoder.push_bytes(Bytes::copy_from_slice(piece));
        loop {
            match decoder.next_piece(true) {
                Ok(Some(piece)) => relayed.take(&mut passing, piece),
                Ok(None) => break,
                Err(error) => return Err((error, relayed)),
            }
        }
    }
    loop {
        match decoder.finish_piece(true) {
            Ok(Some(piece)) => relayed.take(&mut passing, piece),
            Ok(None) => return Ok(relayed),
            Err(error) => return Err((error, relayed)),
        }
    }
}

fn large_event(id: u32, bytes: usize) -> (Vec<u8>, Vec<u8>) {
    let message = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"text":"{}"}}}}"#,
        "y".repeat(bytes)
    );
    let event = format!("event: message\nid: {id}\ndata: {message}\n\n");
    (event.into_bytes(), message.into_bytes())
}

#[test]
fn a_long_data_line_is_passed_on_in_parts_exactly_as_it_arrived() {
    let (large, message) = large_event(1, 300_000);
    let stream = [&b"data: {\"n\":0}\n\n"[..], &large, b"data: {\"n\":2}\n\n"].concat();

    let relayed = relay(&stream, 16 * 1024).expect("valid stream");

    assert_eq!(relayed.wire, stream);
    assert_eq!(
        relayed.messages,
        [b"{\"n\":0}".to_vec(), message, b"{\"n\":2}".to_vec()]
    );
    assert_eq!(relayed.passed, 1);
    assert!(
        relayed.largest_part <= 2 * PASS_FROM_BYTES,
        "{}",
        relayed.largest_part
    );
}

#[test]
fn an_event_under_the_threshold_or_without_passing_is_held_whole() {
    let (small, _) = large_event(1, PASS_FROM_BYTES / 2);
    assert_eq!(relay(&small, 1024).expect("valid").passed, 0);

    let (large, message) = large_event(2, 3 * PASS_FROM_BYTES);
    let mut decoder = SseDecoder::new(MAX);
    let mut events = Vec::new();
    for piece in large.chunks(4096) {
        decoder.push_bytes(Bytes::copy_from_slice(piece));
        while let Some(piece) = decoder.next_piece(false).expect("valid") {
            events.push(piece);
        }
    }
    let [Piece::Event(event)] = &events[..] else {
        panic!("held whole: {events:?}");
    };
    assert_eq!(event.data().expect("data").as_bytes(), message);
}

#[test]
fn a_chunk_inside_the_passing_line_goes_on_as_the_same_bytes() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(format!("data: {}", "a".repeat(PASS_FROM_BYTES)).as_bytes());
    let Some(Piece::Part(_)) = decoder.next_piece(true).expect("valid") else {
        panic!("passing starts");
    };
    let chunk = Bytes::from("b".repeat(100_000));
    decoder.push_bytes(chunk.clone());
    let Some(Piece::Part(part)) = decoder.next_piece(true).expect("valid") else {
        panic!("the chunk is passed");
    };
    assert_eq!(part.wire().as_ptr(), chunk.as_ptr(), "not copied");
    assert_eq!(part.wire().len(), chunk.len());
}

#[test]
fn line_ends_of_a_passed_event_go_on_as_lf() {
    let line = "z".repeat(PASS_FROM_BYTES + 10);
    let stream = format!("data: {line}\r\nid: 3\rdata: tail\r\n\r\n");
    let relayed = relay(stream.as_bytes(), 8192).expect("valid stream");
    assert_eq!(relayed.passed, 1);
    assert_eq!(
        relayed.wire,
        format!("data: {line}\nid: 3\ndata: tail\n\n").into_bytes()
    );
    assert_eq!(relayed.messages, [format!("{line}\ntail").into_bytes()]);
}

#[test]
fn bytes_that_are_not_utf8_are_never_passed_and_cut_the_event() {
    let mut stream = format!("data: {}", "x".repeat(PASS_FROM_BYTES + 10_000)).into_bytes();
    stream.extend_from_slice(b"ok\xff more\n\n");
    let (error, relayed) = relay(&stream, 4096).expect_err("not UTF-8");
    assert_eq!(error, SseError::InvalidUtf8);
    assert!(!relayed.wire.contains(&0xff));
    assert!(relayed.wire.len() > PASS_FROM_BYTES, "passing had started");
}

#[test]
fn an_event_past_the_bound_is_refused_while_it_is_passed() {
    let (large, _) = large_event(1, MAX + 1);
    let (error, relayed) = relay(&large, 64 * 1024).expect_err("too large");
    assert_eq!(error, SseError::EventTooLarge { max: MAX });
    assert!(relayed.wire.len() <= MAX, "{}", relayed.wire.len());
}

#[test]
fn a_cut_event_ends_as_one_no_client_reads_as_a_message() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"event: message\n");
    decoder.push(format!("data: {}", "q".repeat(PASS_FROM_BYTES)).as_bytes());
    assert!(matches!(decoder.next_piece(true), Ok(Some(Piece::Part(_)))));
    let cut = decoder
        .cut_passed_event()
        .expect("an event was being passed");
    assert_eq!(cut, format!("\nevent: {CUT_EVENT}\n\n"));
    assert_eq!(decoder.cut_passed_event(), None);

    // The stream ending inside the event cuts it the same way, as its last part.
    let (large, _) = large_event(1, 2 * PASS_FROM_BYTES);
    let relayed = relay(&large[..large.len() - 10], 8192).expect("valid so far");
    assert!(
        relayed
            .wire
            .ends_with(format!("\nevent: {CUT_EVENT}\n\n").as_bytes())
    );
    assert_eq!(relayed.passed, 1);
}

proptest! {
    /// However a stream of small and long events is chunked, passing sends on exactly its bytes
    /// and reads exactly its messages, as holding every event would.
    #[test]
    fn chunking_never_changes_what_is_sent_or_read(
        sizes in proptest::collection::vec(prop_oneof![0usize..100, 60_000usize..140_000], 1..5),
        chunk in 1_000usize..70_000,
    ) {
        let mut stream = Vec::new();
        let mut messages = Vec::new();
        for (id, size) in sizes.iter().enumerate() {
            let (event, message) = large_event(id as u32, *size);
            stream.extend_from_slice(&event);
            messages.push(message);
        }
        let relayed = relay(&stream, chunk).expect("valid stream");
        prop_assert_eq!(&relayed.wire, &stream);
        prop_assert_eq!(&relayed.messages, &messages);
    }
}
