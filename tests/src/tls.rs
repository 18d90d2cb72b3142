//! HTTPS upstreams for the end-to-end tests: the Python SDK upstream behind uvicorn's TLS with a
//! certificate of a test CA, and the real gateway started from a configuration file, which is
//! where `tls:` settings live.

use std::path::Path;

use countersign_testkit::TempFile;
use countersign_testkit::free_port;
use countersign_testkit::tls::Identity;
use tokio::process::Command;

use crate::{Process, countersign_binary, peers_dir, tool_env};

/// The Python SDK upstream (`upstream.py`) serving HTTPS with `identity` on a free port,
/// requiring a client certificate of the CA in `client_ca` when given. Its URL names
/// `localhost`, so the gateway sends SNI and checks a DNS name.
pub async fn start_python_tls_upstream(
    identity: &Identity,
    client_ca: Option<&Path>,
) -> (Process, String) {
    let port = free_port();
    let mut command = Command::new(tool_env("COUNTERSIGN_PYTHON"));
    command
        .arg(peers_dir().join("python/upstream.py"))
        .args(["--port", &port.to_string()])
        .arg("--tls-cert")
        .arg(&identity.cert_file)
        .arg("--tls-key")
        .arg(&identity.key_file);
    if let Some(ca) = client_ca {
        command.arg("--tls-client-ca").arg(ca);
    }
    let process = Process::start_until_ready("python TLS upstream", command).await;
    (process, format!("https://localhost:{port}/mcp"))
}

/// The real gateway, started with `serve --config` on a file holding `upstream_entry` (the YAML
/// of one `upstreams:` item, without its leading `- `, indented by four spaces), a policy,
/// admin and audit off, and the environment variables `envs`. Its logs go to a file,
/// read with [`ConfiguredGateway::log`].
#[derive(Debug)]
pub struct ConfiguredGateway {
    _process: Process,
    config: TempFile,
    /// The gateway's MCP endpoint.
    pub url: String,
}

impl ConfiguredGateway {
    /// `policy` `None` is the built-in default policy (reads pass, the rest is held).
    pub async fn start(upstream_entry: &str, policy: Option<&str>, envs: &[(&str, &str)]) -> Self {
        let port = free_port();
        let policy = policy
            .map(|path| format!("policy: '{path}'\n"))
            .unwrap_or_default();
        let yaml = format!(
            "listen: 127.0.0.1:{port}\nadmin: 'off'\naudit: {{ path: 'off' }}\n{policy}upstreams:\n  - {}\n",
            upstream_entry.trim_start()
        );
        let config = TempFile::new("countersign.yaml", &yaml);
        let mut command = Command::new(countersign_binary());
        command
            .args(["serve", "--config", config.path_str()])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(envs.iter().copied());
        let log = std::fs::File::create(log_path(&config)).expect("create the gateway's log");
        let process =
            Process::start_until_listening_with_stderr("countersign", command, port, log.into())
                .await;
        Self {
            _process: process,
            config,
            url: format!("http://localhost:{port}/mcp"),
        }
    }

    /// What the gateway logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(log_path(&self.config)).unwrap_or_default()
    }
}

fn log_path(config: &TempFile) -> std::path::PathBuf {
    config.path().with_file_name("countersign.log")
}

/// The `upstreams:` entry for `url` trusting the CA certificate `ca_file`, with `extra` YAML
/// inside `tls:` (such as `client_cert: …, client_key: …`).
pub fn https_entry(url: &str, ca_file: &Path, extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    format!(
        "name: hosted\n    url: {url}\n    tls: {{ ca_file: '{}'{extra} }}",
        ca_file.display()
    )
}
