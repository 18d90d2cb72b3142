//! Text the gateway shows to people (the approval question) and to models (the held call's
//! result text), rendered so that nothing in it can be hidden or reordered.
//!
//! This is security UI: the person approves what they read, so what they read must be exactly
//! what will run. A tool call's arguments are written by the model, and through it by anyone
//! who got text in front of the model, so they may carry characters that make the displayed text
//! differ from the real one: bidi overrides and isolates that reorder a line (`"to": "ada"`
//! showing where `"to": "mallory"` is), zero-width and other invisible characters that split or
//! hide words, line separators that some renderers break on and others do not, and control
//! characters (ANSI escapes) that drive terminals. [`escape`] replaces each of them by a visible
//! `\u{XXXX}`:
//!
//! - control characters (`Cc`: C0, DEL, C1) except `\n` and `\t`, which the listing needs;
//! - every format character (`Cf`: bidi marks, overrides and isolates, zero-width space and
//!   joiners, U+FEFF, U+061C, U+180E, U+2060–2064, the soft hyphen, interlinear annotations,
//!   tag characters, …), taken from the Unicode tables of `unicode-properties` rather than a
//!   hand-picked list, so no format character is forgotten;
//! - U+2028 LINE SEPARATOR (`Zl`) and U+2029 PARAGRAPH SEPARATOR (`Zp`);
//! - every other `Default_Ignorable_Code_Point` (Unicode 16), the characters renderers draw as
//!   nothing: Hangul fillers, variation selectors, the combining grapheme joiner, Mongolian free
//!   variation selectors, Khmer inherent vowels and the reserved ranges kept for more of them;
//! - the backslash itself, as `\\`, so that the text `\u{202e}` typed into a value can never pass
//!   for an escaped character.
//!
//! Long text is cut, never silently: [`truncate`] and [`arguments_listing`] append a visible
//! `…[truncated: N more characters]`, and [`arguments_listing`] shortens values rather than drop
//! a key, so an argument can never be pushed out of sight by a long one before it.

use std::fmt::Write as _;

use countersign_jsonrpc::RawJson;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Longest key shown whole in a listing (its JSON text, in characters); a longer one is cut
/// visibly, never dropped.
const MAX_KEY_CHARS: usize = 200;

/// Fewest characters of a value a shortened listing keeps (before the marker), so no key is
/// ever shown with nothing after it, however many keys share the budget.
const MIN_VALUE_CHARS: usize = 40;

/// `Default_Ignorable_Code_Point` of Unicode 16 (DerivedCoreProperties.txt): what renderers are
/// told to draw as nothing when they have no glyph. Most of it is `Cf`, which the Unicode table
/// covers anyway; listing the whole property here also catches the members of other categories
/// (Hangul fillers `Lo`, variation selectors and the combining grapheme joiner `Mn`) and the
/// reserved code points set aside for future invisible characters.
const DEFAULT_IGNORABLE: &[(char, char)] = &[
    ('\u{ad}', '\u{ad}'),
    ('\u{34f}', '\u{34f}'),
    ('\u{61c}', '\u{61c}'),
    ('\u{115f}', '\u{1160}'),
    ('\u{17b4}', '\u{17b5}'),
    ('\u{180b}', '\u{180f}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{202a}', '\u{202e}'),
    ('\u{2060}', '\u{206f}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{fe00}', '\u{fe0f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{ffa0}', '\u{ffa0}'),
    ('\u{fff0}', '\u{fff8}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    ('\u{e0000}', '\u{e0fff}'),
];

/// How [`arguments_listing`] lays the arguments out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingStyle {
    /// serde_json's pretty printing: one top-level key per line, two-space indent.
    Pretty,
    /// One line, as serde_json writes it compactly.
    Compact,
}

/// Returns `text` with every character that could hide or reorder what a person reads replaced
/// by `\u{XXXX}` (lowercase hex, at least four digits: `\u{202e}`, `\u{e0041}`).
///
/// Escaped: control characters other than `\n` and `\t`, every format character (`Cf`), U+2028
/// and U+2029, and every other default-ignorable code point (Hangul fillers, variation
/// selectors, …); see the module documentation for why.
///
/// The backslash rule: **every** `\` is written `\\`. So in the output a `\` is always the start
/// of `\\` (one literal backslash) or of `\u{…}` (one escaped character), and the output reads
/// back to exactly the input: a value that literally contains `\u{202e}` shows as `\\u{202e}`,
/// which cannot be mistaken for an escaped U+202E. Newlines and tabs are kept as they are.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// Cuts `text` after its first `max_chars` characters (never inside a character) and appends a
/// visible `…[truncated: N more characters]`, N counting the characters cut. Text of at most
/// `max_chars` characters is returned unchanged. The marker comes on top of `max_chars`.
///
/// This does not escape: escape the result (the marker itself needs no escaping), or use
/// [`arguments_listing`], which cuts and escapes in one go without splitting an escape.
pub fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}{}", &text[..cut], marker(text[cut..].chars().count())),
    }
}

