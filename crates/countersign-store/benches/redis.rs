//! Consume latency and throughput: the memory store against a local `redis-server`.
//!
//! `cargo bench -p countersign-store --bench redis`. Starts its own `redis-server` (from
//! `REDIS_SERVER`, else `PATH`) on a free port; without one, only the memory figures run.

use std::hint::black_box;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use countersign_store::{MemoryReplayStore, RedisReplayStore, ReplayStore};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt as _;

/// Consumes in flight at once in the throughput runs, as many concurrent confirmations from
/// one gateway replica would be.
const IN_FLIGHT: [usize; 2] = [16, 128];

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Option<(Server, String)> {
    let binary = std::env::var_os("REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok()?
        .port();
    let child = Command::new(&binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--maxmemory-policy", "noeviction"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(child) => Server(child),
        Err(error) => {
            eprintln!(
                "skipping the Redis benchmarks: cannot run {binary:?} ({error}); run \
                 scripts/install-test-tools.sh or set REDIS_SERVER"
            );
            return None;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            eprintln!("skipping the Redis benchmarks: redis-server did not start");
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((child, format!("redis://127.0.0.1:{port}")))
}

fn expiry() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    now + 300_000
}

/// Fresh jtis, as real confirmations are: every consume is a `First`.
fn jtis() -> impl FnMut() -> String {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let mut n = 0_u64;
    move || {
        n += 1;
        format!("bench-{}-{run}-{n}", std::process::id())
    }
}

fn sequential(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: &dyn ReplayStore,
) {
    let mut group = c.benchmark_group("consume_latency");
    group.throughput(Throughput::Elements(1));
    let expires = expiry();
    let mut next = jtis();
    group.bench_function(name, |b| {
        b.iter(|| {
            let jti = next();
            black_box(rt.block_on(store.consume(&jti, expires)))
        });
    });
    group.finish();
}

fn concurrent(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: &Arc<dyn ReplayStore>,
) {
    let mut group = c.benchmark_group("consume_throughput");
    group.throughput(Throughput::Elements(1));
    let expires = expiry();
    for in_flight in IN_FLIGHT {
        group.bench_with_input(BenchmarkId::new(name, in_flight), &in_flight, |b, &n| {
            b.iter_custom(|iterations| {
                let mut next = jtis();
                let jtis: Vec<String> = (0..iterations).map(|_| next()).collect();
                let store = Arc::clone(store);
                rt.block_on(async move {
                    let started = Instant::now();
                    let mut consumes = futures_util::stream::iter(&jtis)
                        .map(|jti| store.consume(jti, expires))
                        .buffer_unordered(n);
                    while let Some(outcome) = consumes.next().await {
                        black_box(outcome.expect("consume succeeds"));
                    }
                    started.elapsed()
                })
            });
        });
    }
    group.finish();
}

fn consume(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    let memory: Arc<dyn ReplayStore> = Arc::new(MemoryReplayStore::new(50_000_000));
    sequential(c, &rt, "memory", memory.as_ref());
    concurrent(c, &rt, "memory", &memory);

    let Some((_server, url)) = start_redis() else {
        return;
    };
    let redis: Arc<dyn ReplayStore> = Arc::new(
        rt.block_on(RedisReplayStore::connect(
            &url,
            "bench",
            Duration::from_secs(2),
        ))
        .expect("connect to the benchmark redis-server"),
    );
    sequential(c, &rt, "redis", redis.as_ref());
    concurrent(c, &rt, "redis", &redis);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = consume
}
criterion_main!(benches);
