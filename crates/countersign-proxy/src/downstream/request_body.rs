//! The body of a client's request, read from its connection by whoever polls it (the parse
//! layer, after every check that may refuse the request unread): no task or channel between
//! the socket and the reader, and no byte read past the body's end.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::net::TcpStream;

use crate::body::BoxError;
use crate::socket::read_draining;

/// Bytes read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    #[error("the client closed the connection before the request body ended")]
    Truncated,
    #[error("request bodies framed by Transfer-Encoding are not read")]
    TransferEncoding,
    #[error("reading the request body")]
    Io(#[source] io::Error),
}

/// A request body: `Content-Length` bytes of the connection it arrived on.
#[derive(Debug)]
pub struct RequestBody {
    stream: Option<Arc<TcpStream>>,
    /// Body bytes that arrived with the head.
    first: Option<Bytes>,
    /// Bytes still to read from the socket, after `first`.
    remaining: u64,
    /// Bytes of `100 Continue` still to write before the first read.
    continue_left: usize,
    refused: bool,
    /// Set once every byte of the body is off the socket: only then may the connection read
    /// the next request.
    complete: Arc<AtomicBool>,
}

impl RequestBody {
    /// A body of `length` bytes on `stream`, of which `first` came with the head.
    pub(crate) fn new(
        stream: Arc<TcpStream>,
        first: Bytes,
        length: u64,
        expect_continue: bool,
        complete: Arc<AtomicBool>,
    ) -> Self {
        let remaining = length - first.len() as u64;
        let body = Self {
            stream: Some(stream),
            first: (!first.is_empty()).then_some(first),
            remaining,
            continue_left: if expect_continue && remaining > 0 {
                CONTINUE.len()
            } else {
                0
            },
            refused: false,
            complete,
        };
        // Everything already taken off the socket: whether or not anyone reads it, nothing of
        // it can be read as the next request.
        if remaining == 0 {
            body.complete.store(true, Ordering::Release);
        }
        body
    }

    /// The body of a `Transfer-Encoding` request: reading it is an error.
    pub(crate) fn refused() -> Self {
        Self {
            stream: None,
            first: None,
            remaining: 0,
            continue_left: 0,
            refused: true,
            complete: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A body with no bytes, for requests the server builds itself and for tests.
    pub fn empty() -> Self {
        Self {
            stream: None,
            first: None,
            remaining: 0,
            continue_left: 0,
            refused: false,
            complete: Arc::new(AtomicBool::new(true)),
        }
    }

    fn poll_continue(&mut self, cx: &mut Context<'_>, stream: &TcpStream) -> Poll<io::Result<()>> {
        while self.continue_left > 0 {
            ready!(stream.poll_write_ready(cx))?;
            let sent = CONTINUE.len() - self.continue_left;
            match stream.try_write(&CONTINUE[sent..]) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.continue_left -= n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, error: RequestBodyError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.stream = None;
        self.remaining = 0;
        Poll::Ready(Some(Err(error.into())))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.refused {
            return this.fail(RequestBodyError::TransferEncoding);
        }
        if let Some(first) = this.first.take() {
            if this.remaining == 0 {
                this.complete.store(true, Ordering::Release);
            }
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if this.remaining == 0 {
            this.complete.store(true, Ordering::Release);
            return Poll::Ready(None);
        }
        let Some(stream) = this.stream.clone() else {
            return Poll::Ready(None);
        };
        if let Err(error) = ready!(this.poll_continue(cx, &stream)) {
            return this.fail(RequestBodyError::Io(error));
        }
        loop {
            if let Err(error) = ready!(stream.poll_read_ready(cx)) {
                return this.fail(RequestBodyError::Io(error));
            }
            let want = usize::try_from(this.remaining).map_or(READ_CHUNK, |n| n.min(READ_CHUNK));
            let mut chunk = BytesMut::with_capacity(want);
            // Never past the body's end: what follows it is the next request's, or nobody's.
            match read_draining(&stream, &mut chunk, want) {
                Ok(0) => return this.fail(RequestBodyError::Truncated),
                Ok(n) => {
                    this.remaining -= n as u64;
                    if this.remaining == 0 {
                        this.stream = None;
                        this.complete.store(true, Ordering::Release);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(chunk.freeze()))));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return this.fail(RequestBodyError::Io(error)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.refused && self.first.is_none() && self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        if self.refused {
            return SizeHint::new();
        }
        let first = self.first.as_ref().map_or(0, |first| first.len() as u64);
        SizeHint::with_exact(first + self.remaining)
    }
}