/// The call's arguments as shown to a person or a model, escaped with [`escape`], in about
/// `budget_chars` characters, and with **every top-level key shown**.
///
/// When the whole rendering (serde_json's pretty or compact form, escaped) fits the budget, it is
/// shown whole. Otherwise, for an object, every top-level key is still listed, in its order, and
/// the values share what the budget leaves after the keys and punctuation: values that fit their
/// share are shown whole, and each of the others is cut to an equal share with the visible
/// `…[truncated: N more characters]` (N counting the characters of its JSON text that were cut),
/// keeping at least 40 characters of it. A key longer than 200 characters is cut the same way;
/// no key is dropped. The shortened listing is no longer JSON; it is for reading.
///
/// The budget is a target, not a limit: when there are so many keys that the keys and the
/// 40-character floors alone exceed it, every key is listed all the same, because hiding an
/// argument from the person approving the call would be worse than a long question.
///
/// Anything other than an object (null, an array, a scalar) is rendered whole and, if that does
/// not fit, cut with the marker. Nested objects are values like any other: their keys may be cut
/// off, visibly.
///
/// The arguments are the client's raw value: the listing measures it without copying it and
/// keeps only the text it shows, so its memory follows the budget, not the arguments.
pub fn arguments_listing(arguments: &RawJson, style: ListingStyle, budget_chars: usize) -> String {
    let whole = render::measure(arguments, style, 0);
    if whole.escaped <= budget_chars {
        return escape(&render::prefix(arguments, style, 0, whole.chars));
    }
    match arguments
        .members()
        .map(|mut members| members.next().is_some())
    {
        Some(true) => shortened_object(arguments, style, budget_chars),
        _ => {
            let content = budget_chars
                .saturating_sub(marker_len(whole.chars))
                .max(MIN_VALUE_CHARS);
            let shown = render::prefix(arguments, style, 0, content);
            escape_within(&shown, whole.chars, content)
        }
    }
}

/// The listing of an object too long to show whole. Two passes over the members: the first
/// measures every key and value, the second writes each within its share. Per member only its
/// lengths are kept, never its text.
fn shortened_object(object: &RawJson, style: ListingStyle, budget_chars: usize) -> String {
    let value_indent = match style {
        ListingStyle::Pretty => 2,
        ListingStyle::Compact => 0,
    };
    let shown_key = |key: &str| {
        let text = render::key_text(key);
        let chars = text.chars().count();
        escape_within(&text, chars, MAX_KEY_CHARS)
    };
    let members = || object.members().into_iter().flatten();
    let mut keys = 0usize;
    // Per member only its two lengths, so the second pass need not measure it again.
    // Sized by a counting pass first: a vector that doubles leaves its old buffers behind.
    let mut measures: Vec<render::Measure> =
        Vec::with_capacity(object.members().map_or(0, Iterator::count));
    for (key, value) in members() {
        keys += shown_key(&key).chars().count();
        measures.push(render::measure(&value, style, value_indent));
    }

    // Braces, separators, commas and (Pretty) indents and line breaks: what every listing of
    // these keys costs whatever the values.
    let count = measures.len();
    let fixed = match style {
        // "{\n" + per entry `  key: ` and "\n" + commas + "}"
        ListingStyle::Pretty => 3 + keys + count * 5 + (count - 1),
        // "{" + per entry `key:` + commas + "}"
        ListingStyle::Compact => 2 + keys + count + (count - 1),
    };

    // Max-min fair share: the shortest values are shown whole while they fit an equal share of
    // what is left; the remaining (longer) values all get the same share.
    let mut remaining = budget_chars.saturating_sub(fixed);
    // Indices as u32 and an in-place sort: with many keys these are the listing's own cost.
    let mut by_length: Vec<u32> = (0..count).map(|i| i as u32).collect();
    by_length.sort_unstable_by_key(|&i| (measures[i as usize].escaped, i));
    let mut whole = vec![false; count];
    let mut left = count;
    for i in by_length.iter().map(|&i| i as usize) {
        if measures[i].escaped > remaining / left {
            break;
        }
        whole[i] = true;
        remaining -= measures[i].escaped;
        left -= 1;
    }
    drop(by_length);
    // No share is needed when every value was shown whole (left == 0).
    let share = remaining.checked_div(left).unwrap_or(0);

    let mut out = String::with_capacity(budget_chars.max(fixed) + 64);
    out.push('{');
    for (i, (key, value)) in members().enumerate() {
        if style == ListingStyle::Pretty {
            out.push_str("\n  ");
        }
        out.push_str(&shown_key(&key));
        out.push_str(match style {
            ListingStyle::Pretty => ": ",
            ListingStyle::Compact => ":",
        });
        let measured = measures[i];
        if whole[i] {
            out.push_str(&escape(&render::prefix(
                &value,
                style,
                value_indent,
                measured.chars,
            )));
        } else {
            // The share pays for the marker too; the floor keeps something to read.
            let content = share
                .saturating_sub(marker_len(measured.chars))
                .max(MIN_VALUE_CHARS);
            let shown = render::prefix(&value, style, value_indent, content);
            out.push_str(&escape_within(&shown, measured.chars, content));
        }
        if i + 1 < count {
            out.push(',');
        }
    }
    if style == ListingStyle::Pretty {
        out.push('\n');
    }
    out.push('}');
    out
}

