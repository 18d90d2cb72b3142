//! The page's validated settings. The YAML (`approvals:`) is read and checked by
//! `countersign-app`; everything here is already valid.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;

use crate::link::LinkKey;

/// Settings of the approval page.
#[derive(Debug, Clone)]
pub struct PageConfig {
    /// Address of the page's own listener.
    pub listen: SocketAddr,
    /// Where people reach the listener (behind an ingress, the ingress's URL), without a
    /// trailing slash: links are `<public_url>/approve/<id>.<sig>`.
    pub public_url: url::Url,
    /// How long a request waits for a decision.
    pub ttl: Duration,
    pub link_key: LinkKey,
    pub auth: AuthConfig,
    pub webhooks: Vec<WebhookConfig>,
    /// Take the client address of a decision from `X-Forwarded-For` (its last entry) instead
    /// of the socket. Only behind a proxy that sets it.
    pub trust_forwarded_for: bool,
    /// Most requests pending at once (per replica with the memory book).
    pub max_pending: usize,
}

impl PageConfig {
    /// `scheme://host[:port]` of `public_url`: what a browser sends as `Origin`.
    pub fn origin(&self) -> String {
        self.public_url.origin().ascii_serialization()
    }

    /// `public_url` as text without a trailing slash.
    pub fn base(&self) -> String {
        self.public_url.as_str().trim_end_matches('/').to_owned()
    }

    /// The path of `public_url`, without a trailing slash (`""` at the root).
    pub fn base_path(&self) -> String {
        self.public_url.path().trim_end_matches('/').to_owned()
    }
}

/// How the page learns who the approver is. The link alone never suffices.
#[derive(Debug, Clone)]
pub enum AuthConfig {
    /// Identity set by an authenticating proxy in front of the page (oauth2-proxy and the
    /// like); the page must not be reachable around that proxy.
    TrustedHeader {
        user: HeaderName,
        groups: Option<HeaderName>,
    },
    /// The page's own OpenID Connect login.
    Oidc(OidcConfig),
}

/// The page's OpenID Connect client.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// The provider's issuer URL; discovery is `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Secret,
    pub scopes: Vec<String>,
    /// Claims naming the approver, tried in order (`preferred_username`, then `sub`).
    pub username_claims: Vec<String>,
    pub groups_claim: String,
    /// How long a login lasts on the page.
    pub session_ttl: Duration,
    /// Deadline of each request to the provider (discovery, token, JWKS).
    pub http_timeout: Duration,
}

/// A secret that never prints.
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A webhook told about each opened request.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub url: url::Url,
    pub format: WebhookFormat,
    /// Key of the `X-Countersign-Signature` HMAC (JSON format).
    pub secret: Option<Secret>,
    /// Where the secret came from, for messages.
    pub secret_file: Option<PathBuf>,
    /// Include the call's arguments in the body. Default off: the link is the point.
    pub include_arguments: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookFormat {
    Json,
    Slack,
}
