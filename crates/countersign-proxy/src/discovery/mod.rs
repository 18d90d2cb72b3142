//! How MCP clients find the authorization server (the MCP authorization spec, RFC 9728): the
//! protected-resource metadata at `/.well-known/oauth-protected-resource…`, and the
//! `resource_metadata` URL of every `WWW-Authenticate` challenge that points to it.
//!
//! One of two cases holds for the whole listener:
//!
//! - **The gateway is the resource server** (a `jwt` method, or `authorization_servers`
//!   configured): it serves its own document ([`ResourceMetadata`]) and its identity layer's
//!   401s name it.
//! - **The upstream does its own OAuth** (`auth: forward`): the upstream's document is relayed
//!   ([`upstream_document`]) with `resource` set to the gateway's URL of the route, because a
//!   client checks that the resource it is told about is the one it connected to, and asks the
//!   authorization server for a token for exactly that resource (RFC 8707). The upstream's 401s
//!   and 403s are relayed with their `resource_metadata` pointing at the gateway's well-known
//!   URL instead of the upstream's own, which clients usually cannot reach ([`challenge`]).
//!
//! The URLs clients are told use `identity.public_url`, or else `http://` and the host the
//! request named. The layer runs first of all: discovery documents are public, and a client
//! fetches them before it has any credential.

mod challenge;
mod service;
mod upstream_document;

pub use service::{Discover, DiscoveryLayer};

use std::sync::Arc;

use http::HeaderValue;
use http::uri::Authority;

use crate::clock::Clock;
use crate::config::{HostPattern, HostPolicy, Transport, UpstreamAuth};
use crate::identity::{Identity, ResourceMetadata, WELL_KNOWN};
use crate::route::Route;
use upstream_document::UpstreamDocument;

/// What the discovery layer serves and rewrites, built once per listener.
#[derive(Debug)]
pub struct Discovery {
    /// The gateway's own document, when it is the resource server.
    own: Option<Arc<ResourceMetadata>>,
    /// `identity.public_url`: the origin clients reach the gateway at.
    public_url: Option<String>,
    /// The hosts hardening admits: without a public URL, only these are named back to clients.
    hosts: HostPolicy,
    /// The routes whose upstream does its own OAuth, in route order.
    relayed: Vec<Arc<UpstreamDocument>>,
}

impl Discovery {
    /// Discovery for `routes` under `identity`: the gateway's own metadata if it has any, else
    /// the metadata of every HTTP upstream with `auth: forward`.
    pub fn new(
        identity: &Identity,
        routes: &[Route],
        hosts: &HostPolicy,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let relayed = if identity.metadata.is_some() {
            Vec::new()
        } else {
            routes
                .iter()
                .filter(|route| {
                    matches!(route.upstream.auth, UpstreamAuth::Forward)
                        && matches!(
                            route.upstream.transport,
                            Transport::StreamableHttp | Transport::LegacySse
                        )
                })
                .map(|route| Arc::new(UpstreamDocument::new(route, clock.clone())))
                .collect()
        };
        Self {
            own: identity.metadata.clone(),
            public_url: identity.public_url.clone(),
            hosts: hosts.clone(),
            relayed,
        }
    }

    /// The relayed upstream whose document `suffix` (what follows the well-known prefix)
    /// asks for: the route at that path, or the first route for the bare prefix.
    fn relayed_for_metadata(&self, suffix: &str) -> Option<&Arc<UpstreamDocument>> {
        if suffix.is_empty() {
            return self.relayed.first();
        }
        self.relayed
            .iter()
            .find(|relayed| relayed.route_path.trim_end_matches('/') == suffix)
    }

    /// The relayed upstream an MCP request to `path` reaches, if any.
    fn relayed_for_request(&self, path: &str) -> Option<&Arc<UpstreamDocument>> {
        self.relayed.iter().find(|relayed| relayed.serves(path))
    }

    /// The origin the client reached the gateway at: the configured public URL, else `http://`
    /// and the authority the request named (HTTP/2's `:authority`, else `Host`).
    fn origin(
        &self,
        authority: Option<&Authority>,
        host: Option<&HeaderValue>,
    ) -> Result<String, NoOrigin> {
        if let Some(public_url) = &self.public_url {
            return Ok(public_url.clone());
        }
        let authority = match authority {
            Some(authority) => authority.clone(),
            None => host
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.parse::<Authority>().ok())
                .ok_or(NoOrigin::Unusable)?,
        };
        // No userinfo, and nothing that could end a quoted string or a JSON text.
        let plain = authority
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
        if !plain {
            return Err(NoOrigin::Unusable);
        }
        // A host hardening would refuse is not named back, so no response carries a URL of
        // a client's choosing that the gateway would not serve.
        if let Some(allowed) = &self.hosts.allowed
            && !HostPattern::any_matches(allowed, authority.as_str())
        {
            return Err(NoOrigin::NotAllowed);
        }
        Ok(format!("http://{authority}"))
    }
}

/// Why a request names no origin the gateway can tell clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoOrigin {
    /// No host, or not a plain `host[:port]`.
    Unusable,
    /// A host outside `hosts:` (hardening answers 421 for it on MCP paths).
    NotAllowed,
}

/// What follows the well-known prefix in `path`, if `path` is a metadata URL at all.
fn metadata_suffix(path: &str) -> Option<&str> {
    let suffix = path.strip_prefix(WELL_KNOWN)?;
    (suffix.is_empty() || suffix.starts_with('/')).then_some(suffix)
}

#[cfg(test)]
mod tests;
