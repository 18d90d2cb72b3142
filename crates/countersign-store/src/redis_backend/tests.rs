//! The Redis backends against real `redis-server` processes: the shared conformance suite,
//! fault injection (stopped, restarted, full, read-only, paused), cross-replica hand-over,
//! contention across store instances and Redis Cluster.

mod book;
mod rates;
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redis::AsyncCommands as _;

use super::*;
use crate::conformance::{self, far_expiry_ms, unique_key};
use crate::{AnswerHandover, Consumption, PinShare, ReplayStore, StoreError};
use server::RedisServer;

/// Generous, so a loaded 2-core CI machine does not turn a slow answer into a failure; the
/// fault tests that are about timing use their own.
const TIMEOUT: Duration = Duration::from_secs(1);

const NAMESPACE: &str = "test";

async fn store(server: &RedisServer) -> RedisReplayStore {
    RedisReplayStore::connect(&server.url(), NAMESPACE, TIMEOUT)
        .await
        .expect("store connects")
}

async fn handover(server: &RedisServer) -> RedisAnswerHandover {
    RedisAnswerHandover::connect(&server.url(), NAMESPACE, TIMEOUT)
        .await
        .expect("hand-over connects")
}

/// Polls `condition` every 20 ms for up to 15 s.
async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A remote replica sees a waiter once its record is written, one round trip after `wait`.
async fn record_written(server: &RedisServer, key: &str) {
    let admin = server.admin().await;
    let record = format!("{NAMESPACE}:{{{key}}}:waiter");
    eventually("the waiter's record is written", || {
        let (mut admin, record) = (admin.clone(), record.clone());
        async move { admin.exists::<_, bool>(&record).await.unwrap_or(false) }
    })
    .await;
}

// ---- replay store --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_passes_the_conformance_suite() {
    let server = RedisServer::start().await;
    conformance::run_all(Arc::new(store(&server).await)).await;
}

/// A consume from another runtime (as from another connection worker) goes over a connection
/// of that runtime's own, and spends the same records: a token spent on one worker is spent
/// for all, and the home runtime keeps its connection when the other runtime is gone.
#[tokio::test]
async fn each_runtime_consumes_over_its_own_connection_and_spends_the_same_records() {
    let server = RedisServer::start().await;
    let store = Arc::new(store(&server).await);
    let jti = unique_key("per-runtime");
    let expiry = far_expiry_ms();

    let elsewhere = {
        let (store, jti) = (store.clone(), jti.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let first = store.consume(&jti, expiry).await;
                (first, store.consume(&jti, expiry).await)
            })
        })
        .join()
        .expect("the other runtime's thread")
    };

    assert_eq!(
        elsewhere,
        (Ok(Consumption::First), Ok(Consumption::AlreadySpent))
    );
    assert_eq!(
        store.runtime_connections(),
        1,
        "the other runtime had its own"
    );
    assert_eq!(
        store.consume(&jti, expiry).await,
        Ok(Consumption::AlreadySpent)
    );
    let fresh = unique_key("per-runtime-home");
    assert_eq!(store.consume(&fresh, expiry).await, Ok(Consumption::First));
    assert_eq!(
        store.runtime_connections(),
        1,
        "home uses the shared connection"
    );
}

#[tokio::test]
async fn record_is_a_hash_tagged_key_expiring_at_the_given_instant() {
    let server = RedisServer::start().await;
    let store = store(&server).await;
    let jti = unique_key("layout");
    let expiry = far_expiry_ms();
    assert_eq!(store.consume(&jti, expiry).await, Ok(Consumption::First));
    let mut admin = server.admin().await;
    let key = format!("{NAMESPACE}:{{{jti}}}:jti");
    let value: Option<String> = admin.get(&key).await.expect("GET");
    assert_eq!(value.as_deref(), Some("1"));
    let expires_at: u64 = ::redis::cmd("PEXPIRETIME")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .expect("PEXPIRETIME");
    assert_eq!(
        expires_at, expiry,
        "PXAT is the caller's instant, unchanged"
    );
}

