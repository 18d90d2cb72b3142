use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;

fn parse(s: &str) -> Result<Payload, Error> {
    Payload::parse(s.as_bytes())
}

fn envelope_err(s: &str) -> EnvelopeError {
    match parse(s) {
        Err(Error::Envelope(e)) => e,
        other => panic!("expected an envelope error for {s}, got {other:?}"),
    }
}

fn single(s: &str) -> Message {
    match parse(s) {
        Ok(Payload::Single(m)) => m,
        other => panic!("expected one message for {s}, got {other:?}"),
    }
}

fn canonical(s: &str) -> String {
    String::from_utf8(parse(s).expect("valid payload").to_vec()).expect("utf-8")
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repo","arguments":{"repo":"x"}}}"#;

// --- well-formed messages ------------------------------------------------------------------

#[test]
fn request_is_parsed_with_id_method_and_params() {
    let Message::Request(req) = single(CALL) else {
        panic!("expected a request");
    };
    assert_eq!(req.id, RequestId::Number(1));
    assert_eq!(req.method, "tools/call");
    let name = req.param("name").expect("params.name");
    assert_eq!(name, json!("delete_repo"));
    assert_eq!(name.as_bytes(), br#""delete_repo""#);
    assert_eq!(req.param("missing"), None);
}

#[test]
fn notification_is_a_message_without_id() {
    let m = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert!(matches!(m, Message::Notification(_)));
    assert_eq!(m.method(), Some("notifications/initialized"));
    assert_eq!(m.id(), None);
}

#[test]
fn result_response_is_parsed() {
    let m = single(r#"{"jsonrpc":"2.0","id":"a","result":{"tools":[]}}"#);
    let Message::Response(resp) = &m else {
        panic!("expected a response");
    };
    assert_eq!(resp.id, Some(RequestId::String("a".into())));
    let result = resp.outcome.as_ref().expect("result response");
    assert_eq!(result, &json!({"tools": []}));
    assert_eq!(result.as_bytes(), br#"{"tools":[]}"#);
    assert_eq!(m.method(), None);
    assert_eq!(m.id(), Some(&RequestId::String("a".into())));
}

#[test]
fn error_response_with_null_or_absent_id_is_parsed() {
    for body in [
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#,
    ] {
        let Message::Response(resp) = single(body) else {
            panic!("expected a response");
        };
        assert_eq!(resp.id, None);
        assert_eq!(
            resp.outcome,
            Err(ErrorObject {
                code: -32700,
                message: "Parse error".into(),
                data: None
            })
        );
    }
}

#[test]
fn error_response_keeps_data() {
    let Message::Response(resp) = single(
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32022,"message":"x","data":{"supported":["2026-07-28"]}}}"#,
    ) else {
        panic!("expected a response");
    };
    let err = resp.outcome.expect_err("error response");
    let data = err.data.expect("error data");
    assert_eq!(data, json!({"supported": ["2026-07-28"]}));
    assert_eq!(data.as_bytes(), br#"{"supported":["2026-07-28"]}"#);
}

#[test]
fn batch_of_requests_and_notifications_is_parsed_in_order() {
    let payload = parse(
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
    )
    .expect("valid batch");
    assert!(payload.is_batch());
    let methods: Vec<_> = payload.messages().iter().map(Message::method).collect();
    assert_eq!(methods, [Some("ping"), Some("notifications/initialized")]);
}

// --- J-10: escaped method names classify as the canonical name -----------------------------

#[test]
fn escaped_method_name_classifies_as_tools_call() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"\u0074ools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"\u0074\u006f\u006f\u006c\u0073\u002f\u0063\u0061\u006c\u006c","params":{"name":"x"}}"#,
    ] {
        let m = single(body);
        assert_eq!(m.method(), Some("tools/call"), "{body}");
        assert!(
            String::from_utf8(m.to_vec())
                .expect("utf-8")
                .contains(r#""method":"tools/call""#)
        );
    }
}

#[test]
fn escaped_member_names_are_recognised() {
    let m = single(r#"{"j\u0073onrpc":"2.0","\u0069d":1,"m\u0065thod":"ping"}"#);
    assert_eq!(m.method(), Some("ping"));
}

// --- J-1 / J-2 / J-3 / J-4 at the envelope -------------------------------------------------

#[test]
fn duplicate_method_is_a_parse_error() {
    let err = parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#)
        .expect_err("duplicate key");
    assert!(matches!(err, Error::Parse(ParseError::DuplicateKey { .. })));
    assert_eq!(err.jsonrpc_code(), -32700);
}

#[test]
fn duplicate_params_name_via_escape_is_a_parse_error() {
    let err = parse(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","n\u0061me":"delete_repo"}}"#,
    )
    .expect_err("duplicate key");
    assert_eq!(
        err,
        Error::Parse(ParseError::DuplicateKey { key: "name".into() })
    );
}

#[test]
fn case_variant_shadow_keys_at_top_level_are_rejected() {
    for shadow in [
        r#""Method":"ping""#,
        r#""METHOD":"ping""#,
        r#""Params":{}"#,
        r#""ID":2"#,
        r#""Jsonrpc":"2.0""#,
    ] {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{}},{shadow}}}"#);
        assert!(
            matches!(envelope_err(&body), EnvelopeError::KeyCollision { .. }),
            "{body}"
        );
    }
}

