//! The single-replica approval book: a bounded map of expiring requests.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::{self, BoxFuture, FutureExt as _};
use tokio::sync::broadcast;

use super::{ApprovalBook, ApprovalEntry, Decided};
use crate::{Clock, StoreError, SystemClock};

/// How many decisions may be announced before a slow waiter misses some; a waiter that lagged
/// re-reads its request, so a miss costs one lookup, never a lost decision.
const ANNOUNCEMENTS: usize = 1024;

/// Requests in process memory. Correct for one replica only: replicas behind a load balancer
/// need the Redis book.
///
/// Holds at most `max_entries` live requests; past that, `create` fails with
/// [`StoreError::Full`] rather than drop a pending one. Expired requests are purged as new ones
/// come in.
pub struct MemoryApprovalBook {
    max_entries: usize,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    decided: broadcast::Sender<Arc<str>>,
}

#[derive(Default)]
struct State {
    entries: HashMap<Arc<str>, ApprovalEntry>,
    /// The same keys ordered by expiry, soonest first; a key is never re-created while present.
    expiries: BinaryHeap<Reverse<(u64, Arc<str>)>>,
}

impl State {
    fn purge(&mut self, now_unix_ms: u64) {
        while let Some(Reverse((expiry, _))) = self.expiries.peek() {
            if *expiry > now_unix_ms {
                break;
            }
            if let Some(Reverse((_, key))) = self.expiries.pop() {
                self.entries.remove(&key);
            }
        }
    }

    /// The live entry under `key`; one whose expiry has passed reads as gone even before it is
    /// purged.
    fn live(&self, key: &str, now_unix_ms: u64) -> Option<&ApprovalEntry> {
        self.entries
            .get(key)
            .filter(|entry| entry.expires_at_unix_ms > now_unix_ms)
    }
}

impl MemoryApprovalBook {
    /// A book of at most `max_entries` live requests on the system clock.
    pub fn new(max_entries: usize) -> Self {
        Self::with_clock(max_entries, Arc::new(SystemClock))
    }

    /// A book on the given clock (tests use [`crate::ManualClock`]).
    pub fn with_clock(max_entries: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            max_entries,
            clock,
            state: Mutex::new(State::default()),
            decided: broadcast::channel(ANNOUNCEMENTS).0,
        }
    }

    /// Requests held now, expired ones not yet purged included (for metrics).
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A poisoned lock means a thread panicked mid-update: the book stops answering rather
    /// than guess (fail closed).
    fn lock(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Unavailable("memory approval book lock poisoned".to_owned()))
    }

    fn create_now(
        &self,
        key: &str,
        request: Vec<u8>,
        expires_at_unix_ms: u64,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_unix_ms();
        let mut state = self.lock()?;
        state.purge(now);
        if state.entries.contains_key(key) {
            return Err(already_exists());
        }
        if expires_at_unix_ms <= now {
            // Expired on arrival: like Redis `PEXPIREAT` in the past, nothing is kept.
            return Ok(());
        }
        if state.entries.len() >= self.max_entries {
            return Err(StoreError::Full);
        }
        let key: Arc<str> = Arc::from(key);
        state.entries.insert(
            Arc::clone(&key),
            ApprovalEntry {
                request,
                expires_at_unix_ms,
                decision: None,
            },
        );
        state.expiries.push(Reverse((expires_at_unix_ms, key)));
        Ok(())
    }

    fn read_now(&self, key: &str) -> Result<Option<ApprovalEntry>, StoreError> {
        let now = self.clock.now_unix_ms();
        Ok(self.lock()?.live(key, now).cloned())
    }

    fn decide_now(&self, key: &str, decision: Vec<u8>) -> Result<Decided, StoreError> {
        let now = self.clock.now_unix_ms();
        let mut state = self.lock()?;
        let Some(entry) = state
            .entries
            .get_mut(key)
            .filter(|entry| entry.expires_at_unix_ms > now)
        else {
            return Ok(Decided::Gone);
        };
        if let Some(first) = &entry.decision {
            return Ok(Decided::Already(first.clone()));
        }
        entry.decision = Some(decision);
        drop(state);
        // Nobody waiting is not an error: the decision is in the book for the next read.
        let _ = self.decided.send(Arc::from(key));
        Ok(Decided::First)
    }

    async fn wait_for(
        &self,
        key: &str,
        timeout: Duration,
        mut announcements: broadcast::Receiver<Arc<str>>,
    ) -> Result<Option<ApprovalEntry>, StoreError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Read after subscribing: a decision taken before the subscription is in the book.
            let entry = match self.read_now(key)? {
                Some(entry) if entry.decision.is_none() => entry,
                decided_or_gone => return Ok(decided_or_gone),
            };
            // Wake at the request's expiry too, so a waiter learns it is gone without waiting
            // out its whole timeout.
            let left_ms = entry
                .expires_at_unix_ms
                .saturating_sub(self.clock.now_unix_ms());
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_millis(left_ms));
            tokio::select! {
                announced = announcements.recv() => match announced {
                    // Any announcement, or a lag, means: look again.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return self.read_now(key),
                },
                () = tokio::time::sleep_until(wake) => {
                    if wake >= deadline {
                        return self.read_now(key);
                    }
                }
            }
        }
    }
}

fn already_exists() -> StoreError {
    StoreError::Unavailable("an approval request with this key already exists".to_owned())
}

impl fmt::Debug for MemoryApprovalBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryApprovalBook")
            .field("max_entries", &self.max_entries)
            .field("len", &self.len())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl ApprovalBook for MemoryApprovalBook {
    fn create<'a>(
        &'a self,
        key: &'a str,
        request: Vec<u8>,
        expires_at_unix_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        future::ready(self.create_now(key, request, expires_at_unix_ms)).boxed()
    }

    fn read<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApprovalEntry>, StoreError>> {
        future::ready(self.read_now(key)).boxed()
    }

    fn decide<'a>(
        &'a self,
        key: &'a str,
        decision: Vec<u8>,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        future::ready(self.decide_now(key, decision)).boxed()
    }

    fn wait<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<ApprovalEntry>, StoreError>> {
        // Subscribed now, not at the first poll.
        let announcements = self.decided.subscribe();
        self.wait_for(key, timeout, announcements).boxed()
    }

    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        future::ready(self.lock().map(drop)).boxed()
    }
}

#[cfg(test)]
mod tests;
