//! The upstream side: the client that reaches each kind of upstream, building the request the
//! gateway sends, and the gateway's own requests (tool listings, dry-run previews).
//!
//! Every kind of upstream is spoken to as a Streamable HTTP server: HTTP upstreams are, and the
//! others (stdio programs, legacy HTTP+SSE servers) sit behind a [`LocalUpstream`] that serves
//! Streamable HTTP in process. So every layer above — classification, approval, response edits,
//! catalog watching — works on one shape of upstream.
//!
//! Upstream requests are built fresh: the URL comes from configuration, framing headers are
//! computed, hop-by-hop and routing-spoof headers are never copied, `Host` names the upstream.

mod body;
pub mod bridge;
mod call;
mod failure;
mod forwarded;
mod health;
mod http1_conn;
mod http1_pool;
mod http1_wire;
mod http_client;
mod legacy_sse;
mod local;
mod probe;
pub mod stdio;
mod tls;

pub use body::UpstreamBody;
pub use call::{CallerContext, call, list_tools};
pub use failure::ConnectFailure;
pub use forwarded::Forwarded;
pub use http_client::HttpClient;
pub use http1_conn::WireBody;
pub(crate) use http1_wire::parse_head as parse_response_head;
pub use legacy_sse::LegacySseConnector;
pub use local::{Channel, Connector, LocalUpstream, UpstreamState};
pub use probe::probe;
pub use tls::TlsSetupError;

use health::Health;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::Full;
use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::config::{Transport, Upstream};
use crate::error::ProxyError;
use crate::http_fields;

/// How the gateway reaches one upstream: a pooled HTTP client, or a [`LocalUpstream`] that
/// serves Streamable HTTP in process (stdio programs, legacy HTTP+SSE servers).
#[derive(Debug, Clone)]
// Built once per route and kept in it, never moved on the request path: boxing the HTTP
// client would only add a pointer chase to every request.
#[allow(clippy::large_enum_variant)]
pub enum UpstreamClient {
    Http {
        client: HttpClient,
        health: Arc<Health>,
    },
    Local(Arc<dyn LocalUpstream>),
}

impl UpstreamClient {
    /// The HTTP client for HTTP upstreams. Local upstreams are built by the app, which owns
    /// their processes and connections, and handed in with [`UpstreamClient::Local`].
    pub fn new(upstream: &Upstream) -> Self {
        UpstreamClient::Http {
            client: HttpClient::new(upstream),
            health: Arc::default(),
        }
    }

    /// The client for `upstream` whatever its transport: for a stdio upstream, the bridge that
    /// starts its processes (none runs until a client needs one; stop them with
    /// [`UpstreamClient::shutdown`]).
    pub fn for_upstream(
        upstream: &Upstream,
        label: &'static str,
        metrics: &crate::metrics::ProxyMetrics,
        clock: &Arc<dyn crate::clock::Clock>,
    ) -> Self {
        match &upstream.transport {
            Transport::Stdio(command) => UpstreamClient::Local(Arc::new(stdio::stdio_upstream(
                upstream,
                command,
                label,
                metrics.clone(),
                clock.clone(),
            ))),
            Transport::LegacySse => {
                UpstreamClient::Local(Arc::new(legacy_sse::legacy_sse_upstream(
                    upstream,
                    UpstreamClient::new(upstream),
                    label,
                    metrics.clone(),
                    clock.clone(),
                )))
            }
            Transport::StreamableHttp => UpstreamClient::new(upstream),
        }
    }

    /// Ends a local upstream's instances and waits until they are gone (nothing to do for
    /// HTTP upstreams). The app calls it once the listener has drained.
    pub async fn shutdown(&self) {
        if let UpstreamClient::Local(local) = self {
            local.shutdown().await;
        }
    }

    /// Sends `request` and waits for the response headers, at most the upstream's
    /// `response_timeout`.
    pub async fn send(
        &self,
        upstream: &Upstream,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        let by = SystemClock.now() + upstream.response_timeout;
        self.send_by(upstream, request, by).await
    }

    /// Forwards a client's request as [`UpstreamClient::send`] sends one, its
    /// `response_timeout` counted from `started` (the caller's own clock read); a plain
    /// HTTP/1.1 upstream gets it written straight from the client's headers.
    pub async fn forward(
        &self,
        upstream: &Upstream,
        forwarded: Forwarded<'_>,
        started: Instant,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        let by = started + upstream.response_timeout;
        match self {
            UpstreamClient::Http { client, health } => {
                over_http(upstream, health, client.forward(upstream, forwarded, by)).await
            }
            // Boxed: the rare branch, whose state (hyper's client inside `send`) would otherwise
            // size every forward's future.
            UpstreamClient::Local(_) => {
                Box::pin(self.send_by(upstream, forwarded.into_request(upstream), by)).await
            }
        }
    }