#[tokio::test]
async fn namespaces_do_not_share_records() {
    let server = RedisServer::start().await;
    let a = RedisReplayStore::connect(&server.url(), "tenant-a", TIMEOUT)
        .await
        .expect("connects");
    let b = RedisReplayStore::connect(&server.url(), "tenant-b", TIMEOUT)
        .await
        .expect("connects");
    let jti = unique_key("ns");
    assert_eq!(
        a.consume(&jti, far_expiry_ms()).await,
        Ok(Consumption::First)
    );
    assert_eq!(
        b.consume(&jti, far_expiry_ms()).await,
        Ok(Consumption::First)
    );
}

#[tokio::test]
async fn malformed_namespaces_are_refused() {
    let server = RedisServer::start().await;
    for namespace in ["", "a{b}", "a b", "a*", &"n".repeat(65)] {
        assert!(
            RedisReplayStore::connect(&server.url(), namespace, TIMEOUT)
                .await
                .is_err(),
            "{namespace:?}"
        );
    }
}

#[tokio::test]
async fn unreachable_redis_fails_connect() {
    let mut server = RedisServer::start().await;
    let url = server.url();
    server.stop().await;
    assert!(matches!(
        RedisReplayStore::connect(&url, NAMESPACE, TIMEOUT).await,
        Err(StoreError::Unavailable(_) | StoreError::Timeout)
    ));
    assert!(
        RedisAnswerHandover::connect(&url, NAMESPACE, TIMEOUT)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn stopped_redis_refuses_consumes_within_the_timeout() {
    let mut server = RedisServer::start().await;
    let store = store(&server).await;
    assert_eq!(
        store.consume(&unique_key("before"), far_expiry_ms()).await,
        Ok(Consumption::First)
    );
    server.stop().await;
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = store.consume(&unique_key("down"), far_expiry_ms()).await;
        assert!(
            matches!(
                outcome,
                Err(StoreError::Unavailable(_) | StoreError::Timeout)
            ),
            "{outcome:?}"
        );
        assert!(
            started.elapsed() < TIMEOUT + Duration::from_millis(500),
            "answered in {:?}",
            started.elapsed()
        );
    }
    assert!(store.check_ready().await.is_err(), "not ready while down");
}

#[tokio::test]
async fn restarted_redis_is_used_again_by_the_same_store() {
    let mut server = RedisServer::start().await;
    let store = store(&server).await;
    assert_eq!(
        store.consume(&unique_key("before"), far_expiry_ms()).await,
        Ok(Consumption::First)
    );
    server.stop().await;
    assert!(
        store
            .consume(&unique_key("down"), far_expiry_ms())
            .await
            .is_err()
    );
    server.restart().await;
    eventually("consumes work again", || async {
        store.consume(&unique_key("after"), far_expiry_ms()).await == Ok(Consumption::First)
    })
    .await;
    store.check_ready().await.expect("ready again");
    let jti = unique_key("after-restart");
    assert_eq!(
        store.consume(&jti, far_expiry_ms()).await,
        Ok(Consumption::First)
    );
    assert_eq!(
        store.consume(&jti, far_expiry_ms()).await,
        Ok(Consumption::AlreadySpent)
    );
}

#[tokio::test]
async fn idle_store_reconnects_by_itself_after_a_restart() {
    let mut server = RedisServer::start().await;
    let store = store(&server).await;
    assert_eq!(
        store.consume(&unique_key("before"), far_expiry_ms()).await,
        Ok(Consumption::First)
    );
    server.restart().await;
    // No command while Redis was away: the RESP3 connection saw the socket close and
    // reconnected in the background, so the very first consume afterwards already works.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        store
            .consume(&unique_key("first-after"), far_expiry_ms())
            .await,
        Ok(Consumption::First)
    );
}

