use proptest::prelude::*;

use super::{TopLevel, TopLevelScan, answer_id};
use crate::message::{Message, RequestId};
use crate::raw::tests::{arb_envelope, write_text};

#[test]
fn finds_the_id_of_results_and_errors_wherever_it_sits() {
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#,
            Some(RequestId::Number(7)),
        ),
        (
            r#"{"result":{"a":"}\"id\":9"},"jsonrpc":"2.0","id":"x"}"#,
            Some(RequestId::String("x".into())),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"a\u0062","error":{"code":-1,"message":"m"}}"#,
            Some(RequestId::String("ab".into())),
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"result":null}"#,
            Some(RequestId::Number(3)),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(answer_id(text), expected, "{text}");
    }
}

#[test]
fn is_none_for_what_is_not_an_answer() {
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"result":1}}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}"#,
        "not json",
        "[]",
    ] {
        assert_eq!(answer_id(text), None, "{text}");
    }
}

#[test]
fn agrees_with_the_strict_parse_on_every_response_it_accepts() {
    for text in [
        r#"{"jsonrpc":"2.0","id":-12,"result":{"x":[1,2,{"y":"z"}]}}"#,
        r#"{"id":"q","jsonrpc":"2.0","error":{"code":1,"message":"no","data":{"id":5}}}"#,
    ] {
        let strict = match Message::parse(text.as_bytes()).expect("valid") {
            Message::Response(response) => response.id,
            other => panic!("not a response: {other:?}"),
        };
        assert_eq!(answer_id(text), strict, "{text}");
    }
}

#[test]
fn a_member_named_twice_or_brackets_out_of_order_make_no_answer() {
    for text in [
        r#"{"id":1,"id":2,"result":{}}"#,
        r#"{"id":1,"result":{},"result":{}}"#,
        r#"{"id":1,"error":{},"error":{}}"#,
        r#"{"id":1,"result":{"a":[1}]}"#,
        r#"{"id":1,"result":{"a":"unterminated}"#,
        r#"{"id":1,"result":{}} trailing"#,
        r#"{"id":1,"result":}"#,
        r#"{"id":1 "result":{}}"#,
        r#"{"id":1,"result":{},}"#,
    ] {
        assert_eq!(answer_id(text), None, "{text}");
    }
}

#[test]
fn escaped_names_count_and_nesting_is_bounded_as_in_serde_json() {
    assert_eq!(
        answer_id(r#"{"\u0069d":4,"res\u0075lt":{}}"#),
        Some(RequestId::Number(4))
    );
    let nested = |depth: usize| {
        format!(
            r#"{{"id":1,"result":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    assert_eq!(answer_id(&nested(100)), Some(RequestId::Number(1)));
    assert_eq!(answer_id(&nested(200)), None);
}

#[test]
fn a_large_result_with_escaped_quotes_is_passed_over() {
    let text = "a\\\"b".repeat(300_000);
    let message = format!(r#"{{"jsonrpc":"2.0","result":{{"text":"{text}"}},"id":"big"}}"#);
    assert_eq!(answer_id(&message), Some(RequestId::String("big".into())));
}

/// What the scan finds in `text` fed as the pieces that `cuts` (offsets into it) make.
fn scan_in_pieces(text: &[u8], cuts: &[usize]) -> TopLevel {
    let mut scan = TopLevelScan::default();
    for piece in crate::pieces::cut(text, cuts.iter().copied()) {
        scan.feed(piece);
    }
    scan.finish()
}

#[test]
fn names_the_method_of_a_notification_or_request() {
    let method = |text: &str| scan_in_pieces(text.as_bytes(), &[]).method;
    let changed = Some("notifications/tools/list_changed".to_owned());
    assert_eq!(
        method(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
        changed
    );
    assert_eq!(
        method(
            r#"{"params":{"method":"x"},"m\u0065thod":"notifications/tools/list_\u0063hanged","jsonrpc":"2.0"}"#
        ),
        changed
    );
    assert_eq!(method(r#"{"jsonrpc":"2.0","params":{"method":"x"}}"#), None);
    assert_eq!(method(r#"{"method":"a","method":"b"}"#), None);
    assert_eq!(method(r#"{"method":"a""#), None);
    assert_eq!(method(r#"{"method":7}"#), None);
}

#[test]
fn a_backslash_at_the_end_of_a_piece_escapes_the_first_byte_of_the_next() {
    let text = br#"{"result":{"t":"a\\"},"id":"\"x"}"#;
    let whole = scan_in_pieces(text, &[]);
    assert_eq!(whole.answer_id, Some(RequestId::String("\"x".into())));
    for cut in 0..=text.len() {
        assert_eq!(scan_in_pieces(text, &[cut]), whole, "cut at {cut}");
    }
}

#[test]
fn keeps_nothing_of_a_value_too_long_to_be_an_id() {
    let long = "i".repeat(2_000);
    let text = format!(r#"{{"id":"{long}","result":{{}}}}"#);
    assert_eq!(answer_id(&text), None);
    let text = format!(r#"{{"{long}":1,"id":"ok","result":{{}}}}"#);
    assert_eq!(answer_id(&text), Some(RequestId::String("ok".into())));
}

proptest! {
    /// However a message is cut into pieces, the scan reads it as it reads the whole.
    #[test]
    fn any_pieces_read_as_the_whole(
        envelope in arb_envelope(),
        seed in any::<u64>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let text = write_text(&envelope, seed);
        let whole = scan_in_pieces(text.as_bytes(), &[]);
        prop_assert_eq!(scan_in_pieces(text.as_bytes(), &cuts), whole, "{}", text);
    }

    /// Whatever the strict parse reads as a message, this agrees on whether it is a
    /// response and to which id; on anything else it only must not fail.
    #[test]
    fn agrees_with_the_strict_parse(envelope in arb_envelope(), seed in any::<u64>()) {
        let text = write_text(&envelope, seed);
        let expected = match Message::parse(text.as_bytes()) {
            Ok(Message::Response(response)) => response.id,
            Ok(Message::Notification(notification)) => {
                prop_assert_eq!(scan_in_pieces(text.as_bytes(), &[]).method, Some(notification.method));
                None
            }
            Ok(_) => None,
            Err(_) => {
                let _ = answer_id(&text);
                return Ok(());
            }
        };
        prop_assert_eq!(answer_id(&text), expected, "{}", text);
    }
}
