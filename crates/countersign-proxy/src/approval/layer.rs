use std::sync::Arc;

use tower::Layer;

use super::Approvals;
use super::service::Approve;

/// Applies [`Approve`] to a service.
#[derive(Debug, Clone)]
pub struct ApprovalLayer {
    approvals: Arc<Approvals>,
}

impl ApprovalLayer {
    pub fn new(approvals: Arc<Approvals>) -> Self {
        Self { approvals }
    }
}

impl<S> Layer<S> for ApprovalLayer {
    type Service = Approve<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Approve {
            inner,
            approvals: self.approvals.clone(),
        }
    }
}
