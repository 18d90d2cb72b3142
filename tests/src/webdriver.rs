//! A small WebDriver client for the approval page's browser tests: headless Chromium driven by
//! `chromedriver` (Debian's `chromium` and `chromium-driver`, installed by
//! `scripts/install-test-tools.sh`), over the W3C WebDriver protocol with the workspace's own
//! hyper. Only the commands the tests use: sessions, navigation, elements, page source,
//! screenshots and script execution.

use std::time::Duration;

use bytes::Bytes;
use countersign_testkit::{TempDir, free_port};
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::Process;

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A `chromedriver` of the test's own on a free port, killed on drop.
#[derive(Debug)]
pub struct Driver {
    port: u16,
    _process: Process,
}

impl Driver {
    pub async fn start() -> Self {
        let binary =
            std::env::var("COUNTERSIGN_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let port = free_port();
        let mut command = Command::new(binary);
        command.arg(format!("--port={port}"));
        let process = Process::start_until_listening("chromedriver", command, port).await;
        Self {
            port,
            _process: process,
        }
    }

    /// A new headless browser with its own profile (so its own cookies).
    pub async fn browser(&self) -> Browser {
        let chromium =
            std::env::var("COUNTERSIGN_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        // A directory of its own, removed when the browser is dropped (Chromium writes a few
        // MiB of profile into it per session).
        let profile = TempDir::new();
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=900,1300", "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let answer = call(self.port, "POST", "/session", Some(capabilities)).await;
        let session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver did not start a session: {answer}"))
            .to_owned();
        Browser {
            port: self.port,
            session,
            _profile: profile,
        }
    }
}

/// One browser session; closed on [`Browser::quit`].
#[derive(Debug)]
pub struct Browser {
    port: u16,
    session: String,
    _profile: TempDir,
}

impl Browser {
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        call(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
        .await
    }

    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await;
    }

    pub async fn url(&self) -> String {
        self.command("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn source(&self) -> String {
        self.command("GET", "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The element matching `css`, waiting up to thirty seconds for it to appear.
    pub async fn find(&self, css: &str) -> Element<'_> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let found = self
                .command(
                    "POST",
                    "/element",
                    Some(json!({ "using": "css selector", "value": css })),
                )
                .await;
            if let Some(id) = found[ELEMENT].as_str() {
                return Element {
                    browser: self,
                    id: id.to_owned(),
                };
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no element `{css}` at {}:\n{}",
                self.url().await,
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await
    }

    /// The text of the element matching `css` once it reads `expected`, or what it reads after
    /// thirty seconds (pages change asynchronously after a click; the caller asserts).
    pub async fn text_once(&self, css: &str, expected: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.try_text(css).await;
            if text.as_deref() == Some(expected) || tokio::time::Instant::now() >= deadline {
                return text.unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The element's text now, `None` when there is no such element (or it just went stale).
    async fn try_text(&self, css: &str) -> Option<String> {
        let text = self
            .execute(&format!(
                "const e = document.querySelector({}); return e ? e.innerText : null;",
                Value::from(css)
            ))
            .await;
        text.as_str().map(str::to_owned)
    }

    pub async fn execute(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let data = self.command("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(data.as_str().expect("base64 screenshot"))
            .expect("valid base64")
    }

    pub async fn quit(self) {
        call(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        )
        .await;
    }
}

#[derive(Debug)]
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    pub async fn click(&self) {
        self.browser
            .command(
                "POST",
                &format!("/element/{}/click", self.id),
                Some(json!({})),
            )
            .await;
    }

    pub async fn type_text(&self, text: &str) {
        self.browser
            .command(
                "POST",
                &format!("/element/{}/value", self.id),
                Some(json!({ "text": text })),
            )
            .await;
    }

    pub async fn text(&self) -> String {
        let text = self
            .browser
            .command("GET", &format!("/element/{}/text", self.id), None)
            .await;
        text.as_str().unwrap_or_default().to_owned()
    }
}

/// One WebDriver command; returns its `value`. Errors other than "no such element" fail the
/// test.
async fn call(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to chromedriver");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("chromedriver handshake");
    tokio::spawn(connection);
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(60), sender.send_request(request))
        .await
        .expect("chromedriver answers within a minute")
        .expect("chromedriver response");
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).expect("chromedriver speaks JSON");
    let value = answer["value"].clone();
    if let Some(error) = value["error"].as_str()
        && error != "no such element"
    {
        panic!("WebDriver {method} {path}: {value}");
    }
    value
}
