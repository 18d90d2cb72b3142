//! Strictly validated JSON kept as the bytes it was read from.
//!
//! A tree of `serde_json::Value`s costs tens of bytes per element (an array of small numbers grows
//! some 50× in memory), and the gateway must not let a client turn a 4 MiB body into hundreds of
//! MiB. So a parsed message keeps its params and results as [`RawJson`]: a reference-counted slice
//! of the request buffer, validated once by [`crate::strict`], read lazily by scanning. Cloning
//! one is a reference-count increment; reading a member scans only the object it is in.
//!
//! Because the text passed the strict parse (no duplicate keys, no lone surrogates, no BOM, no
//! numbers beyond a double), every conforming parser reads it as the same value the gateway
//! judged, so forwarding these bytes forwards exactly that value.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::ser::{Serialize, Serializer};
use serde_json::Value;

use crate::message::KeyFolds;
use crate::strict::{self, ParseError, ParseLimits};

pub(crate) use escape::next_escape;
pub use escape::write_json_string;

mod escape;
#[cfg(test)]
mod key_tests;
pub(crate) mod scan;
#[cfg(test)]
pub(crate) mod tests;

pub use scan::{Items, Members};
pub(crate) use scan::{MemberAt, MemberWalk, NotedMembers};

/// The JSON type of a [`RawJson`], read from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

/// One strictly valid JSON value: its exact text, without surrounding whitespace.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RawJson(Bytes);

impl RawJson {
    /// Strictly parses `bytes` as one JSON value and keeps them; nothing is copied.
    pub fn parse(bytes: Bytes, limits: &ParseLimits) -> Result<RawJson, ParseError> {
        let (start, end) = strict::validate_strict(&bytes, limits)?;
        Ok(RawJson(bytes.slice(start..end)))
    }

    /// [`RawJson::parse`], and what the parse learnt of the keys: whether any fold together,
    /// and where the members of the top-level object and of its `params` sit.
    pub(crate) fn parse_noting_keys(
        bytes: Bytes,
        limits: &ParseLimits,
    ) -> Result<(RawJson, KeyFolds, Option<strict::MessageMembers>), ParseError> {
        let scanned = strict::scan_strict(&bytes, limits)?;
        let raw = RawJson(bytes.slice(scanned.start..scanned.end));
        let folds = if scanned.fold_free {
            KeyFolds::NoneInBody
        } else {
            KeyFolds::Unchecked
        };
        Ok((raw, folds, scanned.members))
    }

    /// [`RawJson::parse`] of a copy of `bytes`, with [`ParseLimits::default`].
    pub fn parse_slice(bytes: &[u8]) -> Result<RawJson, ParseError> {
        Self::parse(Bytes::copy_from_slice(bytes), &ParseLimits::default())
    }

    /// The serialization of a value the gateway built (always valid JSON).
    pub fn from_value(value: &Value) -> RawJson {
        RawJson(fitted(
            serde_json::to_vec(value).expect("a json value always serializes"),
        ))
    }

    /// A JSON string holding `text`.
    pub fn string(text: &str) -> RawJson {
        let mut out = Vec::with_capacity(text.len() + 2);
        write_json_string(&mut out, text);
        RawJson(fitted(out))
    }

