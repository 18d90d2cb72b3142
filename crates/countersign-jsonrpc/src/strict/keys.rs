//! The keys of the objects a strict parse has open, for the duplicate-key check.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

/// The keys seen so far in one object. Small objects compare keys exactly; past
/// [`KeySet::EXACT`] keys only a 64-bit keyed hash of each is kept, so a wide object costs 8
/// bytes per key rather than a copy of it. Two distinct keys with equal hashes are refused as
/// duplicates: that fails closed, with odds below 2^-40 for the widest object a body can hold.
#[derive(Debug, Default)]
struct KeySet<'a> {
    exact: Vec<Cow<'a, str>>,
    /// In use once the object has more than [`KeySet::EXACT`] keys; `exact` is empty then.
    hashes: HashSet<u64, BuildHasherDefault<IdentityHasher>>,
    hashed: bool,
}

impl<'a> KeySet<'a> {
    const EXACT: usize = 16;

    /// Records `key`, or hands it back if it was already there.
    fn insert(
        &mut self,
        key: Cow<'a, str>,
        hasher: &mut Option<RandomState>,
    ) -> Result<(), Cow<'a, str>> {
        if !self.hashed {
            if self.exact.contains(&key) {
                return Err(key);
            }
            if self.exact.len() < Self::EXACT {
                self.exact.push(key);
                return Ok(());
            }
            let hasher = hasher.get_or_insert_with(RandomState::new);
            self.hashes
                .extend(self.exact.drain(..).map(|k| hasher.hash_one(&*k)));
            self.hashed = true;
        }
        let hasher = hasher.get_or_insert_with(RandomState::new);
        if self.hashes.insert(hasher.hash_one(&*key)) {
            Ok(())
        } else {
            Err(key)
        }
    }

    fn clear(&mut self) {
        self.exact.clear();
        if self.hashed {
            self.hashes.clear();
            self.hashed = false;
        }
    }
}

/// One [`KeySet`] per open object, innermost last. A closed object's set is kept for the next
/// object at its level, so a parse allocates for keys only while objects grow wider than any
/// before them at that level.
#[derive(Debug, Default)]
pub(super) struct OpenObjects<'a> {
    sets: Vec<KeySet<'a>>,
    open: usize,
    /// Created when the first object grows past [`KeySet::EXACT`] keys, and then keyed per
    /// parse, so a client cannot aim keys at colliding hashes.
    hasher: Option<RandomState>,
}

impl<'a> OpenObjects<'a> {
    pub(super) fn open(&mut self) {
        if self.open == self.sets.len() {
            self.sets.push(KeySet::default());
        } else {
            self.sets[self.open].clear();
        }
        self.open += 1;
    }

    pub(super) fn close(&mut self) {
        self.open -= 1;
    }

    /// Records `key` in the innermost open object, or hands it back if it was already there.
    pub(super) fn insert(&mut self, key: Cow<'a, str>) -> Result<(), Cow<'a, str>> {
        self.sets[self.open - 1].insert(key, &mut self.hasher)
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
                assert_eq!(objects.insert(Cow::Borrowed(key)), Ok(()));
            }
            let again = Cow::Borrowed(keys[dup].as_str());
            assert_eq!(objects.insert(again.clone()), Err(again));
        }
    }

    #[test]
    fn a_reused_set_starts_empty() {
        let mut objects = OpenObjects::default();
        objects.open();
        for i in 0..20 {
            assert_eq!(objects.insert(Cow::Owned(format!("k{i}"))), Ok(()));
        }
        objects.close();
        objects.open();
        assert_eq!(objects.insert(Cow::Borrowed("k3")), Ok(()));
        assert_eq!(
            objects.insert(Cow::Borrowed("k3")),
            Err(Cow::Borrowed("k3"))
        );
        // A nested object has its own set; the outer one is intact after it closes.
        objects.open();
        assert_eq!(objects.insert(Cow::Borrowed("k3")), Ok(()));
        objects.close();
        assert_eq!(
            objects.insert(Cow::Borrowed("k3")),
            Err(Cow::Borrowed("k3"))
        );
    }
}
