use std::sync::Arc;

use tower::Layer;

use super::service::{Parse, ParseSettings};
use crate::config::Limits;
use crate::metrics::ProxyMetrics;

/// Applies [`Parse`] to a service.
#[derive(Debug, Clone)]
pub struct ParseLayer {
    settings: Arc<ParseSettings>,
}

impl ParseLayer {
    pub fn new(limits: Limits, metrics: ProxyMetrics) -> Self {
        Self {
            settings: Arc::new(ParseSettings { limits, metrics }),
        }
    }
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Parse {
            inner,
            settings: self.settings.clone(),
        }
    }
}
