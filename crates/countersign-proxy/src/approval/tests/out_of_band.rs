//! Out-of-band approval through every channel, against an in-memory approval page whose
//! decisions the test makes: what the client sees, and what reached the upstream (the mock).

use std::sync::atomic::Ordering;

use super::fake_page::{DownStore, FakePage};
use super::*;
use crate::approval::out_of_band::ApprovalStatus;
use crate::wire::APPROVAL_KEY;

const OUT_OF_BAND_POLICY: &str = "token_ttl: 60s\n\
    rules:\n  \
    - { id: orders, tools: [create_order], action: confirm, approval: out_of_band,\n      \
        approvers: { groups: [sre] }, four_eyes: true }\n";

/// A gateway whose `create_order` needs the approval page (`policy`), with the fake page
/// configured (or not) and settings `adjust`ed.
fn gateway_with(
    policy: &str,
    with_page: bool,
    adjust: impl FnOnce(&mut ApprovalSettings),
) -> (Gateway, Arc<FakePage>) {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
    let page = FakePage::new(clock.clone());
    let configured = page.clone();
    let gateway = Gateway::with_policy(clock, policy, |settings| {
        if with_page {
            settings.out_of_band = Some(configured);
        }
        adjust(settings);
    });
    (gateway, page)
}

pub(super) fn page_gateway() -> (Gateway, Arc<FakePage>) {
    gateway_with(OUT_OF_BAND_POLICY, true, |_| {})
}

/// Holds `create_order` for a client that cannot elicit and returns the held result's
/// machine-readable part.
async fn hold_without_elicitation(gateway: &mut Gateway) -> Value {
    let (response, received) = gateway.post(&[], &create_order()).await;
    assert!(received.is_empty(), "a held call was forwarded");
    confirmation(response).await
}

