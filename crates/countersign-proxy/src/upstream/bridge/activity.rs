//! Idle reaping. A session (or a shared instance) is busy while anything holds a [`Busy`]
//! guard — a request being served, an open stream (a GET stream included), an attached
//! session — and idle otherwise. Once idle for the whole `idle_timeout`, its `on_idle` runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counts what keeps one session or instance busy.
pub(super) struct Activity {
    state: Mutex<State>,
    idle_timeout: Duration,
    on_idle: Box<dyn Fn() + Send + Sync>,
}

#[derive(Default)]
struct State {
    busy: usize,
    /// Changes whenever the count returns to zero, so a timer knows whether the idleness it
    /// was armed for is still the current one.
    generation: u64,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity")
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl Activity {
    /// Idle from the start: unless something becomes busy, `on_idle` runs after `idle_timeout`.
    pub(super) fn new(idle_timeout: Duration, on_idle: Box<dyn Fn() + Send + Sync>) -> Arc<Self> {
        let activity = Arc::new(Self {
            state: Mutex::default(),
            idle_timeout,
            on_idle,
        });
        activity.arm(0);
        activity
    }

    /// Busy until the guard is dropped.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.lock().busy += 1;
        Busy(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arm(self: &Arc<Self>, generation: u64) {
        // Guards dropped outside a runtime (a test's teardown) have no one left to reap for.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(self);
        let idle_timeout = self.idle_timeout;
        runtime.spawn(async move {
            tokio::time::sleep(idle_timeout).await;
            let Some(activity) = weak.upgrade() else {
                return;
            };
            let still_idle = {
                let state = activity.lock();
                state.busy == 0 && state.generation == generation
            };
            if still_idle {
                (activity.on_idle)();
            }
        });
    }
}

/// Keeps an [`Activity`] busy while alive.
pub(super) struct Busy(Arc<Activity>);

impl std::fmt::Debug for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Busy")
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let generation = {
            let mut state = self.0.lock();
            state.busy -= 1;
            if state.busy > 0 {
                return;
            }
            state.generation += 1;
            state.generation
        };
        self.0.arm(generation);
    }
}
