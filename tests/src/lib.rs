//! End-to-end harness: the real `countersign` binary, real MCP SDK peers and the official
//! conformance suite, each started on free loopback ports and stopped on drop.
//!
//! The peers are installed by `scripts/install-test-tools.sh` (run by `scripts/test.sh`), which
//! exports where they are through `.tools/env.sh`. A missing tool is a failure with a clear
//! message, never a silent skip.

#![forbid(unsafe_code)]

pub mod memory;
pub mod oidc;
pub mod session;
pub mod slow_link;
pub mod tls;
pub mod webdriver;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use countersign_testkit::free_port;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// How long a peer may take to print `READY` (Python start-up on a loaded 2-core CI box).
const READY_WAIT: Duration = Duration::from_secs(60);
/// How long one client script may run.
const CLIENT_DEADLINE: Duration = Duration::from_secs(180);

/// The repository root.
/// A catalog of one tool per risk class — `lookup` (read), `update` (write), `purge`
/// (destructive) — for tests that need each kind of call to reach a scripted upstream.
pub fn lookup_update_purge_catalog() -> Vec<Value> {
    vec![
        serde_json::json!({"name": "lookup", "inputSchema": {"type": "object"},
               "annotations": {"readOnlyHint": true}}),
        serde_json::json!({"name": "update", "inputSchema": {"type": "object"},
               "annotations": {"readOnlyHint": false, "destructiveHint": false}}),
        serde_json::json!({"name": "purge", "inputSchema": {"type": "object"},
               "annotations": {"destructiveHint": true}}),
    ]
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// An environment variable the test tools installer sets; panics with how to get it.
pub fn tool_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run the tests with `scripts/test.sh` (it installs the MCP peers \
             and exports their paths), or `source .tools/env.sh` after running \
             scripts/install-test-tools.sh"
        )
    })
}

/// The `countersign` binary of this build. `scripts/test.sh` builds it before the tests run.
pub fn countersign_binary() -> PathBuf {
    if let Ok(path) = std::env::var("COUNTERSIGN_BIN") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/<test> -> target/<profile>/countersign
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let binary = profile_dir.join("countersign");
    assert!(
        binary.exists(),
        "{} does not exist: build it first with `cargo build --bin countersign` (scripts/test.sh does)",
        binary.display()
    );
    binary
}

/// A child process killed when dropped.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    child: Child,
}

impl Process {
    /// Starts `command` and waits until it prints a line equal to `READY` on stdout.
    pub async fn start_until_ready(name: &str, mut command: Command) -> Self {
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        wait_for_line(name, stdout, "READY").await;
        Self {
            name: name.to_owned(),
            child,
        }
    }

    /// Starts `command` and waits until `port` accepts connections.
    pub async fn start_until_listening(name: &str, command: Command, port: u16) -> Self {
        // stdout carries audit lines and the demo walkthrough; stderr (logs) stays visible.
        Self::start_until_listening_with_stderr(name, command, port, Stdio::inherit()).await
    }

    /// [`Self::start_until_listening`] with the process's stderr (its logs) sent to `stderr`.
    pub async fn start_until_listening_with_stderr(
        name: &str,
        mut command: Command,
        port: u16,
        stderr: Stdio,
    ) -> Self {
        command
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let deadline = tokio::time::Instant::now() + READY_WAIT;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Self {
                    name: name.to_owned(),
                    child,
                };
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{name} exited with {status} before listening on port {port}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} did not listen on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process has not exited (crashed, been killed or aborted) yet.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM (a graceful shutdown) and waits until the process has exited.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("the process is running").to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("running kill");
        assert!(sent.success(), "kill -TERM {pid}");
        tokio::time::timeout(READY_WAIT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit after SIGTERM", self.name))
            .expect("waiting for the process")
    }
}

async fn wait_for_line(name: &str, stdout: impl AsyncRead + Unpin + Send + 'static, wanted: &str) {
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(READY_WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim() == wanted {
                return true;
            }
        }
        false
    })
    .await;
    assert!(matches!(found, Ok(true)), "{name} never printed {wanted}");
    // Keep draining so the peer never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
}

/// The real gateway binary in front of `upstream_url`, on a free port, admin off, with
/// `extra_args` and the environment variables `envs` (`RUST_LOG` defaults to the tests' own, or
/// `warn`).
pub async fn start_gateway(
    upstream_url: &str,
    extra_args: &[&str],
    envs: &[(&str, &str)],
) -> (Process, String) {
    start_gateway_under(&[], upstream_url, extra_args, envs).await
}

