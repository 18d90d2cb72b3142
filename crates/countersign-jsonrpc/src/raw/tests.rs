use std::borrow::Cow;

use proptest::prelude::*;
use serde_json::{Map, Number, json};

use super::*;
use crate::strict::{parse_strict, parse_strict_with};

fn raw(s: &str) -> RawJson {
    RawJson::parse_slice(s.as_bytes()).expect("test input must parse")
}

/// The tree rebuilt by walking `value` with the scanner alone: `members`, `items`, `as_str`,
/// `as_bool`, `is_null` and the number text. Recursion is bounded by the parse depth limit.
fn walk(value: &RawJson) -> Value {
    match value.kind() {
        Kind::Null => {
            assert!(value.is_null());
            Value::Null
        }
        Kind::Bool => Value::Bool(value.as_bool().expect("a bool")),
        Kind::Number => Value::Number(
            value
                .number_text()
                .expect("a number")
                .parse::<Number>()
                .expect("number text parses"),
        ),
        Kind::String => Value::String(value.as_str().expect("a string").into_owned()),
        Kind::Array => Value::Array(value.items().expect("an array").map(|v| walk(&v)).collect()),
        Kind::Object => {
            let mut map = Map::new();
            for (key, member) in value.members().expect("an object") {
                let previous = map.insert(key.into_owned(), walk(&member));
                assert!(previous.is_none(), "a key came back twice in {value:?}");
            }
            Value::Object(map)
        }
    }
}

/// Order-sensitive equality (`Map`'s `==` ignores member order, its serialization does not).
fn same_tree(a: &Value, b: &Value) -> bool {
    a == b && serde_json::to_vec(a).expect("serializes") == serde_json::to_vec(b).expect("ser")
}

/// Every check the scanner must pass on an accepted text.
fn check_agrees_with_serde(text: &[u8]) -> Result<(), TestCaseError> {
    let strict = parse_strict(text);
    let lazy = RawJson::parse_slice(text);
    prop_assert_eq!(
        strict.is_ok(),
        lazy.is_ok(),
        "{:?}: {:?} vs {:?}",
        String::from_utf8_lossy(text),
        strict,
        lazy
    );
    let (Ok(value), Ok(lazy)) = (strict, lazy) else {
        return Ok(());
    };
    prop_assert!(
        same_tree(&lazy.to_value(), &value),
        "to_value of {:?}",
        lazy
    );
    let walked = walk(&lazy);
    prop_assert!(
        same_tree(&walked, &value),
        "walk {:?} of {:?}",
        walked,
        lazy
    );
    check_gets(&lazy)?;
    Ok(())
}

/// `get` finds every member of every object in `value`, as the member itself.
fn check_gets(value: &RawJson) -> Result<(), TestCaseError> {
    if let Some(members) = value.members() {
        for (key, member) in members {
            prop_assert_eq!(value.get(&key), Some(member.clone()), "get({:?})", key);
            check_gets(&member)?;
        }
        prop_assert_eq!(value.get("\u{0}no such key\u{0}"), None);
    } else if let Some(items) = value.items() {
        for item in items {
            check_gets(&item)?;
        }
    }
    Ok(())
}

// --- a JSON writer that varies everything the grammar lets a sender vary -----------------------

/// A small deterministic generator, seeded by proptest.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn write_space(rng: &mut Rng, out: &mut String) {
    const SPACES: [&str; 7] = ["", "", "", " ", "\n", "\t", " \r\n  "];
    out.push_str(SPACES[rng.below(SPACES.len() as u64) as usize]);
}

/// A string token for `s`, each character written literally, as a short escape or as `\u`
/// (a surrogate pair outside the BMP), at random where the grammar allows the choice.
fn write_string(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        let must_escape = c == '"' || c == '\\' || c < ' ';
        match rng.below(3) {
            0 if !must_escape => out.push(c),
            1 if short.is_some() => out.push_str(short.unwrap_or_default()),
            _ if must_escape && short.is_some() && rng.below(2) == 0 => {
                out.push_str(short.unwrap_or_default());
            }
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let hex = format!("{:04x}", unit);
                    if rng.below(2) == 0 {
                        out.push_str(&format!("\\u{hex}"));
                    } else {
                        out.push_str(&format!("\\u{}", hex.to_uppercase()));
                    }
                }
            }
        }
    }
    out.push('"');
}

