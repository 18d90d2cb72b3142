//! Shared harness: an in-process gateway in front of a recording fake upstream.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;

use countersign_app::{RawConfig, RunningGateway};
use countersign_testkit::RecordingUpstream;

pub struct Harness {
    pub gateway: RunningGateway,
    pub upstream: RecordingUpstream,
}

impl Harness {
    /// Gateway on 127.0.0.1:0 with the admin listener off and the allow-all policy (these tests
    /// are about transport, not approval), in front of `upstream`, with extra YAML lines
    /// appended to the upstream entry (then top-level keys may follow).
    pub async fn start(upstream: RecordingUpstream, extra_yaml: &str) -> Self {
        let yaml = format!(
            "listen: 127.0.0.1:0\nadmin: 'off'\naudit: {{ path: 'off' }}\npolicy: {}\nupstreams:\n  - name: store\n    url: {}\n{extra_yaml}",
            policy_path("allow-all.yaml").display(),
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
}

/// A file of the repository's `policies/`.
pub fn policy_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies")
        .join(name)
}

/// A raw POST with the given body and extra header lines, `Connection: close`.
pub fn raw_post(addr: SocketAddr, body: &[u8], extra_headers: &str) -> Vec<u8> {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

pub const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;

/// Writes `contents` to a file of this test process's own temp folder and returns its path.
pub fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("countersign-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the temp folder");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write the temp file");
    path
}
