use std::sync::Arc;

use tower::Layer;

use super::Identity;
use super::service::Identify;

/// Applies [`Identify`] to a service.
#[derive(Debug, Clone)]
pub struct IdentityLayer {
    identity: Arc<Identity>,
}

impl IdentityLayer {
    pub fn new(identity: Identity) -> Self {
        Self {
            identity: Arc::new(identity),
        }
    }
}

impl<S> Layer<S> for IdentityLayer {
    type Service = Identify<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Identify {
            inner,
            identity: self.identity.clone(),
        }
    }
}
