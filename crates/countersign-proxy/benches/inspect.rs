//! The per-POST hot path of the transparent core: strict parse, envelope and header checks, and
//! re-serialization of the forwarded body.

use std::hint::black_box;

use countersign_proxy::parse::inspect_post;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue};

fn tools_call_body() -> String {
    let lines: Vec<String> = (0..12)
        .map(|i| {
            format!(r#"{{"sku":"TOY-{i:03}","quantity":{i},"note":"gift wrap, ship together"}}"#)
        })
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"create_order","arguments":{{"customer":"ada@example.com","items":[{}]}},"_meta":{{"progressToken":"p-42"}}}}}}"#,
        lines.join(",")
    )
}

fn bench_inspect(c: &mut Criterion) {
    let body = tools_call_body();
    let mut legacy = HeaderMap::new();
    legacy.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    c.bench_function("inspect+reserialize tools/call ~1KiB (2025-11-25)", |b| {
        b.iter(|| {
            let inspected =
                inspect_post(black_box(&legacy), black_box(body.as_bytes()), 64).expect("valid");
            black_box(inspected.payload.to_vec())
        })
    });

    let stateless = body.replace(
        r#""_meta":{"progressToken":"p-42"}"#,
        r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#,
    );
    let mut modern = HeaderMap::new();
    modern.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2026-07-28"),
    );
    modern.insert("mcp-method", HeaderValue::from_static("tools/call"));
    modern.insert("mcp-name", HeaderValue::from_static("create_order"));
    c.bench_function(
        "inspect+reserialize tools/call ~1KiB (2026-07-28 headers)",
        |b| {
            b.iter(|| {
                let inspected =
                    inspect_post(black_box(&modern), black_box(stateless.as_bytes()), 64)
                        .expect("valid");
                black_box(inspected.payload.to_vec())
            })
        },
    );
}

criterion_group!(benches, bench_inspect);
criterion_main!(benches);