/// A number text with the same value, its exponent spelled `e`/`E`, with or without `+`.
fn write_number(n: &Number, rng: &mut Rng, out: &mut String) {
    let text = n.to_string();
    let Some(at) = text.find(['e', 'E']) else {
        out.push_str(&text);
        return;
    };
    out.push_str(&text[..at]);
    out.push(if rng.below(2) == 0 { 'e' } else { 'E' });
    let exponent = &text[at + 1..];
    match exponent.strip_prefix('+') {
        Some(digits) if rng.below(2) == 0 => out.push_str(digits),
        Some(digits) => {
            out.push('+');
            out.push_str(digits);
        }
        None if !exponent.starts_with('-') && rng.below(2) == 0 => {
            out.push('+');
            out.push_str(exponent);
        }
        None => out.push_str(exponent),
    }
}

fn write_value(value: &Value, rng: &mut Rng, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, rng, out),
        Value::String(s) => write_string(s, rng, out),
        Value::Array(items) => {
            out.push('[');
            write_space(rng, out);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    write_space(rng, out);
                }
                write_value(item, rng, out);
                write_space(rng, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            write_space(rng, out);
            for (i, (key, member)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    write_space(rng, out);
                }
                write_string(key, rng, out);
                write_space(rng, out);
                out.push(':');
                write_space(rng, out);
                write_value(member, rng, out);
                write_space(rng, out);
            }
            out.push('}');
        }
    }
}

pub(crate) fn write_text(value: &Value, seed: u64) -> String {
    let mut rng = Rng(seed | 1);
    let mut out = String::new();
    write_space(&mut rng, &mut out);
    write_value(value, &mut rng, &mut out);
    write_space(&mut rng, &mut out);
    out
}

// --- strategies ------------------------------------------------------------------------------

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        // Mostly the characters escapes and boundaries are about.
        "[\"\\\\/a-c:,{}\\[\\] é😀\u{0}\u{1f}\u{7f}\u{2028}\n\t]{0,10}",
    ]
}

fn arb_number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        // Integers beyond 64 bits, fractions and exponents, as text (exponents stay finite).
        "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,2})?"
            .prop_map(|s| s.parse().expect("valid number")),
    ]
}

pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number().prop_map(Value::Number),
        arb_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            arb_object(inner),
        ]
    })
}

fn arb_object(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    prop::collection::vec((arb_text(), inner), 0..8)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()))
}

/// Bodies shaped like JSON-RPC messages: a valid request, notification or response, sometimes
/// with a member added or replaced (which mostly breaks it), alone or in a batch.
pub(crate) fn arb_envelope() -> impl Strategy<Value = Value> {
    let id = prop_oneof![
        any::<i64>().prop_map(Value::from),
        arb_text().prop_map(Value::String),
    ];
    let params = prop::option::of(arb_object(arb_json()).prop_map(|mut params| {
        if let Value::Object(map) = &mut params {
            map.insert("_meta".to_owned(), json!({"progressToken": 1, "k": [true]}));
        }
        params
    }))
    .boxed();
    let method = prop_oneof![
        Just("tools/call".to_owned()),
        "[a-z]{1,8}(/[a-zA-Z_]{1,8})?",
    ];
    let valid = prop_oneof![
        (id.clone(), method.clone(), params.clone()).prop_map(|(id, method, params)| {
            let mut m = json!({"jsonrpc": "2.0", "id": id, "method": method});
            if let Some(params) = params {
                m["params"] = params;
            }
            m
        }),
        (method, params).prop_map(|(method, params)| {
            let mut m = json!({"method": method, "jsonrpc": "2.0"});
            if let Some(params) = params {
                m["params"] = params;
            }
            m
        }),
        (id.clone(), arb_json())
            .prop_map(|(id, result)| { json!({"jsonrpc": "2.0", "result": result, "id": id}) }),
        (
            prop::option::of(id),
            any::<i64>(),
            arb_text(),
            prop::option::of(arb_json())
        )
            .prop_map(|(id, code, message, data)| {
                let mut error = json!({"code": code, "message": message});
                if let Some(data) = data {
                    error["data"] = data;
                }
                json!({"jsonrpc": "2.0", "id": id, "error": error})
            }),
    ];
    let key = prop_oneof![
        Just("jsonrpc"),
        Just("id"),
        Just("params"),
        Just("result"),
        Just("Method"),
        Just("extra"),
    ]
    .prop_map(str::to_owned);
    let value = prop_oneof![
        Just(json!("2.0")),
        Just(json!(null)),
        Just(json!({"name": "n", "Name": 2})),
        arb_json(),
    ];
    let message = (
        valid,
        prop::collection::vec((key, value), 0..2),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut m, edits, pick)| {
            // Usually leave the message valid.
            if pick.index(3) == 0 {
                for (key, value) in edits {
                    m[key] = value;
                }
            }
            m
        });
    prop_oneof![
        3 => message.clone(),
        1 => prop::collection::vec(message, 0..4).prop_map(Value::Array),
    ]
}

