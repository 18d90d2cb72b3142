//! Elicitation answers handed between replicas through Redis.
//!
//! Redis is the arbiter of who may deliver. A waiter writes a record naming its replica
//! (`SET <ns>:{<key>}:waiter <replica>/<id> NX PX <timeout + 1 s>`); a deliverer claims that
//! record with `GETDEL`, so of any number of deliverers on any replicas at most one gets it.
//! The claimant hands the answer over in process when the waiter is its own, or publishes it
//! on the waiter's replica channel and waits for that replica's acknowledgement, which says
//! whether the waiter was still there to take it. So `deliver` returns `true` only when the
//! waiter got the answer, `false` when it certainly did not, and an error when it cannot know.
//!
//! This file holds the handover itself and what it shares with its parts; the local waiter
//! registry is in [`waiters`], the pub/sub subscriber and the messages replicas exchange are in
//! [`subscriber`].

mod subscriber;
mod waiters;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt as _};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::endpoint::{Endpoint, first_answer_timeout};
use super::{Commands, unexpected_reply, validate_namespace};
use crate::{AnswerHandover, StoreError};

use self::waiters::{Finished, LocalWaiter, Record, Registered, record_failure};

/// Waiters one replica holds at most (10 000), unless [`RedisAnswerHandover::with_max_waiters`] says
/// otherwise.
const DEFAULT_MAX_WAITERS: usize = 10_000;

/// Elicitation answers handed over between replicas sharing one Redis (or Redis Cluster) and
/// namespace.
///
/// Each instance is one replica: it subscribes to its own channel `<ns>:handover:<replica>`
/// when connected and keeps that subscription up (reconnecting after Redis restarts) until
/// dropped. [`wait`](AnswerHandover::wait) registers in process at once and starts writing the
/// waiter's Redis record right away, before returning; another replica can claim the record
/// one round trip later, when [`reachable`](AnswerHandover::reachable) resolves, and the
/// gateway sends the prompt only then. A waiter whose record cannot be written (Redis down,
/// the key awaited on another replica) ends with that error, and so does `reachable`.
pub struct RedisAnswerHandover {
    inner: Arc<Inner>,
    max_waiters: usize,
    subscriber: JoinHandle<()>,
}

struct Inner {
    endpoint: Endpoint,
    namespace: String,
    /// 128 random bits in hex: names this replica's channel and marks its waiters' records.
    replica: String,
    command_timeout: Duration,
    commands: Commands,
    runtime: tokio::runtime::Handle,
    next_id: AtomicU64,
    waiters: Mutex<HashMap<String, LocalWaiter>>,
    /// The latest registration task per key and a future that resolves when it has finished,
    /// so registrations of one key run one after another.
    registrars: Mutex<HashMap<String, (u64, Finished)>>,
    /// Deliveries published to another replica, waiting for its acknowledgement.
    acks: Mutex<HashMap<u64, oneshot::Sender<bool>>>,
    /// Whether the subscriber is subscribed to this replica's channel right now.
    subscribed: watch::Sender<bool>,
}

impl RedisAnswerHandover {
    /// Connects to `url` (same forms as [`crate::RedisReplayStore::connect`]) and returns once
    /// this replica is subscribed to its channel. `command_timeout` bounds every Redis command
    /// and the wait for another replica's acknowledgement.
    pub async fn connect(
        url: &str,
        namespace: &str,
        command_timeout: Duration,
    ) -> Result<Self, StoreError> {
        validate_namespace(namespace)?;
        let endpoint = Endpoint::parse(url, command_timeout)?;
        let commands = endpoint.connect(command_timeout).await?;
        let clients = endpoint.subscriber_clients();
        let (subscribed, mut subscribed_now) = watch::channel(false);
        let inner = Arc::new(Inner {
            endpoint,
            namespace: namespace.to_owned(),
            replica: format!("{:032x}", rand::random::<u128>()),
            command_timeout,
            commands,
            runtime: tokio::runtime::Handle::current(),
            next_id: AtomicU64::new(0),
            waiters: Mutex::new(HashMap::new()),
            registrars: Mutex::new(HashMap::new()),
            acks: Mutex::new(HashMap::new()),
            subscribed,
        });
        let subscriber = tokio::spawn(Arc::clone(&inner).subscribe_forever(clients));
        let handover = Self {
            inner,
            max_waiters: DEFAULT_MAX_WAITERS,
            subscriber,
        };
        let subscribing = subscribed_now.wait_for(|subscribed| *subscribed);
        let limit = first_answer_timeout(command_timeout);
        let subscribed = matches!(tokio::time::timeout(limit, subscribing).await, Ok(Ok(_)));
        if subscribed {
            Ok(handover)
        } else {
            Err(not_subscribed())
        }
    }

    /// Caps the waiters this replica holds at once; beyond it `wait` fails with
    /// [`StoreError::Full`].
    #[must_use]
    pub fn with_max_waiters(mut self, max_waiters: usize) -> Self {
        self.max_waiters = max_waiters;
        self
    }

