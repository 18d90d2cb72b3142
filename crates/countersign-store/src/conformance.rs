//! The behaviour every backend must show, written once and run against each of them
//! (one shared conformance suite for every backend).
//!
//! Each check panics with a description on failure, so a backend's test is just
//! `conformance::run_all(store).await`. Keys are unique per call, so the suite can run against
//! a shared or long-lived Redis. Checks that need control over the backend's clock (expiry,
//! capacity) live with each backend's own tests.
//!
//! Needs a tokio runtime with timers; the concurrency checks want `flavor = "multi_thread"`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Barrier;

use crate::{AnswerHandover, ApprovalBook, ApprovalEntry, Consumption, Decided, ReplayStore};

/// How many tasks race for one `jti`.
pub const RACERS: usize = 100;

/// How long hand-over checks wait for answers that are expected.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long hand-over checks wait for answers that must not come.
const NO_ANSWER_TIMEOUT: Duration = Duration::from_millis(200);

/// Runs every [`ReplayStore`] check.
pub async fn run_all(store: Arc<dyn ReplayStore>) {
    ready_store_reports_ready(store.as_ref()).await;
    first_consume_wins_and_later_ones_are_spent(store.as_ref()).await;
    distinct_jtis_are_independent(store.as_ref()).await;
    jtis_are_compared_exactly(store.as_ref()).await;
    concurrent_consumes_of_one_jti_yield_exactly_one_first(Arc::clone(&store)).await;
    concurrent_consumes_of_distinct_jtis_all_succeed(store).await;
}

/// Runs every [`AnswerHandover`] check.
pub async fn run_all_handover(handover: Arc<dyn AnswerHandover>) {
    delivery_reaches_the_registered_waiter(handover.as_ref()).await;
    delivery_without_a_waiter_is_refused_and_not_buffered(handover.as_ref()).await;
    answer_is_delivered_at_most_once(handover.as_ref()).await;
    wait_without_an_answer_times_out_with_none(handover.as_ref()).await;
    abandoned_wait_unregisters(handover.as_ref()).await;
    a_waiter_is_reachable_only_while_it_waits(handover.as_ref()).await;
    answers_go_only_to_their_own_key(handover).await;
}

/// A key no earlier run can have used.
pub fn unique_key(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // `RandomState` is seeded from the OS per process; enough to separate concurrent runs.
    let random = RandomState::new().hash_one(nanos);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "conformance-{label}-{}-{random:016x}-{n}",
        std::process::id()
    )
}

/// An expiry ten minutes from now, so records outlive every check.
pub fn far_expiry_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    now.saturating_add(600_000)
}

pub async fn ready_store_reports_ready(store: &dyn ReplayStore) {
    store
        .check_ready()
        .await
        .expect("a working store reports ready");
}

pub async fn first_consume_wins_and_later_ones_are_spent(store: &dyn ReplayStore) {
    let jti = unique_key("sequential");
    let expiry = far_expiry_ms();
    assert_eq!(
        store.consume(&jti, expiry).await,
        Ok(Consumption::First),
        "first consume of a fresh jti"
    );
    for attempt in 2..=4 {
        assert_eq!(
            store.consume(&jti, expiry).await,
            Ok(Consumption::AlreadySpent),
            "consume number {attempt} of the same jti"
        );
    }
    // A replay cannot refresh or shorten the record with a different expiry either.
    assert_eq!(
        store.consume(&jti, expiry + 60_000).await,
        Ok(Consumption::AlreadySpent),
        "replay with a later expiry"
    );
    assert_eq!(
        store.consume(&jti, 1).await,
        Ok(Consumption::AlreadySpent),
        "replay with an expiry in the past"
    );
}

pub async fn distinct_jtis_are_independent(store: &dyn ReplayStore) {
    let expiry = far_expiry_ms();
    let a = unique_key("independent-a");
    let b = unique_key("independent-b");
    assert_eq!(store.consume(&a, expiry).await, Ok(Consumption::First));
    assert_eq!(
        store.consume(&b, expiry).await,
        Ok(Consumption::First),
        "spending one jti must not spend another"
    );
    assert_eq!(
        store.consume(&a, expiry).await,
        Ok(Consumption::AlreadySpent)
    );
    assert_eq!(
        store.consume(&b, expiry).await,
        Ok(Consumption::AlreadySpent)
    );
}