    /// An array of `items`, in order.
    pub fn array(items: impl IntoIterator<Item = RawJson>) -> RawJson {
        let mut out = vec![b'['];
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item.as_bytes());
        }
        out.push(b']');
        RawJson(fitted(out))
    }

    /// `null`.
    pub fn null() -> RawJson {
        RawJson(Bytes::from_static(b"null"))
    }

    /// `{}`.
    pub fn empty_object() -> RawJson {
        RawJson(Bytes::from_static(b"{}"))
    }

    /// Text known to be one strictly valid value; only the scanner and builders use this.
    pub(crate) fn from_trusted(bytes: Bytes) -> RawJson {
        RawJson(bytes)
    }

    /// The exact text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The exact text (validated UTF-8).
    pub fn as_text(&self) -> &str {
        std::str::from_utf8(&self.0).expect("raw json is validated utf-8")
    }

    /// Length of the text in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: the shortest JSON value is one byte long.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn kind(&self) -> Kind {
        match self.0.first() {
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            _ => Kind::Number,
        }
    }

    pub fn is_object(&self) -> bool {
        self.kind() == Kind::Object
    }

    pub fn is_null(&self) -> bool {
        self.kind() == Kind::Null
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.0[..] {
            b"true" => Some(true),
            b"false" => Some(false),
            _ => None,
        }
    }

    /// The number's exact text, when this is a number.
    pub fn number_text(&self) -> Option<&str> {
        (self.kind() == Kind::Number).then(|| self.as_text())
    }

    /// The integer this number denotes, when it is written as one (`1`, not `1.0`) and fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.number_text()?.parse().ok()
    }

    pub fn as_u64(&self) -> Option<u64> {
        self.number_text()?.parse().ok()
    }

    pub fn as_f64(&self) -> Option<f64> {
        self.number_text()?.parse().ok()
    }

    /// The string's contents, unescaped; borrowed when it has no escapes.
    pub fn as_str(&self) -> Option<Cow<'_, str>> {
        (self.kind() == Kind::String).then(|| scan::unescape(&self.0))
    }

    /// `self[key]` of an object; `None` for a missing key or a non-object.
    pub fn get(&self, key: &str) -> Option<RawJson> {
        let [value] = self.get_many([key]);
        value
    }

    /// `[self[keys[0]], self[keys[1]], …]` of an object, found in one walk over its members
    /// (each `None` for a missing key, all `None` for a non-object): for a reader that needs
    /// several members of one object, such as a call's name, arguments and `_meta`.
    pub fn get_many<const N: usize>(&self, keys: [&str; N]) -> [Option<RawJson>; N] {
        match self.member_walk() {
            Some(walk) => self.get_many_among(walk, keys),
            None => [const { None }; N],
        }
    }

    /// [`RawJson::get_many`] among `members`, which are this object's (walked or noted).
    pub(crate) fn get_many_among<const N: usize>(
        &self,
        members: impl Iterator<Item = MemberAt>,
        keys: [&str; N],
    ) -> [Option<RawJson>; N] {
        let mut found = [const { None }; N];
        let walk = MemberWalk::new(&self.0);
        let mut missing = N;
        for member in members {
            // Keys are unique (strict parse): the first member with a key is the only one.
            for (slot, key) in found.iter_mut().zip(keys) {
                if slot.is_none() && walk.key_is(&member, key) {
                    *slot = Some(MemberWalk::value(&self.0, &member));
                    missing -= 1;
                }
            }
            if missing == 0 {
                break;
            }
        }
        found
    }

    /// An object's members as places in its text, read only on demand; `None` for a
    /// non-object.
    pub(crate) fn member_walk(&self) -> Option<MemberWalk<'_>> {
        self.is_object().then(|| MemberWalk::new(&self.0))
    }

    /// The value of a member found by [`RawJson::member_walk`] on this value.
    pub(crate) fn walked_value(&self, member: &MemberAt) -> RawJson {
        MemberWalk::value(&self.0, member)
    }

    /// An object's members in order, keys unescaped; `None` for a non-object.
    pub fn members(&self) -> Option<Members<'_>> {
        self.is_object().then(|| Members::new(&self.0))
    }

    /// Where each member of an object sits, 16 bytes per member: for ordering the members of a
    /// wide object (canonical hashing sorts them) without holding a copy of each. `None` for a
    /// non-object, or one too large for 32-bit offsets.
    pub fn member_spans(&self) -> Option<Vec<MemberSpan>> {
        if !self.is_object() || u32::try_from(self.len()).is_err() {
            return None;
        }
        Some(
            scan::member_ranges(&self.0)
                .into_iter()
                .map(|(ks, ke, vs, ve)| MemberSpan {
                    key: (ks, ke),
                    value: (vs, ve),
                })
                .collect(),
        )
    }

    /// The unescaped key of a member found by [`RawJson::member_spans`] on this value.
    pub fn span_key(&self, span: &MemberSpan) -> Cow<'_, str> {
        scan::unescape(&self.0[span.key.0 as usize..span.key.1 as usize])
    }

    /// The value of a member found by [`RawJson::member_spans`] on this value.
    pub fn span_value(&self, span: &MemberSpan) -> RawJson {
        RawJson(self.0.slice(span.value.0 as usize..span.value.1 as usize))
    }

    /// An array's items in order; `None` for a non-array.
    pub fn items(&self) -> Option<Items<'_>> {
        (self.kind() == Kind::Array).then(|| Items::new(&self.0))
    }

    /// Builds the `serde_json` tree. Costs the tree's memory: for small or bounded values only
    /// (answers, capabilities, upstream results the gateway edits), never for client arguments.
    pub fn to_value(&self) -> Value {
        serde_json::from_slice(&self.0).expect("raw json is valid json")
    }

    /// The same text without whitespace between tokens (the value itself when it has none), for
    /// line-oriented outputs such as audit records.
    pub fn minified(&self) -> RawJson {
        match scan::minify(&self.0) {
            Some(text) => RawJson(Bytes::from(text)),
            None => self.clone(),
        }
    }

    /// Appends the minified text to `out`: what the gateway forwards, compact like the rest of
    /// the envelope it writes.
    pub fn write_minified(&self, out: &mut Vec<u8>) {
        scan::write_minified(&self.0, out);
    }

    /// This object without `key` (the same value when it has no such member).
    pub fn without_member(&self, key: &str) -> RawJson {
        self.edit_members(key, Edit::Remove)
    }

    /// This object with `key` set to `value`, in place if present, else appended.
    pub fn with_member(&self, key: &str, value: &RawJson) -> RawJson {
        self.edit_members(key, Edit::Set(value))
    }

    /// This object with `value` appended as `key` unless it has such a member (then the same
    /// value): a default, in the one walk that looks for the member.
    pub fn with_member_if_absent(&self, key: &str, value: &RawJson) -> RawJson {
        self.edit_members(key, Edit::Default(value))
    }

    /// This object with each member kept, removed or replaced as `edit` says, in one walk;
    /// `None` when `edit` kept every member, or this is not an object. For several edits of one
    /// object, where a [`RawJson::with_member`] / [`RawJson::without_member`] each would walk
    /// and copy it again. Keys are passed unescaped and written back as sent.
    pub fn edit_each_member(
        &self,
        mut edit: impl FnMut(&str, &RawJson) -> MemberEdit,
    ) -> Option<RawJson> {
        let members = self.members()?;
        let mut object = ObjectWriter::with_capacity(self.len());
        let mut changed = false;
        for (key, raw_key, value) in members.with_raw_keys() {
            match edit(&key, &value) {
                MemberEdit::Keep => object.push_raw_key(raw_key, value.as_bytes()),
                MemberEdit::Remove => changed = true,
                MemberEdit::Replace(new) => {
                    changed = true;
                    object.push_raw_key(raw_key, new.as_bytes());
                }
            }
        }
        changed.then(|| object.finish())
    }

    /// One walk to find `key`, then one copy with the edit spliced in: the rest of the text,
    /// whitespace included, is copied as it is. Walking the object again to rebuild it member by
    /// member cost as much as the walk itself, and a held call's answer paid it three times.
    fn edit_members(&self, key: &str, edit: Edit<'_>) -> RawJson {
        let Some(walk) = self.member_walk() else {
            return self.clone();
        };
        let text = &self.0;
        let mut members = walk.clone();
        // Where the member before the one found ends: removing a member takes the comma in
        // front of it, or the one after it when it is first.
        let mut previous_end = None;
        let found = loop {
            match members.next() {
                Some(member) if walk.key_is(&member, key) => break Some(member),
                Some(member) => previous_end = Some(member.value.1),
                None => break None,
            }
        };
        let edited = match (found, edit) {
            (None, Edit::Remove) | (Some(_), Edit::Default(_)) => return self.clone(),
            (Some(member), Edit::Set(value)) => {
                splice(text, member.value.0..member.value.1, value.as_bytes())
            }
            (Some(member), Edit::Remove) => {
                let removed = match (previous_end, members.next()) {
                    (Some(end), _) => end..member.value.1,
                    (None, Some(next)) => member.key.0..next.key.0,
                    (None, None) => member.key.0..member.value.1,
                };
                splice(text, removed, b"")
            }
            (None, Edit::Set(value) | Edit::Default(value)) => {
                // After the last member (or the opening brace), so the member is appended.
                let at = previous_end.unwrap_or(1);
                let mut member = Vec::with_capacity(key.len() + value.len() + 4);
                if previous_end.is_some() {
                    member.push(b',');
                }
                write_json_string(&mut member, key);
                member.push(b':');
                member.extend_from_slice(value.as_bytes());
                splice(text, at..at, &member)
            }
        };
        RawJson(Bytes::from(edited))
    }
}

