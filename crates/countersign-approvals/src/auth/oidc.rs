//! The page's OpenID Connect login: discovery, authorization code with PKCE (S256), `state`
//! and `nonce`, the token exchange, and the ID token verified against the provider's JWKS
//! ([`crate::jwt`]); then a page session cookie names the approver until it expires.
//!
//! The login's secrets (`state`, `nonce`, the PKCE verifier) and where to return travel in a
//! short-lived cookie sealed under the link key, so any replica can finish a login another
//! started, and nothing is kept in memory per login. The return target must be a valid signed
//! approval link, so the callback cannot be used as an open redirect.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::sync::OnceCell;
use tracing::warn;

use super::cookie;
use super::session::PageSession;
use crate::approve::{cookie_path, set_session_cookie};
use crate::client::HttpClient;
use crate::config::{AuthConfig, OidcConfig};
use crate::jwt::{Expectations, JwksVerifier};
use crate::link;
use crate::page::ApprovalPage;
use crate::server::{html_response, redirect};
use crate::views;

/// How long a person has to complete the provider's login.
const LOGIN_TTL_SECS: u64 = 600;

/// The provider's endpoints, from its discovery document.
#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

/// The page's OpenID Connect client; the provider is discovered at the first login and kept.
#[derive(Debug)]
pub struct Oidc {
    config: OidcConfig,
    client: HttpClient,
    provider: OnceCell<(Discovery, JwksVerifier)>,
}

/// A login in progress, sealed in the `countersign_login` cookie.
#[derive(Debug, Serialize, Deserialize)]
struct LoginState {
    state: String,
    nonce: String,
    verifier: String,
    /// The approval link segment to return to.
    next: String,
    expires_at: u64,
}

impl Oidc {
    pub fn new(config: OidcConfig, client: HttpClient) -> Self {
        Self {
            config,
            client,
            provider: OnceCell::new(),
        }
    }

    /// Discovery, fetched once; a failed fetch is retried at the next login.
    async fn provider(&self) -> Result<&(Discovery, JwksVerifier), String> {
        self.provider
            .get_or_try_init(|| async {
                let url = format!(
                    "{}/.well-known/openid-configuration",
                    self.config.issuer.trim_end_matches('/')
                );
                let (status, _, body) = self
                    .client
                    .send(
                        Method::GET,
                        &url,
                        &[],
                        Bytes::new(),
                        self.config.http_timeout,
                    )
                    .await
                    .map_err(|e| format!("discovery: {e}"))?;
                if !status.is_success() {
                    return Err(format!("discovery: status {status}"));
                }
                let discovery: Discovery =
                    serde_json::from_slice(&body).map_err(|e| format!("discovery: {e}"))?;
                // OpenID Connect Discovery §4.3: the document must name the issuer we asked.
                if discovery.issuer != self.config.issuer {
                    return Err(format!(
                        "discovery: issuer is `{}`, not the configured `{}`",
                        discovery.issuer, self.config.issuer
                    ));
                }
                let verifier = JwksVerifier::new(
                    discovery.jwks_uri.clone(),
                    self.client.clone(),
                    self.config.http_timeout,
                );
                Ok((discovery, verifier))
            })
            .await
    }

