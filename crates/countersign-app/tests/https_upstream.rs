//! `https://` upstreams: the gateway verifies the upstream's certificate against the configured
//! roots and the URL's host, presents a client certificate when configured, speaks HTTP/2 when
//! ALPN picks it, and answers a TLS failure with a JSON-RPC error that names the upstream and
//! the cause — having sent the upstream nothing. Every file is read at start-up: a bad one is a
//! configuration error naming the key and the path.

mod common;

use bytes::Bytes;
use common::{Harness, TOOLS_LIST};
use countersign_app::RawConfig;
use countersign_testkit::mcp::within;
use countersign_testkit::tls::{TestCa, TlsServer, Validity};
use countersign_testkit::{RecordingUpstream, TempFile, TestClient, collect};
use http::{Method, Version};
use serde_json::json;

const DELETE_CALL: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"readme"}}}"#;

/// The `tls:` line of the upstream entry.
fn tls_yaml(settings: &str) -> String {
    format!("    tls: {{ {settings} }}\n")
}

fn ca_file(ca: &TestCa) -> String {
    format!("ca_file: '{}'", ca.cert_file().display())
}

/// A TLS fake upstream with a certificate of `ca` for 127.0.0.1 (the host of its URL).
async fn tls_upstream(ca: &TestCa) -> RecordingUpstream {
    RecordingUpstream::start_tls(&TlsServer::new(ca.server(
        "upstream",
        &["127.0.0.1"],
        Validity::Current,
    )))
    .await
}

/// Sends a listing and a destructive call; both must be refused with `cause` and the upstream
/// must have received neither.
async fn assert_refused_before_anything_is_sent(h: &Harness, cause: &str) {
    for body in [TOOLS_LIST, DELETE_CALL] {
        let response = h.post(&[], body).await;
        assert_eq!(response.status, 502, "{}", response.text());
        let message = response.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.starts_with(&format!("upstream `store` is unreachable: {cause}")),
            "the client must be told which upstream failed and why: {message}"
        );
    }
    assert!(
        h.upstream.requests().is_empty(),
        "nothing may reach an upstream the gateway could not verify: {:?}",
        h.upstream.requests()
    );
}

#[tokio::test]
async fn https_upstream_is_spoken_to_over_http2_when_alpn_offers_it() {
    let ca = TestCa::new("countersign test CA");
    let h = Harness::start(tls_upstream(&ca).await, &tls_yaml(&ca_file(&ca))).await;

    let answer = h.post_ok(&[], TOOLS_LIST).await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":1,"result":{}}));
    let answer = h.post_ok(&[], DELETE_CALL).await;
    assert_eq!(answer["id"], 2);

    // The gateway's own tools/list (to classify the call) went the same way. HTTP/2 names the
    // upstream in `:authority` alone: a Host header besides is refused by nginx.
    let recorded = h.upstream.requests();
    let authority = h.upstream.addr().to_string();
    assert!(
        recorded.iter().all(|r| r.version == Version::HTTP_2
            && r.authority.as_deref() == Some(authority.as_str())
            && r.header("host").is_none()),
        "{recorded:?}"
    );
    assert_eq!(
        h.upstream.tool_calls_by_name("/arguments"),
        [("delete_note".to_owned(), json!({"name": "readme"}))]
    );
}

#[tokio::test]
async fn https_upstream_that_offers_only_http1_is_spoken_to_over_http1() {
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["127.0.0.1"], Validity::Current)).alpn(&[]);
    let upstream = RecordingUpstream::start_tls(&server).await;
    let h = Harness::start(upstream, &tls_yaml(&ca_file(&ca))).await;

    h.post_ok(&[], TOOLS_LIST).await;
    let recorded = h.upstream.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].version, Version::HTTP_11);
    assert_eq!(
        recorded[0].header("host"),
        Some(h.upstream.addr().to_string().as_str())
    );
}

#[tokio::test]
async fn plain_http_upstream_stays_on_http1() {
    let h = Harness::start(RecordingUpstream::start().await, "").await;
    h.post_ok(&[], TOOLS_LIST).await;
    assert_eq!(h.upstream.requests()[0].version, Version::HTTP_11);
}

#[tokio::test]
async fn certificate_of_an_unknown_ca_is_refused_with_the_cause() {
    let trusted = TestCa::new("the CA the gateway trusts");
    let other = TestCa::new("another CA");
    let h = Harness::start(tls_upstream(&other).await, &tls_yaml(&ca_file(&trusted))).await;
    assert_refused_before_anything_is_sent(&h, "TLS: invalid peer certificate: UnknownIssuer")
        .await;
}

