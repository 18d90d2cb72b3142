use proptest::prelude::*;

use super::*;

pub(super) const MAX: usize = 64 * 1024;

/// Decodes a whole stream pushed in the given chunks, including `finish`.
fn decode_chunks<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<SseEvent>, SseError> {
    let mut decoder = SseDecoder::new(MAX);
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        while let Some(event) = decoder.next_event()? {
            events.push(event);
        }
    }
    while let Some(event) = decoder.finish()? {
        events.push(event);
    }
    Ok(events)
}

fn decode(stream: &[u8]) -> Vec<SseEvent> {
    decode_chunks([stream]).expect("valid stream")
}

pub(super) fn data(s: &str) -> SseField {
    SseField::Data(s.to_owned())
}

pub(super) fn ev(fields: Vec<SseField>) -> SseEvent {
    SseEvent { fields }
}

const MIXED_STREAM: &[u8] = b"\xEF\xBB\xBF: hello\r\n\r\nid: 1\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n\r\nid: prime\ndata: \n\nretry: 3000\rdata:a\rdata:  b\r\rfoo: bar\ndata\n\n:\n\n";

fn mixed_stream_events() -> Vec<SseEvent> {
    vec![
        ev(vec![SseField::Comment("hello".into())]),
        ev(vec![
            SseField::Id("1".into()),
            SseField::Event("message".into()),
            data(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        ]),
        ev(vec![SseField::Id("prime".into()), data("")]),
        ev(vec![SseField::Retry("3000".into()), data("a"), data(" b")]),
        ev(vec![
            SseField::Other {
                name: "foo".into(),
                value: "bar".into(),
            },
            data(""),
        ]),
        ev(vec![SseField::Comment(String::new())]),
    ]
}

#[test]
fn mixed_stream_decodes_every_field_in_order() {
    assert_eq!(decode(MIXED_STREAM), mixed_stream_events());
}

#[test]
fn lf_crlf_and_cr_line_ends_are_equivalent() {
    let lf = decode(b"event: message\ndata: x\n\n");
    let crlf = decode(b"event: message\r\ndata: x\r\n\r\n");
    let cr = decode(b"event: message\rdata: x\r\r");
    assert_eq!(lf, crlf);
    assert_eq!(lf, cr);
    assert_eq!(lf.len(), 1);
}

#[test]
fn cr_at_chunk_end_and_lf_at_next_chunk_start_is_one_line_end() {
    let events = decode_chunks([&b"data: a\r"[..], b"\ndata: b\r", b"\n\r", b"\n"]).expect("valid");
    assert_eq!(events, [ev(vec![data("a"), data("b")])]);
}

#[test]
fn event_terminated_by_cr_is_delivered_before_the_next_chunk() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: a\r\r");
    assert_eq!(decoder.next_event(), Ok(Some(ev(vec![data("a")]))));
    assert_eq!(decoder.next_event(), Ok(None));
    decoder.push(b"\ndata: b\n\n");
    assert_eq!(decoder.next_event(), Ok(Some(ev(vec![data("b")]))));
}

