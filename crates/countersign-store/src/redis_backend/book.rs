//! Pending approvals in Redis, shared by every replica.
//!
//! A request is one hash, `<ns>:{<key>}:approval` with fields `r` (request), `e` (expiry, Unix
//! ms) and, once decided, `d` (decision), expiring at `e` (`PEXPIREAT`), so a decision dies
//! with its request. Creating and deciding are Lua scripts, so each is one atomic step: of any
//! number of deciders on any replicas exactly one writes `d`. The deciding script also
//! publishes the key on `<ns>:approvals:decided`, which every replica's subscriber relays to its
//! local waiters ([`subscriber`]); a waiter subscribes before it reads, and re-reads now and then
//! and whenever the subscription was re-established, so a decision is never missed, only seen
//! a little later.

mod subscriber;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt as _};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::endpoint::{self, Endpoint};
use super::{Commands, unexpected_reply, validate_namespace};
use crate::{ApprovalBook, ApprovalEntry, Decided, StoreError};

/// Writes `r` and `e` unless the hash exists, and sets its expiry. An expiry in the past makes
/// Redis delete the hash at once: nothing is kept, as in the memory book.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'r', ARGV[1], 'e', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
";

/// `{1}` taken, `{2, first}` decided before, `{0}` no such request. `HSET` on a field keeps the
/// hash's expiry.
const DECIDE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local first = redis.call('HGET', KEYS[1], 'd')
if first then return {2, first} end
redis.call('HSET', KEYS[1], 'd', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {1}
";

/// How often a waiter re-reads its request even without an announcement: the safety net for
/// an announcement lost while the subscriber was reconnecting.
const REREAD_INTERVAL: Duration = Duration::from_secs(2);

/// Announcements buffered for slow local waiters; one that lags re-reads (see the memory book).
const ANNOUNCEMENTS: usize = 1024;

/// Approval requests shared by every replica using the same Redis (or Redis Cluster) and
/// namespace. Each instance keeps one pub/sub subscription up until dropped.
pub struct RedisApprovalBook {
    inner: Arc<Inner>,
    subscriber: JoinHandle<()>,
}

struct Inner {
    endpoint: Endpoint,
    namespace: String,
    command_timeout: Duration,
    commands: Commands,
    /// Decided keys as announced on the channel; an empty key means "re-read everything" (sent
    /// after the subscription was re-established).
    decided: broadcast::Sender<Arc<str>>,
}

impl RedisApprovalBook {
    /// Connects to `url` (same forms as [`crate::RedisReplayStore::connect`]) and starts the
    /// subscriber; `command_timeout` bounds every command.
    pub async fn connect(
        url: &str,
        namespace: &str,
        command_timeout: Duration,
    ) -> Result<Self, StoreError> {
        validate_namespace(namespace)?;
        let endpoint = Endpoint::parse(url, command_timeout)?;
        let commands = endpoint.connect(command_timeout).await?;
        let clients = endpoint.subscriber_clients();
        let inner = Arc::new(Inner {
            endpoint,
            namespace: namespace.to_owned(),
            command_timeout,
            commands,
            decided: broadcast::channel(ANNOUNCEMENTS).0,
        });
        let subscriber = tokio::spawn(Arc::clone(&inner).subscribe_forever(clients));
        Ok(Self { inner, subscriber })
    }
}

impl Inner {
    /// The hash tag makes the request key alone pick the Cluster slot.
    fn key(&self, key: &str) -> String {
        format!("{}:{{{key}}}:approval", self.namespace)
    }

    fn channel(&self) -> String {
        format!("{}:approvals:decided", self.namespace)
    }

    async fn create(
        &self,
        key: &str,
        request: Vec<u8>,
        expires_at_unix_ms: u64,
    ) -> Result<(), StoreError> {
        let mut eval = ::redis::cmd("EVAL");
        eval.arg(CREATE)
            .arg(1)
            .arg(self.key(key))
            .arg(request)
            // Redis refuses PEXPIREAT 0 no more than 1, and both are in the past.
            .arg(expires_at_unix_ms.max(1));
        let created: i64 = self.commands.query(&eval, self.command_timeout).await?;
        match created {
            1 => Ok(()),
            0 => Err(StoreError::Unavailable(
                "an approval request with this key already exists".to_owned(),
            )),
            _ => Err(unexpected_reply("EVAL create")),
        }
    }

    async fn read(&self, key: &str) -> Result<Option<ApprovalEntry>, StoreError> {
        let mut get = ::redis::cmd("HMGET");
        get.arg(self.key(key)).arg("r").arg("e").arg("d");
        let fields: Vec<Option<Vec<u8>>> = self.commands.query(&get, self.command_timeout).await?;
        let [request, expiry, decision] =
            <[Option<Vec<u8>>; 3]>::try_from(fields).map_err(|_| unexpected_reply("HMGET"))?;
        let Some(request) = request else {
            return Ok(None);
        };
        let expires_at_unix_ms = expiry
            .and_then(|e| String::from_utf8(e).ok())
            .and_then(|e| e.parse().ok())
            .ok_or_else(|| unexpected_reply("HMGET (expiry)"))?;
        Ok(Some(ApprovalEntry {
            request,
            expires_at_unix_ms,
            decision,
        }))
    }

    async fn decide(&self, key: &str, decision: Vec<u8>) -> Result<Decided, StoreError> {
        let mut eval = ::redis::cmd("EVAL");
        eval.arg(DECIDE)
            .arg(1)
            .arg(self.key(key))
            .arg(decision)
            .arg(self.channel())
            .arg(key);
        let reply: Vec<::redis::Value> = self.commands.query(&eval, self.command_timeout).await?;
        match reply.as_slice() {
            [::redis::Value::Int(1)] => Ok(Decided::First),
            [::redis::Value::Int(0)] => Ok(Decided::Gone),
            [::redis::Value::Int(2), ::redis::Value::BulkString(first)] => {
                Ok(Decided::Already(first.clone()))
            }
            _ => Err(unexpected_reply("EVAL decide")),
        }
    }

    async fn wait(
        &self,
        key: &str,
        timeout: Duration,
        mut announcements: broadcast::Receiver<Arc<str>>,
    ) -> Result<Option<ApprovalEntry>, StoreError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Read after subscribing, so a decision taken before the subscription is seen.
            match self.read(key).await? {
                Some(entry) if entry.decision.is_none() => {}
                decided_or_gone => return Ok(decided_or_gone),
            }
            let reread = tokio::time::Instant::now() + REREAD_INTERVAL;
            loop {
                tokio::select! {
                    announced = announcements.recv() => match announced {
                        Ok(decided) if !decided.is_empty() && &*decided != key => {}
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return self.read(key).await,
                    },
                    () = tokio::time::sleep_until(reread.min(deadline)) => {
                        if tokio::time::Instant::now() >= deadline {
                            return self.read(key).await;
                        }
                        break;
                    }
                }
            }
        }
    }
}

impl Drop for RedisApprovalBook {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl fmt::Debug for RedisApprovalBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisApprovalBook")
            .field("endpoint", &self.inner.endpoint)
            .field("namespace", &self.inner.namespace)
            .field("command_timeout", &self.inner.command_timeout)
            .finish_non_exhaustive()
    }
}

impl ApprovalBook for RedisApprovalBook {
    fn create<'a>(
        &'a self,
        key: &'a str,
        request: Vec<u8>,
        expires_at_unix_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.create(key, request, expires_at_unix_ms).boxed()
    }

    fn read<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApprovalEntry>, StoreError>> {
        self.inner.read(key).boxed()
    }

    fn decide<'a>(
        &'a self,
        key: &'a str,
        decision: Vec<u8>,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        self.inner.decide(key, decision).boxed()
    }

    fn wait<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<ApprovalEntry>, StoreError>> {
        // Subscribed to the local relay now, before the first read.
        let announcements = self.inner.decided.subscribe();
        self.inner.wait(key, timeout, announcements).boxed()
    }

    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        endpoint::ping(&self.inner.commands, self.inner.command_timeout).boxed()
    }
}
