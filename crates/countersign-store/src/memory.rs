//! The single-replica replay store: a bounded, expiring set of spent `jti`s.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::{self, BoxFuture, FutureExt as _};

use crate::{Clock, Consumption, ReplayStore, StoreError, SystemClock};

/// Spent `jti`s in process memory.
///
/// Correct for one replica only: replicas behind a load balancer need a shared backend.
/// Bounded by `max_entries`; when that many unexpired records exist, new consumes fail with
/// [`StoreError::Full`] rather than evicting a live record. Expired records are purged on every
/// consume (O(log n) each, amortized) and by [`purge_expired`](Self::purge_expired).
pub struct MemoryReplayStore {
    max_entries: usize,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// jti → expiry (Unix ms).
    spent: HashMap<Arc<str>, u64>,
    /// The same records ordered by expiry, soonest first. A jti is never re-recorded while
    /// present, so each record has exactly one heap entry with the same expiry.
    expiries: BinaryHeap<Reverse<(u64, Arc<str>)>>,
}

impl State {
    /// Drops records whose expiry the clock has passed.
    fn purge(&mut self, now_unix_ms: u64) -> usize {
        let mut purged = 0;
        while let Some(Reverse((expiry, _))) = self.expiries.peek() {
            if *expiry >= now_unix_ms {
                break;
            }
            if let Some(Reverse((_, jti))) = self.expiries.pop() {
                self.spent.remove(&jti);
                purged += 1;
            }
        }
        purged
    }
}

impl MemoryReplayStore {
    /// A store holding at most `max_entries` live records, on the system clock.
    pub fn new(max_entries: usize) -> Self {
        Self::with_clock(max_entries, Arc::new(SystemClock))
    }

    /// A store on the given clock (tests use [`crate::ManualClock`]).
    pub fn with_clock(max_entries: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            max_entries,
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Removes every record whose expiry is before `now_unix_ms`; returns how many. Does
    /// nothing on a poisoned store (which refuses every consume anyway).
    pub fn purge_expired(&self, now_unix_ms: u64) -> usize {
        self.lock().map_or(0, |mut state| state.purge(now_unix_ms))
    }

    /// Records currently held, expired ones not yet purged included (for metrics).
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spent
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn consume_now(&self, jti: &str, expires_at_unix_ms: u64) -> Result<Consumption, StoreError> {
        let now = self.clock.now_unix_ms();
        let mut state = self.lock()?;
        state.purge(now);
        if state.spent.contains_key(jti) {
            return Ok(Consumption::AlreadySpent);
        }
        if state.spent.len() >= self.max_entries {
            return Err(StoreError::Full);
        }
        let jti: Arc<str> = Arc::from(jti);
        state.spent.insert(Arc::clone(&jti), expires_at_unix_ms);
        state.expiries.push(Reverse((expires_at_unix_ms, jti)));
        Ok(Consumption::First)
    }

    /// A poisoned lock means a thread panicked mid-update; the set may be inconsistent, so
    /// the store stops answering rather than guess (fail closed).
    fn lock(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Unavailable("memory replay store lock poisoned".to_owned()))
    }
}

impl fmt::Debug for MemoryReplayStore {
    // Spent jtis are left out: they are token ids, and Debug output ends up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryReplayStore")
            .field("max_entries", &self.max_entries)
            .field("len", &self.len())
            .field("clock", &self.clock)
            .finish()
    }
}

impl ReplayStore for MemoryReplayStore {
    fn consume<'a>(
        &'a self,
        jti: &'a str,
        expires_at_unix_ms: u64,
    ) -> BoxFuture<'a, Result<Consumption, StoreError>> {
        future::ready(self.consume_now(jti, expires_at_unix_ms)).boxed()
    }

    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        future::ready(self.lock().map(drop)).boxed()
    }
}

#[cfg(test)]
mod tests;
