//! Classification on the request path: the demo store policy (globs, a CEL condition, a
//! summary template) against a call with about 1 KiB of arguments; and pinning a 1,000-tool
//! listing, which a `tools/list` answer and a fresh gateway's first call pay for.

use std::hint::black_box;

use countersign_jsonrpc::RawJson;
use countersign_policy::{CallFacts, Catalog, Method, Policy, Principal};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn bench_classify(c: &mut Criterion) {
    let policy_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/store.yaml"
    ))
    .expect("policies/store.yaml");
    let policy = Policy::from_yaml(&policy_text).expect("valid policy");
    let mut catalog = Catalog::new();
    catalog.observe(
        "store",
        &[
            json!({"name": "create_order", "inputSchema": {"type": "object"},
                 "annotations": {"readOnlyHint": false, "destructiveHint": false}}),
        ],
    );
    let items: Vec<Value> = (0..12)
        .map(|i| json!({"sku": format!("TOY-{i:03}"), "quantity": i, "note": "gift wrap, ship together"}))
        .collect();
    // As the request path holds them: the raw text of the client's arguments.
    let arguments = RawJson::from_value(&json!({"customer": "ada@example.com", "items": items}));
    assert!(arguments.len() > 800);
    let principal = Principal {
        id: "ada".into(),
        groups: vec!["staff".into()],
        claims: Default::default(),
    };
    let pinned = catalog.get("store", "create_order");
    // Every gated call finds its tool's pin first.
    c.bench_function("catalog lookup of a pinned tool", |b| {
        b.iter(|| black_box(catalog.get(black_box("store"), black_box("create_order"))))
    });
    c.bench_function(
        "classify create_order ~1KiB args (CEL when + summary)",
        |b| {
            b.iter(|| {
                black_box(policy.classify(&CallFacts {
                    upstream: "store",
                    method: Method::ToolsCall,
                    target: "create_order",
                    arguments: black_box(&arguments),
                    principal: &principal,
                    tool: pinned,
                }))
            })
        },
    );
    c.bench_function("classify list_products (glob rule, no condition)", |b| {
        b.iter(|| {
            black_box(policy.classify(&CallFacts {
                upstream: "store",
                method: Method::ToolsCall,
                target: "list_products",
                arguments: &RawJson::null(),
                principal: &principal,
                tool: None,
            }))
        })
    });
}

/// A 1,000-tool listing with realistic definitions: a title, a description that needs
/// escaping, an input schema with three properties, and annotations.
fn listing() -> Vec<Value> {
    (0..1000)
        .map(|i| {
            json!({
                "name": format!("tool_{i:04}"),
                "title": format!("Tool number {i}"),
                "description": "Looks something up in the store and says what it found, \
                    with \"quotes\" and a line break\nso the string writer escapes.",
                "inputSchema": {"type": "object", "properties": {
                    "sku": {"type": "string", "description": "the product's SKU"},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
                    "tags": {"type": "array", "items": {"type": "string"}}},
                    "required": ["sku"], "additionalProperties": false},
                "annotations": {"readOnlyHint": i % 2 == 0, "destructiveHint": false}
            })
        })
        .collect()
}

fn bench_observe(c: &mut Criterion) {
    let tools = listing();
    c.bench_function(
        "observe a 1,000-tool listing (pins, definition hashes)",
        |b| {
            b.iter_batched(
                Catalog::new,
                |mut catalog| black_box(catalog.observe("store", black_box(&tools))),
                BatchSize::SmallInput,
            )
        },
    );
}

/// Every client's `tools/list` pins the same listing again: the common case once a gateway runs.
fn bench_observe_again(c: &mut Criterion) {
    let tools = listing();
    let mut catalog = Catalog::new();
    catalog.observe("store", &tools);
    c.bench_function(
        "observe the same 1,000-tool listing again (pins unchanged)",
        |b| b.iter(|| black_box(catalog.observe("store", black_box(&tools)))),
    );
}

criterion_group!(benches, bench_classify, bench_observe, bench_observe_again);
criterion_main!(benches);
