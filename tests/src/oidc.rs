//! Real OAuth/OpenID Connect providers (npm `oidc-provider`): the approval page's login
//! provider and logging in through it in a real browser, and an authorization server issuing JWT
//! access tokens for the gateway as resource server.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::webdriver::Browser;
use crate::{peers_dir, tool_env};

/// The provider's client secret for the `countersign` client.
pub const CLIENT_SECRET: &str = "countersign-test-secret";

/// Starts the OpenID Connect provider with the pages' callbacks; returns it and its issuer.
pub async fn start_provider(page_urls: &[String]) -> (Child, String) {
    let callbacks: Vec<String> = page_urls
        .iter()
        .map(|u| format!("{u}/oidc/callback"))
        .collect();
    start_node_issuer("oidc-provider.mjs", &callbacks).await
}

/// Starts the Node `script` of `tests/peers/node` with `args`; returns it and the issuer it
/// prints as its first line (`{"issuer": "http://127.0.0.1:<port>"}`).
async fn start_node_issuer(script: &str, args: &[String]) -> (Child, String) {
    let mut command = Command::new(tool_env("COUNTERSIGN_NODE"));
    command
        .arg(peers_dir().join("node").join(script))
        .args(args)
        .current_dir(peers_dir().join("node"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("start {script}: {e}"));
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{script} starts within a minute"))
        .expect("read")
        .unwrap_or_else(|| panic!("{script} printed its issuer"));
    let issuer = serde_json::from_str::<serde_json::Value>(&line).expect("json")["issuer"]
        .as_str()
        .expect("issuer")
        .to_owned();
    // Keep reading: the provider dies of EPIPE if its stdout is closed under it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, issuer)
}

/// Follows `link`, logs in at the provider as `user` (login, then consent the first time),
/// and returns the approval page's heading once the browser is back on the page.
pub async fn log_in_and_open(browser: &Browser, link: &str, user: &str) -> String {
    let page_origin = link.split("/approve/").next().expect("a link").to_owned();
    browser.goto(link).await;
    browser
        .find("input[name=login]")
        .await
        .type_text(user)
        .await;
    browser
        .find("input[name=password]")
        .await
        .type_text("any password")
        .await;
    browser.find("button[type=submit]").await.click().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut consented = false;
    loop {
        let state = browser
            .execute(
                "return [location.href, !!document.querySelector('input[name=login]'), \
                 !!document.querySelector('button[type=submit]'), \
                 (document.querySelector('main h1') || {}).innerText || null];",
            )
            .await;
        let url = state[0].as_str().unwrap_or_default();
        if url.starts_with(&page_origin) {
            if let Some(heading) = state[3].as_str() {
                return heading.to_owned();
            }
        } else if !consented && state[1] == false && state[2] == true {
            // The consent screen: no login field, one submit button.
            browser.find("button[type=submit]").await.click().await;
            consented = true;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stuck logging in at {url}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A real authorization server issuing JWT access tokens for one resource
/// (`tests/peers/node/oidc-token-provider.mjs`, npm `oidc-provider`): the `client_credentials`
/// grant, one client per user (ada[dev], bob[sre], carol[sre], mallory[]), its real signing key
/// published at `<issuer>/jwks`, plus test-only endpoints to rotate that key and to sign
/// forgeries.
#[derive(Debug)]
pub struct TokenProvider {
    _child: Child,
    pub issuer: String,
    pub resource: String,
    client: countersign_testkit::TestClient,
}

impl TokenProvider {
    pub async fn start(resource: &str) -> Self {
        let (child, issuer) =
            start_node_issuer("oidc-token-provider.mjs", &[resource.to_owned()]).await;
        Self {
            _child: child,
            issuer,
            resource: resource.to_owned(),
            client: countersign_testkit::TestClient::default(),
        }
    }

    /// An access token for `user`, from the provider's token endpoint.
    pub async fn token(&self, user: &str) -> String {
        use base64::Engine as _;
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{user}-secret"));
        let body = format!(
            "grant_type=client_credentials&scope=mcp&resource={}",
            url::form_urlencoded::byte_serialize(self.resource.as_bytes()).collect::<String>()
        );
        let response = countersign_testkit::collect(
            self.client
                .send(
                    http::Method::POST,
                    &format!("{}/token", self.issuer),
                    &[
                        ("content-type", "application/x-www-form-urlencoded"),
                        ("authorization", &format!("Basic {basic}")),
                    ],
                    body,
                )
                .await,
        )
        .await;
        assert_eq!(response.status, 200, "token endpoint: {}", response.text());
        response.json()["access_token"]
            .as_str()
            .expect("an access token")
            .to_owned()
    }

    /// The claims of a good token for `user`, with `extra` merged in.
    pub fn claims(&self, user: &str, extra: serde_json::Value) -> serde_json::Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let mut claims = serde_json::json!({
            "iss": self.issuer, "aud": self.resource, "sub": user, "client_id": user,
            "iat": now, "exp": now + 600, "scope": "mcp", "groups": ["sre"],
        });
        for (key, value) in extra.as_object().expect("an object") {
            claims[key] = value.clone();
        }
        claims
    }

    /// `claims` signed as `alg` (`ES256`, `none`, `HS256-public`) with the provider's current
    /// key, or with a key it never published (`key: "stranger"`).
    pub async fn sign(&self, claims: &serde_json::Value, key: &str, alg: &str) -> String {
        let body = serde_json::json!({"claims": claims, "key": key, "alg": alg}).to_string();
        let response = self
            .client
            .post_json(&format!("{}/test/sign", self.issuer), &[], &body)
            .await;
        response.json()["token"]
            .as_str()
            .expect("a token")
            .to_owned()
    }

    /// Replaces the provider's signing key by a new one; its JWKS then holds only the new key.
    pub async fn rotate(&self) -> String {
        let response = self
            .client
            .post_json(&format!("{}/test/rotate", self.issuer), &[], "{}")
            .await;
        response.json()["kid"].as_str().expect("a kid").to_owned()
    }
}

/// The notes store doing its own OAuth (`upstream.py --auth-issuer --auth-audience`, the Python
/// SDK's resource-server support) on a free port: every MCP request needs a JWT of `issuer` for
/// `audience`, and its 401s and metadata name its own URL. Returns it and its MCP URL.
pub async fn start_oauth_upstream(issuer: &str, audience: &str) -> (crate::Process, String) {
    let port = countersign_testkit::free_port();
    let mut command = Command::new(tool_env("COUNTERSIGN_PYTHON"));
    command.arg(peers_dir().join("python/upstream.py")).args([
        "--port",
        &port.to_string(),
        "--auth-issuer",
        issuer,
        "--auth-audience",
        audience,
    ]);
    let process = crate::Process::start_until_ready("python OAuth upstream", command).await;
    (process, format!("http://127.0.0.1:{port}/mcp"))
}

/// Runs the TypeScript SDK client that authorizes itself (`tests/peers/node/oauth-client.mjs`)
/// against `url` as `user` of `provider` (scope `mcp`), with `options` (`--read TOOL`,
/// `--write TOOL --write-args JSON`); returns its transcript, whether it succeeded or not.
pub async fn run_oauth_client(
    url: &str,
    provider: &TokenProvider,
    user: &str,
    options: &[&str],
) -> (bool, serde_json::Value) {
    let mut command = Command::new(tool_env("COUNTERSIGN_NODE"));
    command
        .arg(peers_dir().join("node/oauth-client.mjs"))
        .args(["--url", url, "--client-id", user])
        .args(["--client-secret", &format!("{user}-secret")])
        .args(["--issuer", &provider.issuer, "--scope", "mcp"])
        .args(options)
        .current_dir(peers_dir().join("node"));
    let (ok, stdout, stderr) =
        crate::run_to_completion("oauth-client.mjs", command, Duration::from_secs(120)).await;
    let transcript = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("oauth-client.mjs printed no transcript ({e}): {stderr}"));
    (ok, transcript)
}
