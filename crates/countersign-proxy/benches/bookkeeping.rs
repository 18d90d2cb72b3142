//! The per-request bookkeeping of the layers around the parse: the allowed-host check every
//! request passes, the two metrics every request records and the decision every gated call
//! counts, and the two audit lines it writes. Small each, but paid on every read, where the
//! gateway's cost is spread thin over many such steps.

use std::hint::black_box;
use std::time::Duration;

use countersign_proxy::ProxyMetrics;
use countersign_proxy::audit::{AuditRecord, AuditSink, timestamp};
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

fn bench_audit(c: &mut Criterion) {
    // The writer thread writes to nothing; the request path's part is encoding and appending.
    let sink = AuditSink::new(Box::new(std::io::sink()), false);
    let line = |event, outcome, latency_ms| AuditRecord {
        ts: timestamp(std::time::UNIX_EPOCH + Duration::from_millis(1_796_041_296_789)),
        event,
        principal: black_box("anonymous"),
        upstream: black_box("default"),
        method: "tools/call",
        tool: black_box("list_products"),
        session: None,
        risk: Some("read"),
        rule: Some(black_box("default")),
        action: Some("allow"),
        channel: None,
        jti: None,
        args_hash: None,
        outcome,
        latency_ms,
        trace_id: None,
        span_id: None,
        arguments: None,
    };
    c.bench_function("audit lines, one allowed read (decision + outcome)", |b| {
        b.iter(|| {
            sink.record(&line("decision", "allowed", None));
            sink.record(&line("outcome", "forwarded", Some(0.412)));
        });
    });
}

criterion_group!(benches, bench_host_check, bench_metrics, bench_audit);
criterion_main!(benches);
