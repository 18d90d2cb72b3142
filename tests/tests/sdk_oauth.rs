//! Real MCP clients authorizing themselves through the gateway as the MCP authorization spec
//! describes: the TypeScript SDK's OAuth support (`client_credentials`, configured with nothing
//! but the URL, its credentials, the scope and the issuer it expects), a real authorization
//! server (npm `oidc-provider`, JWT access tokens for one resource only, RFC 8707), and
//!
//! - an upstream doing its own OAuth (the Python SDK's resource-server support) behind
//!   `auth: forward`: the SDK follows the upstream's 401, whose `resource_metadata` the gateway
//!   pointed at itself, to the relayed metadata, gets a token for the gateway's resource, never
//!   touches the upstream's own URL, and the gateway still holds the write until its
//!   confirmation token comes back;
//! - the gateway as the resource server: the SDK discovers the gateway's own metadata, and the
//!   token's groups reach the policy — the upstream executed only the allowed user's write.

use countersign_e2e::oidc::{TokenProvider, run_oauth_client, start_oauth_upstream};
use countersign_e2e::{Process, start_gateway_with_config_on, start_python_upstream};
use countersign_testkit::{TempFile, TestClient, free_port};
use serde_json::{Value, json};

const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource/mcp";

/// A gateway on a port chosen first, and the provider issuing tokens for its `/mcp`.
struct Gateway {
    port: u16,
    url: String,
    provider: TokenProvider,
}

impl Gateway {
    async fn plan() -> Self {
        let port = free_port();
        let url = format!("http://localhost:{port}/mcp");
        let provider = TokenProvider::start(&url).await;
        Self {
            port,
            url,
            provider,
        }
    }

    /// A gateway with no identity of its own in front of the notes store doing its own OAuth
    /// (tokens of the provider for the gateway's URL), `auth: forward`.
    async fn in_front_of_an_oauth_upstream() -> (Self, (Process, TempFile, Process)) {
        let gateway = Self::plan().await;
        let (upstream, upstream_url) =
            start_oauth_upstream(&gateway.provider.issuer, &gateway.url).await;
        let (process, file) = gateway
            .start(&format!(
                "upstreams:\n  - name: notes\n    url: {upstream_url}\naudit: {{ path: 'off' }}\n"
            ))
            .await;
        (gateway, (process, file, upstream))
    }

    fn origin(&self) -> String {
        format!("http://localhost:{}", self.port)
    }

    async fn start(&self, config: &str) -> (Process, TempFile) {
        let (process, url, file) =
            start_gateway_with_config_on(self.port, config, "/mcp", &[], &[]).await;
        assert_eq!(url, self.url);
        (process, file)
    }
}

/// The HTTP exchanges of a client transcript, as (method, URL, status).
fn exchanges(transcript: &Value) -> Vec<(String, String, u64)> {
    transcript["http"]
        .as_array()
        .expect("exchanges")
        .iter()
        .map(|e| {
            (
                e["method"].as_str().expect("method").to_owned(),
                e["url"].as_str().expect("url").to_owned(),
                e["status"].as_u64().expect("status"),
            )
        })
        .collect()
}

fn exchange(method: &str, url: &str, status: u64) -> (String, String, u64) {
    (method.to_owned(), url.to_owned(), status)
}

