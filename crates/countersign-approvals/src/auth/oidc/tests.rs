use std::time::Duration;

use countersign_proxy::approval::out_of_band::{Approvers, OutOfBand as _};
use http::StatusCode;
use serde_json::json;

use super::*;
use crate::config::Secret;
use crate::server::handle;
use crate::testing::*;

fn peer() -> std::net::SocketAddr {
    PEER.parse().expect("peer")
}

/// A discovery document on a free port naming `issuer` (its own URL unless told otherwise).
async fn discovery_server(claimed_issuer: Option<&str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let own = format!("http://{}", listener.local_addr().expect("addr"));
    let body = json!({
        "issuer": claimed_issuer.unwrap_or(&own),
        "authorization_endpoint": format!("{own}/auth"),
        "token_endpoint": format!("{own}/token"),
        "jwks_uri": format!("{own}/jwks"),
    })
    .to_string();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            let service =
                hyper::service::service_fn(move |_request: Request<hyper::body::Incoming>| {
                    let body = body.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            body,
                        ))))
                    }
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    own
}

fn oidc_fixture(issuer: &str) -> Fixture {
    let mut config = config();
    config.auth = AuthConfig::Oidc(OidcConfig {
        issuer: issuer.to_owned(),
        client_id: "countersign".to_owned(),
        client_secret: Secret("secret".to_owned()),
        scopes: vec!["openid".to_owned(), "groups".to_owned()],
        username_claims: vec!["preferred_username".to_owned()],
        groups_claim: "groups".to_owned(),
        session_ttl: Duration::from_secs(3600),
        http_timeout: Duration::from_secs(5),
    });
    fixture_with(config)
}

fn set_cookies(response: &Response<Full<Bytes>>) -> Vec<String> {
    response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn unauthenticated_visit_goes_to_the_provider_with_pkce_state_and_nonce() {
    let issuer = discovery_server(None).await;
    let fx = oidc_fixture(&issuer);
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let response = handle(&fx.page, get(&path_of(&ticket.url), None, None), peer()).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let location = url::Url::parse(
        response.headers()[header::LOCATION]
            .to_str()
            .expect("ascii"),
    )
    .expect("url");
    assert_eq!(
        location.as_str().split('?').next(),
        Some(format!("{issuer}/auth").as_str())
    );
    let query: std::collections::HashMap<String, String> =
        location.query_pairs().into_owned().collect();
    assert_eq!(query["response_type"], "code");
    assert_eq!(query["client_id"], "countersign");
    assert_eq!(query["redirect_uri"], format!("{PUBLIC}/oidc/callback"));
    assert_eq!(query["scope"], "openid groups");
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["code_challenge"].len(), 43, "base64url SHA-256");
    assert!(query["state"].len() >= 43 && query["nonce"].len() >= 43);
    let cookies = set_cookies(&response);
    let login = cookies
        .iter()
        .find(|c| c.starts_with("countersign_login="))
        .expect("a login cookie");
    for flag in ["Secure", "HttpOnly", "SameSite=Lax"] {
        assert!(login.contains(flag), "{flag} in {login}");
    }
    assert!(
        !login.contains(&query["state"]),
        "the login's secrets are sealed, not readable"
    );
}

#[tokio::test]
async fn provider_whose_discovery_names_another_issuer_is_refused() {
    let issuer = discovery_server(Some("https://evil.example.com")).await;
    let fx = oidc_fixture(&issuer);
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let response = handle(&fx.page, get(&path_of(&ticket.url), None, None), peer()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(set_cookies(&response).is_empty());
}

/// A callback carrying `login` sealed in its cookie and `query`.
fn callback_request(fx: &Fixture, login: Option<&LoginState>, query: &str) -> Request<Full<Bytes>> {
    let cookie = login.map(|login| {
        format!(
            "{}={}",
            cookie::LOGIN,
            cookie::seal(fx.page.link_key(), cookie::LOGIN, login)
        )
    });
    get(&format!("/oidc/callback?{query}"), None, cookie.as_deref())
}

fn login_state(fx: &Fixture, next: String) -> LoginState {
    LoginState {
        state: "state-1".to_owned(),
        nonce: "nonce-1".to_owned(),
        verifier: "verifier-1".to_owned(),
        next,
        expires_at: fx.page.now_unix_ms() / 1000 + 600,
    }
}

#[tokio::test]
async fn callback_is_refused_without_this_browsers_login_or_with_another_state() {
    // An unreachable provider: every refusal below happens before any exchange.
    let fx = oidc_fixture("http://127.0.0.1:9");
    let segment = link::link_segment(fx.page.link_key(), &link::new_id());
    let login = login_state(&fx, segment);
    for (request, what) in [
        (
            callback_request(&fx, None, "code=c&state=state-1"),
            "no login cookie",
        ),
        (
            callback_request(&fx, Some(&login), "code=c&state=state-2"),
            "another state",
        ),
        (
            callback_request(&fx, Some(&login), "state=state-1"),
            "no code",
        ),
    ] {
        let response = handle(&fx.page, request, peer()).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
        assert!(
            !set_cookies(&response)
                .iter()
                .any(|c| c.starts_with("countersign_page=")),
            "{what}: no session is set"
        );
    }
    let mut expired = login_state(&fx, login.next.clone());
    expired.expires_at = fx.page.now_unix_ms() / 1000;
    let response = handle(
        &fx.page,
        callback_request(&fx, Some(&expired), "code=c&state=state-1"),
        peer(),
    )
    .await;
    assert_eq!(
        response.status(),
        StatusCode::UNAUTHORIZED,
        "an expired login"
    );
}

#[tokio::test]
async fn callback_returns_only_to_an_approval_link() {
    let fx = oidc_fixture("http://127.0.0.1:9");
    let login = login_state(&fx, "../../evil".to_owned());
    let response = handle(
        &fx.page,
        callback_request(&fx, Some(&login), "code=c&state=state-1"),
        peer(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(
        response.headers().get(header::LOCATION).is_none(),
        "no redirect anywhere"
    );
}
