//! The stdio connector with real processes (`sh`, `cat`): framing, environment, start-up
//! errors, and that stopping one takes its whole process group down — children included.

use std::time::Duration;

use bytes::Bytes;

use super::StdioConnector;
use super::env::child_environment;
use super::process::Spawn;
use crate::upstream::{Channel, Connector};

const WAIT: Duration = Duration::from_secs(20);

fn connector(program: &str, args: &[&str]) -> StdioConnector {
    StdioConnector {
        spawn: Spawn {
            upstream: "notes".into(),
            program: program.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: child_environment(std::env::vars_os(), &[], &[]),
            cwd: None,
            max_line: 1 << 16,
            grace: Duration::from_secs(5),
        },
    }
}

fn shell(script: &str) -> StdioConnector {
    connector("sh", &["-c", script])
}

async fn open(connector: &StdioConnector) -> Channel {
    tokio::time::timeout(WAIT, connector.open(&http::HeaderMap::new()))
        .await
        .expect("spawning is quick")
        .expect("the program starts")
}

async fn line(channel: &mut Channel) -> serde_json::Value {
    let line = tokio::time::timeout(WAIT, channel.from_server.recv())
        .await
        .expect("the program writes a line")
        .expect("stdout is open");
    serde_json::from_slice(&line).unwrap_or_else(|_| panic!("a JSON line: {line:?}"))
}

/// Stops the instance; how it ended.
async fn stop(channel: Channel) -> String {
    let Channel {
        ended, instance, ..
    } = channel;
    drop(instance);
    tokio::time::timeout(WAIT, ended)
        .await
        .expect("the process ends")
}

/// How the instance ended by itself, the handle kept all along.
async fn ended(channel: Channel) -> String {
    let Channel {
        ended, instance, ..
    } = channel;
    let how = tokio::time::timeout(WAIT, ended)
        .await
        .expect("the process ends");
    drop(instance);
    how
}

/// Whether `pid` no longer runs (gone, or a zombie nobody has reaped yet).
fn is_gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

