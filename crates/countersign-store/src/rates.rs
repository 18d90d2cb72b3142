//! Token buckets shared between replicas, so a principal's rate limit is one budget whichever
//! replica its requests reach. The bucket arithmetic lives with the backend (Redis runs it in
//! one script, on its own clock); callers say which buckets to take from and how much.

use std::fmt::Debug;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::StoreError;

/// One bucket a take draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketTake<'a> {
    /// The bucket's name within its group, from `[A-Za-z0-9_.:-]`, such as `calls` or
    /// `calls:store`.
    pub bucket: &'a str,
    /// Time for one token to come back.
    pub interval: Duration,
    /// Tokens the bucket holds when full.
    pub burst: u32,
    /// Tokens this take needs; at most `burst` (a larger take could never succeed).
    pub cost: u32,
}

/// What a take decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    /// Every bucket had the tokens; they are taken.
    Taken,
    /// Nothing was taken. `bucket` (an index into the takes) is the one that needs the longest
    /// wait, `retry_after` that wait.
    Refused {
        bucket: usize,
        retry_after: Duration,
    },
}

/// Buckets shared by every replica using the same backend. A [`StoreError`] here says nothing
/// about the buckets; the caller decides whether to count alone or refuse.
pub trait RateShare: Send + Sync + Debug {
    /// Takes `cost` tokens from every bucket of `takes` in `group` (a principal), or none
    /// when any of them lacks its tokens: one atomic decision, whichever replica asks.
    fn take<'a>(
        &'a self,
        group: &'a str,
        takes: &'a [BucketTake<'a>],
    ) -> BoxFuture<'a, Result<RateDecision, StoreError>>;
}
