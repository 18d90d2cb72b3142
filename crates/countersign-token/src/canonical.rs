//! RFC 8785 JSON Canonicalization Scheme (JCS) and the hashes built on it.
//!
//! The confirmation token binds the *meaning* of a call's arguments, so that a client may
//! re-order keys, re-indent or re-escape them between the two phases and still match, while any
//! semantic change breaks the binding. Three pieces make that safe:
//!
//! - [`canonicalize`] produces the RFC 8785 bytes: object keys sorted by UTF-16 code units,
//!   strings with the minimal JCS escapes, numbers printed as ECMAScript
//!   `Number.prototype.toString` prints the IEEE-754 double nearest their source text.
//! - [`check_safe_numbers`] refuses numbers whose double is ambiguous as an integer (beyond
//!   ±(2^53−1)) or not finite, because two different source integers would then share a hash.
//! - [`normalize_numbers`] rewrites every number to its canonical text, so the gateway forwards
//!   exactly the value it hashed: a Python upstream must never see `1.0` where the human
//!   approved `1`.
//!
//! JCS assumes I-JSON. Duplicate keys cannot be detected here (a [`Value`] already applied
//! last-wins); the strict parse in `countersign-jsonrpc` refuses them before anything reaches
//! this module.
//!
//! serde_json is compiled workspace-wide with `arbitrary_precision`, so every [`Number`] still
//! carries its exact source text; [`Number::as_str`] only exists with that feature, which makes
//! this module fail to compile rather than silently hash rounded numbers if it is ever lost.

use base64::Engine as _;
use countersign_jsonrpc::RawJson;
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::B64URL;

/// Nesting deeper than this is refused. Bodies come from the strict parser (depth ≤ 64), so
/// this only guards the recursion against hand-built values.
pub const MAX_DEPTH: usize = 128;

/// The largest integer every JSON implementation represents exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The tool-definition members the definition hash covers (docs/classification.md).
const DEFINITION_MEMBERS: [&str; 5] = [
    "name",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// Prefixed to the fallback input of [`definition_hash`], so a definition hashed from its
/// compact serialization can never collide with one hashed canonically.
const NONCANONICAL_DOMAIN: &[u8] = b"countersign-noncanonical-v1\0";

/// Why a value has no canonical form (or may not be bound). `path` is an RFC 6901 JSON Pointer
/// into the value ("" is the value itself); number texts are left out on purpose, since
/// arguments never appear in logs above trace level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// The text is not a JSON number.
    #[error("number at {path:?} is not valid JSON number text")]
    InvalidNumber { path: String },
    /// The number overflows an IEEE-754 double (e.g. `1e400`), which I-JSON forbids.
    #[error("number at {path:?} is not finite as a double")]
    NonFinite { path: String },
    /// The number's magnitude exceeds 2^53 − 1, so distinct integers share one double.
    #[error("number at {path:?} is outside the safe integer range ±(2^53-1)")]
    UnsafeInteger { path: String },
    /// Nesting exceeds [`MAX_DEPTH`].
    #[error("value at {path:?} is nested deeper than {MAX_DEPTH} levels")]
    TooDeep { path: String },
}

impl CanonicalError {
    /// The JSON Pointer of the offending value.
    pub fn path(&self) -> &str {
        match self {
            Self::InvalidNumber { path }
            | Self::NonFinite { path }
            | Self::UnsafeInteger { path }
            | Self::TooDeep { path } => path,
        }
    }

    /// Paths are built while unwinding, innermost segment first, so the happy path never
    /// allocates for them.
    fn within(mut self, segment: Segment<'_>) -> Self {
        let path = match &mut self {
            Self::InvalidNumber { path }
            | Self::NonFinite { path }
            | Self::UnsafeInteger { path }
            | Self::TooDeep { path } => path,
        };
        let mut prefixed = String::with_capacity(path.len() + 8);
        prefixed.push('/');
        match segment {
            Segment::Key(key) => {
                // RFC 6901 §3: `~` and `/` are escaped, `~` first.
                for c in key.chars() {
                    match c {
                        '~' => prefixed.push_str("~0"),
                        '/' => prefixed.push_str("~1"),
                        c => prefixed.push(c),
                    }
                }
            }
            Segment::Index(index) => prefixed.push_str(&index.to_string()),
        }
        prefixed.push_str(path);
        *path = prefixed;
        self
    }
}

