//! Out-of-band approval end to end: a real MCP SDK client whose host cannot elicit (the Python
//! SDK declaring no elicitation capability, as Claude Desktop-like hosts do) calls a tool whose
//! rule says `approval: out_of_band`, through two real gateway replicas sharing one Redis. The
//! person — this test, signed in through the trusted header an SSO proxy would set — learns of
//! the request from the gateway's signed webhook, opens the link on the *other* replica's
//! approval page, reads the exact arguments and approves. The client's token is refused as
//! `pending_approval` until then, runs exactly once after, and its replay is refused; the
//! upstream's own audit log is the judge of what ran.

use std::time::Duration;

use countersign_e2e::{Peer, RedisServer, start_gateway_with_config, start_python_upstream};
use countersign_testkit::{Collected, TempFile, TestClient, collect, free_port};
use hmac::{Hmac, Mac as _};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const POLICY: &str = "version: 1
rules:
  - id: deletes-need-a-person
    tools: [delete_note]
    action: confirm
    approval: out_of_band
";

const WEBHOOK_SECRET: &str = "e2e-webhook-secret";

/// The config of one replica: the notes upstream, Redis, and the approval page on `page_port`
/// with the approver named by `X-Approver`, telling `webhook` of every request.
fn replica_config(
    upstream: &str,
    redis: &str,
    page_port: u16,
    policy: &str,
    secret: &str,
    webhook: &str,
) -> String {
    format!(
        "upstreams:
  - name: notes
    url: {upstream}
policy: {policy}
audit: {{ path: 'off' }}
redis: {{ url: '{redis}' }}
approvals:
  listen: 127.0.0.1:{page_port}
  public_url: http://127.0.0.1:{page_port}
  auth:
    trusted_header: {{ user: X-Approver, groups: X-Approver-Groups }}
  webhooks:
    - {{ url: '{webhook}', format: json, secret_file: '{secret}' }}
"
    )
}

/// One webhook delivery: reads a whole HTTP request from `listener`, answers 204, and returns
/// the body after checking its signature (`X-Countersign-Signature: t=<unix>,v1=<hex>` over
/// `t.body`).
async fn receive_webhook(listener: &TcpListener) -> Value {
    let (mut stream, _) = listener.accept().await.expect("webhook connection");
    let mut request = Vec::new();
    let body_start = loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("read webhook");
        assert!(n > 0, "webhook connection closed early");
        request.extend_from_slice(&chunk[..n]);
        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..body_start]).to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("webhook without {name}: {head}"))
    };
    let length: usize = header("content-length").parse().expect("content-length");
    while request.len() < body_start + length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("read webhook body");
        assert!(n > 0, "webhook body cut short");
        request.extend_from_slice(&chunk[..n]);
    }
    let body = &request[body_start..body_start + length];
    stream
        .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await
        .expect("answer webhook");

    let signature = header("x-countersign-signature");
    let (t, v1) = signature
        .split_once(',')
        .and_then(|(t, v)| Some((t.strip_prefix("t=")?, v.strip_prefix("v1=")?)))
        .unwrap_or_else(|| panic!("signature shape: {signature}"));
    let mut mac = Hmac::<Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).expect("key");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        v1, expected,
        "the webhook is signed with the configured secret"
    );
    serde_json::from_slice(body).expect("webhook body is JSON")
}

/// The approval page at `link`, as the SSO proxy in front would pass it for `approver`.
async fn get(link: &str, approver: &str) -> Collected {
    let response = TestClient::default()
        .send(http::Method::GET, link, &[("x-approver", approver)], "")
        .await;
    collect(response).await
}

/// The page's form, posted as the browser of the requesting principal would.
async fn post_form(link: &str, origin: &str, cookie: Option<&str>, form: &str) -> Collected {
    let mut headers = vec![
        ("x-approver", "anonymous"),
        ("origin", origin),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    if let Some(cookie) = cookie {
        headers.push(("cookie", cookie));
    }
    let response = TestClient::default()
        .send(http::Method::POST, link, &headers, form.to_owned())
        .await;
    collect(response).await
}

/// The value of the hidden `csrf` input of an approval page.
fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("the page has a CSRF field")
        + 19;
    html[at..].split('"').next().expect("csrf value").to_owned()
}

/// The Python SDK client, a host that cannot elicit, running `approve-on-page` against a
/// gateway: it holds `delete_note readme`, presents the token once (refused as pending), then
/// retries until the page decides.
struct PendingClient {
    task: tokio::task::JoinHandle<Value>,
    signal: TempFile,
}

impl PendingClient {
    fn start(url: String) -> Self {
        let signal = TempFile::new("approval.json", "");
        std::fs::remove_file(signal.path()).expect("the client creates the signal file");
        let path = signal.path_str().to_owned();
        let task = tokio::spawn(async move {
            countersign_e2e::run_client(
                Peer::PythonLegacy,
                &url,
                "approve-on-page",
                &["--signal-file", &path],
            )
            .await
        });
        Self { task, signal }
    }

