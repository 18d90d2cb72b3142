//! The collisions `fold_collision` reports, and the pair it names, for every kind of key: the
//! all-ASCII objects the envelope meets on every request and the non-ASCII, NUL and escaped
//! keys that must take the exact Unicode fold.

use proptest::strategy::{Just, Strategy};

use super::*;
use crate::message::{EnvelopeError, Error, Payload};

fn collision(text: &str) -> Option<(String, String)> {
    fold_collision(&RawJson::parse_slice(text.as_bytes()).expect("valid json"))
}

fn pair(first: &str, second: &str) -> Option<(String, String)> {
    Some((first.to_owned(), second.to_owned()))
}

/// `{"key0":0, …}` with `count` lowercase keys, then `extra` members as written.
fn wide(count: usize, extra: &str) -> String {
    let mut text = String::from("{");
    for i in 0..count {
        text.push_str(&format!(r#""key{i}":{i},"#));
    }
    text.push_str(extra);
    text.trim_end_matches(',').to_owned() + "}"
}

#[test]
fn capitalised_ascii_keys_that_differ_otherwise_do_not_collide() {
    assert_eq!(
        collision(
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#
        ),
        None
    );
    assert_eq!(collision(r#"{"A":1,"B":2,"ab":3,"aB1":4,"Ba":5}"#), None);
    assert_eq!(collision("{}"), None);
    assert_eq!(collision("[1]"), None, "not an object");
}

#[test]
fn ascii_keys_equal_ignoring_case_collide_and_the_earliest_first_key_is_named() {
    assert_eq!(collision(r#"{"name":1,"Name":2}"#), pair("name", "Name"));
    // The first key that collides with any later one, then the first key it collides with.
    assert_eq!(collision(r#"{"A":1,"B":2,"b":3,"a":4}"#), pair("A", "a"));
    assert_eq!(
        collision(r#"{"x":1,"NAME":2,"Name":3,"name":4}"#),
        pair("NAME", "Name")
    );
    // Only the fold counts, not values or nested keys.
    assert_eq!(collision(r#"{"a":{"A":1},"b":"B"}"#), None);
}

#[test]
fn escaped_keys_fold_as_their_unescaped_text() {
    assert_eq!(collision(r#"{"\u0041":1,"a":2}"#), pair("A", "a"));
    assert_eq!(
        collision(r#"{"n\u0061me":1,"NAME":2}"#),
        pair("name", "NAME")
    );
    assert_eq!(collision(r#"{"\u004e\u0041ME":1,"x":2}"#), None);
    // An escaped backslash is a key character like any other.
    assert_eq!(collision(r#"{"a\\b":1,"A\\B":2}"#), pair("a\\b", "A\\B"));
    assert_eq!(collision(r#"{"a\\b":1,"a\b":2}"#), None);
}

#[test]
fn a_non_ascii_key_in_the_object_takes_the_exact_fold_for_every_key() {
    // `ſ` (U+017F) folds to `s`, the Kelvin sign (U+212A) to `k`: onto ASCII keys.
    assert_eq!(
        collision(r#"{"Class":1,"claſſ":2}"#),
        pair("Class", "claſſ")
    );
    assert_eq!(
        collision(r#"{"KEY":1,"\u212Aey":2}"#),
        pair("KEY", "\u{212A}ey")
    );
    assert_eq!(
        collision("{\"x\":1,\"é\":2,\"Sum\":3,\"ſum\":4}"),
        pair("Sum", "ſum")
    );
    // The ASCII pair is still found when a non-ASCII key sits between them.
    assert_eq!(collision(r#"{"Ab":1,"é":2,"aB":3}"#), pair("Ab", "aB"));
    assert_eq!(collision(r#"{"é":1,"É":2}"#), pair("é", "É"));
    assert_eq!(collision(r#"{"é":1,"e":2,"s":3,"ß":4}"#), None);
}

#[test]
fn nul_is_removed_before_comparing() {
    assert_eq!(
        collision(r#"{"name":1,"name\u0000":2}"#),
        pair("name", "name\u{0}")
    );
    assert_eq!(
        collision(r#"{"Na\u0000me":1,"nAME":2}"#),
        pair("Na\u{0}me", "nAME")
    );
    assert_eq!(collision(r#"{"\u0000":1,"":2}"#), pair("\u{0}", ""));
    assert_eq!(collision(r#"{"\u0000a":1,"b":2}"#), None);
}

#[test]
fn wide_objects_report_the_first_key_that_repeats_an_earlier_fold() {
    assert_eq!(collision(&wide(40, "")), None);
    assert_eq!(collision(&wide(40, r#""Other":1,"OTHER2":2"#)), None);
    // Past 16 keys the first later key whose fold was seen is named, with that earlier key.
    assert_eq!(
        collision(&wide(17, r#""KEY3":1,"Key1":2"#)),
        pair("key3", "KEY3")
    );
    assert_eq!(
        collision(&wide(20, r#""k\u0045y7":1"#)),
        pair("key7", "kEy7")
    );
    assert_eq!(
        collision(&wide(20, r#""\u212Aey2":1"#)),
        pair("key2", "\u{212A}ey2")
    );
    assert_eq!(
        collision(&wide(20, r#""ſ":1,"KEY9\u0000":2,"S":3"#)),
        pair("key9", "KEY9\u{0}")
    );
    assert_eq!(collision(&wide(20, r#""é":1,"É":2"#)), pair("é", "É"));
    // Exactly 16 keys are still compared pairwise (the earliest first key is named), 17 are not.
    assert_eq!(
        collision(&wide(13, r#""B":1,"b":2,"KEY3":3"#)),
        pair("key3", "KEY3")
    );
    assert_eq!(
        collision(&wide(14, r#""B":1,"b":2,"KEY3":3"#)),
        pair("B", "b")
    );
}

fn envelope_error(body: &str) -> EnvelopeError {
    match Payload::parse(body.as_bytes()) {
        Err(Error::Envelope(e)) => e,
        other => panic!("{body}: expected an envelope error, got {other:?}"),
    }
}

fn key_collision(first: &str, second: &str) -> EnvelopeError {
    EnvelopeError::KeyCollision {
        first: first.to_owned(),
        second: second.to_owned(),
    }
}

#[test]
fn meta_keys_that_collide_after_folding_are_refused_wherever_meta_is_spelled() {
    let body = |meta_key: &str, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{}},"{meta_key}":{meta}}}}}"#
        )
    };
    let twice = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/ProtocolVersion":"2025-06-18"}"#;
    for meta_key in ["_meta", r"_m\u0065ta", r"\u005fmeta"] {
        assert_eq!(
            envelope_error(&body(meta_key, twice)),
            key_collision(
                "io.modelcontextprotocol/protocolVersion",
                "io.modelcontextprotocol/ProtocolVersion"
            ),
            "{meta_key}"
        );
    }
    assert_eq!(
        envelope_error(&body("_meta", r#"{"progressToken":1,"progreſſToken":2}"#)),
        key_collision("progressToken", "progreſſToken")
    );
    assert_eq!(
        envelope_error(&body("_meta", r#"{"a":1,"a\u0000":2}"#)),
        key_collision("a", "a\u{0}")
    );
    // A collision in params is reported before one in its `_meta`.
    let both = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"a":1,"A":2},"name":"t","NAME":"u"}}"#;
    assert_eq!(envelope_error(both), key_collision("name", "NAME"));
    // `_meta` that is not an object has no keys to collide; a `_Meta` beside it collides.
    assert!(Payload::parse(body("_meta", "[1,1]").as_bytes()).is_ok());
    let shadowed =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{},"_Meta":{}}}"#;
    assert_eq!(envelope_error(shadowed), key_collision("_meta", "_Meta"));
    // Nested objects other than `_meta` are the tool's business.
    let nested = body("_meta", "{}").replace(r#""arguments":{}"#, r#""arguments":{"a":1,"A":2}"#);
    assert!(Payload::parse(nested.as_bytes()).is_ok());
}

#[test]
fn the_benchmark_request_passes_the_envelope() {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_products","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let payload = Payload::parse(body).expect("valid");
    assert_eq!(payload.to_vec(), body.to_vec());
    let wide_meta = wide(
        30,
        r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#,
    );
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","_meta":{wide_meta}}}}}"#
    );
    assert!(Payload::parse(body.as_bytes()).is_ok());
    let body = body.replace(r#""key29":29"#, r#""KEY28":29"#);
    assert_eq!(envelope_error(&body), key_collision("key28", "KEY28"));
}

proptest::proptest! {
    /// The word-at-a-time key reading agrees with the byte-by-byte definition on any bytes,
    /// around every chunk boundary.
    #[test]
    fn key_kinds_are_read_as_byte_by_byte(
        key in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::prelude::any::<u8>(),
                proptest::sample::select(b"azAZ@[`{\0\x7f\x80".to_vec()),
            ],
            0..40,
        )
    ) {
        let expected = (key.is_ascii() && !key.contains(&0))
            .then(|| !key.iter().any(u8::is_ascii_uppercase));
        proptest::prop_assert_eq!(ascii_key_kind(&key), expected);
    }
}

// --- settled by the strict parse -----------------------------------------------------------------

/// Keys that fold together in every way the envelope knows: case, `ſ`, the Kelvin sign, NUL,
/// escapes, and keys no other key folds onto.
const FOLD_KEYS: &[&str] = &[
    "name",
    "Name",
    "NAME",
    "nam\\u0065",
    "name\\u0000",
    "arguments",
    "Arguments",
    "_meta",
    "_Meta",
    "\\u005fmeta",
    "s",
    "S",
    "ſ",
    "k",
    "\u{212a}",
    "é",
    "É",
    "id",
    "x",
];

fn object_of(members: &[(usize, String)]) -> String {
    let members: Vec<String> = members
        .iter()
        .map(|(key, value)| format!("\"{}\":{value}", FOLD_KEYS[*key]))
        .collect();
    format!("{{{}}}", members.join(","))
}

fn fold_members(value: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    proptest::collection::vec((0..FOLD_KEYS.len(), value), 0..6)
        .prop_map(|members| object_of(&members))
}

proptest::proptest! {
    /// The strict parse settles most bodies' folds in passing, and the envelope then skips its
    /// own checks: the verdict must be the one the envelope's checks give on their own, for
    /// collisions in the message, in `params`, in `_meta`, in `arguments` (where they are the
    /// tool's business) and in several objects at once.
    #[test]
    fn a_body_settled_by_the_parse_gets_the_envelopes_own_verdict(
        params in fold_members(proptest::prop_oneof![
            Just("\"v\"".to_owned()),
            fold_members(Just("1".to_owned())),
        ]),
        meta in fold_members(Just("\"m\"".to_owned())),
        top in proptest::option::of(0..FOLD_KEYS.len()),
        batched in proptest::bool::ANY,
    ) {
        let params = params.replacen('{', &format!("{{\"_meta\":{meta},"), 1).replace(",}", "}");
        let extra = top.map(|key| format!(",\"{}\":1", FOLD_KEYS[key])).unwrap_or_default();
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}{extra}}}"#
        );
        // In a batch every object sits one level deeper.
        let body = if batched { format!("[{body}]") } else { body };
        let by_parse = Payload::parse(body.as_bytes());
        let by_envelope = RawJson::parse_slice(body.as_bytes())
            .map_err(Error::Parse)
            .and_then(|raw| Payload::from_raw(&raw).map_err(Error::Envelope));
        proptest::prop_assert_eq!(by_parse, by_envelope, "{}", body);
    }
}

#[test]
fn the_parse_settles_plain_ascii_bodies_and_leaves_the_rest_to_the_envelope() {
    let settled = |body: &str| {
        crate::strict::scan_strict(body.as_bytes(), &Default::default())
            .expect("valid")
            .fold_free
    };
    assert!(settled(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1,"b":{"A":1}},"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}}"#
    ));
    // Below `params._meta` of a batched message, keys are the tools' business.
    assert!(settled(
        r#"[{"params":{"arguments":{"x":{"a":1,"A":2,"ſ":3}}}}]"#
    ));
    for unsettled in [
        r#"{"params":{"arguments":{"a":1,"A":2}}}"#,
        r#"{"params":{"nam\u0065":1}}"#,
        r#"{"params":{"ſ":1}}"#,
        r#"[{"params":{"_meta":{"a":1,"A":2}}}]"#,
        &wide(17, r#""k":1"#),
    ] {
        assert!(!settled(unsettled), "{unsettled}");
    }
}
