use std::sync::Arc;

use tower::Layer;

use super::budget::BodyBudget;
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
        let budget = BodyBudget::new(
            limits.max_in_flight_body_bytes.get(),
            metrics.in_flight_body_bytes(),
        );
        Self {
            settings: Arc::new(ParseSettings {
                limits,
                metrics,
                budget,
            }),
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
