//! A request refused by a rate limit, and how the refusal reads on the wire: HTTP 429 (503 when
//! the shared store could not be asked and the limits fail closed) with `Retry-After`, and a
//! JSON-RPC error whose `data` names the limit.

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use super::Limit;
use super::bucket::retry_after_secs;

/// Which limit refused a request, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitHit {
    pub limit: Limit,
    pub reason: HitReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitReason {
    /// The caller's bucket is empty; enough tokens are back after `retry_after`.
    Exhausted { retry_after: Duration },
    /// One request needs more tokens than the bucket holds when full (a batch with more tool
    /// calls than the burst): it can never pass as it is.
    OverBurst { cost: u32, burst: u32 },
    /// The store shared between replicas did not answer and the limits fail closed.
    StoreUnavailable,
}

impl LimitHit {
    /// The `Retry-After` value, in whole seconds; `None` when waiting cannot help.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self.reason {
            HitReason::Exhausted { retry_after } => Some(retry_after_secs(retry_after)),
            // Redis blips are short; a client that comes back in a second is what we want.
            HitReason::StoreUnavailable => Some(1),
            HitReason::OverBurst { .. } => None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.reason {
            HitReason::Exhausted { .. } | HitReason::OverBurst { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            HitReason::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `data` member of the JSON-RPC error.
    pub fn data(&self) -> Value {
        let mut data = json!({"limit": self.limit.as_str(), "reason": self.reason_code()});
        if let Some(secs) = self.retry_after_secs() {
            data["retryAfterSeconds"] = json!(secs);
        }
        if let HitReason::OverBurst { burst, .. } = self.reason {
            data["burst"] = json!(burst);
        }
        data
    }

    fn reason_code(&self) -> &'static str {
        match self.reason {
            HitReason::Exhausted { .. } => "exhausted",
            HitReason::OverBurst { .. } => "over_burst",
            HitReason::StoreUnavailable => "store_unavailable",
        }
    }

    /// The audit outcome of a held call refused by this hit.
    pub fn audit_outcome(&self) -> &'static str {
        match self.limit {
            Limit::Calls => "rejected:rate_limited(calls)",
            Limit::Held => "rejected:rate_limited(held)",
            Limit::Questions => "rejected:rate_limited(questions)",
        }
    }
}

/// The message of the JSON-RPC error, written for the model: what happened, that nothing ran,
/// and what to do.
impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.limit {
            Limit::Calls => "too many tool calls",
            Limit::Held => "too many calls held for approval",
            Limit::Questions => "too many questions put to the user",
        };
        let limit = self.limit.as_str();
        match self.reason {
            HitReason::Exhausted { .. } => write!(
                f,
                "rate limited: {what} in a short time (limit `{limit}`), so nothing was sent; \
                 retry after {} s",
                self.retry_after_secs().unwrap_or(1)
            ),
            HitReason::OverBurst { cost, burst } => write!(
                f,
                "rate limited: this request counts {cost} against limit `{limit}`, which allows \
                 at most {burst} at once, so nothing was sent; send fewer tool calls per batch"
            ),
            HitReason::StoreUnavailable => write!(
                f,
                "rate limit `{limit}` could not be checked (its shared store did not answer) and \
                 the gateway refuses then, so nothing was sent; retry shortly"
            ),
        }
    }
}
