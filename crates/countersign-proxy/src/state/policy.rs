use std::sync::{Arc, RwLock};

use countersign_policy::Policy;

/// The current policy; replaced whole on reload, so a request sees one policy throughout.
#[derive(Debug, Default)]
pub struct PolicyHandle(RwLock<Arc<Policy>>);

impl PolicyHandle {
    pub fn new(policy: Policy) -> Self {
        Self(RwLock::new(Arc::new(policy)))
    }

    pub fn current(&self) -> Arc<Policy> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }
}
