//! Rate limits per principal: token buckets with a burst, one per limit and principal (and per
//! upstream where an upstream has its own), checked before anything is sent on the caller's
//! behalf. A refusal is HTTP 429 with `Retry-After` and a JSON-RPC error naming the limit
//! ([`LimitHit`]); every hit is counted in `countersign_limit_hits_total`.
//!
//! - [`Limit::Calls`] counts every `tools/call` — requests and notification-shaped calls, alone or
//!   in a batch (a batch takes one token per call, all or none). The [`LimitCalls`] layer checks
//!   it right after identity: it keys on the principal, not on risk, so a refused call costs no
//!   policy evaluation and no tool listing.
//! - [`Limit::Held`] counts every call the approval layer holds (a token minted, a question
//!   asked), and [`Limit::Questions`] every question put to a person (elicitation,
//!   `input_required`); the approval layer asks [`RateLimits::admit_hold`] just before it holds.
//!
//! Callers without identity are all `anonymous` and share one budget: the gateway cannot tell
//! them apart (the peer address is a load balancer's as often as a client's), and a budget per
//! address would let one client with many addresses multiply its own.
//!
//! The buckets live in this process ([`table`], bounded by `max_principals`) or, with a shared
//! store ([`RateShare`], Redis), in the store, so replicas behind one load balancer grant one
//! budget. When the store does not answer, [`OnStoreError`] decides: `open` lets this replica's
//! own buckets decide meanwhile, `closed` refuses (503); either way the store is then left alone
//! for a second, so an outage does not make every request wait out the store's timeout.

mod bucket;
mod hit;
mod layer;
mod service;
mod table;

pub use hit::{HitReason, LimitHit};
pub use layer::LimitCallsLayer;
pub use service::LimitCalls;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use countersign_store::{BucketTake, RateDecision, RateShare, StoreError};
use futures_util::future::BoxFuture;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::clock::{Clock, SystemClock};
use crate::config::{LimitRates, OnStoreError, Rate, RateLimitConfig};
use crate::metrics::ProxyMetrics;
use table::{LocalBuckets, SlotTake};

/// The rate limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Every `tools/call`.
    Calls,
    /// Every call held for approval.
    Held,
    /// Every question put to a person.
    Questions,
}

impl Limit {
    const ALL: [Limit; 3] = [Limit::Calls, Limit::Held, Limit::Questions];

    /// The name in the configuration and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Calls => "calls",
            Limit::Held => "held",
            Limit::Questions => "questions",
        }
    }

    /// The `limit` label of `countersign_limit_hits_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Limit::Calls => "rate_calls",
            Limit::Held => "rate_held",
            Limit::Questions => "rate_questions",
        }
    }

    fn index(self) -> usize {
        match self {
            Limit::Calls => 0,
            Limit::Held => 1,
            Limit::Questions => 2,
        }
    }
}

/// One bucket in use: a limit in one scope (shared, or one upstream's own).
#[derive(Debug)]
struct Bucket {
    limit: Limit,
    rate: Rate,
    /// The bucket's name in the shared store: the limit, then the upstream for an own bucket.
    name: Box<str>,
}

/// Where each limit counts: the slot of the bucket shared by upstreams without their own, and
/// each upstream's own (`None`: off there).
#[derive(Debug, Default)]
struct Scopes {
    shared: Option<usize>,
    per_upstream: HashMap<String, Option<usize>>,
}

/// How long between two warnings that the shared store failed: one line per outage window
/// instead of one per request.
const STORE_WARNING_INTERVAL_SECS: u64 = 10;

/// How long the shared store is left alone after it failed. A store that is down makes every
/// check wait out its command timeout; resting it means an outage costs one such wait a second
/// per replica, not one per request.
const STORE_REST: Duration = Duration::from_secs(1);

/// Every rate limit of the gateway and the buckets they count in; see the [module docs](self).
#[derive(Debug)]
pub struct RateLimits {
    /// Indexed by slot.
    buckets: Vec<Bucket>,
    /// Indexed by [`Limit::index`].
    scopes: [Scopes; 3],
    local: LocalBuckets,
    shared: Option<Arc<dyn RateShare>>,
    on_store_error: OnStoreError,
    clock: Arc<dyn Clock>,
    metrics: ProxyMetrics,
    /// Unix second of the last store-failure warning.
    store_warned_at: AtomicU64,
    /// Until when checks are decided without the shared store, after it failed.
    store_rests_until: Mutex<Option<Instant>>,
}