/// The upstream's own record of the state-changing calls it executed.
async fn executed(gateway: &Gateway, user: &str) -> Value {
    let (ok, transcript) = run_oauth_client(
        &gateway.url,
        &gateway.provider,
        user,
        &["--read", "audit_log"],
    )
    .await;
    assert!(ok, "{transcript:#}");
    transcript["read"]["structuredContent"]["entries"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_client_finds_the_upstreams_authorization_server_through_the_gateway() {
    let (gateway, _running) = Gateway::in_front_of_an_oauth_upstream().await;
    let issuer = gateway.provider.issuer.clone();

    let (ok, transcript) = run_oauth_client(
        &gateway.url,
        &gateway.provider,
        "bob",
        &[
            "--read",
            "list_notes",
            "--write",
            "add_note",
            "--write-args",
            r#"{"name": "plan", "text": "ship it"}"#,
        ],
    )
    .await;
    assert!(ok, "{transcript:#}");

    let http = exchanges(&transcript);
    assert_eq!(
        http[..5],
        [
            exchange("POST", &gateway.url, 401),
            exchange("GET", &format!("{}{WELL_KNOWN}", gateway.origin()), 200),
            exchange(
                "GET",
                &format!("{issuer}/.well-known/oauth-authorization-server"),
                200
            ),
            // The provider issues tokens for the gateway's resource only: the SDK asked for
            // exactly the resource the relayed metadata named.
            exchange("POST", &format!("{issuer}/token"), 200),
            exchange("POST", &gateway.url, 200),
        ],
        "{transcript:#}"
    );
    assert!(
        http.iter()
            .all(|(_, url, _)| url.starts_with(&gateway.origin()) || url.starts_with(&issuer)),
        "the client never reached for the upstream's own URL: {http:?}"
    );

    assert!(
        transcript["tools"]
            .as_array()
            .expect("tools")
            .contains(&json!("add_note"))
    );
    assert_eq!(
        transcript["read"]["structuredContent"]["names"],
        json!(["readme"])
    );
    let held = &transcript["held"]["_meta"]["countersign/confirmation"];
    assert_eq!(held["status"], "requires_confirmation", "{transcript:#}");
    assert_eq!(transcript["confirmed"]["isError"], false, "{transcript:#}");
    assert_eq!(
        executed(&gateway, "carol").await,
        json!([{"tool": "add_note", "arguments": {"name": "plan", "text": "ship it"}}]),
        "the write ran once, after its confirmation"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstreams_401_names_the_gateways_copy_of_its_metadata() {
    let (gateway, _running) = Gateway::in_front_of_an_oauth_upstream().await;
    let issuer = gateway.provider.issuer.clone();
    let client = TestClient::default();
    let initialize = countersign_testkit::mcp::initialize(1, "2025-11-25", json!({}));
    let refused = client
        .post_json(&gateway.url, &[], &initialize.to_string())
        .await;
    assert_eq!(refused.status, 401, "the upstream's own refusal");
    let challenge = refused.headers["www-authenticate"].to_str().expect("text");
    let metadata_url = format!("{}{WELL_KNOWN}", gateway.origin());
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    assert!(!challenge.contains("127.0.0.1"), "{challenge}");

    let document =
        countersign_testkit::collect(client.send(http::Method::GET, &metadata_url, &[], "").await)
            .await;
    assert_eq!(document.status, 200);
    let document = document.json();
    assert_eq!(document["resource"], gateway.url.as_str());
    assert_eq!(document["authorization_servers"], json!([issuer]));
    assert_eq!(
        document["scopes_supported"],
        json!(["mcp"]),
        "relayed as written"
    );
}

const GROUP_POLICY: &str = r#"
version: 1
defaults: { read: allow, write: allow, destructive: deny, unknown: deny }
rules:
  - id: dev-may-not-write-notes
    tools: [add_note]
    when: 'principal.groups.exists(g, g == "dev")'
    action: deny
    reason: Developers write to the staging store.
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_client_finds_the_gateway_as_resource_server_and_its_groups_reach_the_policy() {
    let gateway = Gateway::plan().await;
    let issuer = gateway.provider.issuer.clone();
    let (_upstream, upstream_url) = start_python_upstream().await;
    let policy = TempFile::new("policy.yaml", GROUP_POLICY);
    let _running = gateway
        .start(&format!(
            "upstreams:
  - name: notes
    url: {upstream_url}
policy: {policy}
audit: {{ path: 'off' }}
identity:
  methods:
    - jwt: {{ issuer: {issuer}, audience: {audience}, jwks_url: {issuer}/jwks }}
  public_url: {origin}
",
            policy = policy.path_str(),
            audience = gateway.url,
            origin = gateway.origin(),
        ))
        .await;

    let mut results = Vec::new();
    for user in ["ada", "bob"] {
        let (ok, transcript) = run_oauth_client(
            &gateway.url,
            &gateway.provider,
            user,
            &[
                "--write",
                "add_note",
                "--write-args",
                &json!({"name": user, "text": "hello"}).to_string(),
            ],
        )
        .await;
        assert!(ok, "{user}: {transcript:#}");
        assert_eq!(
            exchanges(&transcript)[..2],
            [
                exchange("POST", &gateway.url, 401),
                exchange("GET", &format!("{}{WELL_KNOWN}", gateway.origin()), 200),
            ],
            "{user}: the gateway's own 401 and metadata"
        );
        results.push(transcript["held"].clone());
    }
    let refusal = &results[0]["_meta"]["countersign/confirmation"];
    assert_eq!(
        refusal["code"], "policy_denied",
        "ada[dev] is denied: {:#}",
        results[0]
    );
    assert_eq!(
        results[1]["isError"], false,
        "bob[sre] is not: {:#}",
        results[1]
    );
    assert_eq!(
        executed(&gateway, "carol").await,
        json!([{"tool": "add_note", "arguments": {"name": "bob", "text": "hello"}}]),
        "the upstream executed bob's write only"
    );
}
