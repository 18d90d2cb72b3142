//! One HTTP/1.1 connection to a plain upstream, read and written by the task of the request
//! that holds it, and the response body that reads the rest of its answer.
//!
//! While a connection idles in the pool, or a stream waits for its next event, it holds no
//! buffer: the read buffer is reserved only once the socket is readable, and released when
//! everything read has been handed on.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::failure::HeadOverdue;
use super::http1_pool::Lent;
use super::http1_wire::{Decoded, Framing, Head, WireError, parse_head};
use crate::body::BoxError;
use crate::deadline_timer::DeadlineTimer;
use crate::splice::{SpliceError, Way, splice_exactly};

/// Bytes reserved for an answer's first read: most MCP answers arrive in one.
const FIRST_READ: usize = 16 * 1024;
/// The most reserved for one read. Each read that fills its room doubles the next one's, up to
/// this: a large answer then costs a sixteenth of the system calls, on both sides, that 16 KiB
/// reads would (each read is written on to the client as one frame).
const MAX_READ: usize = 256 * 1024;

/// How long an idle connection's readiness is trusted to show the upstream's close; see
/// [`Connection::is_closed`].
pub(super) const TRUST_READINESS_FOR: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(super) struct Connection {
    stream: TcpStream,
    /// Read from the socket and not yet handed on.
    buf: BytesMut,
    /// Room reserved for the next read: [`FIRST_READ`] at each answer's start, doubled after
    /// each read that fills it.
    read_size: usize,
    /// Bounds each request's wait for its response head, one timer for the connection's life.
    head_timer: DeadlineTimer,
}

/// A request could not be written; `unsent` says whether none of it reached the socket, so
/// that another connection may carry it without sending it twice.
#[derive(Debug)]
pub(super) struct WriteFailure {
    pub(super) error: BoxError,
    pub(super) unsent: bool,
}

impl Connection {
    pub(super) fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
            read_size: FIRST_READ,
            head_timer: DeadlineTimer::default(),
        }
    }

    /// Whether the upstream sent more than the answer it was asked for: those bytes would be
    /// read as the next request's answer, so the connection must not carry one.
    pub(super) fn has_unasked_bytes(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Bytes read from the socket and not handed on yet.
    pub(super) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether this idle connection, idle for `idle_for`, can no longer carry a request: the
    /// upstream closed it, or sent bytes nobody asked for.
    ///
    /// The read that ended its last answer drained the socket and cleared its readiness
    /// (`poll_fill`), so while the event loop has seen nothing since, the socket is as it was
    /// left and no system call is needed. That is trusted only for a connection idle less than
    /// [`TRUST_READINESS_FOR`]: an upstream's close may arrive between two turns of a busy event
    /// loop, and upstreams close idle connections after seconds (Node and uvicorn after 5),
    /// not within one. Otherwise one `recv` that finds nothing when it is open.
    pub(super) fn is_closed(&self, idle_for: Duration) -> bool {
        if self.has_unasked_bytes() {
            return true;
        }
        if idle_for < TRUST_READINESS_FOR {
            let mut context = Context::from_waker(Waker::noop());
            if self.stream.poll_read_ready(&mut context).is_pending() {
                return false;
            }
        }
        let mut probe = [0u8; 1];
        !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Writes `bytes`, the whole request, waiting for the socket at most until `by`.
    pub(super) async fn write_request(
        &mut self,
        mut bytes: &[u8],
        by: Instant,
    ) -> Result<(), WriteFailure> {
        let mut written = 0;
        while !bytes.is_empty() {
            let ready = poll_fn(|cx| {
                let ready = self.stream.poll_write_ready(cx);
                self.unless_overdue(ready, by, cx)
            })
            .await;
            let result = match ready {
                Some(Ok(())) => crate::socket::try_write(&self.stream, bytes, &[]),
                Some(Err(error)) => Err(error),
                None => {
                    return Err(WriteFailure {
                        error: Box::new(HeadOverdue),
                        unsent: written == 0,
                    });
                }
            };
            match result {
                Ok(0) => {
                    return Err(WriteFailure {
                        error: io::Error::from(io::ErrorKind::WriteZero).into(),
                        unsent: written == 0,
                    });
                }
                Ok(n) => {
                    written += n;
                    bytes = &bytes[n..];
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => {
                    return Err(WriteFailure {
                        error: error.into(),
                        unsent: written == 0,
                    });
                }
            }
        }
        Ok(())
    }

    /// Reads until one whole response head has arrived, at most until `by`.
    pub(super) async fn read_head(&mut self, by: Instant) -> Result<Head, BoxError> {
        self.read_size = FIRST_READ;
        loop {
            if let Some(head) = parse_head(&mut self.buf)? {
                return Ok(head);
            }
            let filled = poll_fn(|cx| {
                let filled = self.poll_fill(cx);
                self.unless_overdue(filled, by, cx)
            })
            .await;
            match filled {
                Some(Ok(0)) => return Err(WireError::Truncated.into()),
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(WireError::Io(error).into()),
                None => return Err(Box::new(HeadOverdue)),
            }
        }
    }

    /// `poll` as it is while it is ready or `by` is still ahead (`cx` is then woken at `by`);
    /// `Ready(None)` once `by` has passed.
    fn unless_overdue<T>(
        &mut self,
        poll: Poll<T>,
        by: Instant,
        cx: &mut Context<'_>,
    ) -> Poll<Option<T>> {
        match poll {
            Poll::Ready(ready) => Poll::Ready(Some(ready)),
            Poll::Pending if self.head_timer.poll_passed(by, cx) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Reads what the socket has into the buffer; `Ok(0)` at the upstream's close.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            if self.buf.is_empty() {
                // Drops this buffer's share of an allocation whose bytes were all handed on.
                self.buf = BytesMut::new();
            }
            ready!(self.stream.poll_read_ready(cx))?;
            self.buf.reserve(self.read_size);
            let room = self.buf.capacity() - self.buf.len();
            // A short read clears the readiness: `is_closed` then needs no system call.
            match crate::socket::read_draining(&self.stream, &mut self.buf, usize::MAX) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Ok(n) => {
                    self.read_size = next_read_size(self.read_size, n == room);
                    return Poll::Ready(Ok(n));
                }
                result => return Poll::Ready(result),
            }
        }
    }
}