#[tokio::test]
async fn redis_out_of_memory_refuses_consumes_as_full() {
    let server = RedisServer::start().await;
    let store = store(&server).await;
    let mut admin = server.admin().await;
    let jti = unique_key("spent-before-oom");
    assert_eq!(
        store.consume(&jti, far_expiry_ms()).await,
        Ok(Consumption::First)
    );
    let _: () = ::redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"][..])
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET");
    assert_eq!(
        store.consume(&unique_key("oom"), far_expiry_ms()).await,
        Err(StoreError::Full)
    );
    // Redis refuses the write before looking at the key, so even a replay reads as an error.
    assert_eq!(
        store.consume(&jti, far_expiry_ms()).await,
        Err(StoreError::Full)
    );
    let _: () = ::redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "0"][..])
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET");
    assert_eq!(
        store.consume(&unique_key("room"), far_expiry_ms()).await,
        Ok(Consumption::First)
    );
}

#[tokio::test]
async fn read_only_replica_refuses_consumes() {
    let replica = RedisServer::start().await;
    let primary = RedisServer::start().await;
    let store = store(&replica).await;
    let mut admin = replica.admin().await;
    let _: () = ::redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut admin)
        .await
        .expect("REPLICAOF");
    eventually("the replica has synced", || {
        let mut admin = admin.clone();
        async move {
            let info: String = ::redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            info.contains("master_link_status:up")
        }
    })
    .await;
    match store
        .consume(&unique_key("readonly"), far_expiry_ms())
        .await
    {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("READONLY"), "{message}");
        }
        other => panic!("a replica must refuse the write, got {other:?}"),
    }
    assert!(store.check_ready().await.is_ok(), "PING still works");
}

#[tokio::test]
async fn paused_redis_times_out_and_the_late_write_still_counts() {
    let server = RedisServer::start().await;
    let timeout = Duration::from_millis(200);
    let store = RedisReplayStore::connect(&server.url(), NAMESPACE, timeout)
        .await
        .expect("connects");
    let mut admin = server.admin().await;
    let _: () = ::redis::cmd("CLIENT")
        .arg(&["PAUSE", "1500", "WRITE"][..])
        .query_async(&mut admin)
        .await
        .expect("CLIENT PAUSE");
    let jti = unique_key("paused");
    let started = Instant::now();
    assert_eq!(
        store.consume(&jti, far_expiry_ms()).await,
        Err(StoreError::Timeout)
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_millis(400),
        "timed out after {elapsed:?}"
    );
    // The SET ran once the pause ended: a timed-out consume must be treated as spent, and is.
    eventually("the pause is over", || async {
        store
            .consume(&unique_key("probe"), far_expiry_ms())
            .await
            .is_ok()
    })
    .await;
    assert_eq!(
        store.consume(&jti, far_expiry_ms()).await,
        Ok(Consumption::AlreadySpent)
    );
}

#[test]
fn every_redis_error_reply_refuses() {
    for reply in [
        "-READONLY You can't write against a read only replica.",
        "-CLUSTERDOWN The cluster is down",
        "-LOADING Redis is loading the dataset in memory",
        "-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "-TRYAGAIN Multiple keys request during rehashing of slot",
        "-MOVED 3999 127.0.0.1:6381",
        "-ASK 3999 127.0.0.1:6381",
        "-NOPERM this user has no permissions to run the 'set' command",
        "-ERR invalid expire time in 'set' command",
        "-BUSY Redis is busy running a script.",
    ] {
        let error = ::redis::parse_redis_value(format!("{reply}\r\n").as_bytes())
            .and_then(::redis::Value::extract_error)
            .expect_err("an error reply");
        assert!(
            matches!(store_error(error), StoreError::Unavailable(_)),
            "{reply}"
        );
    }
    let oom =
        ::redis::parse_redis_value(b"-OOM command not allowed when used memory > 'maxmemory'.\r\n")
            .and_then(::redis::Value::extract_error)
            .expect_err("an error reply");
    assert_eq!(store_error(oom), StoreError::Full);
}

#[tokio::test]
async fn unexpected_set_replies_refuse() {
    assert_eq!(set_nx_outcome(&::redis::Value::Okay), Some(true));
    assert_eq!(set_nx_outcome(&::redis::Value::Nil), Some(false));
    assert_eq!(set_nx_outcome(&::redis::Value::Int(1)), None);
    assert_eq!(
        set_nx_outcome(&::redis::Value::BulkString(b"OK".to_vec())),
        None
    );
}

