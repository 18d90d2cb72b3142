use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};
use tower_test::mock;

use super::{AuditLayer, CallAudit, ForwardOutcome, ForwardReply};
use crate::body::{BoxError, ResponseBody};
use crate::clock::{Clock, ManualClock};
use crate::context::RequestContextExt;
use crate::testing::{AuditLines, json_response, recording_audit, unused_route};

fn call_audit(clock: &dyn Clock) -> CallAudit {
    CallAudit {
        principal: "ada".into(),
        session: Some("session-1".into()),
        method: "tools/call",
        target: "create_order".into(),
        risk: "write",
        rule: "default".into(),
        action: "confirm",
        channel: Some("token"),
        jti: Some("jti-1".into()),
        args_hash: Some("ah-1".into()),
        started: clock.now(),
    }
}

/// Sends `request` through the audit layer to a mock forwarder that answers `answer` (or fails,
/// for `Err`) after `delay`; returns what the client got and every audit line written.
async fn audited(
    request: Request<()>,
    clock: Arc<ManualClock>,
    delay: Duration,
    answer: Result<ForwardReply, &'static str>,
) -> (Result<Response<ResponseBody>, BoxError>, Vec<Value>) {
    let (sink, lines): (_, AuditLines) = recording_audit();
    let (inner, mut handle) = mock::pair::<Request<()>, ForwardReply>();
    let service = AuditLayer::new(sink, clock).layer(inner);
    let upstream = async {
        let (_, reply) = handle.next_request().await.expect("the call goes on");
        tokio::time::advance(delay).await;
        match answer {
            Ok(answer) => reply.send_response(answer),
            Err(error) => reply.send_error(error),
        }
    };
    let (response, ()) = tokio::join!(service.oneshot(request), upstream);
    // The service and its future are gone, so the sink's writer thread ends.
    (response, lines.collect())
}

fn request_with(audit: Option<CallAudit>) -> Request<()> {
    let mut request = Request::new(());
    let context = request.extensions_mut().context_mut();
    context.route = Some(unused_route());
    context.audits.extend(audit);
    request
}

fn outcome(outcome: &'static str) -> Result<ForwardReply, &'static str> {
    let response = json_response(&json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    Ok((response, ForwardOutcome(outcome)))
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_call_gets_one_outcome_line_with_its_latency() {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
    let request = request_with(Some(call_audit(clock.as_ref())));

    let (response, lines) = audited(
        request,
        clock,
        Duration::from_millis(250),
        outcome("upstream_error"),
    )
    .await;

    let response = response.expect("answered");
    assert_eq!(response.status(), StatusCode::OK, "the answer is relayed");
    let [line] = lines.as_slice() else {
        panic!("expected one audit line, got {lines:?}");
    };
    assert_eq!(line["latency_ms"].as_f64(), Some(250.0), "{line}");
    let mut line = line.clone();
    line.as_object_mut()
        .expect("an object")
        .remove("latency_ms");
    assert_eq!(
        line,
        json!({"ts": "2027-01-15T08:00:00.000Z", "event": "outcome", "principal": "ada",
               "upstream": "store", "method": "tools/call", "tool": "create_order",
               "session": "session-1", "risk": "write", "rule": "default",
               "action": "confirm", "channel": "token", "jti": "jti-1", "args_hash": "ah-1",
               "outcome": "upstream_error"})
    );
}

#[tokio::test(start_paused = true)]
async fn a_forwarder_that_fails_is_audited_as_an_internal_error() {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
    let request = request_with(Some(call_audit(clock.as_ref())));

    let (response, lines) = audited(request, clock, Duration::ZERO, Err("broken")).await;

    assert!(response.is_err(), "the failure is passed on");
    let [line] = lines.as_slice() else {
        panic!("expected one audit line, got {lines:?}");
    };
    assert_eq!(line["outcome"], "internal_error");
    assert_eq!(line["latency_ms"].as_f64(), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_call_audit_writes_nothing() {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));

    let (response, lines) = audited(
        request_with(None),
        clock,
        Duration::from_millis(250),
        outcome("forwarded"),
    )
    .await;

    let response = response.expect("answered");
    assert_eq!(response.status(), StatusCode::OK, "the answer is relayed");
    assert!(lines.is_empty(), "{lines:?}");
}

#[tokio::test(start_paused = true)]
async fn each_allowed_call_of_a_batch_gets_its_own_outcome_line() {
    let clock = Arc::new(ManualClock::at_unix_secs(1_800_000_000));
    let mut request = Request::new(());
    let mut second = call_audit(clock.as_ref());
    second.target = "list_products".into();
    let context = request.extensions_mut().context_mut();
    context.route = Some(unused_route());
    context.audits = vec![call_audit(clock.as_ref()), second];

    let (_, lines) = audited(request, clock, Duration::ZERO, outcome("forwarded")).await;

    let tools: Vec<&str> = lines.iter().filter_map(|l| l["tool"].as_str()).collect();
    assert_eq!(tools, ["create_order", "list_products"]);
    assert!(lines.iter().all(|l| l["outcome"] == "forwarded"));
}