#[test]
fn leading_bom_is_stripped_once() {
    assert_eq!(decode(b"\xEF\xBB\xBFdata: x\n\n"), [ev(vec![data("x")])]);
    let events = decode(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n");
    assert_eq!(
        events,
        [ev(vec![SseField::Other {
            name: "\u{feff}data".into(),
            value: "x".into()
        }])]
    );
}

#[test]
fn bom_split_across_chunks_is_stripped() {
    let events = decode_chunks([&b"\xEF"[..], b"\xBB", b"\xBFdata: x\n\n"]).expect("valid stream");
    assert_eq!(events, [ev(vec![data("x")])]);
}

#[test]
fn bom_later_in_the_stream_is_kept() {
    let events = decode(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n");
    assert_eq!(events.len(), 2);
    assert!(matches!(&events[1].fields[0], SseField::Other { name, .. } if name == "\u{feff}data"));
}

#[test]
fn exactly_one_space_after_the_colon_is_stripped() {
    assert_eq!(
        decode(b"data:x\ndata: x\ndata:  x\ndata:\n\n"),
        [ev(vec![data("x"), data("x"), data(" x"), data("")])]
    );
}

#[test]
fn line_without_colon_is_a_field_with_empty_value() {
    assert_eq!(
        decode(b"data\nevent\nid\n\n"),
        [ev(vec![
            data(""),
            SseField::Event(String::new()),
            SseField::Id(String::new())
        ])]
    );
}

#[test]
fn only_the_first_colon_separates_name_and_value() {
    assert_eq!(decode(b"data: a: b:c\n\n"), [ev(vec![data("a: b:c")])]);
}

#[test]
fn field_names_are_case_sensitive() {
    assert_eq!(
        decode(b"Data: x\n\n"),
        [ev(vec![SseField::Other {
            name: "Data".into(),
            value: "x".into()
        }])]
    );
}

#[test]
fn blank_lines_without_fields_produce_no_event() {
    assert_eq!(decode(b"\n\n\r\n\rdata: x\n\n\n\n"), [ev(vec![data("x")])]);
}

#[test]
fn priming_event_keeps_id_and_empty_data() {
    let events = decode(b"id: 7f1c\ndata: \n\n");
    assert_eq!(events, [ev(vec![SseField::Id("7f1c".into()), data("")])]);
    let event = &events[0];
    assert_eq!(event.id(), Some("7f1c"));
    assert_eq!(event.data().as_deref(), Some(""));
    assert_eq!(event.to_vec(), b"id: 7f1c\ndata: \n\n");
}

#[test]
fn retry_is_parsed_only_when_all_digits() {
    assert_eq!(decode(b"retry: 1500\n\n")[0].retry(), Some(1500));
    assert_eq!(decode(b"retry: 15x\n\n")[0].retry(), None);
    assert_eq!(decode(b"retry:\n\n")[0].retry(), None);
    assert_eq!(decode(b"retry: 10\nretry: x\n\n")[0].retry(), Some(10));
    assert_eq!(decode(b"retry: 15x\n\n")[0].to_vec(), b"retry: 15x\n\n");
}

#[test]
fn comments_are_kept_and_detected() {
    let events = decode(b": keep-alive\n\n:\n: a\n\n: c\ndata: x\n\n");
    assert!(events[0].is_comment_only());
    assert!(events[1].is_comment_only());
    assert!(!events[2].is_comment_only());
    assert_eq!(events[0].data(), None);
    assert_eq!(events[0].to_vec(), b": keep-alive\n\n");
    assert_eq!(events[1].to_vec(), b":\n: a\n\n");
    assert!(!SseEvent::default().is_comment_only());
}

#[test]
fn data_lines_join_with_newline() {
    let event = &decode(b"data: {\"a\":\ndata: 1}\n\n")[0];
    assert_eq!(event.data().as_deref(), Some("{\"a\":\n1}"));
}

#[test]
fn event_without_data_has_no_data() {
    assert_eq!(decode(b"event: message\nid: 1\n\n")[0].data(), None);
}

#[test]
fn last_event_and_id_fields_win_and_nul_ids_are_ignored() {
    let event = &decode(b"event: a\nevent: b\nid: 1\nid: 2\n\n")[0];
    assert_eq!(event.event_type(), Some("b"));
    assert_eq!(event.id(), Some("2"));
    let event = &decode(b"id: 1\nid: x\0y\n\n")[0];
    assert_eq!(event.id(), Some("1"));
    assert_eq!(decode(b"data: x\n\n")[0].event_type(), None);
}

#[test]
fn invalid_utf8_is_an_error_and_stays_one() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: \xFF\n\n");
    assert_eq!(decoder.next_event(), Err(SseError::InvalidUtf8));
    decoder.push(b"data: fine\n\n");
    assert_eq!(decoder.next_event(), Err(SseError::InvalidUtf8));
    assert_eq!(decoder.finish(), Err(SseError::InvalidUtf8));
}

#[test]
fn utf8_split_across_chunks_is_fine() {
    let bytes = "data: 世界\n\n".as_bytes();
    for cut in 0..bytes.len() {
        let events = decode_chunks([&bytes[..cut], &bytes[cut..]]).expect("valid");
        assert_eq!(events, [ev(vec![data("世界")])]);
    }
}

#[test]
fn bad_utf8_in_a_line_still_arriving_is_reported_when_the_line_ends() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: ab\xFF");
    assert_eq!(decoder.next_event(), Ok(None));
    decoder.push(b"cd");
    assert_eq!(decoder.next_event(), Ok(None));
    decoder.push(b"\n\n");
    assert_eq!(decoder.next_event(), Err(SseError::InvalidUtf8));

    // A character cut off by the chunk and never completed, and one cut off by the line end.
    for chunks in [
        [&b"data: \xE4\xB8"[..], b"A\n\n"],
        [&b"data: x\xE4"[..], b"\xB8\n\n"],
    ] {
        assert_eq!(decode_chunks(chunks), Err(SseError::InvalidUtf8));
    }

    // A trailing line the stream never ends is discarded unread, whatever its bytes.
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: x\n\ndata: \xFF\xFE");
    assert_eq!(decoder.next_event(), Ok(Some(ev(vec![data("x")]))));
    assert_eq!(decoder.finish(), Ok(None));
    assert!(decoder.discarded_partial());
}