#[test]
fn case_variant_shadow_keys_in_params_are_rejected() {
    for shadow in [
        r#""Name":"delete_repo""#,
        r#""NAME":"delete_repo""#,
        r#""Arguments":{}"#,
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_file","arguments":{{}},{shadow}}}}}"#
        );
        assert!(
            matches!(envelope_err(&body), EnvelopeError::KeyCollision { .. }),
            "{body}"
        );
    }
}

#[test]
fn fold_variant_keys_are_rejected() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{},"paramſ":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name\u0000":"b"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"kind":"a","Kind":"b"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","nameſ":"b","nameS":"c"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/ProtocolVersion":"b"}}}"#,
    ] {
        assert!(
            matches!(envelope_err(body), EnvelopeError::KeyCollision { .. }),
            "{body}"
        );
    }
}

#[test]
fn nul_suffixed_top_level_key_is_rejected() {
    let err =
        envelope_err(r#"{"jsonrpc":"2.0","id":1,"method":"ping","method\u0000":"tools/call"}"#);
    assert_eq!(
        err,
        EnvelopeError::KeyCollision {
            first: "method".into(),
            second: "method\u{0}".into()
        }
    );
}

#[test]
fn unknown_top_level_member_is_rejected() {
    for member in [r#""extra":1"#, r#""tool":"x""#, r#""_meta":{}"#] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping",{member}}}"#);
        assert!(
            matches!(envelope_err(&body), EnvelopeError::UnknownMember { .. }),
            "{body}"
        );
    }
}

// --- E-1 / E-2: body shape ---------------------------------------------------------------------

#[test]
fn empty_batch_is_rejected() {
    assert_eq!(envelope_err("[]"), EnvelopeError::EmptyBatch);
}

#[test]
fn batch_with_invalid_element_is_rejected_whole() {
    let err = envelope_err(
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"1.0","id":2,"method":"ping"}]"#,
    );
    assert!(matches!(
        err,
        EnvelopeError::InBatch { index: 1, ref error } if **error == EnvelopeError::InvalidVersion
    ));
    assert!(err.to_string().starts_with("batch element 1: "));
}

#[test]
fn batch_elements_must_be_objects() {
    for body in [
        "[1]",
        "[null]",
        "[[]]",
        r#"[[{"jsonrpc":"2.0","method":"ping"}]]"#,
        r#"["x"]"#,
    ] {
        assert!(
            matches!(envelope_err(body), EnvelopeError::InBatch { ref error, .. } if **error == EnvelopeError::NotAnObject),
            "{body}"
        );
    }
}

