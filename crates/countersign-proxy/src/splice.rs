//! Moving bytes from one TCP socket to another inside the kernel, with `splice(2)` through a
//! pipe: the pages the upstream's socket received are handed to the client's socket, and never
//! copied into the gateway's memory and out again.
//!
//! Relaying through user space copies every byte twice more than a direct connection does (in
//! from the upstream, out to the client), which for a large answer is most of the gateway's
//! cost: at 1 MiB, relaying by copies ran at under half of direct throughput on the benchmark
//! machine. The server uses this only for an answer the gateway passes on unchanged (see
//! [`crate::body::ResponseBody::passthrough_mut`]).

use std::io;
use std::os::fd::OwnedFd;

use bytes::BytesMut;
use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags, fcntl_setpipe_size, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::socket::{read_draining, write_all};

/// What the pipe is asked to hold: one splice then moves up to this much. The same as the
/// largest read of the copying path (`upstream/http1_conn.rs`); where the system refuses it
/// (an unprivileged user past `pipe-user-pages-soft`), the default 64 KiB pipe is used.
const PIPE_BYTES: usize = 256 * 1024;

/// Why bytes stopped moving.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpliceError {
    #[error("reading the upstream failed")]
    From(#[source] io::Error),
    #[error("the upstream closed before the end of the body")]
    Truncated,
    #[error("writing to the client failed")]
    To(#[source] io::Error),
}

/// How the bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Spliced,
    /// The system refused to splice these sockets.
    Copied,
}

impl Way {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Way::Spliced => "splice",
            Way::Copied => "copy",
        }
    }
}

/// Moves exactly `len` bytes from `from` to `to`. Both sockets stay usable by tokio: waits go
/// through their readiness, and a splice that finds nothing (or no room) clears it.
///
/// Where the system cannot splice these sockets (no pipe to be had, or a sandboxed kernel that
/// refuses `splice` on sockets), the bytes are copied instead: slower, never wrong.
pub(crate) async fn splice_exactly(
    from: &TcpStream,
    to: &TcpStream,
    mut len: u64,
) -> Result<Way, SpliceError> {
    let Ok(pipe) = Pipe::new() else {
        return copy_exactly(from, to, len).await;
    };
    while len > 0 {
        // A pipe smaller than asked (see `PIPE_BYTES`) just takes less per step.
        let want = usize::try_from(len).unwrap_or(usize::MAX).min(PIPE_BYTES);
        let moved = loop {
            from.readable().await.map_err(SpliceError::From)?;
            let spliced = from.try_io(Interest::READABLE, || {
                splice(from, None, &pipe.write, None, want, flags()).map_err(io::Error::from)
            });
            match spliced {
                Ok(0) => return Err(SpliceError::Truncated),
                Ok(n) => break n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                // Refused for what the sockets are, not for anything that happened to them.
                Err(error) if cannot_splice(&error) => return copy_exactly(from, to, len).await,
                Err(error) => return Err(SpliceError::From(error)),
            }
        };
        let mut left = moved;
        while left > 0 {
            to.writable().await.map_err(SpliceError::To)?;
            let spliced = to.try_io(Interest::WRITABLE, || {
                splice(&pipe.read, None, to, None, left, flags()).map_err(io::Error::from)
            });
            match spliced {
                Ok(0) => return Err(SpliceError::To(io::ErrorKind::WriteZero.into())),
                Ok(n) => left -= n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(SpliceError::To(error)),
            }
        }
        len -= moved as u64;
    }
    Ok(Way::Spliced)
}

