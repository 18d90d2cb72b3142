//! The approval page in a real browser (headless Chromium over WebDriver), with approvers
//! logging in through a real OpenID Connect provider (npm `oidc-provider`, started by each
//! test). Requests are opened through the page's `OutOfBand::open`, as the approval layer opens
//! them, and their outcome is read back through `OutOfBand::status`.
//!
//! With `COUNTERSIGN_SCREENSHOTS=1`, the approve, denied and expired pages are saved to
//! `docs/images/approval-{approve,denied,expired}.png` (the README shows them).

use std::sync::Arc;
use std::time::Duration;

use countersign_approvals::{
    ApprovalPage, AuthConfig, LinkKey, OidcConfig, PageConfig, PageMetrics, Secret,
};
use countersign_e2e::oidc::{CLIENT_SECRET, log_in_and_open, start_provider};
use countersign_e2e::webdriver::{Browser, Driver};
use countersign_e2e::{RedisServer, repo_root};
use countersign_proxy::approval::out_of_band::{
    ApprovalRequest, ApprovalStatus, Approvers, OutOfBand as _, Ticket,
};
use countersign_proxy::audit::AuditSink;
use countersign_proxy::clock::ManualClock;
use countersign_store::{ApprovalBook, MemoryApprovalBook, RedisApprovalBook};
use tokio::net::TcpListener;
use tokio::process::Child;

/// Arguments with markup, a bidi override and a long value: the page must show them exactly.
const ARGUMENTS: &str =
    r#"{"id":"note-42","reason":"<b>cleanup</b> of ada\u202egpj.exe","keep":false}"#;

/// One approval page replica, serving on its own loopback port.
struct Replica {
    page: Arc<ApprovalPage>,
    public_url: String,
    clock: Arc<ManualClock>,
}

/// The provider, the browser driver and the replicas of one test.
struct World {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    driver: Driver,
    replicas: Vec<Replica>,
    _provider: Child,
    _redis: Option<RedisServer>,
}

/// One browser test at a time: each starts Chromium and a provider, and seven at once on a
/// loaded 2-core machine would only make every one of them slow.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl World {
    async fn start(replicas: usize, redis: bool) -> Self {
        let turn = ONE_AT_A_TIME.lock().await;
        let mut listeners = Vec::new();
        for _ in 0..replicas {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind page"));
        }
        let urls: Vec<String> = listeners
            .iter()
            .map(|l| format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port()))
            .collect();
        let (provider, issuer) = start_provider(&urls).await;
        let redis = if redis {
            Some(RedisServer::start().await)
        } else {
            None
        };
        // Replicas share the link key, as the docs require for several replicas.
        let link_key = LinkKey::generate();
        let mut replicas = Vec::new();
        for (listener, public_url) in listeners.into_iter().zip(urls) {
            let book: Arc<dyn ApprovalBook> = match &redis {
                Some(redis) => Arc::new(
                    RedisApprovalBook::connect(&redis.url(), "e2e", Duration::from_secs(2))
                        .await
                        .expect("book connects"),
                ),
                None => Arc::new(MemoryApprovalBook::new(100)),
            };
            let clock = Arc::new(ManualClock::at_unix_secs(unix_now()));
            let config = PageConfig {
                listen: listener.local_addr().expect("addr"),
                public_url: url::Url::parse(&public_url).expect("url"),
                ttl: Duration::from_secs(600),
                link_key: link_key.clone(),
                auth: AuthConfig::Oidc(OidcConfig {
                    issuer: issuer.clone(),
                    client_id: "countersign".to_owned(),
                    client_secret: Secret(CLIENT_SECRET.to_owned()),
                    scopes: vec![
                        "openid".to_owned(),
                        "profile".to_owned(),
                        "groups".to_owned(),
                    ],
                    username_claims: vec!["preferred_username".to_owned(), "sub".to_owned()],
                    groups_claim: "groups".to_owned(),
                    session_ttl: Duration::from_secs(3600),
                    http_timeout: Duration::from_secs(5),
                }),
                webhooks: Vec::new(),
                trust_forwarded_for: false,
                max_pending: 100,
            };
            let page = Arc::new(ApprovalPage::new(
                config,
                book,
                clock.clone(),
                AuditSink::disabled(),
                PageMetrics::default(),
            ));
            tokio::spawn(countersign_approvals::serve(
                listener,
                page.clone(),
                std::future::pending(),
                Duration::from_secs(1),
            ));
            replicas.push(Replica {
                page,
                public_url,
                clock,
            });
        }
        Self {
            _turn: turn,
            driver: Driver::start().await,
            replicas,
            _provider: provider,
            _redis: redis,
        }
    }

    fn page(&self) -> &Arc<ApprovalPage> {
        &self.replicas[0].page
    }

    async fn open(&self, approvers: Approvers) -> Ticket {
        self.page().open(held_call(approvers)).await.expect("open")
    }
}

