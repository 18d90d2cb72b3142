use countersign_proxy::approval::out_of_band::Approvers;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use super::*;
use crate::config::Secret;
use crate::testing::held_call;

fn stored() -> StoredRequest {
    StoredRequest::new(
        held_call(r#"{"id":"secret-note"}"#, Approvers::default()),
        0,
        600_000,
    )
}

fn hook(format: WebhookFormat, include_arguments: bool) -> WebhookConfig {
    WebhookConfig {
        url: url::Url::parse("https://hooks.example.com/x").expect("url"),
        format,
        secret: Some(Secret("hook-secret".to_owned())),
        secret_file: None,
        include_arguments,
    }
}

#[test]
fn json_notice_is_signed_over_timestamp_and_body_and_leaves_arguments_out() {
    let (body, headers) = prepare(
        &hook(WebhookFormat::Json, false),
        &stored(),
        "https://a/approve/x.y",
        1_700_000_000,
    );
    let text = String::from_utf8(body.clone()).expect("utf-8");
    assert!(text.contains(r#""url":"https://a/approve/x.y""#));
    assert!(text.contains(r#""tool":"delete_note""#));
    assert!(!text.contains("secret-note"), "no arguments unless asked");
    let (_, signature) = headers
        .iter()
        .find(|(n, _)| *n == "x-countersign-signature")
        .expect("signed");
    // What a receiver does: HMAC-SHA256 over "<t>.<body>" with the shared secret.
    let mut mac = Hmac::<Sha256>::new_from_slice(b"hook-secret").expect("key");
    mac.update(b"1700000000.");
    mac.update(&body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(signature, &format!("t=1700000000,v1={hex}"));
}

#[test]
fn arguments_are_sent_only_when_the_hook_asks() {
    let (body, _) = prepare(
        &hook(WebhookFormat::Json, true),
        &stored(),
        "https://a/x",
        0,
    );
    assert!(
        String::from_utf8(body)
            .expect("utf-8")
            .contains("secret-note")
    );
}

#[test]
fn slack_notice_links_the_page_and_escapes_its_control_characters() {
    let mut request = stored();
    request.principal = "<!channel> ada".to_owned();
    let (body, headers) = prepare(
        &hook(WebhookFormat::Slack, false),
        &request,
        "https://a/approve/x.y",
        0,
    );
    let body: serde_json::Value = serde_json::from_slice(&body).expect("json");
    let text = body["text"].as_str().expect("text");
    assert!(
        text.contains("<https://a/approve/x.y|Review and decide>"),
        "{text}"
    );
    assert!(
        text.contains("&lt;!channel&gt; ada"),
        "no mention smuggled in: {text}"
    );
    assert!(!headers.iter().any(|(n, _)| *n == "x-countersign-signature"));
}

/// A webhook receiver on a free port: hands each request's head and body to the test, and
/// answers only when the test says so, with the status it says.
async fn receiver() -> (
    url::Url,
    tokio::sync::mpsc::Receiver<(
        http::HeaderMap,
        bytes::Bytes,
        tokio::sync::oneshot::Sender<u16>,
    )>,
) {
    use http_body_util::BodyExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = url::Url::parse(&format!(
        "http://{}/hook",
        listener.local_addr().expect("addr")
    ))
    .expect("url");
    let (seen, requests) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            let service =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await.expect("body").to_bytes();
                        let (answer, status) = tokio::sync::oneshot::channel();
                        let _ = seen.send((parts.headers, body, answer)).await;
                        let status = status.await.unwrap_or(500);
                        let mut response =
                            http::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
                        *response.status_mut() =
                            http::StatusCode::from_u16(status).expect("status");
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    (url, requests)
}

#[tokio::test]
async fn opened_request_is_posted_signed_without_waiting_for_the_hook() {
    use countersign_proxy::approval::out_of_band::OutOfBand as _;
    let (url, mut requests) = receiver().await;
    let mut config = crate::testing::config();
    config.webhooks = vec![WebhookConfig {
        url,
        ..hook(WebhookFormat::Json, false)
    }];
    let fx = crate::testing::fixture_with(config);
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    // `open` returned; the hook has the request and has not answered yet.
    let (headers, body, answer) = requests.recv().await.expect("the hook is called");
    let signature = headers["x-countersign-signature"].to_str().expect("ascii");
    let t: u64 = signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split(',').next())
        .and_then(|t| t.parse().ok())
        .expect("a timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(b"hook-secret").expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(&body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        signature,
        format!("t={t},v1={hex}"),
        "the receiver's own check passes"
    );
    let notice: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(notice["url"], ticket.url.as_str());
    let _ = answer.send(500);
    // A second request: the failed first one was counted, not retried.
    fx.page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let (_, _, answer) = requests.recv().await.expect("the hook is called again");
    assert_eq!(fx.page.metrics.webhooks("failed"), 1);
    let _ = answer.send(204);
}
