use std::sync::Arc;

use tower::Layer;

use super::RateLimits;
use super::service::LimitCalls;
use crate::metrics::ProxyMetrics;

/// Applies [`LimitCalls`] to a service.
#[derive(Debug, Clone)]
pub struct LimitCallsLayer {
    limits: Arc<RateLimits>,
    metrics: ProxyMetrics,
}

impl LimitCallsLayer {
    pub fn new(limits: Arc<RateLimits>, metrics: ProxyMetrics) -> Self {
        Self { limits, metrics }
    }
}

impl<S> Layer<S> for LimitCallsLayer {
    type Service = LimitCalls<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LimitCalls {
            inner,
            limits: self.limits.clone(),
            metrics: self.metrics.clone(),
        }
    }
}
