use std::sync::Arc;

use tower::Layer;

use super::service::{ClientLimit, ClientLimitSettings};
use super::slots::{ClientSlot, ClientSlots};
use crate::body::ResponseBody;
use crate::config::ConnectionLimits;
use crate::metrics::ProxyMetrics;

/// Applies [`ClientLimit`] to a service. One layer, one count per client: every service it
/// makes shares the slots.
#[derive(Debug, Clone)]
pub struct ClientLimitLayer {
    settings: Arc<ClientLimitSettings>,
}

impl ClientLimitLayer {
    pub fn new(connections: &ConnectionLimits, metrics: ProxyMetrics) -> Self {
        Self {
            settings: Arc::new(ClientLimitSettings {
                slots: Arc::new(ClientSlots::new(connections.max_requests_per_client.get())),
                address: connections.client_address.clone(),
                metrics,
            }),
        }
    }
}

impl ClientLimitLayer {
    /// Takes a slot for a request that stays in flight without passing through the layer
    /// itself, such as a legacy SSE session's own stream; the slot is given back when dropped.
    /// `Err` is the 429 the layer would have answered.
    pub fn admit<B>(
        &self,
        request: &http::Request<B>,
    ) -> Result<ClientSlot, Box<http::Response<ResponseBody>>> {
        self.settings.admit(request)
    }
}

impl<S> Layer<S> for ClientLimitLayer {
    type Service = ClientLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientLimit {
            inner,
            settings: self.settings.clone(),
        }
    }
}
