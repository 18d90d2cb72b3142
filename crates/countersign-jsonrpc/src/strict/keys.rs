//! The keys of the objects a strict parse has open, for the duplicate-key check.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

/// The keys seen so far in each open object.
///
/// Objects nest, so their keys form one stack: each object's keys follow a marker, and closing
/// the object truncates the stack back to its marker. One vector serves the whole parse, so a
/// typical body allocates once for its keys, however many objects it has.
///
/// Small objects compare keys exactly; past [`OpenObjects::EXACT`] keys, an object keeps only a
/// 64-bit keyed hash of each, so a wide object costs 8 bytes per key rather than a copy of it.
/// Two distinct keys with equal hashes are refused as duplicates: that fails closed, with odds
/// below 2^-40 for the widest object a body can hold.
#[derive(Debug, Default)]
pub(super) struct OpenObjects<'a> {
    entries: Vec<Entry<'a>>,
    /// Where the innermost open object's marker is in `entries`.
    current: usize,
    /// The hashes of the open objects past [`OpenObjects::EXACT`] keys, innermost last.
    wide: Vec<HashSet<u64, BuildHasherDefault<IdentityHasher>>>,
    /// Created for the first wide object, so keyed per parse: a client cannot aim keys at
    /// colliding hashes.
    hasher: Option<RandomState>,
    /// Set once a key could make two keys of one object fold together (see
    /// [`OpenObjects::fold_free`]).
    fold_suspect: bool,
}

#[derive(Debug)]
enum Entry<'a> {
    /// Starts an object's keys: where the enclosing object's marker is, and whether the object
    /// keeps hashes in `wide` instead of keys here.
    Object {
        outer: usize,
        wide: bool,
    },
    Key(Cow<'a, str>),
}

impl<'a> OpenObjects<'a> {
    const EXACT: usize = 16;

    pub(super) fn open(&mut self) {
        // Enough for the nesting of a typical body, so it never regrows the stack.
        if self.entries.capacity() == 0 {
            self.entries.reserve_exact(2 * Self::EXACT);
        }
        let outer = self.current;
        self.current = self.entries.len();
        self.entries.push(Entry::Object { outer, wide: false });
    }

    pub(super) fn close(&mut self) {
        if let Some(&Entry::Object { outer, wide }) = self.entries.get(self.current) {
            if wide {
                self.wide.pop();
            }
            self.entries.truncate(self.current);
            self.current = outer;
        }
    }

    /// Whether no object seen so far (of those whose keys were inserted `for_folds`) has two
    /// keys that fold together (`name`/`Name`, `name`/`name\u0000`, `s`/`ſ`; see the `fold`
    /// module), known without folding a key: every such key was written in ASCII without
    /// escapes, and no two keys of one object are equal ignoring ASCII case. ASCII text folds to
    /// its ASCII lowercase, so that is exactly the absence of collisions. Anything else (an
    /// escaped or non-ASCII key, an object too wide to compare pairwise) says `false`: not that
    /// keys collide, only that the envelope must look.
    pub(super) fn fold_free(&self) -> bool {
        !self.fold_suspect
    }

    /// Records `key` in the innermost open object, or hands it back if it was already there.
    /// `for_folds` says whether the object is one whose folds [`OpenObjects::fold_free`]
    /// answers for.
    pub(super) fn insert(
        &mut self,
        key: Cow<'a, str>,
        for_folds: bool,
    ) -> Result<(), Cow<'a, str>> {
        let Some(&Entry::Object { outer, wide }) = self.entries.get(self.current) else {
            // Keys are only read inside an open object; refusing is the safe answer otherwise.
            return Err(key);
        };
        let for_folds = for_folds && !self.fold_suspect;
        // A borrowed key had no escapes, so no NUL (a raw control byte fails the parse).
        if for_folds && (matches!(key, Cow::Owned(_)) || !key.is_ascii()) {
            self.fold_suspect = true;
        }
        if !wide {
            let first = self.current + 1;
            let keys = &self.entries[first..];
            for entry in keys {
                if let Entry::Key(k) = entry
                    && k.len() == key.len()
                {
                    if *k == key {
                        return Err(key);
                    }
                    if for_folds && k.as_bytes().eq_ignore_ascii_case(key.as_bytes()) {
                        self.fold_suspect = true;
                    }
                }
            }
            if keys.len() < Self::EXACT {
                self.entries.push(Entry::Key(key));
                return Ok(());
            }
            self.fold_suspect |= for_folds;
            let hasher = self.hasher.get_or_insert_with(RandomState::new);
            let hashes = self.entries.drain(first..).filter_map(|entry| match entry {
                Entry::Key(k) => Some(hasher.hash_one(&*k)),
                Entry::Object { .. } => None,
            });
            self.wide.push(hashes.collect());
            self.entries[self.current] = Entry::Object { outer, wide: true };
        }
        let hash = self
            .hasher
            .get_or_insert_with(RandomState::new)
            .hash_one(&*key);
        let fresh = self
            .wide
            .last_mut()
            .is_none_or(|hashes| hashes.insert(hash));
        if fresh { Ok(()) } else { Err(key) }
    }
}

/// The set already holds keyed SipHash outputs; hashing them again would only cost time.
#[derive(Debug, Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_on_both_sides_of_the_switch_to_hashes() {
        let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        for dup in [0, 5, 15, 16, 17, 39] {
            let mut objects = OpenObjects::default();
            objects.open();
            for key in &keys {
                assert_eq!(objects.insert(Cow::Borrowed(key), true), Ok(()));
            }
            let again = Cow::Borrowed(keys[dup].as_str());
            assert_eq!(objects.insert(again.clone(), true), Err(again));
        }
    }

    #[test]
    fn nested_objects_keep_their_own_keys() {
        for width in [3, 20] {
            let keys: Vec<String> = (0..width).map(|i| format!("k{i}")).collect();
            let mut objects = OpenObjects::default();
            objects.open();
            for key in &keys[..width / 2] {
                assert_eq!(objects.insert(Cow::Borrowed(key), true), Ok(()));
            }
            // The inner object may repeat the outer one's keys, and its own are gone with it.
            objects.open();
            for key in &keys {
                assert_eq!(objects.insert(Cow::Borrowed(key), true), Ok(()));
            }
            let again = Cow::Borrowed(keys[0].as_str());
            assert_eq!(objects.insert(again.clone(), true), Err(again.clone()));
            objects.close();
            assert_eq!(objects.insert(again.clone(), true), Err(again));
            for key in &keys[width / 2..] {
                assert_eq!(objects.insert(Cow::Borrowed(key), true), Ok(()), "{width}");
            }
            objects.close();
            // A sibling starts empty.
            objects.open();
            assert_eq!(objects.insert(Cow::Owned(keys[0].clone()), true), Ok(()));
        }
    }
}
