//! What the crate's unit tests share: a page on a manual clock with a memory book, the audit
//! lines it wrote, and requests as a browser would send them.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use countersign_proxy::approval::out_of_band::{ApprovalRequest, Approvers};
use countersign_proxy::audit::AuditSink;
use countersign_proxy::clock::ManualClock;
use countersign_store::MemoryApprovalBook;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};

use crate::config::{AuthConfig, PageConfig};
use crate::link::LinkKey;
use crate::metrics::PageMetrics;
use crate::page::ApprovalPage;

pub(crate) const PUBLIC: &str = "https://approve.example.com";
pub(crate) const PEER: &str = "192.0.2.7:40000";

/// The audit lines written so far.
#[derive(Clone, Default)]
pub(crate) struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lines lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    pub(crate) fn text(&self, sink: &AuditSink) -> String {
        sink.flush(Duration::from_secs(5));
        String::from_utf8(self.0.lock().expect("lines lock").clone()).expect("utf-8")
    }
}

pub(crate) struct Fixture {
    pub page: Arc<ApprovalPage>,
    pub clock: Arc<ManualClock>,
    pub audit: AuditSink,
    pub lines: Lines,
}

pub(crate) fn config() -> PageConfig {
    PageConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        public_url: url::Url::parse(PUBLIC).expect("url"),
        ttl: Duration::from_secs(600),
        link_key: LinkKey::generate(),
        auth: AuthConfig::TrustedHeader {
            user: http::HeaderName::from_static("x-forwarded-user"),
            groups: Some(http::HeaderName::from_static("x-forwarded-groups")),
        },
        webhooks: Vec::new(),
        trust_forwarded_for: false,
        max_pending: 100,
    }
}

pub(crate) fn fixture() -> Fixture {
    fixture_with(config())
}

pub(crate) fn fixture_with(config: PageConfig) -> Fixture {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
    let lines = Lines::default();
    let audit = AuditSink::new(Box::new(lines.clone()), false);
    let page = Arc::new(ApprovalPage::new(
        config,
        Arc::new(MemoryApprovalBook::new(100)),
        clock.clone(),
        audit.clone(),
        PageMetrics::default(),
    ));
    Fixture {
        page,
        clock,
        audit,
        lines,
    }
}

pub(crate) fn held_call(arguments: &str, approvers: Approvers) -> ApprovalRequest {
    ApprovalRequest {
        principal: "ada".to_owned(),
        principal_groups: vec!["dev".to_owned()],
        client_name: Some("Claude Desktop".to_owned()),
        session: Some("s-1".to_owned()),
        upstream: "notes".to_owned(),
        tool: "delete_note".to_owned(),
        risk: "destructive".to_owned(),
        rule: Some("destructive-needs-approval".to_owned()),
        arguments: arguments.to_owned(),
        preview: Some("would delete 1 note".to_owned()),
        approvers,
        binding: "binding-digest".to_owned(),
    }
}

/// The path of a ticket's link.
pub(crate) fn path_of(url: &str) -> String {
    url.strip_prefix(PUBLIC)
        .expect("link under the public URL")
        .to_owned()
}

pub(crate) fn get(path: &str, user: Option<&str>, cookie: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::get(path);
    if let Some(user) = user {
        request = request.header("x-forwarded-user", user);
    }
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.body(Full::new(Bytes::new())).expect("request")
}

pub(crate) fn post(
    path: &str,
    user: Option<&str>,
    cookie: Option<&str>,
    origin: Option<&str>,
    form: &str,
) -> Request<Full<Bytes>> {
    let mut request =
        Request::post(path).header("content-type", "application/x-www-form-urlencoded");
    if let Some(user) = user {
        request = request.header("x-forwarded-user", user);
    }
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request
        .body(Full::new(Bytes::from(form.to_owned())))
        .expect("request")
}

pub(crate) async fn body_text(response: Response<Full<Bytes>>) -> String {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8 page")
}

/// `name=value` of the response's session cookie.
pub(crate) fn session_cookie(response: &Response<Full<Bytes>>) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("countersign_page="))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned)
}

/// The CSRF token in a request page.
pub(crate) fn csrf_of(page: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = page.find(marker).expect("the page has a CSRF field") + marker.len();
    let end = page[start..].find('"').expect("closing quote") + start;
    page[start..end].to_owned()
}