    /// Exchanges `code` and returns who logged in (user, groups).
    async fn finish(
        &self,
        code: &str,
        redirect_uri: &str,
        login: &LoginState,
    ) -> Result<(String, Vec<String>), String> {
        let (discovery, verifier) = self.provider().await?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_verifier", &login.verifier)
            .finish();
        // client_secret_basic (RFC 6749 §2.3.1): both parts form-encoded, then base64.
        let credentials = format!(
            "{}:{}",
            form_encode(&self.config.client_id),
            form_encode(&self.config.client_secret.0)
        );
        let headers = [
            (
                "content-type",
                "application/x-www-form-urlencoded".to_owned(),
            ),
            ("accept", "application/json".to_owned()),
            (
                "authorization",
                format!("Basic {}", STANDARD.encode(credentials)),
            ),
        ];
        let (status, _, body) = self
            .client
            .send(
                Method::POST,
                &discovery.token_endpoint,
                &headers,
                Bytes::from(form),
                self.config.http_timeout,
            )
            .await
            .map_err(|e| format!("token exchange: {e}"))?;
        if !status.is_success() {
            return Err(format!("token exchange: status {status}"));
        }
        #[derive(Deserialize)]
        struct TokenResponse {
            id_token: String,
        }
        let tokens: TokenResponse =
            serde_json::from_slice(&body).map_err(|e| format!("token response: {e}"))?;
        let claims = verifier
            .verify(
                &tokens.id_token,
                &Expectations {
                    issuer: &discovery.issuer,
                    audience: &self.config.client_id,
                    nonce: Some(&login.nonce),
                },
            )
            .await
            .map_err(|e| format!("id token: {e}"))?;
        let user = self
            .config
            .username_claims
            .iter()
            .find_map(|claim| claims.get(claim).and_then(|v| v.as_str()))
            .filter(|user| !user.is_empty())
            .ok_or("id token: no username claim")?
            .to_owned();
        let groups = match claims.get(&self.config.groups_claim) {
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect(),
            Some(serde_json::Value::String(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        Ok((user, groups))
    }
}

fn form_encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn random_token() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

fn callback_uri(page: &ApprovalPage) -> String {
    format!("{}/oidc/callback", page.config().base())
}

/// Sends the person to the provider to log in, returning to approval link `segment` after.
pub(crate) async fn start_login(page: &ApprovalPage, segment: &str) -> Response<Full<Bytes>> {
    let (Some(oidc), AuthConfig::Oidc(config)) = (page.oidc(), &page.config().auth) else {
        return html_response(StatusCode::UNAUTHORIZED, views::not_signed_in_page());
    };
    let (discovery, _) = match oidc.provider().await {
        Ok(provider) => provider,
        Err(error) => {
            warn!(%error, "OpenID Connect provider unavailable");
            page.metrics.refused("login_failed");
            return html_response(StatusCode::SERVICE_UNAVAILABLE, views::login_failed_page());
        }
    };
    let login = LoginState {
        state: random_token(),
        nonce: random_token(),
        verifier: random_token(),
        next: segment.to_owned(),
        expires_at: page.now_unix_ms() / 1000 + LOGIN_TTL_SECS,
    };
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(login.verifier.as_bytes()));
    let Ok(mut location) = url::Url::parse(&discovery.authorization_endpoint) else {
        return html_response(StatusCode::SERVICE_UNAVAILABLE, views::login_failed_page());
    };
    location
        .query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &config.client_id)
        .append_pair("redirect_uri", &callback_uri(page))
        .append_pair("scope", &config.scopes.join(" "))
        .append_pair("state", &login.state)
        .append_pair("nonce", &login.nonce)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256");
    let mut response = redirect(location.as_str());
    let sealed = cookie::seal(page.link_key(), cookie::LOGIN, &login);
    let value = cookie::set_cookie(cookie::LOGIN, &sealed, &cookie_path(page), LOGIN_TTL_SECS);
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// `GET /oidc/callback?code=…&state=…`: finishes a login and returns to the approval link.
pub(crate) async fn callback<B>(
    page: &ApprovalPage,
    request: &Request<B>,
) -> Response<Full<Bytes>> {
    let failed = |why: &str| {
        warn!(why, "OpenID Connect login failed");
        page.metrics.refused("login_failed");
        html_response(StatusCode::UNAUTHORIZED, views::login_failed_page())
    };
    let Some(oidc) = page.oidc() else {
        return html_response(StatusCode::NOT_FOUND, views::unknown_page());
    };
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let param = |name: &str| {
        query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let now = page.now_unix_ms() / 1000;
    let Some(login) = cookie::find(request.headers(), cookie::LOGIN)
        .and_then(|sealed| cookie::open::<LoginState>(page.link_key(), cookie::LOGIN, sealed))
        .filter(|login| login.expires_at > now)
    else {
        return failed("no login in progress in this browser");
    };
    if param("state") != Some(login.state.as_str()) {
        return failed("state does not match");
    }
    let Some(code) = param("code") else {
        return failed("the provider returned no code");
    };
    if link::verify_segment(page.link_key(), &login.next).is_none() {
        return failed("the return link is not an approval link");
    }
    let (user, groups) = match oidc.finish(code, &callback_uri(page), &login).await {
        Ok(who) => who,
        Err(why) => return failed(&why),
    };
    let ttl = match &page.config().auth {
        AuthConfig::Oidc(config) => config.session_ttl.as_secs(),
        AuthConfig::TrustedHeader { .. } => 0,
    };
    let session = PageSession {
        user: Some(user),
        groups,
        ..PageSession::anonymous(now, ttl)
    };
    let mut response = redirect(&format!("{}/approve/{}", page.config().base(), login.next));
    set_session_cookie(page, &mut response, &session);
    if let Ok(clear) =
        HeaderValue::from_str(&cookie::clear_cookie(cookie::LOGIN, &cookie_path(page)))
    {
        response.headers_mut().append(header::SET_COOKIE, clear);
    }
    response
}

#[cfg(test)]
mod tests;
