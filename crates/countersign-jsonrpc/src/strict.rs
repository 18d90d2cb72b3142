//! Strict JSON: one parse that refuses every input two JSON parsers could read differently.
//!
//! The gateway classifies the value this module returns and forwards its re-serialization, so
//! anything a lenient upstream parser might resolve differently from us must be refused here:
//! duplicate keys (also after `\u` unescaping), a BOM, trailing data, invalid UTF-8, lone
//! surrogates, excessive nesting and numbers that overflow an IEEE-754 double. serde_json's
//! grammar already refuses comments, trailing commas, `NaN`, hex and leading zeros.
//!
//! serde_json is built with `arbitrary_precision`, so every number keeps the exact text the
//! client sent and re-serializing never changes a value (`9007199254740993` stays itself instead
//! of becoming `9007199254740992`).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

#[cfg(test)]
mod tests;

/// JSON-RPC error code for every strict-parse failure ("Parse error").
pub const PARSE_ERROR_CODE: i32 = -32700;

/// Default nesting limit, see [`ParseLimits::max_depth`].
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// serde_json refuses the 128th nested container before our visitor sees it; capping our own
/// limit below that keeps every depth refusal a [`ParseError::TooDeep`] rather than a syntax error.
const SERDE_JSON_DEPTH_CEILING: usize = 126;

/// serde_json (with `arbitrary_precision` / `raw_value`) smuggles numbers and raw values through
/// single-entry maps keyed by these tokens. A client object using such a key would be read as a
/// number by serde_json-based upstreams, so the prefix is refused as an object key.
const SERDE_JSON_PRIVATE_PREFIX: &str = "$serde_json::private::";
pub(crate) const SERDE_JSON_NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Bounds applied while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Maximum nesting of arrays and objects; a scalar is depth 0, `[]` and `{}` are depth 1.
    /// Default 64. Values above 126 behave as 126 (serde_json's own recursion guard sits just above).
    pub max_depth: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// Why a body was refused by the strict parser. Every variant maps to JSON-RPC `-32700`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The bytes are not JSON per RFC 8259 (comments, trailing commas, `NaN`, lone surrogates, …).
    #[error("invalid json at line {line} column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// The body starts with a UTF-8 byte order mark, which RFC 8259 forbids senders to add.
    #[error("body starts with a byte order mark")]
    Bom,
    /// The body is not valid UTF-8 (including overlong forms and encoded surrogates).
    #[error("body is not valid utf-8")]
    InvalidUtf8,
    /// An object repeats a key, compared after unescaping.
    #[error("duplicate object key {key:?}")]
    DuplicateKey { key: String },
    /// An object uses a key that serde_json reserves for its own number and raw-value encoding.
    #[error("reserved object key {key:?}")]
    ReservedKey { key: String },
    /// Arrays and objects nest deeper than the limit.
    #[error("nesting deeper than {max} levels")]
    TooDeep { max: usize },
    /// A number whose magnitude overflows an IEEE-754 double (for example `1e400`).
    #[error("number is out of range for a double")]
    NonFiniteNumber,
    /// More than whitespace follows the first JSON value.
    #[error("trailing data after the json value")]
    TrailingData,
}

impl ParseError {
    /// The JSON-RPC error code for this failure: always `-32700` (Parse error).
    pub fn jsonrpc_code(&self) -> i32 {
        match self {
            ParseError::Syntax { .. }
            | ParseError::Bom
            | ParseError::InvalidUtf8
            | ParseError::DuplicateKey { .. }
            | ParseError::ReservedKey { .. }
            | ParseError::TooDeep { .. }
            | ParseError::NonFiniteNumber
            | ParseError::TrailingData => PARSE_ERROR_CODE,
        }
    }
}

/// Parses `bytes` as one strict JSON value with [`ParseLimits::default`].
pub fn parse_strict(bytes: &[u8]) -> Result<Value, ParseError> {
    parse_strict_with(bytes, &ParseLimits::default())
}