/// A rate-limit decision: made at once from this replica's buckets, or waiting on the shared
/// store.
pub enum Admission {
    Ready(Result<(), LimitHit>),
    Pending(BoxFuture<'static, Result<(), LimitHit>>),
}

impl Admission {
    pub async fn outcome(self) -> Result<(), LimitHit> {
        match self {
            Admission::Ready(outcome) => outcome,
            Admission::Pending(future) => future.await,
        }
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Admission::Ready(outcome) => f.debug_tuple("Ready").field(outcome).finish(),
            Admission::Pending(_) => f.write_str("Pending"),
        }
    }
}

impl RateLimits {
    /// The limits of `config`, counted in `shared` when given (else in this process).
    pub fn new(
        config: &RateLimitConfig,
        shared: Option<Arc<dyn RateShare>>,
        clock: Arc<dyn Clock>,
        metrics: ProxyMetrics,
    ) -> Self {
        let mut buckets = Vec::new();
        let mut scopes: [Scopes; 3] = Default::default();
        for limit in Limit::ALL {
            let rates: &LimitRates = match limit {
                Limit::Calls => &config.calls,
                Limit::Held => &config.held,
                Limit::Questions => &config.questions,
            };
            let mut slot = |rate: Option<Rate>, name: String| {
                rate.map(|rate| {
                    buckets.push(Bucket {
                        limit,
                        rate,
                        name: name.into_boxed_str(),
                    });
                    buckets.len() - 1
                })
            };
            let scope = &mut scopes[limit.index()];
            scope.shared = slot(rates.default, limit.as_str().to_owned());
            for (upstream, rate) in &rates.per_upstream {
                let own = slot(*rate, format!("{}:{upstream}", limit.as_str()));
                scope.per_upstream.insert(upstream.clone(), own);
            }
        }
        Self {
            local: LocalBuckets::new(buckets.len(), config.max_principals.get()),
            buckets,
            scopes,
            shared,
            on_store_error: config.on_store_error,
            clock,
            metrics,
            store_warned_at: AtomicU64::new(0),
            store_rests_until: Mutex::new(None),
        }
    }

    /// No limit at all, for tests and tools that run the stack without configuration.
    pub fn off() -> Self {
        Self::new(
            &RateLimitConfig::off(),
            None,
            Arc::new(SystemClock),
            ProxyMetrics::unregistered(),
        )
    }

    /// Whether `limit` counts anything on any upstream.
    pub fn is_on(&self, limit: Limit) -> bool {
        self.buckets.iter().any(|bucket| bucket.limit == limit)
    }

    /// Admits `calls` tool calls of `principal` to `upstream`, taking them all or none.
    pub fn admit_calls(self: &Arc<Self>, principal: &str, upstream: &str, calls: u32) -> Admission {
        self.admit(principal, upstream, &[(Limit::Calls, calls)])
    }

    /// Admits one held call of `principal` to `upstream`, and with `asks_person` one question
    /// as well, both or neither.
    pub fn admit_hold(
        self: &Arc<Self>,
        principal: &str,
        upstream: &str,
        asks_person: bool,
    ) -> Admission {
        let questions = u32::from(asks_person);
        self.admit(
            principal,
            upstream,
            &[(Limit::Held, 1), (Limit::Questions, questions)],
        )
    }

    /// Takes `cost` tokens from each limit's bucket for (`principal`, `upstream`), all or none.
    fn admit(
        self: &Arc<Self>,
        principal: &str,
        upstream: &str,
        wants: &[(Limit, u32)],
    ) -> Admission {
        let mut takes = Vec::new();
        for &(limit, cost) in wants {
            let Some(slot) = self.slot(limit, upstream).filter(|_| cost > 0) else {
                continue;
            };
            let rate = self.buckets[slot].rate;
            if cost > rate.burst.get() {
                let burst = rate.burst.get();
                let reason = HitReason::OverBurst { cost, burst };
                return Admission::Ready(Err(self.refused(principal, limit, reason)));
            }
            takes.push(SlotTake { slot, rate, cost });
        }
        if takes.is_empty() {
            return Admission::Ready(Ok(()));
        }
        let Some(shared) = self.shared.clone() else {
            return Admission::Ready(self.take_locally(principal, &takes));
        };
        if self.store_resting() {
            return Admission::Ready(self.without_store(principal, &takes));
        }
        let limits = self.clone();
        let principal = principal.to_owned();
        Admission::Pending(Box::pin(async move {
            limits.take_shared(&*shared, &principal, &takes).await
        }))
    }