/// The room for the read after one of `current` bytes: twice as much when that read `filled`
/// its room (more was waiting), up to [`MAX_READ`].
fn next_read_size(current: usize, filled: bool) -> usize {
    if filled {
        (current * 2).min(MAX_READ)
    } else {
        current
    }
}

/// The body of a plain upstream's response, read from the connection it arrives on; the
/// connection goes back to the pool once the body has ended exactly and is closed otherwise.
#[derive(Debug)]
pub struct WireBody {
    connection: Option<Lent>,
    framing: Framing,
    reusable: bool,
}

impl WireBody {
    pub(super) fn new(connection: Lent, framing: Framing, reusable: bool) -> Self {
        let mut body = Self {
            connection: Some(connection),
            framing,
            reusable,
        };
        if body.framing.is_done() {
            body.finish();
        }
        body
    }

    fn finish(&mut self) {
        if let Some(lent) = self.connection.take()
            && self.reusable
        {
            lent.give_back();
        }
    }

    /// Bytes of a length-framed body not read from the socket yet; `None` for other framings.
    pub(crate) fn unread_len(&self) -> Option<u64> {
        let Framing::Length(remaining) = self.framing else {
            return None;
        };
        let buffered = self.connection.as_ref().map_or(0, |lent| lent.buffered());
        Some(remaining.saturating_sub(buffered as u64))
    }

    /// Writes `head`, then the rest of this length-framed body, to `client`: what arrived with
    /// the answer's head in one write with it, the unread rest socket to socket with `splice`.
    /// Returns the body bytes sent and how. As when the body is read, the connection goes back
    /// to the pool once the body has ended exactly, and is closed on any failure.
    pub(crate) async fn splice_to(
        &mut self,
        head: &[u8],
        client: &TcpStream,
    ) -> Result<(u64, Way), SpliceError> {
        let result = self.splice_rest(head, client).await;
        match result {
            Ok(_) => {
                self.framing = Framing::Length(0);
                self.finish();
            }
            Err(_) => self.connection = None,
        }
        result
    }

    async fn splice_rest(
        &mut self,
        head: &[u8],
        client: &TcpStream,
    ) -> Result<(u64, Way), SpliceError> {
        let Framing::Length(total) = self.framing else {
            // Only a length-framed body says where it ends without being read.
            return Err(SpliceError::From(io::Error::other(
                "not a length-framed body",
            )));
        };
        let Some(lent) = self.connection.as_mut() else {
            // Ended or failed before: nothing of it is left to send.
            return Err(SpliceError::Truncated);
        };
        let connection = lent.connection();
        let buffered = usize::try_from(total).map_or(connection.buf.len(), |total| {
            total.min(connection.buf.len())
        });
        let first = connection.buf.split_to(buffered);
        if connection.buf.is_empty() {
            // An idle connection holds no buffer.
            connection.buf = BytesMut::new();
        }
        crate::socket::write_all_vectored(client, head, &first)
            .await
            .map_err(SpliceError::To)?;
        let way = splice_exactly(&connection.stream, client, total - buffered as u64).await?;
        Ok((total, way))
    }

    fn fail(&mut self, error: impl Into<BoxError>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // A broken answer leaves the connection in no state to reuse; dropping it closes it.
        self.connection = None;
        Poll::Ready(Some(Err(error.into())))
    }
}

impl Body for WireBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(lent) = this.connection.as_mut() else {
                return Poll::Ready(None);
            };
            let connection = lent.connection();
            match this.framing.decode(&mut connection.buf) {
                Err(error) => return this.fail(error),
                Ok(Decoded::Data(data)) => {
                    if this.framing.is_done() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Decoded::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Decoded::More) => match ready!(connection.poll_fill(cx)) {
                    Ok(0) => {
                        this.connection = None;
                        return match this.framing.at_close() {
                            Ok(()) => Poll::Ready(None),
                            Err(error) => Poll::Ready(Some(Err(error.into()))),
                        };
                    }
                    Ok(_) => {}
                    Err(error) => return this.fail(error),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.connection.is_none() || self.framing.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(remaining) => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_double_while_they_fill_their_room_up_to_the_most() {
        let mut size = FIRST_READ;
        let mut sizes = vec![size];
        for _ in 0..6 {
            size = next_read_size(size, true);
            sizes.push(size);
        }
        let kib: Vec<usize> = sizes.iter().map(|s| s / 1024).collect();
        assert_eq!(kib, [16, 32, 64, 128, 256, 256, 256]);
        assert_eq!(next_read_size(64 * 1024, false), 64 * 1024);
    }
}