    /// Waits until the client has seen its token refused as pending, and returns the approval
    /// link its held result gave.
    async fn link(&self) -> String {
        for _ in 0..600 {
            if self.signal.path().exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = std::fs::read_to_string(self.signal.path()).expect("the client signalled");
        let seen: Value = serde_json::from_str(&text).expect("signal JSON");
        seen["approvalUrl"]
            .as_str()
            .expect("the held result gives the link")
            .to_owned()
    }

    async fn transcript(self) -> Value {
        self.task.await.expect("client task")
    }
}

/// Two replicas on one Redis in front of a fresh notes store, and the Python SDK client (a host
/// that cannot elicit) holding `delete_note readme` on replica A and waiting for the page.
struct HeldDelete {
    /// The link as the webhook gave it, rewritten to replica B's page.
    link_b: String,
    /// Replica B's page origin, which its form posts carry.
    origin_b: String,
    client: PendingClient,
    _processes: Vec<countersign_e2e::Process>,
    _files: Vec<TempFile>,
    _redis: RedisServer,
}

impl HeldDelete {
    async fn start() -> Self {
        let redis = RedisServer::start().await;
        let (upstream, upstream_url) = start_python_upstream().await;
        let policy = TempFile::new("policy.yaml", POLICY);
        let secret = TempFile::new("webhook.secret", WEBHOOK_SECRET);
        let webhooks = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind webhook");
        let webhook_url = format!("http://{}/hook", webhooks.local_addr().expect("addr"));
        // Replicas share signing keys and the link key, as a deployment must.
        let envs = [
            (
                "COUNTERSIGN_SIGNING_KEYS",
                "k1:c2lnbmluZy1rZXktZm9yLWUyZS10ZXN0cy0wMDAwMDAwMA",
            ),
            (
                "COUNTERSIGN_APPROVAL_LINK_KEY",
                "bGluay1rZXktZm9yLWUyZS10ZXN0cy0wMDAwMDAwMDAwMDA=",
            ),
        ];
        let (page_a, page_b) = (free_port(), free_port());
        let config = |page| {
            replica_config(
                &upstream_url,
                &redis.url(),
                page,
                policy.path_str(),
                secret.path_str(),
                &webhook_url,
            )
        };
        let (gateway_a, url_a, config_a) =
            start_gateway_with_config(&config(page_a), "/mcp", &[], &envs).await;
        let (gateway_b, _url_b, config_b) =
            start_gateway_with_config(&config(page_b), "/mcp", &[], &envs).await;

        let client = PendingClient::start(url_a);

        // The person hears of the request from the webhook, not from the model.
        let notice = tokio::time::timeout(Duration::from_secs(60), receive_webhook(&webhooks))
            .await
            .expect("a webhook arrives");
        assert_eq!(notice["tool"], "delete_note", "{notice}");
        assert!(
            notice.get("arguments").is_none(),
            "arguments stay out of webhooks by default"
        );
        let link_a = notice["url"]
            .as_str()
            .expect("the notice carries the link")
            .to_owned();
        assert!(
            link_a.starts_with(&format!("http://127.0.0.1:{page_a}/approve/")),
            "{link_a}"
        );
        // Decide only once the client has seen its token refused as pending.
        assert_eq!(
            client.link().await,
            link_a,
            "the held result names the same link"
        );

        // The link works on replica B too: the request lives in Redis.
        Self {
            link_b: link_a.replace(&format!(":{page_a}/"), &format!(":{page_b}/")),
            origin_b: format!("http://127.0.0.1:{page_b}"),
            client,
            _processes: vec![upstream, gateway_a, gateway_b],
            _files: vec![policy, secret, config_a, config_b],
            _redis: redis,
        }
    }

    /// Opens the link on replica B as the requesting principal and presses `decision`; returns
    /// the page shown after.
    async fn decide(&self, decision: &str) -> String {
        let page = get(&self.link_b, "anonymous").await;
        assert_eq!(page.status, 200, "{}", page.text());
        let html = page.text();
        assert!(
            html.contains("delete_note") && html.contains("readme"),
            "{html}"
        );
        let cookie = page
            .header("set-cookie")
            .map(|c| c.split(';').next().unwrap_or_default().to_owned());
        let refused = post_form(
            &self.link_b,
            &self.origin_b,
            cookie.as_deref(),
            &format!("decision={decision}"),
        )
        .await;
        assert_ne!(
            refused.status,
            200,
            "no CSRF token, no decision: {}",
            refused.text()
        );
        let form = format!("csrf={}&decision={decision}", csrf_of(&html));
        let decided = post_form(&self.link_b, &self.origin_b, cookie.as_deref(), &form).await;
        assert_eq!(decided.status, 200, "{}", decided.text());
        decided.text()
    }

