//! Tells configured webhooks about each opened request, so the link reaches a person without
//! passing through the model at all.
//!
//! Notifications go through a bounded queue to one background task: `open` never waits for
//! a webhook, a slow or failing one never holds a call, and when the queue is full the
//! notification is dropped (logged and counted), not buffered without bound. Each POST has a
//! deadline. Bodies carry the link and the call's summary, never its arguments unless the hook
//! asks for them (`include_arguments`).
//!
//! JSON bodies are signed: `X-Countersign-Signature: t=<unix seconds>,v1=<hex>`, the hex
//! HMAC-SHA256 under the hook's secret of `<t>.<body>`. A receiver recomputes it over the raw
//! body and refuses a stale `t` (docs/approval-page.md).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{Hmac, Mac as _};
use http::Method;
use serde_json::json;
use sha2::Sha256;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::client::HttpClient;
use crate::config::{PageConfig, WebhookConfig, WebhookFormat};
use crate::metrics::PageMetrics;
use crate::record::StoredRequest;

/// Notifications waiting to be sent, at most.
const QUEUE: usize = 256;

/// Deadline of one webhook POST.
const POST_TIMEOUT: Duration = Duration::from_secs(5);

struct Notice {
    request: StoredRequest,
    url: String,
}

/// The sending side of the queue; without webhooks it sends nothing.
#[derive(Debug)]
pub struct Webhooks {
    queue: Option<mpsc::Sender<Notice>>,
    metrics: PageMetrics,
}

impl Webhooks {
    /// Starts the sender task when `config` lists webhooks (needs a tokio runtime).
    pub fn start(config: &PageConfig, metrics: PageMetrics) -> Self {
        if config.webhooks.is_empty() {
            return Self {
                queue: None,
                metrics,
            };
        }
        let (queue, notices) = mpsc::channel(QUEUE);
        tokio::spawn(send_all(config.webhooks.clone(), notices, metrics.clone()));
        Self {
            queue: Some(queue),
            metrics,
        }
    }

    pub fn notify(&self, request: &StoredRequest, url: &str) {
        let Some(queue) = &self.queue else { return };
        let notice = Notice {
            request: request.clone(),
            url: url.to_owned(),
        };
        if queue.try_send(notice).is_err() {
            warn!("approval webhook queue is full; notification dropped");
            self.metrics.webhook("dropped");
        }
    }
}

async fn send_all(
    hooks: Vec<WebhookConfig>,
    mut notices: mpsc::Receiver<Notice>,
    metrics: PageMetrics,
) {
    let client = HttpClient::new();
    while let Some(notice) = notices.recv().await {
        for hook in &hooks {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let (body, headers) = prepare(hook, &notice.request, &notice.url, now);
            match client
                .send(
                    Method::POST,
                    hook.url.as_str(),
                    &headers,
                    Bytes::from(body),
                    POST_TIMEOUT,
                )
                .await
            {
                Ok((status, _, _)) if status.is_success() => {
                    debug!(hook = %hook.url, "approval webhook delivered");
                    metrics.webhook("delivered");
                }
                Ok((status, _, _)) => {
                    warn!(hook = %hook.url, %status, "approval webhook refused the notification");
                    metrics.webhook("failed");
                }
                Err(error) => {
                    warn!(hook = %hook.url, %error, "approval webhook failed");
                    metrics.webhook("failed");
                }
            }
        }
    }
}

/// The body and headers of one notification at Unix second `now`.
pub(crate) fn prepare(
    hook: &WebhookConfig,
    request: &StoredRequest,
    url: &str,
    now: u64,
) -> (Vec<u8>, Vec<(&'static str, String)>) {
    let mut headers = vec![("content-type", "application/json".to_owned())];
    let body = match hook.format {
        WebhookFormat::Json => {
            let mut body = json!({
                "type": "approval.requested",
                "url": url,
                "expires_at": request.expires_at_unix_ms / 1000,
                "principal": request.principal,
                "client": request.client_name,
                "session": request.session,
                "upstream": request.upstream,
                "tool": request.tool,
                "risk": request.risk,
                "rule": request.rule,
            });
            if hook.include_arguments {
                body["arguments"] = json!(request.arguments);
            }
            let body = body.to_string().into_bytes();
            if let Some(secret) = &hook.secret {
                headers.push((
                    "x-countersign-signature",
                    signature(secret.0.as_bytes(), now, &body),
                ));
            }
            body
        }
        WebhookFormat::Slack => {
            let mut text = format!(
                "*{}* asks to run `{}` on {} (risk: {}). <{}|Review and decide>",
                slack_escape(&request.principal),
                slack_escape(&request.tool),
                slack_escape(&request.upstream),
                slack_escape(&request.risk),
                url,
            );
            if hook.include_arguments {
                text.push_str(&format!("\n```{}```", slack_escape(&request.arguments)));
            }
            json!({ "text": text }).to_string().into_bytes()
        }
    };
    (body, headers)
}

/// `t=<now>,v1=<hex HMAC-SHA256 of "<now>.<body>">`.
pub fn signature(secret: &[u8], now: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(now.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={now},v1={hex}")
}

/// Slack's three control characters in message text.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests;
