//! The pooled HTTP client for `http://` and `https://` upstreams: plain upstreams through this
//! gateway's own HTTP/1.1 pool (`http1_pool.rs`), TLS ones through hyper-util's client, which
//! speaks HTTP/2 or HTTP/1.1 as ALPN decides.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::uri::Scheme;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Builder, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tower::Service;

use super::failure::ClientCertState;
use super::failure::{ConnectFailure, HeadOverdue};
use super::http1_pool::Http1Pool;
use super::http1_pool::WIRE_HEAD_ROOM;
use super::tls::ClientCertRequests;
use super::{Forwarded, UpstreamBody};
use crate::body::BoxError;
use crate::config::Upstream;

/// Connection-pooled HTTP client for one upstream.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Pooled,
}

/// One client type per scheme, so a plain upstream runs exactly the HTTP/1.1 client it always
/// did and a TLS one can never fall back to plaintext. Each keeps its own connector, for the
/// start-up probe.
#[derive(Debug, Clone)]
enum Pooled {
    Plain(Http1Pool),
    // Boxed: the plain variant is one pointer, and this one is read once per TLS request.
    Tls(Box<TlsPooled>),
}

#[derive(Debug, Clone)]
struct TlsPooled {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    connector: HttpsConnector<HttpConnector>,
    cert_requests: Arc<ClientCertRequests>,
}

impl HttpClient {
    pub fn new(upstream: &Upstream) -> Self {
        let client = if upstream.scheme == Scheme::HTTPS {
            let mut tcp = HttpConnector::new();
            tcp.set_nodelay(true);
            tcp.set_connect_timeout(Some(upstream.connect_timeout));
            // The TLS connector hands the TCP connector `https://` URIs.
            tcp.enforce_http(false);
            let mut config = upstream.tls.client_config();
            let cert_requests = Arc::new(ClientCertRequests::new(
                &upstream.name,
                config.client_auth_cert_resolver.clone(),
            ));
            config.client_auth_cert_resolver = cert_requests.clone();
            let connector = HttpsConnectorBuilder::new()
                .with_tls_config(config)
                .https_only()
                // ALPN offers h2 then http/1.1; hyper speaks whichever the upstream picks.
                .enable_all_versions()
                .wrap_connector(tcp);
            // HTTP/2 names the authority in `:authority`, from the URI, and a Host header
            // besides is refused by some servers (nginx: "duplicate host header"). Which
            // protocol a request gets is known only once its connection is, so Host is left to
            // hyper, which adds it from the URI on HTTP/1.1 connections only.
            let mut builder = builder();
            builder.set_host(true);
            Pooled::Tls(Box::new(TlsPooled {
                client: builder.build(connector.clone()),
                connector,
                cert_requests,
            }))
        } else {
            Pooled::Plain(Http1Pool::new(upstream))
        };
        Self { client }
    }

    /// Opens one connection to `uri` the way a request would (with the TLS handshake, for
    /// `https://`), and closes it: the upstream is reached without being sent anything.
    pub async fn connect(&self, uri: Uri) -> Result<(), BoxError> {
        match &self.client {
            Pooled::Plain(pool) => pool.connect_only().await,
            Pooled::Tls(tls) => {
                let mut connector = tls.connector.clone();
                connector.call(uri).await.map(drop).map_err(|error| {
                    Box::new(ConnectFailure::tls(error, tls.client_cert())) as BoxError
                })
            }
        }
    }

    /// Sends `request`; resolves once the response headers arrived, with the connection a
    /// plain upstream's response holds until its body has ended. Headers that have not arrived
    /// by `by` fail the request ([`ConnectFailure::is_overdue`]).
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        by: Instant,
    ) -> Result<Response<UpstreamBody>, ConnectFailure> {
        match &self.client {
            Pooled::Plain(pool) => {
                let response = pool
                    .send(request, by)
                    .await
                    .map_err(ConnectFailure::plain)?;
                Ok(response.map(UpstreamBody::wire))
            }
            Pooled::Tls(tls) => {
                let mut request = request;
                // The URI's authority is the upstream's (see `new`), so nothing is lost.
                request.headers_mut().remove(header::HOST);
                let response = tokio::time::timeout_at(by, tls.client.request(request))
                    .await
                    .map_err(|_| ConnectFailure::plain(HeadOverdue))?
                    .map_err(|error| ConnectFailure::tls(error, tls.client_cert()))?;
                Ok(response.map(UpstreamBody::http))
            }
        }
    }

    /// Forwards a client's request: to a plain upstream written straight from the client's
    /// headers (while traces are exported, through the header map the propagator writes),
    /// to a TLS one as [`HttpClient::send`] sends it.
    pub async fn forward(
        &self,
        upstream: &Upstream,
        forwarded: Forwarded<'_>,
        by: Instant,
    ) -> Result<Response<UpstreamBody>, ConnectFailure> {
        match &self.client {
            Pooled::Plain(pool) if !crate::trace::enabled() => {
                let mut wire = Vec::with_capacity(WIRE_HEAD_ROOM + forwarded.body.len());
                forwarded.encode_http1(upstream, &mut wire);
                let response = pool
                    .send_wire(wire, by)
                    .await
                    .map_err(ConnectFailure::plain)?;
                Ok(response.map(UpstreamBody::wire))
            }
            // Boxed: hyper's client future is twice the wire path's, and an unboxed branch
            // would size the state of every forward, however it is sent.
            _ => Box::pin(self.send(forwarded.into_request(upstream), by)).await,
        }
    }
}

impl TlsPooled {
    fn client_cert(&self) -> ClientCertState {
        ClientCertState {
            asked: self.cert_requests.asked(),
            configured: self.cert_requests.configured(),
        }
    }
}

/// The pool settings of `https://` upstreams, HTTP/1.1 or HTTP/2 (plain ones have their own
/// pool, `http1_pool.rs`).
fn builder() -> Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .set_host(false);
    builder
}
