//! stdio upstreams through the real gateway binary: the Python SDK notes store run as a stdio
//! program (`upstream.py --stdio`) and a published stdio server from npm
//! (`@modelcontextprotocol/server-memory`), both started by the gateway itself.
//!
//! Real SDK clients must see exactly the session they see against the same server over HTTP;
//! held writes must not run until approved and then run once, judged by what the server
//! itself recorded; sessions must not share a process; and the gateway must leave no process
//! behind.

use std::time::Duration;

use countersign_e2e::session::{Session, assert_rich};
use countersign_e2e::{
    Peer, peers_dir, policy, python_stdio_upstream, run_client, start_gateway,
    start_gateway_with_config, start_python_upstream, tool_env,
};
use countersign_testkit::mcp::held_token;
use countersign_testkit::{TempFile, TestClient};
use serde_json::{Value, json};

/// The processes whose parent is `parent` and whose command line mentions `needle`.
fn children(parent: u32, needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

/// The processes [`children`] finds once there are exactly `count` (the start-up probe's own
/// process may still be on its way out).
async fn settled_children(parent: u32, needle: &str, count: usize) -> Vec<u32> {
    let settled = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let found = children(parent, needle);
            if found.len() == count {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    settled.unwrap_or_else(|_| {
        panic!(
            "expected {count} processes, found {:?}",
            children(parent, needle)
        )
    })
}

/// Whether `pid` has stopped running (gone, or a zombie waiting to be reaped).
fn is_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

async fn assert_gone(pid: u32, what: &str) {
    let gone = tokio::time::timeout(Duration::from_secs(30), async {
        while !is_gone(pid) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{what} (pid {pid}) still runs");
}

/// The same session script against the notes store over HTTP, and against it as a stdio
/// upstream of the gateway (everything allowed, so only the transport differs).
async fn direct_and_through_stdio(peer: Peer) -> (Value, Value) {
    let (_direct, direct_url) = start_python_upstream().await;
    let direct = run_client(peer, &direct_url, "session", &[]).await;
    let (_gateway, url) = start_gateway(
        &python_stdio_upstream(),
        &["--policy", &policy("allow-all.yaml"), "--audit", "off"],
        &[],
    )
    .await;
    let through = run_client(peer, &url, "session", &[]).await;
    (direct, through)
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_session_through_a_stdio_upstream_equals_the_http_one() {
    let (direct, through) = direct_and_through_stdio(Peer::PythonLegacy).await;
    assert_rich(Peer::PythonLegacy, &direct);
    assert_eq!(through["getStream"], 200);
    assert_eq!(through["sessionDelete"], 200);
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_session_through_a_stdio_upstream_equals_the_http_one() {
    let (direct, through) = direct_and_through_stdio(Peer::TypeScript).await;
    assert_rich(Peer::TypeScript, &direct);
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stateless_2026_session_through_a_stdio_upstream_equals_the_http_one() {
    let (direct, through) = direct_and_through_stdio(Peer::PythonStateless).await;
    assert_eq!(through["protocolVersion"], "2026-07-28");
    assert_eq!(direct, through);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_write_runs_on_the_stdio_upstream_only_after_approval_and_only_once() {
    // The default policy: reads pass, writes wait for a person.
    let (_gateway, url) = start_gateway(&python_stdio_upstream(), &["--audit", "off"], &[]).await;
    let mut session = Session::open(&url).await;
    session.assert_held_delete_runs_once_approved().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_client_sessions_get_two_processes_and_never_see_each_others_state() {
    let (gateway, url) = start_gateway(
        &python_stdio_upstream(),
        &["--policy", &policy("allow-all.yaml"), "--audit", "off"],
        &[],
    )
    .await;
    let mut a = Session::open(&url).await;
    let mut b = Session::open(&url).await;
    let gateway_pid = gateway.id().expect("the gateway runs");
    assert_eq!(
        children(gateway_pid, "upstream.py").len(),
        2,
        "one process per session"
    );

    a.call("add_note", json!({"name": "only-a", "text": "x"}))
        .await;
    let names = |answer: Value| answer["result"]["structuredContent"]["names"].clone();
    assert_eq!(
        names(a.call("list_notes", json!({})).await),
        json!(["only-a", "readme"])
    );
    assert_eq!(
        names(b.call("list_notes", json!({})).await),
        json!(["readme"])
    );
    assert_eq!(
        b.executed().await,
        json!([]),
        "b's process never ran a's call"
    );

    // DELETE ends a's session and its process; b's keeps running.
    let before = settled_children(gateway_pid, "upstream.py", 2).await;
    assert_eq!(a.delete().await, 200);
    let one_ended = tokio::time::timeout(Duration::from_secs(30), async {
        while !before.iter().any(|pid| is_gone(*pid)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(one_ended.is_ok(), "a's process ends with its session");
    assert_eq!(
        before.iter().filter(|pid| is_gone(**pid)).count(),
        1,
        "b's process still runs"
    );
    assert_eq!(
        names(b.call("list_notes", json!({})).await),
        json!(["readme"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_shutdown_stops_every_stdio_process() {
    // A server that ignores SIGTERM and would outlive its stdin closing (a shell that goes
    // on after the store exits): only the gateway's SIGKILL to its process group, after the
    // grace period, ends it, so the gateway must wait for that before it exits.
    let upstream = format!(
        "stdio:sh -c 'trap \"\" TERM; \"$0\" \"$1\" --stdio; exec sleep 300' '{}' '{}'",
        tool_env("COUNTERSIGN_PYTHON"),
        peers_dir().join("python/upstream.py").display()
    );
    let (mut gateway, url) = start_gateway(
        &upstream,
        &["--policy", &policy("allow-all.yaml"), "--audit", "off"],
        &[],
    )
    .await;
    let mut a = Session::open(&url).await;
    let _b = Session::open(&url).await;
    assert_eq!(
        a.executed().await,
        json!([]),
        "the store answers through the shell"
    );
    let shells = settled_children(gateway.id().expect("the gateway runs"), "upstream.py", 2).await;

    let status = gateway.terminate().await;
    assert!(status.success(), "a clean shutdown: {status}");
    for pid in shells {
        assert_gone(pid, "a stdio upstream process").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_program_that_cannot_start_is_a_clear_error_per_request() {
    let (_gateway, url) = start_gateway(
        "stdio:surely-no-such-mcp-server --port 1",
        &["--audit", "off"],
        &[],
    )
    .await;
    let initialize = countersign_testkit::mcp::initialize(0, "2025-11-25", json!({}));
    let answer = TestClient::default()
        .post_json(&url, &[], &initialize.to_string())
        .await;
    // 502, or 503 while it backs off after the start-up probe's failed start.
    assert!(
        answer.status == 502 || answer.status == 503,
        "{}",
        answer.text()
    );
    let error = answer.json();
    assert_eq!(error["id"], 0);
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "upstream `default` is unavailable: cannot start `surely-no-such-mcp-server`: no such program (on PATH, or at that path)"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_published_stdio_server_keeps_its_writes_held_until_approved() {
    let memory = TempFile::new("memory.jsonl", "");
    let server =
        peers_dir().join("node/node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    let config = format!(
        "upstreams:\n  - name: memory\n    command: {node}\n    args: [{server}]\n    env:\n      MEMORY_FILE_PATH: {file}\n",
        node = json!(tool_env("COUNTERSIGN_NODE")),
        server = json!(server.display().to_string()),
        file = json!(memory.path_str()),
    );
    let (_gateway, url, _config) =
        start_gateway_with_config(&config, "/mcp", &["--audit", "off"], &[]).await;
    let mut session = Session::open(&url).await;
    let graph = |answer: Value| answer["result"]["structuredContent"]["entities"].clone();

    let entities = json!([{"name": "countersign", "entityType": "project",
                           "observations": ["holds risky tool calls"]}]);
    let held = session
        .call("create_entities", json!({"entities": entities}))
        .await;
    let token = held_token(&held);
    assert_eq!(
        std::fs::read_to_string(memory.path()).unwrap_or_default(),
        "",
        "nothing written"
    );
    assert_eq!(
        graph(session.call("read_graph", json!({})).await),
        json!([]),
        "reads pass"
    );

    let created = session
        .call(
            "create_entities",
            json!({"entities": entities, "confirmationToken": token}),
        )
        .await;
    assert_eq!(created["result"]["isError"], Value::Null, "{created}");
    let stored = std::fs::read_to_string(memory.path()).expect("the server wrote its file");
    assert!(stored.contains("holds risky tool calls"), "{stored}");
    assert_eq!(graph(session.call("read_graph", json!({})).await), entities);
}