/// What [`RawJson::edit_members`] does with the member it looks for.
#[derive(Clone, Copy)]
enum Edit<'a> {
    Set(&'a RawJson),
    Remove,
    /// Appended when absent, left alone when present.
    Default(&'a RawJson),
}

/// `text` with `range` replaced by `with`, in one allocation.
fn splice(text: &[u8], range: std::ops::Range<usize>, with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() - range.len() + with.len());
    out.extend_from_slice(&text[..range.start]);
    out.extend_from_slice(with);
    out.extend_from_slice(&text[range.end..]);
    out
}

/// What [`RawJson::edit_each_member`] does with one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberEdit {
    Keep,
    Remove,
    /// The member keeps its key and place, with this value.
    Replace(RawJson),
}

/// Where one member sits in its object's text (see [`RawJson::member_spans`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberSpan {
    key: (u32, u32),
    value: (u32, u32),
}

/// Writes an object member by member; the result is valid because every part is.
#[derive(Debug)]
pub struct ObjectWriter {
    /// Empty until the first member (a writer that stays empty, as most of those sifting a
    /// call's params do, allocates nothing), then starts with `{`: `finish` only appends the
    /// `}`.
    out: Vec<u8>,
}

/// The same as [`ObjectWriter::new`]: an empty object.
impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectWriter {
    pub fn new() -> Self {
        ObjectWriter { out: Vec::new() }
    }

    pub fn with_capacity(capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity.max(2));
        out.push(b'{');
        ObjectWriter { out }
    }

    /// Appends `key: value`. The caller keeps keys unique. The key is escaped straight into
    /// the object: a buffer of its own was an allocation per member.
    pub fn push(&mut self, key: &str, value: &RawJson) {
        self.start_member(key.len() + 2 + value.len());
        write_json_string(&mut self.out, key);
        self.out.push(b':');
        self.out.extend_from_slice(value.as_bytes());
    }

    /// Appends `key: [{"type":"text","text":<text>}]`, an MCP content array of one text block,
    /// escaping `text` straight into the object: a large text is not copied on the way.
    pub fn push_text_content(&mut self, key: &str, text: &str) {
        const BEFORE: &[u8] = br#"[{"type":"text","text":"#;
        const AFTER: &[u8] = b"}]";
        self.start_member(key.len() + 2 + BEFORE.len() + text.len() + 2 + AFTER.len());
        write_json_string(&mut self.out, key);
        self.out.push(b':');
        self.out.extend_from_slice(BEFORE);
        write_json_string(&mut self.out, text);
        self.out.extend_from_slice(AFTER);
    }

    /// Starts the text at the first member.
    fn open(&mut self) {
        if self.out.is_empty() {
            self.out.reserve(64);
            self.out.push(b'{');
        }
    }

    fn push_raw_key(&mut self, raw_key: &[u8], value: &[u8]) {
        self.start_member(raw_key.len() + value.len());
        self.out.extend_from_slice(raw_key);
        self.out.push(b':');
        self.out.extend_from_slice(value);
    }

    /// Makes room for a member of about `size` bytes (key and value, unescaped) and writes the
    /// comma in front of it.
    fn start_member(&mut self, size: usize) {
        self.open();
        let needed = size + 2;
        if needed > self.out.capacity() - self.out.len() && needed > self.out.len() {
            // A member larger than all before it: grow to fit it exactly rather than double.
            self.out.reserve_exact(needed);
        }
        if self.out.len() > 1 {
            self.out.push(b',');
        }
    }

    pub fn is_empty(&self) -> bool {
        self.out.len() <= 1
    }

    pub fn finish(mut self) -> RawJson {
        if self.out.is_empty() {
            return RawJson::empty_object();
        }
        self.out.push(b'}');
        RawJson(fitted(self.out))
    }
}

