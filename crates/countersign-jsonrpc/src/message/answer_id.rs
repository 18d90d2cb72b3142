//! Which request a relayed answer settles, read without parsing the answer's result.
//!
//! A relay that has to answer every request still open when it cuts a stream needs to know, for
//! each upstream message, whether it is a response and to which id. Parsing a 16 MiB `tools/call`
//! answer strictly to learn that copies and scans the whole result; here serde_json passes over
//! every value it does not need without building or copying it.
//!
//! Nothing here judges a value: it is not the strict parse, and must not stand in for it where a
//! message is classified or forwarded as parsed. A message it cannot read is simply not
//! recognised as an answer.

use serde::de::{Deserialize, Deserializer, IgnoredAny};
use serde_json::value::RawValue;

use super::RequestId;

/// The id of `text` when it is a JSON-RPC response (an object with `result` or `error`) whose
/// id is a string or an integer; `None` for anything else, including text that is not JSON.
pub fn answer_id(text: &str) -> Option<RequestId> {
    let skim: Skim<'_> = serde_json::from_str(text).ok()?;
    if !(skim.result.0 || skim.error.0) {
        return None;
    }
    let id = skim.id?.get();
    if id.starts_with('"') {
        serde_json::from_str::<String>(id)
            .ok()
            .map(RequestId::String)
    } else {
        id.parse::<i64>().ok().map(RequestId::Number)
    }
}

/// The members an answer is recognised by; every other member is passed over.
#[derive(serde::Deserialize)]
struct Skim<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    result: Seen,
    #[serde(default)]
    error: Seen,
}

/// Whether a member was there, whatever its value (`"result": null` counts).
#[derive(Default)]
struct Seen(bool);

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Seen(true))
    }
}

#[cfg(test)]
mod tests {
    use super::answer_id;
    use crate::message::{Message, RequestId};

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
}
