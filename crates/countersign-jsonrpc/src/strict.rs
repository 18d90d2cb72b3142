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
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

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

/// Parses `bytes` as one strict JSON value.
///
/// Leading and trailing whitespace is allowed; anything else around the value is refused.
pub fn parse_strict_with(bytes: &[u8], limits: &ParseLimits) -> Result<Value, ParseError> {
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
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = match (ValueSeed { state: &mut state }).deserialize(&mut de) {
        Ok(value) => value,
        Err(err) => {
            return Err(state
                .failure
                .take()
                .unwrap_or_else(|| syntax_error(&err, max_depth)));
        }
    };
    // Without `end()` a second value or garbage after the first would be silently ignored.
    de.end().map_err(|_| ParseError::TrailingData)?;
    Ok(value)
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

/// The fold used to detect keys that differ only in ways a lenient decoder ignores.
///
/// Removes NUL characters (GHSA-q382-vc8q-7jhj: `name\u0000` matched `name`) and maps every
/// character through upper- then lower-casing, an approximation of Unicode simple case folding
/// that also catches `ſ` (U+017F) → `s` and the Kelvin sign (U+212A) → `k`
/// (CVE-2026-27896: Go's `encoding/json` matched keys that way).
pub fn fold_key(key: &str) -> String {
    key.chars()
        .filter(|&c| c != '\0')
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

/// Keys that are lowercase ASCII without NUL are their own fold; skipping the fold for them
/// keeps the common case allocation-free.
fn is_own_fold(key: &str) -> bool {
    key.bytes()
        .all(|b| b.is_ascii() && b != 0 && !b.is_ascii_uppercase())
}

fn folded(key: &str) -> Cow<'_, str> {
    if is_own_fold(key) {
        Cow::Borrowed(key)
    } else {
        Cow::Owned(fold_key(key))
    }
}

/// Returns the first pair of distinct keys in `map` that collide under [`fold_key`]
/// (`name`/`Name`, `params`/`paramſ`, `name`/`name\u0000`), in map order.
pub fn fold_collision(map: &Map<String, Value>) -> Option<(&str, &str)> {
    if map.keys().all(|k| is_own_fold(k)) {
        // All keys are their own fold and map keys are unique, so nothing can collide.
        return None;
    }
    let folds: Vec<(&str, Cow<'_, str>)> = map.keys().map(|k| (k.as_str(), folded(k))).collect();
    if folds.len() <= 16 {
        for (i, (key_a, fold_a)) in folds.iter().enumerate() {
            for (key_b, fold_b) in &folds[i + 1..] {
                if fold_a == fold_b {
                    return Some((key_a, key_b));
                }
            }
        }
        return None;
    }
    let mut seen: std::collections::HashMap<&str, &str> =
        std::collections::HashMap::with_capacity(folds.len());
    for (key, fold) in &folds {
        if let Some(first) = seen.insert(fold.as_ref(), key) {
            return Some((first, key));
        }
    }
    None
}

/// Like [`fold_collision`], but searches every object nested anywhere in `value`
/// (used on the arguments of risky tool calls).
pub fn fold_collision_deep(value: &Value) -> Option<(&str, &str)> {
    // An explicit stack: the value may be as deep as the parse limit and this must not recurse.
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(pair) = fold_collision(map) {
                    return Some(pair);
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items.iter()),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    None
}

struct State {
    depth: usize,
    max_depth: usize,
    /// The precise reason for a refusal raised inside the visitor; serde_json only carries a
    /// message string back out, so the typed reason travels here.
    failure: Option<ParseError>,
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

struct ValueSeed<'s> {
    state: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor { state: self.state })
    }
}

struct ValueVisitor<'s> {
    state: &'s mut State,
}

impl<'de> Visitor<'de> for ValueVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a json value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // Only reached without `arbitrary_precision`; kept so the crate fails closed either way.
        match Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => Err(self.state.fail(ParseError::NonFiniteNumber)),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.state.enter()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed {
            state: &mut *self.state,
        })? {
            items.push(item);
        }
        self.state.leave();
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        // The first key decides between a real object and serde_json's number envelope, so it
        // is read before the depth check: a number at the deepest allowed level is not nesting.
        let Some(first) = access.next_key_seed(KeySeed)? else {
            self.state.enter()?;
            self.state.leave();
            return Ok(Value::Object(Map::new()));
        };
        if first == SERDE_JSON_NUMBER_TOKEN {
            return finish_number(self.state, access);
        }
        self.state.enter()?;
        let mut map = Map::new();
        let mut next = Some(first);
        while let Some(key) = next {
            if key.starts_with(SERDE_JSON_PRIVATE_PREFIX) {
                return Err(self.state.fail(ParseError::ReservedKey {
                    key: key.into_owned(),
                }));
            }
            match map.entry(key.into_owned()) {
                Entry::Occupied(slot) => {
                    let key = slot.key().clone();
                    return Err(self.state.fail(ParseError::DuplicateKey { key }));
                }
                Entry::Vacant(slot) => {
                    let value = access.next_value_seed(ValueSeed {
                        state: &mut *self.state,
                    })?;
                    slot.insert(value);
                }
            }
            next = access.next_key_seed(KeySeed)?;
        }
        self.state.leave();
        Ok(Value::Object(map))
    }
}

/// Completes a number delivered through serde_json's `arbitrary_precision` envelope.
fn finish_number<'de, A: MapAccess<'de>>(
    state: &mut State,
    mut access: A,
) -> Result<Value, A::Error> {
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
    Ok(Value::Number(number))
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
