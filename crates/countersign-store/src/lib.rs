//! countersign-store owns the state confirmations share across requests and replicas:
//!
//! - [`ReplayStore`]: single-use consumption of token ids (`jti`), the last check before a
//!   confirmed call is forwarded (docs/confirmation-token.md);
//! - [`AnswerHandover`]: passing a human's elicitation answer from the request that received
//!   it to the request holding the call (docs/wire-formats.md);
//! - [`ApprovalBook`]: requests waiting for a person on the approval page, decided once;
//! - [`PinShare`] and [`RateShare`]: pinned tool risks and rate-limit buckets that replicas
//!   share;
//! - the in-memory backends ([`MemoryReplayStore`], [`MemoryAnswerHandover`]), the Redis
//!   backends (`RedisReplayStore`, `RedisAnswerHandover`, feature `redis`, on by default) and
//!   the [`conformance`] suite every backend, in-memory or Redis, must pass.
//!
//! It knows nothing about HTTP, MCP or tokens: it must not import hyper, tower or the other
//! countersign crates. Keys are opaque strings; callers decide what they mean.
//!
//! **Every [`StoreError`] means "refuse".** A store that cannot say for certain that a `jti` was
//! unspent, or that an answer was delivered, has not said so; callers fail closed and never
//! forward. The one exception is [`RateShare`]: a rate limit is not what keeps a call from
//! running, so its caller chooses what a failed take means (the gateway's
//! `rate_limits.on_store_error`).

#![forbid(unsafe_code)]

mod book;
mod clock;
mod handover;
mod memory;
mod pins;
mod rates;
#[cfg(feature = "redis")]
mod redis_backend;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::fmt::Debug;
use std::time::Duration;

use futures_util::future::BoxFuture;

pub use book::{ApprovalBook, ApprovalEntry, Decided, MemoryApprovalBook};
pub use clock::{Clock, ManualClock, SystemClock};
pub use handover::MemoryAnswerHandover;
pub use memory::MemoryReplayStore;
pub use pins::{LocalPins, PinShare, SharedPin};
pub use rates::{BucketTake, RateDecision, RateShare};
#[cfg(feature = "redis")]
pub use redis_backend::{
    RedisAnswerHandover, RedisApprovalBook, RedisPinShare, RedisRateShare, RedisReplayStore,
};

/// The outcome of recording a `jti`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Consumption {
    /// This call recorded the `jti`: the confirmed call may proceed.
    First,
    /// The `jti` was already recorded and has not expired: a replay, refuse it.
    AlreadySpent,
}

/// Why a store could not answer. Every variant means the caller must refuse the request;
/// none of them says anything about whether a `jti` was spent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend cannot be reached or answered with an error (connection refused, `OOM`,
    /// `READONLY`, `CLUSTERDOWN`, `LOADING`, …). The message is for operators.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend did not answer in time. The write may still have happened, so a timed-out
    /// consume must be treated as spent.
    #[error("store operation timed out")]
    Timeout,
    /// The store is at capacity with live entries; it never evicts one to make room, since
    /// that would re-open a replay window.
    #[error("store is full")]
    Full,
}

impl StoreError {
    /// An answer hand-over asked about a key nobody waits on (never registered, answered, or
    /// given up).
    pub(crate) fn nobody_waits() -> Self {
        StoreError::Unavailable("nobody waits for an answer under this key".to_owned())
    }
}

/// Single-use consumption of confirmation token ids.
///
/// Object-safe so the gateway can hold an `Arc<dyn ReplayStore>` picked by configuration.
pub trait ReplayStore: Send + Sync + Debug {
    /// Atomically records `jti` unless it is already recorded: exactly one of any number of
    /// concurrent calls with the same `jti`, on any replica sharing the backend, gets
    /// [`Consumption::First`].
    ///
    /// The record blocks until the clock passes `expires_at_unix_ms` (Redis `PXAT` semantics),
    /// so it must outlive every instant at which the token could still verify. `verify`
    /// accepts up to the end of second `exp + leeway`, so pass
    /// `(exp + leeway + 1) * 1000`; a record that expires earlier re-opens replay.
    fn consume<'a>(
        &'a self,
        jti: &'a str,
        expires_at_unix_ms: u64,
    ) -> BoxFuture<'a, Result<Consumption, StoreError>>;

    /// Whether the backend can take consumes now, for `/readyz`.
    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// Hands an elicitation answer from the request that received it to the request waiting for
/// it, possibly on another replica.
///
/// The waiter registers **when [`wait`](Self::wait) is called**, not when its future is first
/// polled: the gateway calls `wait`, awaits [`reachable`](Self::reachable) (on one replica at
/// once; across replicas once the registration is visible to all of them), then sends the
/// prompt, then awaits the answer, so an answer that comes back quickly is never lost. An
/// answer delivered while nobody waits for its key is dropped, not buffered: only the request
/// that asked may receive it.
pub trait AnswerHandover: Send + Sync + Debug {
    /// Waits up to `timeout` for the answer under `key`. `Ok(None)` means no answer in time
    /// (or the waiter was abandoned); the registration is removed when the future completes
    /// or is dropped.
    fn wait<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    /// Resolves once the waiter that [`wait`](Self::wait) registered for `key` can take an
    /// answer delivered on any replica, or with the error that keeps it from ever taking one
    /// (nobody waits for `key`, or its registration failed). The gateway awaits it before it
    /// sends the prompt: a client that answers the moment it sees the prompt, through whichever
    /// replica, still finds the waiter.
    fn reachable<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Offers `answer` to the waiter for `key`. Returns whether a waiter took it; `false`
    /// means nobody was waiting (unknown key, timed out, already answered).
    fn deliver<'a>(
        &'a self,
        key: &'a str,
        answer: Vec<u8>,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}
