//! One client connection, served in the task of the connection: read a request head, hand the
//! request to the service, write its answer, and go on while the connection may be reused.
//!
//! An idle connection, or one waiting for a stream's next event, holds no buffer: the read
//! buffer is reserved once the socket is readable and released when everything in it has been
//! consumed, and the write buffer is released before every wait.

use std::convert::Infallible;
use std::future::poll_fn;
use std::io::{self, Write as _};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, Response, Version};
use http_body::Body;
use http_body_util::BodyExt;
use memchr::memmem::Finder;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::{Service, ServiceExt};

use super::head::{BodyFraming, HeadError, HeadLimits, RequestHead, parse_request_head};
use super::request_body::RequestBody;
use super::response::{ResponseFraming, choose_framing, encode_head, refusal};
use crate::body::ResponseBody;
use crate::clock::{Clock, SystemClock};
use crate::deadline_timer::DeadlineTimer;
use crate::http_fields::has_connection_token;
use crate::socket::{read_draining, write_all, write_all_vectored};

/// Bytes reserved for one read of request heads.
const READ_CHUNK: usize = 8 * 1024;
/// Response bytes gathered before they are written, when the body has more ready at once.
const WRITE_BATCH: usize = 64 * 1024;
/// Body frames at least this large are written as they are, not copied into the batch.
const DIRECT_WRITE: usize = 16 * 1024;
/// After a refusal with the request unread, what is still read and dropped before the close,
/// so the client reads the refusal rather than a reset.
const LINGER_BYTES: usize = 256 * 1024;
const LINGER_TIME: Duration = Duration::from_secs(2);

/// What the server enforces on every connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionSettings {
    pub(crate) head: HeadLimits,
    /// A request head (and, before it, an idle keep-alive connection's wait) must arrive
    /// within this (slowloris).
    pub(crate) header_read_timeout: Duration,
}

/// Serves `stream` until the client closes it, a request or answer ends it, or `shutdown`
/// turns true while it waits for a request.
pub(crate) async fn serve_connection<S>(
    stream: TcpStream,
    mut service: S,
    settings: ConnectionSettings,
    shutdown: watch::Receiver<bool>,
) where
    S: Service<Request<RequestBody>, Response = Response<ResponseBody>, Error = Infallible>,
{
    let mut connection = Connection {
        stream: Arc::new(stream),
        buf: BytesMut::new(),
        scanned: 0,
    };
    // One wait for the shutdown for the connection's life, rather than one set up and torn
    // down (a waiter registered and removed under the channel's lock) for every request.
    let stopping = {
        let mut shutdown = shutdown.clone();
        async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        }
    };
    tokio::pin!(stopping);
    // One timer for the connection's life, moved on before each head.
    let mut head_timer = DeadlineTimer::default();
    loop {
        let head_by = SystemClock.now() + settings.header_read_timeout;
        let read = tokio::select! {
            biased;
            read = connection.read_head(settings.head) => read,
            () = head_timer.passed(head_by) => return,
            () = &mut stopping => return,
        };
        let head = match read {
            Ok(head) => head,
            Err(ReadError::Head(error)) => {
                tracing::debug!(%error, "request head refused");
                let _ = write_all(&connection.stream, &refusal(error.status())).await;
                connection.linger().await;
                return;
            }
            Err(ReadError::Io(error)) => {
                tracing::debug!(%error, "reading a request head failed");
                return;
            }
            // Closed: nothing to answer.
            Err(ReadError::Closed) => return,
        };
        let RequestHead {
            request,
            framing,
            keep_alive,
            expect_continue,
        } = head;
        let complete = Arc::new(AtomicBool::new(false));
        let body = match framing {
            BodyFraming::Length(length) => {
                let first = connection.take_body_bytes(length);
                RequestBody::new(
                    connection.stream.clone(),
                    first,
                    length,
                    expect_continue,
                    complete.clone(),
                )
            }
            BodyFraming::Refused => RequestBody::refused(),
        };
        let method = request.method().clone();
        let version = request.version();
        let request = request.map(|()| body);
        let response = match service.ready().await {
            Ok(ready) => match ready.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
            Err(never) => match never {},
        };
        // A body left unread ends the connection: its bytes must never be read as a request.
        let keep_alive = keep_alive
            && complete.load(Ordering::Acquire)
            && !*shutdown.borrow()
            && !has_connection_token(response.headers(), "close");
        let written = connection
            .write_response(response, &method, version, keep_alive, &complete)
            .await;
        match written {
            Ok(true) if complete.load(Ordering::Acquire) => {}
            Ok(_) if !complete.load(Ordering::Acquire) => {
                connection.linger().await;
                return;
            }
            _ => return,
        }
    }
}

