//! Walking text that already passed the strict parse. Validity is a precondition, so the
//! scanner only finds boundaries: it never allocates and never fails.

use std::borrow::Cow;

use bytes::Bytes;

use super::RawJson;

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_whitespace(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && is_whitespace(text[at]) {
        at += 1;
    }
    at
}

/// `at` is on a string's opening quote; returns the index just past its closing quote.
fn string_end(text: &[u8], at: usize) -> usize {
    let mut i = at + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

/// `at` is on a value's first byte; returns the index just past its last byte.
pub(super) fn value_end(text: &[u8], at: usize) -> usize {
    match text[at] {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < text.len() {
                match text[i] {
                    b'"' => {
                        i = string_end(text, i);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            text.len()
        }
        _ => {
            let mut i = at;
            while i < text.len()
                && !matches!(text[i], b',' | b']' | b'}')
                && !is_whitespace(text[i])
            {
                i += 1;
            }
            i
        }
    }
}

/// Appends `text` to `out` without whitespace outside strings.
pub(super) fn write_minified(text: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let end = string_end(text, i);
                out.extend_from_slice(&text[i..end]);
                i = end;
            }
            b if is_whitespace(b) => i += 1,
            _ => {
                // A run of structural bytes and scalars, copied at once.
                let start = i;
                while i < text.len() && text[i] != b'"' && !is_whitespace(text[i]) {
                    i += 1;
                }
                out.extend_from_slice(&text[start..i]);
            }
        }
    }
}

/// `text` without whitespace outside strings, or `None` when it has none.
pub(super) fn minify(text: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let end = string_end(text, i);
                if let Some(out) = &mut out {
                    out.extend_from_slice(&text[i..end]);
                }
                i = end;
            }
            b if is_whitespace(b) => {
                out.get_or_insert_with(|| {
                    let mut out = Vec::with_capacity(text.len());
                    out.extend_from_slice(&text[..i]);
                    out
                });
                i += 1;
            }
            b => {
                if let Some(out) = &mut out {
                    out.push(b);
                }
                i += 1;
            }
        }
    }
    out
}

/// The contents of the string token `raw` (quotes included), unescaped.
pub(super) fn unescape(raw: &[u8]) -> Cow<'_, str> {
    let inner = &raw[1..raw.len() - 1];
    if !inner.contains(&b'\\') {
        return Cow::Borrowed(std::str::from_utf8(inner).expect("raw json is validated utf-8"));
    }
    // Escapes are rare in keys and short strings; serde_json decodes them exactly as the
    // strict parse did.
    Cow::Owned(serde_json::from_slice(raw).expect("a validated json string"))
}

/// Byte ranges of each member's key token and value in an object's text (which fits 32-bit
/// offsets: the caller checked).
pub(super) fn member_ranges(text: &[u8]) -> Vec<(u32, u32, u32, u32)> {
    let mut count = 0;
    each_member(text, |_| count += 1);
    // Counted first: a vector that doubles leaves its old buffers behind.
    let mut out = Vec::with_capacity(count);
    each_member(text, |(ks, ke, vs, ve)| {
        out.push((ks as u32, ke as u32, vs as u32, ve as u32));
    });
    out
}

fn each_member(text: &[u8], mut f: impl FnMut((usize, usize, usize, usize))) {
    let mut at = 1;
    loop {
        at = skip_whitespace(text, at);
        if at >= text.len() || text[at] == b'}' {
            return;
        }
        if text[at] == b',' {
            at = skip_whitespace(text, at + 1);
        }
        let key_end = string_end(text, at);
        let value_start = skip_whitespace(text, skip_whitespace(text, key_end) + 1);
        let value_end = value_end(text, value_start);
        f((at, key_end, value_start, value_end));
        at = value_end;
    }
}

/// An object's members: `(key, value)`, keys unescaped.
#[derive(Debug)]
pub struct Members<'a> {
    text: &'a Bytes,
    at: usize,
}

impl<'a> Members<'a> {
    pub(super) fn new(text: &'a Bytes) -> Self {
        Members { text, at: 1 }
    }

    /// Also yields each key's raw token, for copying members without re-escaping them.
    pub(super) fn with_raw_keys(self) -> impl Iterator<Item = (Cow<'a, str>, &'a [u8], RawJson)> {
        let mut members = self;
        std::iter::from_fn(move || members.next_member())
    }

    fn next_member(&mut self) -> Option<(Cow<'a, str>, &'a [u8], RawJson)> {
        let text: &'a [u8] = self.text;
        let mut at = skip_whitespace(text, self.at);
        if at >= text.len() || text[at] == b'}' {
            self.at = text.len();
            return None;
        }
        if text[at] == b',' {
            at = skip_whitespace(text, at + 1);
        }
        let key_end = string_end(text, at);
        let raw_key = &text[at..key_end];
        // Whitespace, then the colon, then whitespace.
        let value_start = skip_whitespace(text, skip_whitespace(text, key_end) + 1);
        let end = value_end(text, value_start);
        self.at = end;
        let value = RawJson::from_trusted(self.text.slice(value_start..end));
        Some((unescape(raw_key), raw_key, value))
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (Cow<'a, str>, RawJson);

    fn next(&mut self) -> Option<Self::Item> {
        self.next_member().map(|(key, _, value)| (key, value))
    }
}

/// An array's items.
#[derive(Debug)]
pub struct Items<'a> {
    text: &'a Bytes,
    at: usize,
}

impl<'a> Items<'a> {
    pub(super) fn new(text: &'a Bytes) -> Self {
        Items { text, at: 1 }
    }
}

impl Iterator for Items<'_> {
    type Item = RawJson;

    fn next(&mut self) -> Option<RawJson> {
        let text: &[u8] = self.text;
        let mut at = skip_whitespace(text, self.at);
        if at >= text.len() || text[at] == b']' {
            self.at = text.len();
            return None;
        }
        if text[at] == b',' {
            at = skip_whitespace(text, at + 1);
        }
        let end = value_end(text, at);
        self.at = end;
        Some(RawJson::from_trusted(self.text.slice(at..end)))
    }
}