/// jtis are opaque byte strings: no case folding, trimming, prefix matching or key-syntax
/// interpretation (Redis glob and hash-tag characters included).
pub async fn jtis_are_compared_exactly(store: &dyn ReplayStore) {
    let expiry = far_expiry_ms();
    let base = unique_key("exact");
    let variants = [
        base.clone(),
        base.to_uppercase(),
        format!("{base}x"),
        format!("{base} "),
        format!("{base}*"),
        format!("{base}{{tag}}"),
        format!("{base}:jti:"),
        format!("{base}\u{0}"),
        format!("{base}é"),
        format!("{base}e\u{301}"),
    ];
    for jti in &variants {
        assert_eq!(
            store.consume(jti, expiry).await,
            Ok(Consumption::First),
            "{jti:?} is a distinct jti"
        );
    }
    for jti in &variants {
        assert_eq!(
            store.consume(jti, expiry).await,
            Ok(Consumption::AlreadySpent),
            "{jti:?} was spent"
        );
    }
}

/// docs/confirmation-token.md single use under contention: many simultaneous redemptions, one winner.
pub async fn concurrent_consumes_of_one_jti_yield_exactly_one_first(store: Arc<dyn ReplayStore>) {
    let jti: Arc<str> = Arc::from(unique_key("race"));
    let expiry = far_expiry_ms();
    let start = Arc::new(Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|_| {
            let (store, jti, start) = (Arc::clone(&store), Arc::clone(&jti), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                store.consume(&jti, expiry).await
            })
        })
        .collect();
    let mut firsts = 0;
    for task in tasks {
        match task.await.expect("consume task completes") {
            Ok(Consumption::First) => firsts += 1,
            Ok(Consumption::AlreadySpent) => {}
            Err(e) => panic!("concurrent consume failed: {e}"),
        }
    }
    assert_eq!(
        firsts, 1,
        "exactly one of {RACERS} concurrent consumes wins"
    );
}

