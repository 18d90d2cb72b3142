use std::time::Duration;

use countersign_approvals::{AuthConfig, WebhookFormat};

use crate::config::RawConfig;

const UPSTREAM: &str = "upstreams:\n  - url: http://127.0.0.1:3001/mcp\n";

fn validate(approvals: &str) -> anyhow::Result<crate::Config> {
    RawConfig::from_yaml(&format!("{UPSTREAM}approvals:\n{approvals}"))?.validate()
}

fn error_of(approvals: &str) -> String {
    format!("{:#}", validate(approvals).expect_err("refused"))
}

const TRUSTED: &str = "  listen: 127.0.0.1:8443\n  public_url: https://approve.example.com\n  auth:\n    trusted_header:\n      user: X-Forwarded-User\n";

#[test]
fn trusted_header_page_gets_documented_defaults() {
    let config = validate(TRUSTED).expect("valid");
    let approvals = config.approvals.expect("the page is configured");
    let page = approvals.page;
    assert_eq!(page.ttl, Duration::from_secs(600));
    assert_eq!(page.max_pending, 10_000);
    assert!(!page.trust_forwarded_for);
    assert!(page.webhooks.is_empty());
    assert_eq!(page.base(), "https://approve.example.com");
    assert!(approvals.link_key_generated, "no key configured");
    assert!(matches!(
        page.auth,
        AuthConfig::TrustedHeader { groups: None, .. }
    ));
}

#[test]
fn page_without_approver_login_is_refused() {
    let error = error_of("  listen: 127.0.0.1:8443\n  public_url: https://approve.example.com\n");
    assert!(error.contains("approvals.auth is required"), "{error}");
    let error = error_of(&format!(
        "{TRUSTED}    oidc:\n      issuer: https://id.example.com\n      client_id: c\n      client_secret_file: /nonexistent\n"
    ));
    assert!(error.contains("not both"), "{error}");
}

#[test]
fn plain_http_public_url_is_only_for_localhost() {
    let remote = TRUSTED.replace("https://approve.example.com", "http://approve.example.com");
    assert!(error_of(&remote).contains("must be https://"));
    let local = TRUSTED.replace("https://approve.example.com", "http://127.0.0.1:8443/base/");
    let config = validate(&local).expect("loopback http is allowed");
    assert_eq!(config.approvals.expect("page").page.base_path(), "/base");
}

#[test]
fn page_needs_its_own_listener_and_a_public_url() {
    let same = TRUSTED.replace("127.0.0.1:8443", "127.0.0.1:8080");
    assert!(error_of(&same).contains("must differ from listen and admin"));
    let missing = TRUSTED.replace("  public_url: https://approve.example.com\n", "");
    assert!(error_of(&missing).contains("approvals.public_url is required"));
}

#[test]
fn link_key_file_must_hold_enough_base64() {
    let dir = std::env::temp_dir().join(format!("countersign-link-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let short = dir.join("short");
    std::fs::write(&short, "c2hvcnQ=\n").expect("write");
    let error = error_of(&format!("{TRUSTED}  link_key_file: {}\n", short.display()));
    assert!(error.contains("too short"), "{error}");
    let good = dir.join("good");
    std::fs::write(&good, format!("{}\n", "QUFB".repeat(11))).expect("write");
    let config =
        validate(&format!("{TRUSTED}  link_key_file: {}\n", good.display())).expect("valid");
    assert!(!config.approvals.expect("page").link_key_generated);
}

#[test]
fn json_webhooks_need_a_secret_and_formats_are_checked() {
    let error = error_of(&format!(
        "{TRUSTED}  webhooks:\n    - url: https://hooks.example.com/a\n"
    ));
    assert!(error.contains("secret_file is required"), "{error}");
    let error = error_of(&format!(
        "{TRUSTED}  webhooks:\n    - url: https://hooks.example.com/a\n      format: teams\n"
    ));
    assert!(error.contains("`json` or `slack`"), "{error}");
    let config = validate(&format!(
        "{TRUSTED}  webhooks:\n    - url: https://hooks.slack.com/x\n      format: slack\n"
    ))
    .expect("valid");
    assert_eq!(
        config.approvals.expect("page").page.webhooks[0].format,
        WebhookFormat::Slack
    );
}

#[test]
fn oidc_defaults_and_openid_scope() {
    let dir = std::env::temp_dir().join(format!("countersign-oidc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let secret = dir.join("secret");
    std::fs::write(&secret, "s3cret\n").expect("write");
    let oidc = format!(
        "  listen: 127.0.0.1:8443\n  public_url: https://approve.example.com\n  auth:\n    oidc:\n      issuer: https://id.example.com\n      client_id: countersign\n      client_secret_file: {}\n",
        secret.display()
    );
    let config = validate(&oidc).expect("valid");
    let AuthConfig::Oidc(oidc_config) = config.approvals.expect("page").page.auth else {
        panic!("oidc");
    };
    assert_eq!(oidc_config.scopes, ["openid", "profile"]);
    assert_eq!(oidc_config.username_claims, ["preferred_username", "sub"]);
    assert_eq!(oidc_config.groups_claim, "groups");
    assert_eq!(oidc_config.client_secret.0, "s3cret");
    let error = error_of(&format!("{oidc}      scopes: [profile]\n"));
    assert!(error.contains("must include openid"), "{error}");
}
