//! Which request a relayed answer settles, read without parsing the answer's result.
//!
//! A relay that has to answer every request still open when it cuts a stream needs to know, for
//! each upstream message, whether it is a response and to which id. That is asked of every
//! answer relayed on a stream, up to 16 MiB each, so only the top level is read: each value is
//! passed over by finding where it ends (strings with a vectorised search for `"` and `\`),
//! and nothing is copied.
//!
//! Nothing here judges a value: it is not the strict parse, and must not stand in for it where a
//! message is classified or forwarded as parsed. It checks the object's members and the nesting
//! of brackets, not each token inside a value, so an answer the upstream malformed inside its
//! result is still recognised by its id: the relay forwards upstream messages as they are, and
//! this only keeps its books on which requests were answered. Text that is not an object, or
//! whose members or brackets do not close, is not recognised as an answer.

use super::RequestId;
use crate::raw::scan::skip_whitespace;

/// How deeply values may nest, as in serde_json (whose limit this reader replaced).
const MAX_DEPTH: usize = 128;

/// The id of `text` when it is a JSON-RPC response (an object with `result` or `error`) whose
/// id is a string or an integer; `None` for anything else, including text that is not JSON.
/// A member named twice among `id`, `result` and `error` makes it no answer.
pub fn answer_id(text: &str) -> Option<RequestId> {
    let bytes = text.as_bytes();
    let mut at = skip_whitespace(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let (mut id, mut result, mut error) = (None, false, false);
    at = skip_whitespace(bytes, at + 1);
    if bytes.get(at) != Some(&b'}') {
        loop {
            if bytes.get(at) != Some(&b'"') {
                return None;
            }
            let key_end = string_end(bytes, at)?;
            let key = member_name(&text[at..key_end])?;
            at = skip_whitespace(bytes, key_end);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            at = skip_whitespace(bytes, at + 1);
            let value_end = value_end(bytes, at)?;
            let seen = match key {
                Member::Id => id.replace(&text[at..value_end]).is_some(),
                Member::Result => std::mem::replace(&mut result, true),
                Member::Error => std::mem::replace(&mut error, true),
                Member::Other => false,
            };
            if seen {
                return None;
            }
            at = skip_whitespace(bytes, value_end);
            match bytes.get(at) {
                Some(b',') => at = skip_whitespace(bytes, at + 1),
                Some(b'}') => break,
                _ => return None,
            }
        }
    }
    if skip_whitespace(bytes, at + 1) != bytes.len() || !(result || error) {
        return None;
    }
    let id = id?;
    if id.starts_with('"') {
        serde_json::from_str::<String>(id)
            .ok()
            .map(RequestId::String)
    } else {
        id.parse::<i64>().ok().map(RequestId::Number)
    }
}

/// The members an answer is recognised by; every other member is passed over.
enum Member {
    Id,
    Result,
    Error,
    Other,
}

/// Which member the quoted key `key` names; `None` when its escapes do not decode.
fn member_name(key: &str) -> Option<Member> {
    let unescaped;
    let name = if key.contains('\\') {
        unescaped = serde_json::from_str::<String>(key).ok()?;
        unescaped.as_str()
    } else {
        &key[1..key.len() - 1]
    };
    Some(match name {
        "id" => Member::Id,
        "result" => Member::Result,
        "error" => Member::Error,
        _ => Member::Other,
    })
}

/// `at` is on a string's opening quote: the index just past its closing quote, or `None` when
/// the text ends first.
///
/// Not the raw walker's `string_end`: that one reads text the strict parse already accepted, so
/// it cannot fail, and it is tuned for short keys eight bytes at a time. Here the text is
/// unchecked and the string is often a 16 MiB result. (Sharing one search, eight bytes at a time
/// for short strings and `memchr2` past them, cost the read path 1,700 instructions per request
/// in `bash bench/instructions.sh`.)
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut at = at + 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes[at] == b'"' {
            return Some(at + 1);
        }
        // A backslash and the byte it escapes.
        at += 2;
    }
}

/// `at` is where a value should start: the index just past its end, or `None` when there is
/// no value there or its brackets do not close in order.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            // The closing bracket each open value expects, innermost last.
            let mut open = Vec::new();
            let mut at = at;
            loop {
                match *bytes.get(at)? {
                    b'"' => {
                        at = string_end(bytes, at)?;
                        continue;
                    }
                    b'{' => open.push(b'}'),
                    b'[' => open.push(b']'),
                    close @ (b'}' | b']') => {
                        if open.pop() != Some(close) {
                            return None;
                        }
                        if open.is_empty() {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                if open.len() > MAX_DEPTH {
                    return None;
                }
                at += 1;
            }
        }
        b',' | b'}' | b']' | b':' => None,
        _ => {
            let end = bytes[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .map_or(bytes.len(), |n| at + n);
            Some(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::answer_id;
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

    proptest! {
        /// Whatever the strict parse reads as a message, this agrees on whether it is a
        /// response and to which id; on anything else it only must not fail.
        #[test]
        fn agrees_with_the_strict_parse(envelope in arb_envelope(), seed in any::<u64>()) {
            let text = write_text(&envelope, seed);
            let expected = match Message::parse(text.as_bytes()) {
                Ok(Message::Response(response)) => response.id,
                Ok(_) => None,
                Err(_) => {
                    let _ = answer_id(&text);
                    return Ok(());
                }
            };
            prop_assert_eq!(answer_id(&text), expected, "{}", text);
        }
    }
}
