//! Reading a TCP socket so that a read which drains it also clears its readiness.
//!
//! epoll is edge-triggered: once a read returns fewer bytes than it had room for, the socket
//! is empty until the event loop reports it again. tokio's own `AsyncRead::poll_read` uses
//! that; `try_read_buf` does not, so the next wait would cost one more `recv` that finds
//! nothing. On the request path that is one system call per request on each side.

use std::io;

use bytes::{BufMut, BytesMut};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Reads at most `max` of what `stream` has into the spare capacity of `buf` (at least one
/// byte of room is the caller's to reserve). `WouldBlock` when nothing was there; a short read
/// clears readiness.
pub(crate) fn read_draining(
    stream: &TcpStream,
    buf: &mut BytesMut,
    max: usize,
) -> io::Result<usize> {
    let room = (buf.capacity() - buf.len()).min(max);
    let mut short = None;
    let result = stream.try_io(Interest::READABLE, || {
        match stream.try_read_buf(&mut (&mut *buf).limit(max)) {
            // Reported to `try_io` as `WouldBlock`, which is what clears the readiness.
            Ok(n) if n > 0 && n < room => {
                short = Some(n);
                Err(io::ErrorKind::WouldBlock.into())
            }
            other => other,
        }
    });
    match short {
        Some(n) => Ok(n),
        None => result,
    }
}
