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

use rustix::pipe::{PipeFlags, SpliceFlags, fcntl_setpipe_size, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

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

/// Moves exactly `len` bytes from `from` to `to`. Both sockets stay usable by tokio: waits go
/// through their readiness, and a splice that finds nothing (or no room) clears it.
pub(crate) async fn splice_exactly(
    from: &TcpStream,
    to: &TcpStream,
    mut len: u64,
) -> Result<(), SpliceError> {
    let pipe = Pipe::new().map_err(SpliceError::From)?;
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
    Ok(())
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