    async fn transcript(self) -> Value {
        self.client.transcript().await
    }
}

fn step(transcript: &Value, name: &str) -> Value {
    countersign_e2e::step(Peer::PythonLegacy, transcript, "step", name).clone()
}

fn executed(transcript: &Value) -> Value {
    step(transcript, "audit")["result"]["structuredContent"]["entries"].clone()
}

/// The client's token was refused as pending first, then the call ran, and the upstream's own
/// log shows it ran exactly once.
fn assert_ran_once_after_pending(transcript: &Value) {
    assert_eq!(
        step(transcript, "pending")["confirmation"]["code"],
        "pending_approval",
        "{transcript}"
    );
    assert_eq!(
        step(transcript, "approved")["result"]["structuredContent"],
        json!({"result": "deleted note 'readme'"}),
        "{transcript}"
    );
    assert_eq!(
        executed(transcript),
        json!([{"tool": "delete_note", "arguments": {"name": "readme"}}]),
        "the upstream ran it exactly once: {transcript}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_cannot_elicit_gets_its_call_approved_on_the_page_and_run_once() {
    let held = HeldDelete::start().await;
    let other = get(&held.link_b, "someone-else").await;
    assert!(
        !other.text().contains("readme"),
        "another person sees nothing of the call: {}",
        other.text()
    );
    let page = held.decide("approve").await;
    assert!(page.contains("Approved"), "{page}");

    let transcript = held.transcript().await;
    assert_eq!(
        step(&transcript, "held")["confirmation"]["channel"],
        "out_of_band",
        "{transcript}"
    );
    assert_eq!(
        step(&transcript, "held")["confirmation"]["approvalUrlReturned"],
        true,
        "{transcript}"
    );
    assert_ran_once_after_pending(&transcript);
    assert_eq!(
        step(&transcript, "replayed")["confirmation"]["code"],
        "replayed",
        "{transcript}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_denied_on_the_page_runs_nothing() {
    let held = HeldDelete::start().await;
    let page = held.decide("deny").await;
    assert!(page.contains("Denied"), "{page}");

    let transcript = held.transcript().await;
    assert_eq!(
        step(&transcript, "approved")["confirmation"]["code"],
        "not_approved",
        "{transcript}"
    );
    assert_eq!(
        step(&transcript, "replayed")["confirmation"]["status"],
        "rejected",
        "{transcript}"
    );
    assert_eq!(
        executed(&transcript),
        json!([]),
        "the upstream ran nothing: {transcript}"
    );
}

/// The whole path in a real browser: the gateway binary's own page with OpenID Connect login at
/// a real provider, a rule naming the approvers by group, and the Python SDK client holding the
/// call. Bob (group `sre`) logs in, sees the exact arguments and approves; the call runs once.
#[tokio::test(flavor = "multi_thread")]
async fn an_approver_in_the_browser_lets_a_real_clients_call_run_once() {
    let page_port = free_port();
    let page_url = format!("http://127.0.0.1:{page_port}");
    let (_provider, issuer) =
        countersign_e2e::oidc::start_provider(std::slice::from_ref(&page_url)).await;
    let (_upstream, upstream_url) = start_python_upstream().await;
    let policy = TempFile::new(
        "policy.yaml",
        "version: 1
rules:
  - id: deletes-need-an-sre
    tools: [delete_note]
    action: confirm
    approval: out_of_band
    approvers: { groups: [sre] }
",
    );
    let client_secret = TempFile::new("oidc.secret", countersign_e2e::oidc::CLIENT_SECRET);
    let config = format!(
        "upstreams:
  - name: notes
    url: {upstream_url}
policy: {policy}
audit: {{ path: 'off' }}
approvals:
  listen: 127.0.0.1:{page_port}
  public_url: {page_url}
  auth:
    oidc:
      issuer: {issuer}
      client_id: countersign
      client_secret_file: {secret}
      scopes: [openid, profile, groups]
",
        policy = policy.path_str(),
        secret = client_secret.path_str(),
    );
    let (_gateway, url, _config) = start_gateway_with_config(&config, "/mcp", &[], &[]).await;

    let client = PendingClient::start(url);
    let link = client.link().await;

    let driver = countersign_e2e::webdriver::Driver::start().await;
    let browser = driver.browser().await;
    let heading = countersign_e2e::oidc::log_in_and_open(&browser, &link, "bob").await;
    assert_eq!(heading, "Approve this tool call?");
    let shown = browser.text("#arguments").await;
    assert!(shown.contains(r#""name": "readme""#), "{shown}");
    browser.find("#approve").await.click().await;
    assert_eq!(browser.text_once("main h1", "Approved").await, "Approved");
    browser.quit().await;

    let transcript = client.transcript().await;
    assert_ran_once_after_pending(&transcript);
}
