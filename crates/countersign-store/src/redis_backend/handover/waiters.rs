//! The local waiter registry: registering a wait (one per key on this replica), the guard that
//! removes it however the wait ends, and the background task that writes, keeps and deletes
//! the waiter's Redis record.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::{self, FutureExt as _, Shared};
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{oneshot, watch};
use tracing::debug;

use super::super::{set_nx_outcome, unexpected_reply};
use super::{Inner, RedisAnswerHandover, lock_recovering, not_subscribed, poisoned};
use crate::StoreError;

/// How much longer than its wait a waiter's record lives, so it is still there at the
/// deadline despite clock and scheduling slack; the waiter deletes it on its way out anyway.
const RECORD_GRACE: Duration = Duration::from_secs(1);

/// The longest a waiter's record is kept, whatever the wait's timeout (Redis refuses expiries
/// that overflow its clock).
const MAX_RECORD_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Compare-and-delete: a waiter removes its own record, never a later waiter's.
const DELETE_IF_OURS: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Resolves when a registration task has finished (its sender is dropped).
pub(super) type Finished = Shared<oneshot::Receiver<()>>;

/// What `wait` holds: its registration guard, the answer channel and the record's state.
pub(super) struct Registered<'a> {
    pub(super) registration: Registration<'a>,
    pub(super) answer: oneshot::Receiver<Vec<u8>>,
    pub(super) record: watch::Receiver<Record>,
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

pub(super) struct LocalWaiter {
    /// Tells this registration apart from a later one under the same key.
    id: u64,
    sender: oneshot::Sender<Vec<u8>>,
    pub(super) record: watch::Receiver<Record>,
}

/// Where the waiter's Redis record stands.
#[derive(Debug, Clone)]
pub(super) enum Record {
    Pending,
    Written,
    Failed(StoreError),
}

/// Removes the local registration when the wait ends in any way, then (by dropping `done`)
/// lets the registration task delete the Redis record.
pub(super) struct Registration<'a> {
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

impl RedisAnswerHandover {
    pub(super) fn register<'a>(
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
}

impl Inner {
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
    pub(super) fn hand_over_locally(&self, key: &str, waiter: u64, answer: Vec<u8>) -> bool {
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
pub(super) async fn record_failure(record: &mut watch::Receiver<Record>) -> StoreError {
    loop {
        if let Record::Failed(error) = &*record.borrow_and_update() {
            return error.clone();
        }
        if record.changed().await.is_err() {
            return future::pending().await;
        }
    }
}
