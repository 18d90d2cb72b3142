//! The two kinds of value the canonical writer walks: a `serde_json` tree, and a [`RawJson`]
//! slice of a request read lazily.

use std::borrow::Cow;

use countersign_jsonrpc::{Kind, RawJson};
use serde_json::Value;

use super::CanonicalError;

/// A JSON value the canonical writer can walk: a `serde_json` tree or a [`RawJson`] slice of a
/// request. Arrays and objects are walked member by member, so arguments of millions of values
/// cost no memory per value; only sorting an object's keys costs 16 bytes per member.
pub(super) trait Walk: Sized {
    fn shape(&self) -> Shape<'_, Self>;

    /// Calls `f` with each member of this object, keys in RFC 8785 order.
    fn for_each_sorted(
        &self,
        f: &mut dyn FnMut(&str, Self) -> Result<(), CanonicalError>,
    ) -> Result<(), CanonicalError>;
}

pub(super) enum Shape<'a, J> {
    Null,
    Bool(bool),
    Number(Cow<'a, str>),
    String(Cow<'a, str>),
    Array(Box<dyn Iterator<Item = J> + 'a>),
    /// Members in their order (see [`Walk::for_each_sorted`] for the canonical one).
    Object(Box<dyn Iterator<Item = (Cow<'a, str>, J)> + 'a>),
}

impl<'v> Walk for &'v Value {
    fn shape(&self) -> Shape<'_, Self> {
        match *self {
            Value::Null => Shape::Null,
            Value::Bool(b) => Shape::Bool(*b),
            Value::Number(n) => Shape::Number(Cow::Borrowed(n.as_str())),
            Value::String(s) => Shape::String(Cow::Borrowed(s)),
            Value::Array(items) => Shape::Array(Box::new(items.iter())),
            Value::Object(map) => Shape::Object(Box::new(
                map.iter().map(|(k, v)| (Cow::Borrowed(k.as_str()), v)),
            )),
        }
    }

    fn for_each_sorted(
        &self,
        f: &mut dyn FnMut(&str, Self) -> Result<(), CanonicalError>,
    ) -> Result<(), CanonicalError> {
        let Value::Object(map) = *self else {
            return Ok(());
        };
        let mut entries: Vec<(&'v String, &'v Value)> = map.iter().collect();
        entries.sort_by(|(a, _), (b, _)| jcs_key_order(a, b));
        for (key, value) in entries {
            f(key, value)?;
        }
        Ok(())
    }
}

impl Walk for RawJson {
    fn shape(&self) -> Shape<'_, Self> {
        match self.kind() {
            Kind::Null => Shape::Null,
            Kind::Bool => Shape::Bool(self.as_bool() == Some(true)),
            Kind::Number => Shape::Number(Cow::Borrowed(self.as_text())),
            Kind::String => Shape::String(self.as_str().unwrap_or_default()),
            Kind::Array => Shape::Array(Box::new(self.items().into_iter().flatten())),
            Kind::Object => Shape::Object(Box::new(self.members().into_iter().flatten())),
        }
    }

    fn for_each_sorted(
        &self,
        f: &mut dyn FnMut(&str, Self) -> Result<(), CanonicalError>,
    ) -> Result<(), CanonicalError> {
        let Some(mut spans) = self.member_spans() else {
            // Beyond 32-bit offsets: collect the members themselves.
            let mut members: Vec<_> = self.members().into_iter().flatten().collect();
            members.sort_by(|(a, _), (b, _)| jcs_key_order(a, b));
            for (key, value) in members {
                f(&key, value)?;
            }
            return Ok(());
        };
        spans.sort_by(|a, b| jcs_key_order(&self.span_key(a), &self.span_key(b)));
        for span in &spans {
            f(&self.span_key(span), self.span_value(span))?;
        }
        Ok(())
    }
}

/// RFC 8785 §3.2.3: keys sort by their UTF-16 code units, not by code points or UTF-8 bytes;
/// the two orders differ for supplementary-plane characters versus U+E000..U+FFFF.
pub(super) fn jcs_key_order(a: &str, b: &str) -> std::cmp::Ordering {
    // ASCII-only keys (the common case) order the same in every encoding.
    if a.is_ascii() && b.is_ascii() {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}
