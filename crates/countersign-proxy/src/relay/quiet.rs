//! Quiet relayed streams: a `: keep-alive` comment to the client when the gateway has sent it
//! nothing for `connections.sse_keep_alive`, and the end of the stream once the upstream has
//! sent no bytes for `connections.sse_idle_timeout`.
//!
//! Long-lived GET streams are legitimately quiet for hours, so quiet alone is no reason to cut
//! one: the keep-alive comment (which every SSE parser ignores) is what stops load balancers and
//! clients with idle timeouts from dropping it, and lets the gateway notice a client that went
//! away. The idle timeout is the backstop for an upstream that hung without closing, and is
//! long by default; a client that wants the stream back reconnects, as the transport allows.
//! Only relayed upstream streams are timed here: the gateway's own question streams wait for a
//! person under `elicitation_timeout` and send their own keep-alives.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, Sleep};

use crate::clock::Clock;

/// The comment sent on a quiet stream. Comments carry no event, so clients and the
/// `Last-Event-ID` bookkeeping ignore them.
pub(super) const KEEP_ALIVE_COMMENT: Bytes = Bytes::from_static(b": keep-alive\n\n");

/// How long a relayed stream may be quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietLimits {
    /// Nothing sent to the client for this long: send a keep-alive comment.
    pub keep_alive: Duration,
    /// Nothing received from the upstream for this long: end the stream.
    pub idle_timeout: Duration,
}

/// What a quiet stream needs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    Nothing,
    KeepAlive,
    /// The upstream has been silent for the idle timeout.
    Idle,
}

/// The two clocks of one relayed stream. The timer is moved only when it fires, so a busy
/// stream costs a clock read per frame and no timer updates.
pub(super) struct QuietClock {
    limits: QuietLimits,
    clock: Arc<dyn Clock>,
    heard_at: Instant,
    sent_at: Instant,
}

impl std::fmt::Debug for QuietClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuietClock")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl QuietClock {
    /// Starts both clocks now (the upstream's response headers just arrived) and the timer
    /// that wakes the stream when either may be due.
    pub(super) fn start(limits: QuietLimits, clock: Arc<dyn Clock>) -> (Self, Sleep) {
        let now = clock.now();
        let quiet = Self {
            limits,
            clock,
            heard_at: now,
            sent_at: now,
        };
        let timer = tokio::time::sleep_until(quiet.next_deadline());
        (quiet, timer)
    }

    /// The upstream sent bytes.
    pub(super) fn heard(&mut self) {
        self.heard_at = self.clock.now();
    }

    /// The client was sent bytes.
    pub(super) fn sent(&mut self) {
        self.sent_at = self.clock.now();
    }

    pub(super) fn idle_timeout(&self) -> Duration {
        self.limits.idle_timeout
    }

    /// Polls the timer; when it fired, says what is due and sets it for the next deadline
    /// (registering the waker again when nothing is due yet).
    pub(super) fn poll_due(&mut self, mut timer: Pin<&mut Sleep>, cx: &mut Context<'_>) -> Due {
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Due::Nothing;
            }
            let now = self.clock.now();
            if now >= self.heard_at + self.limits.idle_timeout {
                return Due::Idle;
            }
            let due = if now >= self.sent_at + self.limits.keep_alive {
                self.sent_at = now;
                Due::KeepAlive
            } else {
                Due::Nothing
            };
            timer.as_mut().reset(self.next_deadline());
            if due == Due::KeepAlive {
                return due;
            }
        }
    }

    fn next_deadline(&self) -> Instant {
        (self.heard_at + self.limits.idle_timeout).min(self.sent_at + self.limits.keep_alive)
    }
}