    /// The slot `limit` counts in for calls to `upstream`, if the limit is on there.
    fn slot(&self, limit: Limit, upstream: &str) -> Option<usize> {
        let scopes = &self.scopes[limit.index()];
        match scopes.per_upstream.get(upstream) {
            Some(own) => *own,
            None => scopes.shared,
        }
    }

    fn take_locally(&self, principal: &str, takes: &[SlotTake]) -> Result<(), LimitHit> {
        self.local
            .take(principal, takes, self.clock.now())
            .map_err(|(index, retry_after)| {
                let limit = self.buckets[takes[index].slot].limit;
                self.refused(principal, limit, HitReason::Exhausted { retry_after })
            })
    }

    async fn take_shared(
        &self,
        shared: &dyn RateShare,
        principal: &str,
        takes: &[SlotTake],
    ) -> Result<(), LimitHit> {
        let store_takes: Vec<BucketTake<'_>> = takes
            .iter()
            .map(|take| BucketTake {
                bucket: &self.buckets[take.slot].name,
                interval: take.rate.interval(),
                burst: take.rate.burst.get(),
                cost: take.cost,
            })
            .collect();
        match shared.take(principal, &store_takes).await {
            Ok(RateDecision::Taken) => Ok(()),
            Ok(RateDecision::Refused {
                bucket,
                retry_after,
            }) => {
                let limit = takes
                    .get(bucket)
                    .map_or(Limit::Calls, |take| self.buckets[take.slot].limit);
                Err(self.refused(principal, limit, HitReason::Exhausted { retry_after }))
            }
            Err(error) => self.store_failed(&error, principal, takes),
        }
    }

    /// The shared store did not answer: it rests a while, and this check is decided without it.
    fn store_failed(
        &self,
        error: &StoreError,
        principal: &str,
        takes: &[SlotTake],
    ) -> Result<(), LimitHit> {
        *self
            .store_rests_until
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(self.clock.now() + STORE_REST);
        let now = self.clock.unix_secs();
        let last = self.store_warned_at.load(Ordering::Relaxed);
        let due = now >= last.saturating_add(STORE_WARNING_INTERVAL_SECS)
            && self
                .store_warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        let decided = match self.on_store_error {
            OnStoreError::Open => "decided by each replica alone",
            OnStoreError::Closed => "refused",
        };
        if due {
            warn!(%error, "rate limit store failed; rate-limited requests are {decided} until it answers");
        } else {
            debug!(%error, "rate limit store failed");
        }
        self.without_store(principal, takes)
    }

    fn store_resting(&self) -> bool {
        let rests_until = *self
            .store_rests_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        rests_until.is_some_and(|until| self.clock.now() < until)
    }

    /// Decides a check the shared store cannot: this replica's own buckets (`open`), or a
    /// refusal (`closed`).
    fn without_store(&self, principal: &str, takes: &[SlotTake]) -> Result<(), LimitHit> {
        match self.on_store_error {
            OnStoreError::Open => {
                self.metrics.record_rate_store_fallback("local");
                self.take_locally(principal, takes)
            }
            OnStoreError::Closed => {
                self.metrics.record_rate_store_fallback("refused");
                Err(LimitHit {
                    limit: self.buckets[takes[0].slot].limit,
                    reason: HitReason::StoreUnavailable,
                })
            }
        }
    }

    /// Counts and logs a refusal.
    fn refused(&self, principal: &str, limit: Limit, reason: HitReason) -> LimitHit {
        self.metrics.record_limit_hit(limit.metric_label());
        debug!(principal, limit = limit.as_str(), ?reason, "rate limited");
        LimitHit { limit, reason }
    }
}

#[cfg(test)]
mod tests;
