//! Keys that a lenient decoder would read as one: `name`/`Name`, `params`/`paramſ`,
//! `name`/`name\u0000`. The envelope refuses such pairs wherever the gateway and an upstream
//! might disagree on which member counts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};

use crate::raw::{MemberAt, MemberWalk, RawJson};

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

/// Keys that are ASCII without NUL fold to their ASCII lowercase (no ASCII character upper-
/// or lower-cases to anything else), so two of them collide exactly when they are equal
/// ignoring ASCII case. A non-ASCII key can still fold onto an ASCII one (`ſ` → `s`, the
/// Kelvin sign → `k`): one of those sends its whole object down the exact path.
fn is_ascii_fold(key: &str) -> bool {
    key.bytes().all(|b| b.is_ascii() && b != 0)
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
    fold_collision_finding(object, None)?.err()
}

/// [`fold_collision`], and in the same walk the member `wanted` (the envelope checks `params`
/// and then reads its `_meta`); `None` for a non-object.
pub(crate) fn fold_collision_finding(
    object: &RawJson,
    wanted: Option<&str>,
) -> Option<Result<Option<RawJson>, (String, String)>> {
    let walk = object.member_walk()?;
    let mut check = KeyCheck::new();
    let mut found = None;
    for member in walk.clone() {
        if let Some(wanted) = wanted
            && found.is_none()
            && walk.key_is(&member, wanted)
        {
            found = Some(object.walked_value(&member));
        }
        check.add(&walk, &member);
    }
    Some(match check.collision(object) {
        Some(pair) => Err(pair),
        None => Ok(found),
    })
}

/// [`fold_collision`] fed by a walk that also does other work with the members.
///
/// The common object is settled from that one walk: at most 16 keys, each plain ASCII (no
/// escape, so no NUL either) and compared as the text it is. Any other object is walked
/// again, by the exact fold.
pub(crate) struct KeyCheck<'a> {
    plain: [&'a [u8]; PAIRWISE],
    count: usize,
    all_plain: bool,
    all_own_fold: bool,
}

impl<'a> KeyCheck<'a> {
    pub(crate) fn new() -> Self {
        KeyCheck {
            plain: [&[]; PAIRWISE],
            count: 0,
            all_plain: true,
            all_own_fold: true,
        }
    }

    /// Adds the next member of the walk, in order.
    pub(crate) fn add(&mut self, walk: &MemberWalk<'a>, member: &MemberAt) {
        if self.all_plain {
            match walk.plain_key(member).map(|key| (key, ascii_key_kind(key))) {
                Some((key, Some(lowercase))) if self.count < PAIRWISE => {
                    self.all_own_fold &= lowercase;
                    self.plain[self.count] = key;
                }
                _ => self.all_plain = false,
            }
        }
        self.count += 1;
    }

    /// The answer of [`fold_collision`] for `object`, whose every member was added.
    pub(crate) fn collision(&self, object: &RawJson) -> Option<(String, String)> {
        if !self.all_plain {
            general_collision(object)
        } else if self.all_own_fold {
            // Every key is its own fold and keys are unique (strict parse): nothing collides.
            None
        } else {
            plain_collision(&self.plain[..self.count])
        }
    }
}

/// For a key that is ASCII without NUL, whether it has no uppercase letter (it is its own
/// fold); `None` for any other key.
///
/// Eight bytes at a time, in one pass: every key of every envelope, `params` and `_meta` comes
/// through here, and MCP's `_meta` keys are forty bytes long. A byte below 0x80 plus 0x3f
/// carries into bit 7 exactly when it is at least `A` (0x41), and plus 0x25 exactly when it is
/// past `Z` (0x5a); no sum carries into the next byte, since no byte is 0x80 or above.
fn ascii_key_kind(key: &[u8]) -> Option<bool> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut uppercase = 0u64;
    for chunk in key.chunks(8) {
        // A short last chunk is padded with `a`: ASCII, not NUL, not uppercase.
        let mut bytes = [b'a'; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let word = u64::from_le_bytes(bytes);
        let nul = word.wrapping_sub(ONES) & !word;
        if (word | nul) & HIGHS != 0 {
            return None;
        }
        uppercase |= word.wrapping_add(ONES * 0x3f) & !word.wrapping_add(ONES * 0x25);
    }
    Some(uppercase & HIGHS == 0)
}

