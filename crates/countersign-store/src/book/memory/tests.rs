use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::ManualClock;
use crate::conformance;

const NOW: u64 = 1_800_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_book_passes_the_conformance_suite() {
    conformance::run_all_book(Arc::new(MemoryApprovalBook::new(10_000))).await;
}

#[tokio::test]
async fn request_and_its_decision_expire_together() {
    let clock = Arc::new(ManualClock::new(NOW));
    let book = MemoryApprovalBook::with_clock(10, clock.clone());
    book.create("a", b"call".to_vec(), NOW + 1_000)
        .await
        .expect("create");
    assert_eq!(
        book.decide("a", b"approved".to_vec()).await,
        Ok(Decided::First)
    );
    clock.advance(999);
    assert!(
        book.read("a").await.expect("read").is_some(),
        "alive until its expiry"
    );
    clock.advance(1);
    assert_eq!(
        book.read("a").await,
        Ok(None),
        "the approval expired with its request"
    );
    assert_eq!(
        book.decide("a", b"denied".to_vec()).await,
        Ok(Decided::Gone)
    );
}

#[tokio::test]
async fn expired_pending_request_cannot_be_approved() {
    let clock = Arc::new(ManualClock::new(NOW));
    let book = MemoryApprovalBook::with_clock(10, clock.clone());
    book.create("a", b"call".to_vec(), NOW + 1_000)
        .await
        .expect("create");
    clock.advance(5_000);
    assert_eq!(
        book.decide("a", b"approved".to_vec()).await,
        Ok(Decided::Gone)
    );
}

#[tokio::test]
async fn full_book_refuses_new_requests_and_keeps_pending_ones() {
    let clock = Arc::new(ManualClock::new(NOW));
    let book = MemoryApprovalBook::with_clock(2, clock.clone());
    book.create("a", b"a".to_vec(), NOW + 1_000)
        .await
        .expect("a");
    book.create("b", b"b".to_vec(), NOW + 2_000)
        .await
        .expect("b");
    assert_eq!(
        book.create("c", b"c".to_vec(), NOW + 2_000).await,
        Err(StoreError::Full),
        "no live request is evicted to make room"
    );
    assert!(book.read("a").await.expect("read").is_some());
    clock.advance(1_000);
    book.create("c", b"c".to_vec(), NOW + 3_000)
        .await
        .expect("an expired request made room");
    assert_eq!(book.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn waiter_learns_of_expiry_without_waiting_out_its_timeout() {
    // On paused time the sleep to the expiry completes at once; the manual clock then says the
    // request is gone.
    let clock = Arc::new(ManualClock::new(NOW));
    let book = MemoryApprovalBook::with_clock(10, clock.clone());
    book.create("a", b"call".to_vec(), NOW + 1_000)
        .await
        .expect("create");
    let waiting = book.wait("a", Duration::from_secs(3600));
    clock.advance(1_000);
    assert_eq!(waiting.await, Ok(None));
}
