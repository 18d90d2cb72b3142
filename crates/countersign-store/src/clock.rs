//! Wall-clock time for expiring records, replaceable in tests.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds. Expiries are absolute wall-clock instants (they come from token
/// `exp` claims), so a monotonic clock would not do.
pub trait Clock: Send + Sync + Debug {
    fn now_unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        // A clock before 1970 reads as 0, which keeps every record alive (the safe side).
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to, so expiry can be tested without sleeping.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    pub fn new(now_unix_ms: u64) -> Self {
        Self {
            now: AtomicU64::new(now_unix_ms),
        }
    }

    pub fn set(&self, now_unix_ms: u64) {
        self.now.store(now_unix_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
