//! stdio upstreams: MCP servers the gateway starts itself (`command:` in the configuration,
//! `--upstream 'stdio:npx -y …'`), served over Streamable HTTP by the [`Bridge`].
//!
//! [`StdioConnector`] is the [`Connector`]: each instance is one process of `program args`,
//! - with the gateway's environment minus the gateway's own secrets — every `COUNTERSIGN_*`
//!   variable and the variables named by any upstream's `auth.replace.env` — and the
//!   upstream's `env:` on top ([`env`]), in `cwd` (default: the gateway's);
//! - in a process group of its own;
//! - speaking newline-delimited JSON-RPC on stdin and stdout, each line at most the
//!   upstream's `max_response_bytes` (a process that writes a longer one is stopped, and its
//!   pending requests get an error saying so);
//! - its stderr logged line by line at `info`, with the upstream's name and the pid, each
//!   line cut at [`process::MAX_STDERR_LINE`] bytes;
//! - stopped — when its session ends or idles out, and on shutdown — by SIGTERM to its whole
//!   group, then SIGKILL after [`STOP_GRACE`]; a process that ends by itself has the rest of
//!   its group stopped the same way.

mod env;
mod lines;
mod process;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::bridge::{Bridge, BridgeSettings};
use super::{Channel, Connector};
use crate::clock::Clock;
use crate::config::{StdioCommand, Upstream};
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;

/// Between SIGTERM and SIGKILL when a process group is stopped.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Starts processes of one stdio upstream.
#[derive(Debug)]
pub struct StdioConnector {
    spawn: process::Spawn,
}

impl StdioConnector {
    pub fn new(upstream: &Upstream, command: &StdioCommand) -> Self {
        Self {
            spawn: process::Spawn {
                upstream: upstream.name.clone(),
                program: command.program.clone(),
                args: command.args.clone(),
                env: env::child_environment(
                    std::env::vars_os(),
                    &command.withheld_env,
                    &command.env,
                ),
                cwd: command.cwd.clone(),
                max_line: upstream.max_response_bytes.get(),
                grace: STOP_GRACE,
            },
        }
    }

    /// Why the program cannot be started, if that can be told without starting it: it is not
    /// on the `PATH` it will be started with, or its working directory is missing.
    pub fn precheck(&self) -> Result<(), String> {
        let spawn = &self.spawn;
        if let Some(cwd) = &spawn.cwd
            && !cwd.is_dir()
        {
            return Err(format!(
                "its working directory {} does not exist",
                cwd.display()
            ));
        }
        if spawn.program.contains('/') {
            return Ok(());
        }
        let path = spawn
            .env
            .iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        let found =
            std::env::split_paths(&path).any(|dir| is_executable(&dir.join(&spawn.program)));
        if found {
            Ok(())
        } else {
            Err(format!(
                "cannot start `{}`: no such program on PATH",
                spawn.program
            ))
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Connector for StdioConnector {
    fn open(&self, _request: &http::HeaderMap) -> BoxFuture<'static, Result<Channel, ProxyError>> {
        let spawn = self.spawn.clone();
        Box::pin(async move {
            let started =
                process::spawn(&spawn).map_err(|reason| ProxyError::UpstreamUnavailable {
                    upstream: spawn.upstream.clone(),
                    reason,
                    retry_after: None,
                })?;
            let ended = started.ended;
            Ok(Channel {
                to_server: started.to_server,
                from_server: started.from_server,
                instance: Box::new(started.stop),
                describe: format!("pid {}", started.pid),
                ended: Box::pin(async move {
                    ended
                        .await
                        .unwrap_or_else(|_| "its supervisor stopped".to_owned())
                }),
            })
        })
    }
}

/// The [`Bridge`] serving a stdio upstream; a program that cannot be found is logged now and
/// reported by `/readyz` until it starts.
pub fn stdio_upstream(
    upstream: &Upstream,
    command: &StdioCommand,
    label: &'static str,
    metrics: ProxyMetrics,
    clock: Arc<dyn Clock>,
) -> Bridge {
    let connector = StdioConnector::new(upstream, command);
    let precheck = connector.precheck();
    let bridge = Bridge::new(
        Arc::new(connector),
        BridgeSettings {
            upstream: upstream.name.clone(),
            label,
            sharing: command.sharing,
            max_instances: command.max_processes.get(),
            idle_timeout: command.idle_timeout,
            max_message_bytes: upstream.max_response_bytes.get(),
            start_timeout: upstream.connect_timeout,
            serves_stateless: true,
            clock,
            metrics,
        },
    );
    if let Err(reason) = precheck {
        tracing::error!(upstream = %upstream.name, %reason, "stdio upstream cannot be started");
        bridge.record_precheck_failure(reason);
    }
    bridge
}
