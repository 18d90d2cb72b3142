//! The strict parse itself: one pass over the text that builds nothing.
//!
//! Nesting is followed with a counter and a bit per level instead of recursion, so the deepest
//! input costs no stack. Keys are borrowed from the text unless they have escapes; only those
//! are unescaped, for the duplicate check. Numbers are checked against the RFC 8259 grammar, and
//! only a number that could reach the largest double is converted, to see whether it overflows.

use std::borrow::Cow;

use super::keys::OpenObjects;
use super::{
    MessageMembers, ParseError, SERDE_JSON_DEPTH_CEILING, SERDE_JSON_NUMBER_TOKEN,
    SERDE_JSON_PRIVATE_PREFIX, Scanned,
};
use crate::raw::{NotedMembers, next_escape};

// `Scanner::objects` keeps one bit per open container.
const _: () = assert!(SERDE_JSON_DEPTH_CEILING < u128::BITS as usize);

/// The deepest objects whose key folds the envelope checks: a message is at depth 1 (2 in a
/// batch), its `params` one deeper and their `_meta` one deeper still. Deeper keys (a tool's
/// arguments, a result) are the tools' business, and noting their folds would only cost time.
const ENVELOPE_DEPTH: usize = 4;

/// A number below 10^308 is finite (the largest double is about 1.8 × 10^308), so only one whose
/// digits and exponent could reach that far is converted to find out.
const ALWAYS_FINITE_DIGITS: usize = 308;

/// Scans `text` as one strict JSON value, at most `max_depth` containers deep, and returns where
/// the value starts and ends, and whether its keys are known not to fold together.
pub(super) fn scan(text: &str, max_depth: usize) -> Result<Scanned, ParseError> {
    debug_assert!(max_depth <= SERDE_JSON_DEPTH_CEILING);
    let mut scanner = Scanner {
        text,
        at: 0,
        max_depth,
        depth: 0,
        objects: 0,
        in_object: false,
        keys: OpenObjects::default(),
        top: NotedMembers::default(),
        params: NotedMembers::default(),
        in_params: false,
        params_start: 0,
    };
    scanner.skip_whitespace();
    let start = scanner.at;
    scanner.value()?;
    let end = scanner.at;
    scanner.skip_whitespace();
    if scanner.at != text.len() {
        return Err(ParseError::TrailingData);
    }
    Ok(Scanned {
        start,
        end,
        fold_free: scanner.keys.fold_free(),
        members: (text.as_bytes().get(start) == Some(&b'{'))
            .then_some(scanner.top)
            .and_then(|top| top.rebased(start))
            .map(|top| MessageMembers {
                top,
                params: scanner.params.fitted(),
            }),
    })
}

struct Scanner<'a> {
    text: &'a str,
    at: usize,
    max_depth: usize,
    /// Open arrays and objects.
    depth: usize,
    /// Bit `d` is set when the container at depth `d + 1` is an object.
    objects: u128,
    /// Whether the innermost open container is an object: read after every value, so kept
    /// apart from `objects`, where reading a bit takes a 128-bit shift.
    in_object: bool,
    keys: OpenObjects<'a>,
    /// The members of the top-level object, when it is one.
    top: NotedMembers,
    /// The members of the object the top-level member `params` holds, when it is one.
    params: NotedMembers,
    /// Whether the top-level member being read is `params`: its value's members are noted,
    /// positioned in its text, which starts at `params_start`.
    in_params: bool,
    params_start: usize,
}

