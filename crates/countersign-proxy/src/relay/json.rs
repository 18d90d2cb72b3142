//! Streams a non-SSE (JSON) upstream body to the client as it arrives, when no observer needs
//! the whole message.
//!
//! Buffering a 16 MiB answer before sending its first byte costs the gateway 16 MiB per call in
//! flight and the client the whole transfer time in latency, for nothing when the gateway
//! neither edits nor reads the body. Streaming keeps what buffering enforced:
//!
//! - **Size.** A body whose declared length exceeds the upstream's `max_response_bytes` is
//!   refused before a byte of it is read (502, as before). A body without a declared length is
//!   counted as it passes: the bytes that would take it past the limit are not sent, and the
//!   response is ended with an error, so the client sees a truncated body with broken framing
//!   (no final chunk; the connection is closed) rather than a complete-looking one.
//! - **Time.** The whole body must pass within `response_timeout` of its headers, as the
//!   buffered body had to arrive within it: an upstream that drips bytes cannot hold a response
//!   (and the client's slot) forever. Past it the response is ended the same way.
//! - **Bytes.** Data is forwarded unchanged, as it is read; trailers are not relayed, as the
//!   buffered path never relayed them.
//!
//! A cut counts in `countersign_limit_hits_total` (`response_bytes`, `response_timeout`) and is
//! logged; the request was already counted `forwarded`, since its headers were.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::warn;

use crate::body::BoxError;
use crate::deadline_timer::DeadlineTimer;
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;
use crate::splice::SpliceError;
use crate::upstream::WireBody;

/// The bounds of one streamed body.
#[derive(Debug, Clone, Copy)]
pub struct BodyBounds {
    /// Most bytes relayed: the upstream's `max_response_bytes`.
    pub max_bytes: usize,
    /// Time from the headers to the body's end: the upstream's `response_timeout`.
    pub deadline: Duration,
}

pin_project! {
    /// Response body relaying an upstream body within [`BodyBounds`].
    #[project = JsonRelayProj]
    pub struct JsonRelay<B> {
        // `None` once ended or cut: dropping it closes a connection left mid-body rather than
        // handing it back to the pool.
        #[pin]
        upstream: Option<B>,
        relayed: usize,
        bounds: BodyBounds,
        // Whether the upstream was read yet: see `poll_frame`.
        read_before: bool,
        // When the whole body must have passed: its headers' arrival plus `bounds.deadline`.
        ends_by: Instant,
        // Made the first time the relay would wait, which most answers, whole with their head,
        // never do.
        timer: DeadlineTimer,
        metrics: ProxyMetrics,
        upstream_label: &'static str,
    }
}

impl<B> std::fmt::Debug for JsonRelay<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonRelay")
            .field("relayed", &self.relayed)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl<B: Body> JsonRelay<B> {
    /// Relays `upstream`, the body of the upstream named `upstream_label`, whose headers
    /// arrived at `headers_at`; refuses it when its declared length is already past
    /// `bounds.max_bytes`.
    pub fn new(
        upstream: B,
        bounds: BodyBounds,
        headers_at: Instant,
        metrics: &ProxyMetrics,
        upstream_label: &'static str,
    ) -> Result<Self, ProxyError> {
        // hyper reports a declared Content-Length as the lower bound.
        if upstream.size_hint().lower() > bounds.max_bytes as u64 {
            metrics.record_limit_hit("response_bytes");
            return Err(ProxyError::UpstreamResponseTooLarge {
                upstream: upstream_label.to_owned(),
                limit: bounds.max_bytes,
            });
        }
        Ok(Self {
            upstream: Some(upstream),
            relayed: 0,
            bounds,
            read_before: false,
            ends_by: headers_at + bounds.deadline,
            timer: DeadlineTimer::default(),
            metrics: metrics.clone(),
            upstream_label,
        })
    }
}

