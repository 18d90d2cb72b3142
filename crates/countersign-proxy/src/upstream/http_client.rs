//! The pooled HTTP client for `http://` and `https://` upstreams.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Builder, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::failure::ConnectFailure;
use super::tls::NoClientCertificate;
use crate::config::Upstream;

/// Connection-pooled HTTP client for one upstream.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Pooled,
}

/// One client type per scheme, so a plain upstream runs exactly the HTTP/1.1 client it always
/// did and a TLS one can never fall back to plaintext.
#[derive(Debug, Clone)]
enum Pooled {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(TlsPooled),
}

#[derive(Debug, Clone)]
struct TlsPooled {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Set when no client certificate is configured.
    no_client_cert: Option<Arc<NoClientCertificate>>,
}

impl HttpClient {
    pub fn new(upstream: &Upstream) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(upstream.connect_timeout));
        let client = if upstream.scheme == Scheme::HTTPS {
            // The TLS connector hands the TCP connector `https://` URIs.
            tcp.enforce_http(false);
            let mut config = upstream.tls.client_config();
            let no_client_cert = (!config.client_auth_cert_resolver.has_certs()).then(|| {
                let stand_in = Arc::new(NoClientCertificate::new(&upstream.name));
                config.client_auth_cert_resolver = stand_in.clone();
                stand_in
            });
            let connector = HttpsConnectorBuilder::new()
                .with_tls_config(config)
                .https_only()
                // ALPN offers h2 then http/1.1; hyper speaks whichever the upstream picks.
                .enable_all_versions()
                .wrap_connector(tcp);
            Pooled::Tls(TlsPooled {
                client: builder().build(connector),
                no_client_cert,
            })
        } else {
            tcp.enforce_http(true);
            Pooled::Plain(builder().build(tcp))
        };
        Self { client }
    }

    /// Sends `request`; resolves once the response headers arrived.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, ConnectFailure> {
        match &self.client {
            Pooled::Plain(client) => client.request(request).await.map_err(ConnectFailure::plain),
            Pooled::Tls(tls) => tls.client.request(request).await.map_err(|error| {
                let asked = tls.no_client_cert.as_ref().is_some_and(|n| n.asked());
                ConnectFailure::tls(error, asked)
            }),
        }
    }
}

/// The pool settings of every upstream, HTTP/1.1 or HTTP/2.
fn builder() -> Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        // The gateway sets Host itself, to the upstream authority.
        .set_host(false);
    builder
}
