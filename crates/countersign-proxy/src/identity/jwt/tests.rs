use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;

const ISSUER: &str = "https://id.example.com";

struct Signer {
    key: EncodingKey,
    kid: String,
}

fn ed25519(kid: &str) -> (Signer, serde_json::Value) {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let jwk = json!({
        "kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig",
        "x": URL_SAFE_NO_PAD.encode(pair.public_key_raw()),
    });
    let key = EncodingKey::from_ed_der(&pair.serialize_der());
    (
        Signer {
            key,
            kid: kid.to_owned(),
        },
        jwk,
    )
}

fn verifier(jwks: Vec<serde_json::Value>) -> JwksVerifier {
    let set: JwkSet = serde_json::from_value(json!({ "keys": jwks })).expect("jwks");
    JwksVerifier::with_keys(set)
}

/// The wall clock jsonwebtoken checks `exp` and `nbf` against.
fn now() -> u64 {
    use crate::clock::Clock as _;
    crate::clock::SystemClock.unix_secs()
}

fn claims(extra: serde_json::Value) -> serde_json::Value {
    let mut claims = json!({
        "iss": ISSUER, "aud": "countersign", "sub": "ada", "exp": now() + 300,
        "iat": now(), "nonce": "n-1",
    });
    for (k, v) in extra.as_object().expect("object") {
        claims[k] = v.clone();
    }
    claims
}

fn sign(signer: &Signer, claims: &serde_json::Value) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(signer.kid.clone());
    jsonwebtoken::encode(&header, claims, &signer.key).expect("sign")
}

fn expect(nonce: &str) -> Expectations<'_> {
    Expectations {
        issuer: ISSUER,
        audience: "countersign",
        nonce: Some(nonce),
    }
}

#[tokio::test]
async fn token_signed_by_a_jwks_key_verifies_to_its_claims() {
    let (signer, jwk) = ed25519("k1");
    let verifier = verifier(vec![jwk]);
    let claims = verifier
        .verify(&sign(&signer, &claims(json!({}))), &expect("n-1"))
        .await
        .expect("valid");
    assert_eq!(claims["sub"], "ada");
}

#[tokio::test]
async fn wrong_issuer_audience_nonce_or_expired_tokens_are_refused() {
    let (signer, jwk) = ed25519("k1");
    let verifier = verifier(vec![jwk]);
    for (what, extra) in [
        ("issuer", json!({"iss": "https://evil.example.com"})),
        ("audience", json!({"aud": "another-client"})),
        ("expired", json!({"exp": now() - LEEWAY_SECS - 10})),
        ("not yet valid", json!({"nbf": now() + LEEWAY_SECS + 60})),
    ] {
        let token = sign(&signer, &claims(extra));
        assert!(
            matches!(
                verifier.verify(&token, &expect("n-1")).await,
                Err(JwtError::Invalid(_))
            ),
            "{what}"
        );
    }
    let token = sign(&signer, &claims(json!({})));
    assert_eq!(
        verifier.verify(&token, &expect("n-2")).await,
        Err(JwtError::Nonce)
    );
}

#[tokio::test]
async fn unsigned_and_hmac_tokens_are_refused_before_any_key() {
    let (_, jwk) = ed25519("k1");
    let verifier = verifier(vec![jwk]);
    let body = URL_SAFE_NO_PAD.encode(claims(json!({})).to_string());
    let none = format!(
        "{}.{body}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"k1"}"#)
    );
    assert!(
        verifier.verify(&none, &expect("n-1")).await.is_err(),
        "alg none"
    );
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".to_owned());
    let hs = jsonwebtoken::encode(
        &header,
        &claims(json!({})),
        &EncodingKey::from_secret(b"guessable"),
    )
    .expect("sign");
    assert_eq!(
        verifier.verify(&hs, &expect("n-1")).await,
        Err(JwtError::Algorithm("HS256".to_owned()))
    );
}

#[tokio::test]
async fn token_from_an_unknown_key_or_with_a_forged_signature_is_refused() {
    let (signer, jwk) = ed25519("k1");
    let (stranger, _) = ed25519("k2");
    let verifier = verifier(vec![jwk]);
    let token = sign(&stranger, &claims(json!({})));
    assert_eq!(
        verifier.verify(&token, &expect("n-1")).await,
        Err(JwtError::UnknownKey)
    );
    // Signed by another key but naming ours.
    let forged = sign(
        &Signer {
            key: stranger.key,
            kid: signer.kid.clone(),
        },
        &claims(json!({})),
    );
    assert!(matches!(
        verifier.verify(&forged, &expect("n-1")).await,
        Err(JwtError::Invalid(_))
    ));
}

