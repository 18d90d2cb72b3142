//! Strict JSON: one parse that refuses every input two JSON parsers could read differently.
//!
//! The gateway classifies the value this module returns and forwards its re-serialization, so
//! anything a lenient upstream parser might resolve differently from us must be refused here:
//! duplicate keys (also after `\u` unescaping), a BOM, trailing data, invalid UTF-8, lone
//! surrogates, excessive nesting and numbers that overflow an IEEE-754 double, as well as
//! everything outside RFC 8259's grammar (comments, trailing commas, `NaN`, hex, leading zeros).
//!
//! [`validate_strict`] is a hand-written scanner: one pass, no recursion, nothing built, keys
//! borrowed from the text unless they have escapes. It accepts exactly what serde_json's parser
//! plus the checks above accepted, refusing each input with the same [`ParseError`] variant; the
//! serde_json-based original is kept in the tests as the reference it is compared against.
//!
//! serde_json is built with `arbitrary_precision`, so every number keeps the exact text the
//! client sent and re-serializing never changes a value (`9007199254740993` stays itself instead
//! of becoming `9007199254740992`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};
use serde_json::Value;

use crate::raw::NotedMembers;

#[cfg(test)]
mod differential;
mod keys;
#[cfg(test)]
mod noted_tests;
#[cfg(test)]
mod reference;
mod scanner;
#[cfg(test)]
mod tests;

/// JSON-RPC error code for every strict-parse failure ("Parse error").
pub const PARSE_ERROR_CODE: i32 = -32700;

/// Default nesting limit, see [`ParseLimits::max_depth`].
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Validated text is read again with serde_json ([`parse_strict_with`], `RawJson::to_value`),
/// which refuses the 128th nested container: capping our own limit below that means text that
/// passed always reads.
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
    /// Default 64. Values above 126 behave as 126 (serde_json's recursion guard sits just above).
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
/// The UTF-8 check, then one pass of the scanner over the text, without recursion. Memory stays
/// proportional to the widest object's key count (a hash per key), never to the number of
/// values.
pub fn validate_strict(bytes: &[u8], limits: &ParseLimits) -> Result<(usize, usize), ParseError> {
    scan_strict(bytes, limits).map(|scanned| (scanned.start, scanned.end))
}

/// What the strict scan learnt of a valid value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Where the value starts and ends in the bytes scanned.
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Whether no object the envelope checks (the message, `params`, `_meta`: at most four
    /// levels deep) has two keys that fold together, known in passing (see
    /// `OpenObjects::fold_free`); `false` means only that it was not settled, and the envelope
    /// checks its members itself.
    pub(crate) fold_free: bool,
    /// Where the members of the top-level object and of its `params` sit, when the value is
    /// an object with no more members than [`NotedMembers`] holds.
    pub(crate) members: Option<MessageMembers>,
}

/// The members a message's readers look up, noted by the strict scan in passing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MessageMembers {
    /// The top-level object's, positioned in the message's text.
    pub(crate) top: NotedMembers,
    /// Those of the object the top-level member `params` holds, positioned in that object's
    /// own text; `None` when they did not all fit. (Empty when `params` is absent or not an
    /// object, which the envelope refuses.)
    pub(crate) params: Option<NotedMembers>,
}

/// [`validate_strict`], keeping what the scan learnt of the keys.
pub(crate) fn scan_strict(bytes: &[u8], limits: &ParseLimits) -> Result<Scanned, ParseError> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(ParseError::Bom);
    }
    // Validating up front lets the scanner slice keys out of a `str` and gives a precise error
    // instead of whichever syntax error the first bad byte would trip.
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::InvalidUtf8)?;
    scanner::scan(text, limits.max_depth.min(SERDE_JSON_DEPTH_CEILING))
}

/// Reads the number text of serde_json's `arbitrary_precision` envelope, refusing anything a
/// client-written object could supply instead: serde_json hands the real number text over as an
/// owned `String`, while an object that merely uses the reserved key yields a borrowed string or
/// another type.
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
    // serde_json's number envelope.
    fn visit_str<E: de::Error>(self, _: &str) -> Result<String, E> {
        Err(E::custom("reserved object key"))
    }
}
