//! The Redis approval book against a real `redis-server`: the conformance suite, expiry as
//! Redis keeps it, and decisions seen across replicas.

use std::sync::Arc;
use std::time::Duration;

use ::redis::AsyncCommands as _;

use super::super::RedisApprovalBook;
use super::server::RedisServer;
use super::{NAMESPACE, TIMEOUT};
use crate::conformance::{self, far_expiry_ms, unique_key};
use crate::{ApprovalBook, Decided};

async fn book(server: &RedisServer) -> RedisApprovalBook {
    RedisApprovalBook::connect(&server.url(), NAMESPACE, TIMEOUT)
        .await
        .expect("book connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_book_passes_the_conformance_suite() {
    let server = RedisServer::start().await;
    conformance::run_all_book(Arc::new(book(&server).await)).await;
}

#[tokio::test]
async fn request_is_a_hash_expiring_at_its_instant_with_its_decision() {
    let server = RedisServer::start().await;
    let book = book(&server).await;
    let key = unique_key("book-layout");
    let expiry = far_expiry_ms();
    book.create(&key, b"call".to_vec(), expiry)
        .await
        .expect("create");
    book.decide(&key, b"approved".to_vec())
        .await
        .expect("decide");
    let client = ::redis::Client::open(server.url()).expect("client");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let name = format!("{NAMESPACE}:{{{key}}}:approval");
    let at: i64 = ::redis::cmd("PEXPIRETIME")
        .arg(&name)
        .query_async(&mut connection)
        .await
        .expect("PEXPIRETIME");
    assert_eq!(
        at,
        i64::try_from(expiry).expect("fits"),
        "the decision keeps the request's expiry"
    );
    let decision: Vec<u8> = connection.hget(&name, "d").await.expect("HGET");
    assert_eq!(decision, b"approved".to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_on_one_replica_wakes_a_waiter_on_another() {
    let server = RedisServer::start().await;
    let (a, b) = (Arc::new(book(&server).await), book(&server).await);
    let key = unique_key("book-replicas");
    a.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    let waiter = {
        let (a, key) = (Arc::clone(&a), key.clone());
        // Longer than the re-read interval would allow to pass unnoticed: the wake-up must come
        // from the announcement or the re-read, not the timeout.
        tokio::spawn(async move { a.wait(&key, Duration::from_secs(60)).await })
    };
    assert_eq!(
        b.decide(&key, b"approved on b".to_vec()).await,
        Ok(Decided::First)
    );
    let entry = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("replica A's waiter wakes")
        .expect("task completes")
        .expect("wait")
        .expect("present");
    assert_eq!(entry.decision, Some(b"approved on b".to_vec()));
    assert_eq!(
        a.decide(&key, b"denied on a".to_vec()).await,
        Ok(Decided::Already(b"approved on b".to_vec())),
        "replica A is refused a second decision"
    );
}

#[tokio::test]
async fn stopped_redis_fails_every_operation() {
    let mut server = RedisServer::start().await;
    let book = book(&server).await;
    let key = unique_key("book-down");
    book.create(&key, b"call".to_vec(), far_expiry_ms())
        .await
        .expect("create");
    server.stop().await;
    assert!(
        book.read(&key).await.is_err(),
        "an unknown state is an error, not `gone`"
    );
    assert!(book.decide(&key, b"approved".to_vec()).await.is_err());
    assert!(book.wait(&key, Duration::from_secs(1)).await.is_err());
}