async fn assert_gone(pid: u64) {
    let gone = tokio::time::timeout(WAIT, async {
        while !is_gone(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "process {pid} still runs");
}

fn pid_of(channel: &Channel) -> u64 {
    channel
        .describe
        .strip_prefix("pid ")
        .and_then(|p| p.parse().ok())
        .expect("described by its pid")
}

#[tokio::test]
async fn messages_go_out_one_per_line_and_come_back() {
    let mut channel = open(&connector("cat", &[])).await;
    channel
        .to_server
        .send(Bytes::from_static(b"{\"a\":1}"))
        .await
        .unwrap();
    // A line break inside a message would split it in two on the wire.
    channel
        .to_server
        .send(Bytes::from_static(b"{\n  \"b\": \"x\\ny\"\r\n}"))
        .await
        .unwrap();
    assert_eq!(line(&mut channel).await, serde_json::json!({"a": 1}));
    assert_eq!(line(&mut channel).await, serde_json::json!({"b": "x\ny"}));
}

#[tokio::test]
async fn stopping_an_instance_kills_its_whole_process_group() {
    let mut channel = open(&shell(r#"sleep 300 & echo "{\"child\":$!}"; wait"#)).await;
    let leader = pid_of(&channel);
    let child = line(&mut channel).await["child"].as_u64().expect("a pid");
    let how = stop(channel).await;
    assert!(how.contains("SIGTERM"), "{how}");
    assert_gone(leader).await;
    assert_gone(child).await;
}

#[tokio::test]
async fn a_process_that_exits_by_itself_takes_its_children_with_it() {
    let mut channel = open(&shell(r#"sleep 300 & echo "{\"child\":$!}"; exit 3"#)).await;
    let child = line(&mut channel).await["child"].as_u64().expect("a pid");
    // The child holds stdout open; it still ends once the leader is gone.
    let end = tokio::time::timeout(WAIT, channel.from_server.recv()).await;
    assert!(matches!(end, Ok(None)), "stdout closes");
    assert_eq!(ended(channel).await, "exit status: 3");
    assert_gone(child).await;
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
    let mut connector = shell(r#"trap "" TERM; echo "{}"; while :; do sleep 1; done"#);
    connector.spawn.grace = Duration::from_millis(200);
    let mut channel = open(&connector).await;
    let leader = pid_of(&channel);
    line(&mut channel).await;
    let how = stop(channel).await;
    assert!(how.contains("SIGKILL"), "{how}");
    assert_gone(leader).await;
}

#[tokio::test]
async fn a_missing_program_is_a_clear_error() {
    let error = connector("surely-no-such-mcp-server", &[])
        .open(&http::HeaderMap::new())
        .await
        .expect_err("it cannot start");
    assert_eq!(
        error.to_string(),
        "upstream `notes` is unavailable: cannot start `surely-no-such-mcp-server`: no such program (on PATH, or at that path)"
    );
    assert!(
        connector("surely-no-such-mcp-server", &[])
            .precheck()
            .is_err()
    );
    assert_eq!(connector("sh", &[]).precheck(), Ok(()));
}

#[tokio::test]
async fn a_missing_working_directory_is_a_clear_error() {
    let mut connector = connector("cat", &[]);
    connector.spawn.cwd = Some("/surely/not/a/directory".into());
    let error = connector
        .open(&http::HeaderMap::new())
        .await
        .expect_err("it cannot start");
    assert!(
        error
            .to_string()
            .contains("/surely/not/a/directory does not exist"),
        "{error}"
    );
    assert!(connector.precheck().is_err());
}

#[tokio::test]
async fn a_program_that_exits_at_once_says_how() {
    let channel = open(&shell("exit 2")).await;
    assert_eq!(ended(channel).await, "exit status: 2");
}

#[tokio::test]
async fn the_program_gets_its_environment_but_not_the_gateways_secrets() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut connector = shell(
        r#"printf '{"keys":"%s","token":"%s","mine":"%s"}\n' "$COUNTERSIGN_SIGNING_KEYS" "$UPSTREAM_TOKEN" "$MINE""#,
    );
    connector.spawn.env = child_environment(
        [
            ("PATH".into(), path),
            ("COUNTERSIGN_SIGNING_KEYS".into(), "k1:secret".into()),
            ("UPSTREAM_TOKEN".into(), "Bearer secret".into()),
        ],
        &["UPSTREAM_TOKEN".to_owned()],
        &[("MINE".to_owned(), "1".to_owned())],
    );
    let mut channel = open(&connector).await;
    assert_eq!(
        line(&mut channel).await,
        serde_json::json!({"keys": "", "token": "", "mine": "1"})
    );
}

#[tokio::test]
async fn a_line_over_max_response_bytes_stops_the_process_and_says_why() {
    let mut connector = shell(r#"head -c 1000 /dev/zero | tr '\0' a; echo; sleep 300"#);
    connector.spawn.max_line = 64;
    let mut channel = open(&connector).await;
    let leader = pid_of(&channel);
    let end = tokio::time::timeout(WAIT, channel.from_server.recv()).await;
    assert!(
        matches!(end, Ok(None)),
        "nothing of the over-long line is passed on"
    );
    let how = ended(channel).await;
    assert_eq!(
        how,
        "it wrote a message larger than max_response_bytes (64 bytes) and was stopped"
    );
    assert_gone(leader).await;
}

#[tokio::test]
async fn a_flood_on_stderr_never_blocks_the_program() {
    let mut channel = open(&shell(
        r#"i=0; while [ $i -lt 3000 ]; do echo "noise $i ................................" >&2; i=$((i+1)); done; echo '{"done":true}'"#,
    ))
    .await;
    assert_eq!(line(&mut channel).await, serde_json::json!({"done": true}));
}