#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// The RFC 8785 canonical serialization of `value`.
///
/// Refuses numbers that are not finite doubles and values nested beyond [`MAX_DEPTH`]. Large
/// integers are *not* refused here (they canonicalize to their nearest double, as RFC 8785
/// requires); [`arguments_hash`] refuses them via [`check_safe_numbers`].
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut writer = Writer::new(false, Sink::Buffer);
    writer.value(value, 0)?;
    Ok(writer.out)
}

/// Where canonical bytes go: kept, or streamed into a hash in bounded pieces.
enum Sink {
    Buffer,
    Hash(Sha256),
}

/// Bytes gathered before they are handed to the hash.
const HASH_CHUNK: usize = 64 * 1024;

/// One pass over a value, writing its canonical form.
struct Writer {
    out: Vec<u8>,
    sink: Sink,
    /// Also apply [`check_safe_numbers`] while writing, so hashing arguments walks them once.
    safe_numbers_only: bool,
}

impl Writer {
    fn new(safe_numbers_only: bool, sink: Sink) -> Self {
        Self {
            out: Vec::with_capacity(512),
            sink,
            safe_numbers_only,
        }
    }

    fn hash(safe_numbers_only: bool) -> Self {
        Self::new(safe_numbers_only, Sink::Hash(Sha256::new()))
    }

    fn spill(&mut self) {
        if let Sink::Hash(hasher) = &mut self.sink
            && self.out.len() >= HASH_CHUNK
        {
            hasher.update(&self.out);
            self.out.clear();
        }
    }

    fn digest(mut self) -> String {
        match &mut self.sink {
            Sink::Hash(hasher) => {
                hasher.update(&self.out);
                B64URL.encode(hasher.clone().finalize())
            }
            Sink::Buffer => sha256_b64url(&self.out),
        }
    }

    fn value<J: Walk>(&mut self, value: J, depth: usize) -> Result<(), CanonicalError> {
        match value.shape() {
            Shape::Null => self.out.extend_from_slice(b"null"),
            Shape::Bool(true) => self.out.extend_from_slice(b"true"),
            Shape::Bool(false) => self.out.extend_from_slice(b"false"),
            Shape::Number(n) => self.number(&n)?,
            Shape::String(s) => write_string(&mut self.out, &s),
            Shape::Array(items) => {
                check_depth(depth)?;
                self.out.push(b'[');
                for (index, item) in items.enumerate() {
                    if index > 0 {
                        self.out.push(b',');
                    }
                    self.value(item, depth + 1)
                        .map_err(|e| e.within(Segment::Index(index)))?;
                }
                self.out.push(b']');
            }
            Shape::Object(members) => {
                drop(members);
                self.object(&value, depth)?;
            }
        }
        self.spill();
        Ok(())
    }

    fn object<J: Walk>(&mut self, object: &J, depth: usize) -> Result<(), CanonicalError> {
        check_depth(depth)?;
        self.out.push(b'{');
        let mut first = true;
        object.for_each_sorted(&mut |key, item| {
            if !first {
                self.out.push(b',');
            }
            first = false;
            write_string(&mut self.out, key);
            self.out.push(b':');
            self.value(item, depth + 1)
                .map_err(|e| e.within(Segment::Key(key)))
        })?;
        self.out.push(b'}');
        Ok(())
    }

    fn number(&mut self, text: &str) -> Result<(), CanonicalError> {
        if is_small_integer(text) {
            // Already canonical and safe; skips the parse/format round trip for the most
            // common kind of number in arguments.
            self.out.extend_from_slice(text.as_bytes());
            return Ok(());
        }
        let double = number_value(text)?;
        if self.safe_numbers_only && double.abs() > MAX_SAFE_INTEGER {
            return Err(CanonicalError::UnsafeInteger {
                path: String::new(),
            });
        }
        self.out
            .extend_from_slice(ryu_js::Buffer::new().format_finite(double).as_bytes());
        Ok(())
    }
}

/// An integer of at most 15 digits (< 10^15 < 2^53) in JSON grammar, other than `-0`:
/// exactly representable, and ECMAScript prints it digit for digit.
fn is_small_integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    match digits.as_bytes() {
        [] => false,
        [b'0'] => digits.len() == text.len(),
        [b'0', ..] => false,
        bytes => bytes.len() <= 15 && bytes.iter().all(u8::is_ascii_digit),
    }
}

fn check_depth(depth: usize) -> Result<(), CanonicalError> {
    if depth >= MAX_DEPTH {
        return Err(CanonicalError::TooDeep {
            path: String::new(),
        });
    }
    Ok(())
}

