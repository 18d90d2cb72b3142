//! The rate limits under paused time: buckets, scopes, the shared store and its failures, and the
//! `calls` layer in front of a mock inner service standing in for everything below it.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use countersign_store::{BucketTake, RateDecision, RateShare, StoreError};
use countersign_testkit::mcp::{tool_call, tool_call_notification};
use futures_util::future::BoxFuture;
use http::StatusCode;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tower::Layer;

use super::*;
use crate::clock::ManualClock;
use crate::config::{LimitRates, OnStoreError, Rate, RateLimitConfig};
use crate::metrics::ProxyMetrics;
use crate::parse::Parsed;
use crate::testing::{
    body_json, call_answering, json_response, mock_inner, parsed_post, unused_route,
};
use crate::wire::RATE_LIMITED_ERROR_CODE;

const SECOND: Duration = Duration::from_secs(1);

/// `per_minute` a minute, `burst` at once.
fn rate(per_minute: u32, burst: u32) -> Rate {
    Rate {
        per_minute: NonZeroU32::new(per_minute).expect("non-zero"),
        burst: NonZeroU32::new(burst).expect("non-zero"),
    }
}

fn only(rate: Rate) -> LimitRates {
    LimitRates {
        default: Some(rate),
        per_upstream: BTreeMap::new(),
    }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::at_unix_secs(1_800_000_000))
}

fn limits(config: &RateLimitConfig) -> Arc<RateLimits> {
    Arc::new(RateLimits::new(
        config,
        None,
        clock(),
        ProxyMetrics::unregistered(),
    ))
}

/// `calls` at 6 a minute (one every 10 s), 3 at once; nothing else.
fn calls_config() -> RateLimitConfig {
    RateLimitConfig {
        calls: only(rate(6, 3)),
        ..RateLimitConfig::off()
    }
}

async fn calls(
    limits: &Arc<RateLimits>,
    principal: &str,
    upstream: &str,
    n: u32,
) -> Result<(), LimitHit> {
    limits.admit_calls(principal, upstream, n).outcome().await
}

