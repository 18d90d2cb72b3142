//! Keys that a lenient decoder would read as one: `name`/`Name`, `params`/`paramſ`,
//! `name`/`name\u0000`. The envelope refuses such pairs wherever the gateway and an upstream
//! might disagree on which member counts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use crate::raw::RawJson;

#[cfg(test)]
mod tests;

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

/// Objects up to this many keys are compared pairwise, exactly.
const PAIRWISE: usize = 16;

/// The first pair of distinct keys of `object` that collide under [`fold_key`], in member
/// order; `None` for a non-object.
///
/// Memory: a wide object costs a 64-bit hash and an index per key, never a copy of its keys;
/// a hash match is confirmed by folding both keys again, so the answer is exact.
pub fn fold_collision(object: &RawJson) -> Option<(String, String)> {
    let members = object.members()?;
    let mut count = 0usize;
    let mut all_own_fold = true;
    for (key, _) in members {
        count += 1;
        all_own_fold &= is_own_fold(&key);
    }
    if all_own_fold {
        // Every key is its own fold and keys are unique (strict parse), so nothing collides.
        return None;
    }
    let keys = || object.members().into_iter().flatten().map(|(key, _)| key);
    if count <= PAIRWISE {
        // A key borrowed from the text folds without allocating when it is its own fold.
        let folds: Vec<(Cow<'_, str>, Cow<'_, str>)> = keys()
            .map(|k| {
                let fold = match &k {
                    Cow::Borrowed(key) => folded(key),
                    Cow::Owned(key) => Cow::Owned(fold_key(key)),
                };
                (k, fold)
            })
            .collect();
        for (i, (key_a, fold_a)) in folds.iter().enumerate() {
            for (key_b, fold_b) in &folds[i + 1..] {
                if fold_a == fold_b {
                    return Some((key_a.clone().into_owned(), key_b.clone().into_owned()));
                }
            }
        }
        return None;
    }
    let hasher = RandomState::new();
    let mut first_with_hash: HashMap<u64, usize> = HashMap::with_capacity(count);
    for (index, key) in keys().enumerate() {
        let hash = hasher.hash_one(&*folded(&key));
        if let Some(&earlier) = first_with_hash.get(&hash) {
            let earlier_key = keys().nth(earlier).unwrap_or_default();
            if folded(&earlier_key) == folded(&key) {
                return Some((earlier_key.into_owned(), key.into_owned()));
            }
            // Two different folds with one keyed hash: only the first key with that hash is
            // remembered, so a later key folding like this one would be missed. Never seen in
            // practice (the hash is keyed per call); stay exact by comparing folds themselves.
            return exact_collision(object);
        }
        first_with_hash.insert(hash, index);
    }
    None
}

/// [`fold_collision`] by a map from each fold to its first key: exact whatever the hashes do,
/// at the cost of a copy of every fold.
fn exact_collision(object: &RawJson) -> Option<(String, String)> {
    let mut first_with_fold: HashMap<String, String> = HashMap::new();
    for (key, _) in object.members()? {
        let fold = folded(&key).into_owned();
        if let Some(earlier) = first_with_fold.get(&fold) {
            return Some((earlier.clone(), key.into_owned()));
        }
        first_with_fold.insert(fold, key.into_owned());
    }
    None
}