#[test]
fn event_larger_than_limit_is_rejected() {
    let mut decoder = SseDecoder::new(16);
    decoder.push(b"data: 0123456789\n");
    assert_eq!(
        decoder.next_event(),
        Err(SseError::EventTooLarge { max: 16 })
    );
    assert_eq!(
        decoder.next_event(),
        Err(SseError::EventTooLarge { max: 16 })
    );
}

#[test]
fn many_small_lines_add_up_to_the_limit() {
    let mut decoder = SseDecoder::new(32);
    decoder.push(b"data: a\ndata: b\ndata: c\ndata: d\n");
    assert_eq!(decoder.next_event(), Ok(None));
    decoder.push(b"data: e\n");
    assert_eq!(
        decoder.next_event(),
        Err(SseError::EventTooLarge { max: 32 })
    );
}

#[test]
fn endless_comment_lines_without_blank_line_hit_the_limit() {
    let mut decoder = SseDecoder::new(1024);
    let mut result = Ok(None);
    for _ in 0..200 {
        decoder.push(b": ping\n");
        result = decoder.next_event();
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(SseError::EventTooLarge { max: 1024 }));
}

#[test]
fn unterminated_line_over_the_limit_is_rejected_before_its_end() {
    let mut decoder = SseDecoder::new(100);
    decoder.push(&[b'x'; 60]);
    assert_eq!(decoder.next_event(), Ok(None));
    decoder.push(&[b'x'; 60]);
    assert_eq!(
        decoder.next_event(),
        Err(SseError::EventTooLarge { max: 100 })
    );
}

#[test]
fn size_limit_resets_between_events() {
    let mut decoder = SseDecoder::new(16);
    for _ in 0..10 {
        decoder.push(b"data: 01234\n\n");
        assert!(decoder.next_event().expect("within limit").is_some());
    }
}

#[test]
fn finish_discards_an_unterminated_event() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: a\n\ndata: b\n");
    assert_eq!(decoder.next_event(), Ok(Some(ev(vec![data("a")]))));
    assert_eq!(decoder.finish(), Ok(None));
    assert!(decoder.discarded_partial());

    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: a\n\ndata: b");
    assert_eq!(decoder.next_event(), Ok(Some(ev(vec![data("a")]))));
    assert_eq!(decoder.finish(), Ok(None));
    assert!(decoder.discarded_partial());
}

#[test]
fn finish_returns_buffered_complete_events_first() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: a\n\ndata: b\r\r");
    assert_eq!(decoder.finish(), Ok(Some(ev(vec![data("a")]))));
    assert_eq!(decoder.finish(), Ok(Some(ev(vec![data("b")]))));
    assert_eq!(decoder.finish(), Ok(None));
    assert!(!decoder.discarded_partial());
}