/// Moves exactly `len` bytes from `from` to `to` through a buffer of the gateway's.
async fn copy_exactly(from: &TcpStream, to: &TcpStream, mut len: u64) -> Result<Way, SpliceError> {
    let mut buf = BytesMut::new();
    while len > 0 {
        from.readable().await.map_err(SpliceError::From)?;
        let want = usize::try_from(len).unwrap_or(usize::MAX).min(PIPE_BYTES);
        buf.reserve(want);
        match read_draining(from, &mut buf, want) {
            Ok(0) => return Err(SpliceError::Truncated),
            Ok(n) => {
                write_all(to, &buf).await.map_err(SpliceError::To)?;
                buf.clear();
                len -= n as u64;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(SpliceError::From(error)),
        }
    }
    Ok(Way::Copied)
}

/// Whether `splice` refused the sockets themselves: `EINVAL` for a file it cannot splice,
/// `ENOSYS` and `EOPNOTSUPP` where it is not offered at all.
fn cannot_splice(error: &io::Error) -> bool {
    let refused = [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP];
    error
        .raw_os_error()
        .is_some_and(|code| refused.iter().any(|errno| errno.raw_os_error() == code))
}

/// `MOVE` lets the kernel hand pages over rather than copy them; `NONBLOCK` keeps the pipe
/// side from blocking (the sockets are non-blocking already).
fn flags() -> SpliceFlags {
    SpliceFlags::MOVE | SpliceFlags::NONBLOCK
}

/// A pipe for one answer: it holds pages only between the two splices of one step, and is
/// empty whenever the relay waits. Closed when dropped, even mid-answer.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // A refusal leaves the default size, which works as well in more steps.
        let _ = fcntl_setpipe_size(&write, PIPE_BYTES);
        Ok(Self { read, write })
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Two connected sockets: (the one written to, the gateway's end).
    async fn socket_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let outer = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (inner, _) = listener.accept().await.expect("accept");
        (outer, inner)
    }

    async fn moved_by(how: &str, len: usize) -> (Way, Vec<u8>) {
        let (mut upstream, from) = socket_pair().await;
        let (mut client, to) = socket_pair().await;
        let sent: Vec<u8> = (0..len + 10).map(|i| (i % 253) as u8).collect();
        let writer = tokio::spawn(async move {
            upstream.write_all(&sent).await.expect("write");
            upstream
        });
        let way = match how {
            "splice" => splice_exactly(&from, &to, len as u64).await,
            _ => copy_exactly(&from, &to, len as u64).await,
        }
        .expect("moved");
        drop(to);
        let mut received = Vec::new();
        client.read_to_end(&mut received).await.expect("read");
        drop(writer.await.expect("writer"));
        (way, received)
    }

    #[tokio::test]
    async fn both_ways_move_exactly_the_bytes_asked_for_in_order() {
        let len = 3 << 20;
        let expected: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        for (how, expected_way) in [("splice", Way::Spliced), ("copy", Way::Copied)] {
            let (way, received) = moved_by(how, len).await;
            assert_eq!(way, expected_way, "loopback TCP sockets can be spliced");
            assert_eq!(received.len(), len, "{how}");
            assert!(received == expected, "{how}: the bytes changed");
        }
    }

    #[tokio::test]
    async fn an_upstream_that_closes_early_is_a_truncation_both_ways() {
        for how in ["splice", "copy"] {
            let (mut upstream, from) = socket_pair().await;
            let (_client, to) = socket_pair().await;
            upstream.write_all(&[7; 1000]).await.expect("write");
            drop(upstream);
            let moved = match how {
                "splice" => splice_exactly(&from, &to, 5000).await,
                _ => copy_exactly(&from, &to, 5000).await,
            };
            assert!(
                matches!(moved, Err(SpliceError::Truncated)),
                "{how}: {moved:?}"
            );
        }
    }

    #[test]
    fn only_refusals_of_the_sockets_themselves_fall_back_to_copies() {
        for errno in [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP] {
            assert!(cannot_splice(&io::Error::from(errno)));
        }
        for errno in [Errno::PIPE, Errno::CONNRESET, Errno::AGAIN] {
            assert!(!cannot_splice(&io::Error::from(errno)));
        }
    }
}
