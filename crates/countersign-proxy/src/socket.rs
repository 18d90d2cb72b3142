//! Reading and writing a TCP socket: a read that drains it also clears its readiness, and a
//! write of two buffers is one system call (every write of the gateway's own server, of its
//! splice path and of its plain upstream connections goes through here).
//!
//! Writes make their system call directly (rustix) rather than through libc, whose `send` and
//! `writev` are thread cancellation points: around each call glibc switched cancellation off and
//! on again, which the gateway (whose threads are never cancelled) paid on every write, 0.6 %
//! of its CPU at peak (`bash bench/profile.sh`).
//!
//! epoll is edge-triggered: once a read returns fewer bytes than it had room for, the socket
//! is empty until the event loop reports it again. tokio's own `AsyncRead::poll_read` uses
//! that; `try_read_buf` does not, so the next wait would cost one more `recv` that finds
//! nothing. On the request path that is one system call per request on each side.

use std::io::{self, IoSlice};

use bytes::{BufMut, BytesMut};
use rustix::net::SendFlags;
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

/// Writes all of `bytes` to `stream`.
pub(crate) async fn write_all(stream: &TcpStream, bytes: &[u8]) -> io::Result<()> {
    write_all_vectored(stream, bytes, &[]).await
}

/// Writes `first` then `second` to `stream`, in one system call when the socket takes both.
pub(crate) async fn write_all_vectored(
    stream: &TcpStream,
    mut first: &[u8],
    mut second: &[u8],
) -> io::Result<()> {
    while !(first.is_empty() && second.is_empty()) {
        match try_write(stream, first, second) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => {
                let from_first = written.min(first.len());
                first = &first[from_first..];
                second = &second[written - from_first..];
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                stream.writable().await?;
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Writes what `stream` takes of `first` then `second` in one system call: how many bytes it
/// took, or `WouldBlock` (the write readiness cleared) when it took none.
pub(crate) fn try_write(stream: &TcpStream, first: &[u8], second: &[u8]) -> io::Result<usize> {
    stream.try_io(Interest::WRITABLE, || {
        let written = if second.is_empty() {
            // As std's `TcpStream::write`: a peer that closed is an error, not a SIGPIPE.
            rustix::net::send(stream, first, SendFlags::NOSIGNAL)
        } else {
            rustix::io::writev(stream, &[IoSlice::new(first), IoSlice::new(second)])
        };
        written.map_err(io::Error::from)
    })
}