/// Parses `bytes` as one strict JSON value and builds its `serde_json` tree.
///
/// The tree costs tens of bytes per element: the gateway's request path keeps client bodies as
/// [`crate::RawJson`] instead and uses this only for small values it must edit.
pub fn parse_strict_with(bytes: &[u8], limits: &ParseLimits) -> Result<Value, ParseError> {
    let (start, end) = validate_strict(bytes, limits)?;
    Ok(serde_json::from_slice(&bytes[start..end]).expect("strictly valid json is valid json"))
}

/// Checks that `bytes` are one strict JSON value without building anything, and returns where
/// the value starts and ends (leading and trailing whitespace is allowed; anything else around
/// the value is refused).
///
/// Memory stays proportional to the widest object's key count (a hash per key), never to the
/// number of values.
pub fn validate_strict(bytes: &[u8], limits: &ParseLimits) -> Result<(usize, usize), ParseError> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(ParseError::Bom);
    }
    // Validating up front lets serde_json's string scanner skip per-string UTF-8 checks and
    // gives a precise error instead of whichever syntax error the first bad byte trips.
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::InvalidUtf8)?;
    let max_depth = limits.max_depth.min(SERDE_JSON_DEPTH_CEILING);
    let mut state = State {
        depth: 0,
        max_depth,
        failure: None,
        key_hasher: RandomState::new(),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    if let Err(err) = (CheckSeed { state: &mut state }).deserialize(&mut de) {
        return Err(state
            .failure
            .take()
            .unwrap_or_else(|| syntax_error(&err, max_depth)));
    }
    // Without `end()` a second value or garbage after the first would be silently ignored.
    de.end().map_err(|_| ParseError::TrailingData)?;
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = bytes.iter().position(|b| !is_space(b)).unwrap_or(0);
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    Ok((start, end))
}

fn syntax_error(err: &serde_json::Error, max_depth: usize) -> ParseError {
    let full = err.to_string();
    if full.starts_with("recursion limit exceeded") {
        return ParseError::TooDeep { max: max_depth };
    }
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
    ParseError::Syntax {
        line: err.line(),
        column: err.column(),
        message,
    }
}

struct State {
    depth: usize,
    max_depth: usize,
    /// The precise reason for a refusal raised inside the visitor; serde_json only carries a
    /// message string back out, so the typed reason travels here.
    failure: Option<ParseError>,
    /// Keyed per parse, so a client cannot aim keys at colliding hashes (see `KeySet`).
    key_hasher: RandomState,
}

impl State {
    fn fail<E: de::Error>(&mut self, failure: ParseError) -> E {
        let err = E::custom(&failure);
        self.failure = Some(failure);
        err
    }

    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        self.depth += 1;
        if self.depth > self.max_depth {
            let max = self.max_depth;
            return Err(self.fail(ParseError::TooDeep { max }));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }
}

/// The keys seen so far in one object. Small objects compare keys exactly; past
/// [`KeySet::EXACT`] keys only a 64-bit keyed hash of each is kept, so a wide object costs 8
/// bytes per key rather than a copy of it. Two distinct keys with equal hashes are refused as
/// duplicates: that fails closed, with odds below 2^-40 for the widest object a body can hold.
enum KeySet<'de> {
    Exact(Vec<Cow<'de, str>>),
    Hashed(HashSet<u64, BuildHasherDefault<IdentityHasher>>),
}

impl<'de> KeySet<'de> {
    const EXACT: usize = 16;

    /// Records `key`, or hands it back if it was already there.
    fn insert(&mut self, key: Cow<'de, str>, hasher: &RandomState) -> Result<(), Cow<'de, str>> {
        let fresh = match self {
            KeySet::Exact(keys) if keys.contains(&key) => false,
            KeySet::Exact(keys) if keys.len() < Self::EXACT => {
                keys.push(key);
                return Ok(());
            }
            KeySet::Exact(keys) => {
                let mut hashed: HashSet<u64, _> =
                    keys.iter().map(|k| hasher.hash_one(&**k)).collect();
                let fresh = hashed.insert(hasher.hash_one(&*key));
                *self = KeySet::Hashed(hashed);
                fresh
            }
            KeySet::Hashed(hashes) => hashes.insert(hasher.hash_one(&*key)),
        };
        if fresh { Ok(()) } else { Err(key) }
    }
}

/// The set already holds keyed SipHash outputs; hashing them again would only cost time.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

struct CheckSeed<'s> {
    state: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for CheckSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(CheckVisitor { state: self.state })
    }
}

