//! What bounds the gateway's capacity, so that no client or upstream can make it hold more than
//! the operator allowed: the `connections:` section (open connections, requests in flight per
//! client, quiet streams) and the `limits:` keys that bound memory across requests (the
//! in-flight body budget, the pinned catalog's size). Defaults and their reasons are in
//! `docs/operations.md`.

use std::num::NonZeroUsize;

use anyhow::{Context, ensure};
use countersign_proxy::config::{ClientAddress, ConnectionLimits, DEFAULT_BODY_BUDGET_BODIES};
use serde::Deserialize;

use super::{RawSize, duration, nonzero, size};

/// How the MCP listener holds connections.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConnections {
    /// Most connections open at once on the MCP listener; past it, new connections wait in the
    /// listen backlog until one closes. Default `10000`.
    pub max_open: Option<usize>,
    /// Most requests in flight at once from one client address, long-lived streams and held
    /// calls included; more get 429. Default `1000`.
    pub max_requests_per_client: Option<usize>,
    /// Header naming the client's address, set by a trusted proxy in front (`X-Real-IP`, or
    /// `X-Forwarded-For`, whose last entry is used). Default: none, the TCP peer address.
    pub client_address_header: Option<String>,
    /// A relayed stream on which nothing was sent this long gets a `: keep-alive` comment.
    /// Default `15s`.
    pub sse_keep_alive: Option<String>,
    /// A relayed upstream stream that sent nothing this long is ended. Default `1h`.
    pub sse_idle_timeout: Option<String>,
    /// Connection workers: threads with an event loop each, every client connection served by
    /// one of them. Default: `TOKIO_WORKER_THREADS` when set, else the CPUs the process may use
    /// (a container's CPU limit included).
    pub workers: Option<usize>,
}

impl RawConnections {
    pub(super) fn validate(self) -> anyhow::Result<ConnectionLimits> {
        let defaults = ConnectionLimits::default();
        let client_address = match self.client_address_header {
            None => ClientAddress::Peer,
            Some(name) => {
                let header = http::HeaderName::try_from(name.as_str()).with_context(|| {
                    format!("connections.client_address_header: `{name}` is not a header name")
                })?;
                // Hardening refuses every request with such a header, so it would never count.
                ensure!(
                    !header.as_str().contains('_'),
                    "connections.client_address_header: `{name}` contains an underscore; the \
                     gateway refuses requests carrying such headers"
                );
                ClientAddress::Header(header)
            }
        };
        Ok(ConnectionLimits {
            max_open: nonzero(
                self.max_open.unwrap_or(defaults.max_open.get()),
                "connections.max_open",
            )?,
            max_requests_per_client: nonzero(
                self.max_requests_per_client
                    .unwrap_or(defaults.max_requests_per_client.get()),
                "connections.max_requests_per_client",
            )?,
            client_address,
            sse_keep_alive: duration(
                self.sse_keep_alive.as_deref(),
                "15s",
                "connections.sse_keep_alive",
            )?,
            sse_idle_timeout: duration(
                self.sse_idle_timeout.as_deref(),
                "1h",
                "connections.sse_idle_timeout",
            )?,
            workers: nonzero(
                self.workers.unwrap_or(defaults.workers.get()),
                "connections.workers",
            )?,
        })
    }
}

/// `limits.max_in_flight_body_bytes`: by default room for 16 bodies of `max_body_bytes`, so
/// raising the per-body limit raises the budget with it.
pub(super) fn body_budget(
    raw: Option<RawSize>,
    max_body_bytes: NonZeroUsize,
) -> anyhow::Result<NonZeroUsize> {
    let default = max_body_bytes
        .get()
        .saturating_mul(DEFAULT_BODY_BUDGET_BODIES);
    let budget = size(raw, default, "limits.max_in_flight_body_bytes")?;
    ensure!(
        budget >= max_body_bytes,
        "limits.max_in_flight_body_bytes ({budget} bytes) must be at least limits.max_body_bytes \
         ({max_body_bytes} bytes), or a body of the largest allowed size could never be read"
    );
    Ok(budget)
}

/// `limits.max_tools_per_upstream`. Default `10000`.
pub(super) fn max_tools_per_upstream(raw: Option<usize>) -> anyhow::Result<NonZeroUsize> {
    nonzero(raw.unwrap_or(10_000), "limits.max_tools_per_upstream")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn validated(yaml: &str) -> anyhow::Result<crate::config::Config> {
        RawConfig::from_yaml(&format!(
            "upstreams: [{{url: 'http://127.0.0.1:3001/mcp'}}]\n{yaml}"
        ))?
        .validate()
    }

    #[test]
    fn capacity_defaults_are_the_documented_ones() {
        let config = validated("").expect("valid");
        let connections = &config.proxy.connections;
        assert_eq!(connections.max_open.get(), 10_000);
        assert_eq!(connections.max_requests_per_client.get(), 1_000);
        assert_eq!(connections.client_address, ClientAddress::Peer);
        assert_eq!(connections.sse_keep_alive.as_secs(), 15);
        assert_eq!(connections.sse_idle_timeout.as_secs(), 3600);
        let limits = &config.proxy.limits;
        assert_eq!(limits.max_in_flight_body_bytes.get(), 64 << 20);
        assert_eq!(limits.max_tools_per_upstream.get(), 10_000);
    }

    #[test]
    fn the_default_body_budget_follows_the_body_limit() {
        let config = validated("limits: {max_body_bytes: 8MiB}").expect("valid");
        assert_eq!(
            config.proxy.limits.max_in_flight_body_bytes.get(),
            128 << 20
        );
    }

    #[test]
    fn a_body_budget_below_one_largest_body_is_refused() {
        let error = validated("limits: {max_body_bytes: 4MiB, max_in_flight_body_bytes: 1MiB}")
            .expect_err("invalid");
        assert!(
            format!("{error:#}").contains("at least limits.max_body_bytes"),
            "{error:#}"
        );
    }

    #[test]
    fn connections_are_read_and_checked() {
        let config = validated(
            "connections: {max_open: 5, max_requests_per_client: 2, client_address_header: X-Real-IP, \
             sse_keep_alive: 5s, sse_idle_timeout: 10m}",
        )
        .expect("valid");
        let connections = &config.proxy.connections;
        assert_eq!(connections.max_open.get(), 5);
        assert_eq!(connections.max_requests_per_client.get(), 2);
        assert_eq!(
            connections.client_address,
            ClientAddress::Header(http::HeaderName::from_static("x-real-ip"))
        );
        assert_eq!(connections.sse_idle_timeout.as_secs(), 600);

        for bad in [
            "connections: {max_open: 0}",
            "connections: {max_requests_per_client: 0}",
            "connections: {client_address_header: 'x real ip'}",
            "connections: {client_address_header: x_real_ip}",
            "connections: {sse_idle_timeout: 0s}",
            "connections: {max_connections: 5}",
            "limits: {max_tools_per_upstream: 0}",
        ] {
            assert!(validated(bad).is_err(), "{bad} must be refused");
        }
    }
}
