//! `identity:` — who is calling. One or more methods, tried in order, first match wins:
//!
//! ```yaml
//! identity:
//!   methods:
//!     - jwt: { issuer: https://id.example.com, audience: https://mcp.example.com/mcp,
//!              jwks_url: https://id.example.com/jwks }
//!     - api_keys: { file: /etc/countersign/api-keys.yaml }
//!     - trusted_header: { header: x-user, groups_header: x-groups }
//!   allow_anonymous: false
//!   public_url: https://mcp.example.com
//! ```
//!
//! The older form (`identity: { header: x-user, groups_header: x-groups }`) still works and
//! means one `trusted_header` method: configuration files written for it keep their meaning,
//! and mixing it with `methods:` is refused so a file never says two things.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail, ensure};
use countersign_proxy::identity::jwt::{JwksVerifier, Strictness};
use countersign_proxy::identity::{
    ApiKey, ApiKeys, BearerJwt, ClaimNames, Identity, Method, ResourceMetadata, parse_hash,
};
use countersign_proxy::outbound::HttpClient;
use serde::Deserialize;

use super::duration;

/// Where the caller's identity comes from. Default: every caller is `anonymous`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawIdentity {
    /// Older form of a `trusted_header` method: the header naming the principal.
    pub header: Option<String>,
    /// Older form: the header with comma-separated groups.
    pub groups_header: Option<String>,
    pub methods: Vec<RawMethod>,
    /// Requests without any credential are `anonymous` instead of refused (401).
    pub allow_anonymous: bool,
    /// The gateway's public origin (`https://mcp.example.com`), for the protected-resource
    /// metadata and the `resource_metadata` of 401s. Required with a `jwt` method. Without it,
    /// URLs clients are told name `http://` and the host they asked for.
    pub public_url: Option<String>,
    /// Authorization servers named in the metadata. Default: the `jwt` methods' issuers.
    pub authorization_servers: Option<Vec<String>>,
    pub scopes_supported: Vec<String>,
    /// Keep forwarding a bearer token the gateway verified to `auth: forward` upstreams.
    pub forward_token: bool,
}

