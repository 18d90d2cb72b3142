//! Per-call costs on the confirmation path: hashing the arguments (every risky call, both
//! phases), minting (phase 1) and verifying (phase 2). Target: ≤ 10 µs each.

use std::hint::black_box;

use countersign_jsonrpc::RawJson;
use countersign_token::{
    Claims, Keyring, VerifyRules, arguments_hash, arguments_hash_raw, canonicalize,
    definition_hash, keygen_entry, mint, new_jti, verify,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::Value;

/// About 1 KiB of order arguments, parsed the way the gateway parses them (numbers keep their
/// source text).
fn arguments_1k() -> Value {
    let items: Vec<String> = (0..12)
        .map(|i| {
            format!(
                r#"{{"sku":"SKU-{i:05}","quantity":{},"price":19.990,"note":"deliver to dock {i}"}}"#,
                i * 3 + 1
            )
        })
        .collect();
    let text = format!(
        r#"{{"customer":"ACME Corp","expedite":false,"items":[{}],"shipTo":{{"city":"Zürich","zip":"8001"}},"confirmationToken":"mcp_cf_x"}}"#,
        items.join(",")
    );
    serde_json::from_str(&text).expect("valid JSON")
}

/// A tool definition of the size real servers list: a description and an input schema with
/// nested objects, about 1.5 KiB.
fn create_order_definition() -> Value {
    serde_json::json!({
        "name": "create_order",
        "description": "Creates an order for a customer. The order is charged and shipped at once; it cannot be undone, only cancelled by a separate call before it ships.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "customer": {"type": "string", "description": "The customer's account name"},
                "expedite": {"type": "boolean", "description": "Ship by express delivery", "default": false},
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 100,
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": {"type": "string", "pattern": "^SKU-[0-9]{5}$"},
                            "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
                            "price": {"type": "number", "minimum": 0},
                            "note": {"type": "string", "maxLength": 200}
                        },
                        "required": ["sku", "quantity"],
                        "additionalProperties": false
                    }
                },
                "shipTo": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "zip": {"type": "string", "pattern": "^[0-9]{4,5}$"},
                        "country": {"type": "string", "enum": ["CH", "DE", "FR", "IT", "AT"]}
                    },
                    "required": ["city", "zip"]
                }
            },
            "required": ["customer", "items", "shipTo"]
        },
        "annotations": {"title": "Create order", "readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}
    })
}

fn claims(ah: String) -> Claims {
    Claims {
        v: 1,
        iss: "gw-bench".into(),
        sub: "user:alice@example.com".into(),
        sid: Some("3f2a7c1e-5d8b-4a9e-b6c0-1d2e3f4a5b6c".into()),
        up: "store".into(),
        m: "tools/call".into(),
        tool: "create_order".into(),
        ah,
        ph: None,
        tdh: "1fQmWqZkq3W0l6m3a8WcZ3YQd5lUeQe1mDqLz8a6h0s".into(),
        rule: "big-orders".into(),
        ch: "token".into(),
        iat: 1_700_000_000,
        exp: 1_700_000_300,
        jti: new_jti(),
        st: None,
        aid: None,
    }
}

fn bench(c: &mut Criterion) {
    let args = arguments_1k();
    let size = serde_json::to_vec(&args).expect("serializes").len();
    let keyring = Keyring::parse(&format!("{},{}", keygen_entry(), keygen_entry()))
        .expect("generated entries parse");
    let claims = claims(arguments_hash(&args).expect("hashes"));
    let token = mint(&keyring, &claims);
    let rules = VerifyRules::default();

    let mut group = c.benchmark_group("token");
    group.throughput(Throughput::Bytes(size as u64));
    group.bench_function("canonicalize_1k_arguments", |b| {
        b.iter(|| canonicalize(black_box(&args)))
    });
    group.bench_function("arguments_hash_1k", |b| {
        b.iter(|| arguments_hash(black_box(&args)))
    });
    // The request path's form: the raw text of the client's arguments.
    let raw = RawJson::from_value(&args);
    group.bench_function("arguments_hash_raw_1k", |b| {
        b.iter(|| arguments_hash_raw(Some(black_box(&raw))))
    });
    group.throughput(Throughput::Elements(1));
    // The `tdh` a held or redeemed call of a known tool binds.
    let definition = create_order_definition();
    group.bench_function("definition_hash", |b| {
        b.iter(|| definition_hash(black_box(&definition)))
    });
    group.bench_function("mint", |b| b.iter(|| mint(&keyring, black_box(&claims))));
    group.bench_function("verify", |b| {
        b.iter(|| verify(&keyring, black_box(&token), 1_700_000_100, &rules))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