proptest! {
    #[test]
    fn fuzz_invariants_hold_on_varied_spellings(value in arb_json(), seed in any::<u64>()) {
        crate::fuzzing::check_strict_json(write_text(&value, seed).as_bytes());
    }

    #[test]
    fn fuzz_invariants_hold_on_message_shaped_bodies(body in arb_envelope(), seed in any::<u64>()) {
        let text = write_text(&body, seed);
        crate::fuzzing::check_strict_json(text.as_bytes());
        let compact = serde_json::to_vec(&body).expect("serializes");
        crate::fuzzing::check_strict_json(&compact);
        // Most bodies are valid messages, so the payload round trip is exercised too.
        let accepted = crate::Payload::parse(text.as_bytes()).is_ok();
        prop_assert_eq!(accepted, crate::Payload::parse(&compact).is_ok());
    }

    #[test]
    fn scanner_agrees_with_serde_json_on_compact_text(value in arb_json()) {
        let text = serde_json::to_vec(&value).expect("serializes");
        check_agrees_with_serde(&text)?;
        let lazy = RawJson::parse_slice(&text).expect("accepted");
        prop_assert_eq!(lazy.as_bytes(), &text[..]);
    }

    #[test]
    fn scanner_agrees_with_serde_json_on_pretty_text(value in arb_json()) {
        check_agrees_with_serde(&serde_json::to_vec_pretty(&value).expect("serializes"))?;
    }

    #[test]
    fn scanner_agrees_with_serde_json_on_varied_spellings(value in arb_json(), seed in any::<u64>()) {
        let text = write_text(&value, seed);
        prop_assert!(parse_strict(text.as_bytes()).is_ok(), "{:?} is strict json", text);
        check_agrees_with_serde(text.as_bytes())?;
        // The value is kept without its surrounding whitespace, everything inside verbatim.
        let lazy = RawJson::parse_slice(text.as_bytes()).expect("accepted");
        prop_assert_eq!(lazy.as_text(), text.trim_matches([' ', '\t', '\n', '\r']));
    }

    #[test]
    fn scanner_agrees_with_serde_json_on_mutated_text(
        value in arb_json(),
        seed in any::<u64>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut text = write_text(&value, seed).into_bytes();
        for (at, byte) in edits {
            if text.is_empty() {
                text.push(byte);
            } else {
                let at = at.index(text.len());
                match byte % 3 {
                    0 => text[at] = byte,
                    1 => text.insert(at, byte),
                    _ => {
                        text.remove(at);
                    }
                }
            }
        }
        check_agrees_with_serde(&text)?;
    }

    #[test]
    fn scanner_agrees_with_serde_json_on_json_like_noise(s in "[\\[\\]{}\",:0-9a-z.eE+\\\\ -]{0,40}") {
        check_agrees_with_serde(s.as_bytes())?;
    }

    #[test]
    fn arbitrary_bytes_parse_alike(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_agrees_with_serde(&bytes)?;
    }

    #[test]
    fn without_member_matches_the_serde_json_edit(
        object in arb_object(arb_json()),
        seed in any::<u64>(),
        pick in any::<prop::sample::Index>(),
        absent in arb_text(),
    ) {
        let lazy = raw(&write_text(&object, seed));
        let map = object.as_object().expect("object");
        let key = if map.is_empty() || pick.index(4) == 0 {
            absent
        } else {
            map.keys().nth(pick.index(map.len())).expect("in range").clone()
        };
        let edited = lazy.without_member(&key);
        let reparsed = parse_strict(edited.as_bytes());
        prop_assert!(reparsed.is_ok(), "{:?} is refused: {:?}", edited, reparsed);
        let mut expected = map.clone();
        let removed = expected.shift_remove(&key);
        let expected = Value::Object(expected);
        prop_assert!(same_tree(&reparsed.expect("checked"), &expected), "{:?}", edited);
        prop_assert!(same_tree(&walk(&edited), &expected));
        if removed.is_none() {
            prop_assert_eq!(edited.as_bytes(), lazy.as_bytes(), "nothing to remove");
        }
    }

    #[test]
    fn with_member_matches_the_serde_json_edit(
        object in arb_object(arb_json()),
        member in arb_json(),
        seed in any::<u64>(),
        pick in any::<prop::sample::Index>(),
        absent in arb_text(),
    ) {
        let lazy = raw(&write_text(&object, seed));
        let member_raw = raw(&write_text(&member, seed.rotate_left(7)));
        let map = object.as_object().expect("object");
        let key = if map.is_empty() || pick.index(4) == 0 {
            absent
        } else {
            map.keys().nth(pick.index(map.len())).expect("in range").clone()
        };
        let edited = lazy.with_member(&key, &member_raw);
        let reparsed = parse_strict(edited.as_bytes());
        prop_assert!(reparsed.is_ok(), "{:?} is refused: {:?}", edited, reparsed);
        let mut expected = map.clone();
        // In place when present, appended otherwise: `Map::insert` with `preserve_order`.
        expected.insert(key.clone(), member);
        let expected = Value::Object(expected);
        prop_assert!(same_tree(&reparsed.expect("checked"), &expected), "{:?}", edited);
        prop_assert!(same_tree(&walk(&edited), &expected));
        prop_assert_eq!(edited.get(&key), Some(member_raw));
    }

    #[test]
    fn minified_drops_only_the_whitespace_between_tokens(value in arb_json(), seed in any::<u64>()) {
        let text = write_text(&value, seed);
        let lazy = raw(&text);
        let minified = lazy.minified();
        let mut written = Vec::new();
        lazy.write_minified(&mut written);
        prop_assert_eq!(&written[..], minified.as_bytes());
        let reparsed = parse_strict(minified.as_bytes());
        prop_assert!(reparsed.is_ok(), "{:?} is refused: {:?}", minified, reparsed);
        prop_assert!(same_tree(&reparsed.expect("checked"), &parse_strict(text.as_bytes()).expect("valid")));
        prop_assert!(same_tree(&walk(&minified), &walk(&lazy)));
        // Idempotent, and the identity on text without whitespace.
        prop_assert_eq!(minified.minified(), minified.clone());
        let compact = serde_json::to_vec(&value).expect("serializes");
        let compact_raw = RawJson::parse_slice(&compact).expect("valid");
        prop_assert_eq!(compact_raw.minified(), compact_raw);
        // Only whitespace went: the other bytes are the same, in order.
        let original = text.trim_matches([' ', '\t', '\n', '\r']).as_bytes();
        prop_assert!(minified.len() <= original.len());
        let mut rest = original.iter().filter(|b| !b" \t\n\r".contains(b));
        for b in minified.as_bytes().iter().filter(|b| !b" \t\n\r".contains(b)) {
            prop_assert_eq!(Some(b), rest.next());
        }
        prop_assert_eq!(rest.next(), None);
    }

    #[test]
    fn integer_readers_agree_with_serde_json(n in arb_number()) {
        let text = n.to_string();
        let lazy = raw(&text);
        prop_assert_eq!(lazy.as_i64(), n.as_i64(), "{}", text);
        prop_assert_eq!(lazy.as_u64(), n.as_u64(), "{}", text);
        prop_assert_eq!(lazy.as_f64().map(f64::to_bits), n.as_f64().map(f64::to_bits), "{}", text);
    }

    #[test]
    fn debug_never_panics_and_stays_short(s in any::<String>(), repeat in 1usize..80) {
        let lazy = RawJson::string(&s.repeat(repeat));
        let shown = format!("{lazy:?}");
        // At most 256 characters of the text plus the frame.
        prop_assert!(shown.chars().count() <= 256 + 40, "{}", shown.len());
        if lazy.as_text().chars().count() <= 256 {
            prop_assert_eq!(shown, format!("RawJson({})", lazy.as_text()));
        }
    }
}

