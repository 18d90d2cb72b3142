//! Shared rate-limit buckets against a real `redis-server`: one budget for every store instance,
//! all-or-nothing takes, keys that vanish once a bucket is full again, and errors when Redis is
//! gone.

use std::time::Duration;

use super::server::RedisServer;
use super::{NAMESPACE, TIMEOUT, cluster_url, start_cluster};
use crate::redis_backend::RedisRateShare;
use crate::{BucketTake, RateDecision, RateShare};

const MINUTE: Duration = Duration::from_secs(60);

async fn share(url: &str) -> RedisRateShare {
    RedisRateShare::connect(url, NAMESPACE, TIMEOUT)
        .await
        .expect("rate share connects")
}

fn take(bucket: &str, burst: u32, cost: u32) -> BucketTake<'_> {
    BucketTake {
        bucket,
        interval: MINUTE,
        burst,
        cost,
    }
}

fn refused_after(decision: RateDecision) -> (usize, Duration) {
    match decision {
        RateDecision::Refused {
            bucket,
            retry_after,
        } => (bucket, retry_after),
        RateDecision::Taken => panic!("the take was expected to be refused"),
    }
}

#[tokio::test]
async fn every_replica_draws_from_one_bucket_per_principal() {
    let server = RedisServer::start().await;
    let (a, b) = (share(&server.url()).await, share(&server.url()).await);
    let calls = [take("calls", 3, 1)];
    for replica in [&a, &b, &a] {
        assert_eq!(
            replica.take("ada", &calls).await,
            Ok(RateDecision::Taken),
            "within the burst"
        );
    }
    let (bucket, retry_after) = refused_after(b.take("ada", &calls).await.expect("answers"));
    assert_eq!(bucket, 0);
    assert!(
        retry_after > MINUTE - Duration::from_secs(10) && retry_after <= MINUTE,
        "one token comes back a minute after the first take: {retry_after:?}"
    );
    assert_eq!(
        a.take("bob", &calls).await,
        Ok(RateDecision::Taken),
        "another principal has a bucket of its own"
    );
}

#[tokio::test]
async fn a_take_from_several_buckets_takes_from_all_or_from_none() {
    let server = RedisServer::start().await;
    let share = share(&server.url()).await;
    let both = [take("held", 5, 1), take("questions", 1, 1)];
    assert_eq!(share.take("ada", &both).await, Ok(RateDecision::Taken));
    let (bucket, _) = refused_after(share.take("ada", &both).await.expect("answers"));
    assert_eq!(bucket, 1, "the empty bucket is named");
    // The refused take left `held` alone: four of its five tokens remain.
    let held = [take("held", 5, 1)];
    for _ in 0..4 {
        assert_eq!(share.take("ada", &held).await, Ok(RateDecision::Taken));
    }
    assert!(matches!(
        share.take("ada", &held).await,
        Ok(RateDecision::Refused { bucket: 0, .. })
    ));
}

#[tokio::test]
async fn a_bucket_key_lives_until_the_bucket_is_full_again() {
    let server = RedisServer::start().await;
    let share = share(&server.url()).await;
    assert_eq!(
        share.take("ada", &[take("calls:store", 10, 2)]).await,
        Ok(RateDecision::Taken)
    );
    let mut admin = server.admin().await;
    let key = format!("{NAMESPACE}:rl:calls:store:{{ada}}");
    let ttl_ms: i64 = ::redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .expect("PTTL");
    assert!(
        (110_000..=120_000).contains(&ttl_ms),
        "two tokens take two minutes to come back: {ttl_ms} ms"
    );
    let other: bool = ::redis::cmd("EXISTS")
        .arg(format!("{NAMESPACE}:rl:calls:{{ada}}"))
        .query_async(&mut admin)
        .await
        .expect("EXISTS");
    assert!(!other, "the upstream's bucket is not the shared one");
}

#[tokio::test]
async fn stopped_redis_is_an_error_not_a_decision() {
    let mut server = RedisServer::start().await;
    let share = share(&server.url()).await;
    server.stop().await;
    let outcome = share.take("ada", &[take("calls", 1, 1)]).await;
    assert!(outcome.is_err(), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_takes_span_several_buckets_of_one_principal() {
    let nodes = start_cluster().await;
    let share = share(&cluster_url(&nodes)).await;
    let both = [take("held", 2, 1), take("questions", 2, 1)];
    // Principals spread over the slots; each one's buckets share a slot, so no CROSSSLOT.
    for principal in ["ada", "bob", "carol", "dave", "a}b{c"] {
        assert_eq!(
            share.take(principal, &both).await,
            Ok(RateDecision::Taken),
            "{principal}"
        );
    }
}