#[test]
fn finish_on_a_clean_stream_discards_nothing() {
    let mut decoder = SseDecoder::new(MAX);
    decoder.push(b"data: a\n\n");
    assert!(decoder.next_event().expect("valid").is_some());
    assert_eq!(decoder.finish(), Ok(None));
    assert!(!decoder.discarded_partial());
    assert_eq!(decode_chunks([]).expect("empty stream"), []);
}

#[test]
fn decoded_events_reencode_with_lf_line_ends() {
    let mut out = Vec::new();
    for event in decode(MIXED_STREAM) {
        event.encode(&mut out);
    }
    assert_eq!(
        out,
        b": hello\n\nid: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\nid: prime\ndata: \n\nretry: 3000\ndata: a\ndata:  b\n\nfoo: bar\ndata: \n\n:\n\n"
    );
    assert_eq!(decode(&out), mixed_stream_events());
}

#[test]
fn message_constructor_has_event_type_data_and_no_id() {
    let event = SseEvent::message(r#"{"jsonrpc":"2.0","method":"ping","id":"countersign-1"}"#);
    assert_eq!(event.event_type(), Some("message"));
    assert_eq!(event.id(), None);
    assert!(!event.fields.iter().any(|f| matches!(f, SseField::Id(_))));
    assert_eq!(
        event.to_vec(),
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":\"countersign-1\"}\n\n"
    );
}

#[test]
fn message_constructor_splits_multiline_json() {
    let json = "{\n  \"a\": 1\r\n}";
    let event = SseEvent::message(json);
    assert_eq!(
        event.fields,
        [
            SseField::Event("message".into()),
            data("{"),
            data("  \"a\": 1"),
            data("}")
        ]
    );
    assert_eq!(event.data().as_deref(), Some("{\n  \"a\": 1\n}"));
    assert_eq!(
        SseEvent::message("").fields,
        [SseField::Event("message".into()), data("")]
    );
}

#[test]
fn encoding_never_injects_lines_from_field_values() {
    let event = ev(vec![
        SseField::Id("1\n\ndata: injected".into()),
        SseField::Event("message\r\nid: 2".into()),
        data("a\nb\r\nc\rd"),
        SseField::Comment("x\ndata: y".into()),
        SseField::Other {
            name: "na:me\n".into(),
            value: "v\n\n".into(),
        },
    ]);
    let bytes = event.to_vec();
    let decoded = decode(&bytes);
    assert_eq!(decoded.len(), 1, "{}", String::from_utf8_lossy(&bytes));
    let decoded = &decoded[0];
    assert_eq!(decoded.id(), Some("1data: injected"));
    assert_eq!(decoded.event_type(), Some("messageid: 2"));
    assert_eq!(decoded.data().as_deref(), Some("a\nb\nc\nd"));
    assert!(
        decoded
            .fields
            .contains(&SseField::Comment("data: y".into()))
    );
}

#[test]
fn empty_event_encodes_to_nothing() {
    assert!(SseEvent::default().to_vec().is_empty());
}

#[test]
fn splitting_at_every_byte_boundary_gives_the_same_events() {
    let expected = decode(MIXED_STREAM);
    for cut in 0..=MIXED_STREAM.len() {
        let (a, b) = MIXED_STREAM.split_at(cut);
        assert_eq!(
            decode_chunks([a, b]).expect("valid"),
            expected,
            "cut at {cut}"
        );
    }
    for first in 0..=MIXED_STREAM.len() {
        for second in first..=MIXED_STREAM.len() {
            let chunks = [
                &MIXED_STREAM[..first],
                &MIXED_STREAM[first..second],
                &MIXED_STREAM[second..],
            ];
            assert_eq!(decode_chunks(chunks).expect("valid"), expected);
        }
    }
}

#[test]
fn byte_at_a_time_gives_the_same_events() {
    let expected = decode(MIXED_STREAM);
    let chunks = MIXED_STREAM.chunks(1);
    assert_eq!(decode_chunks(chunks).expect("valid"), expected);
}

#[test]
fn many_small_chunks_decode_in_linear_time() {
    // A 4 MiB event fed one byte at a time: a decoder that rescans its buffer per push would
    // do ~10^13 byte visits here.
    let size = 4 * 1024 * 1024;
    let mut decoder = SseDecoder::new(size + 64);
    let started = std::time::Instant::now();
    decoder.push(b"data: ");
    for _ in 0..size {
        decoder.push(b"x");
        assert_eq!(decoder.next_event(), Ok(None));
    }
    decoder.push(b"\n\n");
    let event = decoder
        .next_event()
        .expect("valid")
        .expect("complete event");
    assert_eq!(event.data().map(|d| d.len()), Some(size));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn many_events_in_small_chunks_keep_the_buffer_small() {
    let mut decoder = SseDecoder::new(MAX);
    let mut seen = 0;
    for i in 0..20_000 {
        let event = format!("id: {i}\ndata: {{\"n\":{i}}}\n\n");
        for chunk in event.as_bytes().chunks(3) {
            decoder.push(chunk);
            while decoder.next_event().expect("valid").is_some() {
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 20_000);
    assert!(decoder.buf.capacity() < 4096, "{}", decoder.buf.capacity());
}

pub(super) fn arb_field() -> impl Strategy<Value = SseField> {
    let value = "[^\r\n]{0,12}";
    prop_oneof![
        value.prop_map(SseField::Comment),
        value.prop_map(SseField::Event),
        value.prop_map(SseField::Data),
        value.prop_map(SseField::Id),
        "[0-9]{0,5}".prop_map(SseField::Retry),
        ("[a-z]{1,6}", value).prop_filter_map("standard name", |(name, value)| {
            (!["event", "data", "id", "retry"].contains(&name.as_str()))
                .then_some(SseField::Other { name, value })
        }),
    ]
}

pub(super) fn arb_event() -> impl Strategy<Value = SseEvent> {
    prop::collection::vec(arb_field(), 1..6).prop_map(|fields| SseEvent { fields })
}

proptest! {
    /// Lines are checked for UTF-8 as they arrive; however a stream is cut into chunks, its
    /// events and its failure are those of the stream pushed whole.
    #[test]
    fn chunking_never_changes_what_a_stream_decodes_to(
        stream in prop::collection::vec(
            prop_oneof![
                Just(b'\n'), Just(b'\r'), Just(b' '), Just(b':'), Just(b'd'),
                Just(0xE4), Just(0xB8), Just(0x96), Just(0xF0), Just(0x9F), Just(0xFF),
                any::<u8>(),
            ],
            0..64,
        ),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut stream = [b"data: ".as_slice(), &stream].concat();
        stream.extend_from_slice(b"\n\n");
        let chunks = crate::pieces::cut(&stream, cuts.iter().map(|cut| cut.index(stream.len() + 1)));
        prop_assert_eq!(decode_chunks(chunks), decode_chunks([stream.as_slice()]));
    }

    #[test]
    fn encoded_events_decode_to_themselves(events in prop::collection::vec(arb_event(), 0..6)) {
        let mut stream = Vec::new();
        for event in &events {
            event.encode(&mut stream);
        }
        // Exact, including values that start with a space: the encoder writes `name: value`
        // and the decoder strips exactly that one space.
        prop_assert_eq!(decode(&stream), events);
    }

    #[test]
    fn any_chunking_gives_the_same_events(
        events in prop::collection::vec(arb_event(), 1..5),
        line_end in prop_oneof![Just("\n"), Just("\r"), Just("\r\n")],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut lf = Vec::new();
        for event in &events {
            event.encode(&mut lf);
        }
        let text = String::from_utf8(lf).expect("utf-8").replace('\n', line_end);
        let stream = text.as_bytes();
        let expected = decode(stream);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut last = 0;
        for p in points {
            chunks.push(&stream[last..p]);
            last = p;
        }
        chunks.push(&stream[last..]);
        prop_assert_eq!(decode_chunks(chunks).expect("valid"), expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..32), 0..8)) {
        let _ = decode_chunks(chunks.iter().map(Vec::as_slice));
    }
}
