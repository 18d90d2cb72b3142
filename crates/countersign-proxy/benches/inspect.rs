//! The per-POST hot path of the transparent core: strict parse, envelope and header checks, and
//! re-serialization of the forwarded body; and the argument listing a held call shows.

use std::hint::black_box;

use bytes::Bytes;
use countersign_jsonrpc::message::Request;
use countersign_jsonrpc::{Message, Payload, RawJson};
use countersign_policy::Method;
use countersign_proxy::classify::CallParts;
use countersign_proxy::display::{ListingStyle, arguments_listing};
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

/// The one request of a POST body, as the Parse layer hands it on.
fn inspect_request(headers: &HeaderMap, body: Bytes) -> Request {
    let inspected = inspect_post(headers, body, 64).expect("valid");
    let Payload::Single(Message::Request(request)) = inspected.payload else {
        panic!("a single request");
    };
    request
}

/// `headers` with `Mcp-Name` set to `tool`, as a client mirrors the call's target.
fn naming(headers: &HeaderMap, tool: &'static str) -> HeaderMap {
    let mut named = headers.clone();
    named.insert("mcp-name", HeaderValue::from_static(tool));
    named
}

fn bench_inspect(c: &mut Criterion) {
    // The body as the server hands it over; cloning it per iteration is a reference count.
    let body = Bytes::from(tools_call_body());
    let mut legacy = HeaderMap::new();
    legacy.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    c.bench_function("inspect+reserialize tools/call ~1KiB (2025-11-25)", |b| {
        b.iter(|| {
            let inspected =
                inspect_post(black_box(&legacy), black_box(body.clone()), 64).expect("valid");
            black_box(inspected.payload.to_vec())
        })
    });

    let stateless = Bytes::from(tools_call_body().replace(
        r#""_meta":{"progressToken":"p-42"}"#,
        r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#,
    ));
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
                let inspected = inspect_post(black_box(&modern), black_box(stateless.clone()), 64)
                    .expect("valid");
                black_box(inspected.payload.to_vec())
            })
        },
    );

    // Exactly the gateway benchmark's request (`bench/tools_call.json`, trailing newline
    // included) with its headers.
    let small = Bytes::from_static(include_bytes!("../../../bench/tools_call.json"));
    assert_eq!(small.len(), 209, "bench/tools_call.json changed");
    let small_headers = naming(&modern, "list_products");
    c.bench_function(
        "inspect+reserialize tools/call 209B bench (2026-07-28 headers)",
        |b| {
            b.iter(|| {
                let inspected =
                    inspect_post(black_box(&small_headers), black_box(small.clone()), 64)
                        .expect("valid");
                black_box(inspected.payload.to_vec())
            })
        },
    );
    // What classifying and forwarding an allowed call reads of it.
    let request = inspect_request(&small_headers, small.clone());
    c.bench_function("CallParts::of+strip_approval tools/call 209B bench", |b| {
        b.iter(|| {
            let call = CallParts::of(Method::ToolsCall, black_box(request.params.as_ref()))
                .expect("valid params");
            black_box(call.strip_approval(black_box(request.clone()), false))
        })
    });

    // A redemption of the benchmark's held call (`bench/redeem_once.lua`): the same small call
    // with a token as long as the gateway mints in its arguments, which every walk over the
    // params passes over.
    let token = format!(
        "mcp_cf_{}",
        "eyJ2IjoxLCJpc3MiOiJjb3VudGVyc2lnbiJ9".repeat(15)
    );
    let redeem = Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"wipe","arguments":{{"n":1000000001,"confirmationToken":"{token}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    ));
    let redeem_headers = naming(&modern, "wipe");
    c.bench_function(
        "inspect+CallParts::of+strip_approval redemption (540-char token)",
        |b| {
            b.iter(|| {
                let request =
                    inspect_request(black_box(&redeem_headers), black_box(redeem.clone()));
                let call = CallParts::of(Method::ToolsCall, request.params.as_ref())
                    .expect("valid params");
                let arguments = call.arguments_without_token();
                black_box((
                    arguments,
                    call.bound_params(),
                    call.strip_approval(request, true),
                ))
            })
        },
    );
}

/// `arguments_listing` of a 4 MiB array of small numbers: what the held result's text and the
/// approval question cost for the largest body a client may send.
fn bench_listing(c: &mut Criterion) {
    let mut text = String::from("{\"items\":[");
    let mut count = 0;
    while text.len() < 4 << 20 {
        if count > 0 {
            text.push(',');
        }
        text.push_str(&(count % 1000).to_string());
        count += 1;
    }
    text.push_str("],\"to\":\"ada@example.com\"}");
    let arguments = RawJson::parse_slice(text.as_bytes()).expect("valid");
    for (name, style) in [
        (
            "arguments_listing 4MiB array (compact, 2000 chars)",
            ListingStyle::Compact,
        ),
        (
            "arguments_listing 4MiB array (pretty, 1500 chars)",
            ListingStyle::Pretty,
        ),
    ] {
        let budget = if style == ListingStyle::Compact {
            2000
        } else {
            1500
        };
        c.bench_function(name, |b| {
            b.iter(|| black_box(arguments_listing(black_box(&arguments), style, budget)))
        });
    }
}

criterion_group!(benches, bench_inspect, bench_listing);
criterion_main!(benches);
