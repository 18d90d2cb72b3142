//! The proxy's one source of time. Token times, idle expiry, listing back-off and latencies all
//! read it, so tests can run the request path under paused tokio time and a fixed wall clock
//! instead of sleeping. Reading the system clocks anywhere else is refused by clippy
//! (`disallowed-methods` in this crate's `clippy.toml`).

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Monotonic and wall-clock time.
pub trait Clock: Send + Sync + Debug {
    /// Monotonic time, for durations and expiry of in-memory state. tokio's, so that
    /// `tokio::time::pause()` moves it in tests.
    fn now(&self) -> Instant;

    /// Wall-clock time, for token `iat`/`exp` and audit timestamps.
    fn wall(&self) -> SystemTime;

    /// Whole Unix seconds of [`Clock::wall`]; a clock before 1970 reads as 0.
    fn unix_secs(&self) -> u64 {
        self.wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
}

/// The real clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

// The one place the system clocks are read.
#[allow(clippy::disallowed_methods)]
impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A wall clock that moves only when told to; monotonic time is tokio's (pause it in tests).
#[derive(Debug)]
pub struct ManualClock {
    wall: Mutex<SystemTime>,
}

impl ManualClock {
    pub fn at_unix_secs(secs: u64) -> Self {
        Self {
            wall: Mutex::new(UNIX_EPOCH + Duration::from_secs(secs)),
        }
    }

    pub fn advance(&self, by: Duration) {
        *self.wall.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

#[allow(clippy::disallowed_methods)]
impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        *self.wall.lock().unwrap_or_else(|p| p.into_inner())
    }
}
