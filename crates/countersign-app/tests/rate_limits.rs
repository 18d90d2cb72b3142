//! Rate limits through the real gateway: a principal past a limit gets 429 with `Retry-After` and
//! a JSON-RPC error naming the limit, the upstream receives only what was allowed, other
//! principals are unaffected, every hit is counted in `/metrics`, and replicas sharing a Redis
//! grant one budget between them.
//!
//! Every limit here refills one token a minute, so nothing comes back while a test runs.

mod common;

use bytes::Bytes;
use common::Harness;
use countersign_app::{RawConfig, RunningGateway};
use countersign_testkit::mcp::{
    ScriptedServer, held_token, hold_on_stream, open_session, tool_call,
};
use countersign_testkit::{Collected, RecordingUpstream, RedisServer, TestClient, collect};
use http::Method;
use serde_json::{Value, json};

fn tools() -> Vec<Value> {
    vec![
        json!({"name": "list_orders", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
        json!({"name": "create_order", "inputSchema": {"type": "object"},
               "annotations": {"readOnlyHint": false, "destructiveHint": false}}),
    ]
}

/// The configuration of a gateway in front of `upstream` with its admin listener on, principals
/// from `x-user` (unless `anonymous`), the `rate_limits:` lines `limits`, and `extra` top-level
/// lines.
fn yaml(upstream: &RecordingUpstream, limits: &str, extra: &str, anonymous: bool) -> String {
    let identity = if anonymous {
        ""
    } else {
        "identity: { header: x-user }\n"
    };
    format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\naudit: {{ path: 'off' }}\n{identity}{extra}\
         rate_limits:\n{limits}upstreams:\n  - name: store\n    url: {}\n",
        upstream.url()
    )
}

async fn start(limits: &str) -> Harness {
    let upstream = ScriptedServer::new(tools()).start().await;
    let yaml = yaml(&upstream, limits, "", false);
    Harness::from_yaml(upstream, &yaml).await
}

fn user(name: &str) -> [(&'static str, &str); 1] {
    [("x-user", name)]
}

fn call(id: u64, tool: &str) -> Value {
    tool_call(id, tool, json!({"n": id}))
}

/// Asserts a rate-limit refusal of the request `id` by `limit` and returns its Retry-After.
fn refused_by(response: &Collected, id: u64, limit: &str) -> u64 {
    assert_eq!(response.status, 429, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], -32012, "{answer}");
    assert_eq!(answer["error"]["data"]["limit"], limit, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "exhausted", "{answer}");
    let retry_after: u64 = response
        .header("retry-after")
        .expect("a Retry-After header")
        .parse()
        .expect("whole seconds");
    assert_eq!(answer["error"]["data"]["retryAfterSeconds"], retry_after);
    assert!(
        (1..=60).contains(&retry_after),
        "one token a minute: {retry_after}"
    );
    retry_after
}

/// The tools the upstream ran, with the `n` of each call, in order.
fn ran(upstream: &RecordingUpstream) -> Vec<(String, u64)> {
    upstream
        .tool_calls_by_name("/arguments/n")
        .into_iter()
        .map(|(tool, n)| (tool, n.as_u64().expect("n")))
        .collect()
}

async fn metrics(gateway: &RunningGateway) -> String {
    let admin = gateway.admin_addr.expect("admin listener");
    let url = format!("http://{admin}/metrics");
    collect(
        TestClient::default()
            .send(Method::GET, &url, &[], Bytes::new())
            .await,
    )
    .await
    .text()
}

fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_principal_past_its_calls_limit_gets_429_and_only_allowed_calls_reach_the_upstream() {
    let h = start("  calls: { per_minute: 1, burst: 3 }\n").await;
    for id in 1..=3 {
        h.post_ok(&user("ada"), &call(id, "list_orders")).await;
    }
    for id in 4..=5 {
        let response = h.post(&user("ada"), &call(id, "list_orders")).await;
        refused_by(&response, id, "calls");
    }
    // At the same moment another principal has its whole burst.
    let answer = h.post_ok(&user("bob"), &call(6, "list_orders")).await;
    assert_eq!(answer["result"]["content"][0]["text"], "ran list_orders");

    let expected: Vec<(String, u64)> = [1, 2, 3, 6]
        .into_iter()
        .map(|n| ("list_orders".to_owned(), n))
        .collect();
    assert_eq!(
        ran(&h.upstream),
        expected,
        "the refused calls never reached the upstream"
    );
    let metrics = metrics(&h.gateway).await;
    assert_eq!(
        counter(
            &metrics,
            "countersign_limit_hits_total{limit=\"rate_calls\"}"
        ),
        2,
        "{metrics}"
    );
}

#[tokio::test]
async fn held_calls_past_the_burst_are_refused_while_reads_and_redemptions_go_on() {
    let h = start("  held: { per_minute: 1, burst: 2 }\n").await;
    let first = held_token(&h.post_ok(&user("ada"), &call(1, "create_order")).await);
    held_token(&h.post_ok(&user("ada"), &call(2, "create_order")).await);
    let response = h.post(&user("ada"), &call(3, "create_order")).await;
    refused_by(&response, 3, "held");

    let read = h.post_ok(&user("ada"), &call(4, "list_orders")).await;
    assert_eq!(read["result"]["content"][0]["text"], "ran list_orders");
    // Redeeming an approval holds nothing, so the empty bucket does not stop it.
    let redeem = tool_call(
        1,
        "create_order",
        json!({"n": 1, "confirmationToken": first}),
    );
    let redeemed = h.post_ok(&user("ada"), &redeem).await;
    assert_eq!(redeemed["result"]["content"][0]["text"], "ran create_order");
    held_token(&h.post_ok(&user("bob"), &call(5, "create_order")).await);

    assert_eq!(
        ran(&h.upstream),
        [
            ("list_orders".to_owned(), 4),
            ("create_order".to_owned(), 1)
        ],
        "only the read and the approved call ran"
    );
    let metrics = metrics(&h.gateway).await;
    assert_eq!(
        counter(
            &metrics,
            "countersign_limit_hits_total{limit=\"rate_held\"}"
        ),
        1,
        "{metrics}"
    );
}

#[tokio::test]
async fn a_question_past_the_questions_limit_is_not_asked() {
    let upstream = ScriptedServer::new(tools()).start().await;
    let yaml = yaml(
        &upstream,
        "  questions: { per_minute: 1, burst: 1 }\n",
        "",
        true,
    );
    let h = Harness::from_yaml(upstream, &yaml).await;
    let session = open_session(&h.url(), json!({"elicitation": {}})).await;
    let (_question, _waiting) = hold_on_stream(&h.url(), &session, &call(1, "create_order")).await;

    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let response = h.post(&headers, &call(2, "create_order")).await;
    refused_by(&response, 2, "questions");
    assert!(ran(&h.upstream).is_empty(), "nothing ran");
    let metrics = metrics(&h.gateway).await;
    assert_eq!(
        counter(
            &metrics,
            "countersign_limit_hits_total{limit=\"rate_questions\"}"
        ),
        1,
        "{metrics}"
    );
}

/// A second gateway from `yaml`, beside a [`Harness`].
async fn replica(yaml: &str) -> RunningGateway {
    let config = RawConfig::from_yaml(yaml)
        .expect("valid YAML")
        .validate()
        .expect("valid config");
    RunningGateway::start(config).await.expect("gateway starts")
}

async fn post(
    gateway: &RunningGateway,
    principal: &str,
    body: &(impl std::fmt::Display + ?Sized),
) -> Collected {
    let url = format!("http://{}/mcp", gateway.addr);
    TestClient::default()
        .post_json(&url, &user(principal), &body.to_string())
        .await
}

#[tokio::test]
async fn replicas_sharing_redis_grant_one_budget() {
    let redis = RedisServer::start().await;
    let upstream = ScriptedServer::new(tools()).start().await;
    let shared = format!("redis: {{ url: '{}', command_timeout: 2s }}\n", redis.url());
    let yaml = yaml(
        &upstream,
        "  calls: { per_minute: 1, burst: 2 }\n",
        &shared,
        false,
    );
    let a = Harness::from_yaml(upstream, &yaml).await;
    let b = replica(&yaml).await;

    assert_eq!(
        post(&a.gateway, "ada", &call(1, "list_orders"))
            .await
            .status,
        200
    );
    assert_eq!(post(&b, "ada", &call(2, "list_orders")).await.status, 200);
    refused_by(
        &post(&a.gateway, "ada", &call(3, "list_orders")).await,
        3,
        "calls",
    );
    refused_by(&post(&b, "ada", &call(4, "list_orders")).await, 4, "calls");
    assert_eq!(post(&b, "bob", &call(5, "list_orders")).await.status, 200);

    let ran: Vec<u64> = ran(&a.upstream).into_iter().map(|(_, n)| n).collect();
    assert_eq!(ran, [1, 2, 5], "two replicas, one bucket of two");
    assert_eq!(
        counter(
            &metrics(&b).await,
            "countersign_limit_hits_total{limit=\"rate_calls\"}"
        ),
        1
    );
}

#[tokio::test]
async fn with_redis_down_each_replica_limits_alone_when_open_and_refuses_when_closed() {
    let mut redis = RedisServer::start().await;
    let upstream = ScriptedServer::new(tools()).start().await;
    let shared = format!(
        "redis: {{ url: '{}', command_timeout: 500ms }}\n",
        redis.url()
    );
    let limits = "  calls: { per_minute: 1, burst: 2 }\n";
    let closed_limits = format!("{limits}  on_store_error: closed\n");
    let open_yaml = yaml(&upstream, limits, &shared, false);
    let closed_yaml = yaml(&upstream, &closed_limits, &shared, false);
    let open = Harness::from_yaml(upstream, &open_yaml).await;
    let closed = replica(&closed_yaml).await;
    // Pin the catalog while Redis is up, so the reads below are known reads on both replicas.
    for gateway in [&open.gateway, &closed] {
        assert_eq!(post(gateway, "ada", &common::TOOLS_LIST).await.status, 200);
    }
    redis.stop().await;

    assert_eq!(
        post(&open.gateway, "ada", &call(1, "list_orders"))
            .await
            .status,
        200
    );
    assert_eq!(
        post(&open.gateway, "ada", &call(2, "list_orders"))
            .await
            .status,
        200
    );
    refused_by(
        &post(&open.gateway, "ada", &call(3, "list_orders")).await,
        3,
        "calls",
    );
    let metrics = metrics(&open.gateway).await;
    assert_eq!(
        counter(
            &metrics,
            "countersign_rate_limit_store_fallbacks_total{fallback=\"local\"}"
        ),
        3,
        "{metrics}"
    );

    let response = post(&closed, "ada", &call(4, "list_orders")).await;
    assert_eq!(response.status, 503, "{}", response.text());
    assert_eq!(response.header("retry-after"), Some("1"));
    let answer = response.json();
    assert_eq!(answer["error"]["data"]["limit"], "calls");
    assert_eq!(answer["error"]["data"]["reason"], "store_unavailable");
    let ran: Vec<u64> = ran(&open.upstream).into_iter().map(|(_, n)| n).collect();
    assert_eq!(ran, [1, 2], "the closed replica sent nothing");
}
