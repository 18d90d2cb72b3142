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
