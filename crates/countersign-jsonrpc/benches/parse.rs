//! Hot-path costs: strict parse + envelope validation + canonical re-serialization of typical
//! MCP bodies, validating a body at the size limit, editing one member of a result the size of
//! a held call's answer, and SSE decoding of a relayed stream.

use std::hint::black_box;

use bytes::Bytes;
use countersign_jsonrpc::sse::SseDecoder;
use countersign_jsonrpc::{ParseLimits, Payload, RawJson, parse_strict};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

fn initialize_request() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "roots": {"listChanged": true},
                "sampling": {},
                "elicitation": {"form": {}, "url": {}}
            },
            "clientInfo": {"name": "bench-client", "title": "Bench Client", "version": "1.4.2"}
        }
    }))
    .expect("serializes")
}

fn tools_call_request() -> Vec<u8> {
    let items: Vec<_> = (0..12)
        .map(|i| json!({"sku": format!("SKU-{i:05}"), "quantity": i * 3 + 1, "price": 19.99, "note": "deliver to the loading dock"}))
        .collect();
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": 42,
        "method": "tools/call",
        "params": {
            "name": "create_order",
            "arguments": {"customer": "ACME Corp", "items": items, "expedite": false},
            "_meta": {"progressToken": "p-42"}
        }
    }))
    .expect("serializes");
    assert!(
        (900..1600).contains(&body.len()),
        "tools/call body is {} bytes",
        body.len()
    );
    body
}

/// The gateway benchmark's request (`bench/tools_call.json`): a small MCP 2026-07-28
/// `tools/call` whose `_meta` keys have capitals, so the key-collision check cannot skip them.
fn bench_tools_call_request() -> Vec<u8> {
    // As the load generator sends it, trailing newline included.
    let body = include_bytes!("../../../bench/tools_call.json").to_vec();
    assert_eq!(body.len(), 209, "bench/tools_call.json changed");
    body
}

fn tools_list_response() -> Vec<u8> {
    let tools: Vec<_> = (0..20)
        .map(|i| {
            json!({
                "name": format!("tool_{i}"),
                "title": format!("Tool number {i}"),
                "description": "Does one well-defined thing to the inventory and reports what changed.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "description": "Stock keeping unit"},
                        "delta": {"type": "integer", "minimum": -1000, "maximum": 1000}
                    },
                    "required": ["sku", "delta"]
                },
                "annotations": {"readOnlyHint": i % 3 == 0, "destructiveHint": i % 2 == 0, "openWorldHint": false}
            })
        })
        .collect();
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}))
        .expect("serializes")
}

/// A `tools/call` whose arguments are one array of small numbers filling a 4 MiB body: the
/// shape that costs the most tree per byte (some 50x its size as `serde_json::Value`s).
fn small_numbers_request() -> Bytes {
    const SIZE: usize = 4 << 20;
    let mut body =
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sum","arguments":{"values":["#
            .to_vec();
    let tail = b"0]}}}";
    let mut i = 0u32;
    while body.len() + tail.len() + 4 < SIZE {
        body.extend_from_slice((i % 100).to_string().as_bytes());
        body.push(b',');
        i += 1;
    }
    body.extend_from_slice(tail);
    assert!(
        (SIZE - 8..=SIZE).contains(&body.len()),
        "small-numbers body is {} bytes",
        body.len()
    );
    Bytes::from(body)
}

fn sse_stream() -> Vec<u8> {
    let mut stream = b"id: prime-1\ndata: \n\n".to_vec();
    for i in 0..19 {
        let message = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "p-42", "progress": i, "total": 19, "message": "working"}});
        stream.extend_from_slice(
            format!("id: ev-{i}\nevent: message\ndata: {message}\n\n").as_bytes(),
        );
    }
    stream
}

fn bench_parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse+reserialize");
    for (name, body) in [
        ("initialize", initialize_request()),
        ("tools_call_209b_2026", bench_tools_call_request()),
        ("tools_call_1k", tools_call_request()),
        ("tools_list_20", tools_list_response()),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let payload = Payload::parse(black_box(&body)).expect("valid payload");
                black_box(payload.to_vec())
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("strict_only");
    let body = tools_list_response();
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("tools_list_20", |b| {
        b.iter(|| black_box(parse_strict(black_box(&body)).expect("valid json")))
    });
    group.bench_function("tools_list_20_serde_json_baseline", |b| {
        b.iter(|| {
            black_box(
                serde_json::from_slice::<serde_json::Value>(black_box(&body)).expect("valid json"),
            )
        })
    });
    group.finish();

    let body = small_numbers_request();
    let limits = ParseLimits::default();
    c.bench_function("validate+envelope 4 MiB array of small numbers", |b| {
        b.iter(|| {
            let payload =
                Payload::parse_with(black_box(body.clone()), &limits).expect("valid payload");
            black_box(payload.messages().len())
        })
    });
}

fn bench_sse(c: &mut Criterion) {
    let stream = sse_stream();
    let mut group = c.benchmark_group("sse_decode");
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("20_events_one_chunk", |b| {
        b.iter(|| {
            let mut decoder = SseDecoder::new(1 << 20);
            decoder.push(black_box(&stream));
            let mut n = 0;
            while decoder.next_event().expect("valid stream").is_some() {
                n += 1;
            }
            assert_eq!(n, 20);
        })
    });
    group.bench_function("20_events_64b_chunks", |b| {
        b.iter(|| {
            let mut decoder = SseDecoder::new(1 << 20);
            let mut n = 0;
            for chunk in black_box(&stream).chunks(64) {
                decoder.push(chunk);
                while decoder.next_event().expect("valid stream").is_some() {
                    n += 1;
                }
            }
            assert_eq!(n, 20);
        })
    });
    group.finish();
}

/// A `CallToolResult` shaped like a held call's answer (~4 KiB: a text block, the machine part
/// twice, a token in each), as the gateway edits it before answering.
fn held_sized_result() -> RawJson {
    let token = "mcp_cf_".to_owned() + &"x".repeat(400);
    let machine = json!({
        "status": "requires_confirmation", "confirmationToken": token, "tool": "wipe",
        "arguments": {"n": 1, "confirmationToken": token}, "expiresInSeconds": 300,
        "guidance": {"next_action": {"tool": "wipe", "arguments": {"n": 1}}},
    });
    let result = json!({
        "content": [{"type": "text", "text": format!("Nothing was executed.\n{}", "y".repeat(900))}],
        "isError": true, "structuredContent": machine, "_meta": {"countersign/confirmation": machine},
    });
    RawJson::from_value(&result)
}

fn bench_edit(c: &mut Criterion) {
    let result = held_sized_result();
    let mut group = c.benchmark_group("edit_member");
    group.throughput(Throughput::Bytes(result.len() as u64));
    let complete = RawJson::string("complete");
    group.bench_function("append_absent", |b| {
        b.iter(|| black_box(&result).with_member("resultType", &complete))
    });
    group.bench_function("replace_present", |b| {
        b.iter(|| black_box(&result).with_member("isError", &complete))
    });
    group.bench_function("remove_present", |b| {
        b.iter(|| black_box(&result).without_member("structuredContent"))
    });
    group.finish();
}

criterion_group!(benches, bench_parse, bench_edit, bench_sse);
criterion_main!(benches);
