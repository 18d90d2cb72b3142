//! Relays an upstream Server-Sent Events stream to the client event by event.
//!
//! Each complete upstream event is decoded and re-encoded as soon as it arrives, so nothing is
//! buffered past an event boundary, and `id:`, `event:`, `retry:`, comments and empty priming
//! events pass intact. Decoding here (rather than copying bytes) is what later lets the gateway
//! inspect server messages and inject its own events between them.
//!
//! A quiet stream gets keep-alive comments and, once its upstream has been silent for the idle
//! timeout, is ended ([`quiet`](super::quiet)).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use countersign_jsonrpc::sse::{SseDecoder, SseEvent, SseField};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tracing::debug;

use super::Observer;
use super::quiet::{Due, KEEP_ALIVE_COMMENT, QuietClock, QuietLimits};
use crate::body::BoxError;
use crate::clock::Clock;
use crate::metrics::{ProxyMetrics, StreamGuard};

/// Encodes every event `next` yields (after the observer saw it) into one frame; `None` when
/// there was none.
fn drain(
    decoder: &mut SseDecoder,
    observer: &mut Option<Observer>,
    sent_anything: &mut bool,
    next: fn(&mut SseDecoder) -> Result<Option<SseEvent>, countersign_jsonrpc::sse::SseError>,
) -> Result<Option<Frame<Bytes>>, BoxError> {
    let mut out = Vec::new();
    while let Some(mut event) = next(decoder).map_err(Box::new)? {
        if let Some(observer) = observer.as_mut() {
            observe_event(observer, &mut event);
        }
        event.encode(&mut out);
    }
    if out.is_empty() {
        return Ok(None);
    }
    if !*sent_anything {
        SseEvent::guard_stream_start(&mut out);
        *sent_anything = true;
    }
    Ok(Some(Frame::data(Bytes::from(out))))
}

/// Lets the observer see (and replace) the data of one event.
fn observe_event(observer: &mut Observer, event: &mut SseEvent) {
    let Some(data) = event.data() else { return };
    let Some(edited) = observer.observe(data.as_bytes()) else {
        return;
    };
    let Ok(edited) = String::from_utf8(edited) else {
        return;
    };
    // The edited message is compact JSON (no newlines), so one data line carries it; the
    // other fields (id, event, retry) keep their places.
    let mut replaced = false;
    event.fields.retain_mut(|field| match field {
        SseField::Data(value) if !replaced => {
            replaced = true;
            *value = edited.clone();
            true
        }
        SseField::Data(_) => false,
        _ => true,
    });
}

pin_project! {
    /// Response body that relays an upstream SSE body one event at a time.
    pub struct SseRelay<B> {
        // `None` once the stream was ended for idleness: dropping the body closes the upstream
        // connection at once rather than when the client finally goes.
        #[pin]
        upstream: Option<B>,
        decoder: SseDecoder,
        upstream_done: bool,
        // Whether any bytes went to the client yet: the stream's start needs a BOM guard.
        sent_anything: bool,
        observer: Option<Observer>,
        quiet: QuietClock,
        #[pin]
        timer: Sleep,
        metrics: ProxyMetrics,
        upstream_label: &'static str,
        // Held for the lifetime of the stream so the open-streams gauge stays right.
        _guard: StreamGuard,
    }
}

/// What a relayed stream is built with, besides its body and observer.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// Largest single event accepted from the upstream.
    pub max_event_bytes: usize,
    pub quiet: QuietLimits,
    pub clock: Arc<dyn Clock>,
}

impl<B> std::fmt::Debug for SseRelay<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseRelay")
            .field("upstream_done", &self.upstream_done)
            .finish_non_exhaustive()
    }
}

impl<B> SseRelay<B> {
    /// Relays `upstream`, the stream of the upstream named `upstream_label`.
    pub fn new(
        upstream: B,
        settings: &StreamSettings,
        metrics: &ProxyMetrics,
        upstream_label: &'static str,
        observer: Option<Observer>,
    ) -> Self {
        let (quiet, timer) = QuietClock::start(settings.quiet, settings.clock.clone());
        Self {
            upstream: Some(upstream),
            decoder: SseDecoder::new(settings.max_event_bytes),
            upstream_done: false,
            sent_anything: false,
            observer,
            quiet,
            timer,
            metrics: metrics.clone(),
            upstream_label,
            _guard: metrics.stream_opened(upstream_label),
        }
    }
}

impl<B> Body for SseRelay<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        loop {
            // Drain every event already complete into one frame: one write per upstream chunk.
            match drain(
                this.decoder,
                this.observer,
                this.sent_anything,
                SseDecoder::next_event,
            ) {
                Err(error) => return Poll::Ready(Some(Err(error))),
                Ok(Some(frame)) => {
                    this.quiet.sent();
                    return Poll::Ready(Some(Ok(frame)));
                }
                Ok(None) if *this.upstream_done => return Poll::Ready(None),
                Ok(None) => {}
            }
            let Some(upstream) = this.upstream.as_mut().as_pin_mut() else {
                return Poll::Ready(None);
            };
            let polled = upstream.poll_frame(cx);
            if polled.is_ready() {
                this.quiet.heard();
            }
            match polled {
                Poll::Pending => match this.quiet.poll_due(this.timer.as_mut(), cx) {
                    Due::Nothing => return Poll::Pending,
                    Due::KeepAlive => {
                        // The comment now opens the stream, so no later event needs the
                        // stream-start BOM guard.
                        *this.sent_anything = true;
                        return Poll::Ready(Some(Ok(Frame::data(KEEP_ALIVE_COMMENT))));
                    }
                    Due::Idle => {
                        debug!(
                            upstream = *this.upstream_label,
                            idle_timeout = ?this.quiet.idle_timeout(),
                            "upstream stream sent nothing for the idle timeout; ended it"
                        );
                        this.metrics.record_limit_hit("sse_idle_timeout");
                        // A half-received event is dropped with the upstream: the client sees
                        // only whole events, then a clean end.
                        this.upstream.set(None);
                        *this.upstream_done = true;
                        return Poll::Ready(None);
                    }
                },
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.decoder.push(&data);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    let error: BoxError = error.into();
                    debug!(%error, "upstream SSE stream failed");
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    // The stream ended: whatever the decoder still holds is the last event.
                    *this.upstream_done = true;
                    let last = drain(
                        this.decoder,
                        this.observer,
                        this.sent_anything,
                        SseDecoder::finish,
                    );
                    return Poll::Ready(last.transpose());
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
