//! Elicitation answers handed between replicas through Redis.
//!
//! Redis is the arbiter of who may deliver. A waiter writes a record naming its replica
//! (`SET <ns>:{<key>}:waiter <replica>/<id> NX PX <timeout + 1 s>`); a deliverer claims that
//! record with `GETDEL`, so of any number of deliverers on any replicas at most one gets it.
//! The claimant hands the answer over in process when the waiter is its own, or publishes it
//! on the waiter's replica channel and waits for that replica's acknowledgement, which says
//! whether the waiter was still there to take it. So `deliver` returns `true` only when the
//! waiter got the answer, `false` when it certainly did not, and an error when it cannot know.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ::redis::Client;
use futures_util::StreamExt as _;
use futures_util::future::{self, BoxFuture, FutureExt as _, Shared};
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::endpoint::{Endpoint, connection_timeout};
use super::{Commands, set_nx_outcome, store_error, unexpected_reply, validate_namespace};
use crate::{AnswerHandover, StoreError};

/// Waiters one replica holds at most (10 000), unless [`RedisAnswerHandover::with_max_waiters`] says
/// otherwise.
const DEFAULT_MAX_WAITERS: usize = 10_000;

/// How much longer than its wait a waiter's record lives, so it is still there at the
/// deadline despite clock and scheduling slack; the waiter deletes it on its way out anyway.
const RECORD_GRACE: Duration = Duration::from_secs(1);

/// The longest a waiter's record is kept, whatever the wait's timeout (Redis refuses expiries
/// that overflow its clock).
const MAX_RECORD_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// How often the subscriber pings its connection, to notice one that died without a word.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Reconnect back-off bounds for the subscriber.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Compare-and-delete: a waiter removes its own record, never a later waiter's.
const DELETE_IF_OURS: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Elicitation answers handed over between replicas sharing one Redis (or Redis Cluster) and
/// namespace.
///
/// Each instance is one replica: it subscribes to its own channel `<ns>:handover:<replica>`
/// when connected and keeps that subscription up (reconnecting after Redis restarts) until
/// dropped. [`wait`](AnswerHandover::wait) registers in process at once and starts writing the
/// waiter's Redis record right away, before returning; another replica can claim the record
/// one round trip later, long before a person can have answered the prompt. A waiter whose
/// record cannot be written (Redis down, the key awaited on another replica) ends with that
/// error.
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

/// Resolves when a registration task has finished (its sender is dropped).
type Finished = Shared<oneshot::Receiver<()>>;

/// What `wait` holds: its registration guard, the answer channel and the record's state.
struct Registered<'a> {
    registration: Registration<'a>,
    answer: oneshot::Receiver<Vec<u8>>,
    record: watch::Receiver<Record>,
}

/// The background half of one registration: writes the waiter's record, keeps it while the
/// waiter lives, then deletes it.
struct RecordTask {
    key: String,
    id: u64,
    timeout: Duration,
    /// The previous registration task for the same key, if it may still be running.
    previous: Option<Finished>,
    /// Closed when the waiter's [`Registration`] drops.
    done: oneshot::Receiver<()>,
    record: watch::Sender<Record>,
    finished: oneshot::Sender<()>,
}

struct LocalWaiter {
    /// Tells this registration apart from a later one under the same key.
    id: u64,
    sender: oneshot::Sender<Vec<u8>>,
    record: watch::Receiver<Record>,
}

/// Where the waiter's Redis record stands.
#[derive(Debug, Clone)]
enum Record {
    Pending,
    Written,
    Failed(StoreError),
}

/// Removes the local registration when the wait ends in any way, then (by dropping `done`)
/// lets the registration task delete the Redis record.
struct Registration<'a> {
    inner: &'a Inner,
    key: &'a str,
    id: u64,
    _done: oneshot::Sender<()>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut waiters = lock_recovering(&self.inner.waiters);
        if waiters.get(self.key).is_some_and(|w| w.id == self.id) {
            waiters.remove(self.key);
        }
    }
}

/// Forgets a published delivery's acknowledgement slot however the delivery ends.
struct PendingAck<'a> {
    inner: &'a Inner,
    delivery: u64,
}

