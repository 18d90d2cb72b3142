use std::sync::Arc;

use tower::Layer;

use super::service::Classify;
use crate::catalog::CatalogSync;
use crate::metrics::ProxyMetrics;
use crate::state::PolicyHandle;

/// Applies [`Classify`] to a service.
#[derive(Debug, Clone)]
pub struct ClassifyLayer {
    policy: Arc<PolicyHandle>,
    catalog: CatalogSync,
    metrics: ProxyMetrics,
}

impl ClassifyLayer {
    pub fn new(policy: Arc<PolicyHandle>, catalog: CatalogSync, metrics: ProxyMetrics) -> Self {
        Self {
            policy,
            catalog,
            metrics,
        }
    }
}

impl<S> Layer<S> for ClassifyLayer {
    type Service = Classify<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Classify {
            inner,
            policy: self.policy.clone(),
            catalog: self.catalog.clone(),
            metrics: self.metrics.clone(),
        }
    }
}
