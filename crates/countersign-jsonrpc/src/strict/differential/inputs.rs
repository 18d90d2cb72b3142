//! Inputs for the differential tests: numbers at the overflow boundary, near misses of the
//! grammar, and generators of JSON text and of the ways to break it.

use proptest::prelude::*;
use proptest::sample::{Index, select};

/// The largest double, and the integers either side of the midpoint between it and the next
/// power of two: the first rounds down to the largest double, the second (a tie, rounded to the
/// even infinity) overflows.
pub(super) const MAX_F64: &str = "179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368";
pub(super) const BELOW_HALFWAY: &str = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791";
pub(super) const HALFWAY: &str = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792";

pub(super) const EDGE_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "0.0e0",
    "-0.0",
    "1",
    "-1",
    "1.5",
    "1e5",
    "1E+5",
    "1e-5",
    "2.5E-3",
    "1.0E+2",
    "01",
    "-01",
    "00",
    "0.",
    "1.",
    "-.5",
    ".5",
    "1e",
    "1e+",
    "1E-",
    "-",
    "+1",
    "--1",
    "1.e5",
    "1.5e",
    "0x10",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "-1.7976931348623159e308",
    "17976931348623157e292",
    "17976931348623159e292",
    "1e308",
    "9.999e308",
    "1e309",
    "-1e309",
    "1e400",
    "1E+999",
    "1e-400",
    "-1e-400",
    "0.5e309",
    "0.05e310",
    "0e999999",
    "0.0000001e310",
    "0.0000001e316",
    "9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "1e0000000000000000000000308",
    "1e00000000000000000000000309",
    "1e99999999999999999999999",
    "1e-99999999999999999999999",
    "0.1e-99999999999999999999",
    "123.456e-789",
];

/// Texts one edit away from valid, or valid with a trap: each refusal the scanner must make
/// (or must not make) at least once, whatever the generators happen to draw.
pub(super) const NEAR_MISSES: &[&str] = &[
    // Trailing, doubled and missing separators.
    "[1,]",
    "[1 , ]",
    "[[],]",
    "{\"a\":1,}",
    "{\"a\":1 ,\n}",
    "{\"a\":{},}",
    "[,]",
    "[,1]",
    "{,}",
    "{,\"a\":1}",
    "[1,,2]",
    "{\"a\":1,,\"b\":2}",
    "[1 2]",
    "{\"a\":1 \"b\":2}",
    "{\"a\" 1}",
    "{\"a\":}",
    "{\"a\"}",
    "{1:1}",
    "{a:1}",
    "{'a':1}",
    "[",
    "{",
    "[1",
    "{\"a\":1",
    "]",
    "}",
    "[]]",
    "{}}",
    "[}",
    "{]",
    // Repeated keys, also once unescaped.
    "{\"a\":1,\"a\":2}",
    "{\"a\":1,\"\\u0061\":2}",
    "{\"\\u0061\":1,\"a\":2}",
    "{\"a\\u0062\":1,\"ab\":2}",
    "{\"\\/\":1,\"/\":2}",
    "{\"\\\\\":1,\"\\u005c\":2}",
    "{\"\\ud83d\\ude00\":1,\"😀\":2}",
    "{\"a\\u0000\":1,\"a\":2}",
    "{\"a\":1,\"b\":{\"a\":2}}",
    "[{\"a\":1},{\"a\":2}]",
    "{\"a\":{\"b\":1,\"b\":2}}",
    // Surrogates and escapes.
    "\"\\ud800\"",
    "\"\\udc00\"",
    "\"\\udfff\"",
    "\"\\ud800\\u0041\"",
    "\"\\ud800\\ud800\"",
    "\"\\ud800\\ud800\\udc00\"",
    "\"\\udc00\\ud800\"",
    "\"\\ud800x\"",
    "\"\\ud800\\n\"",
    "\"\\ud800\\",
    "\"\\ud800\\u\"",
    "\"\\ud83d\\ude00\"",
    "\"\\uDBFF\\uDFFF\"",
    "{\"\\ud800\":1}",
    "{\"\\udc00\":1}",
    "\"\\u12\"",
    "\"\\u12G4\"",
    "\"\\x\"",
    "\"\\U0041\"",
    "\"\\'\"",
    "\"\t\"",
    "\"\n\"",
    "\"\u{1f}\"",
    "\"\u{7f}\"",
    "\"abc",
    "\"",
    // Reserved keys.
    "{\"$serde_json::private::Number\":\"1\"}",
    "{\"$serde_json::private::Number\":1}",
    "{\"$serde_json::private::Numbe\\u0072\":\"1\"}",
    "{\"\\u0024serde_json::private::Number\":1}",
    "{\"$serde_json::private::RawValue\":{}}",
    "{\"a\":1,\"$serde_json::private::Number\":\"1\"}",
    "{\"$serde_json::private:\":1}",
    // Literals, comments, trailing data.
    "nul",
    "nulll",
    "tru",
    "True",
    "NaN",
    "Infinity",
    "[true false]",
    "/* c */ 1",
    "1 // c",
    "1 2",
    "{}{}",
    "\"a\"\"b\"",
    "1\u{0}",
    "[]\u{feff}",
    "",
    " \n\t\r ",
];