/// RFC 8785 §3.2.2.2: only `"` and `\` and the C0 controls are escaped, the controls with the
/// two-character forms where JSON has one and `\u00xx` (lowercase hex) otherwise. Everything
/// else, including U+007F and non-ASCII, is written as literal UTF-8.
fn write_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Parses JSON number text to the nearest double (Rust's float parsing is correctly rounded),
/// refusing text that is not JSON number grammar and values that overflow.
fn number_value(text: &str) -> Result<f64, CanonicalError> {
    if !is_json_number(text) {
        return Err(CanonicalError::InvalidNumber {
            path: String::new(),
        });
    }
    match text.parse::<f64>() {
        Ok(double) if double.is_finite() => Ok(double),
        _ => Err(CanonicalError::NonFinite {
            path: String::new(),
        }),
    }
}

/// RFC 8259 §6 number grammar. `str::parse::<f64>` alone would also take `inf`, `NaN`, `+1`,
/// `.5` and `1.`, none of which a JSON peer would read the same way.
fn is_json_number(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let digits = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == digits {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let digits = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == digits {
            return false;
        }
    }
    i == b.len()
}

/// The canonical (ECMAScript `Number.prototype.toString`) text of one JSON number:
/// `4.50` → `4.5`, `2e-3` → `0.002`, `1.0` → `1`, `-0` → `0`, `1e21` → `1e+21`.
pub fn canonical_number(text: &str) -> Result<String, CanonicalError> {
    if is_small_integer(text) {
        return Ok(text.to_owned());
    }
    let double = number_value(text)?;
    Ok(ryu_js::Buffer::new().format_finite(double).to_owned())
}

/// Refuses every number that is not finite or whose magnitude exceeds 2^53 − 1.
///
/// Every double of magnitude ≥ 2^53 is an integer, and at that size neighbouring integers
/// share a double: `9007199254740993` and `9007199254740992` would hash alike.
/// So "integral and beyond ±(2^53−1)" and "beyond ±(2^53−1)" are the same test: `1e300` and
/// `9007199254740993.5` are refused too, while fractions of any precision below the limit are
/// accepted (they are forwarded in their canonical form, so what runs is what was hashed).
pub fn check_safe_numbers(value: &Value) -> Result<(), CanonicalError> {
    check_safe(value, 0)
}

/// [`check_safe_numbers`] of a value kept as raw text.
pub fn check_safe_numbers_raw(value: &RawJson) -> Result<(), CanonicalError> {
    check_safe(value.clone(), 0)
}

fn check_safe<J: Walk>(value: J, depth: usize) -> Result<(), CanonicalError> {
    match value.shape() {
        Shape::Null | Shape::Bool(_) | Shape::String(_) => Ok(()),
        Shape::Number(n) if is_small_integer(&n) => Ok(()),
        Shape::Number(n) => {
            if number_value(&n)?.abs() > MAX_SAFE_INTEGER {
                return Err(CanonicalError::UnsafeInteger {
                    path: String::new(),
                });
            }
            Ok(())
        }
        Shape::Array(items) => {
            check_depth(depth)?;
            for (index, item) in items.enumerate() {
                check_safe(item, depth + 1).map_err(|e| e.within(Segment::Index(index)))?;
            }
            Ok(())
        }
        Shape::Object(members) => {
            check_depth(depth)?;
            for (key, item) in members {
                check_safe(item, depth + 1).map_err(|e| e.within(Segment::Key(&key)))?;
            }
            Ok(())
        }
    }
}

/// Rewrites every number in `value` to its canonical text, in place, keeping key order.
///
/// The gateway forwards the re-serialization of the value it hashed; normalizing first means
/// the upstream receives exactly the numbers the human approved. On error `value` may be
/// partially rewritten; callers refuse the request in that case.
pub fn normalize_numbers(value: &mut Value) -> Result<(), CanonicalError> {
    normalize(value, 0)
}

fn normalize(value: &mut Value, depth: usize) -> Result<(), CanonicalError> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
        Value::Number(n) => {
            let canonical = canonical_number(n.as_str())?;
            if canonical != n.as_str() {
                // Going through the parser is the only public way to build a Number from exact
                // text under `arbitrary_precision`; canonical text is always valid JSON.
                *n = serde_json::from_str::<Number>(&canonical)
                    .expect("canonical number text is valid JSON");
            }
            Ok(())
        }
        Value::Array(items) => {
            check_depth(depth)?;
            for (index, item) in items.iter_mut().enumerate() {
                normalize(item, depth + 1).map_err(|e| e.within(Segment::Index(index)))?;
            }
            Ok(())
        }
        Value::Object(map) => {
            check_depth(depth)?;
            for (key, item) in map.iter_mut() {
                normalize(item, depth + 1).map_err(|e| e.within(Segment::Key(key)))?;
            }
            Ok(())
        }
    }
}

