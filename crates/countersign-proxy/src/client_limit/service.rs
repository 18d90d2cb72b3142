use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tower::Service;
use tracing::debug;

use super::future::ResponseFuture;
use super::slots::{ClientSlot, ClientSlots, client_key};
use crate::body::ResponseBody;
use crate::config::ClientAddress;
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;

/// Refuses a client's request past its concurrency limit; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct ClientLimit<S> {
    pub(super) inner: S,
    pub(super) settings: Arc<ClientLimitSettings>,
}

#[derive(Debug)]
pub(super) struct ClientLimitSettings {
    pub(super) slots: Arc<ClientSlots>,
    pub(super) address: ClientAddress,
    pub(super) metrics: ProxyMetrics,
}

impl<S, B> Service<Request<B>> for ClientLimit<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>>,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self.settings.admit(&request) {
            Ok(slot) => ResponseFuture::inner(self.inner.call(request), slot),
            Err(refusal) => ResponseFuture::answered(*refusal),
        }
    }
}

impl ClientLimitSettings {
    /// A slot for `request`'s client, or the 429 that refuses it (boxed: the cold path).
    pub(super) fn admit<B>(
        &self,
        request: &Request<B>,
    ) -> Result<ClientSlot, Box<Response<ResponseBody>>> {
        let peer = request.extensions().peer().map(|p| p.0.ip());
        let key = client_key(&self.address, request.headers(), peer);
        if let Some(slot) = self.slots.take(key) {
            return Ok(slot);
        }
        let limit = self.slots.limit();
        debug!(client = ?key, limit, "client over its concurrent request limit");
        self.metrics.record_limit_hit("requests_per_client");
        let upstream = request.extensions().route().map_or("none", |r| r.label);
        let method = match *request.method() {
            Method::GET => "GET",
            Method::DELETE => "DELETE",
            _ => "POST",
        };
        let error = ProxyError::TooManyClientRequests { limit };
        Err(Box::new(error.answer(
            None,
            &self.metrics,
            upstream,
            method,
        )))
    }
}