#[derive(Debug)]
enum ReadError {
    Head(HeadError),
    Closed,
    Io(io::Error),
}

struct Connection {
    stream: Arc<TcpStream>,
    /// Read from the socket and not yet consumed: a head in progress, or pipelined requests.
    buf: BytesMut,
    /// Leading bytes of `buf` known not to hold the end of a head.
    scanned: usize,
}

impl Connection {
    async fn read_head(&mut self, limits: HeadLimits) -> Result<RequestHead, ReadError> {
        loop {
            if self.head_may_be_complete() || self.buf.len() > limits.max_head_bytes {
                let parsed = parse_request_head(&mut self.buf, limits).map_err(ReadError::Head)?;
                // Blank lines the parser skipped moved the buffer: search it again from the top.
                self.scanned = 0;
                if let Some(head) = parsed {
                    self.release_if_empty();
                    return Ok(head);
                }
            }
            match self.fill().await {
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => {}
                Err(error) => return Err(ReadError::Io(error)),
            }
        }
    }

    /// Whether `buf` holds an empty line yet. Only the bytes not searched before are searched,
    /// so a head that arrives a byte at a time costs its length, not its length squared.
    fn head_may_be_complete(&mut self) -> bool {
        // Built once: `memmem::find` sets up a searcher per call, which cost more than the
        // search of a short head.
        static CRLF_END: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\r\n"));
        static LF_END: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\n"));
        let from = self.scanned.saturating_sub(3);
        let found = CRLF_END.find(&self.buf[from..]).is_some()
            || LF_END.find(&self.buf[from..]).is_some()
            // A head preceded by blank lines: the parser skips them.
            || self.buf.first().is_some_and(|b| matches!(b, b'\r' | b'\n'));
        self.scanned = self.buf.len();
        found
    }

    /// Up to `length` body bytes that arrived with the head, in an allocation of their own.
    fn take_body_bytes(&mut self, length: u64) -> Bytes {
        let n = usize::try_from(length).map_or(self.buf.len(), |n| n.min(self.buf.len()));
        let first = Bytes::copy_from_slice(&self.buf[..n]);
        // Not `split_to`: that would make the buffer shared (an allocation) only to drop the part.
        self.buf.advance(n);
        self.release_if_empty();
        first
    }

    fn release_if_empty(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }

