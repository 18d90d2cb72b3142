use tower::Layer;

use super::service::Parse;
use crate::config::Limits;
use crate::metrics::ProxyMetrics;

/// Applies [`Parse`] to a service.
#[derive(Debug, Clone)]
pub struct ParseLayer {
    limits: Limits,
    metrics: ProxyMetrics,
}

impl ParseLayer {
    pub fn new(limits: Limits, metrics: ProxyMetrics) -> Self {
        Self { limits, metrics }
    }
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Parse {
            inner,
            limits: self.limits.clone(),
            metrics: self.metrics.clone(),
        }
    }
}