/// A buffer as `Bytes` without the spare capacity a growing `Vec` leaves (kept values must not
/// hold twice their size); small buffers are kept as they are.
fn fitted(mut text: Vec<u8>) -> Bytes {
    if text.len() > 4096 && text.capacity() > text.len() + text.len() / 4 {
        text.shrink_to_fit();
    }
    Bytes::from(text)
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 256;
        let text = self.as_text();
        match text.char_indices().nth(SHOWN) {
            Some((cut, _)) => write!(f, "RawJson({}… {} bytes)", &text[..cut], text.len()),
            None => write!(f, "RawJson({text})"),
        }
    }
}

/// The exact text.
impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_text())
    }
}

/// Serializes as the exact text (through serde_json's raw values), so a raw value inside a
/// larger serialized structure is copied, never rebuilt as a tree.
impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue = serde_json::from_slice(&self.0)
            .map_err(|e| serde::ser::Error::custom(format!("raw json: {e}")))?;
        raw.serialize(serializer)
    }
}

impl From<&Value> for RawJson {
    fn from(value: &Value) -> Self {
        RawJson::from_value(value)
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> Self {
        RawJson::from_value(&value)
    }
}

/// Compares the values, not the texts: `{"a": 1}` equals `json!({"a": 1})`.
impl PartialEq<Value> for RawJson {
    fn eq(&self, other: &Value) -> bool {
        &self.to_value() == other
    }
}
