//! Who is calling: every request's principal, into its request context as [`Caller`], or a 401.
//!
//! The methods of [`Identity`] are tried in order and the first one whose kind of credential
//! the request carries decides: a bearer JWT verified against the issuer's JWKS ([`jwt`],
//! [`BearerJwt`]), a static API key looked up by its hash ([`ApiKeys`]), or the trusted header
//! an authenticating proxy in front of the gateway sets. A credential that does not verify is
//! refused with 401 and `WWW-Authenticate` ([`challenge`]); so is a request with none, unless
//! anonymous callers are allowed. The layer runs first of all (see `stack.rs`), so a request
//! with a bad credential costs one verification and reaches nothing: no body read, no session,
//! no upstream. The body never names the caller.

mod api_keys;
mod bearer;
mod challenge;
pub mod jwt;
mod layer;
mod service;

pub use api_keys::{ApiKey, ApiKeys, hash_key, new_key, parse_hash};
pub use bearer::{BearerJwt, ClaimNames};
pub use challenge::{ResourceMetadata, WELL_KNOWN, metadata_url};
pub(crate) use challenge::{metadata_document, status_only};
pub use layer::IdentityLayer;
pub use service::Identify;

use std::sync::Arc;

use countersign_policy::Principal;
use http::{HeaderMap, HeaderName, header};

/// The caller of a request, in its [`RequestContext`](crate::context::RequestContext). Always
/// `Some` once the identity layer has let a request through; `None` only in tests that build
/// requests by hand.
#[derive(Debug, Clone)]
pub struct Caller(pub Option<Principal>);

/// One way of telling who is calling.
#[derive(Debug, Clone)]
pub enum Method {
    /// `Authorization: Bearer <JWT>` (three dot-separated parts).
    Jwt(Arc<BearerJwt>),
    /// `Authorization: Bearer <key>` for any other bearer token.
    ApiKeys(Arc<ApiKeys>),
    /// A header set by an authenticating proxy in front of the gateway, which must strip it
    /// from what clients send.
    TrustedHeader {
        header: HeaderName,
        /// Comma-separated group names.
        groups_header: Option<HeaderName>,
    },
}

/// Where the caller's identity comes from.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Tried in order; the first whose credential the request carries decides.
    pub methods: Vec<Method>,
    /// A request with no credential is `anonymous` instead of refused.
    pub allow_anonymous: bool,
    /// Served at `/.well-known/oauth-protected-resource…` (by the discovery layer) and named in
    /// every 401, when the gateway is the resource server for bearer tokens.
    pub metadata: Option<Arc<ResourceMetadata>>,
    /// The gateway's public origin as clients reach it (`identity.public_url`), e.g.
    /// `https://mcp.example.com`; `None`: `http://` and the request's own host.
    pub public_url: Option<String>,
    /// Keep the client's `Authorization` header after the gateway consumed it (off: an
    /// upstream with `auth: forward` never sees a token that was meant for the gateway).
    pub forward_consumed_token: bool,
}

impl Default for Identity {
    /// No methods: every caller is `anonymous`.
    fn default() -> Self {
        Self {
            methods: Vec::new(),
            allow_anonymous: true,
            metadata: None,
            public_url: None,
            forward_consumed_token: false,
        }
    }
}

/// Why a request was refused. The reason is for logs; the client learns only the 401.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential any method accepts, and anonymous callers are not allowed.
    Missing,
    /// A credential that did not verify.
    Invalid(String),
}

/// What one request carries, decided without awaiting anything.
pub(crate) enum Claim {
    Decided(Result<Identified, Refusal>),
    /// A bearer JWT to verify (may fetch the JWKS).
    Jwt(Arc<BearerJwt>, String),
}

/// A principal, and whether the gateway consumed the `Authorization` header to find it.
#[derive(Debug, Clone)]
pub(crate) struct Identified {
    pub(crate) principal: Principal,
    pub(crate) consumed_authorization: bool,
}

impl Identity {
    /// Only the trusted header (the form of older configuration files).
    pub fn trusted_header(header: HeaderName, groups_header: Option<HeaderName>) -> Self {
        Self {
            methods: vec![Method::TrustedHeader {
                header,
                groups_header,
            }],
            allow_anonymous: false,
            ..Self::default()
        }
    }

    /// Whether a bearer JWT method is configured (the gateway is a resource server).
    pub fn verifies_tokens(&self) -> bool {
        self.methods.iter().any(|m| matches!(m, Method::Jwt(_)))
    }

    pub(crate) fn claim(&self, headers: &HeaderMap) -> Claim {
        let bearer = bearer_token(headers);
        let mut bearer_method = false;
        for method in &self.methods {
            match method {
                Method::Jwt(jwt) => {
                    bearer_method = true;
                    if let Some(token) = bearer.filter(|t| looks_like_jwt(t)) {
                        return Claim::Jwt(jwt.clone(), token.to_owned());
                    }
                }
                Method::ApiKeys(keys) => {
                    bearer_method = true;
                    if let Some(key) = bearer.filter(|t| !looks_like_jwt(t)) {
                        return Claim::Decided(
                            keys.principal(key)
                                .map(|principal| Identified {
                                    principal,
                                    consumed_authorization: true,
                                })
                                .ok_or_else(|| Refusal::Invalid("unknown API key".into())),
                        );
                    }
                }
                Method::TrustedHeader {
                    header,
                    groups_header,
                } => {
                    if let Some(found) = trusted(headers, header, groups_header.as_ref()) {
                        return Claim::Decided(found.map(|principal| Identified {
                            principal,
                            consumed_authorization: false,
                        }));
                    }
                }
            }
        }
        // A bearer token none of the methods took is the gateway's to refuse when it verifies
        // bearer tokens at all; otherwise it is the upstream's (`auth: forward`).
        if bearer_method && headers.contains_key(header::AUTHORIZATION) {
            return Claim::Decided(Err(Refusal::Invalid(
                "the Authorization header is not a bearer token any method accepts".into(),
            )));
        }
        Claim::Decided(if self.allow_anonymous {
            Ok(Identified {
                principal: Principal {
                    id: "anonymous".into(),
                    ..Principal::default()
                },
                consumed_authorization: false,
            })
        } else {
            Err(Refusal::Missing)
        })
    }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive, RFC 7235).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

/// The trusted header's principal: `None` when the header is absent (not this method's
/// request), `Err` when present but blank or not text.
fn trusted(
    headers: &HeaderMap,
    header: &HeaderName,
    groups_header: Option<&HeaderName>,
) -> Option<Result<Principal, Refusal>> {
    let value = headers.get(header)?;
    let id = match value.to_str().map(str::trim) {
        Ok(id) if !id.is_empty() => id,
        _ => return Some(Err(Refusal::Invalid(format!("`{header}` is blank")))),
    };
    let groups = groups_header
        .and_then(|h| headers.get(h))
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some(Ok(Principal {
        id: id.to_owned(),
        groups,
        claims: Arc::default(),
    }))
}

#[cfg(test)]
mod tests;
