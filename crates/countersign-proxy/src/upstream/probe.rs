//! The start-up probe, so an upstream that cannot be started, reached or verified (TLS) is named
//! in the log when the gateway starts rather than on a user's first call.

use super::UpstreamClient;
use crate::config::Upstream;
use crate::error::ProxyError;

/// Checks that `upstream` can be reached, and records the outcome in its state.
///
/// An HTTP upstream gets one connection (and TLS handshake) and no request, so probing never
/// shows up in its logs or state. A local upstream has to start to be checked, so one instance
/// is started, has to answer an `initialize`, and is stopped ([`LocalUpstream::probe`]).
///
/// [`LocalUpstream::probe`]: super::LocalUpstream::probe
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
        UpstreamClient::Local(local) => {
            tokio::time::timeout(upstream.response_timeout, local.probe())
                .await
                .map_err(|_| ProxyError::UpstreamTimeout {
                    upstream: upstream.name.clone(),
                    timeout: upstream.response_timeout,
                })?
        }
    }
}
