//! The metrics of a family recorded on every request, found by where their `'static` label
//! values live rather than by what they say.
//!
//! A family's `get_or_create` takes its read lock and hashes the label strings with SipHash:
//! about 580 instructions per request for `countersign_requests` alone, more than reading the
//! request's `Content-Length`. Every label of these families is a `&'static str`, a literal of
//! the gateway or a name from its configuration, so the addresses and lengths of the values are
//! a key that costs a few multiplications to hash. Two keys for the same text (the same name
//! from two places) find the same metric: a miss asks the family, which goes by the text.
//! The keys stay few: literals, and upstream names leaked once when the stack is built.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{PoisonError, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::{Family, MetricConstructor};

/// Where each of a label set's `&'static str` values lives: address and length.
pub(super) type Address<const N: usize> = [(usize, usize); N];

/// Label sets whose every value is a `&'static str`.
pub(super) trait StaticLabels<const N: usize> {
    fn address(&self) -> Address<N>;
}

/// The address of one `'static` label value.
pub(super) fn address_of(value: &'static str) -> (usize, usize) {
    (value.as_ptr() as usize, value.len())
}

/// A family's metrics by the addresses of their label values; the metrics are the family's own
/// (shared handles), so what is recorded here is exported with it.
#[derive(Debug)]
pub(super) struct ByAddress<L, M, C, const N: usize> {
    family: Family<L, M, C>,
    known: RwLock<HashMap<Address<N>, M, BuildHasherDefault<AddressHasher>>>,
}

impl<L, M, C, const N: usize> ByAddress<L, M, C, N>
where
    L: StaticLabels<N> + Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug,
    M: Clone,
    C: MetricConstructor<M>,
{
    pub(super) fn new(family: Family<L, M, C>) -> Self {
        Self {
            family,
            known: RwLock::default(),
        }
    }

    /// Runs `record` on the metric labelled `labels`.
    pub(super) fn with(&self, labels: &L, record: impl FnOnce(&M)) {
        let address = labels.address();
        {
            let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(metric) = known.get(&address) {
                record(metric);
                return;
            }
        }
        let metric = self.family.get_or_create(labels).clone();
        record(&metric);
        self.known
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(address, metric);
    }
}

/// Multiplies and rotates each word in. Not keyed: the words are addresses of the gateway's own
/// strings, which no client chooses.
#[derive(Debug, Default)]
pub(super) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn write_u64(&mut self, word: u64) {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        self.0 = (self.0 ^ word).wrapping_mul(K).rotate_left(26);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::registry::Registry;

    use super::*;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Pair {
        a: &'static str,
        b: &'static str,
    }

    impl StaticLabels<2> for Pair {
        fn address(&self) -> Address<2> {
            [address_of(self.a), address_of(self.b)]
        }
    }

    #[test]
    fn the_same_text_at_two_addresses_counts_in_one_series() {
        let mut registry = Registry::default();
        let family = Family::<Pair, Counter>::default();
        registry.register("pairs", "pairs", family.clone());
        let counters = ByAddress::new(family);
        // Two copies of "x" at different addresses, as a literal and a leaked name would be.
        let leaked: &'static str = Box::leak(String::from("x").into_boxed_str());
        assert_ne!(leaked.as_ptr(), "x".as_ptr());
        for a in ["x", leaked, "x", leaked, "y"] {
            counters.with(&Pair { a, b: "b" }, |counter| {
                counter.inc();
            });
        }
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        assert!(text.contains(r#"pairs_total{a="x",b="b"} 4"#), "{text}");
        assert!(text.contains(r#"pairs_total{a="y",b="b"} 1"#), "{text}");
    }

    #[test]
    fn a_prefix_at_the_same_address_is_another_label() {
        let counters = ByAddress::new(Family::<Pair, Counter>::default());
        let long: &'static str = "forwarded";
        let short = &long[..7];
        counters.with(&Pair { a: long, b: "" }, |counter| {
            counter.inc();
        });
        counters.with(&Pair { a: short, b: "" }, |counter| {
            assert_eq!(
                counter.get(),
                0,
                "a prefix sharing the address is its own series"
            );
        });
    }
}