/// A JWKS endpoint on a free port serving whatever `keys` holds now, counting its fetches.
async fn jwks_server(
    keys: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/jwks", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (keys, fetches) = (keys.clone(), fetches.clone());
            let service = hyper::service::service_fn(
                move |_request: http::Request<hyper::body::Incoming>| {
                    fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let body = json!({ "keys": *keys.lock().expect("keys") }).to_string();
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(body)),
                        ))
                    }
                },
            );
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    url
}

#[tokio::test]
async fn rotated_key_is_fetched_once_and_unknown_kids_do_not_hammer_the_provider() {
    let (old, old_jwk) = ed25519("old");
    let (new, new_jwk) = ed25519("new");
    let keys = std::sync::Arc::new(std::sync::Mutex::new(vec![old_jwk]));
    let fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let url = jwks_server(keys.clone(), fetches.clone()).await;
    let count = || fetches.load(std::sync::atomic::Ordering::SeqCst);

    let rotating = JwksVerifier::new(
        url.clone(),
        crate::outbound::HttpClient::new(),
        Duration::from_secs(5),
    )
    .with_min_refetch(Duration::ZERO);
    rotating
        .verify(&sign(&old, &claims(json!({}))), &expect("n-1"))
        .await
        .expect("old key");
    assert_eq!(count(), 1, "fetched once, then cached");
    rotating
        .verify(&sign(&old, &claims(json!({}))), &expect("n-1"))
        .await
        .expect("cached");
    assert_eq!(count(), 1);
    keys.lock().expect("keys").push(new_jwk);
    rotating
        .verify(&sign(&new, &claims(json!({}))), &expect("n-1"))
        .await
        .expect("the rotated key");
    assert_eq!(count(), 2, "an unknown kid fetched the set again");

    let throttled = JwksVerifier::new(
        url,
        crate::outbound::HttpClient::new(),
        Duration::from_secs(5),
    );
    throttled
        .verify(&sign(&old, &claims(json!({}))), &expect("n-1"))
        .await
        .expect("old key");
    let (stranger, _) = ed25519("stranger");
    for _ in 0..5 {
        let token = sign(&stranger, &claims(json!({})));
        assert_eq!(
            throttled.verify(&token, &expect("n-1")).await,
            Err(JwtError::UnknownKey)
        );
    }
    assert_eq!(count(), 3, "bogus kids within MIN_REFETCH cause no fetch");
}

#[tokio::test]
async fn an_algorithm_left_out_of_the_configuration_is_refused() {
    let (signer, jwk) = ed25519("k1");
    let verifier = verifier(vec![jwk]).with_strictness(Strictness {
        leeway_secs: LEEWAY_SECS,
        algorithms: vec![Algorithm::RS256, Algorithm::HS256],
    });
    let token = sign(&signer, &claims(json!({})));
    assert_eq!(
        verifier.verify(&token, &expect("n-1")).await,
        Err(JwtError::Algorithm("EdDSA".into()))
    );
    assert_eq!(
        asymmetric_named("HS256"),
        None,
        "HS* can never be configured"
    );
    assert_eq!(asymmetric_named("ES256"), Some(Algorithm::ES256));
}

#[tokio::test]
async fn bearer_claims_name_the_principal_and_groups() {
    let (signer, jwk) = ed25519("k1");
    let method = crate::identity::BearerJwt {
        issuer: ISSUER.into(),
        audience: "countersign".into(),
        claims: crate::identity::ClaimNames {
            principal: "preferred_username".into(),
            groups: "roles".into(),
        },
        verifier: verifier(vec![jwk]),
    };
    let token = sign(
        &signer,
        &claims(json!({"preferred_username": "ada", "roles": "dev ops", "tenant": "acme"})),
    );
    let principal = method.principal(&token).await.expect("valid");
    assert_eq!(principal.id, "ada");
    assert_eq!(principal.groups, ["dev", "ops"]);
    assert_eq!(principal.claims["tenant"], "acme");
    let nameless = sign(&signer, &claims(json!({"roles": ["dev"]})));
    assert!(
        method.principal(&nameless).await.is_err(),
        "no principal claim"
    );
}
