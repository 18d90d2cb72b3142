use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::fold::{fold_collision, fold_key};
use crate::raw::RawJson;

fn parse(s: &str) -> Result<Value, ParseError> {
    parse_strict(s.as_bytes())
}

fn reserialize(s: &str) -> String {
    let value = parse(s).expect("test input must parse");
    serde_json::to_string(&value).expect("value serializes")
}

fn nested(depth: usize, open: &str, close: &str, inner: &str) -> String {
    format!("{}{}{}", open.repeat(depth), inner, close.repeat(depth))
}

// --- J-1 / J-2: duplicate keys, also after unescaping -------------------------------------

#[test]
fn duplicate_top_level_key_is_rejected() {
    assert_eq!(
        parse(r#"{"method":"ping","method":"tools/call"}"#),
        Err(ParseError::DuplicateKey {
            key: "method".into()
        })
    );
}

#[test]
fn duplicate_nested_params_name_is_rejected() {
    let body = r#"{"params":{"name":"read_file","name":"delete_repo"}}"#;
    assert_eq!(
        parse(body),
        Err(ParseError::DuplicateKey { key: "name".into() })
    );
}

#[test]
fn duplicate_key_after_unescaping_is_rejected() {
    for body in [
        r#"{"n\u0061me":1,"name":2}"#,
        r#"{"name":1,"\u006eame":2}"#,
        r#"{"params":{"name":"x","n\u0061me":"y"}}"#,
        r#"{"a\/b":1,"a/b":2}"#,
    ] {
        assert!(
            matches!(parse(body), Err(ParseError::DuplicateKey { .. })),
            "{body}"
        );
    }
}

#[test]
fn duplicate_key_deep_inside_arrays_is_rejected() {
    let body = r#"[{"a":[{"b":{"c":1,"c":2}}]}]"#;
    assert_eq!(
        parse(body),
        Err(ParseError::DuplicateKey { key: "c".into() })
    );
}

#[test]
fn distinct_keys_in_sibling_objects_are_fine() {
    assert!(parse(r#"[{"a":1},{"a":2}]"#).is_ok());
}

fn raw(s: &str) -> RawJson {
    RawJson::parse_slice(s.as_bytes()).expect("test input must parse")
}

fn pair(a: &str, b: &str) -> Option<(String, String)> {
    Some((a.to_owned(), b.to_owned()))
}

/// An object text with `keys` in order, each mapped to its index.
fn object_with_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    let mut map = serde_json::Map::new();
    for (i, key) in keys.into_iter().enumerate() {
        map.insert(key.to_owned(), json!(i));
    }
    Value::Object(map).to_string()
}

#[test]
fn case_variant_keys_parse_but_are_reported_by_fold_collision() {
    let body = r#"{"name":"a","Name":"b"}"#;
    assert!(parse(body).is_ok(), "case-variant keys are distinct JSON");
    assert_eq!(fold_collision(&raw(body)), pair("name", "Name"));
}

// --- J-4: fold variants ------------------------------------------------------------------

#[test]
fn fold_key_maps_long_s_kelvin_and_nul() {
    assert_eq!(fold_key("paramſ"), "params");
    assert_eq!(fold_key("\u{212A}ey"), "key");
    assert_eq!(fold_key("name\u{0}"), "name");
    assert_eq!(fold_key("NaMe"), "name");
    assert_eq!(fold_key("straße"), "strasse");
}

#[test]
fn fold_collision_catches_long_s_kelvin_and_nul_variants() {
    for (a, b) in [
        ("params", "paramſ"),
        ("kind", "\u{212A}ind"),
        ("name", "name\u{0}"),
        ("arguments", "Arguments"),
        ("id", "ID"),
    ] {
        let object = raw(&object_with_keys([a, b]));
        assert_eq!(fold_collision(&object), pair(a, b), "{a} vs {b}");
    }
}

#[test]
fn fold_collision_sees_keys_through_escapes() {
    // The keys are compared unescaped: `\u004eame` is `Name`, `name\u0000` ends in NUL.
    assert_eq!(
        fold_collision(&raw(r#"{"name":1,"\u004eame":2}"#)),
        pair("name", "Name")
    );
    assert_eq!(
        fold_collision(&raw(r#"{"name":1,"name\u0000":2}"#)),
        pair("name", "name\u{0}")
    );
    assert_eq!(
        fold_collision(&raw(r#"{"param\u017f":1,"params":2}"#)),
        pair("paramſ", "params")
    );
}

#[test]
fn fold_collision_is_none_for_distinct_keys() {
    let object = raw(r#"{"name": 1, "arguments": 2, "_meta": 3, "protocolVersion": 4}"#);
    assert_eq!(fold_collision(&object), None);
}

#[test]
fn fold_collision_is_none_for_non_objects() {
    for body in ["[]", r#"["a","A"]"#, r#""Name""#, "1", "null"] {
        assert_eq!(fold_collision(&raw(body)), None, "{body}");
    }
}

#[test]
fn fold_collision_handles_many_keys() {
    let keys: Vec<String> = (0..40).map(|i| format!("key{i}")).collect();
    let mut all: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(fold_collision(&raw(&object_with_keys(all.clone()))), None);
    all.push("KEY7");
    assert_eq!(
        fold_collision(&raw(&object_with_keys(all))),
        pair("key7", "KEY7")
    );
}

#[test]
fn fold_collision_past_sixteen_keys_is_exact() {
    // Keys with capitals take the folding path (lowercase ASCII keys short-cut it), and more
    // than 16 of them take the hashed path.
    let keys: Vec<String> = (0..300).map(|i| format!("Key{i}")).collect();
    let mut all: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert!(all.len() > 16);
    assert_eq!(fold_collision(&raw(&object_with_keys(all.clone()))), None);
    // A pair far apart, with a NUL and a long s in the way.
    all.insert(3, "paramſ");
    all.push("\u{212A}ey250\u{0}");
    all.push("PARAMS");
    assert_eq!(
        fold_collision(&raw(&object_with_keys(all))),
        pair("Key250", "\u{212A}ey250\u{0}")
    );
    // Exactly 17 keys, the colliding pair at both ends, written with escapes.
    let mut body = String::from(r#"{"N\u0061me":0"#);
    for i in 1..16 {
        body.push_str(&format!(r#","k{i}":{i}"#));
    }
    body.push_str(r#","nAME":16}"#);
    let object = raw(&body);
    assert_eq!(object.members().expect("object").count(), 17);
    assert_eq!(fold_collision(&object), pair("Name", "nAME"));
}

// --- J-5: BOM, encodings, invalid UTF-8 -------------------------------------------------

#[test]
fn bom_prefix_is_rejected() {
    assert_eq!(parse_strict(b"\xEF\xBB\xBF{}"), Err(ParseError::Bom));
}

#[test]
fn utf16_and_utf32_bodies_are_rejected() {
    // `{}` in UTF-16LE with BOM, UTF-16BE without, and UTF-32LE.
    assert!(parse_strict(b"\xFF\xFE{\x00}\x00").is_err());
    assert!(parse_strict(b"\x00{\x00}").is_err());
    assert!(parse_strict(b"{\x00\x00\x00}\x00\x00\x00").is_err());
}

#[test]
fn invalid_utf8_is_rejected() {
    assert_eq!(parse_strict(b"\"\xFF\""), Err(ParseError::InvalidUtf8));
    assert_eq!(
        parse_strict(b"{\"a\":\"\xC3\"}"),
        Err(ParseError::InvalidUtf8)
    );
}

#[test]
fn overlong_utf8_is_rejected() {
    // Overlong `/` and overlong NUL.
    assert_eq!(parse_strict(b"\"\xC0\xAF\""), Err(ParseError::InvalidUtf8));
    assert_eq!(
        parse_strict(b"\"\xE0\x80\x80\""),
        Err(ParseError::InvalidUtf8)
    );
}

#[test]
fn utf8_encoded_surrogate_is_rejected() {
    assert_eq!(
        parse_strict(b"\"\xED\xA0\x80\""),
        Err(ParseError::InvalidUtf8)
    );
}

// --- J-6: non-JSON grammar --------------------------------------------------------------

#[test]
fn lenient_grammar_is_rejected() {
    for body in [
        "// c\n{}",
        "{} // c",
        "/* c */ {}",
        "{\"a\":1,}",
        "[1,]",
        "{'a':1}",
        "{a:1}",
        "NaN",
        "Infinity",
        "-Infinity",
        "[NaN]",
        "0x10",
        "01",
        "+1",
        ".5",
        "1.",
        "\"\t\"",
        "",
        "   ",
    ] {
        assert!(parse(body).is_err(), "{body:?} must be rejected");
    }
}

#[test]
fn overflowing_numbers_are_rejected() {
    for body in [
        "1e400",
        "-1e400",
        "[1E+999]",
        r#"{"a":1.7976931348623159e308}"#,
    ] {
        assert_eq!(parse(body), Err(ParseError::NonFiniteNumber), "{body}");
    }
    let huge_integer = "9".repeat(400);
    assert_eq!(parse(&huge_integer), Err(ParseError::NonFiniteNumber));
}

#[test]
fn largest_finite_and_underflowing_numbers_are_kept() {
    assert_eq!(
        reserialize("1.7976931348623157e308"),
        "1.7976931348623157e+308"
    );
    assert_eq!(reserialize("1e-400"), "1e-400");
}

#[test]
fn syntax_error_reports_position_without_repeating_it() {
    let err = parse("{\n  \"a\": x\n}").expect_err("invalid literal");
    let ParseError::Syntax {
        line,
        column,
        message,
    } = err
    else {
        panic!("expected a syntax error, got {err:?}");
    };
    assert_eq!(line, 2);
    assert!(column > 0);
    assert!(!message.contains("line"), "{message}");
}

// --- J-7: trailing data -----------------------------------------------------------------

#[test]
fn trailing_data_is_rejected() {
    for body in ["{} {}", "{}{}", "{} x", "{}\0", "1 2", "[] ]", "{}\u{feff}"] {
        assert_eq!(parse(body), Err(ParseError::TrailingData), "{body:?}");
    }
}

#[test]
fn surrounding_whitespace_is_accepted() {
    assert_eq!(parse(" \r\n\t{}\n "), Ok(json!({})));
}

// --- J-8: surrogates --------------------------------------------------------------------

#[test]
fn lone_surrogates_are_rejected_in_keys_and_values() {
    for body in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\udc00\ud800""#,
        r#""\ud800x""#,
        r#"{"\ud800":1}"#,
        r#"{"a":"\udfff"}"#,
    ] {
        assert!(
            matches!(parse(body), Err(ParseError::Syntax { .. })),
            "{body}"
        );
    }
}

#[test]
fn paired_surrogates_decode_to_one_character() {
    assert_eq!(parse(r#""\ud83d\ude00""#), Ok(json!("😀")));
}

// --- J-9: depth ---------------------------------------------------------------------------

#[test]
fn depth_at_limit_is_accepted() {
    assert!(parse(&nested(64, "[", "]", "")).is_ok());
    assert!(parse(&nested(64, "{\"a\":", "}", "1")).is_ok());
    // A number at the deepest level is not an extra level.
    assert!(parse(&nested(64, "[", "]", "1.5")).is_ok());
    assert!(parse(&nested(63, "[", "]", "{}")).is_ok());
}

#[test]
fn depth_over_limit_is_rejected() {
    assert_eq!(
        parse(&nested(65, "[", "]", "")),
        Err(ParseError::TooDeep { max: 64 })
    );
    assert_eq!(
        parse(&nested(65, "{\"a\":", "}", "1")),
        Err(ParseError::TooDeep { max: 64 })
    );
    assert_eq!(
        parse(&nested(64, "[", "]", "{}")),
        Err(ParseError::TooDeep { max: 64 })
    );
    assert_eq!(
        parse(&nested(200, "[", "]", "")),
        Err(ParseError::TooDeep { max: 64 })
    );
}

#[test]
fn hundred_thousand_open_brackets_are_rejected_without_overflow() {
    let started = std::time::Instant::now();
    let body = "[".repeat(100_000);
    assert_eq!(parse(&body), Err(ParseError::TooDeep { max: 64 }));
    let body = "{\"a\":".repeat(100_000);
    assert_eq!(parse(&body), Err(ParseError::TooDeep { max: 64 }));
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn custom_depth_limit_applies() {
    let limits = ParseLimits { max_depth: 2 };
    assert!(parse_strict_with(b"[[1]]", &limits).is_ok());
    assert_eq!(
        parse_strict_with(b"[[[1]]]", &limits),
        Err(ParseError::TooDeep { max: 2 })
    );
    let scalar_only = ParseLimits { max_depth: 0 };
    assert!(parse_strict_with(b"1", &scalar_only).is_ok());
    assert!(parse_strict_with(b"[]", &scalar_only).is_err());
}

#[test]
fn depth_limit_above_serde_ceiling_still_reports_too_deep() {
    let limits = ParseLimits { max_depth: 10_000 };
    assert!(parse_strict_with(nested(126, "[", "]", "").as_bytes(), &limits).is_ok());
    assert_eq!(
        parse_strict_with(nested(500, "[", "]", "").as_bytes(), &limits),
        Err(ParseError::TooDeep { max: 126 })
    );
}

#[test]
fn default_limits_are_64_deep() {
    assert_eq!(ParseLimits::default().max_depth, 64);
}

// --- serde_json's private number envelope ---------------------------------------------------

#[test]
fn serde_private_number_key_is_rejected() {
    for body in [
        r#"{"$serde_json::private::Number":"1"}"#,
        r#"{"$serde_json::private::Number":1}"#,
        r#"{"$serde_json::private::Number":"1","b":2}"#,
        r#"{"a":1,"$serde_json::private::Number":"1"}"#,
        r#"{"$serde_json::private::RawValue":"{}"}"#,
        r#"{"$serde_json::private::Numbe\u0072":"1"}"#,
    ] {
        assert!(
            matches!(parse(body), Err(ParseError::ReservedKey { .. })),
            "{body}"
        );
    }
}

// --- numbers survive re-serialization ----------------------------------------------------

#[test]
fn numbers_reserialize_byte_exactly() {
    for n in [
        "0",
        "-0",
        "1.0",
        "-0.0",
        "1.5",
        "0.1",
        "9007199254740993",
        "-9007199254740993",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "3.141592653589793238462643383279",
        "1e-7",
        "1.5e+300",
        "2e-5",
    ] {
        assert_eq!(reserialize(n), n);
        assert_eq!(reserialize(&format!("[{n}]")), format!("[{n}]"));
    }
}

#[test]
fn exponent_marker_is_normalised_without_changing_the_value() {
    // serde_json's arbitrary-precision scanner writes every exponent as `e` plus an explicit
    // sign; the value is unchanged and the normalised text is a fixed point.
    for (sent, forwarded) in [("1e2", "1e+2"), ("1E2", "1e+2"), ("2.5E-3", "2.5e-3")] {
        assert_eq!(reserialize(sent), forwarded);
        assert_eq!(reserialize(forwarded), forwarded);
        let a: f64 = sent.parse().expect("float");
        let b: f64 = forwarded.parse().expect("float");
        assert_eq!(a.to_bits(), b.to_bits());
    }
}

#[test]
fn object_key_order_is_preserved() {
    assert_eq!(
        reserialize(r#"{"z":1,"a":2,"m":{"y":1,"b":2}}"#),
        r#"{"z":1,"a":2,"m":{"y":1,"b":2}}"#
    );
}

#[test]
fn escaped_strings_decode_and_reserialize_canonically() {
    assert_eq!(parse(r#""tools\/call""#), Ok(json!("tools/call")));
    assert_eq!(parse(r#""\u0074ools/call""#), Ok(json!("tools/call")));
    assert_eq!(reserialize(r#""a\u0000b""#), r#""a\u0000b""#);
}

#[test]
fn jsonrpc_code_is_parse_error_for_every_variant() {
    let all = [
        ParseError::Syntax {
            line: 1,
            column: 1,
            message: String::new(),
        },
        ParseError::Bom,
        ParseError::InvalidUtf8,
        ParseError::DuplicateKey { key: String::new() },
        ParseError::ReservedKey { key: String::new() },
        ParseError::TooDeep { max: 1 },
        ParseError::NonFiniteNumber,
        ParseError::TrailingData,
    ];
    for err in all {
        assert_eq!(err.jsonrpc_code(), -32700);
        let text = err.to_string();
        assert!(
            text.chars().next().is_some_and(|c| !c.is_uppercase()),
            "{text}"
        );
    }
}

// --- property tests ------------------------------------------------------------------------

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        // Integers beyond 64 bits, as text.
        "-?[1-9][0-9]{19,40}".prop_map(|s| Value::Number(s.parse().expect("valid integer"))),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn serialized_values_parse_back_equal_and_reserialize_stably(value in arb_json()) {
        let bytes = serde_json::to_vec(&value).expect("serializes");
        let parsed = parse_strict(&bytes).expect("serde_json output is strict json");
        prop_assert_eq!(&parsed, &value);
        let again = serde_json::to_vec(&parsed).expect("serializes");
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn pretty_printed_values_parse_back_equal(value in arb_json()) {
        let bytes = serde_json::to_vec_pretty(&value).expect("serializes");
        prop_assert_eq!(parse_strict(&bytes).expect("strict json"), value);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_strict(&bytes);
    }

    #[test]
    fn accepted_input_reserializes_to_a_fixed_point(s in "[\\[\\]{}\",:0-9a-z.eE+ -]{0,40}") {
        if let Ok(value) = parse_strict(s.as_bytes()) {
            let once = serde_json::to_vec(&value).expect("serializes");
            let twice = serde_json::to_vec(&parse_strict(&once).expect("reparses")).expect("serializes");
            prop_assert_eq!(once, twice);
        }
    }
}
