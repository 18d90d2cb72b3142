//! The gateway's own outgoing HTTP (not to upstreams): JWKS fetches for bearer tokens, and the
//! approval page's OpenID Connect discovery, token exchange and webhooks.
//! hyper-util's pooled client over hyper-rustls (ring, Mozilla's roots), as the gateway's own
//! HTTPS upstreams; `http://` is allowed for providers and hooks on a private network or in
//! tests. Every call has a deadline and a cap on what it reads.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Largest response body read (discovery documents, JWKS and token responses are small).
const MAX_RESPONSE_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("invalid request: {0}")]
    Request(String),
    #[error("request failed: {0}")]
    Transport(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("response too large or unreadable: {0}")]
    Body(String),
}

#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClient {
    pub fn new() -> Self {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .build();
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Sends one request and reads the whole answer, within `timeout`.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, HeaderMap, Bytes), FetchError> {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| FetchError::Request(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| FetchError::Transport(e.to_string()))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| FetchError::Body(e.to_string()))?
                .to_bytes();
            Ok((parts.status, parts.headers, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| FetchError::Timeout(timeout))?
    }
}