impl Drop for PendingAck<'_> {
    fn drop(&mut self) {
        lock_recovering(&self.inner.acks).remove(&self.delivery);
    }
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
        let limit = connection_timeout(command_timeout) + command_timeout;
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

    fn register<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> Result<Registered<'a>, StoreError> {
        let inner = &*self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        let (record_tx, record_rx) = watch::channel(Record::Pending);
        {
            let mut waiters = inner.waiters.lock().map_err(|_| poisoned())?;
            if waiters.contains_key(key) {
                return Err(StoreError::Unavailable(
                    "an answer for this key is already awaited".to_owned(),
                ));
            }
            if waiters.len() >= self.max_waiters {
                return Err(StoreError::Full);
            }
            let waiter = LocalWaiter {
                id,
                sender,
                record: record_rx.clone(),
            };
            waiters.insert(key.to_owned(), waiter);
        }
        let (done_tx, done_rx) = oneshot::channel();
        let (finished_tx, finished_rx) = oneshot::channel();
        let previous = lock_recovering(&inner.registrars)
            .insert(key.to_owned(), (id, finished_rx.shared()))
            .map(|(_, finished)| finished);
        let task = RecordTask {
            key: key.to_owned(),
            id,
            timeout,
            previous,
            done: done_rx,
            record: record_tx,
            finished: finished_tx,
        };
        inner.runtime.spawn(task.run(Arc::clone(&self.inner)));
        let registration = Registration {
            inner,
            key,
            id,
            _done: done_tx,
        };
        Ok(Registered {
            registration,
            answer: receiver,
            record: record_rx,
        })
    }

    async fn deliver_once(&self, key: &str, answer: Vec<u8>) -> Result<bool, StoreError> {
        let inner = &*self.inner;
        if !self.is_subscribed() {
            // Without a subscription no acknowledgement could reach us; claim nothing.
            return Err(not_subscribed());
        }
        // This replica's own waiter for `key` may still be writing its record (`wait`, then
        // an immediate `deliver`); let the write finish so the claim below can see it.
        let own_record = inner
            .waiters
            .lock()
            .map_err(|_| poisoned())?
            .get(key)
            .map(|waiter| waiter.record.clone());
        if let Some(mut record) = own_record {
            let written = record.wait_for(|record| !matches!(record, Record::Pending));
            // Bounded by the registration's own commands; a stuck one fails the claim below.
            let _ = tokio::time::timeout(inner.command_timeout * 4, written).await;
        }
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

    async fn set_record(
        &self,
        key: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<(), StoreError> {
        // A record is only worth writing while answers for it can reach this replica.
        let mut subscribed = self.subscribed.subscribe();
        let subscribing = subscribed.wait_for(|subscribed| *subscribed);
        if !matches!(
            tokio::time::timeout(self.command_timeout, subscribing).await,
            Ok(Ok(_))
        ) {
            return Err(not_subscribed());
        }
        let ttl = (timeout + RECORD_GRACE).min(MAX_RECORD_TTL);
        let mut set = ::redis::cmd("SET");
        set.arg(self.record_key(key))
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let reply: ::redis::Value = self.commands.query(&set, self.command_timeout).await?;
        match set_nx_outcome(&reply) {
            Some(true) => Ok(()),
            Some(false) => Err(StoreError::Unavailable(
                "an answer for this key is already awaited on another replica".to_owned(),
            )),
            None => Err(unexpected_reply("SET NX")),
        }
    }

    /// Gives `answer` to this replica's waiter `waiter` for `key`, if it is still there.
    /// `true` exactly when the waiter's receiver took it (see `wait`'s close-then-look).
    fn hand_over_locally(&self, key: &str, waiter: u64, answer: Vec<u8>) -> bool {
        let Ok(mut waiters) = self.waiters.lock() else {
            return false;
        };
        if waiters.get(key).is_none_or(|w| w.id != waiter) {
            return false;
        }
        waiters
            .remove(key)
            .is_some_and(|w| w.sender.send(answer).is_ok())
    }

    async fn hand_over_remotely(
        &self,
        replica: &str,
        key: &str,
        waiter: u64,
        answer: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let delivery = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, acknowledged) = oneshot::channel();
        lock_recovering(&self.acks).insert(delivery, sender);
        let _pending = PendingAck {
            inner: self,
            delivery,
        };
        let message = Message::Answer {
            key: key.to_owned(),
            waiter,
            delivery,
            reply_to: self.replica.clone(),
            answer,
        };
        let mut publish = ::redis::cmd("PUBLISH");
        publish.arg(self.channel(replica)).arg(message.encode());
        let receivers: i64 = self.commands.query(&publish, self.command_timeout).await?;
        // Standalone, nobody on the channel means the waiter's replica is gone and its waiter
        // with it. In a Cluster the count only covers the node that took the PUBLISH.
        if receivers == 0 && !self.endpoint.is_cluster() {
            return Ok(false);
        }
        match tokio::time::timeout(self.command_timeout, acknowledged).await {
            Ok(Ok(taken)) => Ok(taken),
            Ok(Err(_)) => Err(StoreError::Unavailable(
                "answer hand-over acknowledgement lost".to_owned(),
            )),
            // The waiter may or may not have it: not knowing is an error, not `false`.
            Err(_elapsed) => Err(StoreError::Timeout),
        }
    }

    /// Keeps this replica subscribed to its channel for as long as the handover lives.
    async fn subscribe_forever(self: Arc<Self>, clients: Vec<Client>) {
        let channel = self.channel(&self.replica);
        let mut backoff = MIN_BACKOFF;
        for client in clients.iter().cycle() {
            let error = self.listen(client, &channel, &mut backoff).await;
            let was_subscribed = self.subscribed.send_replace(false);
            if was_subscribed {
                warn!(redis = %self.endpoint, %error, "answer hand-over subscription lost; reconnecting");
            } else {
                debug!(redis = %self.endpoint, %error, "answer hand-over subscriber cannot connect");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Subscribes through `client` and handles messages until the connection fails.
    async fn listen(
        self: &Arc<Self>,
        client: &Client,
        channel: &str,
        backoff: &mut Duration,
    ) -> StoreError {
        let limit = connection_timeout(self.command_timeout);
        let pubsub = match tokio::time::timeout(limit, client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(error)) => return store_error(error),
            Err(_elapsed) => return StoreError::Timeout,
        };
        let (mut sink, mut messages) = pubsub.split();
        match tokio::time::timeout(limit, sink.subscribe(channel)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return store_error(error),
            Err(_elapsed) => return StoreError::Timeout,
        }
        *backoff = MIN_BACKOFF;
        self.subscribed.send_replace(true);
        info!(redis = %self.endpoint, "answer hand-over subscribed");
        let start = tokio::time::Instant::now() + HEALTH_CHECK_INTERVAL;
        let mut health = tokio::time::interval_at(start, HEALTH_CHECK_INTERVAL);
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => self.on_message(message.get_payload_bytes()),
                    None => return StoreError::Unavailable("redis: subscriber connection closed".to_owned()),
                },
                _ = health.tick() => {
                    match tokio::time::timeout(limit, sink.ping::<::redis::Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => return store_error(error),
                        Err(_elapsed) => return StoreError::Timeout,
                    }
                }
            }
        }
    }

    fn on_message(self: &Arc<Self>, payload: &[u8]) {
        match Message::decode(payload) {
            Some(Message::Answer {
                key,
                waiter,
                delivery,
                reply_to,
                answer,
            }) => {
                let taken = self.hand_over_locally(&key, waiter, answer);
                let inner = Arc::clone(self);
                // Off the subscriber's loop, which must keep reading.
                self.runtime.spawn(async move {
                    let mut publish = ::redis::cmd("PUBLISH");
                    publish
                        .arg(inner.channel(&reply_to))
                        .arg(Message::Ack { delivery, taken }.encode());
                    if let Err(error) = inner
                        .commands
                        .query::<i64>(&publish, inner.command_timeout)
                        .await
                    {
                        debug!(%error, "could not acknowledge a handed-over answer");
                    }
                });
            }
            Some(Message::Ack { delivery, taken }) => {
                if let Some(sender) = lock_recovering(&self.acks).remove(&delivery) {
                    let _ = sender.send(taken);
                }
            }
            None => debug!("ignored a malformed answer hand-over message"),
        }
    }
}

