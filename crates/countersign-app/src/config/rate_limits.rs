//! `rate_limits:` — per-principal token buckets for tool calls, held calls and questions put to
//! a person, optionally shared by every replica through `redis:`. Each key, its default and the
//! reason for it are in `docs/operations.md#rate-limits`.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};

use anyhow::{Context, bail, ensure};
use countersign_proxy::config::{LimitRates, OnStoreError, Rate, RateLimitConfig};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// Highest accepted `per_minute` (100,000 a second): buckets count whole microseconds.
const MAX_PER_MINUTE: u64 = 6_000_000;
/// Largest accepted `burst`.
const MAX_BURST: u64 = 1_000_000;

/// The `rate_limits:` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRateLimits {
    /// Every `tools/call` of a principal. Default `off`.
    pub calls: Option<RawRate>,
    /// Every call of a principal held for approval (a token minted or a question asked).
    /// Default `off`.
    pub held: Option<RawRate>,
    /// Every question put to a person for a principal (elicitation, `input_required`).
    /// Default `{ per_minute: 30, burst: 10 }`.
    pub questions: Option<RawRate>,
    /// Upstreams, by name, whose calls count in buckets of their own instead of the principal's
    /// shared ones, limit by limit. Default: none.
    pub per_upstream: BTreeMap<String, RawUpstreamRates>,
    /// `redis` (one budget for every replica, through `redis:`) or `local` (per replica).
    /// Default: `redis` when `redis:` is configured, else `local`.
    pub shared: Option<String>,
    /// When Redis does not answer: `open` (this replica's own buckets decide meanwhile) or
    /// `closed` (refuse with 503). Default `open`.
    pub on_store_error: Option<String>,
    /// Most principals whose buckets one replica keeps in memory. Default `100000`.
    pub max_principals: Option<usize>,
}

/// One upstream's own limits; a limit left out counts in the principal's shared bucket.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpstreamRates {
    pub calls: Option<RawRate>,
    pub held: Option<RawRate>,
    pub questions: Option<RawRate>,
}

/// `off` (also `false` or `0`), or `{ per_minute: N, burst: N }` (`per_minute: 0` is off too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawRate {
    Off,
    Bucket { per_minute: u64, burst: u64 },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBucket {
    per_minute: u64,
    burst: u64,
}

impl<'de> Deserialize<'de> for RawRate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde_yaml_ng::Value;
        let value = Value::deserialize(deserializer)?;
        match value {
            Value::String(word) if word == "off" => Ok(RawRate::Off),
            Value::Bool(false) => Ok(RawRate::Off),
            Value::Number(n) if n.as_u64() == Some(0) => Ok(RawRate::Off),
            Value::Mapping(_) => {
                let bucket: RawBucket =
                    serde_yaml_ng::from_value(value).map_err(D::Error::custom)?;
                Ok(RawRate::Bucket {
                    per_minute: bucket.per_minute,
                    burst: bucket.burst,
                })
            }
            _ => Err(D::Error::custom(
                "expected `off` or `{ per_minute: N, burst: N }`",
            )),
        }
    }
}

impl RawRate {
    fn validate(self, field: &str) -> anyhow::Result<Option<Rate>> {
        let (per_minute, burst) = match self {
            RawRate::Off | RawRate::Bucket { per_minute: 0, .. } => return Ok(None),
            RawRate::Bucket { per_minute, burst } => (per_minute, burst),
        };
        ensure!(
            per_minute <= MAX_PER_MINUTE,
            "{field}.per_minute must be at most {MAX_PER_MINUTE}"
        );
        ensure!(
            (1..=MAX_BURST).contains(&burst),
            "{field}.burst must be between 1 and {MAX_BURST} (set per_minute: 0 or `off` to turn \
             the limit off)"
        );
        let nonzero = |n: u64| {
            u32::try_from(n)
                .ok()
                .and_then(NonZeroU32::new)
                .context("checked above")
        };
        Ok(Some(Rate {
            per_minute: nonzero(per_minute)?,
            burst: nonzero(burst)?,
        }))
    }
}

/// The validated `rate_limits:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitsConfig {
    pub limits: RateLimitConfig,
    /// Count in Redis (one budget for all replicas) rather than in each replica.
    pub shared: bool,
}

