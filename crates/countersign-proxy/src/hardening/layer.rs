use std::sync::Arc;

use tower::Layer;

use super::service::{Hardening, HardeningRules};

/// Applies [`Hardening`] to a service.
#[derive(Debug, Clone)]
pub struct HardeningLayer {
    rules: Arc<HardeningRules>,
}

impl HardeningLayer {
    pub fn new(rules: Arc<HardeningRules>) -> Self {
        Self { rules }
    }
}

impl<S> Layer<S> for HardeningLayer {
    type Service = Hardening<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Hardening::new(inner, self.rules.clone())
    }
}
