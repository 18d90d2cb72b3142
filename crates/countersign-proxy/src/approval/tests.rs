//! The approval layer between the real classify layer (over a catalog that already pinned the
//! store's tools) and a mock inner service standing in for audit + forwarder: what the mock
//! receives is what would go upstream.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use countersign_testkit::mcp::{tool_call, tool_call_notification};
use countersign_testkit::next_sse_message;
use http::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

use super::{ApprovalLayer, ApprovalSettings, Approvals, Approve, Cleared, QuestionCaps};
use crate::audit::CallAudit;
use crate::body::ResponseBody;
use crate::classify::Classify;
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::config::{LimitRates, Rate, RateLimitConfig};
use crate::context::RequestContextExt;
use crate::limits::RateLimits;
use crate::metrics::ProxyMetrics;
use crate::testing::{
    ELICITATION_TIMEOUT, LEEWAY_SECS, MockHandle, MockInner, approval_settings, body_json,
    call_answering, classify_layer, mock_inner, parsed_post, parsed_post_text, payload_json,
    pinned_catalog, policy, ran, received_nothing, tool, unused_route,
};
use crate::wire::{CONFIRMATION_META, REQUEST_ID_PREFIX, TOKEN_META};

const TOKEN_TTL: Duration = Duration::from_secs(60);
const SESSION: &str = "session-1";

/// Classify → approve → mock, for the caller `ada`.
struct Gateway {
    service: Classify<Approve<MockInner<Cleared>>>,
    inner: MockHandle<Cleared>,
    approvals: Arc<Approvals>,
    clock: Arc<ManualClock>,
}

impl Gateway {
    fn new() -> Self {
        Self::with_settings(|_| {})
    }

    /// A gateway whose approval settings `adjust` changed.
    fn with_settings(adjust: impl FnOnce(&mut ApprovalSettings)) -> Self {
        let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
        Self::with_policy(
            clock,
            "token_ttl: 60s\n\
             rules:\n  \
             - { id: no-drops, tools: [drop_table], action: deny, reason: tables stay }\n",
            adjust,
        )
    }

    /// A gateway on `clock` under the policy `rules` (a policy file without its version line).
    fn with_policy(
        clock: Arc<ManualClock>,
        rules: &str,
        adjust: impl FnOnce(&mut ApprovalSettings),
    ) -> Self {
        let mut settings = approval_settings(clock.clone());
        adjust(&mut settings);
        let approvals = Arc::new(Approvals::new(settings));
        let policy = policy(rules);
        let catalog = pinned_catalog(&[
            tool("list_products", true),
            tool("create_order", false),
            tool("drop_table", false),
        ]);
        let (inner, handle) = mock_inner();
        let service = classify_layer(policy, catalog)
            .layer(ApprovalLayer::new(approvals.clone()).layer(inner));
        Self {
            service,
            inner: handle,
            approvals,
            clock,
        }
    }