/// Walks a value, refusing what the module refuses, and builds nothing.
struct CheckVisitor<'s> {
    state: &'s mut State,
}

impl<'de> Visitor<'de> for CheckVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a json value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        // Only reached without `arbitrary_precision`; kept so the crate fails closed either way.
        if v.is_finite() {
            Ok(())
        } else {
            Err(self.state.fail(ParseError::NonFiniteNumber))
        }
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.state.enter()?;
        while seq
            .next_element_seed(CheckSeed {
                state: &mut *self.state,
            })?
            .is_some()
        {}
        self.state.leave();
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        // The first key decides between a real object and serde_json's number envelope, so it
        // is read before the depth check: a number at the deepest allowed level is not nesting.
        let Some(first) = access.next_key_seed(KeySeed)? else {
            self.state.enter()?;
            self.state.leave();
            return Ok(());
        };
        if first == SERDE_JSON_NUMBER_TOKEN {
            return finish_number(self.state, access);
        }
        self.state.enter()?;
        let mut seen = KeySet::Exact(Vec::new());
        let mut next = Some(first);
        while let Some(key) = next {
            if key.starts_with(SERDE_JSON_PRIVATE_PREFIX) {
                return Err(self.state.fail(ParseError::ReservedKey {
                    key: key.into_owned(),
                }));
            }
            if let Err(key) = seen.insert(key, &self.state.key_hasher) {
                return Err(self.state.fail(ParseError::DuplicateKey {
                    key: key.into_owned(),
                }));
            }
            access.next_value_seed(CheckSeed {
                state: &mut *self.state,
            })?;
            next = access.next_key_seed(KeySeed)?;
        }
        self.state.leave();
        Ok(())
    }
}

/// Completes a number delivered through serde_json's `arbitrary_precision` envelope.
fn finish_number<'de, A: MapAccess<'de>>(state: &mut State, mut access: A) -> Result<(), A::Error> {
    // serde_json hands the real number text over as an owned `String`; a client object that
    // merely uses the reserved key yields a borrowed string or another type, which the text
    // visitor refuses. Until the text is in hand the reserved-key reading stands.
    state.failure = Some(ParseError::ReservedKey {
        key: SERDE_JSON_NUMBER_TOKEN.to_owned(),
    });
    let text = access.next_value_seed(NumberTextSeed)?;
    if access.next_key_seed(KeySeed)?.is_some() {
        return Err(de::Error::custom("reserved object key"));
    }
    state.failure = None;
    let number: Number = text
        .parse()
        .map_err(|_| de::Error::custom("invalid number"))?;
    // With `arbitrary_precision`, `as_f64` is `None` exactly when the text overflows a double.
    if number.as_f64().is_none() {
        return Err(state.fail(ParseError::NonFiniteNumber));
    }
    Ok(())
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Reads the number text of serde_json's `arbitrary_precision` envelope, refusing anything a
/// client-written object could supply instead (see `finish_number`).
pub(crate) struct NumberTextSeed;

impl<'de> DeserializeSeed<'de> for NumberTextSeed {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(NumberTextVisitor)
    }
}

struct NumberTextVisitor;

impl<'de> Visitor<'de> for NumberTextVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("number text")
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    // Borrowed and escaped strings only ever come from client-written JSON, never from
    // serde_json's number envelope: see `finish_number`.
    fn visit_str<E: de::Error>(self, _: &str) -> Result<String, E> {
        Err(E::custom("reserved object key"))
    }
}
