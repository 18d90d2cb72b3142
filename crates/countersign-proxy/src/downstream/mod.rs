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
pub(crate) use head::HeadLimits;
pub use request_body::{RequestBody, RequestBodyError};

/// [`head::parse_request_head`] with the default limits, for `crate::benching`: the number of
/// fields of the parsed head.
pub(crate) fn parse_head_for_bench(buf: &mut bytes::BytesMut) -> usize {
    let defaults = crate::config::Limits::default();
    let limits = HeadLimits {
        max_headers: defaults.max_headers.get(),
        max_head_bytes: defaults.max_header_bytes.get(),
    };
    match head::parse_request_head(buf, limits) {
        Ok(Some(head)) => head.request.headers().len(),
        _ => panic!("a complete, valid request head"),
    }
}

#[cfg(test)]
mod tests;