#[tokio::test]
async fn builtin_roots_do_not_trust_a_private_ca() {
    let ca = TestCa::new("a private CA");
    let h = Harness::start(tls_upstream(&ca).await, "").await;
    assert_refused_before_anything_is_sent(&h, "TLS: invalid peer certificate: UnknownIssuer")
        .await;
}

#[tokio::test]
async fn certificate_for_another_host_is_refused_with_the_cause() {
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["other.example"], Validity::Current));
    let upstream = RecordingUpstream::start_tls(&server).await;
    let h = Harness::start(upstream, &tls_yaml(&ca_file(&ca))).await;
    assert_refused_before_anything_is_sent(
        &h,
        "TLS: invalid peer certificate: certificate not valid for name \"127.0.0.1\"",
    )
    .await;
}

#[tokio::test]
async fn ip_address_url_is_not_matched_against_dns_names() {
    // `localhost` resolves to 127.0.0.1, but the URL names the address, and only an IP
    // address entry of the certificate can vouch for an address.
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["localhost"], Validity::Current));
    let upstream = RecordingUpstream::start_tls(&server).await;
    let h = Harness::start(upstream, &tls_yaml(&ca_file(&ca))).await;
    assert_refused_before_anything_is_sent(
        &h,
        "TLS: invalid peer certificate: certificate not valid for name \"127.0.0.1\"",
    )
    .await;
}

#[tokio::test]
async fn dns_name_url_is_verified_and_sent_as_sni() {
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["localhost"], Validity::Current));
    let upstream = RecordingUpstream::start_tls(&server).await;
    let url = format!("https://localhost:{}/mcp", upstream.addr().port());
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 'off'\naudit: {{ path: 'off' }}\npolicy: {}\nupstreams:\n  - name: store\n    url: {url}\n{}",
        common::policy_path("allow-all.yaml").display(),
        tls_yaml(&ca_file(&ca))
    );
    let h = Harness::from_yaml(upstream, &yaml).await;
    h.post_ok(&[], TOOLS_LIST).await;
    assert_eq!(h.upstream.requests().len(), 1);
}

#[tokio::test]
async fn expired_certificate_is_refused_with_the_cause() {
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["127.0.0.1"], Validity::Expired));
    let upstream = RecordingUpstream::start_tls(&server).await;
    let h = Harness::start(upstream, &tls_yaml(&ca_file(&ca))).await;
    assert_refused_before_anything_is_sent(
        &h,
        "TLS: invalid peer certificate: certificate expired",
    )
    .await;
}

#[tokio::test]
async fn roots_none_trusts_the_ca_file_alone() {
    let ca = TestCa::new("countersign test CA");
    let h = Harness::start(
        tls_upstream(&ca).await,
        &tls_yaml(&format!("roots: none, {}", ca_file(&ca))),
    )
    .await;
    h.post_ok(&[], TOOLS_LIST).await;
    assert_eq!(h.upstream.requests().len(), 1);
}

#[tokio::test]
async fn client_certificate_is_presented_to_an_upstream_that_requires_one() {
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["127.0.0.1"], Validity::Current))
        .require_client_cert(&ca);
    let upstream = RecordingUpstream::start_tls(&server).await;
    let client = ca.client("gateway", "countersign-gateway");
    let tls = format!(
        "{}, client_cert: '{}', client_key: '{}'",
        ca_file(&ca),
        client.cert_file.display(),
        client.key_file.display()
    );
    let h = Harness::start(upstream, &tls_yaml(&tls)).await;

    let answer = h.post_ok(&[], DELETE_CALL).await;
    assert_eq!(answer["id"], 2);
    assert_eq!(h.upstream.tool_calls().len(), 1);
}

#[tokio::test]
async fn upstream_that_requires_a_client_certificate_refuses_a_gateway_without_one() {
    let ca = TestCa::new("countersign test CA");
    let server = TlsServer::new(ca.server("upstream", &["127.0.0.1"], Validity::Current))
        .require_client_cert(&ca);
    let upstream = RecordingUpstream::start_tls(&server).await;
    let h = Harness::start(upstream, &tls_yaml(&ca_file(&ca))).await;
    // TLS 1.3: the gateway's side of the handshake is done before the upstream has judged the
    // (missing) certificate, so the refusal is the upstream's alert on the first request, or
    // the connection closing under it when the alert reached the connection first; either way
    // the gateway says that it was asked for a certificate it does not have.
    assert_refused_before_anything_is_sent(
        &h,
        "TLS: the upstream asked for a client certificate and none is configured \
         (tls.client_cert, tls.client_key); ",
    )
    .await;
}

