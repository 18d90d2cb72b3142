use std::sync::Arc;

use futures_util::FutureExt as _;

use super::*;
use crate::conformance;

#[tokio::test(start_paused = true)]
async fn memory_handover_passes_the_conformance_suite() {
    conformance::run_all_handover(Arc::new(MemoryAnswerHandover::new(100))).await;
}

#[tokio::test(start_paused = true)]
async fn second_waiter_for_a_busy_key_is_refused_and_the_first_keeps_it() {
    let handover = MemoryAnswerHandover::new(10);
    let first = handover.wait("k", Duration::from_secs(30));
    assert!(matches!(
        handover.wait("k", Duration::from_secs(30)).await,
        Err(StoreError::Unavailable(_))
    ));
    assert_eq!(handover.deliver("k", b"yes".to_vec()).await, Ok(true));
    assert_eq!(first.await, Ok(Some(b"yes".to_vec())));
}

#[tokio::test(start_paused = true)]
async fn waiters_beyond_capacity_are_refused_as_full() {
    let handover = MemoryAnswerHandover::new(2);
    let _a = handover.wait("a", Duration::from_secs(30));
    let _b = handover.wait("b", Duration::from_secs(30));
    assert_eq!(
        handover.wait("c", Duration::from_secs(30)).await,
        Err(StoreError::Full)
    );
    drop(_a);
    let c = handover.wait("c", Duration::from_secs(30));
    assert_eq!(handover.deliver("c", b"ok".to_vec()).await, Ok(true));
    assert_eq!(c.await, Ok(Some(b"ok".to_vec())));
}

#[tokio::test(start_paused = true)]
async fn every_ending_of_a_wait_removes_its_registration() {
    let handover = MemoryAnswerHandover::new(10);

    let answered = handover.wait("answered", Duration::from_secs(30));
    assert_eq!(handover.waiting(), 1);
    assert_eq!(handover.deliver("answered", b"x".to_vec()).await, Ok(true));
    assert_eq!(answered.await, Ok(Some(b"x".to_vec())));
    assert_eq!(handover.waiting(), 0);

    assert_eq!(
        handover.wait("timed-out", Duration::from_secs(30)).await,
        Ok(None)
    );
    assert_eq!(handover.waiting(), 0);

    drop(handover.wait("dropped", Duration::from_secs(30)));
    assert_eq!(handover.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn answer_delivered_after_the_deadline_but_before_the_waiter_ran_is_not_lost() {
    // Whatever the interleaving, `deliver` returns true exactly when the waiter gets the
    // answer, so the replica that received the human's approval never reports a hand-over
    // that silently went nowhere.
    let handover = MemoryAnswerHandover::new(10);
    let mut waiting = handover.wait("k", Duration::from_millis(100));
    assert_eq!((&mut waiting).now_or_never(), None, "the waiter is parked");
    tokio::time::advance(Duration::from_secs(1)).await;
    let delivered = handover.deliver("k", b"late".to_vec()).await;
    let received = waiting.await;
    assert_eq!(delivered, Ok(true));
    assert_eq!(received, Ok(Some(b"late".to_vec())));
}

#[tokio::test(start_paused = true)]
async fn deadline_counts_from_the_wait_call_not_the_first_poll() {
    let handover = MemoryAnswerHandover::new(10);
    let waiting = handover.wait("k", Duration::from_millis(100));
    tokio::time::advance(Duration::from_secs(1)).await;
    let started = tokio::time::Instant::now();
    assert_eq!(waiting.await, Ok(None));
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "already past its deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn delivery_after_a_timed_out_wait_reports_nobody_waiting() {
    let handover = MemoryAnswerHandover::new(10);
    assert_eq!(
        handover.wait("k", Duration::from_millis(100)).await,
        Ok(None)
    );
    assert_eq!(handover.deliver("k", b"late".to_vec()).await, Ok(false));
}

#[tokio::test(start_paused = true)]
async fn finished_waiter_does_not_unregister_its_successor() {
    let handover = MemoryAnswerHandover::new(10);
    let first = handover.wait("k", Duration::from_secs(30));
    assert_eq!(handover.deliver("k", b"one".to_vec()).await, Ok(true));
    // The key is free as soon as the answer is taken, before the first waiter finishes.
    let second = handover.wait("k", Duration::from_secs(30));
    assert_eq!(first.await, Ok(Some(b"one".to_vec())));
    assert_eq!(handover.waiting(), 1, "the successor is still registered");
    assert_eq!(handover.deliver("k", b"two".to_vec()).await, Ok(true));
    assert_eq!(second.await, Ok(Some(b"two".to_vec())));
}
