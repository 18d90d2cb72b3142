//! The single-replica answer hand-over: a map of waiting oneshot channels.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt as _};
use tokio::sync::oneshot;

use crate::{AnswerHandover, StoreError};

/// Answers handed over within one process.
///
/// At most `max_waiters` keys wait at once (beyond that, [`StoreError::Full`]); a key has at
/// most one waiter, and a second `wait` on a busy key is refused rather than stealing the
/// first one's answer.
pub struct MemoryAnswerHandover {
    max_waiters: usize,
    next_id: AtomicU64,
    waiters: Mutex<HashMap<String, Waiter>>,
}

struct Waiter {
    /// Tells this registration apart from a later one under the same key, so a finished
    /// waiter's cleanup never removes its successor.
    id: u64,
    sender: oneshot::Sender<Vec<u8>>,
}

/// Removes its registration when the wait ends in any way, including the future being
/// dropped (the client went away, the request was cancelled).
struct Registration<'a> {
    owner: &'a MemoryAnswerHandover,
    key: &'a str,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // Cleanup must run even after a panic elsewhere poisoned the lock.
        let mut waiters = self.owner.waiters_recovering();
        if waiters.get(self.key).is_some_and(|w| w.id == self.id) {
            waiters.remove(self.key);
        }
    }
}

impl MemoryAnswerHandover {
    pub fn new(max_waiters: usize) -> Self {
        Self {
            max_waiters,
            next_id: AtomicU64::new(0),
            waiters: Mutex::new(HashMap::new()),
        }
    }

    /// Keys currently waited on (for metrics).
    pub fn waiting(&self) -> usize {
        self.waiters_recovering().len()
    }

    fn register<'a>(
        &'a self,
        key: &'a str,
    ) -> Result<(Registration<'a>, oneshot::Receiver<Vec<u8>>), StoreError> {
        let mut waiters = self.waiters.lock().map_err(|_| poisoned())?;
        if waiters.contains_key(key) {
            return Err(StoreError::Unavailable(
                "an answer for this key is already awaited".to_owned(),
            ));
        }
        if waiters.len() >= self.max_waiters {
            return Err(StoreError::Full);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        waiters.insert(key.to_owned(), Waiter { id, sender });
        Ok((
            Registration {
                owner: self,
                key,
                id,
            },
            receiver,
        ))
    }

    fn waiters_recovering(&self) -> MutexGuard<'_, HashMap<String, Waiter>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn poisoned() -> StoreError {
    StoreError::Unavailable("memory answer hand-over lock poisoned".to_owned())
}

impl fmt::Debug for MemoryAnswerHandover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryAnswerHandover")
            .field("max_waiters", &self.max_waiters)
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl AnswerHandover for MemoryAnswerHandover {
    fn wait<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        // Registered now, before the caller sends the prompt (see the trait docs), and the
        // deadline counts from now too, not from the first poll.
        let registration = self.register(key);
        let deadline = tokio::time::Instant::now() + timeout;
        async move {
            let (registration, mut receiver) = registration?;
            let answer = match tokio::time::timeout_at(deadline, &mut receiver).await {
                Ok(Ok(answer)) => Some(answer),
                // The sender is only dropped together with its registration.
                Ok(Err(_)) => None,
                Err(_elapsed) => {
                    // Close first, then look: a delivery that won the race is kept (its
                    // `deliver` returned true), and any later one now sees a closed channel.
                    // So `deliver` returns true exactly when a waiter got the answer.
                    receiver.close();
                    receiver.try_recv().ok()
                }
            };
            drop(registration);
            Ok(answer)
        }
        .boxed()
    }

    fn reachable<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        // In one process a registered waiter is reachable the moment it is registered.
        let reachable = match self.waiters.lock() {
            Ok(waiters) if waiters.contains_key(key) => Ok(()),
            Ok(_) => Err(StoreError::nobody_waits()),
            Err(_) => Err(poisoned()),
        };
        futures_util::future::ready(reachable).boxed()
    }

    fn deliver<'a>(
        &'a self,
        key: &'a str,
        answer: Vec<u8>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let delivered = self
            .waiters
            .lock()
            .map_err(|_| poisoned())
            .map(|mut waiters| waiters.remove(key))
            .map(|waiter| waiter.is_some_and(|w| w.sender.send(answer).is_ok()));
        futures_util::future::ready(delivered).boxed()
    }
}

#[cfg(test)]
mod tests;