impl<'a> Scanner<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Reads the value at `at` (whitespace before it allowed) and everything nested in it.
    fn value(&mut self) -> Result<(), ParseError> {
        loop {
            self.skip_whitespace();
            match self.peek() {
                Some(b'[') => {
                    self.room()?;
                    self.at += 1;
                    self.skip_whitespace();
                    if self.peek() != Some(b']') {
                        // The first item is the next value.
                        self.open(false);
                        continue;
                    }
                    self.at += 1;
                }
                Some(b'{') => {
                    self.at += 1;
                    self.skip_whitespace();
                    match self.peek() {
                        Some(b'}') => {
                            self.room()?;
                            self.at += 1;
                        }
                        Some(b'"') => {
                            let key_start = self.at;
                            let key = self.key()?;
                            // serde_json-based upstreams read an object whose first key is this
                            // token as a number, not as nesting: `member` refuses it as a
                            // reserved key even where an object could not nest any deeper.
                            if key != SERDE_JSON_NUMBER_TOKEN {
                                self.room()?;
                            }
                            self.open(true);
                            self.member(key_start, key)?;
                            continue;
                        }
                        Some(_) => return Err(self.syntax("expected a string key")),
                        None => return Err(self.syntax("end of input inside an object")),
                    }
                }
                Some(b'"') => self.skip_string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(_) => return Err(self.syntax("expected a value")),
                None => return Err(self.syntax("end of input where a value was expected")),
            }
            // A value ended: close every container that ends with it, then go on to the next
            // item or member value, if any.
            loop {
                if self.depth == 0 {
                    return Ok(());
                }
                if self.depth == 1 && self.in_object {
                    // The value just ended is a member's of the top-level object: the last noted.
                    self.top.value_ends(self.at);
                } else if self.depth == 2 && self.in_params && self.in_object {
                    // A member's of `params`, the last noted there.
                    self.params.value_ends(self.at - self.params_start);
                }
                self.skip_whitespace();
                match (self.peek(), self.in_object) {
                    (Some(b','), false) => {
                        self.at += 1;
                        self.skip_whitespace();
                        if self.peek() == Some(b']') {
                            return Err(self.syntax("trailing comma"));
                        }
                        break;
                    }
                    (Some(b']'), false) => {
                        self.at += 1;
                        self.close();
                    }
                    (Some(b','), true) => {
                        self.at += 1;
                        self.skip_whitespace();
                        match self.peek() {
                            Some(b'"') => {
                                let key_start = self.at;
                                let key = self.key()?;
                                self.member(key_start, key)?;
                                break;
                            }
                            Some(b'}') => return Err(self.syntax("trailing comma")),
                            Some(_) => return Err(self.syntax("expected a string key")),
                            None => return Err(self.syntax("end of input inside an object")),
                        }
                    }
                    (Some(b'}'), true) => {
                        self.at += 1;
                        self.close();
                    }
                    (Some(_), false) => return Err(self.syntax("expected `,` or `]`")),
                    (Some(_), true) => return Err(self.syntax("expected `,` or `}`")),
                    (None, false) => return Err(self.syntax("end of input inside an array")),
                    (None, true) => return Err(self.syntax("end of input inside an object")),
                }
            }
        }
    }

    /// Refuses a container that would nest deeper than the limit.
    fn room(&self) -> Result<(), ParseError> {
        if self.depth == self.max_depth {
            return Err(self.too_deep());
        }
        Ok(())
    }

    /// Opens a container that has at least one item or member.
    fn open(&mut self, object: bool) {
        self.depth += 1;
        let bit = 1 << (self.depth - 1);
        if object {
            self.objects |= bit;
            self.in_object = true;
            self.keys.open();
        } else {
            self.objects &= !bit;
            self.in_object = false;
        }
    }

    /// Closes the innermost container, and its keys if it is an object.
    fn close(&mut self) {
        if self.in_object {
            self.keys.close();
        }
        self.depth -= 1;
        self.in_object = self.depth > 0 && self.objects & 1 << (self.depth - 1) != 0;
    }

    fn too_deep(&self) -> ParseError {
        ParseError::TooDeep {
            max: self.max_depth,
        }
    }

    /// Checks a key just read (its token starting at `key_start`), then reads the colon after
    /// it. The order decides which refusal a body with several faults gets: reserved before
    /// duplicate, both before anything after the key. A member of the top-level object is
    /// noted for the envelope.
    fn member(&mut self, key_start: usize, key: Cow<'a, str>) -> Result<(), ParseError> {
        let key_end = self.at;
        // Only keys with escapes are unescaped into a `String` of their own.
        let escaped = matches!(key, Cow::Owned(_));
        let params_key = self.depth == 1 && key == "params";
        if key.starts_with(SERDE_JSON_PRIVATE_PREFIX) {
            return Err(ParseError::ReservedKey {
                key: key.into_owned(),
            });
        }
        if let Err(key) = self.keys.insert(key, self.depth <= ENVELOPE_DEPTH) {
            return Err(ParseError::DuplicateKey {
                key: key.into_owned(),
            });
        }
        self.skip_whitespace();
        match self.peek() {
            Some(b':') => {
                self.at += 1;
                if self.depth == 1 {
                    self.skip_whitespace();
                    self.top.push((key_start, key_end), escaped, self.at);
                    self.in_params = params_key;
                    if params_key {
                        self.params_start = self.at;
                    }
                } else if self.depth == 2 && self.in_params {
                    self.skip_whitespace();
                    let start = self.params_start;
                    let key = (key_start - start, key_end - start);
                    self.params.push(key, escaped, self.at - start);
                }
                Ok(())
            }
            Some(_) => Err(self.syntax("expected `:`")),
            None => Err(self.syntax("end of input inside an object")),
        }
    }

    /// Reads the string whose opening quote is at `at`.
    fn skip_string(&mut self) -> Result<(), ParseError> {
        let bytes = self.bytes();
        self.at += 1;
        loop {
            self.at = next_escape(bytes, self.at);
            match bytes.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.escape()?;
                }
                _ => return Err(self.string_error()),
            }
        }
    }

    /// Reads the key whose opening quote is at `at` and returns it unescaped: borrowed, unless
    /// it has escapes.
    fn key(&mut self) -> Result<Cow<'a, str>, ParseError> {
        let bytes = self.bytes();
        self.at += 1;
        let start = self.at;
        self.at = next_escape(bytes, start);
        // Quotes and escapes are ASCII, so every slice here is on character boundaries.
        if bytes.get(self.at) == Some(&b'"') {
            self.at += 1;
            return Ok(Cow::Borrowed(&self.text[start..self.at - 1]));
        }
        let mut unescaped = String::new();
        let mut plain_from = start;
        loop {
            match bytes.get(self.at) {
                Some(b'"') => {
                    unescaped.push_str(&self.text[plain_from..self.at]);
                    self.at += 1;
                    return Ok(Cow::Owned(unescaped));
                }
                Some(b'\\') => {
                    unescaped.push_str(&self.text[plain_from..self.at]);
                    unescaped.push(self.escape()?);
                    plain_from = self.at;
                }
                _ => return Err(self.string_error()),
            }
            self.at = next_escape(bytes, self.at);
        }
    }

    /// The error for a string stopped by neither a quote nor a backslash.
    fn string_error(&self) -> ParseError {
        match self.peek() {
            Some(_) => self.syntax("control character in a string"),
            None => self.syntax("end of input inside a string"),
        }
    }

    /// Reads the escape whose backslash is at `at` and returns the character it stands for.
    fn escape(&mut self) -> Result<char, ParseError> {
        self.at += 1;
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => return self.unicode_escape(),
            Some(_) => return Err(self.syntax("invalid escape")),
            None => return Err(self.syntax("end of input inside a string")),
        };
        self.at += 1;
        Ok(c)
    }

    /// Reads the code unit after `\u` at `at`, and its low surrogate if it is a high one: a
    /// lone surrogate is no character, and parsers disagree on what to make of it.
    fn unicode_escape(&mut self) -> Result<char, ParseError> {
        self.at += 1;
        let unit = self.hex_unit()?;
        let code = match unit {
            0xD800..=0xDBFF => {
                if self.bytes().get(self.at..self.at + 2) != Some(b"\\u") {
                    return Err(self.syntax("lone surrogate in a \\u escape"));
                }
                self.at += 2;
                let low = self.hex_unit()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.syntax("lone surrogate in a \\u escape"));
                }
                0x1_0000 + ((u32::from(unit) - 0xD800) << 10 | (u32::from(low) - 0xDC00))
            }
            0xDC00..=0xDFFF => return Err(self.syntax("lone surrogate in a \\u escape")),
            _ => u32::from(unit),
        };
        char::from_u32(code).ok_or_else(|| self.syntax("invalid \\u escape"))
    }

    /// Reads the four hex digits at `at`.
    fn hex_unit(&mut self) -> Result<u16, ParseError> {
        let Some(digits) = self.bytes().get(self.at..self.at + 4) else {
            self.at = self.text.len();
            return Err(self.syntax("end of input inside a string"));
        };
        let mut unit = 0u16;
        for &digit in digits {
            let value = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                b'A'..=b'F' => digit - b'A' + 10,
                _ => return Err(self.syntax("invalid \\u escape")),
            };
            unit = unit << 4 | u16::from(value);
        }
        self.at += 4;
        Ok(unit)
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ParseError> {
        if self.bytes()[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.syntax("invalid literal"))
        }
    }

    /// Reads the number at `at`: RFC 8259's grammar, and finite as a double.
    fn number(&mut self) -> Result<(), ParseError> {
        let bytes = self.bytes();
        let start = self.at;
        if bytes[self.at] == b'-' {
            self.at += 1;
        }
        let integer_digits = match self.peek() {
            Some(b'0') => {
                self.at += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.syntax("leading zero in a number"));
                }
                // Only a fraction follows: the magnitude is below one.
                0
            }
            Some(b'1'..=b'9') => {
                let from = self.at;
                self.at = skip_digits(bytes, from + 1);
                self.at - from
            }
            _ => return Err(self.number_error()),
        };
        if self.peek() == Some(b'.') {
            let from = self.at + 1;
            self.at = skip_digits(bytes, from);
            if self.at == from {
                return Err(self.number_error());
            }
        }
        let mut exponent = 0usize;
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            let negative = self.peek() == Some(b'-');
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            let from = self.at;
            self.at = skip_digits(bytes, from);
            if self.at == from {
                return Err(self.number_error());
            }
            // A negative exponent only makes the number smaller, so it counts as zero.
            if !negative {
                for &digit in &bytes[from..self.at] {
                    exponent = (exponent * 10 + usize::from(digit - b'0')).min(1 << 20);
                }
            }
        }
        if integer_digits.saturating_add(exponent) <= ALWAYS_FINITE_DIGITS {
            return Ok(());
        }
        // The standard library rounds exactly as any correct parser does, so "overflows" here
        // means the number reads as infinity everywhere.
        match self.text[start..self.at].parse::<f64>() {
            Ok(number) if number.is_finite() => Ok(()),
            _ => Err(ParseError::NonFiniteNumber),
        }
    }

    fn number_error(&self) -> ParseError {
        match self.peek() {
            Some(_) => self.syntax("invalid number"),
            None => self.syntax("end of input inside a number"),
        }
    }

    /// A syntax error at `at`, placed as serde_json places its own: 1-based line, and the
    /// column of the offending byte (of the last byte, at the end of the input).
    #[cold]
    fn syntax(&self, message: &str) -> ParseError {
        let bytes = self.bytes();
        let upto = (self.at + 1).min(bytes.len());
        let line_start = bytes[..upto]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        ParseError::Syntax {
            line: 1 + bytes[..line_start].iter().filter(|&&b| b == b'\n').count(),
            column: upto - line_start,
            message: message.to_owned(),
        }
    }
}

fn skip_digits(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b'0'..=b'9') = bytes.get(at) {
        at += 1;
    }
    at
}