impl RecordTask {
    async fn run(self, inner: Arc<Inner>) {
        let Self {
            key,
            id,
            timeout,
            previous,
            mut done,
            record,
            finished,
        } = self;
        // One registration per key at a time: a finished waiter's cleanup can then never
        // delete a later waiter's record, nor its late SET take the key from it.
        if let Some(previous) = previous {
            let _ = previous.await;
        }
        // A waiter already gone (dropped unpolled) needs no record.
        if matches!(done.try_recv(), Err(TryRecvError::Empty)) {
            let token = inner.token(id);
            let written = inner.set_record(&key, &token, timeout).await;
            record.send_replace(match written {
                Ok(()) => Record::Written,
                Err(error) => Record::Failed(error),
            });
            let _ = (&mut done).await;
            // Also after a failed or timed-out SET, which may have landed all the same.
            let mut delete = ::redis::cmd("EVAL");
            delete
                .arg(DELETE_IF_OURS)
                .arg(1)
                .arg(inner.record_key(&key))
                .arg(&token);
            if let Err(error) = inner
                .commands
                .query::<i64>(&delete, inner.command_timeout)
                .await
            {
                debug!(%error, "could not delete an answer waiter's record; it expires by itself");
            }
        }
        let mut registrars = lock_recovering(&inner.registrars);
        if registrars
            .get(&key)
            .is_some_and(|(latest, _)| *latest == id)
        {
            registrars.remove(&key);
        }
        drop(registrars);
        drop(finished);
    }
}

