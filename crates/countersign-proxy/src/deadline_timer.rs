//! One timer for a run of successive deadlines: a connection's waits for request heads, a
//! pooled upstream connection's waits for response heads, a relayed body's one deadline.
//!
//! A timer made per wait is registered in the worker's timer wheel when it is first polled and
//! removed again when it is dropped, each under the wheel's lock, and costs a clock read and a
//! reference to the runtime besides. This one is made the first time something waits on it;
//! moving it to a later deadline then only updates its own (tokio's `extend_expiration`, one
//! compare-and-swap), and a wait that never happens costs nothing.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// A timer made on first use and moved from deadline to deadline. Between waits it keeps the
/// waker of the last one until it fires, and with it that task's allocation: at most one
/// deadline longer than the task itself.
#[derive(Debug, Default)]
pub(crate) struct DeadlineTimer {
    // Boxed, so that what holds it can move (a pooled connection goes in and out of the pool).
    timer: Option<Pin<Box<Sleep>>>,
}

impl DeadlineTimer {
    /// Whether `by` has passed; if not, `cx` is woken when it does.
    pub(crate) fn poll_passed(&mut self, by: Instant, cx: &mut Context<'_>) -> bool {
        let timer = match &mut self.timer {
            Some(timer) => {
                if timer.deadline() != by {
                    timer.as_mut().reset(by);
                }
                timer
            }
            None => self.timer.insert(Box::pin(tokio::time::sleep_until(by))),
        };
        timer.as_mut().poll(cx).is_ready()
    }

    /// Resolves once `by` has passed.
    pub(crate) async fn passed(&mut self, by: Instant) {
        poll_fn(|cx| {
            if self.poll_passed(by, cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::{Clock, SystemClock};

    /// Waits for `by` on `timer`, failing rather than hanging if the timer never fires.
    async fn wait(timer: &mut DeadlineTimer, by: Instant) {
        tokio::time::timeout(Duration::from_secs(60), timer.passed(by))
            .await
            .expect("the timer fired");
    }

    #[tokio::test(start_paused = true)]
    async fn each_deadline_passes_at_its_own_time_on_one_timer() {
        let mut timer = DeadlineTimer::default();
        let start = SystemClock.now();
        wait(&mut timer, start + Duration::from_secs(1)).await;
        assert_eq!(SystemClock.now() - start, Duration::from_secs(1));
        // A later deadline on the timer that has fired, then one moved later before it fires.
        let second = start + Duration::from_secs(3);
        let mut waker = Context::from_waker(std::task::Waker::noop());
        assert!(!timer.poll_passed(second, &mut waker));
        wait(&mut timer, start + Duration::from_secs(5)).await;
        assert_eq!(SystemClock.now() - start, Duration::from_secs(5));
        // A deadline already behind it has passed at once.
        assert!(timer.poll_passed(start, &mut waker));
    }
}
