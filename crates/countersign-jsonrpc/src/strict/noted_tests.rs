//! What the strict scan notes of a message's members, against a walk over its text.

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::Value;

use super::ParseLimits;
use crate::raw::tests::{arb_json, write_text};
use crate::raw::{MemberAt, NotedMembers, RawJson};

proptest! {
    /// The envelope reads a body's top-level members from what the strict scan noted: they
    /// must be exactly what a walk over the object finds, whatever the whitespace and escapes,
    /// and nothing (so a walk instead) where they do not all fit.
    #[test]
    fn the_scan_notes_the_top_members_a_walk_finds(value in arb_json(), seed in any::<u64>()) {
        let text = write_text(&value, seed);
        let (raw, _, noted) =
            RawJson::parse_noting_keys(Bytes::from(text.clone()), &ParseLimits::default())
                .expect("valid");
        match raw.member_walk() {
            None => prop_assert!(noted.is_none(), "{text:?} is no object"),
            Some(walk) => {
                let walked: Vec<MemberAt> = walk.collect();
                match noted {
                    Some(noted) => {
                        let listed: Vec<MemberAt> = noted.top.iter().collect();
                        prop_assert_eq!(listed, walked, "{:?}", text);
                    }
                    None => prop_assert!(walked.len() > NotedMembers::CAPACITY, "{:?}", text),
                }
            }
        }
    }

    /// The layers read a request's params members from what the strict scan noted: they must
    /// be exactly what a walk over the `params` object finds (its key written with or without
    /// escapes, among other members, whatever the whitespace), and nothing where they do not
    /// all fit.
    #[test]
    fn the_scan_notes_the_params_members_a_walk_finds(
        params in arb_json(),
        before in prop::collection::vec((any::<String>(), arb_json()), 0..3),
        seed in any::<u64>(),
    ) {
        let mut message: serde_json::Map<String, Value> = before.into_iter().collect();
        message.insert("params".into(), params);
        let text = write_text(&Value::Object(message), seed);
        let (raw, _, noted) =
            RawJson::parse_noting_keys(Bytes::from(text.clone()), &ParseLimits::default())
                .expect("valid");
        let params = raw.get("params").expect("a params member");
        let Some(walk) = params.member_walk() else {
            return Ok(());
        };
        let walked: Vec<MemberAt> = walk.collect();
        // Positioned in the params' own text.
        match noted.and_then(|noted| noted.params) {
            Some(listed) => {
                prop_assert_eq!(listed.iter().collect::<Vec<_>>(), walked, "{:?}", text);
            }
            None => prop_assert!(walked.len() > NotedMembers::CAPACITY, "{:?}", text),
        }
    }
}