    async fn send_by(
        &self,
        upstream: &Upstream,
        request: Request<Full<Bytes>>,
        by: Instant,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        match self {
            UpstreamClient::Http { client, health } => {
                over_http(upstream, health, client.send(request, by)).await
            }
            UpstreamClient::Local(local) => {
                let response = tokio::time::timeout_at(by, local.serve(request))
                    .await
                    .map_err(|_| timed_out(upstream))??;
                Ok(response.map(UpstreamBody::local))
            }
        }
    }

    /// The upstream's state, for `/readyz` and the start-up log.
    pub fn state(&self) -> UpstreamState {
        match self {
            UpstreamClient::Http { health, .. } => health.state(),
            UpstreamClient::Local(local) => local.state(),
        }
    }
}

/// Waits for an HTTP upstream's response head (the client bounds the wait by the deadline it
/// was given) and records in `health` whether it was reached.
///
/// A combinator rather than an `async fn`: an `async fn` keeps the future it is handed as an
/// argument beside the one it moves that future into, so its state held the sending future
/// twice (the forwarder's own future was 3.7 KiB, copied whole into its box on every request).
fn over_http<'a>(
    upstream: &'a Upstream,
    health: &'a Health,
    sending: impl Future<Output = Result<Response<UpstreamBody>, ConnectFailure>> + 'a,
) -> impl Future<Output = Result<Response<UpstreamBody>, ProxyError>> + 'a {
    sending.map(move |sent| {
        let sent = sent.map_err(|failure| {
            if failure.is_overdue() {
                return timed_out(upstream);
            }
            // Per request: a certificate that expired or a CA that changed fails every call
            // until fixed, and each should be visible.
            tracing::warn!(
                upstream = %upstream.name,
                url = %upstream.url,
                tls = failure.is_tls(),
                error = %failure,
                "upstream request failed"
            );
            ProxyError::UpstreamConnect {
                upstream: upstream.name.clone(),
                source: Box::new(failure),
            }
        });
        match &sent {
            Ok(_) => health.reached(),
            Err(error) => health.failed(error),
        }
        sent
    })
}

fn timed_out(upstream: &Upstream) -> ProxyError {
    ProxyError::UpstreamTimeout {
        upstream: upstream.name.clone(),
        timeout: upstream.response_timeout,
    }
}

/// Response headers never copied back to the client: hop-by-hop fields and framing.
pub(crate) fn is_not_returned(name: &HeaderName) -> bool {
    NOT_RETURNED.contains(&name.as_str())
}

/// The names [`is_not_returned`] refuses, lowercase.
pub(crate) const NOT_RETURNED: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Builds the upstream request for a client request whose (re-serialized) body is `body`, for
/// the gateway's own requests and upstreams reached through hyper: see [`Forwarded`].
pub fn upstream_request(
    upstream: &Upstream,
    method: Method,
    client_headers: &HeaderMap,
    body: Bytes,
    extra: &[(HeaderName, HeaderValue)],
) -> Request<Full<Bytes>> {
    Forwarded {
        method,
        client_headers,
        body,
        extra,
    }
    .into_request(upstream)
}

/// The field names a message's `Connection` fields list (RFC 9110 §7.6.1): hop-by-hop, never
/// passed on. Read token by token as `http_fields` reads every `Connection` field.
pub(crate) fn connection_listed_names(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|value| http_fields::connection_tokens(value.as_bytes()))
        .filter_map(|token| HeaderName::try_from(token).ok())
        .collect()
}

/// `text/event-stream` by media type, whatever parameters follow (Python adds a charset).
///
/// Read as bytes: every answer asks, and the text route (`to_str`'s check of every byte,
/// `split`) was about 400 instructions an answer. The essence is ASCII when it matches, so a
/// value that is not text cannot match here either.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_some_and(|value| {
        let value = value.as_bytes();
        let essence = value
            .iter()
            .position(|&byte| byte == b';')
            .map_or(value, |end| &value[..end]);
        essence
            .trim_ascii()
            .eq_ignore_ascii_case(b"text/event-stream")
    })
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue, header};

    use super::is_event_stream;

    fn typed(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_bytes(value).unwrap(),
        );
        headers
    }

    #[test]
    fn an_event_stream_is_known_by_its_media_type_whatever_follows() {
        for value in [
            &b"text/event-stream"[..],
            b"Text/Event-Stream",
            b" text/event-stream ; charset=utf-8",
            b"text/event-stream;charset=\xff",
        ] {
            assert!(is_event_stream(&typed(value)), "{value:?}");
        }
        for value in [
            &b"application/json"[..],
            b"text/event-streams",
            b"text/event-stream-x; a=b",
            b"text/plain; x=text/event-stream",
            b"",
        ] {
            assert!(!is_event_stream(&typed(value)), "{value:?}");
        }
        assert!(!is_event_stream(&HeaderMap::new()));
    }
}