/// docs/confirmation-token.md across replicas: 1000 jtis, each raced by 10 simultaneous consumes spread
/// over 3 separate stores. 50 jtis race at a time, so a slow CI machine measures contention
/// on each jti rather than the length of one 10 000-command queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_consumes_across_three_stores_have_exactly_one_winner_per_jti() {
    use futures_util::StreamExt as _;
    const JTIS: usize = 1000;
    const RACERS: usize = 10;
    let server = RedisServer::start().await;
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(store(&server).await));
    }
    let expiry = far_expiry_ms();
    let races = futures_util::stream::iter(0..JTIS).map(|i| {
        let stores = stores.clone();
        async move {
            let jti: Arc<str> = Arc::from(unique_key(&format!("race3-{i}")));
            let start = Arc::new(tokio::sync::Barrier::new(RACERS));
            let racers: Vec<_> = (0..RACERS)
                .map(|racer| {
                    let store = Arc::clone(&stores[(i + racer) % stores.len()]);
                    let (jti, start) = (Arc::clone(&jti), Arc::clone(&start));
                    tokio::spawn(async move {
                        start.wait().await;
                        store.consume(&jti, expiry).await
                    })
                })
                .collect();
            let mut firsts = 0;
            for racer in racers {
                match racer.await.expect("consume task completes") {
                    Ok(Consumption::First) => firsts += 1,
                    Ok(Consumption::AlreadySpent) => {}
                    Err(error) => panic!("consume failed: {error}"),
                }
            }
            firsts
        }
    });
    let firsts: Vec<usize> = races.buffer_unordered(50).collect().await;
    assert_eq!(firsts.len(), JTIS);
    assert!(
        firsts.iter().all(|n| *n == 1),
        "every jti has exactly one winner"
    );
    assert_eq!(firsts.iter().sum::<usize>(), JTIS);
}

#[tokio::test]
async fn debug_output_shows_no_credentials() {
    let server = RedisServer::start().await;
    let url = format!("redis://:@127.0.0.1:{}/0", server.port());
    let store = RedisReplayStore::connect(&url, NAMESPACE, TIMEOUT)
        .await
        .expect("connects");
    let debug = format!("{store:?}");
    assert!(
        debug.contains(&format!("redis://127.0.0.1:{}", server.port())),
        "{debug}"
    );
    let handover = handover(&server).await;
    assert!(format!("{handover:?}").contains("subscribed: true"));
}

