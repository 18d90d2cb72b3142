//! Walking text that already passed the strict parse. Validity is a precondition, so the
//! scanner only finds boundaries: it never allocates and never fails.

use std::borrow::Cow;

use bytes::Bytes;

use super::RawJson;

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

pub(crate) fn skip_whitespace(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && is_whitespace(text[at]) {
        at += 1;
    }
    at
}

/// `at` is on a string's opening quote; returns the index just past its closing quote.
#[inline(always)]
fn string_end(text: &[u8], at: usize) -> usize {
    string_end_escaped(text, at).0
}

/// [`string_end`], and whether the string has an escape: a key without one is its own text,
/// so it is compared and read without unescaping.
///
/// Always inlined: every walk calls it once per key and string value, and a call costs as much
/// as reading a short key.
#[inline(always)]
fn string_end_escaped(text: &[u8], at: usize) -> (usize, bool) {
    let mut i = at + 1;
    let mut escaped = false;
    loop {
        i = quote_or_backslash(text, i);
        match text.get(i) {
            Some(b'\\') => {
                escaped = true;
                i += 2;
            }
            Some(_) => return (i + 1, escaped),
            None => return (text.len(), escaped),
        }
    }
}

/// The index of the first `"` or `\` at or after `at` (`text.len()` when there is none).
///
/// String contents are most of what a walk over an object passes, and a walk passes over every
/// member before the one it wants. Keys and short values end within a few words, read eight
/// bytes at a time here, inline; a string still open after that (a confirmation token, a
/// document) is left to [`quote_or_backslash_in_long_string`].
#[inline(always)]
fn quote_or_backslash(text: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    /// Words read before a string counts as long.
    const SHORT_WORDS: usize = 8;
    // A byte of `word ^ b * ONES` is zero exactly where `word` has `b`; the borrow trick flags
    // zero bytes, and the lowest flag is always a real one (borrows only run upwards from it).
    let zero_bytes = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    for _ in 0..SHORT_WORDS {
        let Some(chunk) = text.get(at..at + 8) else {
            while at < text.len() && !matches!(text[at], b'"' | b'\\') {
                at += 1;
            }
            return at;
        };
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let found = zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')));
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    quote_or_backslash_in_long_string(text, at)
}

/// [`quote_or_backslash`] past its first words: `memchr2`'s vector search, which reads 16 or
/// 32 bytes at a time but costs more to start than a short string takes to read.
#[inline(never)]
fn quote_or_backslash_in_long_string(text: &[u8], at: usize) -> usize {
    memchr::memchr2(b'"', b'\\', &text[at..]).map_or(text.len(), |found| at + found)
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
///
/// Copied in the longest runs between whitespace, so compact text (what most clients send) is
/// one copy after one walk; copying token by token cost a call per string and per scalar.
pub(super) fn write_minified(text: &[u8], out: &mut Vec<u8>) {
    out.reserve(text.len());
    let mut run_start = 0;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => i = string_end(text, i),
            b if is_whitespace(b) => {
                out.extend_from_slice(&text[run_start..i]);
                i = skip_whitespace(text, i);
                run_start = i;
            }
            _ => i += 1,
        }
    }
    out.extend_from_slice(&text[run_start..]);
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
    unescape_known(raw, raw[1..raw.len() - 1].contains(&b'\\'))
}

/// [`unescape`] of a token whose escapes were already looked for.
fn unescape_known(raw: &[u8], escaped: bool) -> Cow<'_, str> {
    if !escaped {
        let inner = &raw[1..raw.len() - 1];
        return Cow::Borrowed(std::str::from_utf8(inner).expect("raw json is validated utf-8"));
    }
    // Escapes are rare in keys and short strings; serde_json decodes them exactly as the
    // strict parse did.
    Cow::Owned(serde_json::from_slice(raw).expect("a validated json string"))
}

/// Whether the key token `raw` (quotes included) unescapes to `key`.
fn key_is(raw: &[u8], escaped: bool, key: &str) -> bool {
    let inner = &raw[1..raw.len() - 1];
    if !escaped {
        return inner == key.as_bytes();
    }
    // Every escape is longer than what it stands for, so an escaped key that is not longer
    // than `key` cannot unescape to it.
    inner.len() > key.len() && unescape_known(raw, true) == key
}

/// Byte ranges of each member's key token and value in an object's text (which fits 32-bit
/// offsets: the caller checked).
pub(super) fn member_ranges(text: &[u8]) -> Vec<(u32, u32, u32, u32)> {
    // Counted first: a vector that doubles leaves its old buffers behind.
    let mut out = Vec::with_capacity(MemberWalk::new(text).count());
    out.extend(MemberWalk::new(text).map(|m| {
        (
            m.key.0 as u32,
            m.key.1 as u32,
            m.value.0 as u32,
            m.value.1 as u32,
        )
    }));
    out
}

