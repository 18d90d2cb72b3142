//! What the gateway last learnt about an HTTP upstream from its own traffic, for `/readyz` and
//! the start-up probe. Written on transitions only, so a healthy request path pays one atomic
//! load per request.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use super::UpstreamState;
use crate::error::ProxyError;

const UNCHECKED: u8 = 0;
const REACHABLE: u8 = 1;
const FAILING: u8 = 2;

#[derive(Debug, Default)]
pub struct Health {
    state: AtomicU8,
    /// Why the last exchange failed, while `state` is `FAILING`.
    reason: Mutex<String>,
}

impl Health {
    /// The upstream answered (with any HTTP status: it was reached and, over TLS, verified).
    pub fn reached(&self) {
        if self.state.load(Ordering::Relaxed) != REACHABLE {
            self.state.store(REACHABLE, Ordering::Relaxed);
        }
    }

    /// The upstream could not be reached, or did not answer in time.
    pub fn failed(&self, error: &ProxyError) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = error.to_string();
        self.state.store(FAILING, Ordering::Relaxed);
    }

    pub fn state(&self) -> UpstreamState {
        match self.state.load(Ordering::Relaxed) {
            UNCHECKED => UpstreamState::Starting,
            REACHABLE => UpstreamState::Ready,
            _ => UpstreamState::Failed(
                self.reason
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            ),
        }
    }
}
