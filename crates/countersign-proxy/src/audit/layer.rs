use std::sync::Arc;

use tower::Layer;

use super::AuditSink;
use super::service::AuditOutcomes;
use crate::clock::Clock;

/// Applies [`AuditOutcomes`] to a service.
#[derive(Debug, Clone)]
pub struct AuditLayer {
    sink: AuditSink,
    clock: Arc<dyn Clock>,
}

impl AuditLayer {
    pub fn new(sink: AuditSink, clock: Arc<dyn Clock>) -> Self {
        Self { sink, clock }
    }
}

impl<S> Layer<S> for AuditLayer {
    type Service = AuditOutcomes<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuditOutcomes {
            inner,
            sink: self.sink.clone(),
            clock: self.clock.clone(),
        }
    }
}
