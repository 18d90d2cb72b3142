//! The `approvals:` section: the out-of-band approval page (docs/approval-page.md). Without it
//! there is no page, and held calls use elicitation or tokens only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use base64::Engine as _;
use countersign_approvals::{
    AuthConfig, LinkKey, OidcConfig, PageConfig, Secret, WebhookConfig, WebhookFormat,
};
use serde::Deserialize;

use super::{duration, nonzero, parse_addr};

/// The environment variable that may hold the link key (base64, at least 32 bytes).
pub const LINK_KEY_VARIABLE: &str = "COUNTERSIGN_APPROVAL_LINK_KEY";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawApprovals {
    /// Address of the page's own listener. Required.
    pub listen: Option<String>,
    /// Where people reach the page (an ingress URL, possibly with a path); links are
    /// `<public_url>/approve/<id>.<sig>`. `https://`, or `http://` on a loopback host only (the
    /// page's cookies are `Secure`). Required.
    pub public_url: Option<String>,
    /// How long a request waits for a decision. Default `10m`.
    pub ttl: Option<String>,
    /// File with the link key (base64, at least 32 bytes), which signs links, CSRF tokens and
    /// the page's cookies. Default: `COUNTERSIGN_APPROVAL_LINK_KEY`; with neither, a random key
    /// per start (links then break across restarts and replicas).
    pub link_key_file: Option<PathBuf>,
    /// How approvers sign in: `trusted_header` or `oidc`, exactly one. Required.
    pub auth: Option<RawApprovalAuth>,
    /// Told about every opened request. Default none.
    pub webhooks: Vec<RawWebhook>,
    /// Take a decision's client address from `X-Forwarded-For` (its last entry). Default `false`.
    pub trust_forwarded_for: bool,
    /// Most requests pending at once, per replica with the in-memory book. Default `10000`.
    pub max_pending: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawApprovalAuth {
    pub trusted_header: Option<RawTrustedHeader>,
    pub oidc: Option<RawOidc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrustedHeader {
    /// Header naming the approver, set by the authenticating proxy in front. Required.
    pub user: String,
    /// Header with the approver's comma-separated groups. Default none.
    #[serde(default)]
    pub groups: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOidc {
    /// The provider's issuer URL, exactly as its discovery document names it. Required.
    pub issuer: String,
    pub client_id: String,
    /// File holding the client secret. Required.
    pub client_secret_file: PathBuf,
    /// Scopes asked for. Default `[openid, profile]`; must include `openid`.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Claim naming the approver. Default `preferred_username`, then `sub`.
    #[serde(default)]
    pub username_claim: Option<String>,
    /// Claim listing the approver's groups. Default `groups`.
    #[serde(default)]
    pub groups_claim: Option<String>,
    /// How long a login lasts on the page. Default `1h`.
    #[serde(default)]
    pub session_ttl: Option<String>,
    /// Deadline of each request to the provider. Default `5s`.
    #[serde(default)]
    pub http_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebhook {
    pub url: String,
    /// `json` (default, signed) or `slack` (an incoming-webhook body).
    #[serde(default)]
    pub format: Option<String>,
    /// File with the HMAC secret of `X-Countersign-Signature`. Required for `json`.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// Also send the call's arguments. Default `false`.
    #[serde(default)]
    pub include_arguments: bool,
}

/// The validated page settings and whether its link key was generated (worth a warning).
#[derive(Debug, Clone)]
pub struct ApprovalsConfig {
    pub page: PageConfig,
    pub link_key_generated: bool,
}

impl RawApprovals {
    /// Makes relative file names relative to the config file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let resolve = |file: &mut PathBuf| {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        };
        self.link_key_file.as_mut().map(resolve);
        if let Some(oidc) = self.auth.as_mut().and_then(|a| a.oidc.as_mut()) {
            resolve(&mut oidc.client_secret_file);
        }
        for hook in &mut self.webhooks {
            hook.secret_file.as_mut().map(resolve);
        }
    }

    /// `other_listeners` are the MCP and admin addresses, which the page must not share.
    pub fn validate(self, other_listeners: &[SocketAddr]) -> anyhow::Result<ApprovalsConfig> {
        let listen = parse_addr(
            self.listen
                .as_deref()
                .context("approvals.listen is required")?,
            "approvals.listen",
        )?;
        ensure!(
            listen.port() == 0 || !other_listeners.contains(&listen),
            "approvals.listen must differ from listen and admin"
        );
        let public_url = public_url(
            self.public_url
                .as_deref()
                .context("approvals.public_url is required: the URL people open links at")?,
            "approvals.public_url",
        )?;
        ensure!(
            public_url.query().is_none() && public_url.fragment().is_none(),
            "approvals.public_url must not have a query or fragment"
        );
        let ttl = duration(self.ttl.as_deref(), "10m", "approvals.ttl")?;
        ensure!(
            ttl <= Duration::from_secs(24 * 3600),
            "approvals.ttl must be at most 24h"
        );
        let (link_key, link_key_generated) = link_key(self.link_key_file.as_deref())?;
        let auth = auth(self.auth.context(
            "approvals.auth is required: the page needs approvers to sign in \
             (trusted_header or oidc), a link alone never approves",
        )?)?;
        let webhooks = self
            .webhooks
            .into_iter()
            .enumerate()
            .map(|(i, hook)| webhook(hook).with_context(|| format!("approvals.webhooks[{i}]")))
            .collect::<anyhow::Result<_>>()?;
        let max_pending = nonzero(self.max_pending.unwrap_or(10_000), "approvals.max_pending")?;
        Ok(ApprovalsConfig {
            page: PageConfig {
                listen,
                public_url,
                ttl,
                link_key,
                auth,
                webhooks,
                trust_forwarded_for: self.trust_forwarded_for,
                max_pending: max_pending.get(),
            },
            link_key_generated,
        })
    }
}

/// An `https://` URL, or `http://` on a loopback host (where browsers keep `Secure` cookies).
fn public_url(text: &str, field: &str) -> anyhow::Result<url::Url> {
    let url = url::Url::parse(text).with_context(|| format!("{field}: `{text}` is not a URL"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(host)) => host == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        "http" => bail!("{field} must be https:// (http:// only on localhost)"),
        other => bail!("{field}: scheme `{other}` is not http or https"),
    }
}

fn link_key(file: Option<&Path>) -> anyhow::Result<(LinkKey, bool)> {
    let (text, source) = match (std::env::var(LINK_KEY_VARIABLE), file) {
        (Ok(text), _) => (text, LINK_KEY_VARIABLE.to_owned()),
        (Err(_), Some(file)) => (
            std::fs::read_to_string(file).with_context(|| {
                format!("reading the approval link key from {}", file.display())
            })?,
            file.display().to_string(),
        ),
        (Err(_), None) => return Ok((LinkKey::generate(), true)),
    };
    let text = text.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text))
        .with_context(|| format!("the approval link key in {source} is not base64"))?;
    let key = LinkKey::new(bytes).with_context(|| {
        format!(
            "the approval link key in {source} is too short: use at least {} random bytes",
            countersign_approvals::link::MIN_KEY_BYTES
        )
    })?;
    Ok((key, false))
}

fn auth(raw: RawApprovalAuth) -> anyhow::Result<AuthConfig> {
    match (raw.trusted_header, raw.oidc) {
        (Some(header), None) => {
            let name = |value: &str, field: &str| {
                http::HeaderName::try_from(value)
                    .with_context(|| format!("{field}: `{value}` is not a header name"))
            };
            Ok(AuthConfig::TrustedHeader {
                user: name(&header.user, "approvals.auth.trusted_header.user")?,
                groups: header
                    .groups
                    .as_deref()
                    .map(|g| name(g, "approvals.auth.trusted_header.groups"))
                    .transpose()?,
            })
        }
        (None, Some(oidc)) => Ok(AuthConfig::Oidc(oidc_config(oidc)?)),
        (Some(_), Some(_)) => bail!("approvals.auth: set trusted_header or oidc, not both"),
        (None, None) => bail!("approvals.auth: set trusted_header or oidc"),
    }
}

fn oidc_config(raw: RawOidc) -> anyhow::Result<OidcConfig> {
    public_url(&raw.issuer, "approvals.auth.oidc.issuer")?;
    ensure!(
        !raw.client_id.is_empty(),
        "approvals.auth.oidc.client_id is required"
    );
    let secret = read_secret(
        &raw.client_secret_file,
        "approvals.auth.oidc.client_secret_file",
    )?;
    let scopes = raw
        .scopes
        .unwrap_or_else(|| vec!["openid".to_owned(), "profile".to_owned()]);
    ensure!(
        scopes.iter().any(|s| s == "openid"),
        "approvals.auth.oidc.scopes must include openid"
    );
    let username_claims = match raw.username_claim {
        Some(claim) => vec![claim],
        None => vec!["preferred_username".to_owned(), "sub".to_owned()],
    };
    Ok(OidcConfig {
        issuer: raw.issuer,
        client_id: raw.client_id,
        client_secret: secret,
        scopes,
        username_claims,
        groups_claim: raw.groups_claim.unwrap_or_else(|| "groups".to_owned()),
        session_ttl: duration(
            raw.session_ttl.as_deref(),
            "1h",
            "approvals.auth.oidc.session_ttl",
        )?,
        http_timeout: duration(
            raw.http_timeout.as_deref(),
            "5s",
            "approvals.auth.oidc.http_timeout",
        )?,
    })
}

fn webhook(raw: RawWebhook) -> anyhow::Result<WebhookConfig> {
    let url =
        url::Url::parse(&raw.url).with_context(|| format!("url: `{}` is not a URL", raw.url))?;
    ensure!(
        matches!(url.scheme(), "https" | "http"),
        "url must be http:// or https://"
    );
    let format = match raw.format.as_deref().unwrap_or("json") {
        "json" => WebhookFormat::Json,
        "slack" => WebhookFormat::Slack,
        other => bail!("format must be `json` or `slack`, not `{other}`"),
    };
    let secret = raw
        .secret_file
        .as_deref()
        .map(|file| read_secret(file, "secret_file"))
        .transpose()?;
    ensure!(
        format != WebhookFormat::Json || secret.is_some(),
        "secret_file is required for format json: receivers check the signature"
    );
    Ok(WebhookConfig {
        url,
        format,
        secret,
        secret_file: raw.secret_file,
        include_arguments: raw.include_arguments,
    })
}

fn read_secret(file: &Path, field: &str) -> anyhow::Result<Secret> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("{field}: reading {}", file.display()))?;
    let text = text.trim();
    ensure!(!text.is_empty(), "{field}: {} is empty", file.display());
    Ok(Secret(text.to_owned()))
}

#[cfg(test)]
mod tests;