/// Where one member of an object sits: its key token (quotes included) and its value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemberAt {
    /// The key token, quotes included.
    pub(super) key: (usize, usize),
    /// Whether the key token has an escape (it is not its own text).
    escaped: bool,
    pub(super) value: (usize, usize),
}

/// The members of one object as the strict scan passed them, so that a reader finds a member
/// without walking the text again: the envelope reads the message's members (a walk skipped
/// `params` value by value, the body's largest member), and the layers read `params`' members
/// (a call's name, arguments and `_meta`) several times each. Holds six, 16 bytes each: the
/// envelope knows six member names and a valid message has at most four, and a call's params
/// are its name, arguments, `_meta` and a few more; an object with more members, or past 4 GiB,
/// is walked as before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NotedMembers {
    /// Key token start and end (quotes included), value start and end.
    found: [[u32; 4]; NotedMembers::CAPACITY],
    /// Bit `i` is set when member `i`'s key token has an escape.
    escaped: u8,
    len: u8,
    overflowed: bool,
}

impl NotedMembers {
    pub(crate) const CAPACITY: usize = 6;

    /// A member whose key token spans `key` (`escaped` if it has an escape) and whose value
    /// starts at `value_start`; its end comes with [`NotedMembers::value_ends`].
    pub(crate) fn push(&mut self, key: (usize, usize), escaped: bool, value_start: usize) {
        let (Some(slot), Ok(value_start)) = (
            self.found.get_mut(usize::from(self.len)),
            u32::try_from(value_start),
        ) else {
            self.overflowed = true;
            return;
        };
        // Offsets before `value_start` fit when it does.
        *slot = [key.0 as u32, key.1 as u32, value_start, value_start];
        self.escaped |= u8::from(escaped) << self.len;
        self.len += 1;
    }

    /// The value of the member pushed last ends just before `at`.
    pub(crate) fn value_ends(&mut self, at: usize) {
        let last = usize::from(self.len).checked_sub(1);
        match (last.and_then(|i| self.found.get_mut(i)), u32::try_from(at)) {
            (Some(last), Ok(at)) => last[3] = at,
            (Some(_), Err(_)) => self.overflowed = true,
            (None, _) => {}
        }
    }

    /// The members, positioned in the text from `start` on (where the object starts in what
    /// was scanned); `None` when they did not all fit.
    pub(crate) fn rebased(self, start: usize) -> Option<Self> {
        let mut this = self.fitted()?;
        let start = u32::try_from(start).ok()?;
        for member in &mut this.found[..usize::from(this.len)] {
            for offset in member {
                *offset -= start;
            }
        }
        Some(this)
    }

    /// The members, as noted; `None` when they did not all fit.
    pub(crate) fn fitted(self) -> Option<Self> {
        (!self.overflowed).then_some(self)
    }

    /// The members in order, as a walk over the object's text finds them.
    pub(crate) fn iter(&self) -> impl Iterator<Item = MemberAt> + '_ {
        self.found[..usize::from(self.len)].iter().enumerate().map(
            |(i, &[key_start, key_end, value_start, value_end])| MemberAt {
                key: (key_start as usize, key_end as usize),
                escaped: self.escaped & 1 << i != 0,
                value: (value_start as usize, value_end as usize),
            },
        )
    }
}

