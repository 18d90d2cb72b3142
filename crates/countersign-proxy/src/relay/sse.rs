//! Relays an upstream Server-Sent Events stream to the client event by event.
//!
//! Each complete upstream event is decoded and re-encoded as soon as it arrives, so nothing is
//! buffered past an event boundary, and `id:`, `event:`, `retry:`, comments and empty priming
//! events pass intact. Decoding here (rather than copying bytes) is what later lets the gateway
//! inspect server messages and inject its own events between them.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use countersign_jsonrpc::sse::{SseDecoder, SseEvent, SseField};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tracing::debug;

use super::Observer;
use crate::body::BoxError;
use crate::metrics::StreamGuard;

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
        #[pin]
        upstream: B,
        decoder: SseDecoder,
        upstream_done: bool,
        // Whether any bytes went to the client yet: the stream's start needs a BOM guard.
        sent_anything: bool,
        observer: Option<Observer>,
        // Held for the lifetime of the stream so the open-streams gauge stays right.
        _guard: StreamGuard,
    }
}

impl<B> std::fmt::Debug for SseRelay<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseRelay")
            .field("upstream_done", &self.upstream_done)
            .finish_non_exhaustive()
    }
}

impl<B> SseRelay<B> {
    pub fn new(
        upstream: B,
        max_event_bytes: usize,
        guard: StreamGuard,
        observer: Option<Observer>,
    ) -> Self {
        Self {
            upstream,
            decoder: SseDecoder::new(max_event_bytes),
            upstream_done: false,
            sent_anything: false,
            observer,
            _guard: guard,
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
                Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(None) if *this.upstream_done => return Poll::Ready(None),
                Ok(None) => {}
            }
            match ready!(this.upstream.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.decoder.push(&data);
                    }
                }
                Some(Err(error)) => {
                    let error: BoxError = error.into();
                    debug!(%error, "upstream SSE stream failed");
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
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