fn token_of(held: &Value) -> String {
    held["confirmationToken"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// The claims of a token or `requestState` the gateway minted, verified under its key.
fn claims_of(gateway: &Gateway, artefact: &str) -> Value {
    let settings = &gateway.approvals.settings;
    let rules = countersign_token::VerifyRules {
        leeway_secs: settings.leeway_secs,
        max_ttl_secs: countersign_policy::MAX_TOKEN_TTL.as_secs(),
    };
    let claims = countersign_token::verify(
        &settings.keyring,
        artefact,
        settings.clock.unix_secs(),
        &rules,
    )
    .expect("a valid artefact");
    serde_json::to_value(claims).expect("claims serialize")
}

#[tokio::test]
async fn an_out_of_band_rule_without_an_approval_page_is_refused_and_nothing_runs() {
    let (mut gateway, page) = gateway_with(OUT_OF_BAND_POLICY, false, |_| {});

    let (response, received) = gateway.post(&[], &create_order()).await;

    assert_eq!(
        confirmation(response).await["code"],
        "human_approval_unavailable"
    );
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
    assert!(page.opened.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_client_without_elicitation_gets_the_link_and_a_token_that_waits_for_the_page() {
    let (mut gateway, page) = page_gateway();

    let held = hold_without_elicitation(&mut gateway).await;

    let (ticket, request) = page.only_request();
    assert_eq!(held["status"], "requires_confirmation");
    assert_eq!(held["channel"], "out_of_band");
    assert_eq!(held["approvalUrl"], json!(ticket.url));
    assert_eq!(
        (
            request.principal.as_str(),
            request.upstream.as_str(),
            request.tool.as_str()
        ),
        ("ada", "store", "create_order")
    );
    assert_eq!(request.arguments, r#"{"sku":"A-1","qty":2}"#);
    assert_eq!(request.rule.as_deref(), Some("orders"));
    assert_eq!(request.risk, "write");
    assert_eq!(request.approvers.groups, vec!["sre".to_owned()]);
    assert!(request.approvers.four_eyes);
    let token = token_of(&held);
    let claims = claims_of(&gateway, &token);
    assert_eq!(claims["ch"], "out_of_band");
    assert_eq!(claims["aid"], json!(ticket.id));
    assert_eq!(
        claims["exp"],
        json!(ticket.expires_at),
        "expires with the request"
    );

    // Nobody decided: refused, nothing runs, and the token is not spent.
    for _ in 0..2 {
        let (response, received) = gateway
            .post(&[], &presenting(&create_order(), &token))
            .await;
        assert_eq!(confirmation(response).await["code"], "pending_approval");
        assert!(received.is_empty() && received_nothing(&mut gateway.inner));
    }

    page.approve();
    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;
    assert_eq!(
        body_json(response).await["result"],
        json!({"ran": "create_order"})
    );
    let (body, audit) = forwarded(&received);
    assert_eq!(
        body,
        create_order(),
        "exactly the held call, token stripped"
    );
    assert_eq!(audit.channel, Some("out_of_band"));
    assert_eq!(audit.jti.as_deref(), Some(ticket.id.as_str()));

    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;
    assert_eq!(confirmation(response).await["code"], "replayed");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn the_held_result_text_gives_the_link_and_says_only_the_page_approves() {
    let (mut gateway, page) = page_gateway();
    let (response, _) = gateway.post(&[], &create_order()).await;
    let answer = body_json(response).await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .expect("a text block");
    let (ticket, _) = page.only_request();
    assert!(text.contains(&ticket.url), "{text}");
    assert!(text.contains("you cannot approve it"), "{text}");
    assert!(text.contains("pending_approval"), "{text}");
}

#[tokio::test]
async fn a_denied_or_expired_request_refuses_its_token_and_nothing_runs() {
    let (mut gateway, page) = page_gateway();
    let token = token_of(&hold_without_elicitation(&mut gateway).await);
    page.deny();
    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;
    assert_eq!(confirmation(response).await["code"], "not_approved");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));

    let (mut gateway, page) = page_gateway();
    let token = token_of(&hold_without_elicitation(&mut gateway).await);
    let (ticket, _) = page.only_request();
    page.decide(&ticket.id, ApprovalStatus::Gone);
    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;
    assert_eq!(confirmation(response).await["code"], "expired");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn an_approval_bound_to_another_call_runs_nothing() {
    let (mut gateway, page) = page_gateway();
    let token = token_of(&hold_without_elicitation(&mut gateway).await);
    let (ticket, _) = page.only_request();
    page.decide(
        &ticket.id,
        ApprovalStatus::Approved {
            approver: "carol".into(),
            binding: "the binding of some other call".into(),
        },
    );

    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;

    assert_eq!(confirmation(response).await["code"], "approval_mismatch");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn an_approved_call_is_not_run_when_the_replay_store_is_down() {
    let (mut gateway, page) = gateway_with(OUT_OF_BAND_POLICY, true, |settings| {
        settings.store = Arc::new(DownStore);
    });
    let token = token_of(&hold_without_elicitation(&mut gateway).await);
    page.approve();

    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;

    assert_eq!(confirmation(response).await["code"], "store_unavailable");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_page_that_cannot_record_the_request_refuses_the_call() {
    let (mut gateway, page) = page_gateway();
    page.down.store(true, Ordering::SeqCst);

    let (response, received) = gateway.post(&[], &create_order()).await;

    assert_eq!(confirmation(response).await["code"], "store_unavailable");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_human_rule_goes_out_of_band_only_for_a_client_that_cannot_elicit() {
    let human =
        "rules:\n  - { id: orders, tools: [create_order], action: confirm, approval: human }\n";
    let (mut gateway, page) = gateway_with(human, true, |_| {});
    let held = hold_without_elicitation(&mut gateway).await;
    assert_eq!(held["channel"], "out_of_band");
    assert_eq!(page.opened.lock().expect("lock").len(), 1);

    // `any` keeps today's token, approval page or not.
    let any = "rules:\n  - { id: orders, tools: [create_order], action: confirm }\n";
    let (mut gateway, page) = gateway_with(any, true, |_| {});
    let held = hold_without_elicitation(&mut gateway).await;
    assert!(held.get("approvalUrl").is_none(), "{held}");
    assert_eq!(claims_of(&gateway, &token_of(&held))["ch"], "token");
    assert!(page.opened.lock().expect("lock").is_empty());
}

/// A session opened by `ada` whose client declared `capabilities`, on `version`.
pub(super) fn session_declaring(
    gateway: &Gateway,
    capabilities: Value,
    version: &'static str,
) -> [(&'static str, &'static str); 2] {
    let initialize = json!({"capabilities": capabilities,
                            "clientInfo": {"name": "test-client", "version": "1"}})
    .into();
    gateway.approvals.settings.sessions.opened(
        SESSION,
        "ada",
        Some(&initialize),
        SystemClock.now(),
    );
    [
        ("mcp-session-id", SESSION),
        ("mcp-protocol-version", version),
    ]
}

/// POSTs the client's `result` to the gateway's question `question`.
pub(super) async fn answer(
    gateway: &Gateway,
    headers: &[(&str, &str)],
    question: &Value,
    result: Value,
) {
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": result});
    let request = parsed_post(&unused_route(), Some("ada"), headers, &answer);
    let accepted = gateway
        .service
        .clone()
        .oneshot(request)
        .await
        .expect("infallible");
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
}

#[tokio::test(start_paused = true)]
async fn a_url_eliciting_session_is_sent_to_the_page_and_runs_once_it_approves() {
    let (mut gateway, page) = page_gateway();
    let headers = session_declaring(&gateway, json!({"elicitation": {"url": {}}}), "2025-11-25");
    let (response, received) = gateway.post(&headers, &create_order()).await;
    assert!(received.is_empty());
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let mut pending = String::new();

    let question = next_sse_message(&mut body, &mut pending).await;
    let (ticket, request) = page.only_request();
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["mode"], "url");
    assert_eq!(question["params"]["url"], json!(ticket.url));
    assert_eq!(question["params"]["elicitationId"], json!(ticket.id));
    assert_eq!(request.client_name.as_deref(), Some("test-client"));
    assert_eq!(request.session.as_deref(), Some(SESSION));

    // Accepting means only "I will open the link": nothing runs.
    answer(&gateway, &headers, &question, json!({"action": "accept"})).await;
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(received_nothing(&mut gateway.inner));

    page.approve();
    let complete = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(
        complete,
        json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
               "params": {"elicitationId": ticket.id}})
    );
    let (request, reply) = gateway
        .inner
        .next_request()
        .await
        .expect("the approved call is forwarded");
    let (forwarded, audit) = forwarded(std::slice::from_ref(&request));
    assert_eq!(forwarded, create_order());
    assert_eq!(audit.channel, Some("out_of_band"));
    reply.send_response(ran(&request));
    let result = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(
        result,
        json!({"jsonrpc": "2.0", "id": 3, "result": {"ran": "create_order"}})
    );
    assert!(received_nothing(&mut gateway.inner), "forwarded once");
}

#[tokio::test(start_paused = true)]
async fn declining_the_link_ends_the_call_as_not_approved_at_once() {
    let (mut gateway, page) = page_gateway();
    let headers = session_declaring(&gateway, json!({"elicitation": {"url": {}}}), "2025-11-25");
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;

    answer(&gateway, &headers, &question, json!({"action": "decline"})).await;

    let outcome = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(
        outcome["result"]["_meta"][CONFIRMATION_META]["code"],
        "not_approved"
    );
    // A later approval on the page finds nobody to run it.
    page.approve();
    assert!(http_body_util::BodyExt::frame(&mut body).await.is_none());
    assert!(received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn a_form_answer_never_approves_an_out_of_band_call() {
    let (mut gateway, page) = page_gateway();
    // A 2025-06-18 session: form only (URL mode does not exist there even if declared).
    let headers = session_declaring(
        &gateway,
        json!({"elicitation": {"url": {}, "form": {}}}),
        "2025-06-18",
    );
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;
    let (ticket, _) = page.only_request();
    assert_eq!(question["params"]["mode"], "form");
    let message = question["params"]["message"].as_str().expect("a message");
    assert!(message.contains(&ticket.url), "{message}");
    assert!(message.contains("does not approve"), "{message}");

    // A hook auto-accepts the form with the box ticked: still nothing runs.
    answer(
        &gateway,
        &headers,
        &question,
        json!({"action": "accept", "content": {"approve": true}}),
    )
    .await;
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(received_nothing(&mut gateway.inner));

    page.deny();
    let outcome = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(
        outcome["result"]["_meta"][CONFIRMATION_META]["code"],
        "not_approved"
    );
    assert!(received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn an_undecided_request_ends_its_stream_as_expired() {
    let (mut gateway, _page) = page_gateway();
    let headers = session_declaring(&gateway, json!({"elicitation": {}}), "2025-06-18");
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(question["method"], "elicitation/create");

    let outcome = next_sse_message(&mut body, &mut pending).await;

    assert_eq!(
        outcome["result"]["_meta"][CONFIRMATION_META]["code"],
        "expired"
    );
    assert!(received_nothing(&mut gateway.inner));
}

/// A 2026-07-28 `create_order` whose request declares `capabilities`.
fn stateless_create_order(capabilities: Value) -> Value {
    let mut call = create_order();
    call["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    call
}

const STATELESS: [(&str, &str); 3] = [
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
    ("mcp-name", "create_order"),
];

/// The retry of `call` carrying `state` and, if any, the client's `answer`.
fn retry(call: &Value, state: &Value, answer: Option<Value>) -> Value {
    let mut retry = call.clone();
    retry["params"]["requestState"] = state.clone();
    if let Some(answer) = answer {
        retry["params"]["inputResponses"] = json!({ APPROVAL_KEY: answer });
    }
    retry
}

#[tokio::test(start_paused = true)]
async fn input_required_with_a_url_runs_once_after_the_page_approves() {
    let (mut gateway, page) = page_gateway();
    let call = stateless_create_order(json!({"elicitation": {"url": {}}}));
    let (response, received) = gateway.post(&STATELESS, &call).await;
    assert!(received.is_empty());
    let answer = body_json(response).await;
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let (ticket, _) = page.only_request();
    let asked = &result["inputRequests"][APPROVAL_KEY];
    assert_eq!(asked["method"], "elicitation/create");
    assert_eq!(asked["params"]["mode"], "url");
    assert_eq!(asked["params"]["url"], json!(ticket.url));
    let state = result["requestState"].clone();
    let claims = claims_of(&gateway, state.as_str().expect("a string state"));
    assert_eq!(
        (claims["ch"].clone(), claims["aid"].clone()),
        (json!("out_of_band"), json!(ticket.id))
    );

    page.approve();
    let accepted = Some(json!({"action": "accept"}));
    let (response, received) = gateway
        .post(&STATELESS, &retry(&call, &state, accepted.clone()))
        .await;
    assert_eq!(body_json(response).await["result"]["ran"], "create_order");
    let (body, audit) = forwarded(&received);
    assert_eq!(body["params"]["arguments"], json!({"sku": "A-1", "qty": 2}));
    assert!(body["params"].get("requestState").is_none(), "{body}");
    assert_eq!(audit.channel, Some("out_of_band"));

    let (response, received) = gateway
        .post(&STATELESS, &retry(&call, &state, accepted))
        .await;
    assert_eq!(confirmation(response).await["code"], "replayed");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn an_input_required_form_answer_does_not_approve_and_the_retry_waits_for_the_page() {
    let (mut gateway, page) = page_gateway();
    let call = stateless_create_order(json!({"elicitation": {"form": {}}}));
    let (response, _) = gateway.post(&STATELESS, &call).await;
    let answer = body_json(response).await;
    let asked = &answer["result"]["inputRequests"][APPROVAL_KEY];
    assert_eq!(asked["params"]["mode"], "form");
    let (ticket, _) = page.only_request();
    assert!(
        asked["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&ticket.url))
    );
    let state = answer["result"]["requestState"].clone();

    // Approve ticked in the form, nobody decided on the page: the retry waits for the page
    // until the request expires, and nothing runs.
    let ticked = Some(json!({"action": "accept", "content": {"approve": true}}));
    let (response, received) = gateway
        .post(&STATELESS, &retry(&call, &state, ticked))
        .await;

    assert_eq!(confirmation(response).await["code"], "expired");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn a_declined_input_required_question_is_final() {
    let (mut gateway, page) = page_gateway();
    let call = stateless_create_order(json!({"elicitation": {"url": {}}}));
    let (response, _) = gateway.post(&STATELESS, &call).await;
    let state = body_json(response).await["result"]["requestState"].clone();

    let declined = Some(json!({"action": "decline"}));
    let (response, received) = gateway
        .post(&STATELESS, &retry(&call, &state, declined))
        .await;
    assert_eq!(confirmation(response).await["code"], "not_approved");
    assert!(received.is_empty());

    // Approved on the page afterwards: the same state can no longer run it.
    page.approve();
    let accepted = Some(json!({"action": "accept"}));
    let (response, received) = gateway
        .post(&STATELESS, &retry(&call, &state, accepted))
        .await;
    assert_eq!(confirmation(response).await["code"], "replayed");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn an_approval_on_the_stream_runs_nothing_when_the_replay_store_is_down() {
    let (mut gateway, page) = gateway_with(OUT_OF_BAND_POLICY, true, |settings| {
        settings.store = Arc::new(DownStore);
    });
    let headers = session_declaring(&gateway, json!({"elicitation": {"url": {}}}), "2025-11-25");
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(question["params"]["mode"], "url");

    page.approve();

    let complete = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(complete["method"], "notifications/elicitation/complete");
    let outcome = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(
        outcome["result"]["_meta"][CONFIRMATION_META]["code"],
        "store_unavailable"
    );
    assert!(received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn requests_opened_on_the_page_are_counted_by_link_and_outcome() {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ProxyMetrics::register(&mut registry);
    let (mut gateway, page) = gateway_with(OUT_OF_BAND_POLICY, true, |settings| {
        settings.metrics = metrics;
    });
    hold_without_elicitation(&mut gateway).await;
    page.down.store(true, Ordering::SeqCst);
    gateway.post(&[], &create_order()).await;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    for line in [
        r#"countersign_out_of_band_requests_total{link="held_result",outcome="opened"} 1"#,
        r#"countersign_out_of_band_requests_total{link="held_result",outcome="failed"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[tokio::test]
async fn without_a_page_a_2026_client_is_refused_as_a_result_not_a_missing_capability() {
    let (mut gateway, _page) = gateway_with(OUT_OF_BAND_POLICY, false, |_| {});
    let call = stateless_create_order(json!({"elicitation": {"url": {}, "form": {}}}));

    let (response, received) = gateway.post(&STATELESS, &call).await;

    // No client capability would help: the approval page is missing.
    assert_eq!(
        confirmation(response).await["code"],
        "human_approval_unavailable"
    );
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn a_human_rule_asks_a_form_client_itself_and_sends_a_url_only_client_to_the_page() {
    let human =
        "rules:\n  - { id: orders, tools: [create_order], action: confirm, approval: human }\n";

    let (mut gateway, page) = gateway_with(human, true, |_| {});
    let headers = session_declaring(
        &gateway,
        json!({"elicitation": {"form": {}, "url": {}}}),
        "2025-11-25",
    );
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let question = next_sse_message(&mut response.into_body(), &mut String::new()).await;
    assert_eq!(question["params"]["mode"], "form");
    assert!(
        question["params"]["requestedSchema"]["properties"]["approve"].is_object(),
        "today's question, answered in the client: {question}"
    );
    assert!(page.opened.lock().expect("lock").is_empty());

    let (mut gateway, page) = gateway_with(human, true, |_| {});
    let headers = session_declaring(&gateway, json!({"elicitation": {"url": {}}}), "2025-11-25");
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let question = next_sse_message(&mut response.into_body(), &mut String::new()).await;
    assert_eq!(question["params"]["mode"], "url");
    assert_eq!(page.opened.lock().expect("lock").len(), 1);
    assert!(received_nothing(&mut gateway.inner));
}
