//! Shared rate-limit buckets in Redis: one key per bucket, `<ns>:rl:<bucket>:{<group>}`, holding
//! the instant (Redis server time, microseconds) at which the bucket is full again, and expiring
//! then — a full bucket needs no key. One script takes from all of a group's buckets at once.

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::endpoint::Endpoint;
use super::per_runtime::PerRuntime;
use super::validate_namespace;
use crate::StoreError;
use crate::rates::{BucketTake, RateDecision, RateShare};

/// The token bucket in its GCRA form, on Redis's own clock so replicas with skewed clocks still
/// agree. ARGV holds (interval µs, burst, cost) per key. Either every bucket has room and each
/// moves `cost` intervals ahead, or nothing is written and the reply names the bucket with the
/// longest wait: `{0, 0}` taken, `{i, wait µs}` refused.
const TAKE: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local full_at = {}
local worst, wait = 0, 0
for i = 1, #KEYS do
  local interval = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local at = tonumber(redis.call('GET', KEYS[i]) or '') or 0
  if at < now then at = now end
  at = at + cost * interval
  local over = at - now - burst * interval
  if over > wait then worst, wait = i, over end
  full_at[i] = at
end
if worst > 0 then return {worst, wait} end
for i = 1, #KEYS do
  local ttl_ms = math.max(1, math.ceil((full_at[i] - now) / 1000))
  redis.call('SET', KEYS[i], string.format('%.0f', full_at[i]), 'PX', ttl_ms)
end
return {0, 0}
";

/// Rate-limit buckets shared by every replica using the same Redis and namespace.
///
/// A group's keys share the hash tag `{<group>}`, so the script's keys always sit in one Cluster
/// slot. Errors and timeouts come back as [`StoreError`]s; whether that refuses the request or
/// lets the replica decide alone is the caller's choice.
pub struct RedisRateShare {
    namespace: String,
    command_timeout: Duration,
    commands: PerRuntime,
}

impl fmt::Debug for RedisRateShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRateShare")
            .field("namespace", &self.namespace)
            .field("command_timeout", &self.command_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisRateShare {
    /// Connects to `url` and checks that Redis answers a `PING` within `command_timeout`, which
    /// then bounds every take.
    pub async fn connect(
        url: &str,
        namespace: &str,
        command_timeout: Duration,
    ) -> Result<Self, StoreError> {
        validate_namespace(namespace)?;
        let endpoint = Endpoint::parse(url, command_timeout)?;
        let commands = endpoint.connect_per_runtime(command_timeout).await?;
        Ok(Self {
            namespace: namespace.to_owned(),
            command_timeout,
            commands,
        })
    }

    /// The bucket's key. Namespace and bucket names contain no `{`, so the first brace is ours:
    /// the group alone picks the slot, and no two (bucket, group) pairs share a key whatever the
    /// group's characters.
    pub(super) fn key(&self, bucket: &str, group: &str) -> String {
        format!("{}:rl:{bucket}:{{{group}}}", self.namespace)
    }
}

impl RateShare for RedisRateShare {
    fn take<'a>(
        &'a self,
        group: &'a str,
        takes: &'a [BucketTake<'a>],
    ) -> BoxFuture<'a, Result<RateDecision, StoreError>> {
        Box::pin(async move {
            if takes.is_empty() {
                return Ok(RateDecision::Taken);
            }
            let mut eval = ::redis::cmd("EVAL");
            eval.arg(TAKE).arg(takes.len());
            for take in takes {
                eval.arg(self.key(take.bucket, group));
            }
            for take in takes {
                // At least 1 µs, so a bucket always refills at a finite pace.
                let interval_us = u64::try_from(take.interval.as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                eval.arg(interval_us).arg(take.burst).arg(take.cost);
            }
            let reply: (i64, i64) = self
                .commands
                .current()
                .query(&eval, self.command_timeout)
                .await?;
            match reply {
                (0, _) => Ok(RateDecision::Taken),
                (index, wait_us) => {
                    let bucket = usize::try_from(index - 1)
                        .ok()
                        .filter(|i| *i < takes.len())
                        .ok_or_else(|| {
                            StoreError::Unavailable(
                                "redis: the rate script named no such bucket".to_owned(),
                            )
                        })?;
                    let retry_after = Duration::from_micros(u64::try_from(wait_us).unwrap_or(1));
                    Ok(RateDecision::Refused {
                        bucket,
                        retry_after,
                    })
                }
            }
        })
    }
}
