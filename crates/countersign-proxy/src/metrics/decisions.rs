//! The counters of gated calls' decisions, found from borrowed label values.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::DecisionLabels;

/// The counters of [`DecisionLabels`] already created, found from borrowed label values: the
/// family's `get_or_create` takes owned labels, which cost five `String`s on every gated call.
/// A counter is a shared handle, so one incremented here counts in the exported family.
#[derive(Debug)]
pub(super) struct DecisionCounters {
    family: Family<DecisionLabels, Counter>,
    /// By a hash of the label values; a bucket holds every label set of that hash. The key is
    /// itself a hash, so the map's own is foldhash's few instructions, not SipHash's ~150.
    known: RwLock<HashMap<u64, Bucket, foldhash::fast::RandomState>>,
}

/// The label sets of one hash, each with its counter.
type Bucket = Vec<(DecisionLabels, Counter)>;

impl DecisionCounters {
    pub(super) fn new(family: Family<DecisionLabels, Counter>) -> Self {
        Self {
            family,
            known: RwLock::default(),
        }
    }

    /// Counts one decision labelled `[upstream, action, channel, rule, decision]`.
    pub(super) fn inc(&self, values: [&str; 5]) {
        let hash = label_hash(&values);
        let same = |labels: &DecisionLabels| {
            [
                labels.upstream.as_str(),
                &labels.action,
                &labels.channel,
                &labels.rule,
                &labels.decision,
            ] == values
        };
        {
            let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, counter)) = known
                .get(&hash)
                .and_then(|bucket| bucket.iter().find(|(labels, _)| same(labels)))
            {
                counter.inc();
                return;
            }
        }
        let [upstream, action, channel, rule, decision] = values.map(str::to_owned);
        let labels = DecisionLabels {
            upstream,
            action,
            channel,
            rule,
            decision,
        };
        let counter = self.family.get_or_create(&labels).clone();
        counter.inc();
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        let bucket = known.entry(hash).or_default();
        // Another request may have added the same labels since the read above.
        if !bucket.iter().any(|(labels, _)| same(labels)) {
            bucket.push((labels, counter));
        }
    }
}

/// FNV-1a over the values, each ended by a byte no label has. Not keyed: every value is the
/// gateway's own literal or a name from its configuration, never a client's, so nobody can aim
/// values at one bucket; SipHash of five strings cost as much as the allocations it replaced.
fn label_hash(values: &[&str; 5]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    values.iter().fold(OFFSET, |hash, value| {
        value
            .bytes()
            .chain([0xff])
            .fold(hash, |hash, b| (hash ^ u64::from(b)).wrapping_mul(PRIME))
    })
}
