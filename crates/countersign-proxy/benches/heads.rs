//! The two HTTP/1.1 heads every read parses: the client's request head (the gateway's own
//! server) and the upstream's response head (its plain-upstream connection), each into the
//! `http` types the layers read. Under callgrind about 8,200 and 5,300 instructions here (with
//! this bench's glibc malloc), against some 58,600 for a whole read through the gateway
//! (`bash bench/instructions.sh`): the largest single step of a read.

use std::hint::black_box;

use countersign_proxy::benching::{parse_client_head, parse_upstream_head};
use criterion::{Criterion, criterion_group, criterion_main};

/// The head wrk sends in `bench/run.sh` (`bench/fixed_call.lua`), as it arrives.
const CLIENT_HEAD: &[u8] = b"POST /mcp HTTP/1.1\r\n\
Host: 127.0.0.1:8080\r\n\
Content-Length: 209\r\n\
Content-Type: application/json\r\n\
Accept: application/json, text/event-stream\r\n\
MCP-Protocol-Version: 2026-07-28\r\n\
Mcp-Method: tools/call\r\n\
Mcp-Name: list_products\r\n\
\r\n";

/// The head of the benchmark upstream's answer (nginx `return 200`, `bench/run.sh`).
const UPSTREAM_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\n\
Server: nginx/1.22.1\r\n\
Date: Mon, 07 Dec 2026 17:00:00 GMT\r\n\
Content-Type: application/json\r\n\
Content-Length: 445\r\n\
Connection: keep-alive\r\n\
\r\n";

fn bench_heads(c: &mut Criterion) {
    assert_eq!(parse_client_head(CLIENT_HEAD), 7);
    // `Content-Length` and `Connection` frame the body and the connection, and are read from
    // the raw fields: the map keeps the other three.
    assert_eq!(parse_upstream_head(UPSTREAM_HEAD), 3);
    c.bench_function("request head, 7 fields (the benchmark's read)", |b| {
        b.iter(|| parse_client_head(black_box(CLIENT_HEAD)));
    });
    c.bench_function("response head, 5 fields (nginx's answer)", |b| {
        b.iter(|| parse_upstream_head(black_box(UPSTREAM_HEAD)));
    });
}

criterion_group!(benches, bench_heads);
criterion_main!(benches);
