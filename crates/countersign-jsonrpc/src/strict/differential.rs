//! The scanner against the serde_json-based reference (`reference.rs`): every input must get the
//! same span, or a refusal of the same kind (and, for a key or depth refusal, the same payload).
//! Syntax errors only need to agree that they are syntax errors; their positions and wording
//! are the scanner's own.
//!
//! `PROPTEST_CASES=200000 cargo test -p countersign-jsonrpc differential` for a longer run.

use proptest::prelude::*;
use proptest::sample::{Index, select};

use super::reference::validate_strict_reference;
use super::*;

mod inputs;

use inputs::*;

/// Depth limits the properties run under: the edges, the default and the ceiling's neighbours.
const DEPTHS: [usize; 11] = [0, 1, 2, 3, 4, 8, 64, 125, 126, 127, 1000];

fn same_outcome(
    scanned: &Result<(usize, usize), ParseError>,
    reference: &Result<(usize, usize), ParseError>,
) -> bool {
    match (scanned, reference) {
        (Err(ParseError::Syntax { .. }), Err(ParseError::Syntax { .. })) => true,
        (scanned, reference) => scanned == reference,
    }
}

/// How the scanner and the reference disagree on `bytes`, if they do.
fn disagreement(bytes: &[u8], max_depth: usize) -> Option<String> {
    let limits = ParseLimits { max_depth };
    let scanned = validate_strict(bytes, &limits);
    let reference = validate_strict_reference(bytes, &limits);
    (!same_outcome(&scanned, &reference)).then(|| {
        format!(
            "{:?} (max depth {max_depth}): scanner {scanned:?}, serde_json {reference:?}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// How the scanner and the reference disagree on `text` under each of [`DEPTHS`].
fn disagreements_at_every_depth(text: &str) -> impl Iterator<Item = String> + '_ {
    DEPTHS
        .into_iter()
        .filter_map(|max_depth| disagreement(text.as_bytes(), max_depth))
}

/// The disagreements on `text` placed in each of `contexts` (where `#` stands for it), at every
/// depth limit.
fn disagreements_in_contexts(text: &str, contexts: &[&str]) -> Vec<String> {
    contexts
        .iter()
        .flat_map(|context| {
            disagreements_at_every_depth(&context.replace('#', text)).collect::<Vec<_>>()
        })
        .collect()
}

fn check(bytes: &[u8], max_depth: usize) -> Result<(), TestCaseError> {
    match disagreement(bytes, max_depth) {
        Some(message) => Err(TestCaseError::fail(message)),
        None => Ok(()),
    }
}

#[test]
fn boundary_constants_are_where_they_claim() {
    assert_eq!(MAX_F64.parse::<f64>(), Ok(f64::MAX));
    assert_eq!(BELOW_HALFWAY.parse::<f64>(), Ok(f64::MAX));
    assert_eq!(HALFWAY.parse::<f64>(), Ok(f64::INFINITY));
}

#[test]
fn edge_numbers_agree_alone_and_nested() {
    let boundary = boundary_numbers();
    let numbers = EDGE_NUMBERS
        .iter()
        .copied()
        .chain(boundary.iter().map(String::as_str));
    let contexts = [
        "#",
        " #\n",
        "[#]",
        "[#,1]",
        r#"{"a":#}"#,
        r#"{"a":# , "b":2}"#,
    ];
    let mut disagreements = Vec::new();
    for number in numbers {
        disagreements.extend(disagreements_in_contexts(number, &contexts));
    }
    for n in [300, 308, 309, 310, 400] {
        for digit in ["1", "9"] {
            disagreements.extend(disagreement(digit.repeat(n).as_bytes(), 64));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

#[test]
fn near_misses_agree_alone_and_nested() {
    let contexts = ["#", "[#]", r#"{"k":#}"#, r#"[{"k":[#]}]"#];
    let mut disagreements = Vec::new();
    for text in NEAR_MISSES {
        disagreements.extend(disagreements_in_contexts(text, &contexts));
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

proptest! {
    #[test]
    fn generated_text_agrees(
        text in any_json_text(),
        (before, after) in (whitespace(), whitespace()),
        max_depth in select(&DEPTHS[..]),
    ) {
        check(format!("{before}{text}{after}").as_bytes(), max_depth)?;
    }

    #[test]
    fn valid_text_with_one_edit_agrees(
        text in json_text(true),
        edit in mutation(),
        max_depth in select(&DEPTHS[..]),
    ) {
        check(&mutate(&text, &[edit]), max_depth)?;
    }

    #[test]
    fn mutated_text_agrees(
        text in any_json_text(),
        mutations in prop::collection::vec(mutation(), 1..3),
        max_depth in select(&DEPTHS[..]),
    ) {
        check(&mutate(&text, &mutations), max_depth)?;
    }

    #[test]
    fn nesting_around_the_limit_agrees(
        kinds in prop::collection::vec(prop::bool::weighted(0.3), 0..140),
        key in select(&[
            "\"a\"", "\"\\u0061\"", "\"$serde_json::private::Number\"",
            "\"$serde_json::private::Numbe\\u0072\"", "\"$serde_json::private::RawValue\"",
            "\"\\ud800\"", "\"\x01\"", "a",
        ][..]),
        inner in select(&[
            "", "1", "1.5", "-0", "1e400", "{}", "[]", "\"s\"", "{\"a\":1}",
            "{\"$serde_json::private::Number\":\"1\"}", "{\"$serde_json::private::Numbe\\u0072\":1}",
            "{\"$serde_json::private::RawValue\":1}", "{\"a\":1,\"a\":2}", "{\"\\ud800\":1}",
            "{\"a\"", "{\"a\":", "{x", "[x", "{", "[", "{,", "[,", "{}x", "[1,]", "{\"a\":1,}",
            "{\"a\":1 , }",
        ][..]),
        cut in prop::option::weighted(0.2, any::<Index>()),
        delta in -3i64..=3,
        fixed in prop::option::of(select(&DEPTHS[..])),
    ) {
        let around = usize::try_from(kinds.len() as i64 + delta).unwrap_or(0);
        check(&nested(&kinds, key, inner, cut), fixed.unwrap_or(around))?;
    }

    #[test]
    fn keys_unescape_as_serde_json_unescapes_them(key in string(false)) {
        // A key repeated is refused with the scanner's unescaping of it.
        let body = format!("{{{key}:0,{key}:1}}");
        match serde_json::from_str::<String>(&key) {
            Ok(unescaped) if !unescaped.starts_with(SERDE_JSON_PRIVATE_PREFIX) => prop_assert_eq!(
                validate_strict(body.as_bytes(), &ParseLimits::default()),
                Err(ParseError::DuplicateKey { key: unescaped })
            ),
            _ => check(body.as_bytes(), 64)?,
        }
    }

    #[test]
    fn json_alphabet_soup_agrees(
        s in "[\\[\\]{}\",:0-9a-zA-Z.eE+ \\\\/\n-]{0,48}",
        max_depth in select(&DEPTHS[..]),
    ) {
        check(s.as_bytes(), max_depth)?;
    }

    #[test]
    fn arbitrary_bytes_agree(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        max_depth in select(&DEPTHS[..]),
    ) {
        check(&bytes, max_depth)?;
    }
}
