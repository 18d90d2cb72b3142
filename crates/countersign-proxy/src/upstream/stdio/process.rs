//! One stdio server process: spawned in a process group of its own, fed newline-delimited JSON
//! on stdin, read line by line on stdout, its stderr logged, and — once it is told to stop, or
//! ends by itself — its whole process group killed: SIGTERM, then SIGKILL after the grace
//! period, so that no child it started outlives it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use bytes::Bytes;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot};

use super::lines::{Line, LineReader};

/// Messages queued towards a process's stdin.
const STDIN_QUEUE: usize = 64;
/// Messages read from stdout and not yet routed; past it, the process waits on its pipe.
const STDOUT_QUEUE: usize = 64;
/// Longest stderr line logged; the rest of a longer one is cut.
pub(super) const MAX_STDERR_LINE: usize = 4096;

/// What to start, and how.
#[derive(Debug, Clone)]
pub(super) struct Spawn {
    pub(super) upstream: String,
    pub(super) program: String,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) cwd: Option<PathBuf>,
    /// Longest stdout line (one message): the upstream's `max_response_bytes`.
    pub(super) max_line: usize,
    /// Between SIGTERM and SIGKILL.
    pub(super) grace: Duration,
}

/// A started process's ends, for a [`Channel`](crate::upstream::Channel).
pub(super) struct Started {
    pub(super) pid: u32,
    pub(super) to_server: mpsc::Sender<Bytes>,
    pub(super) from_server: mpsc::Receiver<Bytes>,
    /// Dropping it stops the process group.
    pub(super) stop: StopHandle,
    /// How the process ended, once it has and its group is gone.
    pub(super) ended: oneshot::Receiver<String>,
}

/// Stops the process group when dropped.
pub(super) struct StopHandle {
    tx: mpsc::Sender<String>,
}

impl Drop for StopHandle {
    fn drop(&mut self) {
        let _ = self.tx.try_send(String::new());
    }
}

/// Spawns the program; the error says why it could not start, in words a user acts on.
pub(super) fn spawn(spec: &Spawn) -> Result<Started, String> {
    if let Some(cwd) = &spec.cwd
        && !cwd.is_dir()
    {
        return Err(format!(
            "its working directory {} does not exist",
            cwd.display()
        ));
    }
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so stopping it reaches every process it starts (npx → node), and a
        // Ctrl-C meant for the gateway is not also delivered to it first.
        .process_group(0)
        .kill_on_drop(false);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    let mut child = command
        .spawn()
        .map_err(|e| start_error(&spec.program, &e))?;
    let pid = child
        .id()
        .ok_or_else(|| format!("`{}` exited before it could be watched", spec.program))?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");

    let (to_server, to_stdin) = mpsc::channel(STDIN_QUEUE);
    let (from_stdout, from_server) = mpsc::channel(STDOUT_QUEUE);
    let (stop_tx, stop_rx) = mpsc::channel(2);
    let (stdout_done_tx, stdout_done) = oneshot::channel();
    let (ended_tx, ended) = oneshot::channel();

    tokio::spawn(write_stdin(stdin, to_stdin));
    tokio::spawn(read_stdout(
        stdout,
        from_stdout,
        spec.max_line,
        stop_tx.clone(),
        stdout_done_tx,
        spec.upstream.clone(),
        pid,
    ));
    tokio::spawn(log_stderr(stderr, spec.upstream.clone(), pid));
    tokio::spawn(supervise(
        child,
        pid,
        stop_rx,
        stdout_done,
        spec.grace,
        ended_tx,
    ));
    Ok(Started {
        pid,
        to_server,
        from_server,
        stop: StopHandle { tx: stop_tx },
        ended,
    })
}

fn start_error(program: &str, error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => {
            format!("cannot start `{program}`: no such program (on PATH, or at that path)")
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot start `{program}`: permission denied (is it executable?)")
        }
        _ => format!("cannot start `{program}`: {error}"),
    }
}