/// The `ah` claim: base64url (no padding) of SHA-256 over the canonical arguments.
///
/// - The arguments are hashed exactly as given. Which `confirmationToken` argument is the
///   gateway's (and so removed before hashing *and* before forwarding) depends on the tool's
///   schema, so the caller decides it once and passes the value it will forward; a hash that
///   skipped the name on its own would leave a tool's own `confirmationToken` argument unbound.
/// - `Value::Null` stands for absent arguments and is hashed as `{}`, which is what an MCP
///   server reads either way.
/// - Unsafe numbers are refused ([`check_safe_numbers`]): docs/confirmation-token.md refuses them in the
///   arguments of every call that needs confirmation, and those are exactly the hashed ones.
pub fn arguments_hash(arguments: &Value) -> Result<String, CanonicalError> {
    let mut writer = Writer::hash(true);
    match arguments {
        Value::Null => writer.out.extend_from_slice(b"{}"),
        other => writer.value(other, 0)?,
    }
    Ok(writer.digest())
}

/// [`arguments_hash`] of arguments kept as raw text; the canonical form is streamed into the
/// hash, never held whole.
pub fn arguments_hash_raw(arguments: Option<&RawJson>) -> Result<String, CanonicalError> {
    let mut writer = Writer::hash(true);
    match arguments {
        None => writer.out.extend_from_slice(b"{}"),
        Some(raw) if raw.is_null() => writer.out.extend_from_slice(b"{}"),
        Some(raw) => writer.value(raw.clone(), 0)?,
    }
    Ok(writer.digest())
}

/// The `ph` claim: base64url SHA-256 over the canonical form of the call's other params that
/// can change what runs (a task request, `_meta` keys an upstream acts on). The caller picks
/// the members; unsafe numbers are refused as in [`arguments_hash`].
pub fn params_hash(bound: &Value) -> Result<String, CanonicalError> {
    let mut writer = Writer::hash(true);
    writer.value(bound, 0)?;
    Ok(writer.digest())
}

/// [`params_hash`] of bound params kept as raw text.
pub fn params_hash_raw(bound: &RawJson) -> Result<String, CanonicalError> {
    let mut writer = Writer::hash(true);
    writer.value(bound.clone(), 0)?;
    Ok(writer.digest())
}

/// The `tdh` claim and the pinned-catalog fingerprint: base64url SHA-256 over the canonical
/// form of `{name, description, inputSchema, outputSchema, annotations}` (absent members
/// omitted; anything else in the definition, such as `title` or `_meta`, does not count).
///
/// Definitions come from the upstream and may hold numbers JCS cannot express (`1e400` in a
/// schema). Refusing to hash them would make the tool unconfirmable, so such a definition is
/// hashed from its compact serialization instead, under a separate domain prefix. That hash is
/// still deterministic for the same definition and changes whenever the definition's text
/// changes; the only loss is that a mere key re-ordering also reads as a change, which errs
/// towards re-confirmation.
pub fn definition_hash(tool_definition: &Value) -> String {
    let projected = match tool_definition {
        Value::Object(map) => {
            let mut projected = Map::new();
            for member in DEFINITION_MEMBERS {
                if let Some(v) = map.get(member) {
                    projected.insert(member.to_owned(), v.clone());
                }
            }
            Value::Object(projected)
        }
        // Not a tool definition at all; hash it whole so distinct garbage stays distinct.
        other => other.clone(),
    };
    match canonicalize(&projected) {
        Ok(canonical) => sha256_b64url(&canonical),
        Err(_) => {
            let compact =
                serde_json::to_vec(&projected).expect("a serde_json Value always serializes");
            let mut hasher = Sha256::new();
            hasher.update(NONCANONICAL_DOMAIN);
            hasher.update(&compact);
            B64URL.encode(hasher.finalize())
        }
    }
}

fn sha256_b64url(bytes: &[u8]) -> String {
    B64URL.encode(Sha256::digest(bytes))
}

mod normalize_raw;
#[cfg(test)]
mod tests;
mod walk;

pub use normalize_raw::normalize_numbers_raw;
use walk::{Shape, Walk};