/// Spellings of a few numbers at the overflow boundary, with the digits moved around the point.
pub(super) fn boundary_numbers() -> Vec<String> {
    let mut out = Vec::new();
    for digits in [MAX_F64, BELOW_HALFWAY, HALFWAY] {
        for sign in ["", "-"] {
            out.push(format!("{sign}{digits}"));
            out.push(format!("{sign}{digits}.000"));
            out.push(format!("{sign}{}.{}e308", &digits[..1], &digits[1..]));
            out.push(format!("{sign}0.{digits}e309"));
            out.push(format!("{sign}{}0e-1", digits));
            out.push(format!("{sign}{}e9", &digits[..digits.len() - 9]));
        }
    }
    out
}

pub(super) fn whitespace() -> impl Strategy<Value = &'static str> {
    select(&["", "", "", "", " ", "\n", "\t", "\r\n  "][..])
}

fn valid_string_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-zA-Z0-9 _$:/.-]{0,6}",
        1 => any::<char>()
            .prop_filter("plain", |c| !matches!(c, '"' | '\\' | '\0'..='\x1f'))
            .prop_map(String::from),
        2 => select(&["\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"][..])
            .prop_map(str::to_owned),
        2 => any::<u16>()
            .prop_filter("not a surrogate", |unit| !(0xD800..0xE000).contains(unit))
            .prop_map(|unit| format!("\\u{unit:04x}")),
        2 => (0xD800u16..0xDC00, 0xDC00u16..0xE000)
            .prop_map(|(high, low)| format!("\\u{high:04X}\\u{low:04x}")),
        1 => select(&["é", "😀", "\u{7f}", "\u{feff}", "\u{2028}", "\u{10ffff}"][..])
            .prop_map(str::to_owned),
    ]
}

fn string_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        10 => valid_string_piece(),
        1 => any::<u16>().prop_map(|unit| format!("\\u{unit:04x}")),
        2 => select(&[
            "\\ud800", "\\udfff", "\\ud800\\ud800", "\\ud800\\udbff\\udc00", "\\ud800\\u0041",
            "\\ud800x", "\\ud800\\n", "\\ud800\\", "\\ud800\\u", "\\u12", "\\u12G4", "\\u-123",
            "\\x", "\\U0041", "\\", "\\ud83d\\ude00", "\\uDBFF\\uDFFF", "\\u0000", "\\u001f",
        ][..])
            .prop_map(str::to_owned),
        1 => (0u8..0x20).prop_map(|b| char::from(b).to_string()),
    ]
}

/// A string token; `clean` ones are always valid.
pub(super) fn string(clean: bool) -> BoxedStrategy<String> {
    let piece = if clean {
        valid_string_piece().boxed()
    } else {
        string_piece().boxed()
    };
    prop::collection::vec(piece, 0..5)
        .prop_map(|pieces| format!("\"{}\"", pieces.concat()))
        .boxed()
}

/// A key token, often one that repeats another once unescaped; `clean` ones are valid and
/// never reserved.
fn key(clean: bool) -> BoxedStrategy<String> {
    let mut spellings = vec![
        "a",
        "\\u0061",
        "b",
        "\\u0062",
        "ab",
        "a\\u0062",
        "a\\u0000",
        "\\/",
        "/",
        "\\\\",
        "\\u005c",
        "\\u005C",
        "😀",
        "\\ud83d\\ude00",
        "\\uD83D\\uDE00",
        "",
    ];
    if !clean {
        spellings.extend([
            "$serde_json::private::Number",
            "$serde_json::private::Numbe\\u0072",
            "\\u0024serde_json::private::Number",
            "$serde_json::private::RawValue",
            "$serde_json::private::",
            "$serde_json::private:",
            "$serde_json",
        ]);
    }
    prop_oneof![
        4 => select(spellings).prop_map(|key| format!("\"{key}\"")),
        // Enough distinct keys to take objects past the exact key set.
        2 => (0u8..40, any::<bool>()).prop_map(|(i, escaped)| if escaped {
            format!("\"\\u006b{i}\"")
        } else {
            format!("\"k{i}\"")
        }),
        1 => string(clean),
    ]
    .boxed()
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(EDGE_NUMBERS).prop_map(str::to_owned),
        1 => select(boundary_numbers()),
        4 => valid_number(),
        1 => ("-?", "[1-9]", "[0-9]{280,330}", "(\\.[0-9]{0,3})?", "([eE][+-]?[0-9]{1,2})?")
            .prop_map(|(sign, first, rest, fraction, exponent)| {
                let fraction = if fraction == "." { String::new() } else { fraction };
                format!("{sign}{first}{rest}{fraction}{exponent}")
            }),
    ]
}

/// Never beyond a double: at most 21 integer digits and an exponent below 1000.
fn valid_number() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,2})?"
}