    /// Reads what the socket has into `buf`, reserving room only once it is readable.
    async fn fill(&mut self) -> io::Result<usize> {
        loop {
            self.release_if_empty();
            self.stream.readable().await?;
            self.buf.reserve(READ_CHUNK);
            match read_draining(&self.stream, &mut self.buf, usize::MAX) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                result => return result,
            }
        }
    }

    /// Writes `response`; `Ok(true)` when the connection may carry another request. A body
    /// that fails, or does not match the length announced, ends the connection without the
    /// message's end, so the client sees a truncated answer rather than a wrong one.
    async fn write_response(
        &mut self,
        response: Response<ResponseBody>,
        method: &Method,
        version: Version,
        keep_alive: bool,
        body_complete: &AtomicBool,
    ) -> io::Result<bool> {
        let (parts, mut body) = response.into_parts();
        let framing = choose_framing(method, version, &parts, &body.size_hint());
        let keep_alive = keep_alive && framing != ResponseFraming::UntilClose;
        let mut out = Vec::with_capacity(512);
        encode_head(&parts, framing, version, keep_alive, &mut out);
        drop(parts);
        if framing == ResponseFraming::None {
            write_all(&self.stream, &out).await?;
            return Ok(keep_alive);
        }
        if let ResponseFraming::Length(length) = framing
            && let Some(relay) = body.passthrough_mut()
        {
            // An upstream's answer passed on unchanged: socket to socket in the kernel.
            if relay.splice_to(&out, &self.stream).await? != length {
                return Err(io::Error::other("response body shorter than its length"));
            }
            return Ok(keep_alive);
        }
        let mut sent: u64 = 0;
        loop {
            // Everything the body has ready now goes out in one write; the batch is written and
            // released before waiting for more.
            let ready = poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await;
            let frame = match ready {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    if !out.is_empty() {
                        write_all(&self.stream, &out).await?;
                        out = Vec::new();
                    }
                    let may_read = body_complete.load(Ordering::Acquire);
                    self.next_frame(&mut body, may_read).await?
                }
            };
            let data = match frame {
                None => break,
                Some(Err(error)) => return Err(io::Error::other(error)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    // Empty data and trailers: nothing to send.
                    _ => continue,
                },
            };
            sent += data.len() as u64;
            if let ResponseFraming::Length(length) = framing
                && sent > length
            {
                return Err(io::Error::other("response body longer than its length"));
            }
            if framing == ResponseFraming::Chunked {
                // Writing into a Vec cannot fail.
                let _ = write!(out, "{:x}\r\n", data.len());
            }
            if data.len() >= DIRECT_WRITE {
                // What is batched (a chunk's size line, at least) and the frame, in one write.
                write_all_vectored(&self.stream, &out, &data).await?;
                out.clear();
            } else {
                out.extend_from_slice(&data);
            }
            if framing == ResponseFraming::Chunked {
                out.extend_from_slice(b"\r\n");
            }
            if out.len() >= WRITE_BATCH {
                write_all(&self.stream, &out).await?;
                out.clear();
            }
        }
        match framing {
            ResponseFraming::Length(length) if sent != length => {
                return Err(io::Error::other("response body shorter than its length"));
            }
            ResponseFraming::Chunked => out.extend_from_slice(b"0\r\n\r\n"),
            _ => {}
        }
        write_all(&self.stream, &out).await?;
        Ok(keep_alive)
    }

    /// The body's next frame. Meanwhile, once the request has been read whole, the socket is
    /// watched: a client that closes ends the answer (an abandoned stream stops at once, not
    /// at its next event), and bytes it sends are kept as its next request, up to one head.
    async fn next_frame(
        &mut self,
        body: &mut ResponseBody,
        may_read: bool,
    ) -> io::Result<Option<Result<http_body::Frame<Bytes>, crate::body::BoxError>>> {
        loop {
            let room = self.buf.len() < READ_CHUNK;
            tokio::select! {
                frame = body.frame() => return Ok(frame),
                readable = self.stream.readable(), if may_read && room => {
                    readable?;
                    self.buf.reserve(READ_CHUNK);
                    match self.stream.try_read_buf(&mut self.buf) {
                        Ok(0) => return Err(io::ErrorKind::ConnectionAborted.into()),
                        Ok(_) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                            self.release_if_empty();
                        }
                        Err(error) => return Err(error),
                    }
                }
            }
        }
    }

    /// Before closing with bytes of the client's unread: send the end of the stream, then read
    /// and drop what is still coming, for a bounded time and amount, so that closing with
    /// unread data does not reset the connection under the answer just written.
    async fn linger(self) {
        let _ = socket2::SockRef::from(&*self.stream).shutdown(std::net::Shutdown::Write);
        let drain = async {
            let mut dropped = 0;
            let mut scratch = vec![0u8; 8 * 1024];
            while dropped < LINGER_BYTES {
                if self.stream.readable().await.is_err() {
                    return;
                }
                match self.stream.try_read(&mut scratch) {
                    Ok(0) => return,
                    Ok(n) => dropped += n,
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    }
}