/// One method: a map with exactly one of these keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMethod {
    pub jwt: Option<RawJwt>,
    pub api_keys: Option<RawApiKeys>,
    pub trusted_header: Option<RawTrustedHeader>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub issuer: String,
    pub audience: String,
    pub jwks_url: Option<String>,
    pub jwks_file: Option<PathBuf>,
    /// Clock skew allowed on `exp`/`nbf`/`iat`. Default `60s`.
    pub leeway: Option<String>,
    /// Default all of RS256, ES256, EdDSA; HS* and `none` are never accepted.
    pub algorithms: Option<Vec<String>>,
    /// Default `sub`.
    pub principal_claim: Option<String>,
    /// Default `groups`.
    pub groups_claim: Option<String>,
    /// Deadline of one JWKS fetch. Default `5s`.
    pub fetch_timeout: Option<String>,
    /// Keys older than this are fetched again before use. Default `1h`.
    pub cache_ttl: Option<String>,
    /// Shortest time between fetches caused by an unknown `kid`. Default `10s`.
    pub min_refetch: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiKeys {
    /// YAML list of `{sha256: "sha256:<hex>", principal: name, groups: [..]}`.
    pub file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrustedHeader {
    pub header: String,
    pub groups_header: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeyEntry {
    sha256: String,
    principal: String,
    #[serde(default)]
    groups: Vec<String>,
}

impl RawIdentity {
    /// The identity of a listener whose MCP endpoints are `paths`.
    pub fn validate(self, paths: &[String]) -> anyhow::Result<Identity> {
        if self.methods.is_empty() {
            ensure!(
                self.groups_header.is_none() || self.header.is_some(),
                "identity.groups_header needs identity.header"
            );
            return match self.header {
                // The older form: one trusted header, required.
                Some(header) => Ok(Identity::trusted_header(
                    header_name(&header, "identity.header")?,
                    self.groups_header
                        .map(|h| header_name(&h, "identity.groups_header"))
                        .transpose()?,
                )),
                None => Ok(Identity::default()),
            };
        }
        ensure!(
            self.header.is_none() && self.groups_header.is_none(),
            "identity: give either `methods:` or the older `header:`/`groups_header:`, not both \
             (the older form is `methods: [{{trusted_header: {{header: …}}}}]`)"
        );
        let mut methods = Vec::with_capacity(self.methods.len());
        let mut issuers = Vec::new();
        for (i, raw) in self.methods.into_iter().enumerate() {
            let field = format!("identity.methods[{i}]");
            methods.push(match (raw.jwt, raw.api_keys, raw.trusted_header) {
                (Some(jwt), None, None) => {
                    issuers.push(jwt.issuer.clone());
                    Method::Jwt(Arc::new(jwt.validate(&field)?))
                }
                (None, Some(keys), None) => Method::ApiKeys(Arc::new(load_keys(&keys.file)?)),
                (None, None, Some(t)) => Method::TrustedHeader {
                    header: header_name(&t.header, &format!("{field}.trusted_header.header"))?,
                    groups_header: t
                        .groups_header
                        .map(|h| header_name(&h, &format!("{field}.trusted_header.groups_header")))
                        .transpose()?,
                },
                _ => bail!("{field}: give exactly one of `jwt`, `api_keys`, `trusted_header`"),
            });
        }
        let public_url = match self.public_url {
            Some(url) => {
                let parsed = url::Url::parse(&url)
                    .with_context(|| format!("identity.public_url: `{url}` is not a URL"))?;
                ensure!(
                    matches!(parsed.scheme(), "http" | "https")
                        && parsed.path().trim_end_matches('/').is_empty()
                        && !url.contains('"'),
                    "identity.public_url must be an origin like https://mcp.example.com"
                );
                Some(url.trim_end_matches('/').to_owned())
            }
            None => None,
        };
        // The gateway is the resource server when it verifies tokens of authorization servers
        // (its own metadata names them); otherwise the upstreams' own metadata passes through.
        let authorization_servers = self.authorization_servers.unwrap_or(issuers);
        let metadata = match &public_url {
            Some(public_url) if !authorization_servers.is_empty() => {
                Some(Arc::new(ResourceMetadata {
                    public_url: public_url.clone(),
                    paths: paths.to_vec(),
                    authorization_servers,
                    scopes_supported: self.scopes_supported,
                }))
            }
            None if !authorization_servers.is_empty() => bail!(
                "identity.public_url is required with a `jwt` method or `authorization_servers`: \
                 clients find the authorization server through the metadata it names"
            ),
            _ => None,
        };
        Ok(Identity {
            methods,
            allow_anonymous: self.allow_anonymous,
            metadata,
            public_url,
            forward_consumed_token: self.forward_token,
        })
    }
}

impl RawJwt {
    fn validate(self, field: &str) -> anyhow::Result<BearerJwt> {
        ensure!(!self.issuer.is_empty(), "{field}.jwt.issuer is empty");
        ensure!(!self.audience.is_empty(), "{field}.jwt.audience is empty");
        let timeout = duration(
            self.fetch_timeout.as_deref(),
            "5s",
            &format!("{field}.jwt.fetch_timeout"),
        )?;
        let leeway = duration(
            self.leeway.as_deref(),
            "60s",
            &format!("{field}.jwt.leeway"),
        )?;
        let algorithms = match self.algorithms {
            None => countersign_proxy::identity::jwt::ASYMMETRIC.to_vec(),
            Some(names) => names
                .iter()
                .map(|name| {
                    countersign_proxy::identity::jwt::asymmetric_named(name).with_context(|| {
                        format!(
                            "{field}.jwt.algorithms: `{name}` is not one of RS256, ES256, EdDSA"
                        )
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        };
        let verifier = match (self.jwks_url, self.jwks_file) {
            (Some(url), None) => {
                url::Url::parse(&url)
                    .with_context(|| format!("{field}.jwt.jwks_url: `{url}` is not a URL"))?;
                JwksVerifier::new(url, HttpClient::new(), timeout)
                    .with_min_refetch(duration(
                        self.min_refetch.as_deref(),
                        "10s",
                        &format!("{field}.jwt.min_refetch"),
                    )?)
                    .with_max_age(duration(
                        self.cache_ttl.as_deref(),
                        "1h",
                        &format!("{field}.jwt.cache_ttl"),
                    )?)
            }
            (None, Some(path)) => {
                let text = std::fs::read_to_string(&path).with_context(|| {
                    format!("{field}.jwt.jwks_file: reading {}", path.display())
                })?;
                let keys = serde_json::from_str(&text).with_context(|| {
                    format!("{field}.jwt.jwks_file: {} is not a JWKS", path.display())
                })?;
                JwksVerifier::with_keys(keys)
            }
            _ => bail!("{field}.jwt: give exactly one of jwks_url and jwks_file"),
        };
        Ok(BearerJwt {
            issuer: self.issuer,
            audience: self.audience,
            claims: ClaimNames {
                principal: self.principal_claim.unwrap_or_else(|| "sub".into()),
                groups: self.groups_claim.unwrap_or_else(|| "groups".into()),
            },
            verifier: verifier.with_strictness(Strictness {
                leeway_secs: leeway.as_secs(),
                algorithms,
            }),
        })
    }
}

fn load_keys(path: &std::path::Path) -> anyhow::Result<ApiKeys> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("identity api_keys: reading {}", path.display()))?;
    let entries: Vec<RawKeyEntry> = serde_yaml_ng::from_str(&text).with_context(|| {
        format!(
            "identity api_keys: {} is not a list of keys",
            path.display()
        )
    })?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let sha256 = parse_hash(&entry.sha256).with_context(|| {
                format!(
                    "{}: key {i}: `sha256` must be `sha256:<64 hex digits>` \
                     (make one with `countersign apikey new`)",
                    path.display()
                )
            })?;
            ensure!(
                !entry.principal.trim().is_empty(),
                "{}: key {i}: `principal` is empty",
                path.display()
            );
            Ok(ApiKey {
                sha256,
                principal: entry.principal,
                groups: entry.groups,
            })
        })
        .collect::<anyhow::Result<_>>()
        .map(ApiKeys::new)
}

fn header_name(value: &str, field: &str) -> anyhow::Result<http::HeaderName> {
    http::HeaderName::try_from(value)
        .with_context(|| format!("{field}: `{value}` is not a header name"))
}