async fn write_stdin(mut stdin: ChildStdin, mut messages: mpsc::Receiver<Bytes>) {
    while let Some(message) = messages.recv().await {
        // One message per line: a line break inside would split it. Strictly valid JSON has
        // CR and LF only as whitespace between tokens, so a space is the same message.
        let line: Vec<u8> = message
            .iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
            .chain(std::iter::once(b'\n'))
            .collect();
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    // Every sender is gone: closing stdin is the first thing a stdio server hears of it.
}

#[allow(clippy::too_many_arguments)]
async fn read_stdout(
    stdout: impl AsyncRead + Unpin,
    messages: mpsc::Sender<Bytes>,
    max_line: usize,
    stop: mpsc::Sender<String>,
    done: oneshot::Sender<()>,
    upstream: String,
    pid: u32,
) {
    let mut lines = LineReader::new(stdout, max_line);
    loop {
        match lines.next().await {
            Ok(Some(Line::Complete(line))) => {
                if messages.send(line).await.is_err() {
                    break;
                }
            }
            Ok(Some(Line::TooLong(_))) => {
                tracing::error!(
                    upstream = %upstream,
                    pid,
                    max_response_bytes = max_line,
                    "upstream wrote a message larger than max_response_bytes; stopping it"
                );
                let _ = stop
                    .send(format!(
                        "it wrote a message larger than max_response_bytes ({max_line} bytes) and was stopped"
                    ))
                    .await;
                break;
            }
            Ok(None) | Err(_) => break,
        }
    }
    // Dropping `messages` tells the bridge the instance is gone.
    drop(messages);
    let _ = done.send(());
}

async fn log_stderr(stderr: impl AsyncRead + Unpin, upstream: String, pid: u32) {
    let mut lines = LineReader::new(stderr, MAX_STDERR_LINE);
    while let Ok(Some(line)) = lines.next().await {
        match line {
            Line::Complete(text) => {
                tracing::info!(upstream = %upstream, pid, "stderr: {}", String::from_utf8_lossy(&text));
            }
            Line::TooLong(start) => {
                tracing::info!(
                    upstream = %upstream,
                    pid,
                    "stderr: {}… (cut at {MAX_STDERR_LINE} bytes)",
                    String::from_utf8_lossy(&start)
                );
            }
        }
    }
}

/// Waits for the process to end, or for a reason to stop it; then takes its whole group down
/// and reports how it ended.
async fn supervise(
    mut child: Child,
    pid: u32,
    mut stop: mpsc::Receiver<String>,
    stdout_done: oneshot::Receiver<()>,
    grace: Duration,
    ended: oneshot::Sender<String>,
) {
    let group = i32::try_from(pid).ok().and_then(Pid::from_raw);
    let mut reason = None;
    let status = tokio::select! {
        // An exit that is already there is how it ended, even if a stop arrived meanwhile.
        biased;
        status = child.wait() => status,
        why = stop.recv() => {
            reason = why.filter(|w| !w.is_empty());
            signal(group, Signal::TERM);
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal(group, Signal::KILL);
                    child.wait().await
                }
            }
        }
    };
    // The leader is gone; anything left in its group (the children it started) follows.
    signal(group, Signal::TERM);
    if tokio::time::timeout(grace, stdout_done).await.is_err() {
        tracing::warn!(
            pid,
            "processes of a stopped upstream still hold its stdout; killing them"
        );
    }
    signal(group, Signal::KILL);
    let how = match (reason, status) {
        (Some(reason), _) => reason,
        (None, Ok(status)) => describe(status),
        (None, Err(error)) => format!("its status could not be read: {error}"),
    };
    let _ = ended.send(how);
}

fn signal(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        // ESRCH (nobody left in the group) is the expected end, not a failure.
        let _ = kill_process_group(group, signal);
    }
}

/// `exit status: 1`, `signal: 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    status.to_string()
}
