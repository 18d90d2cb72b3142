//! The route a request was matched to: its upstream, the pooled client that reaches it and its
//! metric label. Hardening attaches it to every request it lets through, so every layer below
//! reads the same route from the request's context; a request to one of the route's legacy
//! HTTP+SSE endpoints also carries its [`LegacyEndpoint`].

use std::sync::Arc;

use crate::config::{LegacyPaths, Upstream};
use crate::upstream::UpstreamClient;

/// One MCP endpoint of the gateway and what it forwards to.
#[derive(Debug)]
pub struct RouteTarget {
    /// The exact request path served.
    pub path: String,
    pub upstream: Upstream,
    /// The upstream's name (the same text as `upstream.name`) as a `'static` str, made once at
    /// start-up: a metric label, and the name each request's answer observer keeps, so neither
    /// allocates per request.
    pub label: &'static str,
    pub client: UpstreamClient,
    /// The route's 2024-11-05 HTTP+SSE endpoints, if it serves them.
    pub legacy: Option<LegacyPaths>,
}

/// The matched route, in the request context.
#[derive(Debug, Clone)]
pub struct Route(pub Arc<RouteTarget>);

impl std::ops::Deref for Route {
    type Target = RouteTarget;

    fn deref(&self) -> &RouteTarget {
        &self.0
    }
}

/// Which legacy (2024-11-05 HTTP+SSE) endpoint of its route a request was sent to, in an
/// extension of its own beside the request context's [`Route`]. Absent on requests to the
/// route's Streamable HTTP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyEndpoint {
    /// `GET` on the SSE path: opens a legacy session.
    Stream,
    /// `POST` on the messages path: one message of a legacy session.
    Messages,
}
