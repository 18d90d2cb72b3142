//! One token bucket, as pure arithmetic on instants. The bucket is kept in its GCRA form: not a
//! token count and a last-refill time, but the one instant at which it will be full again. A
//! bucket that is already full (that instant has passed) is the same as no state at all, which
//! is what lets idle buckets be dropped from memory and expire from Redis.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::Rate;

/// Takes `cost` tokens from a bucket of `rate` that is full again at `full_at` (`None`: full).
/// `Ok` carries the bucket's new full-again instant; `Err` how long until `cost` tokens are
/// back. `cost` must be at most the burst: a larger take never fits, so callers refuse it before.
pub(super) fn take(
    full_at: Option<Instant>,
    now: Instant,
    rate: Rate,
    cost: u32,
) -> Result<Instant, Duration> {
    let interval = rate.interval();
    let start = full_at.map_or(now, |at| at.max(now));
    let next = start + interval.saturating_mul(cost);
    // Each taken token puts the full-again instant one interval further out; the bucket may run
    // at most `burst` intervals ahead of now.
    let ahead = next - now;
    let room = interval.saturating_mul(rate.burst.get());
    if ahead <= room {
        Ok(next)
    } else {
        Err(ahead - room)
    }
}

/// Whole seconds a client should wait, for `Retry-After`: rounded up (a client that retries
/// after the rounded-down value is refused again) and at least 1.
pub(super) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::clock::{Clock, SystemClock};

    /// 6 a minute (one token every 10 s), 3 at once.
    fn rate() -> Rate {
        Rate {
            per_minute: NonZeroU32::new(6).expect("non-zero"),
            burst: NonZeroU32::new(3).expect("non-zero"),
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_full_bucket_allows_its_burst_at_once_and_then_refuses() {
        let now = SystemClock.now();
        let mut state = None;
        for _ in 0..3 {
            state = Some(take(state, now, rate(), 1).expect("within the burst"));
        }
        assert_eq!(
            take(state, now, rate(), 1),
            Err(10 * SECOND),
            "the fourth waits for one token: one interval"
        );
    }

    #[test]
    fn tokens_come_back_one_interval_apart() {
        let start = SystemClock.now();
        let mut state = None;
        for _ in 0..3 {
            state = Some(take(state, start, rate(), 1).expect("within the burst"));
        }
        let later = start + 9 * SECOND;
        assert_eq!(take(state, later, rate(), 1), Err(SECOND));
        let later = start + 10 * SECOND;
        let state = take(state, later, rate(), 1).expect("one token is back");
        assert_eq!(take(Some(state), later, rate(), 1), Err(10 * SECOND));
    }

    #[test]
    fn a_quiet_bucket_fills_up_to_its_burst_and_no_further() {
        let start = SystemClock.now();
        let state = take(None, start, rate(), 1).expect("full");
        assert_eq!(state, start + 10 * SECOND);
        // An hour of quiet refills three tokens, not 360.
        let later = start + 3600 * SECOND;
        let drained = take(Some(state), later, rate(), 3).expect("full again");
        assert_eq!(take(Some(drained), later, rate(), 1), Err(10 * SECOND));
    }

    #[test]
    fn a_take_of_several_tokens_needs_them_all() {
        let start = SystemClock.now();
        let state = take(None, start, rate(), 2).expect("two of three");
        assert_eq!(
            take(Some(state), start, rate(), 2),
            Err(10 * SECOND),
            "one is left, one more must come back"
        );
        assert!(take(Some(state), start, rate(), 1).is_ok());
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_never_says_zero() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(SECOND), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2500)), 3);
        assert_eq!(retry_after_secs(10 * SECOND), 10);
    }
}
