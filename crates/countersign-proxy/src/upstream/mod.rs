//! The upstream side: the pooled client, building the request the gateway sends, and the
//! gateway's own requests (tool listings, dry-run previews).
//!
//! Upstream requests are built fresh: the URL comes from configuration, framing headers are
//! computed, hop-by-hop and routing-spoof headers are never copied, `Host` names the upstream.

mod call;

pub use call::{CallerContext, call, list_tools};

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{Upstream, UpstreamAuth};
use crate::error::ProxyError;

/// Connection-pooled HTTP client for one upstream.
#[derive(Debug, Clone)]
pub struct UpstreamClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl UpstreamClient {
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
            .build(connector);
        Self { client }
    }

    /// Sends `request` and waits for the response headers, at most the upstream's
    /// `response_timeout`.
    pub async fn send(
        &self,
        upstream: &Upstream,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, ProxyError> {
        tokio::time::timeout(upstream.response_timeout, self.client.request(request))
            .await
            .map_err(|_| ProxyError::UpstreamTimeout {
                upstream: upstream.name.clone(),
                timeout: upstream.response_timeout,
            })?
            .map_err(|source| ProxyError::UpstreamConnect {
                upstream: upstream.name.clone(),
                source,
            })
    }
}

/// Request headers never copied upstream: hop-by-hop fields (RFC 9110 §7.6.1), framing the
/// gateway recomputes, and headers that would let a client steer routing behind the gateway.
fn is_not_forwarded(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "transfer-encoding"
            | "content-encoding"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "upgrade"
            // A foreign Origin makes SDK upstreams with DNS-rebinding protection answer 403; the
            // gateway has already judged it.
            | "origin"
            | "x-forwarded-host"
            | "x-original-url"
            | "x-rewrite-url"
            // Regenerated from the body for 2026-07-28 requests, meaningless otherwise.
            | "mcp-method"
            | "mcp-name"
    )
}

/// Response headers never copied back to the client: hop-by-hop fields and framing.
pub(crate) fn is_not_returned(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

/// Builds the upstream request for a client request whose (re-serialized) body is `body`.
pub fn upstream_request(
    upstream: &Upstream,
    method: Method,
    client_headers: &HeaderMap,
    body: Bytes,
    extra: &[(HeaderName, HeaderValue)],
) -> Request<Full<Bytes>> {
    let mut headers = HeaderMap::with_capacity(client_headers.len() + 4);
    let listed_in_connection = connection_tokens(client_headers);
    for (name, value) in client_headers {
        if is_not_forwarded(name) || listed_in_connection.contains(name) {
            continue;
        }
        if name == header::AUTHORIZATION && matches!(upstream.auth, UpstreamAuth::Replace(_)) {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let UpstreamAuth::Replace(secret) = &upstream.auth {
        headers.insert(header::AUTHORIZATION, secret.0.clone());
    }
    headers.insert(
        header::HOST,
        HeaderValue::from_str(upstream.authority.as_str())
            .expect("a parsed URI authority is a valid header value"),
    );
    if !body.is_empty() || method == Method::POST {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = upstream.url.clone();
    *request.headers_mut() = headers;
    request
}

pub(crate) fn connection_tokens(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::try_from(token.trim()).ok())
        .collect()
}

/// `text/event-stream` by media type, whatever parameters follow (Python adds a charset).
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("text/event-stream"))
}