impl<B> Body for JsonRelay<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            let Some(upstream) = this.upstream.as_mut().as_pin_mut() else {
                return Poll::Ready(None);
            };
            // Checked before reading, so an upstream with bytes always ready (and a client slow
            // to take them) cannot outrun it. Not before the first read, which follows the
            // headers at once, nor once the upstream has ended, when no read can take long:
            // then an answer whose body came with its head, most of them, never arms the timer.
            let checked = *this.read_before && !upstream.is_end_stream();
            if checked && this.timer.poll_passed(*this.ends_by, cx) {
                return Poll::Ready(Some(Err(timed_out(&mut this))));
            }
            *this.read_before = true;
            match upstream.poll_frame(cx) {
                // Waiting for the upstream: the timer must be armed to end the wait.
                Poll::Pending if !checked && this.timer.poll_passed(*this.ends_by, cx) => {
                    return Poll::Ready(Some(Err(timed_out(&mut this))));
                }
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.upstream.set(None);
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(source))) => {
                    let error = ProxyError::UpstreamBody {
                        upstream: (*this.upstream_label).to_owned(),
                        source: source.into(),
                    };
                    return Poll::Ready(Some(Err(cut(&mut this, None, error))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let within = this
                        .relayed
                        .checked_add(data.len())
                        .filter(|total| *total <= this.bounds.max_bytes);
                    let Some(total) = within else {
                        let error = ProxyError::UpstreamResponseTooLarge {
                            upstream: (*this.upstream_label).to_owned(),
                            limit: this.bounds.max_bytes,
                        };
                        return Poll::Ready(Some(Err(cut(
                            &mut this,
                            Some("response_bytes"),
                            error,
                        ))));
                    };
                    *this.relayed = total;
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.upstream.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        // The upstream's exact length, when it declared one, becomes the client's
        // Content-Length: the same framing the buffered body had.
        match &self.upstream {
            Some(upstream) => upstream.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}

impl JsonRelay<WireBody> {
    /// Sends `head`, then this body, to `client`, socket to socket ([`WireBody::splice_to`]);
    /// returns the body bytes sent. The bounds hold as when the body is read: its declared
    /// length was checked against `max_bytes` before the relay was made, and the whole body
    /// must pass by the same deadline, or it is cut, counted and logged the same way.
    pub(crate) async fn splice_to(
        self: Pin<&mut Self>,
        head: &[u8],
        client: &TcpStream,
    ) -> std::io::Result<u64> {
        let mut this = self.project();
        let deadline = *this.ends_by;
        let Some(wire) = this.upstream.as_mut().as_pin_mut() else {
            return Err(std::io::Error::other("the body was relayed already"));
        };
        let sent = tokio::time::timeout_at(deadline, wire.get_mut().splice_to(head, client)).await;
        let error = match sent {
            Ok(Ok((sent, way))) => {
                this.upstream.set(None);
                this.metrics
                    .record_passthrough(this.upstream_label, way.label());
                return Ok(sent);
            }
            // The client went away: nothing to log, as when it stops reading a relayed body.
            Ok(Err(SpliceError::To(error))) => {
                this.upstream.set(None);
                return Err(error);
            }
            Ok(Err(upstream)) => {
                let error = ProxyError::UpstreamBody {
                    upstream: (*this.upstream_label).to_owned(),
                    source: Box::new(upstream),
                };
                cut(&mut this, None, error)
            }
            Err(_elapsed) => timed_out(&mut this),
        };
        Err(std::io::Error::other(error))
    }
}

/// Ends the body at its deadline.
fn timed_out<B>(this: &mut JsonRelayProj<'_, B>) -> BoxError {
    let error = ProxyError::UpstreamTimeout {
        upstream: (*this.upstream_label).to_owned(),
        timeout: this.bounds.deadline,
    };
    cut(this, Some("response_timeout"), error)
}

/// Ends the body on `error`: drops the upstream, counts the limit it hit, if any, and logs; the
/// error ends the client's response without its final chunk.
fn cut<B>(
    this: &mut JsonRelayProj<'_, B>,
    limit: Option<&'static str>,
    error: ProxyError,
) -> BoxError {
    this.upstream.set(None);
    if let Some(limit) = limit {
        this.metrics.record_limit_hit(limit);
    }
    warn!(
        upstream = *this.upstream_label,
        relayed = *this.relayed,
        %error,
        "upstream response body cut mid-stream"
    );
    Box::new(error)
}
