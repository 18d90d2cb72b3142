//! The per-request bookkeeping of the layers around the parse: the allowed-host check every
//! request passes, the two metrics every request records and the decision every gated call
//! counts. Small each, but paid on every read, where the gateway's cost is spread thin over
//! many such steps.

use std::hint::black_box;
use std::time::Duration;

use countersign_proxy::ProxyMetrics;
use countersign_proxy::config::{HostPattern, default_host_policy};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench_host_check(c: &mut Criterion) {
    // A loopback listener's default policy, as `bench/run.sh` and a sidecar run it.
    let policy = default_host_policy("127.0.0.1:8080".parse().expect("an address"));
    let allowed = policy.allowed.expect("loopback listeners restrict hosts");
    c.bench_function("allowed-host check, Host 127.0.0.1:8080", |b| {
        b.iter(|| HostPattern::any_matches(black_box(&allowed), black_box("127.0.0.1:8080")));
    });
}

fn bench_metrics(c: &mut Criterion) {
    let metrics = ProxyMetrics::unregistered();
    c.bench_function("request counter + upstream latency, one read", |b| {
        b.iter(|| {
            metrics.record_request(black_box("default"), "tools/call", "forwarded");
            metrics.observe_upstream_latency(black_box("default"), Duration::from_micros(40));
        });
    });
    // Every gated call counts its decision, found by its labels.
    c.bench_function("decision counter, one allowed call", |b| {
        b.iter(|| {
            metrics.record_decision(
                black_box("default"),
                "decision",
                "allow",
                None,
                black_box("reads"),
                "forwarded",
            );
        });
    });
}

criterion_group!(benches, bench_host_check, bench_metrics);
criterion_main!(benches);
