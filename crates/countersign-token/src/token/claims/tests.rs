//! The fast path must never decide differently from serde: whatever it reads, serde reads
//! identically, and whatever it declines is left to serde.

use proptest::prelude::*;

use super::super::tests::claims;
use super::super::{Claims, parse_object};
use super::{read_minted, write};

fn serde_reads(json: &[u8]) -> Option<Claims> {
    parse_object::<Claims>(json).ok()
}

/// Any string, including quotes, backslashes, control characters and non-ASCII text.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9_./:-]{0,24}",
        ".{0,12}",
        prop::collection::vec(any::<char>(), 0..8).prop_map(|chars| chars.into_iter().collect()),
    ]
}

prop_compose! {
    fn any_claims()(
        v in prop_oneof![Just(1u32), any::<u32>()],
        (iss, sub, up, m, tool) in (any_text(), any_text(), any_text(), any_text(), any_text()),
        (ah, tdh, rule, ch, jti) in (any_text(), any_text(), any_text(), any_text(), any_text()),
        (sid, ph, st, aid) in (
            proptest::option::of(any_text()), proptest::option::of(any_text()),
            proptest::option::of(any_text()), proptest::option::of(any_text()),
        ),
        iat in any::<u64>(), exp in any::<u64>(),
    ) -> Claims {
        Claims { v, iss, sub, sid, up, m, tool, ah, ph, tdh, rule, ch, iat, exp, jti, st, aid }
    }
}

/// A byte the edits below insert or write: JSON's structure, escapes, digits and the bytes
/// just around the printable range.
fn any_edit_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        prop::sample::select(b"{}[]\":,\\ 0159-.eEnul\x00\x1f\x7f\xc3\xa9".to_vec()),
        any::<u8>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn claims_are_written_as_serde_writes_them(claims in any_claims()) {
        let json = serde_json::to_vec(&claims).expect("claims serialize");
        prop_assert_eq!(write(&claims), json);
    }

    #[test]
    fn minted_claims_read_the_same_on_either_path(claims in any_claims()) {
        let json = serde_json::to_vec(&claims).expect("claims serialize");
        if let Some(fast) = read_minted(&json) {
            prop_assert_eq!(&fast, &claims);
        }
        prop_assert_eq!(serde_reads(&json), Some(claims));
    }

    #[test]
    fn the_fast_path_reads_nothing_serde_would_read_otherwise(
        claims in any_claims(),
        at in any::<prop::sample::Index>(),
        byte in any_edit_byte(),
        edit in 0..3u8,
    ) {
        let mut json = serde_json::to_vec(&claims).expect("claims serialize");
        let at = at.index(json.len());
        match edit {
            0 => json[at] = byte,
            1 => json.insert(at, byte),
            _ => {
                json.remove(at);
            }
        }
        if let Some(fast) = read_minted(&json) {
            prop_assert_eq!(Some(fast), serde_reads(&json));
        }
    }
}

/// What a redemption carries, every optional field included: names, base64url hashes and ids,
/// no escapes.
fn plain_claims() -> Claims {
    Claims {
        ph: Some("x4vXj0-aO8m7cV0dC0aY2eHkJ3p1q9rB7sT6uW5vX4y".into()),
        st: Some("upstream-state".into()),
        aid: Some("apr_1".into()),
        ..claims()
    }
}

#[test]
fn minted_claims_without_escapes_take_the_fast_path() {
    let every_field = plain_claims();
    let no_optional_field = Claims {
        sid: None,
        ph: None,
        st: None,
        aid: None,
        ..plain_claims()
    };
    for claims in [every_field, no_optional_field] {
        let json = serde_json::to_vec(&claims).expect("claims serialize");
        assert_eq!(read_minted(&json), Some(claims));
    }
}

#[test]
fn other_spellings_of_the_same_claims_are_left_to_serde() {
    let claims = plain_claims();
    let minted = String::from_utf8(serde_json::to_vec(&claims).expect("serialize")).expect("utf-8");
    let respelled = [
        // Whitespace after the object.
        format!("{minted} "),
        // Whitespace inside it.
        minted.replacen(",\"sub\":", ", \"sub\":", 1),
        // An escape that stands for the same character.
        minted.replacen("alice", "\\u0061lice", 1),
        // Another field order.
        minted
            .replacen("{\"v\":1,", "{", 1)
            .replacen('}', ",\"v\":1}", 1),
    ];
    for json in respelled {
        assert_eq!(read_minted(json.as_bytes()), None, "{json}");
        assert_eq!(serde_reads(json.as_bytes()), Some(claims.clone()), "{json}");
    }
}

#[test]
fn claims_serde_refuses_are_not_read_either() {
    let minted =
        String::from_utf8(serde_json::to_vec(&plain_claims()).expect("serialize")).expect("utf-8");
    let refused = [
        minted.replacen("\"iat\":1700000000", "\"iat\":01700000000", 1),
        minted.replacen("\"iat\":1700000000", "\"iat\":1700000000.0", 1),
        minted.replacen("\"iat\":1700000000", "\"iat\":18446744073709551616", 1),
        minted.replacen("{\"v\":1", "{\"v\":4294967296", 1),
        minted.replacen("\"sid\":\"s-1\"", "\"sid\":null,\"sid\":\"x\"", 1),
        minted.replacen('}', ",\"extra\":\"x\"}", 1),
        minted.replacen("alice", "al\tice", 1),
        minted.replacen('}', "", 1),
    ];
    for json in refused {
        assert_eq!(read_minted(json.as_bytes()), None, "{json}");
        assert_eq!(serde_reads(json.as_bytes()), None, "{json}");
    }
}