fn held_call(approvers: Approvers) -> ApprovalRequest {
    ApprovalRequest {
        principal: "ada".to_owned(),
        principal_groups: vec!["dev".to_owned()],
        client_name: Some("claude-ai".to_owned()),
        session: Some("session-7".to_owned()),
        upstream: "notes".to_owned(),
        tool: "delete_note".to_owned(),
        risk: "destructive".to_owned(),
        rule: Some("destructive-calls".to_owned()),
        arguments: ARGUMENTS.to_owned(),
        preview: Some("would delete note-42 (\"groceries\")".to_owned()),
        approvers,
        binding: "binding-of-this-call".to_owned(),
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

async fn save_screenshot(browser: &Browser, name: &str) {
    if std::env::var("COUNTERSIGN_SCREENSHOTS").is_ok_and(|v| v == "1") {
        let path = repo_root().join(format!("docs/images/approval-{name}.png"));
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, browser.screenshot().await).expect("write screenshot");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approver_logs_in_sees_the_exact_arguments_and_approves() {
    let world = World::start(1, false).await;
    let ticket = world.open(Approvers::default()).await;
    let browser = world.driver.browser().await;
    let heading = log_in_and_open(&browser, &ticket.url, "ada").await;
    assert_eq!(heading, "Approve this tool call?");
    let shown = browser.text("#arguments").await;
    assert!(
        shown.contains(r#""reason": "<b>cleanup</b> of ada\u{202e}gpj.exe""#),
        "{shown}"
    );
    assert!(
        shown.contains(r#""id": "note-42""#) && shown.contains(r#""keep": false"#),
        "{shown}"
    );
    assert!(
        browser
            .text("#preview")
            .await
            .contains("would delete note-42")
    );
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
    save_screenshot(&browser, "approve").await;
    browser.find("#approve").await.click().await;
    assert_eq!(browser.text_once("main h1", "Approved").await, "Approved");
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Approved {
            approver: "ada".to_owned(),
            binding: "binding-of-this-call".to_owned()
        })
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denial_in_the_browser_is_reported_as_denied() {
    let world = World::start(1, false).await;
    let ticket = world.open(Approvers::default()).await;
    let browser = world.driver.browser().await;
    log_in_and_open(&browser, &ticket.url, "ada").await;
    browser.find("#deny").await.click().await;
    assert_eq!(browser.text_once("main h1", "Denied").await, "Denied");
    save_screenshot(&browser, "denied").await;
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Denied {
            approver: "ada".to_owned()
        })
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_is_refused_unless_in_the_approver_group() {
    let world = World::start(1, false).await;
    let approvers = Approvers {
        users: Vec::new(),
        groups: names(&["sre"]),
        four_eyes: false,
    };
    let ticket = world.open(approvers).await;
    let mallory = world.driver.browser().await;
    assert_eq!(
        log_in_and_open(&mallory, &ticket.url, "mallory").await,
        "Not allowed"
    );
    assert!(
        mallory
            .text("#outcome")
            .await
            .contains("not among the approvers")
    );
    assert!(
        !mallory.source().await.contains("note-42"),
        "a refused user sees nothing of the call"
    );
    let bob = world.driver.browser().await;
    assert_eq!(
        log_in_and_open(&bob, &ticket.url, "bob").await,
        "Approve this tool call?"
    );
    bob.find("#approve").await.click().await;
    assert_eq!(bob.text_once("main h1", "Approved").await, "Approved");
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Approved {
            approver: "bob".to_owned(),
            binding: "binding-of-this-call".to_owned()
        })
    );
    mallory.quit().await;
    bob.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_eyes_refuses_self_approval() {
    let world = World::start(1, false).await;
    let approvers = Approvers {
        users: Vec::new(),
        groups: names(&["dev", "sre"]),
        four_eyes: true,
    };
    let ticket = world.open(approvers).await;
    let browser = world.driver.browser().await;
    assert_eq!(
        log_in_and_open(&browser, &ticket.url, "ada").await,
        "Not allowed"
    );
    assert!(browser.text("#outcome").await.contains("four eyes"));
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_link_shows_expired_and_cannot_be_approved() {
    let world = World::start(1, false).await;
    let ticket = world.open(Approvers::default()).await;
    let browser = world.driver.browser().await;
    log_in_and_open(&browser, &ticket.url, "ada").await;
    world.replicas[0].clock.advance(Duration::from_secs(601));
    browser.find("#approve").await.click().await;
    assert_eq!(
        browser.text_once("main h1", "Request expired").await,
        "Request expired"
    );
    browser.goto(&ticket.url).await;
    assert_eq!(
        browser.text_once("main h1", "Request expired").await,
        "Request expired"
    );
    save_screenshot(&browser, "expired").await;
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Gone)
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_without_the_csrf_token_is_refused() {
    let world = World::start(1, false).await;
    let ticket = world.open(Approvers::default()).await;
    let browser = world.driver.browser().await;
    log_in_and_open(&browser, &ticket.url, "ada").await;
    // The person's own browser, session and origin, but the form lost its token.
    browser
        .execute("document.querySelector('input[name=csrf]').remove()")
        .await;
    browser.find("#approve").await.click().await;
    assert_eq!(browser.text_once("main h1", "Refused").await, "Refused");
    assert_eq!(
        world.page().status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_opened_on_replica_a_is_approved_on_replica_b() {
    let world = World::start(2, true).await;
    let ticket = world.open(Approvers::default()).await;
    let (a, b) = (&world.replicas[0], &world.replicas[1]);
    // The load balancer sends the person to replica B.
    let on_b = ticket.url.replace(&a.public_url, &b.public_url);
    assert_ne!(on_b, ticket.url);
    let waiting = {
        let (page, id) = (a.page.clone(), ticket.id.clone());
        tokio::spawn(async move { page.wait(&id, Duration::from_secs(120)).await })
    };
    let browser = world.driver.browser().await;
    assert_eq!(
        log_in_and_open(&browser, &on_b, "ada").await,
        "Approve this tool call?"
    );
    browser.find("#approve").await.click().await;
    assert_eq!(browser.text_once("main h1", "Approved").await, "Approved");
    let approved = ApprovalStatus::Approved {
        approver: "ada".to_owned(),
        binding: "binding-of-this-call".to_owned(),
    };
    assert_eq!(
        waiting.await.expect("task"),
        Ok(approved.clone()),
        "replica A's held call wakes"
    );
    assert_eq!(a.page.status(&ticket.id).await, Ok(approved));
    browser.quit().await;
}

/// The response head and body of a plain `GET path` to `port`.
async fn plain_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    response
}

#[tokio::test]
async fn gateway_serves_the_approval_page_on_its_own_listener() {
    let port = countersign_testkit::free_port();
    let config = format!(
        "upstreams:\n  - url: http://127.0.0.1:9/mcp\napprovals:\n  listen: 127.0.0.1:{port}\n  \
         public_url: http://127.0.0.1:{port}\n  auth:\n    trusted_header:\n      user: X-Forwarded-User\n"
    );
    let (_gateway, _, _file) =
        countersign_e2e::start_gateway_with_config(&config, "/mcp", &[], &[]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the approval page never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let response = plain_get(port, "/approve/0123456789abcdef0123456789abcdef.forged").await;
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    let head = response.to_ascii_lowercase();
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{response}"
    );
    assert!(head.contains("x-frame-options: deny"));
    assert!(response.contains("Unknown link"));
}