pub async fn concurrent_consumes_of_distinct_jtis_all_succeed(store: Arc<dyn ReplayStore>) {
    let expiry = far_expiry_ms();
    let start = Arc::new(Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            let jti = unique_key(&format!("parallel-{i}"));
            tokio::spawn(async move {
                start.wait().await;
                store.consume(&jti, expiry).await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(
            task.await.expect("consume task completes"),
            Ok(Consumption::First),
            "distinct jtis do not contend"
        );
    }
}

pub async fn delivery_reaches_the_registered_waiter(handover: &dyn AnswerHandover) {
    let key = unique_key("deliver");
    let waiting = handover.wait(&key, ANSWER_TIMEOUT);
    // `wait` has registered before its future is polled, so an immediate answer is not lost.
    assert_eq!(
        handover.deliver(&key, b"{\"approve\":true}".to_vec()).await,
        Ok(true),
        "a registered waiter takes the answer"
    );
    assert_eq!(
        waiting.await,
        Ok(Some(b"{\"approve\":true}".to_vec())),
        "the waiter receives the exact bytes"
    );
}

pub async fn delivery_without_a_waiter_is_refused_and_not_buffered(handover: &dyn AnswerHandover) {
    let key = unique_key("early");
    assert_eq!(
        handover.deliver(&key, b"early".to_vec()).await,
        Ok(false),
        "nobody waits for this key"
    );
    assert_eq!(
        handover.wait(&key, NO_ANSWER_TIMEOUT).await,
        Ok(None),
        "an answer delivered before registration is not kept for a later waiter"
    );
}

pub async fn answer_is_delivered_at_most_once(handover: &dyn AnswerHandover) {
    let key = unique_key("once");
    let waiting = handover.wait(&key, ANSWER_TIMEOUT);
    assert_eq!(handover.deliver(&key, b"first".to_vec()).await, Ok(true));
    assert_eq!(
        handover.deliver(&key, b"second".to_vec()).await,
        Ok(false),
        "a second answer for the same key finds nobody"
    );
    assert_eq!(waiting.await, Ok(Some(b"first".to_vec())));
}

pub async fn wait_without_an_answer_times_out_with_none(handover: &dyn AnswerHandover) {
    let key = unique_key("timeout");
    assert_eq!(handover.wait(&key, NO_ANSWER_TIMEOUT).await, Ok(None));
    assert_eq!(
        handover.deliver(&key, b"late".to_vec()).await,
        Ok(false),
        "a timed-out waiter is unregistered"
    );
}

pub async fn abandoned_wait_unregisters(handover: &dyn AnswerHandover) {
    let key = unique_key("abandoned");
    drop(handover.wait(&key, ANSWER_TIMEOUT));
    assert_eq!(
        handover.deliver(&key, b"orphan".to_vec()).await,
        Ok(false),
        "a dropped waiter is unregistered"
    );
    // The key is free again for a new waiter.
    let waiting = handover.wait(&key, ANSWER_TIMEOUT);
    assert_eq!(handover.deliver(&key, b"again".to_vec()).await, Ok(true));
    assert_eq!(waiting.await, Ok(Some(b"again".to_vec())));
}

pub async fn a_waiter_is_reachable_only_while_it_waits(handover: &dyn AnswerHandover) {
    let key = unique_key("reachable");
    assert!(
        handover.reachable(&key).await.is_err(),
        "nobody waits for the key yet"
    );
    let waiting = handover.wait(&key, ANSWER_TIMEOUT);
    assert_eq!(handover.reachable(&key).await, Ok(()));
    assert_eq!(handover.deliver(&key, b"now".to_vec()).await, Ok(true));
    assert_eq!(waiting.await, Ok(Some(b"now".to_vec())));
    assert!(
        handover.reachable(&key).await.is_err(),
        "an answered waiter is gone"
    );
}

pub async fn answers_go_only_to_their_own_key(handover: Arc<dyn AnswerHandover>) {
    let a = unique_key("own-a");
    let b = unique_key("own-b");
    let wait_a = {
        let (handover, a) = (Arc::clone(&handover), a.clone());
        tokio::spawn(async move { handover.wait(&a, ANSWER_TIMEOUT).await })
    };
    let wait_b = {
        let (handover, b) = (Arc::clone(&handover), b.clone());
        tokio::spawn(async move { handover.wait(&b, NO_ANSWER_TIMEOUT).await })
    };
    // Spawned tasks register when they first run; retry until A's waiter is there.
    let mut delivered = false;
    for _ in 0..100 {
        if handover.deliver(&a, b"for-a".to_vec()).await == Ok(true) {
            delivered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(delivered, "A's waiter registers and takes its answer");
    assert_eq!(
        wait_a.await.expect("task completes"),
        Ok(Some(b"for-a".to_vec()))
    );
    assert_eq!(
        wait_b.await.expect("task completes"),
        Ok(None),
        "B receives nothing from A's answer"
    );
}

/// Runs every [`ApprovalBook`] check.
pub async fn run_all_book(book: Arc<dyn ApprovalBook>) {
    created_request_reads_back_undecided(book.as_ref()).await;
    duplicate_create_is_refused_and_keeps_the_first(book.as_ref()).await;
    unknown_request_reads_as_gone_and_cannot_be_decided(book.as_ref()).await;
    first_decision_wins_and_later_ones_report_it(book.as_ref()).await;
    expired_request_is_gone_and_cannot_be_decided(book.as_ref()).await;
    decision_made_before_the_wait_is_seen(book.as_ref()).await;
    undecided_wait_times_out_pending(book.as_ref()).await;
    wait_wakes_on_a_decision(Arc::clone(&book)).await;
    concurrent_decisions_take_exactly_one(book).await;
}

pub async fn created_request_reads_back_undecided(book: &dyn ApprovalBook) {
    let key = unique_key("book-create");
    let expiry = far_expiry_ms();
    book.create(&key, b"request \x00\xff".to_vec(), expiry)
        .await
        .expect("create");
    assert_eq!(
        book.read(&key).await,
        Ok(Some(ApprovalEntry {
            request: b"request \x00\xff".to_vec(),
            expires_at_unix_ms: expiry,
            decision: None,
        })),
        "a created request reads back with its exact bytes and expiry, undecided"
    );
    assert_eq!(
        book.read(&format!("{key}x")).await,
        Ok(None),
        "keys are compared exactly"
    );
}

pub async fn duplicate_create_is_refused_and_keeps_the_first(book: &dyn ApprovalBook) {
    let key = unique_key("book-duplicate");
    let expiry = far_expiry_ms();
    book.create(&key, b"first".to_vec(), expiry)
        .await
        .expect("create");
    assert!(
        book.create(&key, b"second".to_vec(), expiry).await.is_err(),
        "a second create under the same key is refused"
    );
    let entry = book.read(&key).await.expect("read").expect("still there");
    assert_eq!(
        entry.request,
        b"first".to_vec(),
        "the first request is kept"
    );
}

pub async fn unknown_request_reads_as_gone_and_cannot_be_decided(book: &dyn ApprovalBook) {
    let key = unique_key("book-unknown");
    assert_eq!(book.read(&key).await, Ok(None));
    assert_eq!(
        book.decide(&key, b"approved".to_vec()).await,
        Ok(Decided::Gone),
        "an unknown request cannot be decided"
    );
    assert_eq!(
        book.read(&key).await,
        Ok(None),
        "deciding an unknown request creates nothing"
    );
}

pub async fn first_decision_wins_and_later_ones_report_it(book: &dyn ApprovalBook) {
    let key = unique_key("book-decide");
    book.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    assert_eq!(
        book.decide(&key, b"approved by ada".to_vec()).await,
        Ok(Decided::First)
    );
    assert_eq!(
        book.decide(&key, b"denied by bob".to_vec()).await,
        Ok(Decided::Already(b"approved by ada".to_vec())),
        "a second decision is refused and told the first"
    );
    let entry = book.read(&key).await.expect("read").expect("present");
    assert_eq!(entry.decision, Some(b"approved by ada".to_vec()));
    assert_eq!(
        entry.request,
        b"call".to_vec(),
        "deciding keeps the request"
    );
}

pub async fn expired_request_is_gone_and_cannot_be_decided(book: &dyn ApprovalBook) {
    let key = unique_key("book-expired");
    // An expiry in the past: the request is gone as soon as it is written.
    book.create(&key, b"call".to_vec(), 1)
        .await
        .expect("create");
    assert_eq!(book.read(&key).await, Ok(None));
    assert_eq!(
        book.decide(&key, b"approved".to_vec()).await,
        Ok(Decided::Gone)
    );
    assert_eq!(book.wait(&key, ANSWER_TIMEOUT).await, Ok(None));
}

pub async fn decision_made_before_the_wait_is_seen(book: &dyn ApprovalBook) {
    let key = unique_key("book-early");
    book.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    book.decide(&key, b"approved".to_vec())
        .await
        .expect("decide");
    let entry = book
        .wait(&key, ANSWER_TIMEOUT)
        .await
        .expect("wait")
        .expect("present");
    assert_eq!(entry.decision, Some(b"approved".to_vec()));
}

pub async fn undecided_wait_times_out_pending(book: &dyn ApprovalBook) {
    let key = unique_key("book-timeout");
    book.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    let entry = book
        .wait(&key, NO_ANSWER_TIMEOUT)
        .await
        .expect("wait")
        .expect("present");
    assert_eq!(entry.decision, None, "nobody decided");
}

pub async fn wait_wakes_on_a_decision(book: Arc<dyn ApprovalBook>) {
    let key = unique_key("book-wake");
    book.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    let waiter = {
        let (book, key) = (Arc::clone(&book), key.clone());
        tokio::spawn(async move { book.wait(&key, Duration::from_secs(60)).await })
    };
    // Another key's decision does not end the wait with the wrong request.
    let other = unique_key("book-wake-other");
    book.create(&other, b"other".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    book.decide(&other, b"denied".to_vec())
        .await
        .expect("decide");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        book.decide(&key, b"approved".to_vec()).await,
        Ok(Decided::First)
    );
    let entry = tokio::time::timeout(ANSWER_TIMEOUT, waiter)
        .await
        .expect("the waiter wakes well before its timeout")
        .expect("task completes")
        .expect("wait")
        .expect("present");
    assert_eq!(entry.decision, Some(b"approved".to_vec()));
}

pub async fn concurrent_decisions_take_exactly_one(book: Arc<dyn ApprovalBook>) {
    let key: Arc<str> = Arc::from(unique_key("book-race"));
    book.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    let start = Arc::new(Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let (book, key, start) = (Arc::clone(&book), Arc::clone(&key), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                (i, book.decide(&key, format!("by {i}").into_bytes()).await)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut reported = Vec::new();
    for task in tasks {
        match task.await.expect("decide task completes") {
            (i, Ok(Decided::First)) => winners.push(format!("by {i}").into_bytes()),
            (_, Ok(Decided::Already(first))) => reported.push(first),
            (_, other) => panic!("concurrent decide failed: {other:?}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {RACERS} decisions is taken"
    );
    assert!(
        reported.iter().all(|first| *first == winners[0]),
        "every other decider is told the one that was taken"
    );
}
