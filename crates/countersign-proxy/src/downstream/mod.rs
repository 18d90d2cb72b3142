//! The gateway's own HTTP/1.1 server for its MCP listener, in place of hyper's: each
//! connection is read and written by its own task, with no channel between the socket and the
//! request, and holds no buffer while it waits.
//!
//! Measured against hyper's server (bench/yardstick.sh, bench/stream-heap.sh): hyper kept
//! about 17 KiB of buffers for every open connection, idle or streaming, and a channel and
//! dispatcher per request. What it enforced is enforced here too: a header read timeout
//! (slowloris), a header count and head size limit (431), strict `Content-Length` framing,
//! `100 Continue`, keep-alive and pipelining, and a graceful drain.

mod connection;
mod head;
mod request_body;
mod response;

pub(crate) use connection::{ConnectionSettings, serve_connection};
pub(crate) use head::{HeadLimits, parse_request_head};
pub use request_body::{RequestBody, RequestBodyError};

#[cfg(test)]
mod tests;
