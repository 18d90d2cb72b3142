//! Bearer-token identity end to end: the real gateway binary as the OAuth resource server for
//! its MCP endpoint, a real authorization server (npm `oidc-provider`, JWT access tokens for
//! the resource, its real JWKS) and a recording upstream.
//!
//! - a valid token's principal and groups reach the policy: a group rule denies ada[dev] and
//!   lets bob[sre] through, and a rule on `principal.claims` sees the token's claims — the
//!   upstream recorded exactly the calls that were allowed;
//! - expired, wrong audience, wrong issuer, unknown key, `alg: none`, HS256 keyed with the
//!   public key, and no token at all → 401 with `WWW-Authenticate: Bearer
//!   resource_metadata=…` and the upstream recorded nothing;
//! - the protected-resource metadata that 401 names is served and names the provider;
//! - the provider rotates its key: new tokens verify without a restart.

use countersign_e2e::oidc::TokenProvider;
use countersign_e2e::{Process, start_gateway_with_config};
use countersign_testkit::mcp::{ScriptedServer, stateless_headers, stateless_tool_call};
use countersign_testkit::{Collected, RecordingUpstream, TempFile, TestClient};
use serde_json::{Value, json};

/// Where clients reach the gateway (behind a TLS-terminating proxy, say); the resource the
/// provider's tokens are for is its `/mcp`.
const PUBLIC_URL: &str = "https://mcp.example.test";
const RESOURCE: &str = "https://mcp.example.test/mcp";

const POLICY: &str = r#"
version: 1
defaults: { read: allow, write: allow, destructive: deny, unknown: allow }
approval: token
token_ttl: 5m
rules:
  - id: dev-may-not-look-up
    tools: [lookup]
    when: 'principal.groups.exists(g, g == "dev")'
    action: deny
    reason: Developers use the staging store.
  - id: no-mallory
    tools: [lookup]
    when: 'principal.claims.client_id == "mallory"'
    action: deny
    reason: Not this client.
"#;

struct Deployment {
    provider: TokenProvider,
    upstream: RecordingUpstream,
    gateway: Process,
    url: String,
    client: TestClient,
    _files: (TempFile, TempFile),
}

impl Deployment {
    async fn start() -> Self {
        let provider = TokenProvider::start(RESOURCE).await;
        let upstream = ScriptedServer::new(vec![
            json!({"name": "lookup", "inputSchema": {"type": "object"},
                   "annotations": {"readOnlyHint": true}}),
        ])
        .start()
        .await;
        let policy = TempFile::new("policy.yaml", POLICY);
        let config = format!(
            "upstreams:
  - name: store
    url: {upstream}
policy: {policy}
audit: {{ path: 'off' }}
identity:
  methods:
    - jwt:
        issuer: {issuer}
        audience: {RESOURCE}
        jwks_url: {issuer}/jwks
        min_refetch: 1ms
  public_url: {PUBLIC_URL}
",
            upstream = upstream.url(),
            policy = policy.path_str(),
            issuer = provider.issuer,
        );
        let (gateway, url, config) = start_gateway_with_config(&config, "/mcp", &[], &[]).await;
        Self {
            provider,
            upstream,
            gateway,
            url,
            client: TestClient::default(),
            _files: (policy, config),
        }
    }

    /// A stateless `lookup` call with `authorization` (none for `None`).
    async fn lookup(&self, authorization: Option<&str>) -> Collected {
        let call = stateless_tool_call(1, "lookup", json!({"q": "x"}), json!({}), Value::Null);
        let bearer = authorization.map(|token| format!("Bearer {token}"));
        let mut headers: Vec<(&str, &str)> = stateless_headers("lookup").to_vec();
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer));
        }
        self.client
            .post_json(&self.url, &headers, &call.to_string())
            .await
    }

    fn upstream_calls(&self) -> Vec<Value> {
        self.upstream.tool_calls()
    }
}