// --- unit tests ----------------------------------------------------------------------------------

#[test]
fn parse_keeps_the_value_without_surrounding_whitespace() {
    let body = Bytes::from_static(b" \r\n\t{\"a\" : [1, 2]}\n ");
    let lazy = RawJson::parse(body, &ParseLimits::default()).expect("valid");
    assert_eq!(lazy.as_bytes(), b"{\"a\" : [1, 2]}");
    assert_eq!(lazy.to_string(), "{\"a\" : [1, 2]}");
    assert_eq!(lazy.len(), 14);
    assert!(!lazy.is_empty());
    assert_eq!(raw(" 7 ").as_bytes(), b"7");
}

#[test]
fn parse_refuses_what_the_strict_parser_refuses() {
    for body in [
        &b""[..],
        b"   ",
        b"{\"a\":1,\"a\":2}",
        b"{\"a\":1,\"\\u0061\":2}",
        b"\xEF\xBB\xBF{}",
        b"{} {}",
        b"\"\\ud800\"",
        b"1e400",
        b"[1,]",
        b"\"\xFF\"",
        b"{\"$serde_json::private::Number\":\"1\"}",
    ] {
        assert_eq!(
            RawJson::parse_slice(body).map(|_| ()),
            parse_strict(body).map(|_| ()),
            "{:?}",
            String::from_utf8_lossy(body)
        );
        assert!(RawJson::parse_slice(body).is_err());
    }
    let shallow = ParseLimits { max_depth: 2 };
    assert!(RawJson::parse(Bytes::from_static(b"[[1]]"), &shallow).is_ok());
    assert_eq!(
        RawJson::parse(Bytes::from_static(b"[[[1]]]"), &shallow),
        Err(ParseError::TooDeep { max: 2 })
    );
    assert_eq!(
        parse_strict_with(b"[[[1]]]", &shallow),
        Err(ParseError::TooDeep { max: 2 })
    );
}

