//! The start-up probe, so an upstream that cannot be started, reached or verified (TLS) is named
//! in the log when the gateway starts rather than on a user's first call.

use bytes::Bytes;
use http::Method;
use http::header::{self, HeaderMap, HeaderValue};

use super::{UpstreamClient, upstream_request};
use crate::config::Upstream;
use crate::error::ProxyError;
use crate::wire::REQUEST_ID_PREFIX;

/// Checks that `upstream` can be reached, and records the outcome in its state.
///
/// An HTTP upstream gets one connection (and TLS handshake) and no request, so probing never
/// shows up in its logs or state. A local upstream has to start to be checked, so it is sent
/// one `ping` outside any session; any answer means it started.
pub async fn probe(upstream: &Upstream, client: &UpstreamClient) -> Result<(), ProxyError> {
    match client {
        UpstreamClient::Http { client, health } => {
            let connected = tokio::time::timeout(
                upstream.connect_timeout,
                client.connect(upstream.url.clone()),
            )
            .await
            .map_err(|_| ProxyError::UpstreamTimeout {
                upstream: upstream.name.clone(),
                timeout: upstream.connect_timeout,
            })
            .and_then(|connected| {
                connected.map_err(|source| ProxyError::UpstreamConnect {
                    upstream: upstream.name.clone(),
                    source,
                })
            });
            match &connected {
                Ok(()) => health.reached(),
                Err(error) => health.failed(error),
            }
            connected
        }
        UpstreamClient::Local(_) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(
                header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":"{REQUEST_ID_PREFIX}probe","method":"ping"}}"#);
            let request =
                upstream_request(upstream, Method::POST, &headers, Bytes::from(body), &[]);
            // The answer's headers are all the probe needs; the body is dropped unread.
            client.send(upstream, request).await.map(drop)
        }
    }
}
