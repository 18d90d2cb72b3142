use std::sync::Arc;

use tower::Layer;

use super::service::{LegacyClients, Shared};
use super::sessions::LegacySessions;
use crate::client_limit::ClientLimitLayer;
use crate::clock::Clock;
use crate::metrics::ProxyMetrics;
use crate::relay::QuietLimits;

/// What the legacy layer is built with.
#[derive(Debug, Clone)]
pub struct LegacySettings {
    /// The per-client request limit, whose slots a session's own stream takes too.
    pub client_limit: ClientLimitLayer,
    /// Keep-alive and idle timeout of a session's stream.
    pub quiet: QuietLimits,
    /// Most sessions open at once (`connections.max_open`: each holds a connection anyway).
    pub max_sessions: usize,
    /// Largest message delivered to a legacy client (`limits.max_sse_event_bytes`).
    pub max_message_bytes: usize,
    pub clock: Arc<dyn Clock>,
    pub metrics: ProxyMetrics,
}

/// Applies [`LegacyClients`] to a service. One layer, one table of sessions.
#[derive(Debug, Clone)]
pub struct LegacyClientsLayer {
    shared: Arc<Shared>,
}

impl LegacyClientsLayer {
    pub fn new(settings: LegacySettings) -> Self {
        let sessions = Arc::new(LegacySessions::new(settings.max_sessions));
        Self {
            shared: Arc::new(Shared { settings, sessions }),
        }
    }
}

impl<S> Layer<S> for LegacyClientsLayer {
    type Service = LegacyClients<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LegacyClients {
            inner,
            shared: self.shared.clone(),
        }
    }
}