/// [`escape`] of `text` if that is at most `max_chars` characters long; otherwise the escape of
/// its longest prefix that fits, followed by the marker. Cuts between characters, never inside
/// an escape, so a cut can't leave a half `\u{…}` that reads as something else.
///
/// `text` may be a prefix of a longer text of `total_chars` characters (at least `max_chars`
/// of it): the marker counts every character not shown.
fn escape_within(text: &str, total_chars: usize, max_chars: usize) -> String {
    let mut used = 0;
    let mut cut = None;
    let mut shown_chars = 0;
    for (at, c) in text.char_indices() {
        let len = escaped_char_len(c);
        if used + len > max_chars {
            cut = Some(at);
            break;
        }
        used += len;
        shown_chars += 1;
    }
    let at = match cut {
        None if shown_chars >= total_chars => return escape(text),
        None => text.len(),
        Some(at) => at,
    };
    let mut out = escape(&text[..at]);
    out.push_str(&marker(total_chars.saturating_sub(shown_chars)));
    out
}

fn marker(more: usize) -> String {
    format!("…[truncated: {more} more characters]")
}

/// Length in characters of the marker for `more` cut characters.
fn marker_len(more: usize) -> usize {
    marker(more).chars().count()
}

/// Whether `c` is shown as `\u{XXXX}`.
fn is_hidden(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        // Most text is ASCII, and listings measure client arguments of any size character by
        // character: the only hidden ASCII characters are the controls (no ASCII character is
        // a format character or default-ignorable), so spare them the table look-ups.
        _ if c.is_ascii() => c.is_ascii_control(),
        _ => {
            matches!(
                c.general_category(),
                GeneralCategory::Control
                    | GeneralCategory::Format
                    | GeneralCategory::LineSeparator
                    | GeneralCategory::ParagraphSeparator
            ) || DEFAULT_IGNORABLE
                .iter()
                .any(|&(first, last)| (first..=last).contains(&c))
        }
    }
}

fn push_escaped(out: &mut String, c: char) {
    if c == '\\' {
        out.push_str("\\\\");
    } else if is_hidden(c) {
        // Writing into a String cannot fail.
        let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
    } else {
        out.push(c);
    }
}

/// Length in characters of [`push_escaped`]'s output for `c`.
fn escaped_char_len(c: char) -> usize {
    if c == '\\' {
        2
    } else if is_hidden(c) {
        let digits = match u32::from(c) {
            0..=0xffff => 4,
            0x1_0000..=0xf_ffff => 5,
            _ => 6,
        };
        // `\u{` + digits + `}`
        4 + digits
    } else {
        1
    }
}

/// Length in characters of [`escape`]'s output for `text`.
fn escaped_len(text: &str) -> usize {
    text.chars().map(escaped_char_len).sum()
}

mod render;
#[cfg(test)]
mod tests;