#[test]
fn scalar_and_null_bodies_are_rejected() {
    for body in ["42", r#""x""#, "null", "true", "false", "1.5"] {
        assert_eq!(envelope_err(body), EnvelopeError::InvalidBody, "{body}");
    }
}

#[test]
fn message_parse_rejects_a_batch() {
    assert_eq!(
        Message::parse(br#"[{"jsonrpc":"2.0","method":"ping","id":1}]"#),
        Err(Error::Envelope(EnvelopeError::NotAnObject))
    );
    assert!(Message::parse(br#"{"jsonrpc":"2.0","method":"ping","id":1}"#).is_ok());
}

// --- E-3: a tools/call without id is a notification, which the classifier refuses -------------

#[test]
fn tools_call_without_id_is_a_notification_not_a_request() {
    let m = single(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_repo"}}"#);
    assert!(matches!(m, Message::Notification(_)));
    assert_eq!(m.id(), None);
}

// --- E-4: ids -----------------------------------------------------------------------------------

#[test]
fn request_id_of_wrong_type_is_rejected() {
    for id in [
        "null",
        "1.5",
        "1.0",
        "1e2",
        "-0",
        "true",
        "{}",
        "[]",
        "[1]",
        "9223372036854775808",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert!(
            matches!(envelope_err(&body), EnvelopeError::InvalidId { .. }),
            "{body}"
        );
    }
}

#[test]
fn null_id_on_request_is_rejected_not_treated_as_notification() {
    let err = envelope_err(r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{}}"#);
    assert_eq!(
        err,
        EnvelopeError::InvalidId {
            reason: "id must not be null"
        }
    );
}

#[test]
fn long_string_id_is_rejected() {
    let ok = "a".repeat(256);
    let body = format!(r#"{{"jsonrpc":"2.0","id":"{ok}","method":"ping"}}"#);
    assert!(parse(&body).is_ok());
    let long = "a".repeat(257);
    let body = format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"ping"}}"#);
    assert_eq!(envelope_err(&body), EnvelopeError::IdTooLong { max: 256 });
    let huge = "a".repeat(10 * 1024);
    let body = format!(r#"{{"jsonrpc":"2.0","id":"{huge}","method":"ping"}}"#);
    assert_eq!(envelope_err(&body), EnvelopeError::IdTooLong { max: 256 });
}

#[test]
fn integer_ids_at_the_i64_bounds_are_accepted() {
    for id in ["-9223372036854775808", "9223372036854775807", "0", "-1"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(canonical(&body), body);
    }
}

#[test]
fn number_and_string_ids_are_different() {
    assert_ne!(RequestId::Number(1), RequestId::String("1".into()));
    assert_eq!(RequestId::Number(1).to_string(), "1");
    assert_eq!(RequestId::String("1".into()).to_string(), r#""1""#);
    assert_eq!(RequestId::String("a\"b".into()).to_string(), r#""a\"b""#);
}

#[test]
fn request_id_serde_round_trips_as_integer_or_string() {
    assert_eq!(
        serde_json::to_string(&RequestId::Number(-7)).expect("ser"),
        "-7"
    );
    assert_eq!(
        serde_json::to_string(&RequestId::from("x")).expect("ser"),
        r#""x""#
    );
    assert_eq!(
        serde_json::from_str::<RequestId>("42").expect("de"),
        RequestId::Number(42)
    );
    assert_eq!(
        serde_json::from_str::<RequestId>(r#""42""#).expect("de"),
        RequestId::String("42".into())
    );
    assert_eq!(
        serde_json::from_value::<RequestId>(json!(5)).expect("de"),
        RequestId::Number(5)
    );
    for bad in [
        "null",
        "1.5",
        "1e2",
        "-0",
        "true",
        "{}",
        "[]",
        r#"{"$serde_json::private::Number":"1"}"#,
        r#"{"a":"1"}"#,
        "9223372036854775808",
        "18446744073709551616",
    ] {
        assert!(serde_json::from_str::<RequestId>(bad).is_err(), "{bad}");
    }
    let long = format!("\"{}\"", "a".repeat(257));
    assert!(serde_json::from_str::<RequestId>(&long).is_err());
}

// --- E-5 / E-6: ambiguous shapes and versions ----------------------------------------------------

#[test]
fn method_with_result_or_error_is_rejected() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{},"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","error":{"code":1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","result":{}}"#,
    ] {
        assert_eq!(
            envelope_err(body),
            EnvelopeError::AmbiguousMessage,
            "{body}"
        );
    }
}

#[test]
fn jsonrpc_version_must_be_the_string_2_0() {
    assert_eq!(
        envelope_err(r#"{"id":1,"method":"ping"}"#),
        EnvelopeError::MissingVersion
    );
    for version in [r#""1.0""#, "2.0", "2", r#""2.0 ""#, r#""2""#, "null"] {
        let body = format!(r#"{{"jsonrpc":{version},"id":1,"method":"ping"}}"#);
        assert_eq!(envelope_err(&body), EnvelopeError::InvalidVersion, "{body}");
    }
}

#[test]
fn response_needs_exactly_one_of_result_and_error() {
    assert_eq!(
        envelope_err(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#),
        EnvelopeError::ResultAndError
    );
    assert_eq!(
        envelope_err(r#"{"jsonrpc":"2.0","id":1}"#),
        EnvelopeError::MissingMethod
    );
}

#[test]
fn result_response_needs_a_valid_id() {
    assert_eq!(
        envelope_err(r#"{"jsonrpc":"2.0","result":{}}"#),
        EnvelopeError::MissingResponseId
    );
    assert!(matches!(
        envelope_err(r#"{"jsonrpc":"2.0","id":null,"result":{}}"#),
        EnvelopeError::InvalidId { .. }
    ));
    assert!(matches!(
        envelope_err(r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#),
        EnvelopeError::InvalidId { .. }
    ));
}

#[test]
fn response_with_params_is_rejected() {
    assert_eq!(
        envelope_err(r#"{"jsonrpc":"2.0","id":1,"result":{},"params":{}}"#),
        EnvelopeError::UnexpectedMember {
            key: "params",
            kind: "response"
        }
    );
}

#[test]
fn malformed_error_objects_are_rejected() {
    for error in [
        r#""boom""#,
        r#"{"message":"x"}"#,
        r#"{"code":1}"#,
        r#"{"code":"1","message":"x"}"#,
        r#"{"code":1.5,"message":"x"}"#,
        r#"{"code":1,"message":2}"#,
        r#"{"code":99999999999999999999,"message":"x"}"#,
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"error":{error}}}"#);
        assert!(
            matches!(
                envelope_err(&body),
                EnvelopeError::InvalidErrorObject { .. }
            ),
            "{body}"
        );
    }
    assert!(matches!(
        envelope_err(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x","extra":1}}"#),
        EnvelopeError::UnknownMember { .. }
    ));
}

// --- E-7: method names --------------------------------------------------------------------------

#[test]
fn method_must_be_a_string() {
    for method in ["1", "null", "{}", r#"["tools/call"]"#] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":{method}}}"#);
        assert_eq!(
            envelope_err(&body),
            EnvelopeError::MethodNotString,
            "{body}"
        );
    }
}

#[test]
fn method_with_whitespace_or_control_characters_is_rejected() {
    for method in [
        "",
        "tools/call ",
        " tools/call",
        "tools/\tcall",
        "tools/call\\u0000",
        "tools/call\\n",
        "tools\\u200b/call",
        "tools/call\\u202e",
        "tооls/call",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#);
        let err = match parse(&body) {
            Err(Error::Envelope(e)) => e,
            // A raw tab is already invalid JSON.
            Err(Error::Parse(_)) => continue,
            Ok(p) => panic!("{body} parsed as {p:?}"),
        };
        assert!(
            matches!(err, EnvelopeError::InvalidMethod { .. }),
            "{body}: {err:?}"
        );
    }
}

#[test]
fn method_longer_than_128_bytes_is_rejected() {
    let ok = "m".repeat(128);
    assert!(parse(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{ok}"}}"#)).is_ok());
    let long = "m".repeat(129);
    assert!(matches!(
        envelope_err(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{long}"}}"#)),
        EnvelopeError::InvalidMethod { .. }
    ));
}

#[test]
fn odd_but_visible_method_names_pass_the_envelope_for_the_allowlist_to_refuse() {
    // Case, doubled or trailing slashes and vendor prefixes are the method allowlist's job
    // (mcp::is_known_method); the envelope keeps them byte-exact.
    for method in ["Tools/Call", "tools//call", "tools/call/", "x-vendor/exec"] {
        let m = single(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#
        ));
        assert_eq!(m.method(), Some(method));
    }
}

// --- E-8: params ----------------------------------------------------------------------------------

#[test]
fn params_must_be_an_object() {
    for params in ["[]", r#"["delete_repo"]"#, "null", "1", r#""x""#, "true"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
        assert_eq!(
            envelope_err(&body),
            EnvelopeError::ParamsNotObject,
            "{body}"
        );
    }
}

#[test]
fn missing_params_stays_missing() {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let Message::Request(req) = single(body) else {
        panic!("request");
    };
    assert_eq!(req.params, None);
    assert_eq!(canonical(body), body);
}

// --- error codes and messages -----------------------------------------------------------------

#[test]
fn envelope_errors_map_to_invalid_request() {
    for body in [
        "[]",
        "1",
        r#"{"jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
    ] {
        let err = parse(body).expect_err("invalid");
        assert_eq!(err.jsonrpc_code(), -32600, "{body}");
        let text = err.to_string();
        assert!(
            text.chars().next().is_some_and(|c| !c.is_uppercase()),
            "{text}"
        );
    }
}

#[test]
fn parse_errors_map_to_parse_error_code() {
    assert_eq!(parse("{").expect_err("invalid").jsonrpc_code(), -32700);
    assert_eq!(parse("\u{feff}{}").expect_err("bom").jsonrpc_code(), -32700);
}

#[test]
fn error_response_builds_the_canonical_envelope() {
    let id = RequestId::Number(7);
    assert_eq!(
        error_response(Some(&id), -32601, "Method not found", None),
        br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}"#
    );
    assert_eq!(
        error_response(None, -32700, "Parse error", Some(json!({"why": "bom"}))),
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":{"why":"bom"}}}"#
    );
    let reparsed = Message::parse(&error_response(
        Some(&RequestId::from("x")),
        -32020,
        "Header mismatch",
        None,
    ))
    .expect("own output parses");
    assert_eq!(reparsed.id(), Some(&RequestId::from("x")));
}

#[test]
fn a_compact_result_is_written_around_as_to_vec_writes_it() {
    let result = RawJson::from_value(&json!({"content": [{"type": "text", "text": "a \"b\"\n"}],
        "isError": true, "n": 1.50}));
    for id in [
        Some(RequestId::Number(7)),
        Some(RequestId::from("x\"y")),
        None,
    ] {
        let whole = Message::Response(Response {
            id: id.clone(),
            outcome: Ok(result.clone()),
        })
        .to_vec();
        assert_eq!(compact_result_response(id.as_ref(), &result), whole);
    }
}

// --- canonical re-serialization ----------------------------------------------------------------

#[test]
fn reserialization_emits_canonical_member_order_without_whitespace() {
    assert_eq!(
        canonical(
            r#" { "params" : {"b":1,"a":2} , "method" : "x" , "id" : "q" , "jsonrpc" : "2.0" } "#
        ),
        r#"{"jsonrpc":"2.0","id":"q","method":"x","params":{"b":1,"a":2}}"#
    );
    assert_eq!(
        canonical(r#"{"result":{"z":[1,2]},"id":5,"jsonrpc":"2.0"}"#),
        r#"{"jsonrpc":"2.0","id":5,"result":{"z":[1,2]}}"#
    );
    assert_eq!(
        canonical(r#"{"error":{"data":1,"message":"m","code":-1},"jsonrpc":"2.0","id":5}"#),
        r#"{"jsonrpc":"2.0","id":5,"error":{"code":-1,"message":"m","data":1}}"#
    );
    assert_eq!(
        canonical(r#"{"method":"notifications/initialized","jsonrpc":"2.0"}"#),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
    );
    assert_eq!(
        canonical(
            r#"[{"method":"ping","id":1,"jsonrpc":"2.0"}, {"method":"ping","id":2,"jsonrpc":"2.0"}]"#
        ),
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#
    );
}

#[test]
fn params_and_results_are_forwarded_minified_with_their_tokens_kept() {
    // Inside params, results and error data only the whitespace between tokens goes; escapes,
    // number spellings and whitespace inside strings stay exactly as judged (the strict parse
    // already refused anything two parsers could read differently).
    let body = "{ \"method\" : \"tools/call\", \"id\":1, \"jsonrpc\":\"2.0\", \"params\" : { \"name\" : \"a\\u0062 \\t c\",\n\t\"arguments\":[ 1E2 , {\"k\\\" \":\"\\ud83d\\ude00\"} ] } }";
    assert_eq!(
        canonical(body),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\\u0062 \\t c\",\"arguments\":[1E2,{\"k\\\" \":\"\\ud83d\\ude00\"}]}}"
    );
    let Message::Request(req) = single(body) else {
        panic!("request");
    };
    assert_eq!(
        req.param("name").expect("name").as_str().as_deref(),
        Some("ab \t c")
    );
    assert_eq!(
        canonical(r#"{"result" : [ true ,null, " a , b " ] ,"id":1,"jsonrpc":"2.0"}"#),
        r#"{"jsonrpc":"2.0","id":1,"result":[true,null," a , b "]}"#
    );
    assert_eq!(
        canonical(
            r#"{"error":{"message":"m","data" : { "a" : 1 } ,"code":2},"id":1,"jsonrpc":"2.0"}"#
        ),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":2,"message":"m","data":{"a":1}}}"#
    );
}

#[test]
fn argument_numbers_reserialize_byte_exactly() {
    for n in [
        "9007199254740993",
        "-9223372036854775809",
        "18446744073709551616",
        "1.0",
        "-0",
        "-0.0",
        "0.30000000000000004",
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"n":{n}}}}}}}"#
        );
        assert_eq!(canonical(&body), body);
    }
}

#[test]
fn exponent_numbers_keep_their_value_in_a_stable_form() {
    // Params are forwarded as the exact text that was judged, so an exponent keeps its
    // spelling too (serde_json's tree used to rewrite `1e2` as `1e+2`; the value was the same).
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"n":1e2,"m":5E-1}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"n":1e+2,"m":5e-1}}}"#,
    ] {
        let once = canonical(body);
        assert_eq!(once, body);
        assert_eq!(canonical(&once), once);
        let Message::Request(req) = single(&once) else {
            panic!("request");
        };
        let arguments = req.param("arguments").expect("arguments");
        assert_eq!(arguments.get("n").and_then(|n| n.as_f64()), Some(100.0));
        assert_eq!(arguments.get("m").and_then(|m| m.as_f64()), Some(0.5));
    }
}

#[test]
fn to_value_matches_to_vec() {
    for body in [
        CALL,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
        r#"{"jsonrpc":"2.0","id":"r","result":{"content":[]}}"#,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"m","data":[1]}}"#,
    ] {
        let m = single(body);
        assert_eq!(
            serde_json::to_vec(&m.to_value()).expect("serializes"),
            m.to_vec()
        );
    }
}

#[test]
fn message_from_value_accepts_in_process_values() {
    let m = Message::from_value(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        .expect("valid");
    assert_eq!(m.id(), Some(&RequestId::Number(3)));
    assert!(Message::from_value(json!({"jsonrpc": "2.0", "id": 3.0, "method": "x"})).is_err());
}

// --- property tests ---------------------------------------------------------------------------------

fn arb_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    arb_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_id() -> impl Strategy<Value = RequestId> {
    prop_oneof![
        any::<i64>().prop_map(RequestId::Number),
        "\\PC{0,20}".prop_map(RequestId::String),
    ]
}

fn arb_params() -> impl Strategy<Value = Option<RawJson>> {
    prop::option::of(
        prop::collection::btree_map("[a-z_]{1,8}", arb_value(), 0..6)
            .prop_map(|m| RawJson::from(Value::Object(m.into_iter().collect::<Map<_, _>>()))),
    )
}

fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (arb_id(), "[a-z]{1,10}(/[a-z]{1,10})?", arb_params()).prop_map(|(id, method, params)| {
            Message::Request(Request {
                id,
                method,
                params: params.map(Params::from),
            })
        }),
        ("notifications/[a-z]{1,10}", arb_params()).prop_map(|(method, params)| {
            Message::Notification(Notification {
                method,
                params: params.map(Params::from),
            })
        }),
        (arb_id(), arb_value()).prop_map(|(id, result)| Message::Response(Response {
            id: Some(id),
            outcome: Ok(RawJson::from(result))
        })),
        (
            prop::option::of(arb_id()),
            any::<i64>(),
            "\\PC{0,20}",
            prop::option::of(arb_value())
        )
            .prop_map(|(id, code, message, data)| Message::Response(Response {
                id,
                outcome: Err(ErrorObject {
                    code,
                    message,
                    data: data.map(RawJson::from)
                })
            })),
    ]
}

proptest! {
    #[test]
    fn serialized_messages_parse_back_equal(m in arb_message()) {
        let bytes = m.to_vec();
        let parsed = Message::parse(&bytes).expect("own output is a valid message");
        prop_assert_eq!(&parsed, &m);
        prop_assert_eq!(parsed.to_vec(), bytes);
    }

    #[test]
    fn payload_reserialization_is_stable(ms in prop::collection::vec(arb_message(), 1..4), batch in any::<bool>()) {
        let payload = if batch || ms.len() > 1 {
            Payload::Batch(ms)
        } else {
            Payload::Single(ms.into_iter().next().expect("one message"))
        };
        let once = payload.to_vec();
        let reparsed = Payload::parse(&once).expect("own output parses");
        prop_assert_eq!(&reparsed, &payload);
        prop_assert_eq!(reparsed.to_vec(), once);
    }

    #[test]
    fn arbitrary_bodies_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(payload) = Payload::parse(&bytes) {
            let once = payload.to_vec();
            let again = Payload::parse(&once).expect("accepted input reserializes to valid input");
            prop_assert_eq!(again.to_vec(), once);
        }
        // Also: the re-parse equals the payload with its params and results minified.
        crate::fuzzing::check_strict_json(&bytes);
    }
}

#[test]
fn a_payload_owes_answers_to_its_requests_only_in_order() {
    let batch = Payload::parse(
        br#"[{"jsonrpc":"2.0","id":"b","method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":7,"result":{}},{"jsonrpc":"2.0","id":3,"method":"tools/list"}]"#,
    )
    .expect("a valid batch");
    assert_eq!(
        batch.request_ids(),
        [RequestId::String("b".into()), RequestId::Number(3.into())]
    );
    let notification = Payload::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .expect("valid");
    assert!(notification.request_ids().is_empty());
}