    /// POSTs `body` as `ada`; the mock answers whatever reaches it with [`ran`].
    async fn post(
        &mut self,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> (Response<ResponseBody>, Vec<Request<Cleared>>) {
        let request = parsed_post(&unused_route(), Some("ada"), headers, body);
        call_answering(self.service.clone(), request, &mut self.inner, ran).await
    }

    /// [`Gateway::post`] of a body given as its exact text.
    async fn post_text(
        &mut self,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (Response<ResponseBody>, Vec<Request<Cleared>>) {
        let request = parsed_post_text(&unused_route(), Some("ada"), headers, body);
        call_answering(self.service.clone(), request, &mut self.inner, ran).await
    }

    /// Holds `call` through the token channel and returns the confirmation token.
    async fn hold(&mut self, call: &Value) -> String {
        let (response, received) = self.post(&[], call).await;
        assert!(received.is_empty(), "a held call was forwarded");
        let confirmation = confirmation(response).await;
        assert_eq!(
            confirmation["status"], "requires_confirmation",
            "{confirmation}"
        );
        confirmation["confirmationToken"]
            .as_str()
            .expect("a token")
            .to_owned()
    }
}

/// The machine-readable part of the gateway's own result.
async fn confirmation(response: Response<ResponseBody>) -> Value {
    assert_eq!(response.status(), StatusCode::OK);
    let answer = body_json(response).await;
    let confirmation = answer["result"]["_meta"][CONFIRMATION_META].clone();
    assert!(confirmation.is_object(), "not a gateway result: {answer}");
    confirmation
}

/// `call` with `token` presented as the `confirmationToken` argument.
fn presenting(call: &Value, token: &str) -> Value {
    let mut call = call.clone();
    call["params"]["arguments"]["confirmationToken"] = json!(token);
    call
}

/// The one request the mock received: its body as JSON and its audit extension.
fn forwarded(received: &[Request<Cleared>]) -> (Value, CallAudit) {
    let [request] = received else {
        panic!(
            "expected exactly one forwarded request, got {}",
            received.len()
        );
    };
    let payload = request.body().payload().expect("a forwarded body");
    let audit = request
        .extensions()
        .context()
        .and_then(|context| context.audits.first())
        .expect("a forwarded call carries its CallAudit")
        .clone();
    (payload_json(payload), audit)
}

fn create_order() -> Value {
    tool_call(3, "create_order", json!({"sku": "A-1", "qty": 2}))
}

#[tokio::test]
async fn an_allowed_call_is_forwarded_without_token_artefacts_and_with_its_audit() {
    let mut gateway = Gateway::new();
    let mut call = tool_call(1, "list_products", json!({"q": "socks"}));
    call["params"]["arguments"]["confirmationToken"] = json!("left-over");
    call["params"]["_meta"] = json!({"countersign/confirmationToken": "left-over",
                                     "progressToken": 5});

    let (response, received) = gateway
        .post(&[("mcp-session-id", "session-7")], &call)
        .await;

    let answer = body_json(response).await;
    assert_eq!(
        answer["result"],
        json!({"ran": "list_products"}),
        "{answer}"
    );
    let (body, audit) = forwarded(&received);
    assert_eq!(
        body,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "list_products", "arguments": {"q": "socks"},
            "_meta": {"progressToken": 5}}})
    );
    assert_eq!(
        (
            audit.principal.as_str(),
            audit.method,
            audit.target.as_str()
        ),
        ("ada", "tools/call", "list_products")
    );
    assert_eq!((audit.risk, audit.action), ("read", "allow"));
    assert_eq!(audit.rule, "default");
    assert_eq!(audit.session.as_deref(), Some("session-7"));
    assert!(audit.channel.is_none() && audit.jti.is_none());
}

#[tokio::test]
async fn a_denied_call_is_answered_with_the_reason_and_nothing_is_forwarded() {
    let mut gateway = Gateway::new();

    let (response, received) = gateway
        .post(&[], &tool_call(2, "drop_table", json!({"table": "orders"})))
        .await;

    let confirmation = confirmation(response).await;
    assert_eq!(confirmation["status"], "denied");
    assert_eq!(confirmation["code"], "policy_denied");
    assert_eq!(confirmation["rule"], "no-drops");
    assert!(
        confirmation["message"]
            .as_str()
            .is_some_and(|m| m.contains("tables stay")),
        "{confirmation}"
    );
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_held_call_gets_a_token_for_its_arguments_and_nothing_is_forwarded() {
    let mut gateway = Gateway::new();

    let (response, received) = gateway.post(&[], &create_order()).await;

    let confirmation = confirmation(response).await;
    assert_eq!(confirmation["status"], "requires_confirmation");
    assert!(confirmation["confirmationToken"].is_string());
    assert_eq!(confirmation["arguments"], json!({"sku": "A-1", "qty": 2}));
    assert_eq!(confirmation["expiresInSeconds"], json!(TOKEN_TTL.as_secs()));
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_token_forwards_exactly_the_held_call_once_and_is_then_replayed() {
    let mut gateway = Gateway::new();
    let token = gateway.hold(&create_order()).await;

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
    assert_eq!(audit.channel, Some("token"));
    assert!(audit.jti.is_some() && audit.args_hash.is_some());

    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &token))
        .await;

    assert_eq!(confirmation(response).await["code"], "replayed");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

/// A held call as a client may write it: spaces and line breaks, an escape, a number with a
/// trailing zero.
const SPACED_CREATE_ORDER: &str = r#"{ "jsonrpc" : "2.0" , "id" : 3 , "method" : "tools/call" ,
    "params" : { "name" : "create_order" ,
                 "arguments" : { "sku" : "A\u002d1" , "qty" : 2 , "price" : 1.50 } } }"#;