fn scalar(clean: bool) -> BoxedStrategy<String> {
    let number = if clean {
        valid_number().boxed()
    } else {
        number().boxed()
    };
    prop_oneof![
        1 => select(&["null", "true", "false"][..]).prop_map(str::to_owned),
        2 => number,
        2 => string(clean),
    ]
    .boxed()
}

/// JSON text: `clean` text is valid but for repeated keys; the rest mixes the usual ways to go
/// wrong in at the leaves.
pub(super) fn json_text(clean: bool) -> impl Strategy<Value = String> {
    scalar(clean).prop_recursive(6, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec((whitespace(), inner.clone(), whitespace()), 0..6).prop_map(
                |items| {
                    let items: Vec<String> = items
                        .into_iter()
                        .map(|(a, v, b)| a.to_owned() + &v + b)
                        .collect();
                    format!("[{}]", items.join(","))
                }
            ),
            prop::collection::vec((whitespace(), key(clean), whitespace(), inner), 0..6).prop_map(
                |members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(a, k, b, v)| format!("{a}{k}{b}:{v}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }
            ),
            // Wide objects, past the exact key set, often with a repeated key.
            prop::collection::vec((key(clean), scalar(clean)), 14..30).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

pub(super) fn any_json_text() -> impl Strategy<Value = String> {
    prop_oneof![json_text(true), json_text(false)]
}

/// Bytes that break JSON in the ways parsers disagree on, or nearly do.
const SPLICES: &[&[u8]] = &[
    b",",
    b"]",
    b"}",
    b"[",
    b"{",
    b"\"",
    b"\\",
    b":",
    b" ",
    b"\0",
    b"\n",
    b"1",
    b"e",
    b".",
    b"-",
    b"+",
    b"0",
    b"x",
    b"/*",
    b"//",
    b"\xEF\xBB\xBF",
    b"\xFF",
    b"\xC3",
    b"\xED\xA0\x80",
    b"null",
    b"NaN",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\t",
    b"\x1F",
    b"\x7F",
    b",]",
    b",}",
    b"\"a\":",
];

/// What goes before a closing bracket: trailing commas, and members that may repeat a key.
const BEFORE_CLOSE: &[&[u8]] = &[
    b",",
    b" , ",
    b",\n",
    b",,",
    b",1",
    b",null",
    b",\"a\"",
    b",\"a\":1",
    b",\"\\u0061\":1",
];

#[derive(Debug, Clone)]
pub(super) enum Mutation {
    Delete(Index),
    Insert(Index, &'static [u8]),
    Replace(Index, &'static [u8]),
    Truncate(Index),
    Repeat(Index, Index),
    /// Inserts before one of the closing brackets.
    BeforeClose(Index, &'static [u8]),
}

pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>()).prop_map(Mutation::Delete),
        (any::<Index>(), select(SPLICES)).prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<Index>(), select(SPLICES)).prop_map(|(at, bytes)| Mutation::Replace(at, bytes)),
        (any::<Index>()).prop_map(Mutation::Truncate),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Repeat(a, b)),
        (any::<Index>(), select(BEFORE_CLOSE))
            .prop_map(|(at, bytes)| Mutation::BeforeClose(at, bytes)),
    ]
}

pub(super) fn mutate(text: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for mutation in mutations {
        let len = bytes.len();
        match mutation {
            Mutation::Delete(at) if len > 0 => {
                bytes.remove(at.index(len));
            }
            Mutation::Insert(at, splice) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, splice.iter().copied());
            }
            Mutation::Replace(at, splice) if len > 0 => {
                let at = at.index(len);
                bytes.splice(at..at + 1, splice.iter().copied());
            }
            Mutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
            Mutation::Repeat(a, b) if len > 0 => {
                let (a, b) = (a.index(len), b.index(len));
                let (from, to) = (a.min(b), a.max(b) + 1);
                let copy = bytes[from..to].to_vec();
                bytes.splice(to..to, copy);
            }
            Mutation::BeforeClose(which, splice) => {
                let closes: Vec<usize> = (0..len)
                    .filter(|&i| matches!(bytes[i], b']' | b'}'))
                    .collect();
                if !closes.is_empty() {
                    let at = closes[which.index(closes.len())];
                    bytes.splice(at..at, splice.iter().copied());
                }
            }
            _ => {}
        }
    }
    bytes
}

/// Containers nested `kinds.len()` deep (`true` for an object, under `key`) around `inner`,
/// optionally cut short.
pub(super) fn nested(kinds: &[bool], key: &str, inner: &str, cut: Option<Index>) -> Vec<u8> {
    let mut text = String::new();
    for &object in kinds {
        if object {
            text.push('{');
            text.push_str(key);
            text.push(':');
        } else {
            text.push('[');
        }
    }
    text.push_str(inner);
    for &object in kinds.iter().rev() {
        text.push(if object { '}' } else { ']' });
    }
    let mut bytes = text.into_bytes();
    if let Some(cut) = cut {
        bytes.truncate(cut.index(bytes.len() + 1));
    }
    bytes
}
