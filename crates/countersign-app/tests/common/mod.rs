//! Shared harness: an in-process gateway in front of a recording fake upstream.

#![allow(dead_code, unreachable_pub)]

use std::fmt::Display;
use std::net::SocketAddr;

use countersign_app::{RawConfig, RunningGateway};
use countersign_testkit::mcp::within;
use countersign_testkit::{Collected, RecordingUpstream, TestClient};
use serde_json::Value;

pub struct Harness {
    pub gateway: RunningGateway,
    pub upstream: RecordingUpstream,
}

impl Harness {
    /// Gateway on 127.0.0.1:0 with the admin listener off and the allow-all policy (these tests
    /// are about transport, not approval), in front of `upstream`, with extra YAML lines
    /// appended to the upstream entry (then top-level keys may follow).
    pub async fn start(upstream: RecordingUpstream, extra_yaml: &str) -> Self {
        let policy = format!("policy: {}\n", policy_path("allow-all.yaml").display());
        Self::start_with(upstream, &policy, extra_yaml).await
    }

    /// Gateway on 127.0.0.1:0 with the admin listener and the audit trail off, the top-level
    /// YAML lines `settings`, and `upstream` as its one upstream, `store`, with the YAML lines
    /// `upstream_extra` appended to that entry (then top-level keys may follow).
    pub async fn start_with(
        upstream: RecordingUpstream,
        settings: &str,
        upstream_extra: &str,
    ) -> Self {
        let yaml = format!(
            "listen: 127.0.0.1:0\nadmin: 'off'\naudit: {{ path: 'off' }}\n{settings}upstreams:\n  - name: store\n    url: {}\n{upstream_extra}",
            upstream.url()
        );
        Self::from_yaml(upstream, &yaml).await
    }

    pub async fn from_yaml(upstream: RecordingUpstream, yaml: &str) -> Self {
        let config = RawConfig::from_yaml(yaml)
            .expect("valid YAML")
            .validate()
            .expect("valid config");
        let gateway = RunningGateway::start(config).await.expect("gateway starts");
        Self { gateway, upstream }
    }

    pub fn addr(&self) -> SocketAddr {
        self.gateway.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.gateway.addr)
    }

    /// POSTs `body` (JSON text or a `Value`) to the gateway as an MCP client does, with
    /// `headers` besides.
    pub async fn post(
        &self,
        headers: &[(&str, &str)],
        body: &(impl Display + ?Sized),
    ) -> Collected {
        within(
            "the gateway's answer",
            TestClient::default().post_json(&self.url(), headers, &body.to_string()),
        )
        .await
    }

    /// POSTs and expects a 200 with a JSON body.
    pub async fn post_ok(&self, headers: &[(&str, &str)], body: &(impl Display + ?Sized)) -> Value {
        let response = self.post(headers, body).await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()
    }
}

/// A file of the repository's `policies/`.
pub fn policy_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies")
        .join(name)
}

pub const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
