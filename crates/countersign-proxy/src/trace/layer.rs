use tower::Layer;

use super::service::RequestSpans;

/// Applies [`RequestSpans`] to a service; `enabled` is read once, when the stack is built.
#[derive(Debug, Clone, Copy)]
pub struct RequestSpansLayer {
    enabled: bool,
}

impl RequestSpansLayer {
    /// Spans when [`super::enabled`] says so, else a pass-through.
    pub fn new() -> Self {
        Self {
            enabled: super::enabled(),
        }
    }
}

impl Default for RequestSpansLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for RequestSpansLayer {
    type Service = RequestSpans<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestSpans {
            inner,
            enabled: self.enabled,
        }
    }
}