impl RawRateLimits {
    /// Validates against the configured upstream names and whether `redis:` is configured.
    pub(super) fn validate(
        self,
        upstreams: &[&str],
        redis: bool,
    ) -> anyhow::Result<RateLimitsConfig> {
        let defaults = RateLimitConfig::default();
        let shared_rate = |raw: Option<RawRate>, default: &LimitRates, limit: &str| match raw {
            None => Ok(default.default),
            Some(raw) => raw.validate(&format!("rate_limits.{limit}")),
        };
        let mut limits = RateLimitConfig {
            calls: LimitRates {
                default: shared_rate(self.calls, &defaults.calls, "calls")?,
                per_upstream: BTreeMap::new(),
            },
            held: LimitRates {
                default: shared_rate(self.held, &defaults.held, "held")?,
                per_upstream: BTreeMap::new(),
            },
            questions: LimitRates {
                default: shared_rate(self.questions, &defaults.questions, "questions")?,
                per_upstream: BTreeMap::new(),
            },
            on_store_error: match self.on_store_error.as_deref() {
                None | Some("open") => OnStoreError::Open,
                Some("closed") => OnStoreError::Closed,
                Some(other) => {
                    bail!("rate_limits.on_store_error must be `open` or `closed`, not `{other}`")
                }
            },
            max_principals: NonZeroUsize::new(
                self.max_principals.unwrap_or(defaults.max_principals.get()),
            )
            .context("rate_limits.max_principals must be greater than zero")?,
        };
        for (upstream, own) in self.per_upstream {
            ensure!(
                upstreams.contains(&upstream.as_str()),
                "rate_limits.per_upstream: no upstream is named `{upstream}` (upstreams: {})",
                upstreams.join(", ")
            );
            let field = |limit: &str| format!("rate_limits.per_upstream.{upstream}.{limit}");
            for (raw, rates, limit) in [
                (own.calls, &mut limits.calls, "calls"),
                (own.held, &mut limits.held, "held"),
                (own.questions, &mut limits.questions, "questions"),
            ] {
                if let Some(raw) = raw {
                    rates
                        .per_upstream
                        .insert(upstream.clone(), raw.validate(&field(limit))?);
                }
            }
        }
        let shared = match self.shared.as_deref() {
            None => redis,
            Some("local") => false,
            Some("redis") if redis => true,
            Some("redis") => {
                bail!("rate_limits.shared: redis needs a `redis:` section (or --redis)")
            }
            Some(other) => bail!("rate_limits.shared must be `redis` or `local`, not `{other}`"),
        };
        Ok(RateLimitsConfig { limits, shared })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(yaml: &str, redis: bool) -> anyhow::Result<RateLimitsConfig> {
        let raw: RawRateLimits = serde_yaml_ng::from_str(yaml).context("parses")?;
        raw.validate(&["store", "tickets"], redis)
    }

    fn rate(per_minute: u32, burst: u32) -> Option<Rate> {
        Some(Rate {
            per_minute: NonZeroU32::new(per_minute).expect("non-zero"),
            burst: NonZeroU32::new(burst).expect("non-zero"),
        })
    }

    #[test]
    fn an_empty_section_gets_the_documented_defaults() {
        let config = validate("{}", false).expect("valid");
        assert_eq!(config.limits, RateLimitConfig::default());
        assert_eq!(config.limits.calls.default, None);
        assert_eq!(config.limits.held.default, None);
        assert_eq!(config.limits.questions.default, rate(30, 10));
        assert_eq!(config.limits.on_store_error, OnStoreError::Open);
        assert_eq!(config.limits.max_principals.get(), 100_000);
        assert!(!config.shared);
        assert!(
            validate("{}", true).expect("valid").shared,
            "shared when Redis is there"
        );
    }

    #[test]
    fn every_key_is_read() {
        let config = validate(
            "calls: { per_minute: 600, burst: 60 }\n\
             held: { per_minute: 30, burst: 10 }\n\
             questions: off\n\
             per_upstream:\n  \
               store: { calls: { per_minute: 120, burst: 20 }, questions: { per_minute: 6, burst: 2 } }\n  \
               tickets: { held: 0 }\n\
             shared: local\n\
             on_store_error: closed\n\
             max_principals: 5000\n",
            true,
        )
        .expect("valid");
        let limits = &config.limits;
        assert_eq!(limits.calls.default, rate(600, 60));
        assert_eq!(limits.calls.per_upstream["store"], rate(120, 20));
        assert_eq!(limits.held.default, rate(30, 10));
        assert_eq!(limits.held.per_upstream["tickets"], None);
        assert!(!limits.held.per_upstream.contains_key("store"));
        assert_eq!(limits.questions.default, None);
        assert_eq!(limits.questions.per_upstream["store"], rate(6, 2));
        assert_eq!(limits.on_store_error, OnStoreError::Closed);
        assert_eq!(limits.max_principals.get(), 5000);
        assert!(!config.shared);
    }

    #[test]
    fn off_false_and_zero_all_turn_a_limit_off() {
        for off in ["off", "false", "0", "{ per_minute: 0, burst: 5 }"] {
            let config = validate(&format!("questions: {off}\n"), false).expect(off);
            assert_eq!(config.limits.questions.default, None, "{off}");
        }
    }

    #[test]
    fn invalid_values_are_explained() {
        for (yaml, redis, needle) in [
            (
                "calls: { per_minute: 60, burst: 0 }\n",
                false,
                "rate_limits.calls.burst",
            ),
            ("calls: { per_minute: 60 }\n", false, "burst"),
            (
                "calls: { per_minute: 60, burst: 5, bursts: 1 }\n",
                false,
                "bursts",
            ),
            ("calls: on\n", false, "expected `off`"),
            (
                "held: { per_minute: 60000000, burst: 5 }\n",
                false,
                "per_minute",
            ),
            (
                "per_upstream: { shop: { calls: off } }\n",
                false,
                "no upstream is named `shop`",
            ),
            ("per_upstream: { store: { reads: off } }\n", false, "reads"),
            ("shared: redis\n", false, "needs a `redis:` section"),
            ("shared: memcached\n", true, "`redis` or `local`"),
            ("on_store_error: maybe\n", false, "`open` or `closed`"),
            ("max_principals: 0\n", false, "max_principals"),
            ("limit: 5\n", false, "limit"),
        ] {
            let error = validate(yaml, redis).expect_err(yaml);
            assert!(format!("{error:#}").contains(needle), "{yaml}: {error:#}");
        }
    }
}