/// [`start_gateway`], run by the `launcher` command line with the gateway's own command line
/// appended to it (such as `prlimit --as=268435456 --`, which execs the gateway under a limit
/// with the same process id); no launcher for an empty one.
pub async fn start_gateway_under(
    launcher: &[&str],
    upstream_url: &str,
    extra_args: &[&str],
    envs: &[(&str, &str)],
) -> (Process, String) {
    let port = free_port();
    let mut command = match launcher.split_first() {
        Some((program, launcher_args)) => {
            let mut command = Command::new(program);
            command.args(launcher_args).arg(countersign_binary());
            command
        }
        None => Command::new(countersign_binary()),
    };
    command
        .args([
            "serve",
            "--upstream",
            upstream_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            "off",
        ])
        .args(extra_args)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .envs(envs.iter().copied());
    let process = Process::start_until_listening("countersign", command, port).await;
    (process, format!("http://localhost:{port}/mcp"))
}

/// The real gateway binary serving the `upstreams:` of `config_yaml` (a config file it reads),
/// on a free port, admin off, with `extra_args` and `envs`; the MCP endpoint is at `path`. The
/// file lives as long as the returned [`TempFile`](countersign_testkit::TempFile).
pub async fn start_gateway_with_config(
    config_yaml: &str,
    path: &str,
    extra_args: &[&str],
    envs: &[(&str, &str)],
) -> (Process, String, countersign_testkit::TempFile) {
    start_gateway_with_config_on(free_port(), config_yaml, path, extra_args, envs).await
}

/// [`start_gateway_with_config`] on `port`, for tests whose other parts must know the
/// gateway's URL before it starts (an authorization server issuing tokens for it, say).
pub async fn start_gateway_with_config_on(
    port: u16,
    config_yaml: &str,
    path: &str,
    extra_args: &[&str],
    envs: &[(&str, &str)],
) -> (Process, String, countersign_testkit::TempFile) {
    let config = countersign_testkit::TempFile::new("countersign.yaml", config_yaml);
    let mut command = Command::new(countersign_binary());
    command
        .args([
            "serve",
            "--config",
            config.path_str(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            "off",
        ])
        .args(extra_args)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .envs(envs.iter().copied());
    let process = Process::start_until_listening("countersign", command, port).await;
    (process, format!("http://localhost:{port}{path}"), config)
}

/// A fresh notes store speaking only the legacy 2024-11-05 HTTP+SSE transport; the URL is its SSE
/// endpoint (`http://127.0.0.1:PORT/sse`).
pub async fn start_python_sse_upstream() -> (Process, String) {
    let port = free_port();
    let mut command = Command::new(tool_env("COUNTERSIGN_PYTHON"));
    command.arg(peers_dir().join("python/upstream.py")).args([
        "--port",
        &port.to_string(),
        "--transport",
        "sse",
    ]);
    let process = Process::start_until_ready("python SSE upstream", command).await;
    (process, format!("http://127.0.0.1:{port}/sse"))
}

/// `--upstream` for the Python SDK notes store (`tests/peers/python/upstream.py`) as a stdio
/// program the gateway starts: one process per client session by default.
pub fn python_stdio_upstream() -> String {
    format!(
        "stdio:'{}' '{}' --stdio",
        tool_env("COUNTERSIGN_PYTHON"),
        peers_dir().join("python/upstream.py").display()
    )
}

/// A fresh Python SDK upstream and a gateway in front of it (`--audit off`, plus
/// `gateway_args`); both stop when this is dropped.
#[derive(Debug)]
pub struct Deployment {
    _upstream: Process,
    _gateway: Process,
    /// The gateway's MCP endpoint.
    pub url: String,
}

pub async fn deploy(gateway_args: &[&str]) -> Deployment {
    let (upstream, upstream_url) = start_python_upstream().await;
    let mut args = vec!["--audit", "off"];
    args.extend_from_slice(gateway_args);
    let (gateway, url) = start_gateway(&upstream_url, &args, &[]).await;
    Deployment {
        _upstream: upstream,
        _gateway: gateway,
        url,
    }
}

/// A real MCP SDK client (`tests/peers/*/client.*`), which runs a script and prints its
/// transcript as JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The Python SDK on a 2025-11-25 session.
    PythonLegacy,
    /// The Python SDK speaking stateless 2026-07-28.
    PythonStateless,
    /// The Python SDK's 2024-11-05 HTTP+SSE client (`mcp.client.sse.sse_client`). Given the
    /// gateway's MCP endpoint it connects to the legacy SSE endpoint beside it
    /// ([`legacy_sse_url`]), as a legacy client's swapped URL does.
    PythonSse,
    TypeScript,
    /// The TypeScript SDK's 2024-11-05 HTTP+SSE client (`SSEClientTransport`), connecting as
    /// [`Peer::PythonSse`] does.
    TypeScriptSse,
}

