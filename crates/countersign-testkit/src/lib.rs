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
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding an ephemeral loopback port")
}
