use std::convert::Infallible;
use std::sync::Arc;

use http::{HeaderName, Request, Response, StatusCode};
use jsonwebtoken::jwk::JwkSet;
use serde_json::json;
use tower::{Layer, ServiceExt, service_fn};

use super::jwt::JwksVerifier;
use super::*;
use crate::body::{ResponseBody, empty};
use crate::context::RequestContextExt;

/// The principal the layer attached, or the refusal it answered with.
async fn outcome(
    identity: Identity,
    headers: &[(&str, &str)],
) -> Result<(Principal, bool), Response<ResponseBody>> {
    let service =
        IdentityLayer::new(identity).layer(service_fn(|request: Request<()>| async move {
            let caller = request.extensions().caller().cloned();
            let principal = caller.and_then(|c| c.0).expect("a Caller with a principal");
            let mut response = Response::new(empty());
            // Tells the test what came through: the principal and whether Authorization did.
            response.extensions_mut().insert((
                principal,
                request.headers().contains_key(http::header::AUTHORIZATION),
            ));
            Ok::<_, Infallible>(response)
        }));
    let mut request = Request::builder().uri("/mcp");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = service
        .oneshot(request.body(()).expect("request"))
        .await
        .expect("infallible");
    match response.extensions().get::<(Principal, bool)>() {
        Some(passed) => Ok(passed.clone()),
        None => Err(response),
    }
}

fn trusted() -> Identity {
    Identity::trusted_header(
        HeaderName::from_static("x-user"),
        Some(HeaderName::from_static("x-groups")),
    )
}

fn challenge(response: &Response<ResponseBody>) -> &str {
    response
        .headers()
        .get(http::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn without_methods_everyone_is_anonymous() {
    let (principal, _) = outcome(Identity::default(), &[("x-user", "mallory")])
        .await
        .expect("passes");
    assert_eq!(principal.id, "anonymous");
}

#[tokio::test]
async fn the_trusted_header_names_the_principal_and_groups() {
    let (principal, _) = outcome(
        trusted(),
        &[("x-user", " ada "), ("x-groups", "ops, ,admins")],
    )
    .await
    .expect("passes");
    assert_eq!(principal.id, "ada");
    assert_eq!(principal.groups, ["ops", "admins"]);
}

#[tokio::test]
async fn a_missing_or_blank_identity_is_refused_with_401() {
    for headers in [&[][..], &[("x-user", "  ")][..]] {
        let refused = outcome(trusted(), headers).await.expect_err("refused");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert!(challenge(&refused).starts_with("Bearer"));
    }
}

#[tokio::test]
async fn anonymous_callers_pass_only_when_allowed() {
    let mut identity = trusted();
    identity.allow_anonymous = true;
    let (principal, _) = outcome(identity, &[]).await.expect("passes");
    assert_eq!(principal.id, "anonymous");
}

fn keys() -> Identity {
    let key = "k_2f8a9c4e1b7d6f3a5c8e9b2d4f6a1c3e";
    let keys = ApiKeys::new(vec![ApiKey {
        sha256: parse_hash(&hash_key(key)).expect("a hash"),
        principal: "ci-bot".into(),
        groups: vec!["automation".into()],
    }]);
    Identity {
        methods: vec![Method::ApiKeys(Arc::new(keys))],
        allow_anonymous: false,
        ..Identity::default()
    }
}

#[tokio::test]
async fn an_api_key_names_its_principal_and_is_not_forwarded() {
    let (principal, authorization_forwarded) = outcome(
        keys(),
        &[("authorization", "Bearer k_2f8a9c4e1b7d6f3a5c8e9b2d4f6a1c3e")],
    )
    .await
    .expect("passes");
    assert_eq!(principal.id, "ci-bot");
    assert_eq!(principal.groups, ["automation"]);
    assert!(!authorization_forwarded, "the gateway consumed the key");
}

#[tokio::test]
async fn an_unknown_api_key_is_an_invalid_token() {
    let refused = outcome(keys(), &[("authorization", "Bearer k_wrong")])
        .await
        .expect_err("refused");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(challenge(&refused).contains("error=\"invalid_token\""));
}

#[test]
fn key_hashes_round_trip_and_malformed_ones_are_rejected() {
    let hash = hash_key("secret");
    assert_eq!(
        hash,
        "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    );
    assert!(parse_hash(&hash).is_some());
    for bad in [
        "2bb8",
        "sha256:zz",
        "sha1:2bb80d537b1da3e38bd30361aa855686bde0eacd",
    ] {
        assert!(parse_hash(bad).is_none(), "{bad}");
    }
}

#[tokio::test]
async fn a_bearer_token_is_the_upstreams_when_no_method_verifies_bearer_tokens() {
    let (principal, authorization_forwarded) = outcome(
        trusted(),
        &[
            ("x-user", "ada"),
            ("authorization", "Bearer upstream-token"),
        ],
    )
    .await
    .expect("passes");
    assert_eq!(principal.id, "ada");
    assert!(authorization_forwarded, "auth: forward keeps working");
}

fn jwt_identity() -> Identity {
    let verifier = JwksVerifier::with_keys(JwkSet { keys: Vec::new() });
    Identity {
        methods: vec![Method::Jwt(Arc::new(BearerJwt {
            issuer: "https://id.example.com".into(),
            audience: "https://mcp.example.com/mcp".into(),
            claims: ClaimNames::default(),
            verifier,
        }))],
        allow_anonymous: false,
        metadata: Some(Arc::new(ResourceMetadata {
            public_url: "https://mcp.example.com".into(),
            paths: vec!["/mcp".into()],
            authorization_servers: vec!["https://id.example.com".into()],
            scopes_supported: Vec::new(),
        })),
        public_url: Some("https://mcp.example.com".into()),
        forward_consumed_token: false,
    }
}

#[tokio::test]
async fn a_401_names_the_resource_metadata() {
    let refused = outcome(jwt_identity(), &[]).await.expect_err("refused");
    assert_eq!(
        challenge(&refused),
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
    );
    let header = json!({"alg": "none"}).to_string();
    let forged = format!(
        "{}.{}.",
        base64_url(&header),
        base64_url(&json!({"sub": "ada"}).to_string())
    );
    let refused = outcome(
        jwt_identity(),
        &[("authorization", &format!("Bearer {forged}"))],
    )
    .await
    .expect_err("refused");
    assert!(challenge(&refused).ends_with(", error=\"invalid_token\""));
}

fn base64_url(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}