// ---- answer hand-over ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_handover_passes_the_conformance_suite() {
    let server = RedisServer::start().await;
    conformance::run_all_handover(Arc::new(handover(&server).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_delivered_on_another_replica_reaches_the_waiter() {
    let server = RedisServer::start().await;
    let (a, b) = (handover(&server).await, handover(&server).await);
    let key = unique_key("cross");
    let waiting = a.wait(&key, Duration::from_secs(10));
    assert_eq!(
        a.reachable(&key).await,
        Ok(()),
        "reachable once another replica can claim the waiter"
    );
    assert_eq!(
        b.deliver(&key, b"{\"approve\":true}".to_vec()).await,
        Ok(true)
    );
    assert_eq!(waiting.await, Ok(Some(b"{\"approve\":true}".to_vec())));
    assert_eq!(
        b.deliver(&key, b"again".to_vec()).await,
        Ok(false),
        "the record was claimed"
    );
    assert_eq!(a.waiting(), 0);
}

#[tokio::test]
async fn delivery_with_no_waiter_on_any_replica_is_refused() {
    let server = RedisServer::start().await;
    let (a, b) = (handover(&server).await, handover(&server).await);
    let key = unique_key("nobody");
    assert_eq!(b.deliver(&key, b"x".to_vec()).await, Ok(false));
    assert_eq!(a.deliver(&key, b"x".to_vec()).await, Ok(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_replicas_delivering_at_once_exactly_one_succeeds() {
    let server = RedisServer::start().await;
    let (a, b) = (
        Arc::new(handover(&server).await),
        Arc::new(handover(&server).await),
    );
    for round in 0..20 {
        let key = unique_key(&format!("duel-{round}"));
        let waiting = a.wait(&key, Duration::from_secs(10));
        record_written(&server, &key).await;
        let on_a = {
            let (a, key) = (Arc::clone(&a), key.clone());
            tokio::spawn(async move { a.deliver(&key, b"from-a".to_vec()).await })
        };
        let on_b = {
            let (b, key) = (Arc::clone(&b), key.clone());
            tokio::spawn(async move { b.deliver(&key, b"from-b".to_vec()).await })
        };
        let on_a = on_a.await.expect("task completes");
        let on_b = on_b.await.expect("task completes");
        let received = waiting.await.expect("wait succeeds");
        match (on_a, on_b) {
            (Ok(true), Ok(false)) => assert_eq!(received.as_deref(), Some(&b"from-a"[..])),
            (Ok(false), Ok(true)) => assert_eq!(received.as_deref(), Some(&b"from-b"[..])),
            other => panic!("round {round}: exactly one delivery must succeed, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn answer_for_a_timed_out_remote_waiter_is_refused() {
    let server = RedisServer::start().await;
    let (a, b) = (handover(&server).await, handover(&server).await);
    let key = unique_key("late");
    assert_eq!(a.wait(&key, Duration::from_millis(200)).await, Ok(None));
    assert_eq!(b.deliver(&key, b"late".to_vec()).await, Ok(false));
}

#[tokio::test]
async fn dropped_remote_waiter_refuses_later_answers_and_frees_the_key() {
    let server = RedisServer::start().await;
    let (a, b) = (handover(&server).await, handover(&server).await);
    let key = unique_key("dropped");
    let waiting = a.wait(&key, Duration::from_secs(10));
    record_written(&server, &key).await;
    drop(waiting);
    assert_eq!(b.deliver(&key, b"orphan".to_vec()).await, Ok(false));
    // The record is deleted (or was claimed above), so B may wait on the key now.
    let admin = server.admin().await;
    let record = format!("{NAMESPACE}:{{{key}}}:waiter");
    eventually("the record is gone", || {
        let (mut admin, record) = (admin.clone(), record.clone());
        async move { !admin.exists::<_, bool>(&record).await.unwrap_or(true) }
    })
    .await;
    let waiting = b.wait(&key, Duration::from_secs(10));
    record_written(&server, &key).await;
    assert_eq!(a.deliver(&key, b"again".to_vec()).await, Ok(true));
    assert_eq!(waiting.await, Ok(Some(b"again".to_vec())));
}

#[tokio::test]
async fn waiter_record_lives_for_the_wait_plus_a_second() {
    let server = RedisServer::start().await;
    let a = handover(&server).await;
    let key = unique_key("ttl");
    let waiting = a.wait(&key, Duration::from_secs(30));
    record_written(&server, &key).await;
    let mut admin = server.admin().await;
    let ttl: i64 = admin
        .pttl(format!("{NAMESPACE}:{{{key}}}:waiter"))
        .await
        .expect("PTTL");
    assert!((29_000..=31_000).contains(&ttl), "PTTL {ttl}");
    drop(waiting);
}

#[tokio::test]
async fn waiting_on_a_key_another_replica_awaits_fails() {
    let server = RedisServer::start().await;
    let (a, b) = (handover(&server).await, handover(&server).await);
    let key = unique_key("contested");
    let first = a.wait(&key, Duration::from_secs(10));
    record_written(&server, &key).await;
    let second = b.wait(&key, Duration::from_secs(10));
    assert!(
        matches!(b.reachable(&key).await, Err(StoreError::Unavailable(_))),
        "a waiter whose record another replica holds is never reachable"
    );
    assert!(matches!(second.await, Err(StoreError::Unavailable(_))));
    assert_eq!(b.deliver(&key, b"yes".to_vec()).await, Ok(true));
    assert_eq!(first.await, Ok(Some(b"yes".to_vec())));
}

#[tokio::test]
async fn stopped_redis_fails_waits_and_deliveries() {
    let mut server = RedisServer::start().await;
    let a = handover(&server).await;
    server.stop().await;
    eventually("the subscriber notices", || async { !a.is_subscribed() }).await;
    let key = unique_key("down");
    let waiting = a.wait(&key, Duration::from_secs(10));
    assert!(
        a.reachable(&key).await.is_err(),
        "no record, no reachable waiter"
    );
    assert!(waiting.await.is_err());
    assert!(a.deliver(&key, b"x".to_vec()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_resubscribes_after_redis_restarts() {
    let mut server = RedisServer::start().await;
    let (a, b) = (handover(&server).await, handover(&server).await);
    server.restart().await;
    eventually("both replicas are subscribed again", || async {
        a.is_subscribed() && b.is_subscribed()
    })
    .await;
    let key = unique_key("after-restart");
    // The command connection may still be reconnecting: a wait that fails is retried.
    let deadline = Instant::now() + Duration::from_secs(15);
    let waiting = loop {
        let mut candidate = a.wait(&key, Duration::from_secs(10));
        if tokio::time::timeout(Duration::from_millis(300), &mut candidate)
            .await
            .is_err()
        {
            break candidate;
        }
        assert!(Instant::now() < deadline, "a wait never registered again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    record_written(&server, &key).await;
    assert_eq!(b.deliver(&key, b"back".to_vec()).await, Ok(true));
    assert_eq!(waiting.await, Ok(Some(b"back".to_vec())));
}

#[tokio::test]
async fn subscriber_stays_subscribed_across_health_checks() {
    let server = RedisServer::start().await;
    let a = handover(&server).await;
    let mut admin = server.admin().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(a.is_subscribed());
    let subscribers: Vec<::redis::Value> = ::redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("{NAMESPACE}:handover:*"))
        .query_async(&mut admin)
        .await
        .expect("PUBSUB CHANNELS");
    assert_eq!(subscribers.len(), 1, "one channel, never re-created");
    let clients: String = ::redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .expect("CLIENT LIST");
    assert_eq!(
        clients.lines().filter(|l| l.contains("sub=1")).count(),
        1,
        "the health check did not reconnect: {clients}"
    );
}

// ---- Redis Cluster -------------------------------------------------------------------------

/// Three masters, no replicas, slots split evenly, formed by hand (no redis-cli needed).
async fn start_cluster() -> Vec<RedisServer> {
    let args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
    ];
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(RedisServer::start_with(&args).await);
    }
    let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
    for (node, (first, last)) in nodes.iter().zip(ranges) {
        let mut admin = node.admin().await;
        let _: () = ::redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(first)
            .arg(last)
            .query_async(&mut admin)
            .await
            .expect("CLUSTER ADDSLOTSRANGE");
    }
    let mut first = nodes[0].admin().await;
    for node in &nodes[1..] {
        let _: () = ::redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(node.port())
            .query_async(&mut first)
            .await
            .expect("CLUSTER MEET");
    }
    for node in &nodes {
        let admin = node.admin().await;
        eventually("the cluster is up", || {
            let mut admin = admin.clone();
            async move {
                let info: String = ::redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut admin)
                    .await
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            }
        })
        .await;
    }
    nodes
}

fn cluster_url(nodes: &[RedisServer]) -> String {
    let hosts: Vec<String> = nodes
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    format!("redis-cluster://{}", hosts.join(","))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_backends_pass_the_conformance_suites() {
    let nodes = start_cluster().await;
    let url = cluster_url(&nodes);
    let store = RedisReplayStore::connect(&url, NAMESPACE, TIMEOUT)
        .await
        .expect("store connects to the cluster");
    conformance::run_all(Arc::new(store)).await;
    let a = RedisAnswerHandover::connect(&url, NAMESPACE, TIMEOUT)
        .await
        .expect("hand-over connects to the cluster");
    conformance::run_all_handover(Arc::new(a)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replicas_hand_answers_over_through_any_node() {
    let nodes = start_cluster().await;
    // Each replica knows a different seed node, so their subscriptions sit on different
    // nodes and the answer crosses the cluster bus.
    let a = RedisAnswerHandover::connect(
        &format!("redis-cluster://127.0.0.1:{}", nodes[1].port()),
        NAMESPACE,
        TIMEOUT,
    )
    .await
    .expect("connects");
    let b = RedisAnswerHandover::connect(
        &format!("redis-cluster://127.0.0.1:{}", nodes[2].port()),
        NAMESPACE,
        TIMEOUT,
    )
    .await
    .expect("connects");
    // As `/readyz` holds a replica back: a waiter registered before its replica is subscribed
    // fails at once (its record is never written), and on a loaded machine a fresh cluster has
    // taken longer than the command timeout to carry the subscriptions.
    eventually("both replicas are subscribed", || async {
        a.is_subscribed() && b.is_subscribed()
    })
    .await;
    for round in 0..10 {
        let key = unique_key(&format!("cluster-{round}"));
        let waiting = a.wait(&key, Duration::from_secs(10));
        // Retried for as long as the waiter waits: its record is written a round trip after
        // `wait`, and a freshly formed cluster on a loaded machine has been slow to answer.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut delivered = Ok(false);
        while Instant::now() < deadline {
            delivered = b.deliver(&key, b"ok".to_vec()).await;
            // The waiter's record not written yet (`false`), or a freshly formed cluster slow
            // to answer: try again. Anything else ends the round.
            if !matches!(delivered, Ok(false) | Err(StoreError::Timeout)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(delivered, Ok(true), "round {round}");
        assert_eq!(waiting.await, Ok(Some(b"ok".to_vec())));
        assert_eq!(b.deliver(&key, b"again".to_vec()).await, Ok(false));
    }
}

#[tokio::test]
async fn cluster_with_a_node_down_refuses_consumes() {
    let mut nodes = start_cluster().await;
    let store = RedisReplayStore::connect(&cluster_url(&nodes), NAMESPACE, TIMEOUT)
        .await
        .expect("connects");
    nodes[1].stop().await;
    // Some of these land on the stopped node's slots (connection errors) and, once the
    // others mark the cluster failed, all of them get CLUSTERDOWN: never a `First`.
    let mut errors = 0;
    for _ in 0..30 {
        match store.consume(&unique_key("down"), far_expiry_ms()).await {
            Ok(Consumption::First) => {}
            Ok(Consumption::AlreadySpent) => panic!("a fresh jti cannot be spent"),
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 0, "a third of the slots are gone");
    let node = &nodes[0];
    let admin = node.admin().await;
    eventually("the cluster marks itself failed", || {
        let mut admin = admin.clone();
        async move {
            let info: String = ::redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            info.contains("cluster_state:fail")
        }
    })
    .await;
    for _ in 0..10 {
        let outcome = store
            .consume(&unique_key("clusterdown"), far_expiry_ms())
            .await;
        assert!(outcome.is_err(), "{outcome:?}");
    }
}

#[tokio::test]
async fn shared_pins_only_rise_and_every_replica_sees_the_highest() {
    let server = RedisServer::start().await;
    let a = RedisPinShare::connect(&server.url(), NAMESPACE, TIMEOUT)
        .await
        .expect("connects");
    let b = RedisPinShare::connect(&server.url(), NAMESPACE, TIMEOUT)
        .await
        .expect("connects");
    let sorted = |mut pins: Vec<(String, u8)>| {
        pins.sort();
        pins
    };
    let seen = a
        .raise("store", &[("delete".into(), 2), ("read".into(), 0)])
        .await
        .expect("raise");
    assert_eq!(sorted(seen), vec![("delete".into(), 2), ("read".into(), 0)]);
    // Replica B first saw `delete` after an annotation flip; it must adopt A's higher pin.
    let seen = b
        .raise("store", &[("delete".into(), 0), ("new".into(), 1)])
        .await
        .expect("raise");
    assert_eq!(
        sorted(seen),
        vec![("delete".into(), 2), ("new".into(), 1), ("read".into(), 0)]
    );
    let other = a
        .raise("tickets", &[("delete".into(), 0)])
        .await
        .expect("raise");
    assert_eq!(
        other,
        vec![("delete".into(), 0)],
        "upstreams do not share pins"
    );
}
