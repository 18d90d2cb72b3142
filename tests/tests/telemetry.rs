//! Traces and metrics of the real binary: its spans as a real OTLP receiver decoded them (the
//! official OpenTelemetry protobuf definitions, `tests/peers/python/otlp_receiver.py`), the
//! traceparent the upstream received, the audit line's trace id, and the exact metric names a
//! Prometheus scrape and the Grafana dashboard rely on.

use countersign_e2e::{Process, countersign_binary, peers_dir, tool_env};
use countersign_testkit::mcp::{ScriptedServer, tool_call};
use countersign_testkit::{TempFile, TestClient, free_port};
use serde_json::{Value, json};
use tokio::process::Command;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

const POLICY: &str = "version: 1\n\
defaults:\n  read: allow\n  write: confirm\n  destructive: deny\n  unknown: confirm\n\
rules:\n  - id: no-purge\n    tools: [purge]\n    action: deny\n";

async fn start_receiver() -> (Process, u16) {
    let port = free_port();
    let mut command = Command::new(tool_env("COUNTERSIGN_PYTHON"));
    command
        .arg(peers_dir().join("python/otlp_receiver.py"))
        .args(["--port", &port.to_string()]);
    (
        Process::start_until_ready("otlp receiver", command).await,
        port,
    )
}

/// The gateway binary with an admin listener, audit to `audit`, and `envs`.
async fn start_gateway(
    upstream: &str,
    policy: &TempFile,
    audit: &str,
    envs: &[(&str, String)],
) -> (Process, String, String) {
    let port = free_port();
    let admin = free_port();
    let mut command = Command::new(countersign_binary());
    command
        .args([
            "serve",
            "--upstream",
            upstream,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            &format!("127.0.0.1:{admin}"),
            "--policy",
            policy.path_str(),
            "--audit",
            audit,
        ])
        .env("RUST_LOG", "warn")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())));
    let process = Process::start_until_listening("countersign", command, port).await;
    (
        process,
        format!("http://127.0.0.1:{port}/mcp"),
        format!("http://127.0.0.1:{admin}/metrics"),
    )
}

async fn get(url: &str) -> String {
    TestClient::default()
        .send(http::Method::GET, url, &[], bytes::Bytes::new())
        .await
        .pipe_text()
        .await
}

trait PipeText {
    async fn pipe_text(self) -> String;
}

impl PipeText for http::Response<hyper::body::Incoming> {
    async fn pipe_text(self) -> String {
        countersign_testkit::collect(self).await.text()
    }
}

fn audit_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

#[tokio::test]
async fn a_tool_call_is_one_server_span_continuing_the_clients_trace() {
    let (_receiver, receiver_port) = start_receiver().await;
    let upstream = ScriptedServer::new(countersign_e2e::lookup_update_purge_catalog())
        .start()
        .await;
    let policy = TempFile::new("policy.yaml", POLICY);
    let audit = TempFile::new("audit.jsonl", "");
    let (mut gateway, url, _) = start_gateway(
        &upstream.url(),
        &policy,
        audit.path_str(),
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{receiver_port}"),
            ),
            ("OTEL_SERVICE_NAME", "countersign-test".to_owned()),
        ],
    )
    .await;

    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let call = tool_call(7, "lookup", json!({"q": "ada"})).to_string();
    let answer = TestClient::default()
        .post_json(&url, &[("traceparent", &traceparent)], &call)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let denied = tool_call(8, "purge", json!({})).to_string();
    let refused = TestClient::default()
        .post_json(&url, &[("traceparent", &traceparent)], &denied)
        .await;
    assert_eq!(refused.status, 200, "{}", refused.text());
    let write = tool_call(9, "update", json!({"id": 1})).to_string();
    let held = TestClient::default()
        .post_json(&url, &[("traceparent", &traceparent)], &write)
        .await;
    assert_eq!(held.status, 200, "{}", held.text());

    // SIGTERM: the spans still in the exporter's batch are sent before the process exits.
    let status = gateway.terminate().await;
    assert!(status.success(), "{status}");

    let spans: Vec<Value> =
        serde_json::from_str(&get(&format!("http://127.0.0.1:{receiver_port}/spans")).await)
            .expect("receiver answers JSON");
    let called = spans
        .iter()
        .find(|s| s["name"] == "tools/call lookup")
        .unwrap_or_else(|| panic!("no tools/call span in {spans:#?}"));
    println!("span as the receiver recorded it: {called:#}");
    assert_eq!(called["service"], "countersign-test");
    assert_eq!(called["kind"], "SPAN_KIND_SERVER");
    assert_eq!(called["trace_id"], CLIENT_TRACE);
    assert_eq!(called["parent_span_id"], CLIENT_SPAN);
    let attributes = &called["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["gen_ai.tool.name"], "lookup");
    assert_eq!(attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(attributes["jsonrpc.request.id"], "7");
    assert_eq!(attributes["network.transport"], "tcp");
    assert!(
        attributes["countersign.upstream"].is_string(),
        "{attributes}"
    );
    assert_eq!(attributes["countersign.risk"], "read");
    assert_eq!(attributes["countersign.action"], "allow");
    assert_eq!(attributes["countersign.outcome"], "forwarded");
    let span_id = called["span_id"].as_str().expect("span id");

    // The upstream saw the gateway's span as the parent, in the client's trace.
    let forwarded: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| r.json()["method"] == "tools/call")
        .collect();
    assert_eq!(forwarded.len(), 1, "only the allowed call went upstream");
    assert_eq!(
        forwarded[0].header("traceparent"),
        Some(format!("00-{CLIENT_TRACE}-{span_id}-01").as_str())
    );

    // The denied call: its own span, an error, nothing upstream.
    let purge = spans
        .iter()
        .find(|s| s["name"] == "tools/call purge")
        .unwrap_or_else(|| panic!("no span for the denied call in {spans:#?}"));
    assert_eq!(purge["attributes"]["countersign.action"], "deny");
    assert_eq!(purge["attributes"]["countersign.rule"], "no-purge");
    assert_eq!(purge["status"]["code"], "STATUS_CODE_ERROR");

    // The held call: its channel, and nothing upstream either.
    let update = spans
        .iter()
        .find(|s| s["name"] == "tools/call update")
        .unwrap_or_else(|| panic!("no span for the held call in {spans:#?}"));
    println!("held span as the receiver recorded it: {update:#}");
    assert_eq!(update["attributes"]["countersign.risk"], "write");
    assert_eq!(update["attributes"]["countersign.action"], "confirm");
    assert_eq!(update["attributes"]["countersign.channel"], "token");
    assert_eq!(update["attributes"]["countersign.outcome"], "held");

    // The audit line of the call names the same trace and span.
    let lines = audit_lines(audit.path());
    let outcome = lines
        .iter()
        .find(|l| l["event"] == "outcome" && l["tool"] == "lookup")
        .unwrap_or_else(|| panic!("no outcome line in {lines:#?}"));
    assert_eq!(outcome["trace_id"], CLIENT_TRACE);
    assert_eq!(outcome["span_id"], span_id);
}