fn www_authenticate(response: &Collected) -> String {
    response
        .headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn denied(response: &Collected) -> bool {
    let body = response.json();
    body.get("error").is_some() || body["result"]["isError"] == true
}

#[tokio::test(flavor = "multi_thread")]
async fn token_groups_and_claims_reach_the_policy() {
    let deployment = Deployment::start().await;
    let ada = deployment.provider.token("ada").await;
    let bob = deployment.provider.token("bob").await;
    let mallory = deployment.provider.token("mallory").await;

    let refused = deployment.lookup(Some(&ada)).await;
    assert_eq!(refused.status, 200, "{}", refused.text());
    assert!(denied(&refused), "ada is in dev: {}", refused.text());
    let refused = deployment.lookup(Some(&mallory)).await;
    assert!(denied(&refused), "the claims rule: {}", refused.text());
    let allowed = deployment.lookup(Some(&bob)).await;
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert!(!denied(&allowed), "bob is in sre: {}", allowed.text());

    let calls = deployment.upstream_calls();
    assert_eq!(calls.len(), 1, "only bob's call ran: {calls:?}");
    let recorded = deployment.upstream.requests();
    assert!(
        recorded.iter().all(|r| r.header("authorization").is_none()),
        "the token was the gateway's; the upstream must not receive it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_expired_and_foreign_tokens_get_401_and_reach_nothing() {
    let deployment = Deployment::start().await;
    let provider = &deployment.provider;
    let long_ago = json!({"iat": 1_000_000_000u64, "exp": 1_000_000_600u64});
    let cases = [
        (
            "expired",
            provider
                .sign(&provider.claims("bob", long_ago), "current", "ES256")
                .await,
        ),
        (
            "wrong audience",
            provider
                .sign(
                    &provider.claims("bob", json!({"aud": "https://other.example.test/mcp"})),
                    "current",
                    "ES256",
                )
                .await,
        ),
        (
            "wrong issuer",
            provider
                .sign(
                    &provider.claims("bob", json!({"iss": "https://evil.example.test"})),
                    "current",
                    "ES256",
                )
                .await,
        ),
        (
            "unknown key",
            provider
                .sign(&provider.claims("bob", json!({})), "stranger", "ES256")
                .await,
        ),
        (
            "alg none",
            provider
                .sign(&provider.claims("bob", json!({})), "current", "none")
                .await,
        ),
        (
            "HS256 keyed with the public key",
            provider
                .sign(
                    &provider.claims("bob", json!({})),
                    "current",
                    "HS256-public",
                )
                .await,
        ),
        ("not a JWT", "opaque-garbage".to_owned()),
    ];
    // A well-signed control token proves the forgeries differ only in what they break.
    let control = provider
        .sign(&provider.claims("bob", json!({})), "current", "ES256")
        .await;
    let ok = deployment.lookup(Some(&control)).await;
    assert!(!denied(&ok), "the control token is accepted: {}", ok.text());
    let before = deployment.upstream.requests().len();

    let metadata_url = format!("{PUBLIC_URL}/.well-known/oauth-protected-resource/mcp");
    for (case, token) in &cases {
        let response = deployment.lookup(Some(token)).await;
        assert_eq!(response.status, 401, "{case}: {}", response.text());
        assert_eq!(
            www_authenticate(&response),
            format!("Bearer resource_metadata=\"{metadata_url}\", error=\"invalid_token\""),
            "{case}"
        );
    }
    let missing = deployment.lookup(None).await;
    assert_eq!(missing.status, 401, "{}", missing.text());
    assert_eq!(
        www_authenticate(&missing),
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    assert_eq!(
        deployment.upstream.requests().len(),
        before,
        "no refused request reached the upstream: {:?}",
        deployment.upstream.requests()
    );
    assert_eq!(
        deployment.upstream_calls().len(),
        1,
        "only the control call ran"
    );
    assert!(deployment.gateway.id().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn protected_resource_metadata_names_the_authorization_server() {
    let deployment = Deployment::start().await;
    let base = deployment.url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let response = countersign_testkit::collect(
            deployment
                .client
                .send(http::Method::GET, &format!("{base}{path}"), &[], "")
                .await,
        )
        .await;
        assert_eq!(response.status, 200, "{path}: {}", response.text());
        let document = response.json();
        assert_eq!(document["resource"], RESOURCE, "{path}");
        assert_eq!(
            document["authorization_servers"],
            json!([deployment.provider.issuer]),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_of_a_rotated_key_verify_without_a_restart() {
    let deployment = Deployment::start().await;
    let before = deployment.provider.token("bob").await;
    assert!(!denied(&deployment.lookup(Some(&before)).await));

    deployment.provider.rotate().await;
    let after = deployment.provider.token("bob").await;
    let response = deployment.lookup(Some(&after)).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert!(
        !denied(&response),
        "a token of the new key: {}",
        response.text()
    );
    assert_eq!(deployment.upstream_calls().len(), 2);
}