#[tokio::test]
async fn a_token_covers_arguments_however_the_client_writes_them() {
    let mut gateway = Gateway::new();
    let (response, received) = gateway.post_text(&[], SPACED_CREATE_ORDER).await;
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
    let held = confirmation(response).await;
    assert_eq!(held["status"], "requires_confirmation", "{held}");
    let sent: Value = serde_json::from_str(SPACED_CREATE_ORDER).expect("json");
    assert_eq!(held["arguments"], sent["params"]["arguments"]);
    let token = held["confirmationToken"].as_str().expect("a token");

    // The same arguments written another way (order, spacing, escapes, number text), with the
    // token in `_meta`: the hash is over the value, so the token covers them.
    let retry = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"create_order",
            "arguments":{{"price":1.5,"qty":2.0e0,"sku":"A-1"}},
            "_meta":{{"{TOKEN_META}":"{token}"}}}}}}"#
    );
    let (response, received) = gateway.post_text(&[], &retry).await;
    assert_eq!(
        body_json(response).await["result"],
        json!({"ran": "create_order"})
    );
    let (body, audit) = forwarded(&received);
    assert_eq!(audit.channel, Some("token"));
    // Forwarded without the token, the numbers in their canonical text.
    let canonical: Value =
        serde_json::from_str(r#"{"price":1.5,"qty":2,"sku":"A-1"}"#).expect("json");
    assert_eq!(body["params"]["arguments"], canonical, "{body}");
    assert!(
        body["params"]
            .get("_meta")
            .is_none_or(|m| m.get(TOKEN_META).is_none()),
        "{body}"
    );

    // Different arguments are still refused, however they are written.
    let token = gateway.hold(&create_order()).await;
    let other = format!(
        r#"{{ "jsonrpc" : "2.0" , "id" : 3 , "method" : "tools/call" , "params" : {{
            "name" : "create_order" ,
            "arguments" : {{ "sku" : "A-1" , "qty" : 2.5 , "confirmationToken" : "{token}" }} }} }}"#
    );
    let (response, received) = gateway.post_text(&[], &other).await;
    assert_eq!(confirmation(response).await["code"], "arguments_mismatch");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_token_does_not_cover_other_arguments() {
    let mut gateway = Gateway::new();
    let token = gateway.hold(&create_order()).await;
    let more = tool_call(3, "create_order", json!({"sku": "A-1", "qty": 200}));

    let (response, received) = gateway.post(&[], &presenting(&more, &token)).await;

    assert_eq!(confirmation(response).await["code"], "arguments_mismatch");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_token_works_until_its_ttl_and_leeway_and_is_expired_after() {
    let mut gateway = Gateway::new();
    let first = gateway.hold(&create_order()).await;
    let second = gateway.hold(&create_order()).await;

    gateway
        .clock
        .advance(TOKEN_TTL + Duration::from_secs(LEEWAY_SECS));
    let (_, received) = gateway
        .post(&[], &presenting(&create_order(), &first))
        .await;
    assert_eq!(received.len(), 1, "still valid at the end of the leeway");

    gateway.clock.advance(Duration::from_secs(1));
    let (response, received) = gateway
        .post(&[], &presenting(&create_order(), &second))
        .await;

    assert_eq!(confirmation(response).await["code"], "expired");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn a_batch_with_a_held_call_is_refused_whole() {
    let mut gateway = Gateway::new();
    let batch = json!([tool_call(1, "list_products", json!({})), create_order()]);

    let (response, received) = gateway.post(&[], &batch).await;

    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let answer = body_json(response).await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("create_order")),
        "{answer}"
    );
    assert!(
        received.is_empty() && received_nothing(&mut gateway.inner),
        "not even the allowed member goes on"
    );
}