    /// Keys this replica currently waits on (for metrics).
    pub fn waiting(&self) -> usize {
        lock_recovering(&self.inner.waiters).len()
    }

    /// Whether this replica is subscribed to its channel now (for `/readyz`): while it is
    /// not, `wait` and `deliver` fail.
    pub fn is_subscribed(&self) -> bool {
        *self.inner.subscribed.borrow()
    }

    async fn deliver_once(&self, key: &str, answer: Vec<u8>) -> Result<bool, StoreError> {
        let inner = &*self.inner;
        if !self.is_subscribed() {
            // Without a subscription no acknowledgement could reach us; claim nothing.
            return Err(not_subscribed());
        }
        // This replica's own waiter for `key` may still be writing its record (`wait`, then
        // an immediate `deliver`); let the write finish so the claim below can see it. A
        // write that failed or got stuck fails the claim below.
        let _ = inner.record_settled(key).await?;
        let mut claim = ::redis::cmd("GETDEL");
        claim.arg(inner.record_key(key));
        let claimed: Option<String> = inner.commands.query(&claim, inner.command_timeout).await?;
        let Some(token) = claimed else {
            return Ok(false);
        };
        let Some((replica, waiter)) = parse_token(&token) else {
            return Err(unexpected_reply("GETDEL"));
        };
        if replica == inner.replica {
            return Ok(inner.hand_over_locally(key, waiter, answer));
        }
        inner.hand_over_remotely(replica, key, waiter, answer).await
    }
}

impl Inner {
    /// How this replica's waiter for `key` stands once its record is written or has failed,
    /// or `None` when nobody here waits for `key`. Bounded by the registration's own
    /// commands: a record still pending after them is reported as it stands.
    async fn record_settled(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let record = self
            .waiters
            .lock()
            .map_err(|_| poisoned())?
            .get(key)
            .map(|waiter| waiter.record.clone());
        let Some(mut record) = record else {
            return Ok(None);
        };
        let settled = record.wait_for(|record| !matches!(record, Record::Pending));
        let _ = tokio::time::timeout(self.command_timeout * 4, settled).await;
        let settled = record.borrow().clone();
        Ok(Some(settled))
    }

    /// The waiter's record. The hash tag keeps every key of one hand-over in one Cluster slot.
    fn record_key(&self, key: &str) -> String {
        format!("{}:{{{key}}}:waiter", self.namespace)
    }

    fn channel(&self, replica: &str) -> String {
        format!("{}:handover:{replica}", self.namespace)
    }

    fn token(&self, waiter: u64) -> String {
        format!("{}/{waiter}", self.replica)
    }
}

impl AnswerHandover for RedisAnswerHandover {
    fn wait<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        // Registered now, before the caller sends the prompt, and the deadline counts from
        // now too (see the trait docs).
        let registered = self.register(key, timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        async move {
            let Registered {
                registration,
                answer: mut receiver,
                mut record,
            } = registered?;
            let outcome = tokio::select! {
                biased;
                answer = &mut receiver => Ok(answer.ok()),
                error = record_failure(&mut record) => {
                    receiver.close();
                    receiver.try_recv().map(Some).map_err(|_| error)
                }
                () = tokio::time::sleep_until(deadline) => {
                    // Close first, then look: an answer that won the race is kept (its
                    // deliverer was told `true`); any later one finds the channel closed.
                    receiver.close();
                    Ok(receiver.try_recv().ok())
                }
            };
            drop(registration);
            outcome
        }
        .boxed()
    }

    fn reachable<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            // Another replica can claim the waiter only once its record is in Redis.
            match self.inner.record_settled(key).await? {
                Some(Record::Written) => Ok(()),
                Some(Record::Failed(error)) => Err(error),
                Some(Record::Pending) => Err(StoreError::Unavailable(
                    "the answer waiter's record was not written in time".to_owned(),
                )),
                None => Err(StoreError::nobody_waits()),
            }
        }
        .boxed()
    }

    fn deliver<'a>(
        &'a self,
        key: &'a str,
        answer: Vec<u8>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.deliver_once(key, answer).boxed()
    }
}

impl Drop for RedisAnswerHandover {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl fmt::Debug for RedisAnswerHandover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAnswerHandover")
            .field("endpoint", &self.inner.endpoint)
            .field("namespace", &self.inner.namespace)
            .field("replica", &self.inner.replica)
            .field("max_waiters", &self.max_waiters)
            .field("waiting", &self.waiting())
            .field("subscribed", &self.is_subscribed())
            .finish_non_exhaustive()
    }
}

fn not_subscribed() -> StoreError {
    StoreError::Unavailable("answer hand-over is not subscribed to redis".to_owned())
}

fn poisoned() -> StoreError {
    StoreError::Unavailable("redis answer hand-over lock poisoned".to_owned())
}

fn lock_recovering<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `<replica>/<waiter id>`, as written by [`Inner::token`].
fn parse_token(token: &str) -> Option<(&str, u64)> {
    let (replica, waiter) = token.split_once('/')?;
    is_replica_id(replica).then_some(())?;
    Some((replica, waiter.parse().ok()?))
}

fn is_replica_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}