#[tokio::test(start_paused = true)]
async fn a_principal_gets_its_burst_then_one_call_per_interval() {
    let limits = limits(&calls_config());
    for _ in 0..3 {
        assert_eq!(calls(&limits, "ada", "store", 1).await, Ok(()));
    }
    let hit = calls(&limits, "ada", "store", 1)
        .await
        .expect_err("past the burst");
    assert_eq!(hit.limit, Limit::Calls);
    assert_eq!(
        hit.reason,
        HitReason::Exhausted {
            retry_after: 10 * SECOND
        }
    );
    assert_eq!(hit.retry_after_secs(), Some(10));
    assert_eq!(hit.status(), StatusCode::TOO_MANY_REQUESTS);

    tokio::time::advance(9500 * Duration::from_millis(1)).await;
    let hit = calls(&limits, "ada", "store", 1)
        .await
        .expect_err("not yet");
    assert_eq!(hit.retry_after_secs(), Some(1), "half a second rounds up");
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(
        calls(&limits, "ada", "store", 1).await,
        Ok(()),
        "one token is back"
    );
    assert!(calls(&limits, "ada", "store", 1).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn principals_do_not_share_buckets() {
    let limits = limits(&calls_config());
    assert_eq!(calls(&limits, "ada", "store", 3).await, Ok(()));
    assert!(calls(&limits, "ada", "store", 1).await.is_err());
    assert_eq!(calls(&limits, "bob", "store", 3).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn upstreams_share_the_principals_bucket_unless_they_have_their_own() {
    let mut config = calls_config();
    config
        .calls
        .per_upstream
        .insert("tickets".into(), Some(rate(60, 1)));
    config.calls.per_upstream.insert("docs".into(), None);
    let limits = limits(&config);
    assert_eq!(calls(&limits, "ada", "store", 2).await, Ok(()));
    assert_eq!(
        calls(&limits, "ada", "search", 1).await,
        Ok(()),
        "search has no bucket of its own: the third token of the shared one"
    );
    assert!(calls(&limits, "ada", "store", 1).await.is_err());
    assert_eq!(
        calls(&limits, "ada", "tickets", 1).await,
        Ok(()),
        "its own bucket"
    );
    let hit = calls(&limits, "ada", "tickets", 1)
        .await
        .expect_err("burst 1");
    assert_eq!(hit.retry_after_secs(), Some(1));
    for _ in 0..10 {
        assert_eq!(
            calls(&limits, "ada", "docs", 3).await,
            Ok(()),
            "off for docs"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_takes_a_token_per_call_and_more_than_the_burst_never_fits() {
    let limits = limits(&calls_config());
    let hit = calls(&limits, "ada", "store", 4)
        .await
        .expect_err("4 > burst 3");
    assert_eq!(hit.reason, HitReason::OverBurst { cost: 4, burst: 3 });
    assert_eq!(hit.retry_after_secs(), None, "waiting does not help");
    assert_eq!(
        calls(&limits, "ada", "store", 3).await,
        Ok(()),
        "nothing was taken"
    );
    assert!(calls(&limits, "ada", "store", 1).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_hold_takes_held_and_its_question_together_or_neither() {
    let config = RateLimitConfig {
        held: only(rate(60, 3)),
        questions: only(rate(60, 1)),
        ..RateLimitConfig::off()
    };
    let limits = limits(&config);
    let hold = |asks| limits.admit_hold("ada", "store", asks).outcome();
    assert_eq!(hold(true).await, Ok(()));
    let hit = hold(true).await.expect_err("the question bucket is empty");
    assert_eq!(hit.limit, Limit::Questions);
    assert_eq!(hold(false).await, Ok(()), "a token hold asks nobody");
    assert_eq!(
        hold(false).await,
        Ok(()),
        "and the refused hold took no held token"
    );
    let hit = hold(false).await.expect_err("held is empty now");
    assert_eq!(hit.limit, Limit::Held);
}

#[tokio::test]
async fn every_hit_is_counted_by_limit() {
    let mut registry = Registry::default();
    let metrics = ProxyMetrics::register(&mut registry);
    let config = RateLimitConfig {
        questions: only(rate(60, 1)),
        ..calls_config()
    };
    let limits = Arc::new(RateLimits::new(&config, None, clock(), metrics));
    let _ = calls(&limits, "ada", "store", 5).await;
    let _ = limits.admit_hold("ada", "store", true).outcome().await;
    let _ = limits.admit_hold("ada", "store", true).outcome().await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    assert!(
        text.contains("countersign_limit_hits_total{limit=\"rate_calls\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("countersign_limit_hits_total{limit=\"rate_questions\"} 1"),
        "{text}"
    );
}

/// A shared store that answers with `answer`, counting its takes.
#[derive(Debug)]
struct FakeShare {
    answer: Result<RateDecision, StoreError>,
    takes: AtomicUsize,
}

impl RateShare for FakeShare {
    fn take<'a>(
        &'a self,
        group: &'a str,
        takes: &'a [BucketTake<'a>],
    ) -> BoxFuture<'a, Result<RateDecision, StoreError>> {
        assert_eq!(group, "ada", "the principal is the group");
        assert!(
            takes
                .iter()
                .all(|t| t.bucket == "held" || t.bucket == "questions:store")
        );
        self.takes.fetch_add(1, Ordering::SeqCst);
        let answer = self.answer.clone();
        Box::pin(async move { answer })
    }
}

fn shared(
    answer: Result<RateDecision, StoreError>,
    on_store_error: OnStoreError,
) -> (Arc<RateLimits>, Arc<FakeShare>) {
    let mut config = RateLimitConfig {
        held: only(rate(60, 1)),
        on_store_error,
        ..RateLimitConfig::off()
    };
    config
        .questions
        .per_upstream
        .insert("store".into(), Some(rate(60, 5)));
    let share = Arc::new(FakeShare {
        answer,
        takes: AtomicUsize::new(0),
    });
    let limits = RateLimits::new(
        &config,
        Some(share.clone()),
        clock(),
        ProxyMetrics::unregistered(),
    );
    (Arc::new(limits), share)
}

#[tokio::test(start_paused = true)]
async fn the_shared_store_decides_and_its_refusal_names_the_bucket() {
    let refused = RateDecision::Refused {
        bucket: 1,
        retry_after: 2 * SECOND,
    };
    let (limits, share) = shared(Ok(refused), OnStoreError::Open);
    let admission = limits.admit_hold("ada", "store", true);
    assert!(matches!(admission, Admission::Pending(_)));
    let hit = admission.outcome().await.expect_err("the store refused");
    assert_eq!(hit.limit, Limit::Questions);
    assert_eq!(hit.retry_after_secs(), Some(2));
    assert_eq!(share.takes.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_store_lets_this_replica_decide_when_open() {
    let (limits, _) = shared(Err(StoreError::Timeout), OnStoreError::Open);
    assert_eq!(
        limits.admit_hold("ada", "store", false).outcome().await,
        Ok(())
    );
    let hit = limits
        .admit_hold("ada", "store", false)
        .outcome()
        .await
        .expect_err("the replica's own bucket of 1 is empty");
    assert_eq!(
        hit.reason,
        HitReason::Exhausted {
            retry_after: SECOND
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_store_rests_a_second_before_it_is_asked_again() {
    let (limits, share) = shared(Err(StoreError::Timeout), OnStoreError::Open);
    assert_eq!(
        limits.admit_hold("ada", "store", false).outcome().await,
        Ok(())
    );
    let resting = limits.admit_hold("ada", "store", false);
    assert!(
        matches!(resting, Admission::Ready(_)),
        "decided at once, without waiting on the store"
    );
    assert_eq!(share.takes.load(Ordering::SeqCst), 1);
    tokio::time::advance(SECOND).await;
    let _ = limits.admit_hold("ada", "store", false).outcome().await;
    assert_eq!(
        share.takes.load(Ordering::SeqCst),
        2,
        "asked again after its rest"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_store_refuses_with_503_when_closed() {
    let (limits, _) = shared(
        Err(StoreError::Unavailable("down".into())),
        OnStoreError::Closed,
    );
    let hit = limits
        .admit_hold("ada", "store", true)
        .outcome()
        .await
        .expect_err("fails closed");
    assert_eq!(hit.reason, HitReason::StoreUnavailable);
    assert_eq!(hit.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(hit.retry_after_secs(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_full_table_forgets_principals_rather_than_growing() {
    let config = RateLimitConfig {
        max_principals: NonZeroUsize::new(8).expect("non-zero"),
        ..calls_config()
    };
    let limits = limits(&config);
    for n in 0..100 {
        assert_eq!(calls(&limits, &format!("p{n}"), "store", 1).await, Ok(()));
    }
    assert!(limits.local.principals().len() <= 8);
}

// ---- the `calls` layer ---------------------------------------------------------------------

/// POSTs `body` as `caller` through the layer over a mock that answers whatever reaches it;
/// returns the response and how many requests went on.
async fn through_layer(
    limits: &Arc<RateLimits>,
    caller: Option<&str>,
    body: &Value,
) -> (http::Response<crate::body::ResponseBody>, usize) {
    let (inner, mut handle) = mock_inner::<Parsed>();
    let service = LimitCallsLayer::new(limits.clone(), ProxyMetrics::unregistered()).layer(inner);
    let request = parsed_post(&unused_route(), caller, &[], body);
    let answer = |_: &http::Request<Parsed>| {
        json_response(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
    };
    let (response, received) = call_answering(service, request, &mut handle, answer).await;
    (response, received.len())
}

#[tokio::test(start_paused = true)]
async fn a_principal_over_its_calls_limit_gets_429_and_nothing_goes_on() {
    let limits = limits(&calls_config());
    for id in 0..3 {
        let (response, forwarded) =
            through_layer(&limits, Some("ada"), &tool_call(id, "read", json!({}))).await;
        assert_eq!((response.status(), forwarded), (StatusCode::OK, 1));
    }
    let (response, forwarded) =
        through_layer(&limits, Some("ada"), &tool_call(7, "read", json!({}))).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(forwarded, 0, "a refused call goes nowhere");
    assert_eq!(
        response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()),
        Some("10")
    );
    let answer = body_json(response).await;
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["error"]["code"], RATE_LIMITED_ERROR_CODE);
    assert_eq!(
        answer["error"]["data"],
        json!({"limit": "calls", "reason": "exhausted", "retryAfterSeconds": 10})
    );

    let (response, forwarded) =
        through_layer(&limits, Some("bob"), &tool_call(8, "read", json!({}))).await;
    assert_eq!(
        (response.status(), forwarded),
        (StatusCode::OK, 1),
        "bob is unaffected"
    );
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let (response, forwarded) = through_layer(&limits, Some("ada"), &ping).await;
    assert_eq!(
        (response.status(), forwarded),
        (StatusCode::OK, 1),
        "only tool calls count"
    );
}

#[tokio::test(start_paused = true)]
async fn notification_shaped_and_batched_calls_count_too() {
    let limits = limits(&calls_config());
    let (response, forwarded) = through_layer(
        &limits,
        Some("ada"),
        &tool_call_notification("read", json!({})),
    )
    .await;
    assert_eq!((response.status(), forwarded), (StatusCode::OK, 1));
    let batch = json!([
        tool_call(1, "read", json!({})),
        tool_call(2, "read", json!({})),
        tool_call(3, "read", json!({}))
    ]);
    let (response, forwarded) = through_layer(&limits, Some("ada"), &batch).await;
    assert_eq!(
        (response.status(), forwarded),
        (StatusCode::TOO_MANY_REQUESTS, 0)
    );
    let answer = body_json(response).await;
    assert_eq!(answer["id"], Value::Null);
    assert_eq!(answer["error"]["data"]["limit"], "calls");
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_principal_is_left_to_the_layers_that_refuse_it() {
    let limits = limits(&calls_config());
    for id in 0..5 {
        let (_, forwarded) = through_layer(&limits, None, &tool_call(id, "read", json!({}))).await;
        assert_eq!(
            forwarded, 1,
            "classification answers 401 for it, not this layer"
        );
    }
}
