//! Shared pinned risks in Redis: one hash per upstream, `<ns>:{catalog:<upstream>}:pins`, tool
//! name → risk ordinal, raised (never lowered) by a script so concurrent replicas cannot lose
//! a raise, and kept for [`PIN_TTL`] after the last write.

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::endpoint::Endpoint;
use super::{Commands, validate_namespace};
use crate::StoreError;
use crate::pins::{PinShare, SharedPin};

/// How long shared pins outlive the last replica that wrote them.
pub(super) const PIN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// For each (tool, risk) argument pair: keep the higher of the stored and the given risk, then
/// return every field. One key, so it is atomic and Cluster-safe.
const RAISE: &str = r"
for i = 1, #ARGV - 1, 2 do
  local current = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  local wanted = tonumber(ARGV[i + 1])
  if wanted > current then redis.call('HSET', KEYS[1], ARGV[i], wanted) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[#ARGV])
return redis.call('HGETALL', KEYS[1])
";

pub struct RedisPinShare {
    namespace: String,
    command_timeout: Duration,
    commands: Commands,
}

impl fmt::Debug for RedisPinShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPinShare")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisPinShare {
    pub async fn connect(
        url: &str,
        namespace: &str,
        command_timeout: Duration,
    ) -> Result<Self, StoreError> {
        validate_namespace(namespace)?;
        let endpoint = Endpoint::parse(url, command_timeout)?;
        let commands = endpoint.connect(command_timeout).await?;
        Ok(Self {
            namespace: namespace.to_owned(),
            command_timeout,
            commands,
        })
    }

    fn key(&self, upstream: &str) -> String {
        format!("{}:{{catalog:{upstream}}}:pins", self.namespace)
    }
}

impl PinShare for RedisPinShare {
    fn raise<'a>(
        &'a self,
        upstream: &'a str,
        pins: &'a [SharedPin],
    ) -> BoxFuture<'a, Result<Vec<SharedPin>, StoreError>> {
        Box::pin(async move {
            let mut eval = ::redis::cmd("EVAL");
            eval.arg(RAISE).arg(1).arg(self.key(upstream));
            for (tool, risk) in pins {
                eval.arg(tool).arg(*risk);
            }
            eval.arg(PIN_TTL.as_millis() as u64);
            let reply: ::redis::Value = self.commands.query(&eval, self.command_timeout).await?;
            let fields: Vec<String> = ::redis::from_redis_value(reply).map_err(|e| {
                StoreError::Unavailable(format!("unexpected reply to the pin script: {e}"))
            })?;
            let mut shared = Vec::with_capacity(fields.len() / 2);
            for pair in fields.chunks(2) {
                if let [tool, risk] = pair
                    && let Ok(risk) = risk.parse::<u8>()
                {
                    shared.push((tool.clone(), risk));
                }
            }
            Ok(shared)
        })
    }
}