#[tokio::test]
async fn a_risky_tools_call_without_an_id_is_refused() {
    let mut gateway = Gateway::new();
    let call = tool_call_notification("create_order", json!({"sku": "A-1", "qty": 2}));

    let (response, received) = gateway.post(&[], &call).await;

    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test]
async fn an_allowed_tools_call_without_an_id_is_forwarded_like_any_allowed_call() {
    let mut gateway = Gateway::new();
    let mut call = tool_call_notification("list_products", json!({"q": "socks"}));
    call["params"]["_meta"] = json!({"countersign/confirmationToken": "left-over"});

    let (_, received) = gateway.post(&[], &call).await;

    let [request] = received.as_slice() else {
        panic!(
            "expected the allowed call to be forwarded once, got {}",
            received.len()
        );
    };
    let body = payload_json(request.body().payload().expect("a forwarded body"));
    assert_eq!(body["params"]["arguments"], json!({"q": "socks"}));
    assert!(
        body["params"]["_meta"].get(TOKEN_META).is_none(),
        "forwarded with the gateway's token, which an allowed request is stripped of: {body}"
    );
    assert!(
        request
            .extensions()
            .context()
            .is_some_and(|context| context.audits.len() == 1),
        "a call that runs upstream gets its audit outcome line, as an allowed request does"
    );
}

/// A 2025-06-18 session whose client declared form elicitation, opened by `ada`.
fn eliciting_session(gateway: &Gateway) -> [(&'static str, &'static str); 2] {
    let initialize = json!({"capabilities": {"elicitation": {}}}).into();
    let settings = &gateway.approvals.settings;
    settings
        .sessions
        .opened(SESSION, "ada", Some(&initialize), SystemClock.now());
    [
        ("mcp-session-id", SESSION),
        ("mcp-protocol-version", "2025-06-18"),
    ]
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_question_ends_the_held_calls_stream_with_not_approved() {
    let mut gateway = Gateway::new();
    let headers = eliciting_session(&gateway);
    let started = SystemClock.now();

    let (response, received) = gateway.post(&headers, &create_order()).await;

    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "a held call in an eliciting session is answered as a stream"
    );
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(question["method"], "elicitation/create");
    assert!(
        question["id"]
            .as_str()
            .is_some_and(|id| id.starts_with(REQUEST_ID_PREFIX))
    );
    let message = question["params"]["message"].as_str().expect("a message");
    assert!(message.contains("create_order") && message.contains("A-1"));

    // Nothing more while the person may still answer.
    tokio::time::advance(ELICITATION_TIMEOUT - Duration::from_millis(100)).await;
    let early = tokio::time::timeout(
        Duration::from_millis(50),
        http_body_util::BodyExt::frame(&mut body),
    )
    .await;
    assert!(
        early.is_err(),
        "the stream moved before the timeout: {early:?}"
    );

    let outcome = next_sse_message(&mut body, &mut pending).await;
    let waited = SystemClock.now().duration_since(started);
    assert!(
        waited >= ELICITATION_TIMEOUT && waited < ELICITATION_TIMEOUT + Duration::from_millis(100),
        "the question ended after {waited:?}"
    );
    assert_eq!(outcome["id"], json!(3), "answers the held call");
    assert_eq!(
        outcome["result"]["_meta"][CONFIRMATION_META]["code"],
        "not_approved"
    );
    assert!(
        http_body_util::BodyExt::frame(&mut body).await.is_none(),
        "the stream ends"
    );
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn an_approved_question_forwards_exactly_the_held_call_on_its_stream() {
    let mut gateway = Gateway::new();
    let headers = eliciting_session(&gateway);
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;

    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
                        "result": {"action": "accept", "content": {"approve": true}}});
    let request = parsed_post(&unused_route(), Some("ada"), &headers, &answer);
    let accepted = gateway
        .service
        .clone()
        .oneshot(request)
        .await
        .expect("infallible");
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);

    let (request, reply) = gateway
        .inner
        .next_request()
        .await
        .expect("the approved call is forwarded");
    let (forwarded, audit) = forwarded(std::slice::from_ref(&request));
    assert_eq!(forwarded, create_order());
    assert_eq!(audit.channel, Some("elicitation"));
    reply.send_response(ran(&request));

    let result = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(
        result,
        json!({"jsonrpc": "2.0", "id": 3, "result": {"ran": "create_order"}})
    );
    assert!(received_nothing(&mut gateway.inner), "forwarded once");
}