#[tokio::test]
async fn without_an_endpoint_audit_lines_carry_no_trace_and_the_clients_traceparent_passes() {
    let upstream = ScriptedServer::new(countersign_e2e::lookup_update_purge_catalog())
        .start()
        .await;
    let policy = TempFile::new("policy.yaml", POLICY);
    let audit = TempFile::new("audit.jsonl", "");
    let (mut gateway, url, _) =
        start_gateway(&upstream.url(), &policy, audit.path_str(), &[]).await;
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let call = tool_call(7, "lookup", json!({})).to_string();
    let answer = TestClient::default()
        .post_json(&url, &[("traceparent", &traceparent)], &call)
        .await;
    assert_eq!(answer.status, 200);
    gateway.terminate().await;
    let calls: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| r.json()["method"] == "tools/call")
        .collect();
    assert_eq!(calls[0].header("traceparent"), Some(traceparent.as_str()));
    let lines = audit_lines(audit.path());
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|l| l.get("trace_id").is_none()),
        "{lines:#?}"
    );
}

/// Every metric family of a scrape, by name (`# TYPE name kind`).
fn families(scrape: &str) -> Vec<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn metrics_are_named_countersign_and_the_dashboard_queries_only_real_ones() {
    let upstream = ScriptedServer::new(countersign_e2e::lookup_update_purge_catalog())
        .start()
        .await;
    let policy = TempFile::new("policy.yaml", POLICY);
    let (_gateway, url, metrics) = start_gateway(&upstream.url(), &policy, "off", &[]).await;
    for (id, tool) in [(1, "lookup"), (2, "purge")] {
        let call = tool_call(id, tool, json!({})).to_string();
        TestClient::default().post_json(&url, &[], &call).await;
    }
    let bad_token = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "update", "arguments": {"confirmationToken": "not-a-token"}}});
    TestClient::default()
        .post_json(&url, &[], &bad_token.to_string())
        .await;
    let scrape = get(&metrics).await;
    let names = families(&scrape);
    for name in &names {
        assert!(name.starts_with("countersign_"), "{name} in\n{scrape}");
    }
    for expected in [
        "countersign_requests",
        "countersign_upstream_response_seconds",
        "countersign_decisions",
        "countersign_refusals",
        "countersign_open_connections",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in\n{scrape}"
        );
    }
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("countersign_decisions_total{")
                && l.contains("action=\"deny\"")
                && l.contains("rule=\"no-purge\"")
                && l.contains("decision=\"denied\"")),
        "{scrape}"
    );
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("countersign_decisions_total{")
                && l.contains("action=\"allow\"")
                && l.contains("decision=\"allowed\"")),
        "{scrape}"
    );
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("countersign_refusals_total{") && l.contains("code=\"")),
        "{scrape}"
    );

    // The dashboard in the repository queries only metrics this scrape has.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            countersign_e2e::repo_root().join("deploy/grafana/countersign.json"),
        )
        .expect("deploy/grafana/countersign.json"),
    )
    .expect("dashboard is JSON");
    let mut queried = Vec::new();
    collect_exprs(&dashboard, &mut queried);
    assert!(!queried.is_empty(), "the dashboard queries nothing");
    let series: Vec<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for expr in &queried {
        for metric in metric_names(expr) {
            // A family with no series yet still has its `# TYPE` line.
            let family = ["_bucket", "_total", "_sum", "_count"]
                .iter()
                .find_map(|suffix| metric.strip_suffix(suffix))
                .unwrap_or(&metric);
            assert!(
                series.contains(&metric.as_str()) || names.iter().any(|n| n == family),
                "the dashboard queries {metric} ({expr}), which /metrics does not have:\n{scrape}"
            );
        }
    }
}

fn collect_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => collect_exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The `countersign_…` identifiers of a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("countersign_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}
