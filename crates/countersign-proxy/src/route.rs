//! The route a request was matched to: its upstream, the pooled client that reaches it and its
//! metric label. Hardening attaches it to every request it lets through, so every layer below
//! reads the same route from the request's extensions.

use std::sync::Arc;

use crate::config::Upstream;
use crate::upstream::UpstreamClient;

/// One MCP endpoint of the gateway and what it forwards to.
#[derive(Debug)]
pub struct RouteTarget {
    /// The exact request path served.
    pub path: String,
    pub upstream: Upstream,
    /// The upstream's name as a `'static` metric label, made once at start-up so recording a
    /// request never allocates.
    pub label: &'static str,
    pub client: UpstreamClient,
}

/// The matched route, in request extensions.
#[derive(Debug, Clone)]
pub struct Route(pub Arc<RouteTarget>);

impl std::ops::Deref for Route {
    type Target = RouteTarget;

    fn deref(&self) -> &RouteTarget {
        &self.0
    }
}
