//! The Redis backends: what replicas behind one load balancer share (the README's Several replicas section).
//!
//! Everything here fails closed. A command that errors, or does not answer within the
//! configured timeout, becomes a [`StoreError`]; nothing is retried behind the caller's back,
//! since a second `SET NX` after an unknown first attempt would misreport a legitimate
//! confirmation as a replay. Key layout, URL forms and the reasons for each rule are in the
//! crate's README.

mod book;
mod endpoint;
mod handover;
mod per_runtime;
mod pins;
mod rates;
mod replay;

#[cfg(test)]
mod tests;

use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, FromRedisValue, RedisError};

use crate::StoreError;

pub use book::RedisApprovalBook;
pub use handover::RedisAnswerHandover;
pub use pins::RedisPinShare;
pub use rates::RedisRateShare;
pub use replay::RedisReplayStore;

/// Namespaces become the first segment of every key and channel, so they are restricted to
/// characters with no meaning to Redis: no hash-tag braces (which would pin every key to one
/// Cluster slot), no glob characters, no whitespace.
fn validate_namespace(namespace: &str) -> Result<(), StoreError> {
    let valid = !namespace.is_empty()
        && namespace.len() <= 64
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::Unavailable(
            "invalid redis namespace: use 1 to 64 characters from [A-Za-z0-9_.:-]".to_owned(),
        ))
    }
}

/// The connection commands go over: one multiplexed connection (standalone) or one per
/// Cluster node, all reconnecting in the background.
#[derive(Clone)]
enum Commands {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Commands {
    /// Runs `cmd` once, giving up after `timeout`. An elapsed timeout is an unknown outcome
    /// (the command may still run), reported as [`StoreError::Timeout`].
    async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, StoreError> {
        let reply = async {
            match self.clone() {
                Self::Standalone(mut connection) => cmd.query_async(&mut connection).await,
                Self::Cluster(mut connection) => cmd.query_async(&mut connection).await,
            }
        };
        match tokio::time::timeout(timeout, reply).await {
            Ok(reply) => reply.map_err(store_error),
            Err(_elapsed) => Err(StoreError::Timeout),
        }
    }
}

/// Maps a client or server error to the refusal it means. There is deliberately no success
/// path here: whatever Redis or the client library said, the caller refuses.
fn store_error(error: RedisError) -> StoreError {
    if error.is_timeout() {
        // The client's own response timeout: as unknown an outcome as ours.
        return StoreError::Timeout;
    }
    if error.code() == Some("OOM") {
        // With `maxmemory-policy noeviction`, OOM is exactly "full of live records".
        return StoreError::Full;
    }
    // Server errors carry Redis's own code (READONLY, CLUSTERDOWN, …), which is what an
    // operator searches for.
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => StoreError::Unavailable(format!("redis {code}: {detail}")),
        _ => StoreError::Unavailable(format!("redis: {error}")),
    }
}

/// Reads an `OK` / nil reply of `SET … NX`: `Some(true)` set, `Some(false)` not set.
fn set_nx_outcome(reply: &::redis::Value) -> Option<bool> {
    match reply {
        ::redis::Value::Okay => Some(true),
        ::redis::Value::SimpleString(s) if s == "OK" => Some(true),
        ::redis::Value::Nil => Some(false),
        _ => None,
    }
}

fn unexpected_reply(command: &str) -> StoreError {
    StoreError::Unavailable(format!("redis: unexpected reply to {command}"))
}
