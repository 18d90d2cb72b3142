//! The start-up probe: one harmless `ping` to each upstream, so an upstream that cannot be
//! started, reached or verified (TLS) is named in the log when the gateway starts rather than
//! on a user's first call.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};

use super::{UpstreamClient, upstream_request};
use crate::config::Upstream;
use crate::error::ProxyError;
use crate::wire::REQUEST_ID_PREFIX;

/// Sends `ping` outside any session and waits for the response headers. Any HTTP answer means
/// the upstream was reached (a server that wants a session first answers 400, which is fine);
/// only failing to get one is an error. Returns the status it answered with.
pub async fn probe(upstream: &Upstream, client: &UpstreamClient) -> Result<StatusCode, ProxyError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    let body = format!(r#"{{"jsonrpc":"2.0","id":"{REQUEST_ID_PREFIX}probe","method":"ping"}}"#);
    let request = upstream_request(upstream, Method::POST, &headers, Bytes::from(body), &[]);
    // The body is dropped unread: the answer's headers are all the probe needs.
    Ok(client.send(upstream, request).await?.status())
}
