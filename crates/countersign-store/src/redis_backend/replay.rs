//! Spent `jti`s in Redis: one `SET NX PXAT` per consume.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt as _};
use tracing::{debug, warn};

use super::endpoint::{self, Endpoint};
use super::per_runtime::PerRuntime;
use super::{Commands, set_nx_outcome, unexpected_reply, validate_namespace};
use crate::{Consumption, ReplayStore, StoreError};

/// Spent `jti`s shared by every replica using the same Redis (or Redis Cluster) and namespace.
///
/// A consume is `SET <ns>:{<jti>}:jti 1 NX PXAT <expires_at_unix_ms>`, sent once, bounded by
/// the command timeout. Any error or timeout is returned as a [`StoreError`] and never
/// retried; a standalone connection reconnects in the background, so consumes work again as
/// soon as Redis is back.
pub struct RedisReplayStore {
    endpoint: Endpoint,
    namespace: String,
    command_timeout: Duration,
    /// `SET NX`s go over the calling runtime's own connection: see `per_runtime.rs`.
    commands: PerRuntime,
}

impl RedisReplayStore {
    /// Connects to `url` (see the crate README for the accepted forms) and checks that Redis
    /// answers a `PING` within `command_timeout`, which then bounds every command.
    ///
    /// Fails on a malformed URL or namespace, or when Redis cannot be reached now. Logs a
    /// warning when Redis reports a `maxmemory-policy` other than `noeviction`: an evicting
    /// Redis may drop live records and re-open replay.
    pub async fn connect(
        url: &str,
        namespace: &str,
        command_timeout: Duration,
    ) -> Result<Self, StoreError> {
        validate_namespace(namespace)?;
        let endpoint = Endpoint::parse(url, command_timeout)?;
        let commands = endpoint.connect_per_runtime(command_timeout).await?;
        warn_if_evicting(commands.shared(), &endpoint, command_timeout).await;
        Ok(Self {
            endpoint,
            namespace: namespace.to_owned(),
            command_timeout,
            commands,
        })
    }

    /// How many runtimes other than the connecting one have their own connection.
    #[cfg(test)]
    pub(super) fn runtime_connections(&self) -> usize {
        self.commands.others()
    }

    /// The key a `jti` is recorded under. The hash tag makes the `jti` alone pick the Cluster
    /// slot, so records spread over all shards and any later per-`jti` key lands beside it.
    /// Written by hand: `format!` cost about 900 instructions on every redemption.
    fn key(&self, jti: &str) -> String {
        let mut key = String::with_capacity(self.namespace.len() + jti.len() + 7);
        key.push_str(&self.namespace);
        key.push_str(":{");
        key.push_str(jti);
        key.push_str("}:jti");
        key
    }

    async fn consume_once(
        &self,
        jti: &str,
        expires_at_unix_ms: u64,
    ) -> Result<Consumption, StoreError> {
        let mut set = ::redis::cmd("SET");
        set.arg(self.key(jti))
            .arg(1)
            .arg("NX")
            .arg("PXAT")
            // Redis refuses PXAT 0; 1 ms is just as far in the past and stores nothing either,
            // like the memory store.
            .arg(expires_at_unix_ms.max(1));
        let reply: ::redis::Value = self
            .commands
            .current()
            .query(&set, self.command_timeout)
            .await?;
        match set_nx_outcome(&reply) {
            Some(true) => Ok(Consumption::First),
            Some(false) => Ok(Consumption::AlreadySpent),
            None => Err(unexpected_reply("SET NX")),
        }
    }
}

async fn warn_if_evicting(commands: &Commands, endpoint: &Endpoint, timeout: Duration) {
    let mut get = ::redis::cmd("CONFIG");
    get.arg("GET").arg("maxmemory-policy");
    match commands
        .query::<HashMap<String, String>>(&get, timeout)
        .await
    {
        Ok(config) => match config.get("maxmemory-policy") {
            Some(policy) if policy != "noeviction" => warn!(
                redis = %endpoint,
                policy = %policy,
                "redis may evict spent token ids under memory pressure, re-opening replay; \
                 set maxmemory-policy noeviction"
            ),
            _ => {}
        },
        // Managed Redis often disables CONFIG; the README says what to set.
        Err(error) => debug!(redis = %endpoint, %error, "could not read maxmemory-policy"),
    }
}

impl fmt::Debug for RedisReplayStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisReplayStore")
            .field("endpoint", &self.endpoint)
            .field("namespace", &self.namespace)
            .field("command_timeout", &self.command_timeout)
            .finish_non_exhaustive()
    }
}

impl ReplayStore for RedisReplayStore {
    fn consume<'a>(
        &'a self,
        jti: &'a str,
        expires_at_unix_ms: u64,
    ) -> BoxFuture<'a, Result<Consumption, StoreError>> {
        self.consume_once(jti, expires_at_unix_ms).boxed()
    }

    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        endpoint::ping(self.commands.shared(), self.command_timeout).boxed()
    }
}
