use countersign_jsonrpc::RawJson;
use serde_json::{Map, Value, json};
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use super::*;

/// Reads [`escape`]'s output back, strictly: a `\` must start `\\` or a canonical `\u{…}`
/// (lowercase hex, at least four digits, no needless zeros, of a character that is escaped).
/// `None` for anything else, so a cut that split an escape, or an ambiguous backslash, fails.
fn unescape(shown: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = shown.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            'u' => {
                if chars.next()? != '{' {
                    return None;
                }
                let mut hex = String::new();
                loop {
                    match chars.next()? {
                        '}' => break,
                        c @ ('0'..='9' | 'a'..='f') => hex.push(c),
                        _ => return None,
                    }
                }
                let c = char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?;
                if hex != format!("{:04x}", u32::from(c)) || !is_hidden(c) {
                    return None;
                }
                out.push(c);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// What must never reach a reader unescaped, stated independently of the implementation: the
/// categories and characters the module promises to escape.
fn must_be_escaped(c: char) -> bool {
    let category = c.general_category();
    (category == GeneralCategory::Control && c != '\n' && c != '\t')
        || matches!(
            category,
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
        || matches!(c, '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}')
        || matches!(c, '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}')
}

/// [`arguments_listing`] of `arguments` as a client would have sent them.
fn listing(arguments: &Value, style: ListingStyle, budget_chars: usize) -> String {
    arguments_listing(&RawJson::from_value(arguments), style, budget_chars)
}

fn all_chars() -> impl Iterator<Item = char> {
    (0..=u32::from(char::MAX)).filter_map(char::from_u32)
}

#[test]
fn line_and_paragraph_separators_are_escaped() {
    assert_eq!(escape("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
}

#[test]
fn format_characters_are_escaped() {
    for (hidden, shown) in [
        ('\u{ad}', "\\u{00ad}"),
        ('\u{61c}', "\\u{061c}"),
        ('\u{180e}', "\\u{180e}"),
        ('\u{200b}', "\\u{200b}"),
        ('\u{200d}', "\\u{200d}"),
        ('\u{202e}', "\\u{202e}"),
        ('\u{2062}', "\\u{2062}"),
        ('\u{2066}', "\\u{2066}"),
        ('\u{2069}', "\\u{2069}"),
        ('\u{feff}', "\\u{feff}"),
        ('\u{fff9}', "\\u{fff9}"),
        ('\u{fffb}', "\\u{fffb}"),
        ('\u{110bd}', "\\u{110bd}"),
        ('\u{e0001}', "\\u{e0001}"),
        ('\u{e0041}', "\\u{e0041}"),
        ('\u{e007f}', "\\u{e007f}"),
    ] {
        assert_eq!(escape(&format!("x{hidden}y")), format!("x{shown}y"));
    }
}

#[test]
fn control_characters_are_escaped() {
    assert_eq!(
        escape("\u{0}\u{1b}[31m\r\u{7f}\u{85}\u{9b}"),
        "\\u{0000}\\u{001b}[31m\\u{000d}\\u{007f}\\u{0085}\\u{009b}"
    );
}

#[test]
fn hangul_fillers_and_variation_selectors_are_escaped() {
    assert_eq!(
        escape("\u{115f}\u{1160}\u{3164}\u{ffa0}"),
        "\\u{115f}\\u{1160}\\u{3164}\\u{ffa0}"
    );
    assert_eq!(
        escape("a\u{fe00}b\u{fe0f}c\u{e0100}d\u{e01ef}"),
        "a\\u{fe00}b\\u{fe0f}c\\u{e0100}d\\u{e01ef}"
    );
}

#[test]
fn other_invisible_characters_are_escaped() {
    // Default-ignorable outside Cf: the combining grapheme joiner, Khmer inherent vowels,
    // Mongolian free variation selectors, and reserved code points kept for invisible ones.
    assert_eq!(
        escape("\u{34f}\u{17b4}\u{180b}\u{180f}\u{2065}\u{fff0}\u{e0fff}"),
        "\\u{034f}\\u{17b4}\\u{180b}\\u{180f}\\u{2065}\\u{fff0}\\u{e0fff}"
    );
}

#[test]
fn newlines_and_tabs_are_kept() {
    assert_eq!(escape("a\nb\tc\n"), "a\nb\tc\n");
}

#[test]
fn ordinary_text_is_unchanged() {
    let text = "Grüße, ada — Привет, 東京, مرحبا, e\u{301}, 🦀 {\"to\": 1} ~!@#$%^&*()_+ ";
    assert_eq!(escape(text), text);
}

#[test]
fn a_literal_backslash_u_cannot_pass_for_an_escape() {
    let typed = escape("\\u{202e}");
    let real = escape("\u{202e}");
    assert_eq!(typed, "\\\\u{202e}");
    assert_eq!(real, "\\u{202e}");
    assert_ne!(typed, real);
    // A backslash before a hidden character, and a doubled one, stay distinct too.
    assert_eq!(escape("\\\u{202e}"), "\\\\\\u{202e}");
    assert_eq!(escape("\\\\"), "\\\\\\\\");
}

#[test]
fn no_character_that_hides_survives_escaping() {
    for c in all_chars() {
        let shown = escape(&c.to_string());
        if let Some(left) = shown.chars().find(|&s| must_be_escaped(s)) {
            panic!(
                "U+{:04X} is shown with U+{:04X} unescaped",
                u32::from(c),
                u32::from(left)
            );
        }
    }
}

#[test]
fn escaping_reads_back_to_exactly_the_input() {
    for c in all_chars() {
        let text = c.to_string();
        assert_eq!(unescape(&escape(&text)), Some(text));
    }
    // Every string of up to four of these, where an ambiguous rule would collide.
    let pieces = ["\\", "u", "{", "}", "202e", "\u{202e}", "\n", "a"];
    let mut texts = vec![String::new()];
    for _ in 0..4 {
        let longer: Vec<String> = texts
            .iter()
            .flat_map(|t| pieces.iter().map(move |p| format!("{t}{p}")))
            .collect();
        texts.extend(longer);
        texts.dedup();
    }
    for text in texts {
        assert_eq!(unescape(&escape(&text)).as_deref(), Some(text.as_str()));
    }
}

#[test]
fn truncate_cuts_at_a_character_boundary_with_a_visible_marker() {
    assert_eq!(
        truncate("ääääé🦀x", 4),
        "ääää…[truncated: 3 more characters]"
    );
    assert_eq!(truncate("abc", 0), "…[truncated: 3 more characters]");
}

#[test]
fn truncate_leaves_text_that_fits_alone() {
    assert_eq!(truncate("abc", 3), "abc");
    assert_eq!(truncate("", 0), "");
}

#[test]
fn small_arguments_are_shown_whole() {
    let arguments = json!({"to": "ada@example.com", "amount": 12.50, "items": [1, 2, {"a": null}]});
    assert_eq!(
        listing(&arguments, ListingStyle::Pretty, 1000),
        serde_json::to_string_pretty(&arguments).unwrap()
    );
    assert_eq!(
        listing(&arguments, ListingStyle::Compact, 1000),
        serde_json::to_string(&arguments).unwrap()
    );
}

#[test]
fn every_top_level_key_is_shown_when_values_are_long() {
    let arguments = json!({"note": "x".repeat(10_000), "to": "mallory@evil"});
    for style in [ListingStyle::Pretty, ListingStyle::Compact] {
        let shown = listing(&arguments, style, 500);
        assert!(shown.contains("\"to\""), "{shown}");
        assert!(shown.contains("\"mallory@evil\""), "{shown}");
        assert!(shown.contains("\"note\""), "{shown}");
        assert!(shown.contains("…[truncated: "), "{shown}");
        assert!(
            shown.chars().count() <= 500,
            "{} chars",
            shown.chars().count()
        );
    }
    assert_eq!(
        listing(&arguments, ListingStyle::Pretty, 150),
        format!(
            "{{\n  \"note\": \"{}…[truncated: 9925 more characters],\n  \"to\": \"mallory@evil\"\n}}",
            "x".repeat(76)
        )
    );
}

#[test]
fn values_that_fit_their_share_are_shown_whole_and_long_ones_share_the_rest() {
    let arguments = json!({
        "p": "p".repeat(5000),
        "to": "mallory@evil",
        "q": "q".repeat(5000),
        "cc": ["x", "y"],
    });
    let shown = listing(&arguments, ListingStyle::Compact, 1000);
    assert!(shown.contains("\"to\":\"mallory@evil\","), "{shown}");
    assert!(shown.contains("\"cc\":[\"x\",\"y\"]}"), "{shown}");
    let kept = |letter: char| shown.chars().filter(|&c| c == letter).count();
    assert!(kept('p') > 400 && kept('p') == kept('q'), "{shown}");
    assert!(shown.chars().count() <= 1000);
}

#[test]
fn many_keys_are_all_listed_even_past_the_budget() {
    let mut map = Map::new();
    for i in 0..500 {
        map.insert(format!("key{i}"), Value::String("v".repeat(100)));
    }
    let arguments = Value::Object(map);
    for style in [ListingStyle::Pretty, ListingStyle::Compact] {
        let shown = listing(&arguments, style, 1000);
        for i in 0..500 {
            assert!(shown.contains(&format!("\"key{i}\":")), "key{i} missing");
        }
        // Each value keeps its floor of text and says what was cut.
        assert_eq!(shown.matches("…[truncated: ").count(), 500);
        assert!(shown.contains(&format!("\"{}…[truncated: ", "v".repeat(39))));
    }
}

#[test]
fn long_keys_are_cut_visibly_but_never_dropped() {
    let long = "k".repeat(1000);
    let arguments = json!({ long.clone(): "x".repeat(1000), "to": "mallory@evil" });
    let shown = listing(&arguments, ListingStyle::Compact, 600);
    assert!(shown.starts_with(&format!(
        "{{\"{}…[truncated: 802 more characters]:",
        "k".repeat(199)
    )));
    assert!(shown.contains("\"to\":\"mallory@evil\""), "{shown}");
}

#[test]
fn keys_keep_their_order() {
    let arguments =
        RawJson::parse_slice(br#"{"zeta": 1, "alpha": "long long long long long", "mu": 3}"#)
            .unwrap();
    for budget in [10, 1000] {
        let shown = arguments_listing(&arguments, ListingStyle::Compact, budget);
        let at = |key: &str| shown.find(key).unwrap();
        assert!(
            at("zeta") < at("alpha") && at("alpha") < at("mu"),
            "{shown}"
        );
    }
}

#[test]
fn hidden_characters_in_keys_and_values_are_escaped_in_the_listing() {
    let arguments = json!({"t\u{202e}o": "ada\u{2066}@\u{200b}evil\u{7f}", "path": "C:\\new"});
    let shown = listing(&arguments, ListingStyle::Pretty, 1000);
    assert_eq!(
        shown,
        "{\n  \"t\\u{202e}o\": \"ada\\u{2066}@\\u{200b}evil\\u{007f}\",\n  \"path\": \"C:\\\\\\\\new\"\n}"
    );
    assert!(unescape(&shown).is_some());
}

#[test]
fn a_cut_never_splits_an_escape() {
    let arguments = json!({"note": "\u{202e}".repeat(1000), "to": "mallory@evil"});
    for budget in 0..200 {
        for style in [ListingStyle::Pretty, ListingStyle::Compact] {
            let shown = listing(&arguments, style, budget);
            assert!(unescape(&shown).is_some(), "{shown}");
            assert!(shown.contains("mallory@evil"), "{shown}");
        }
    }
}

#[test]
fn the_pretty_listing_keeps_one_key_per_line_when_shortened() {
    let arguments = json!({
        "options": {"mode": "fast", "blob": "z".repeat(3000)},
        "to": "mallory@evil",
    });
    let shown = listing(&arguments, ListingStyle::Pretty, 300);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.first(), Some(&"{"));
    assert_eq!(lines.last(), Some(&"}"));
    assert!(lines.contains(&"  \"options\": {"), "{shown}");
    assert!(lines.contains(&"    \"mode\": \"fast\","), "{shown}");
    assert!(lines.contains(&"  \"to\": \"mallory@evil\""), "{shown}");
}

#[test]
fn non_object_arguments_are_shown_whole_then_cut() {
    assert_eq!(listing(&Value::Null, ListingStyle::Pretty, 0), "null");
    assert_eq!(listing(&json!(42), ListingStyle::Compact, 100), "42");
    let array = json!(["x".repeat(1000), "y"]);
    let shown = listing(&array, ListingStyle::Compact, 100);
    assert!(shown.starts_with("[\"xxx"), "{shown}");
    assert!(shown.ends_with(" more characters]"), "{shown}");
    assert!(shown.chars().count() <= 100);
    assert_eq!(listing(&json!({}), ListingStyle::Pretty, 0), "{}");
}

/// Values as a client may write them: whitespace between tokens, every kind of string escape,
/// unicode, numbers in all their forms, nesting, empty containers.
const CLIENT_TEXTS: &[&str] = &[
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1.0",
    "1.50",
    "-12.5e-3",
    "1e5",
    "1E5",
    "2e+3",
    "2E-3",
    "12345678901234567890123",
    "9007199254740993",
    r#""""#,
    r#""plain""#,
    r#""quote \" backslash \\ slash \/ solidus""#,
    r#""\b\f\n\r\t \u0000 \u001f \u007f \u0085""#,
    r#""\u0041\u00e9\u4e2d\ud83e\udd80 \uFEFF \u202e \u2028\u2029""#,
    "\"Grüße, 東京, مرحبا, e\u{301}, 🦀\"",
    "[]",
    "{}",
    "[ ]",
    "{ }",
    "[ [ ] , { } , [ [ [ ] ] ] , { \"e\" : { } } ]",
    "[1,[2,[3,[4,[]]]]]",
    r#"{"":"", " ": [ "" ] }"#,
    r#"{ "k\"ey\n" : 1 , "\u00e9" : [ ] , "\ud83e\udd80" : { "\t" : null } }"#,
    r#"{
        "to" : "ada@example.com" ,
        "amount" : 12.50 ,
        "items" : [ { "sku" : "A-1" , "qty" : 2 , "tags" : [ ] } , { "sku" : "B-2" , "opts" : { } } ] ,
        "nested" : { "a" : { "b" : { "c" : [ 1e-7 , -0.0 , true , false , null ] } } } ,
        "note" : "line one\nline two\ttabbed \u2066isolate\u2069"
    }"#,
];

#[test]
fn the_lazy_renderer_writes_exactly_what_serde_json_writes() {
    for text in CLIENT_TEXTS {
        let raw = RawJson::parse_slice(text.as_bytes())
            .unwrap_or_else(|e| panic!("{text} is strictly valid: {e}"));
        let tree: Value = serde_json::from_str(text).expect("valid json");
        for (style, expected) in [
            (
                ListingStyle::Compact,
                serde_json::to_string(&tree).expect("serializes"),
            ),
            (
                ListingStyle::Pretty,
                serde_json::to_string_pretty(&tree).expect("serializes"),
            ),
        ] {
            let chars = expected.chars().count();
            assert_eq!(
                render::prefix(&raw, style, 0, usize::MAX),
                expected,
                "{style:?} of {text}"
            );
            assert_eq!(
                render::measure(&raw, style, 0),
                render::Measure {
                    chars,
                    escaped: escaped_len(&expected)
                },
                "{style:?} of {text}"
            );
            // Every prefix is the prefix of that text.
            for cut in [0, 1, chars / 2, chars.saturating_sub(1), chars] {
                let prefix: String = expected.chars().take(cut).collect();
                assert_eq!(render::prefix(&raw, style, 0, cut), prefix, "{text}");
            }
            // And the listing that fits is that text, escaped.
            assert_eq!(
                arguments_listing(&raw, style, usize::MAX),
                escape(&expected),
                "{style:?} of {text}"
            );
        }
    }
}

#[test]
fn the_lazy_renderer_indents_a_nested_value_as_it_would_be_inside_its_object() {
    // A member's value is rendered at the member's indent: the object's pretty text is `{`,
    // then per member `\n  "key": ` and the value at indent 2.
    let text = r#"{"a": {"b": [1, {"c": []}], "d": {}}, "e": [[], [{}]]}"#;
    let raw = RawJson::parse_slice(text.as_bytes()).expect("json");
    let tree: Value = serde_json::from_str(text).expect("json");
    let mut rebuilt = String::from("{");
    for (i, (key, value)) in raw.members().expect("object").enumerate() {
        if i > 0 {
            rebuilt.push(',');
        }
        rebuilt.push_str("\n  ");
        rebuilt.push_str(&render::key_text(&key));
        rebuilt.push_str(": ");
        rebuilt.push_str(&render::prefix(&value, ListingStyle::Pretty, 2, usize::MAX));
    }
    rebuilt.push_str("\n}");
    assert_eq!(rebuilt, serde_json::to_string_pretty(&tree).expect("json"));
}

#[test]
fn a_shortened_listing_shows_client_text_as_serde_json_would() {
    // Long enough to be shortened: each value is cut from serde_json's text of it, not from the
    // client's spacing or escapes.
    let text = format!(
        r#"{{ "note" : "{}" , "n" : 1E5 , "s" : "\u0041\/" , "l" : [ 1 , [ ] ] }}"#,
        "x".repeat(3000)
    );
    let raw = RawJson::parse_slice(text.as_bytes()).expect("json");
    let compact = arguments_listing(&raw, ListingStyle::Compact, 300);
    assert!(
        compact.ends_with(r#","n":1e+5,"s":"A/","l":[1,[]]}"#),
        "{compact}"
    );
    let pretty = arguments_listing(&raw, ListingStyle::Pretty, 300);
    assert!(
        pretty.ends_with("\n  \"n\": 1e+5,\n  \"s\": \"A/\",\n  \"l\": [\n    1,\n    []\n  ]\n}"),
        "{pretty}"
    );
}

/// `[0,1,2,…]` of at least `bytes` bytes, and its item count.
fn array_of_small_numbers(bytes: usize) -> (String, usize) {
    let mut text = String::with_capacity(bytes + 16);
    text.push('[');
    let mut count = 0;
    while text.len() < bytes {
        if count > 0 {
            text.push(',');
        }
        text.push_str(&(count % 1000).to_string());
        count += 1;
    }
    text.push(']');
    (text, count)
}

#[test]
fn a_4_mib_array_of_small_numbers_is_listed_bounded_and_visibly_cut() {
    // How fast this is, is measured by the `arguments_listing 4MiB array` benches, not here.
    let (text, count) = array_of_small_numbers(4 << 20);
    let raw = RawJson::parse_slice(text.as_bytes()).expect("json");
    // serde_json's pretty text: `[`, per item `\n  ` and the number, commas between, `\n]`.
    let digits: usize = text.len() - 2 - (count - 1);
    let pretty_chars = 1 + 3 * count + digits + (count - 1) + 2;
    let budget = 2000;
    for (style, total, start) in [
        (
            ListingStyle::Compact,
            text.len(),
            "[0,1,2,3,4,5,6,7,8,9,10,11,",
        ),
        (ListingStyle::Pretty, pretty_chars, "[\n  0,\n  1,\n  2,\n"),
    ] {
        let shown = arguments_listing(&raw, style, budget);
        let chars = shown.chars().count();
        assert!(chars <= budget, "{style:?}: {chars} chars");
        assert!(chars > budget / 2, "{style:?}: only {chars} chars");
        assert!(shown.starts_with(start), "{style:?}: {shown}");
        let (content, rest) = shown
            .split_once("…[truncated: ")
            .unwrap_or_else(|| panic!("{style:?}: no marker in {shown}"));
        let more: usize = rest
            .strip_suffix(" more characters]")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{style:?}: bad marker {rest}"));
        assert_eq!(
            content.chars().count() + more,
            total,
            "{style:?}: the marker counts every character not shown"
        );
    }

    // As one value of an object, beside a short one that must stay in sight.
    let object = format!(r#"{{"items": {text}, "to": "mallory@evil"}}"#);
    let raw = RawJson::parse_slice(object.as_bytes()).expect("json");
    for style in [ListingStyle::Compact, ListingStyle::Pretty] {
        let shown = arguments_listing(&raw, style, budget);
        assert!(shown.chars().count() <= budget, "{style:?}");
        assert!(shown.contains("\"items\":"), "{shown}");
        assert!(shown.contains("…[truncated: "), "{shown}");
        assert!(shown.contains("\"mallory@evil\""), "{shown}");
    }
}
