//! This replica's buckets, bounded in memory: per principal, one slot per bucket in use (a limit
//! and its scope). A full bucket is no state, so entries whose buckets are all full are dropped
//! whenever room is needed; if that is not enough, the entries nearest to full go, so a flood of
//! distinct principals can neither grow the table past its cap nor free the principals who have
//! spent the most.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::bucket;
use crate::config::Rate;

/// One bucket a take draws from: its slot, its rate, and the tokens it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotTake {
    pub(super) slot: usize,
    pub(super) rate: Rate,
    pub(super) cost: u32,
}

/// Per principal, the full-again instant of each slot (`None`: full).
type Table = HashMap<Box<str>, Box<[Option<Instant>]>>;

#[derive(Debug)]
pub(super) struct LocalBuckets {
    slots: usize,
    max_principals: usize,
    table: Mutex<Table>,
}

impl LocalBuckets {
    pub(super) fn new(slots: usize, max_principals: usize) -> Self {
        Self {
            slots,
            max_principals: max_principals.max(1),
            table: Mutex::new(HashMap::new()),
        }
    }

    /// Takes from every bucket of `takes` (distinct slots) for `principal`, or from none: on
    /// refusal, the index into `takes` of the bucket with the longest wait, and that wait.
    pub(super) fn take(
        &self,
        principal: &str,
        takes: &[SlotTake],
        now: Instant,
    ) -> Result<(), (usize, Duration)> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if !table.contains_key(principal) {
            if table.len() >= self.max_principals {
                make_room(&mut table, now, self.max_principals);
            }
            table.insert(principal.into(), vec![None; self.slots].into_boxed_slice());
        }
        let buckets = table
            .get_mut(principal)
            .expect("the principal's entry was just ensured");
        // Decide first, then write: a refused take leaves every bucket as it was.
        let mut worst: Option<(usize, Duration)> = None;
        for (index, take) in takes.iter().enumerate() {
            if let Err(wait) = bucket::take(buckets[take.slot], now, take.rate, take.cost)
                && worst.is_none_or(|(_, longest)| wait > longest)
            {
                worst = Some((index, wait));
            }
        }
        if let Some(refused) = worst {
            return Err(refused);
        }
        for take in takes {
            if let Ok(full_at) = bucket::take(buckets[take.slot], now, take.rate, take.cost) {
                buckets[take.slot] = Some(full_at);
            }
        }
        Ok(())
    }

    #[cfg(test)]
    pub(super) fn principals(&self) -> Vec<String> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut principals: Vec<String> = table.keys().map(|k| k.to_string()).collect();
        principals.sort();
        principals
    }
}

/// When every slot of an entry is full again; `None`: already full.
fn full_again(buckets: &[Option<Instant>], now: Instant) -> Option<Instant> {
    buckets
        .iter()
        .flatten()
        .copied()
        .filter(|at| *at > now)
        .max()
}

/// Frees at least an eighth of the table, so the sweep runs once per many new principals rather
/// than on each: drops every entry that is all full, then, if that was not enough, those that
/// will be full soonest (they hold the least that a fresh entry would forget).
fn make_room(table: &mut Table, now: Instant, max: usize) {
    table.retain(|_, buckets| full_again(buckets, now).is_some());
    let keep = max - (max / 8).max(1);
    let excess = table.len().saturating_sub(keep);
    if excess == 0 {
        return;
    }
    let mut instants: Vec<Instant> = table
        .values()
        .filter_map(|buckets| full_again(buckets, now))
        .collect();
    let (_, threshold, _) = instants.select_nth_unstable(excess - 1);
    let threshold = *threshold;
    table.retain(|_, buckets| full_again(buckets, now).is_some_and(|at| at > threshold));
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::clock::{Clock, SystemClock};

    const SECOND: Duration = Duration::from_secs(1);

    /// One a second, burst `burst`.
    fn rate(burst: u32) -> Rate {
        Rate {
            per_minute: NonZeroU32::new(60).expect("non-zero"),
            burst: NonZeroU32::new(burst).expect("non-zero"),
        }
    }

    fn take(slot: usize, burst: u32) -> SlotTake {
        SlotTake {
            slot,
            rate: rate(burst),
            cost: 1,
        }
    }

    #[test]
    fn a_refused_take_from_two_buckets_charges_neither() {
        let buckets = LocalBuckets::new(2, 10);
        let now = SystemClock.now();
        let both = [take(0, 5), take(1, 1)];
        assert_eq!(buckets.take("ada", &both, now), Ok(()));
        assert_eq!(buckets.take("ada", &both, now), Err((1, SECOND)));
        for _ in 0..4 {
            assert_eq!(
                buckets.take("ada", &[take(0, 5)], now),
                Ok(()),
                "slot 0 still has the four tokens the refused take left"
            );
        }
        assert!(buckets.take("ada", &[take(0, 5)], now).is_err());
        assert_eq!(
            buckets.take("bob", &both, now),
            Ok(()),
            "principals do not share buckets"
        );
    }

    #[test]
    fn principals_whose_buckets_are_full_again_are_dropped_for_new_ones() {
        let buckets = LocalBuckets::new(1, 4);
        let start = SystemClock.now();
        for principal in ["a", "b", "c", "d"] {
            assert_eq!(buckets.take(principal, &[take(0, 5)], start), Ok(()));
        }
        // A second later every bucket is full again: the new principal finds room.
        let later = start + SECOND;
        assert_eq!(buckets.take("e", &[take(0, 5)], later), Ok(()));
        assert_eq!(buckets.principals(), ["e"]);
    }

    #[test]
    fn a_flood_of_new_principals_stays_under_the_cap_and_keeps_the_heaviest_spender() {
        let buckets = LocalBuckets::new(1, 100);
        let now = SystemClock.now();
        // `heavy` has spent its whole burst; everyone else one token.
        for _ in 0..50 {
            assert_eq!(buckets.take("heavy", &[take(0, 50)], now), Ok(()));
        }
        for n in 0..1000 {
            assert_eq!(buckets.take(&format!("p{n}"), &[take(0, 50)], now), Ok(()));
            assert!(buckets.principals().len() <= 100);
        }
        assert!(
            buckets.principals().contains(&"heavy".to_owned()),
            "evicting the heaviest spender would hand it a full bucket"
        );
        assert!(
            buckets.take("heavy", &[take(0, 50)], now).is_err(),
            "and it is still refused"
        );
    }
}