/// The members of an object's text, found without reading them: no key is unescaped and no
/// value is sliced until asked for, so passing over a member costs only its scan.
#[derive(Debug, Clone)]
pub(crate) struct MemberWalk<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> MemberWalk<'a> {
    pub(crate) fn new(text: &'a [u8]) -> Self {
        MemberWalk { text, at: 1 }
    }

    /// The key token of `member`, quotes and escapes included.
    pub(crate) fn raw_key(&self, member: &MemberAt) -> &'a [u8] {
        &self.text[member.key.0..member.key.1]
    }

    /// The text of `member`'s key when it has no escapes (and so is its own text).
    pub(crate) fn plain_key(&self, member: &MemberAt) -> Option<&'a [u8]> {
        (!member.escaped).then(|| &self.text[member.key.0 + 1..member.key.1 - 1])
    }

    /// The unescaped key of `member`; borrowed when it has no escapes.
    pub(crate) fn key(&self, member: &MemberAt) -> Cow<'a, str> {
        unescape_known(self.raw_key(member), member.escaped)
    }

    /// [`MemberWalk::key`] as bytes: a key without escapes is its own text, borrowed without
    /// the UTF-8 check a `str` needs (the strict parse made it), for callers that only compare.
    pub(crate) fn key_bytes(&self, member: &MemberAt) -> Cow<'a, [u8]> {
        match self.plain_key(member) {
            Some(plain) => Cow::Borrowed(plain),
            None => Cow::Owned(self.key(member).into_owned().into_bytes()),
        }
    }

    /// The keys, unescaped, in order.
    pub(crate) fn keys(self) -> impl Iterator<Item = Cow<'a, str>> {
        let text = self.text;
        self.map(move |m| unescape_known(&text[m.key.0..m.key.1], m.escaped))
    }

    /// Whether `member`'s key unescapes to `key`.
    pub(crate) fn key_is(&self, member: &MemberAt, key: &str) -> bool {
        key_is(self.raw_key(member), member.escaped, key)
    }

    /// The value of `member` as a slice of `text`, which must be what this walk walks.
    pub(crate) fn value(text: &Bytes, member: &MemberAt) -> RawJson {
        RawJson::from_trusted(text.slice(member.value.0..member.value.1))
    }
}

impl Iterator for MemberWalk<'_> {
    type Item = MemberAt;

    fn next(&mut self) -> Option<MemberAt> {
        let text = self.text;
        let mut at = skip_whitespace(text, self.at);
        if at >= text.len() || text[at] == b'}' {
            self.at = text.len();
            return None;
        }
        if text[at] == b',' {
            at = skip_whitespace(text, at + 1);
        }
        let (key_end, escaped) = string_end_escaped(text, at);
        // Whitespace, then the colon, then whitespace.
        let value_start = skip_whitespace(text, skip_whitespace(text, key_end) + 1);
        let end = value_end(text, value_start);
        self.at = end;
        Some(MemberAt {
            key: (at, key_end),
            escaped,
            value: (value_start, end),
        })
    }
}

/// An object's members: `(key, value)`, keys unescaped.
#[derive(Debug)]
pub struct Members<'a> {
    text: &'a Bytes,
    walk: MemberWalk<'a>,
}

impl<'a> Members<'a> {
    pub(super) fn new(text: &'a Bytes) -> Self {
        Members {
            text,
            walk: MemberWalk::new(text),
        }
    }

    /// Also yields each key's raw token, for copying members without re-escaping them.
    pub(super) fn with_raw_keys(self) -> impl Iterator<Item = (Cow<'a, str>, &'a [u8], RawJson)> {
        let mut members = self;
        std::iter::from_fn(move || members.next_member())
    }

    fn next_member(&mut self) -> Option<(Cow<'a, str>, &'a [u8], RawJson)> {
        let member = self.walk.next()?;
        Some((
            self.walk.key(&member),
            self.walk.raw_key(&member),
            MemberWalk::value(self.text, &member),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_quote_or_backslash_is_found_at_every_offset() {
        for len in 0..150 {
            for at in 0..=len {
                for (filler, mark) in [
                    (b'a', b'"'),
                    (0xC3, b'\\'),
                    (0xA9, b'"'),
                    (0x22 ^ 0x80, b'\\'),
                ] {
                    let mut text = vec![filler; len];
                    if at < len {
                        text[at] = mark;
                        // A second mark later never hides the first.
                        if at + 1 < len {
                            text[len - 1] = b'"';
                        }
                    }
                    assert_eq!(quote_or_backslash(&text, 0), at.min(len), "{text:?}");
                }
            }
        }
        assert_eq!(quote_or_backslash(b"ab\"", 5), 5, "past the end");
    }

    #[test]
    fn strings_end_after_their_closing_quote_whatever_they_escape() {
        for (text, end, escaped) in [
            (&br#""""#[..], 2, false),
            (br#""abcdefghijklmnop"x"#, 18, false),
            (br#""a\"b" "#, 6, true),
            (br#""\\""#, 4, true),
            (br#""abcdefgh\\\"ijklmnop\\" "#, 24, true),
            (br#""\u00e9\n""#, 10, true),
        ] {
            assert_eq!(string_end_escaped(text, 0), (end, escaped), "{text:?}");
        }
        // Past the inline words, where the vector search takes over: an escaped quote there
        // does not end the string, and the search goes on after it.
        let long = format!(r#""{}\"{}" "#, "a".repeat(100), "b".repeat(100));
        assert_eq!(
            string_end_escaped(long.as_bytes(), 0),
            (long.len() - 1, true)
        );
    }
}
