//! The strict parse as it was first written, on serde_json's own parser: kept as the reference
//! the scanner is tested against (see `differential.rs`), never compiled outside tests.
//!
//! It refuses what serde_json's grammar refuses and adds the strict checks in a `Visitor`.
//! Duplicate keys are compared exactly here, whatever the object's width.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::{
    NumberTextSeed, ParseError, ParseLimits, SERDE_JSON_DEPTH_CEILING, SERDE_JSON_NUMBER_TOKEN,
    SERDE_JSON_PRIVATE_PREFIX,
};

/// What `validate_strict` returns, decided by serde_json.
pub(super) fn validate_strict_reference(
    bytes: &[u8],
    limits: &ParseLimits,
) -> Result<(usize, usize), ParseError> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(ParseError::Bom);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::InvalidUtf8)?;
    let max_depth = limits.max_depth.min(SERDE_JSON_DEPTH_CEILING);
    let mut state = State {
        depth: 0,
        max_depth,
        failure: None,
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
        // Only reached without `arbitrary_precision`; kept so the reference fails closed either way.
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
        let mut seen = HashSet::new();
        let mut next = Some(first);
        while let Some(key) = next {
            if key.starts_with(SERDE_JSON_PRIVATE_PREFIX) {
                return Err(self.state.fail(ParseError::ReservedKey {
                    key: key.into_owned(),
                }));
            }
            if seen.contains(&key) {
                return Err(self.state.fail(ParseError::DuplicateKey {
                    key: key.into_owned(),
                }));
            }
            seen.insert(key);
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