/// Resolves with the error when the waiter's record could not be written; never otherwise.
async fn record_failure(record: &mut watch::Receiver<Record>) -> StoreError {
    loop {
        if let Record::Failed(error) = &*record.borrow_and_update() {
            return error.clone();
        }
        if record.changed().await.is_err() {
            return future::pending().await;
        }
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

/// What replicas send each other on their channels. Binary, length-prefixed, so keys and
/// answers are carried byte-exact.
#[derive(Debug, PartialEq, Eq)]
enum Message {
    /// `A` key-len:u32 key waiter:u64 delivery:u64 reply-to(32 bytes) answer…
    Answer {
        key: String,
        waiter: u64,
        delivery: u64,
        reply_to: String,
        answer: Vec<u8>,
    },
    /// `K` delivery:u64 taken:u8
    Ack { delivery: u64, taken: bool },
}

impl Message {
    fn encode(&self) -> Vec<u8> {
        match self {
            Self::Answer {
                key,
                waiter,
                delivery,
                reply_to,
                answer,
            } => {
                let key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
                let mut out = Vec::with_capacity(1 + 4 + key.len() + 16 + 32 + answer.len());
                out.push(b'A');
                out.extend_from_slice(&key_len.to_be_bytes());
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(&waiter.to_be_bytes());
                out.extend_from_slice(&delivery.to_be_bytes());
                out.extend_from_slice(reply_to.as_bytes());
                out.extend_from_slice(answer);
                out
            }
            Self::Ack { delivery, taken } => {
                let mut out = Vec::with_capacity(10);
                out.push(b'K');
                out.extend_from_slice(&delivery.to_be_bytes());
                out.push(u8::from(*taken));
                out
            }
        }
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (&tag, rest) = bytes.split_first()?;
        match tag {
            b'A' => {
                let (key_len, rest) = split_u32(rest)?;
                let (key, rest) = rest.split_at_checked(usize::try_from(key_len).ok()?)?;
                let (waiter, rest) = split_u64(rest)?;
                let (delivery, rest) = split_u64(rest)?;
                let (reply_to, answer) = rest.split_at_checked(32)?;
                let reply_to = std::str::from_utf8(reply_to).ok()?;
                is_replica_id(reply_to).then_some(())?;
                Some(Self::Answer {
                    key: String::from_utf8(key.to_vec()).ok()?,
                    waiter,
                    delivery,
                    reply_to: reply_to.to_owned(),
                    answer: answer.to_vec(),
                })
            }
            b'K' => {
                let (delivery, rest) = split_u64(rest)?;
                match rest {
                    [0] => Some(Self::Ack {
                        delivery,
                        taken: false,
                    }),
                    [1] => Some(Self::Ack {
                        delivery,
                        taken: true,
                    }),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

fn split_u32(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*head), rest))
}

fn split_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), rest))
}

#[cfg(test)]
mod codec_tests {
    use super::*;

    const REPLICA: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn messages_round_trip_byte_exact() {
        let messages = [
            Message::Answer {
                key: "k{x}:é\u{0}".to_owned(),
                waiter: 7,
                delivery: u64::MAX,
                reply_to: REPLICA.to_owned(),
                answer: vec![0, 255, b'{', b'}'],
            },
            Message::Answer {
                key: String::new(),
                waiter: 0,
                delivery: 0,
                reply_to: REPLICA.to_owned(),
                answer: Vec::new(),
            },
            Message::Ack {
                delivery: 3,
                taken: true,
            },
            Message::Ack {
                delivery: 4,
                taken: false,
            },
        ];
        for message in messages {
            assert_eq!(Message::decode(&message.encode()), Some(message));
        }
    }

    #[test]
    fn truncated_or_foreign_messages_are_ignored() {
        let answer = Message::Answer {
            key: "key".to_owned(),
            waiter: 1,
            delivery: 2,
            reply_to: REPLICA.to_owned(),
            answer: b"yes".to_vec(),
        }
        .encode();
        // Every cut through the fixed fields leaves something undecodable.
        for len in 0..answer.len() - 3 {
            assert_eq!(Message::decode(&answer[..len]), None, "cut at {len}");
        }
        assert_eq!(Message::decode(b"K\0\0\0\0\0\0\0\x01\x02"), None);
        assert_eq!(Message::decode(b"hello"), None);
        let mut bad_replica = answer.clone();
        bad_replica[1 + 4 + 3 + 16] = b'Z';
        assert_eq!(Message::decode(&bad_replica), None);
    }

    #[test]
    fn tokens_name_a_replica_and_a_waiter() {
        assert_eq!(parse_token(&format!("{REPLICA}/42")), Some((REPLICA, 42)));
        assert_eq!(parse_token("short/1"), None);
        assert_eq!(parse_token(&format!("{REPLICA}/x")), None);
        assert_eq!(parse_token(REPLICA), None);
    }
}