impl Peer {
    /// The command running `script` against `url`, with the script's `options`.
    pub fn command(self, url: &str, script: &str, options: &[&str]) -> Command {
        let mut command = match self {
            Peer::PythonLegacy | Peer::PythonStateless | Peer::PythonSse => {
                let mode = if self == Peer::PythonStateless {
                    "2026-07-28"
                } else {
                    "legacy"
                };
                let mut command = Command::new(tool_env("COUNTERSIGN_PYTHON"));
                command
                    .arg(peers_dir().join("python/client.py"))
                    .args(["--mode", mode]);
                if self == Peer::PythonSse {
                    command.args(["--transport", "sse"]);
                }
                command
            }
            Peer::TypeScript | Peer::TypeScriptSse => {
                let mut command = Command::new(tool_env("COUNTERSIGN_NODE"));
                command.arg(peers_dir().join("node/client.mjs")).env(
                    "COUNTERSIGN_NODE_MODULES",
                    tool_env("COUNTERSIGN_NODE_MODULES"),
                );
                if self == Peer::TypeScriptSse {
                    command.args(["--transport", "sse"]);
                }
                command
            }
        };
        let url = match self {
            Peer::PythonSse | Peer::TypeScriptSse if url.ends_with("/mcp") => legacy_sse_url(url),
            _ => url.to_owned(),
        };
        command
            .args(["--url", &url, "--script", script])
            .args(options);
        command
    }
}

/// The legacy HTTP+SSE endpoint the gateway serves beside its MCP endpoint `url` (`…/mcp` →
/// `…/sse`): what a legacy client's configuration points at after the one-line URL swap.
pub fn legacy_sse_url(url: &str) -> String {
    let base = url
        .strip_suffix("/mcp")
        .expect("the gateway's endpoint ends in /mcp");
    format!("{base}/sse")
}

/// Runs one client script against `url` to its end and returns its transcript.
pub async fn run_client(peer: Peer, url: &str, script: &str, options: &[&str]) -> Value {
    let (success, stdout, stderr) = run_to_completion(
        &format!("{peer:?} client"),
        peer.command(url, script, options),
        CLIENT_DEADLINE,
    )
    .await;
    assert!(
        success,
        "{peer:?} {script} {options:?} failed against {url}:\n{stderr}"
    );
    let transcript: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{peer:?} transcript is not JSON ({e}):\n{stdout}"));
    assert_eq!(transcript["script"], script, "{peer:?}: {transcript}");
    transcript
}

/// The step of a client transcript whose `key` is `name`: `"call"` finds a step by the tool it
/// called, `"step"` by the name a script gave it.
pub fn step<'a>(peer: Peer, transcript: &'a Value, key: &str, name: &str) -> &'a Value {
    transcript["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s[key] == name))
        .unwrap_or_else(|| panic!("{peer:?}: transcript has no {name} step: {transcript}"))
}

/// The upstream's real (structured) result of a transcript step whose call must have run.
pub fn ran(peer: Peer, step: &Value) -> &Value {
    assert_eq!(
        step["result"]["isError"], false,
        "{peer:?}: {} must have run: {step}",
        step["call"]
    );
    &step["result"]["structuredContent"]
}

/// A file of the repository's `policies/`.
pub fn policy(name: &str) -> String {
    repo_root()
        .join("policies")
        .join(name)
        .display()
        .to_string()
}

/// The TypeScript conformance upstream on a free port.
pub async fn start_conformance_upstream() -> (Process, String) {
    let port = free_port();
    let mut command = Command::new(tool_env("COUNTERSIGN_NODE"));
    command
        .arg(peers_dir().join("node/conformance-upstream.mjs"))
        .args(["--port", &port.to_string()])
        .env(
            "COUNTERSIGN_NODE_MODULES",
            tool_env("COUNTERSIGN_NODE_MODULES"),
        );
    let process = Process::start_until_ready("conformance upstream", command).await;
    (process, format!("http://127.0.0.1:{port}/mcp"))
}

/// The Python SDK upstream (`tests/peers/python/upstream.py`) on a free port.
pub async fn start_python_upstream() -> (Process, String) {
    let port = free_port();
    let mut command = Command::new(tool_env("COUNTERSIGN_PYTHON"));
    command
        .arg(peers_dir().join("python/upstream.py"))
        .args(["--port", &port.to_string()]);
    let process = Process::start_until_ready("python upstream", command).await;
    (process, format!("http://127.0.0.1:{port}/mcp"))
}

pub fn peers_dir() -> PathBuf {
    std::env::var("COUNTERSIGN_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("tests/peers"))
}

/// Runs a command to completion with a deadline; returns (exit success, stdout, stderr).
pub async fn run_to_completion(
    name: &str,
    mut command: Command,
    deadline: Duration,
) -> (bool, String, String) {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(deadline, command.output())
        .await
        .unwrap_or_else(|_| panic!("{name} did not finish within {deadline:?}"))
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A `redis-server` of the tests' own on a free port, without persistence, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    pub port: u16,
    process: Option<Process>,
}

impl RedisServer {
    pub async fn start() -> Self {
        let port = free_port();
        let mut server = Self {
            port,
            process: None,
        };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server; clients see connection errors until [`Self::restart`].
    pub async fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.child.kill().await;
        }
    }

    /// Starts (again) on the same port, empty.
    pub async fn restart(&mut self) {
        self.stop().await;
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut command = Command::new(binary);
        command.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "noeviction",
        ]);
        self.process =
            Some(Process::start_until_listening("redis-server", command, self.port).await);
    }
}