#[tokio::test]
async fn a_question_whose_answer_could_not_be_handed_over_is_not_asked() {
    // A hand-over with no room for another waiter, as when max_pending_questions are waiting.
    let mut gateway = Gateway::with_settings(|settings| {
        settings.handover = Arc::new(countersign_store::MemoryAnswerHandover::new(0));
    });
    let headers = eliciting_session(&gateway);

    let (response, received) = gateway.post(&headers, &create_order()).await;

    let mut body = response.into_body();
    let first = next_sse_message(&mut body, &mut String::new()).await;
    assert_ne!(
        first["method"], "elicitation/create",
        "asked anyway: {first}"
    );
    assert_eq!(
        first["result"]["_meta"][CONFIRMATION_META]["code"],
        "store_unavailable"
    );
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
}

#[tokio::test(start_paused = true)]
async fn a_principal_past_its_question_cap_is_refused_without_being_asked() {
    let mut gateway = Gateway::with_settings(|settings| {
        settings.question_caps = QuestionCaps {
            per_principal: 1,
            per_session: 10,
        };
    });
    let first_session = eliciting_session(&gateway);
    let (waiting, _) = gateway.post(&first_session, &create_order()).await;
    let mut waiting = waiting.into_body();
    let question = next_sse_message(&mut waiting, &mut String::new()).await;
    assert_eq!(question["method"], "elicitation/create");

    let settings = &gateway.approvals.settings;
    let initialize = json!({"capabilities": {"elicitation": {}}}).into();
    settings
        .sessions
        .opened("session-2", "ada", Some(&initialize), SystemClock.now());
    let second_session = [
        ("mcp-session-id", "session-2"),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let (response, received) = gateway.post(&second_session, &create_order()).await;

    let first = next_sse_message(&mut response.into_body(), &mut String::new()).await;
    assert_ne!(
        first["method"], "elicitation/create",
        "asked anyway: {first}"
    );
    assert_eq!(
        first["result"]["_meta"][CONFIRMATION_META]["code"],
        "rate_limited"
    );
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
    drop(waiting);
}

#[tokio::test(start_paused = true)]
async fn a_hold_past_the_held_limit_is_refused_with_429_while_reads_go_on() {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
    let config = RateLimitConfig {
        held: LimitRates {
            default: Some(Rate {
                per_minute: NonZeroU32::new(1).expect("non-zero"),
                burst: NonZeroU32::new(1).expect("non-zero"),
            }),
            per_upstream: Default::default(),
        },
        ..RateLimitConfig::off()
    };
    let limits = RateLimits::new(&config, None, clock, ProxyMetrics::unregistered());
    let mut gateway = Gateway::with_settings(|settings| settings.rate_limits = Arc::new(limits));
    gateway.hold(&create_order()).await;

    let (response, received) = gateway.post(&[], &create_order()).await;

    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()),
        Some("60")
    );
    let answer = body_json(response).await;
    assert_eq!(answer["error"]["data"]["limit"], "held", "{answer}");
    assert!(received.is_empty() && received_nothing(&mut gateway.inner));
    let read = tool_call(4, "list_products", json!({}));
    let (response, received) = gateway.post(&[], &read).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(received.len(), 1, "reads are not held, so not limited");
}

mod cancellation;
mod fake_page;
mod out_of_band;
