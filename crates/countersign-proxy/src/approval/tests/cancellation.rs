//! A client's `notifications/cancelled` for a held call and a person's approval of it arriving
//! together, before the held call's task runs again: the cancellation must win every time, and
//! the upstream receive the notification and never the call. (A client sends the cancellation
//! when its own timeout expires, so it can cross a late approval.) The same for a client that
//! went away as its person answered.

use std::pin::pin;

use futures_util::FutureExt;

use super::out_of_band::{answer, page_gateway, session_declaring};
use super::*;
use crate::testing::json_response;

/// Which of two ready outcomes settles a call must not be left to chance: enough rounds that a
/// fair coin would lose one.
const ROUNDS: usize = 24;

fn cancel_call_3() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": 3, "reason": "request timed out"}})
}

/// Hands `cancel_call_3` to the gateway and leaves it waiting on the upstream (the mock) for
/// the forwarded notification; then `approve`s; then lets the notification through. The held
/// call's task is not polled in between (a current-thread runtime runs it only when the test
/// waits), so both outcomes are ready when it next runs.
async fn cancel_then_approve(
    gateway: &mut Gateway,
    headers: &[(&str, &str)],
    approve: impl AsyncFnOnce(&Gateway),
) {
    let request = parsed_post(&unused_route(), Some("ada"), headers, &cancel_call_3());
    let mut cancelling = pin!(gateway.service.clone().oneshot(request));
    assert!(
        (&mut cancelling).now_or_never().is_none(),
        "the cancellation waits on the upstream for its notification"
    );
    approve(gateway).await;
    let (notification, reply) = gateway
        .inner
        .next_request()
        .await
        .expect("the cancellation is forwarded");
    let forwarded = payload_json(notification.body().payload().expect("a body"));
    assert_eq!(
        forwarded["method"], "notifications/cancelled",
        "{forwarded}"
    );
    reply.send_response(json_response(&json!({})));
    let Ok(accepted) = cancelling.await;
    assert_eq!(accepted.status(), StatusCode::OK);
}

/// Asserts that the held call ended as not approved and nothing reached the upstream. (Had
/// the call been forwarded, its stream would wait on the upstream: hence the timeout.)
async fn settled_unrun(
    gateway: &mut Gateway,
    body: &mut ResponseBody,
    pending: &mut String,
    round: usize,
) {
    let outcome = tokio::time::timeout(Duration::from_secs(1), next_sse_message(body, pending))
        .await
        .ok();
    assert!(
        received_nothing(&mut gateway.inner),
        "round {round}: the cancelled call reached the upstream"
    );
    let outcome = outcome.expect("the held call settles");
    assert_eq!(
        outcome["result"]["_meta"][CONFIRMATION_META]["code"], "not_approved",
        "round {round}: {outcome}"
    );
}

/// Holds `create_order` in an eliciting session opened on `gateway`: the session's headers, the
/// held call's stream (and what was read of it), and the question asked on it.
async fn ask(
    gateway: &mut Gateway,
) -> (
    [(&'static str, &'static str); 2],
    ResponseBody,
    String,
    Value,
) {
    let headers = eliciting_session(gateway);
    let (response, _) = gateway.post(&headers, &create_order()).await;
    let mut body = response.into_body();
    let mut pending = String::new();
    let question = next_sse_message(&mut body, &mut pending).await;
    assert_eq!(question["method"], "elicitation/create");
    (headers, body, pending, question)
}

fn approval() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_wins_over_an_answer_that_arrives_with_it() {
    for round in 0..ROUNDS {
        let mut gateway = Gateway::new();
        let (headers, mut body, mut pending, question) = ask(&mut gateway).await;

        cancel_then_approve(&mut gateway, &headers, async |gateway| {
            answer(gateway, &headers, &question, approval()).await;
        })
        .await;

        settled_unrun(&mut gateway, &mut body, &mut pending, round).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_wins_over_a_page_decision_that_arrives_with_it() {
    for round in 0..ROUNDS {
        let (mut gateway, page) = page_gateway();
        let headers =
            session_declaring(&gateway, json!({"elicitation": {"url": {}}}), "2025-11-25");
        let (response, _) = gateway.post(&headers, &create_order()).await;
        let mut body = response.into_body();
        let mut pending = String::new();
        let question = next_sse_message(&mut body, &mut pending).await;
        assert_eq!(question["params"]["mode"], "url");

        cancel_then_approve(&mut gateway, &headers, async |_| page.approve()).await;

        settled_unrun(&mut gateway, &mut body, &mut pending, round).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_gone_wins_over_an_answer_that_arrives_with_it() {
    for round in 0..ROUNDS {
        let mut gateway = Gateway::new();
        let (headers, body, _, question) = ask(&mut gateway).await;

        drop(body);
        answer(&gateway, &headers, &question, approval()).await;

        // The held call's task runs while the test sleeps.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            received_nothing(&mut gateway.inner),
            "round {round}: a call whose client went away reached the upstream"
        );
    }
}
