//! How many instances of one upstream run, and whether another may start: the
//! `processes.max` cap, and the back-off that keeps a crash loop from spinning.
//!
//! A start fails when the connector cannot open an instance, or when the instance ends on its
//! own within [`STABLE_UPTIME`] of starting. After `n` failures in a row the next start waits
//! `min(BACKOFF_BASE · 2ⁿ⁻¹, BACKOFF_MAX)`; requests that would start one meanwhile get the
//! last failure as their error (HTTP 503, `Retry-After`). An instance that ran longer than
//! [`STABLE_UPTIME`] before crashing resets the count: the next start is immediate.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::super::UpstreamState;
use crate::clock::Clock;
use crate::error::ProxyError;
use crate::metrics::{InstanceGuard, ProxyMetrics};

/// The first back-off after a failed start.
pub(super) const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest back-off.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// An instance that ends on its own sooner than this after starting counts as a failed start.
pub(super) const STABLE_UPTIME: Duration = Duration::from_secs(10);

/// The instances of one upstream.
#[derive(Debug)]
pub(super) struct Pool {
    upstream: String,
    label: &'static str,
    max: usize,
    clock: Arc<dyn Clock>,
    metrics: ProxyMetrics,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    live: usize,
    starting: usize,
    failures: u32,
    retry_at: Option<Instant>,
    last_failure: Option<String>,
    closed: bool,
}

impl Pool {
    pub(super) fn new(
        upstream: String,
        label: &'static str,
        max: usize,
        clock: Arc<dyn Clock>,
        metrics: ProxyMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            label,
            max,
            clock,
            metrics,
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a place for one more instance, or says why there is none.
    pub(super) fn reserve(self: &Arc<Self>) -> Result<Reservation, ProxyError> {
        let mut state = self.lock();
        if state.closed {
            return Err(self.unavailable("the gateway is shutting down".into(), None));
        }
        if let Some(retry_at) = state.retry_at {
            let now = self.clock.now();
            if now < retry_at {
                let wait = retry_at - now;
                let last = state.last_failure.clone().unwrap_or_default();
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                return Err(self.unavailable(
                    format!("{last} (starting again in {secs}s)"),
                    Some(secs.max(1)),
                ));
            }
        }
        if state.live + state.starting >= self.max {
            self.metrics.record_limit_hit("upstream_instances");
            return Err(ProxyError::UpstreamAtCapacity {
                upstream: self.upstream.clone(),
                max: self.max,
            });
        }
        state.starting += 1;
        Ok(Reservation {
            pool: Some(self.clone()),
        })
    }

    /// Refuses every later start; instances already running are stopped by their owner.
    pub(super) fn close(&self) {
        self.lock().closed = true;
    }

    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// A failure found before any start (the program does not exist), reported until a start
    /// succeeds. It does not delay the first attempt.
    pub(super) fn record_precheck_failure(&self, reason: String) {
        self.lock().last_failure = Some(reason);
    }

    /// What `/readyz` reports.
    pub(super) fn state(&self) -> UpstreamState {
        let state = self.lock();
        match (&state.last_failure, state.live, state.starting) {
            (Some(failure), 0, _) => UpstreamState::Failed(failure.clone()),
            (None, 0, starting) if starting > 0 => UpstreamState::Starting,
            _ => UpstreamState::Ready,
        }
    }

    fn failed(&self, state: &mut State, reason: String) {
        state.failures = state.failures.saturating_add(1);
        let exponent = state.failures.saturating_sub(1).min(16);
        let delay = BACKOFF_BASE.saturating_mul(1 << exponent).min(BACKOFF_MAX);
        state.retry_at = Some(self.clock.now() + delay);
        tracing::warn!(
            upstream = %self.upstream,
            failures = state.failures,
            retry_in = ?delay,
            reason = %reason,
            "upstream instance failed to start; backing off"
        );
        state.last_failure = Some(reason);
    }

    fn unavailable(&self, reason: String, retry_after: Option<u64>) -> ProxyError {
        ProxyError::UpstreamUnavailable {
            upstream: self.upstream.clone(),
            reason,
            retry_after,
        }
    }
}

/// A place for an instance being started; given back when dropped unused.
#[derive(Debug)]
pub(super) struct Reservation {
    pool: Option<Arc<Pool>>,
}

impl Reservation {
    /// The instance started: it holds its place until the returned slot is dropped.
    pub(super) fn started(mut self) -> Slot {
        let pool = self.pool.take().expect("a reservation is used once");
        {
            let mut state = pool.lock();
            state.starting -= 1;
            state.live += 1;
            // Failures stay counted (a crash loop starts fine every time); only an instance
            // that stays up resets them. The last failure no longer describes the upstream.
            state.last_failure = None;
        }
        let gauge = pool.metrics.instance_started(pool.label);
        Slot {
            started_at: pool.clock.now(),
            pool,
            _gauge: gauge,
        }
    }

    /// The instance could not be started, because of `reason`.
    pub(super) fn failed(mut self, reason: String) {
        let pool = self.pool.take().expect("a reservation is used once");
        pool.metrics.instance_start_failed(pool.label);
        let mut state = pool.lock();
        state.starting -= 1;
        pool.failed(&mut state, reason);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Abandoned mid-start (the request timed out): neither a start nor a failure.
        if let Some(pool) = self.pool.take() {
            pool.lock().starting -= 1;
        }
    }
}

/// A running instance's place in the pool.
#[derive(Debug)]
pub(super) struct Slot {
    pool: Arc<Pool>,
    started_at: Instant,
    _gauge: InstanceGuard,
}

impl Slot {
    /// The instance ended, `how`; `crashed` when the gateway did not ask it to. Its place is
    /// given back when the slot is dropped, right after.
    pub(super) fn exited(self, crashed: bool, how: &str) {
        self.pool.metrics.instance_exited(self.pool.label, crashed);
        if !crashed {
            return;
        }
        let uptime = self
            .pool
            .clock
            .now()
            .saturating_duration_since(self.started_at);
        let mut state = self.pool.lock();
        if uptime < STABLE_UPTIME {
            self.pool
                .failed(&mut state, format!("it ended ({how}) right after starting"));
        } else {
            state.failures = 0;
            state.retry_at = None;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.lock().live -= 1;
    }
}