/// The first key (in order) that collides with a later one, and the first such later key, of
/// plain ASCII keys: their folds are their ASCII lowercase, compared without making them.
fn plain_collision(keys: &[&[u8]]) -> Option<(String, String)> {
    let text = |key: &[u8]| String::from_utf8(key.to_vec()).expect("ascii is utf-8");
    for (i, key_a) in keys.iter().enumerate() {
        for key_b in &keys[i + 1..] {
            if key_a.eq_ignore_ascii_case(key_b) {
                return Some((text(key_a), text(key_b)));
            }
        }
    }
    None
}

/// [`fold_collision`] of an object with escaped or non-ASCII keys, or more than 16.
fn general_collision(object: &RawJson) -> Option<(String, String)> {
    let mut keys: [Cow<'_, str>; PAIRWISE] = std::array::from_fn(|_| Cow::Borrowed(""));
    let mut count = 0usize;
    let mut all_ascii = true;
    let mut all_own_fold = true;
    for key in self::keys(object) {
        all_ascii &= is_ascii_fold(&key);
        all_own_fold &= is_own_fold(&key);
        if count < PAIRWISE {
            keys[count] = key;
        }
        count += 1;
    }
    if all_own_fold {
        None
    } else if count <= PAIRWISE {
        pairwise_collision(&keys[..count], all_ascii)
    } else if all_ascii {
        wide_ascii_collision(object, count)
    } else {
        wide_collision(object, count)
    }
}

/// The first key (in order) that collides with a later one, and the first such later key.
fn pairwise_collision(keys: &[Cow<'_, str>], all_ascii: bool) -> Option<(String, String)> {
    let pair = |a: &Cow<'_, str>, b: &Cow<'_, str>| Some((a.to_string(), b.to_string()));
    if all_ascii {
        for (i, key_a) in keys.iter().enumerate() {
            for key_b in &keys[i + 1..] {
                if key_a.eq_ignore_ascii_case(key_b) {
                    return pair(key_a, key_b);
                }
            }
        }
        return None;
    }
    let folds: Vec<Cow<'_, str>> = keys.iter().map(|key| folded(key)).collect();
    for (i, fold_a) in folds.iter().enumerate() {
        for (j, fold_b) in folds.iter().enumerate().skip(i + 1) {
            if fold_a == fold_b {
                return pair(&keys[i], &keys[j]);
            }
        }
    }
    None
}

/// The keys of an object, unescaped, in order.
fn keys(object: &RawJson) -> impl Iterator<Item = Cow<'_, str>> {
    object.member_walk().into_iter().flat_map(MemberWalk::keys)
}

/// The first key (in order) that collides with an earlier one, and the first key it collides
/// with, for an object whose keys are all ASCII without NUL: by a keyed hash of each key's
/// lowercase, which is its fold.
fn wide_ascii_collision(object: &RawJson, count: usize) -> Option<(String, String)> {
    let hasher = RandomState::new();
    let hash = |key: &str| {
        // Lowercased through a small buffer: the fold costs no allocation.
        let mut state = hasher.build_hasher();
        let mut buffer = [0u8; 64];
        for chunk in key.as_bytes().chunks(buffer.len()) {
            let lower = &mut buffer[..chunk.len()];
            lower.copy_from_slice(chunk);
            lower.make_ascii_lowercase();
            state.write(lower);
        }
        state.finish()
    };
    let mut first_with_hash: HashMap<u64, usize> = HashMap::with_capacity(count);
    for (index, key) in keys(object).enumerate() {
        let hash = hash(&key);
        if let Some(&earlier) = first_with_hash.get(&hash) {
            let earlier_key = keys(object).nth(earlier).unwrap_or_default();
            if earlier_key.eq_ignore_ascii_case(&key) {
                return Some((earlier_key.into_owned(), key.into_owned()));
            }
            // See `wide_collision`.
            return exact_collision(object);
        }
        first_with_hash.insert(hash, index);
    }
    None
}

/// [`wide_ascii_collision`] for any keys, through [`fold_key`].
fn wide_collision(object: &RawJson, count: usize) -> Option<(String, String)> {
    let hasher = RandomState::new();
    let mut first_with_hash: HashMap<u64, usize> = HashMap::with_capacity(count);
    for (index, key) in keys(object).enumerate() {
        let hash = hasher.hash_one(&*folded(&key));
        if let Some(&earlier) = first_with_hash.get(&hash) {
            let earlier_key = keys(object).nth(earlier).unwrap_or_default();
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
    for key in keys(object) {
        let fold = folded(&key).into_owned();
        if let Some(earlier) = first_with_fold.get(&fold) {
            return Some((earlier.clone(), key.into_owned()));
        }
        first_with_fold.insert(fold, key.into_owned());
    }
    None
}
