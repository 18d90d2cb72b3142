//! The pooled HTTP client for `http://` upstreams.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower::Service;

use crate::body::BoxError;
use crate::config::Upstream;

/// Connection-pooled HTTP client for one upstream.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The client's own connector, for the start-up probe.
    connector: HttpConnector,
}

impl HttpClient {
    pub fn new(upstream: &Upstream) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(upstream.connect_timeout));
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            // The gateway sets Host itself, to the upstream authority.
            .set_host(false)
            .build(connector.clone());
        Self { client, connector }
    }

    /// Opens one connection to `uri` the way a request would, and closes it: the upstream is
    /// reached without being sent anything.
    pub async fn connect(&self, uri: Uri) -> Result<(), BoxError> {
        let mut connector = self.connector.clone();
        connector.call(uri).await.map(drop).map_err(Into::into)
    }

    /// Sends `request`; resolves once the response headers arrived.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        self.client.request(request).await
    }
}
