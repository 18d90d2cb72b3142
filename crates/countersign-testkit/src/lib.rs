//! Test doubles for countersign: a recording fake MCP upstream (and a scripted MCP server to put
//! behind it, see [`mcp`]), a raw HTTP/1.1 client, an SSE reader, temporary files, a throwaway
//! `redis-server`, test certificate authorities and TLS for the fake ([`tls`]), and the
//! fuzz-corpus replay ([`fuzz_corpus`]).
//!
//! A dev-dependency only. Most security tests read "send X through the gateway; assert the fake
//! upstream recorded nothing (or exactly Y)", so the upstream records every request it receives.

#![forbid(unsafe_code)]

mod client;
pub mod fuzz_corpus;
pub mod mcp;
mod raw;
mod redis;
mod temp;
pub mod tls;
mod upstream;

pub use client::{
    Collected, SseStream, TestClient, collect, next_sse_message, sse_data, sse_messages,
    take_sse_event,
};
pub use raw::try_raw_request;
pub use raw::{Dechunked, RawResponse, dechunk, parse_head, raw_post, raw_request};
pub use redis::RedisServer;
pub use temp::{TempDir, TempFile};
pub use upstream::{RecordedRequest, RecordingUpstream, Reply};

/// A TCP port that was free a moment ago, for processes that need a port number up front.
///
/// Ports come from below the kernel's ephemeral range. A port the kernel handed out with
/// `bind(0)` is an ephemeral one, and any outgoing connection on the machine (another test's
/// client, Redis, a package download) may take it as its source port between this call and the
/// process binding it: the gateway then fails with "Address already in use". Below the range
/// only listeners ever bind, and each test process walks its own pid-seeded sequence, so two
/// parallel test processes rarely meet and a port one of them holds is skipped.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let below = ephemeral_low().saturating_sub(LOWEST).max(1);
    let seed = std::process::id().wrapping_mul(7_919);
    for _ in 0..below {
        let offset = seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % below;
        let port = u16::try_from(LOWEST + offset).expect("ports stay below the ephemeral range");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {LOWEST} and the ephemeral range")
}

/// The lowest port of the kernel's ephemeral range (32768 where it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|&low: &u32| low > 11_000 && low <= 65_535)
        .unwrap_or(32_768)
}