#[test]
fn kind_and_scalar_readers() {
    assert_eq!(raw("null").kind(), Kind::Null);
    assert!(raw("null").is_null());
    assert_eq!(raw("true").as_bool(), Some(true));
    assert_eq!(raw("false").as_bool(), Some(false));
    assert_eq!(raw("false").kind(), Kind::Bool);
    assert_eq!(raw("\"true\"").as_bool(), None);
    assert_eq!(raw("-1.5").kind(), Kind::Number);
    assert_eq!(raw("-1.5").number_text(), Some("-1.5"));
    assert_eq!(raw("\"1\"").number_text(), None);
    assert_eq!(raw("\"x\"").kind(), Kind::String);
    assert_eq!(raw("[]").kind(), Kind::Array);
    assert_eq!(raw("{}").kind(), Kind::Object);
    assert!(raw("{}").is_object());
    assert!(!raw("[]").is_object());
    assert_eq!(raw("[]").members().map(Iterator::count), None);
    assert_eq!(raw("{}").items().map(Iterator::count), None);
    assert_eq!(raw("1").as_str(), None);
    assert_eq!(raw("{\"a\":1}").get("a").and_then(|a| a.as_i64()), Some(1));
    assert_eq!(raw("[1]").get("a"), None);
}

#[test]
fn integer_readers_follow_the_written_form() {
    // (text, as_i64, as_u64): what serde_json's `Number` answers for the same text.
    for (text, as_i64, as_u64) in [
        ("1", Some(1), Some(1)),
        ("-1", Some(-1), None),
        ("-0", Some(0), None),
        ("0", Some(0), Some(0)),
        ("1.0", None, None),
        ("1e2", None, None),
        ("1E+2", None, None),
        (
            "9223372036854775807",
            Some(i64::MAX),
            Some(9_223_372_036_854_775_807),
        ),
        ("9223372036854775808", None, Some(9_223_372_036_854_775_808)),
        ("-9223372036854775808", Some(i64::MIN), None),
        ("18446744073709551615", None, Some(u64::MAX)),
        ("18446744073709551616", None, None),
    ] {
        let lazy = raw(text);
        assert_eq!(lazy.as_i64(), as_i64, "{text}");
        assert_eq!(lazy.as_u64(), as_u64, "{text}");
        let Value::Number(n) = parse_strict(text.as_bytes()).expect("valid") else {
            panic!("{text} is a number");
        };
        assert_eq!(n.as_i64(), as_i64, "serde_json on {text}");
        assert_eq!(n.as_u64(), as_u64, "serde_json on {text}");
    }
    assert_eq!(raw("1e2").as_f64(), Some(100.0));
    assert_eq!(
        raw("-0").as_f64().map(f64::to_bits),
        Some((-0.0f64).to_bits())
    );
    for not_a_number in ["\"1\"", "true", "null", "[1]", "{}"] {
        assert_eq!(raw(not_a_number).as_i64(), None, "{not_a_number}");
        assert_eq!(raw(not_a_number).as_u64(), None, "{not_a_number}");
        assert_eq!(raw(not_a_number).as_f64(), None, "{not_a_number}");
    }
}

