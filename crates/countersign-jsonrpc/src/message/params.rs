//! A request's `params`, with the places of its members when the strict parse noted them.
//!
//! Several layers read a call's params: the parse layer its `_meta` and name (a 2026-07-28
//! request's mirrored headers), the classifier its name, arguments and `_meta` again. Each read
//! walked the object from its first member, skipping every value before the one it wanted (a
//! `_meta` with a confirmation token is hundreds of bytes), about ten member steps per read and
//! more per redemption. The strict scan passes every member anyway and notes where each sits, so
//! a lookup here compares keys against those places and slices the value.

use std::fmt;
use std::ops::Deref;

use serde::ser::{Serialize, Serializer};

use crate::raw::{NotedMembers, RawJson};

/// An object's text and, when noted, where its members sit.
///
/// The places describe exactly `raw`: both are private and set together, so a `Params` built
/// from other text ([`From<RawJson>`]) has none and is walked. It derefs to its [`RawJson`] for
/// every other reading; it is compared and written as that text.
#[derive(Clone)]
pub struct Params {
    raw: RawJson,
    /// Boxed: a request is moved from layer to layer, and the places are 100 bytes.
    members: Option<Box<NotedMembers>>,
}

impl Params {
    /// `raw` with its members as the strict scan noted them, positioned in `raw`'s text.
    pub(crate) fn noted(raw: RawJson, members: Option<NotedMembers>) -> Params {
        Params {
            raw,
            members: members.map(Box::new),
        }
    }

    /// `self[key]`; `None` for a missing key.
    pub fn get(&self, key: &str) -> Option<RawJson> {
        let [value] = self.get_many([key]);
        value
    }

    /// [`RawJson::get_many`], among the noted members when there are some.
    pub fn get_many<const N: usize>(&self, keys: [&str; N]) -> [Option<RawJson>; N] {
        match &self.members {
            Some(members) => self.raw.get_many_among(members.iter(), keys),
            None => self.raw.get_many(keys),
        }
    }

    /// The object's text.
    pub fn raw(&self) -> &RawJson {
        &self.raw
    }

    pub fn into_raw(self) -> RawJson {
        self.raw
    }
}

impl From<RawJson> for Params {
    fn from(raw: RawJson) -> Params {
        Params { raw, members: None }
    }
}

impl From<serde_json::Value> for Params {
    fn from(value: serde_json::Value) -> Params {
        RawJson::from(value).into()
    }
}

impl Deref for Params {
    type Target = RawJson;

    fn deref(&self) -> &RawJson {
        &self.raw
    }
}

impl PartialEq for Params {
    fn eq(&self, other: &Params) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Params {}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl Serialize for Params {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use crate::message::{Message, Params};
    use crate::raw::tests::{arb_json, write_text};

    /// The params of `message` written with the whitespace and escapes `seed` picks, parsed.
    fn parsed_params(params: &serde_json::Map<String, Value>, seed: u64) -> (String, Params) {
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let text = write_text(&message, seed);
        match Message::parse(text.as_bytes()).expect("a valid request") {
            Message::Request(request) => (text, request.params.expect("params")),
            other => panic!("not a request: {other:?}"),
        }
    }

    proptest! {
        /// A lookup among the noted members finds what a walk over the text finds, for every
        /// key present and one absent, alone and several at once; params with more members
        /// than are noted are walked.
        #[test]
        fn noted_lookups_find_what_a_walk_finds(
            members in prop::collection::vec((any::<String>(), arb_json()), 0..9),
            seed in any::<u64>(),
        ) {
            let members: serde_json::Map<String, Value> = members.into_iter().collect();
            let (text, params) = parsed_params(&members, seed);
            prop_assert_eq!(params.members.is_some(), members.len() <= 6, "{:?}", text);
            for key in members.keys().map(String::as_str).chain(["absent"]) {
                prop_assert_eq!(params.get(key), params.raw().get(key), "{:?} in {:?}", key, text);
            }
            let keys: Vec<&str> = members.keys().map(String::as_str).collect();
            if let [a, b, ..] = keys[..] {
                prop_assert_eq!(params.get_many([b, "absent", a]), params.raw().get_many([b, "absent", a]));
            }
        }
    }

    #[test]
    fn params_built_from_other_text_are_walked() {
        let raw =
            crate::raw::RawJson::parse_slice(br#"{"name":"x","arguments":{}}"#).expect("valid");
        let params = Params::from(raw);
        assert!(params.members.is_none());
        assert_eq!(
            params.get("arguments").map(|a| a.as_text().to_owned()),
            Some("{}".into())
        );
    }
}
