//! The JSON text of client arguments as serde_json would print it, produced piece by piece from
//! the raw value, so a listing can measure a value of any size and keep only what it shows: the
//! memory a listing costs follows its budget, not the arguments.

use std::borrow::Cow;

use countersign_jsonrpc::{Kind, RawJson};

use super::{ListingStyle, escaped_len};

/// Sizes of a value's JSON text, in characters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Measure {
    pub(super) chars: usize,
    /// After [`super::escape`].
    pub(super) escaped: usize,
}

/// Measures the JSON text of `value` at `indent` (Pretty) without keeping it.
pub(super) fn measure(value: &RawJson, style: ListingStyle, indent: usize) -> Measure {
    let mut measure = Measure::default();
    emit(value, style, indent, &mut |piece| {
        measure.chars += piece.chars().count();
        measure.escaped += escaped_len(piece);
        true
    });
    measure
}

/// The first `max_chars` characters of the JSON text of `value` (all of it if shorter).
pub(super) fn prefix(
    value: &RawJson,
    style: ListingStyle,
    indent: usize,
    max_chars: usize,
) -> String {
    let mut out = String::new();
    let mut left = max_chars;
    emit(value, style, indent, &mut |piece| {
        for c in piece.chars() {
            if left == 0 {
                return false;
            }
            out.push(c);
            left -= 1;
        }
        true
    });
    out
}

/// The JSON text of a key: a string, as serde_json writes it.
pub(super) fn key_text(key: &str) -> String {
    serde_json::to_string(key).unwrap_or_default()
}

/// Feeds the text of `value` to `sink` until it returns `false`; returns whether it finished.
///
/// Pretty follows serde_json: two spaces per level, `": "` after keys, `[]` and `{}` for empty
/// containers; strings are re-written by serde_json from their unescaped contents, numbers keep
/// their exact text but for the exponent, which serde_json writes as `e` with a sign (see
/// [`number_text`]).
fn emit(
    value: &RawJson,
    style: ListingStyle,
    indent: usize,
    sink: &mut dyn FnMut(&str) -> bool,
) -> bool {
    match value.kind() {
        Kind::String => sink(&key_text(&value.as_str().unwrap_or_default())),
        Kind::Array => {
            let mut items = value.items().into_iter().flatten().peekable();
            if items.peek().is_none() {
                return sink("[]");
            }
            if !sink("[") {
                return false;
            }
            let mut first = true;
            for item in items {
                if !(separate(style, indent + 2, first, sink)
                    && emit(&item, style, indent + 2, sink))
                {
                    return false;
                }
                first = false;
            }
            close(style, indent, "]", sink)
        }
        Kind::Object => {
            let mut members = value.members().into_iter().flatten().peekable();
            if members.peek().is_none() {
                return sink("{}");
            }
            if !sink("{") {
                return false;
            }
            let mut first = true;
            for (key, item) in members {
                let colon = match style {
                    ListingStyle::Pretty => ": ",
                    ListingStyle::Compact => ":",
                };
                if !(separate(style, indent + 2, first, sink)
                    && sink(&key_text(&key))
                    && sink(colon)
                    && emit(&item, style, indent + 2, sink))
                {
                    return false;
                }
                first = false;
            }
            close(style, indent, "}", sink)
        }
        Kind::Number => sink(&number_text(value.as_text())),
        Kind::Null | Kind::Bool => sink(value.as_text()),
    }
}

/// A number's text as serde_json (with `arbitrary_precision`, which keeps the digits as read)
/// writes it: the exponent marker lowercase and always signed, so `1E5` and `1e5` are written
/// `1e+5`; everything else (`-0`, `1.50`) as the client wrote it.
fn number_text(text: &str) -> Cow<'_, str> {
    let Some(at) = text.find(['e', 'E']) else {
        return Cow::Borrowed(text);
    };
    let exponent = &text[at + 1..];
    let signed = exponent.starts_with(['+', '-']);
    if signed && text.as_bytes()[at] == b'e' {
        return Cow::Borrowed(text);
    }
    let sign = if signed { "" } else { "+" };
    Cow::Owned(format!("{}e{sign}{exponent}", &text[..at]))
}

fn separate(
    style: ListingStyle,
    indent: usize,
    first: bool,
    sink: &mut dyn FnMut(&str) -> bool,
) -> bool {
    if !first && !sink(",") {
        return false;
    }
    match style {
        ListingStyle::Pretty => new_line(indent, sink),
        ListingStyle::Compact => true,
    }
}

/// A line break and `indent` spaces, in one piece for all but very deep values: a listing
/// measures every item of the arguments, so this must not allocate per item.
fn new_line(indent: usize, sink: &mut dyn FnMut(&str) -> bool) -> bool {
    const LINE: &str = concat!(
        "\n",
        "                                                                ",
        "                                                                "
    );
    let spaces = LINE.len() - 1;
    let first = indent.min(spaces);
    if !sink(&LINE[..1 + first]) {
        return false;
    }
    let mut left = indent - first;
    while left > 0 {
        let more = left.min(spaces);
        if !sink(&LINE[1..1 + more]) {
            return false;
        }
        left -= more;
    }
    true
}

fn close(
    style: ListingStyle,
    indent: usize,
    bracket: &str,
    sink: &mut dyn FnMut(&str) -> bool,
) -> bool {
    match style {
        ListingStyle::Pretty => new_line(indent, sink) && sink(bracket),
        ListingStyle::Compact => sink(bracket),
    }
}