#[test]
fn strings_unescape_and_borrow_when_they_can() {
    assert!(matches!(
        raw(r#""plain é""#).as_str(),
        Some(Cow::Borrowed("plain é"))
    ));
    for (text, expected) in [
        (r#""a\"b""#, "a\"b"),
        (r#""a\\b""#, "a\\b"),
        (r#""\/""#, "/"),
        (r#""\u00e9""#, "é"),
        (r#""\u00E9""#, "é"),
        (r#""\ud83d\ude00""#, "😀"),
        (r#""\b\f\n\r\t\u0000""#, "\u{8}\u{c}\n\r\t\u{0}"),
        (r#""\\""#, "\\"),
        (r#""\\\"""#, "\\\""),
    ] {
        let string = raw(text);
        let value = string.as_str().expect("a string");
        assert!(matches!(value, Cow::Owned(_)), "{text}");
        assert_eq!(value, expected, "{text}");
    }
}

#[test]
fn get_finds_keys_written_with_escapes() {
    let object = raw(
        r#"{ "a\"b" : 1 , "\u00e9" :2,"\ud83d\ude00":3, "x\\y":4,"t\/s":5, "\u0000":6, "": 7 }"#,
    );
    for (key, expected) in [
        ("a\"b", 1),
        ("é", 2),
        ("😀", 3),
        ("x\\y", 4),
        ("t/s", 5),
        ("\u{0}", 6),
        ("", 7),
    ] {
        assert_eq!(
            object.get(key).and_then(|v| v.as_i64()),
            Some(expected),
            "{key:?}"
        );
    }
    // Only the object's own members count, not nested keys or string values.
    let object = raw(r#"{"a":"b","c":{"b":1},"d":["b"],"e":"\"b\":2"}"#);
    assert_eq!(object.get("b"), None);
    assert_eq!(
        object
            .get("a")
            .and_then(|a| a.as_str().map(Cow::into_owned))
            .as_deref(),
        Some("b")
    );
    assert_eq!(object.get("A"), None);
}

#[test]
fn members_and_items_skip_whitespace_everywhere() {
    let value = raw(
        " {\n\t\"a\" :\r\n[ 1 ,\t-2.5e+3 ,\"]\" , { } , [ ] ] , \"b\\\"}\" : { \"c\" : null } } ",
    );
    let members: Vec<(String, String)> = value
        .members()
        .expect("object")
        .map(|(k, v)| (k.into_owned(), v.as_text().to_owned()))
        .collect();
    assert_eq!(
        members,
        [
            (
                "a".to_owned(),
                "[ 1 ,\t-2.5e+3 ,\"]\" , { } , [ ] ]".to_owned()
            ),
            ("b\"}".to_owned(), "{ \"c\" : null }".to_owned()),
        ]
    );
    let items: Vec<String> = value
        .get("a")
        .expect("a")
        .items()
        .expect("array")
        .map(|v| v.as_text().to_owned())
        .collect();
    assert_eq!(items, ["1", "-2.5e+3", "\"]\"", "{ }", "[ ]"]);
    assert_eq!(raw("[ ]").items().expect("array").count(), 0);
    assert_eq!(raw("{ \n}").members().expect("object").count(), 0);
    assert!(same_tree(
        &walk(&value),
        &parse_strict(value.as_bytes()).expect("valid")
    ));
}

#[test]
fn walking_the_deepest_accepted_value_matches_serde_json() {
    let body = format!("{}{}", "[{\"k\\u0022\":".repeat(32), "}]".repeat(32));
    assert!(RawJson::parse_slice(body.as_bytes()).is_err(), "no value");
    let body = format!("{}0{}", "[{\"k\\u0022\":".repeat(32), "}]".repeat(32));
    let value = raw(&body);
    assert!(same_tree(
        &walk(&value),
        &parse_strict(body.as_bytes()).expect("valid")
    ));
    assert!(same_tree(
        &value.to_value(),
        &parse_strict(body.as_bytes()).expect("valid")
    ));
}

#[test]
fn without_member_keeps_order_raw_keys_and_the_rest_of_the_text() {
    let object = raw(r#"{"z":1, "a\u0062" : [2] ,"m":{"y":1}}"#);
    assert_eq!(
        object.without_member("ab").as_text(),
        r#"{"z":1 ,"m":{"y":1}}"#
    );
    assert_eq!(
        object.without_member("z").as_text(),
        r#"{"a\u0062" : [2] ,"m":{"y":1}}"#
    );
    assert_eq!(
        object.without_member("m").as_text(),
        r#"{"z":1, "a\u0062" : [2]}"#
    );
    assert_eq!(raw(r#"{"a":1}"#).without_member("a").as_text(), "{}");
    assert_eq!(raw(r#"{ "a" : 1 }"#).without_member("a").as_text(), "{  }");
    // Absent key, nested key, non-object: unchanged, byte for byte.
    assert_eq!(object.without_member("y"), object);
    assert_eq!(raw("[1]").without_member("a").as_text(), "[1]");
}

#[test]
fn edit_each_member_edits_in_one_walk_and_copies_nothing_when_nothing_changes() {
    use crate::MemberEdit;
    let object = raw(r#"{"z":1, "a\u0062" : [2] ,"m":{"y":1}}"#);
    let mut seen = Vec::new();
    let edited = object.edit_each_member(|key, value| {
        seen.push(key.to_owned());
        match key {
            "ab" => MemberEdit::Replace(raw(r#"{"new": "\u00e9"}"#)),
            "m" => MemberEdit::Remove,
            _ => {
                assert_eq!(value.as_text(), "1");
                MemberEdit::Keep
            }
        }
    });
    assert_eq!(seen, ["z", "ab", "m"], "keys unescaped, in order");
    assert_eq!(
        edited.map(|e| e.as_text().to_owned()).as_deref(),
        Some(r#"{"z":1,"a\u0062":{"new": "\u00e9"}}"#)
    );
    assert_eq!(object.edit_each_member(|_, _| MemberEdit::Keep), None);
    assert_eq!(
        object
            .edit_each_member(|_, _| MemberEdit::Remove)
            .map(|e| e.as_text().to_owned())
            .as_deref(),
        Some("{}")
    );
    assert_eq!(raw("[1]").edit_each_member(|_, _| MemberEdit::Remove), None);
}

#[test]
fn with_member_replaces_in_place_or_appends() {
    let object = raw(r#"{"z":1, "a\u0062" : [2] ,"m":{"y":1}}"#);
    let value = raw(r#"{"new": "\u00e9"}"#);
    assert_eq!(
        object.with_member("ab", &value).as_text(),
        r#"{"z":1, "a\u0062" : {"new": "\u00e9"} ,"m":{"y":1}}"#
    );
    assert_eq!(
        object.with_member("q\"", &value).as_text(),
        r#"{"z":1, "a\u0062" : [2] ,"m":{"y":1},"q\"":{"new": "\u00e9"}}"#
    );
    assert_eq!(
        raw("{}").with_member("a", &raw("1")).as_text(),
        r#"{"a":1}"#
    );
    assert_eq!(
        raw("{ }").with_member("a", &raw("1")).as_text(),
        r#"{"a":1 }"#
    );
    assert_eq!(raw("[1]").with_member("a", &raw("1")).as_text(), "[1]");
    // A default: appended when absent, nothing changed when present.
    assert_eq!(
        object.with_member_if_absent("ab", &value),
        object,
        "present: kept as it was"
    );
    assert_eq!(
        object.with_member_if_absent("q", &raw("1")).as_text(),
        r#"{"z":1, "a\u0062" : [2] ,"m":{"y":1},"q":1}"#
    );
    for edited in [
        object.with_member("ab", &value),
        object.with_member("q\"", &value),
        object.without_member("z"),
    ] {
        assert!(parse_strict(edited.as_bytes()).is_ok(), "{edited:?}");
    }
}

#[test]
fn minified_keeps_strings_and_number_spellings() {
    let lazy = raw("{ \"a b\" : [ 1E+2 , \" x\\\" , \\n \" ,\n\t{ } ] }");
    assert_eq!(
        lazy.minified().as_text(),
        "{\"a b\":[1E+2,\" x\\\" , \\n \",{}]}"
    );
    let compact = raw(r#"{"a":[1,"b c"]}"#);
    assert_eq!(compact.minified(), compact);
    assert_eq!(raw(" \"  \" ").minified().as_text(), "\"  \"");
}

#[test]
fn object_writer_builds_valid_objects() {
    let mut writer = ObjectWriter::new();
    assert!(writer.is_empty());
    writer.push("a\"\u{0}é", &raw("[1, 2]"));
    writer.push("b", &RawJson::string("x\ny"));
    assert!(!writer.is_empty());
    let object = writer.finish();
    assert_eq!(object.as_text(), r#"{"a\"\u0000é":[1, 2],"b":"x\ny"}"#);
    assert_eq!(object, json!({"a\"\u{0}é": [1, 2], "b": "x\ny"}));
    assert_eq!(ObjectWriter::default().finish().as_text(), "{}");
    assert_eq!(RawJson::empty_object().as_text(), "{}");
}

#[test]
fn values_built_in_process_are_valid() {
    let value = json!({"b": [1, "x", null], "a": {"c": 1.5}});
    let built = RawJson::from_value(&value);
    assert_eq!(built.as_text(), r#"{"b":[1,"x",null],"a":{"c":1.5}}"#);
    assert!(same_tree(&walk(&built), &value));
    assert_eq!(RawJson::from(value.clone()), RawJson::from(&value));
    assert_eq!(RawJson::string("é\"").as_text(), r#""é\"""#);
    assert_eq!(RawJson::string("é\"").as_str().as_deref(), Some("é\""));
    let array = RawJson::array([raw("1"), RawJson::string("a"), RawJson::null(), raw("{}")]);
    assert_eq!(array.as_text(), r#"[1,"a",null,{}]"#);
    assert!(parse_strict(array.as_bytes()).is_ok());
    assert_eq!(RawJson::array([]).as_text(), "[]");
    assert!(RawJson::null().is_null());
}

#[test]
fn equality_with_a_value_compares_values_not_texts() {
    assert_eq!(raw(r#"{ "a" : [ 1 ] }"#), json!({"a": [1]}));
    assert_eq!(raw(r#""\u0061""#), json!("a"));
    assert_ne!(raw(r#"{"a":1}"#), json!({"a": 2}));
    // Between two raw values it is the text that counts.
    assert_ne!(raw(r#"{"a":1}"#), raw(r#"{ "a":1}"#));
}

#[test]
fn serializing_copies_the_exact_text() {
    #[derive(serde::Serialize)]
    struct Outer {
        inner: RawJson,
    }
    let outer = Outer {
        inner: raw(r#"{"n":1E2, "s":"\u00e9"}"#),
    };
    assert_eq!(
        serde_json::to_string(&outer).expect("serializes"),
        r#"{"inner":{"n":1E2, "s":"\u00e9"}}"#
    );
}

#[test]
fn debug_shows_short_values_whole_and_truncates_long_ones() {
    assert_eq!(format!("{:?}", raw(r#"{"a": 1}"#)), r#"RawJson({"a": 1})"#);
    let long = RawJson::string(&"é".repeat(300));
    assert_eq!(long.len(), 602);
    let shown = format!("{long:?}");
    let expected = format!("RawJson(\"{}… 602 bytes)", "é".repeat(255));
    assert_eq!(shown, expected);
    // Exactly 256 characters are shown whole.
    let edge = RawJson::string(&"a".repeat(254));
    assert_eq!(format!("{edge:?}"), format!("RawJson({})", edge.as_text()));
    let over = RawJson::string(&"a".repeat(255));
    assert_eq!(
        format!("{over:?}"),
        format!("RawJson(\"{}… 257 bytes)", "a".repeat(255))
    );
}

// --- size ----------------------------------------------------------------------------------------

/// `[0,1,…,99,0,1,…]` of about `size` bytes.
fn small_numbers(size: usize) -> Vec<u8> {
    let mut body = b"[".to_vec();
    let mut i = 0u32;
    while body.len() < size {
        body.extend_from_slice((i % 100).to_string().as_bytes());
        body.push(b',');
        i += 1;
    }
    body.extend_from_slice(b"0]");
    body
}

/// `{"k0":0,"k1":1,…}` with `count` keys, the last one repeating `duplicate` when given.
fn wide_object(count: usize, duplicate: Option<usize>) -> Vec<u8> {
    let mut body = String::from("{");
    for i in 0..count {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!("\"k{i}\":{i}"));
    }
    if let Some(d) = duplicate {
        body.push_str(&format!(",\"k{d}\":0"));
    }
    body.push('}');
    body.into_bytes()
}

#[test]
fn four_mib_of_small_numbers_validates() {
    let body = small_numbers(4 << 20);
    assert!(body.len() >= 4 << 20);
    let lazy = RawJson::parse(Bytes::from(body), &ParseLimits::default()).expect("valid");
    let mut count = 0usize;
    let mut last = None;
    for item in lazy.items().expect("array") {
        count += 1;
        last = item.as_i64();
    }
    assert!(count > 1_000_000, "{count} items");
    assert_eq!(last, Some(0));
}

#[test]
fn three_hundred_thousand_keys_validate_and_one_duplicate_is_refused() {
    const KEYS: usize = 300_000;
    let body = wide_object(KEYS, None);
    let lazy = RawJson::parse(Bytes::from(body), &ParseLimits::default()).expect("valid");
    assert_eq!(lazy.get("k299999").and_then(|v| v.as_i64()), Some(299_999));
    assert_eq!(crate::fold::fold_collision(&lazy), None);

    for duplicate in [0, 16, 123_456, KEYS - 1] {
        let body = wide_object(KEYS, Some(duplicate));
        assert_eq!(
            RawJson::parse(Bytes::from(body), &ParseLimits::default()),
            Err(ParseError::DuplicateKey {
                key: format!("k{duplicate}")
            }),
            "k{duplicate}"
        );
    }
    // A duplicate among the first 16 keys (compared exactly) and right after them.
    for (count, duplicate) in [(16, 3), (17, 16), (17, 0), (2, 1)] {
        let body = wide_object(count, Some(duplicate));
        assert_eq!(
            RawJson::parse_slice(&body),
            Err(ParseError::DuplicateKey {
                key: format!("k{duplicate}")
            }),
            "{count} keys, k{duplicate}"
        );
    }
}