#[tokio::test]
async fn startup_probe_names_the_tls_failure_in_readyz_and_sends_nothing() {
    let trusted = TestCa::new("the CA the gateway trusts");
    let other = TestCa::new("another CA");
    let good = tls_upstream(&trusted).await;
    let bad = tls_upstream(&other).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\naudit: {{ path: 'off' }}\nupstreams:\n  - name: store\n    url: {}\n{tls}  - name: impostor\n    path: /impostor\n    url: {}\n{tls}",
        good.url(),
        bad.url(),
        tls = tls_yaml(&ca_file(&trusted)),
    );
    let h = Harness::from_yaml(good, &yaml).await;
    let admin = h.gateway.admin_addr.expect("admin listener");
    let body = within("the probes to settle", async {
        loop {
            let response = collect(
                TestClient::default()
                    .send(
                        Method::GET,
                        &format!("http://{admin}/readyz"),
                        &[],
                        Bytes::new(),
                    )
                    .await,
            )
            .await;
            let body = response.text();
            if !body.contains("not contacted yet") {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        body.contains("upstream store (streamable-http): ready\n"),
        "the handshake with the verified upstream succeeded: {body}"
    );
    assert!(
        body.contains(
            "upstream impostor (streamable-http): failing: upstream `impostor` is unreachable: \
             TLS: invalid peer certificate: UnknownIssuer"
        ),
        "{body}"
    );
    assert!(h.upstream.requests().is_empty(), "the probe sends nothing");
    assert!(bad.requests().is_empty(), "the probe sends nothing");
}

/// The configuration error for an `https://` upstream with the `tls:` settings `settings`.
fn config_error(settings: &str) -> String {
    let yaml = format!(
        "upstreams:\n  - name: hosted\n    url: https://mcp.example.com/mcp\n{}",
        tls_yaml(settings)
    );
    let error = RawConfig::from_yaml(&yaml)
        .expect("valid YAML")
        .validate()
        .expect_err("the configuration must be refused");
    format!("{error:#}")
}

#[test]
fn missing_ca_file_is_a_configuration_error_naming_key_and_path() {
    let message = config_error("ca_file: /nonexistent/ca.pem");
    assert!(
        message.contains("tls.ca_file `/nonexistent/ca.pem` cannot be read"),
        "{message}"
    );
}

#[test]
fn ca_file_without_a_certificate_is_a_configuration_error() {
    let file = TempFile::new("ca.pem", "this is not a certificate\n");
    let message = config_error(&format!("ca_file: '{}'", file.path_str()));
    assert!(
        message.contains(&format!(
            "tls.ca_file `{}` holds no PEM certificate",
            file.path_str()
        )),
        "{message}"
    );
}

#[test]
fn malformed_certificate_in_ca_file_is_a_configuration_error() {
    let file = TempFile::new(
        "ca.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let message = config_error(&format!("ca_file: '{}'", file.path_str()));
    assert!(
        message.contains(&format!("tls.ca_file `{}`", file.path_str()))
            && message.contains("not a usable CA certificate"),
        "{message}"
    );
}

#[test]
fn client_key_file_without_a_key_is_a_configuration_error() {
    let ca = TestCa::new("countersign test CA");
    let client = ca.client("gateway", "countersign-gateway");
    let message = config_error(&format!(
        "client_cert: '{}', client_key: '{}'",
        client.cert_file.display(),
        client.cert_file.display()
    ));
    assert!(
        message.contains(&format!(
            "tls.client_key `{}` holds no PEM private key",
            client.cert_file.display()
        )),
        "{message}"
    );
}

#[test]
fn client_key_of_another_certificate_is_a_configuration_error() {
    let ca = TestCa::new("countersign test CA");
    let client = ca.client("gateway", "countersign-gateway");
    let other = ca.client("other", "someone-else");
    let message = config_error(&format!(
        "client_cert: '{}', client_key: '{}'",
        client.cert_file.display(),
        other.key_file.display()
    ));
    assert!(
        message.contains("cannot be used together"),
        "a key that does not match its certificate must be refused at start-up: {message}"
    );
}

#[test]
fn roots_none_without_a_ca_file_is_a_configuration_error() {
    let message = config_error("roots: none");
    assert!(message.contains("tls.ca_file must be set"), "{message}");
}

#[test]
fn unknown_roots_value_is_a_configuration_error() {
    let message = config_error("roots: mozilla");
    assert!(
        message.contains("tls.roots must be `webpki`, `system` or `none`"),
        "{message}"
    );
}
