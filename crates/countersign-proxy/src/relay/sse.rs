//! Relays an upstream Server-Sent Events stream to the client event by event.
//!
//! Each complete upstream event is decoded and re-encoded as soon as it arrives, so nothing is
//! buffered past an event boundary, and `id:`, `event:`, `retry:`, comments and empty priming
//! events pass intact. Decoding here (rather than copying bytes) is what later lets the gateway
//! inspect server messages and inject its own events between them.
//!
//! An event is held until it is complete only when the observer needs its message whole (to
//! edit it). Otherwise an event with a long data line, such as a 16 MiB tool result, is passed
//! on in parts as it arrives ([`Piece::Part`]) and read for its top level on the way: the relay
//! holds a chunk of it at a time, not the whole answer.
//!
//! A quiet stream gets keep-alive comments and, once its upstream has been silent for the idle
//! timeout, is ended ([`quiet`](super::quiet)).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use countersign_jsonrpc::message::TopLevelScan;
use countersign_jsonrpc::sse::{PassedPart, Piece, SseDecoder, SseError, SseEvent, SseField};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tracing::{debug, warn};

use super::Observer;
use super::pending::PendingAnswers;
use super::quiet::{Due, KEEP_ALIVE_COMMENT, QuietClock, QuietLimits};
use crate::body::BoxError;
use crate::clock::Clock;
use crate::error::ProxyError;
use crate::metrics::{ProxyMetrics, StreamGuard};

/// Events at least this large go to the client as frames of their own, the very bytes that
/// arrived; smaller ones are gathered into one frame per drain (one write for many events).
const OWN_FRAME_BYTES: usize = 16 * 1024;

/// Queues every event and part the decoder yields (after the observer saw it) as frames in
/// `watch.ready`, `finishing` the stream when its upstream ended; whether it queued any. An
/// event nobody edited goes out as the bytes it arrived as ([`RawEvent::wire`]); one that was
/// edited, or arrived with CR line ends, is re-encoded. A decoding failure ends the drain: the
/// events before it are still queued, and the failure is left in `failure` for the caller to
/// cut the stream with.
///
/// [`RawEvent::wire`]: countersign_jsonrpc::sse::RawEvent::wire
fn drain(decoder: &mut SseDecoder, watch: &mut Watch<'_>, finishing: bool) -> bool {
    let queued = watch.ready.len();
    let mut gathered = Vec::new();
    let pass_long_data = watch
        .observer
        .as_ref()
        .is_none_or(|observer| !observer.needs_whole_messages());
    loop {
        let piece = if finishing {
            decoder.finish_piece(pass_long_data)
        } else {
            decoder.next_piece(pass_long_data)
        };
        match piece {
            Ok(Some(Piece::Part(part))) => watch.passed(part, &mut gathered),
            Ok(Some(Piece::Event(event))) => {
                // The data is looked at once, borrowed: a large answer is not copied for it.
                let edited = event.data().and_then(|data| {
                    watch.pending.saw(&data);
                    watch.observer.as_mut()?.observe(data.as_bytes())
                });
                match (edited, event.wire()) {
                    (None, Some(wire)) if wire.len() >= OWN_FRAME_BYTES => {
                        watch.queue(std::mem::take(&mut gathered));
                        watch.queue_bytes(wire.clone());
                    }
                    (None, Some(wire)) => gathered.extend_from_slice(wire),
                    (edited, _) => {
                        let mut event = event.into_event();
                        if let Some(edited) = edited {
                            replace_data(&mut event, edited);
                        }
                        gathered.reserve(event.encoded_len_hint());
                        event.encode(&mut gathered);
                    }
                }
            }
            Ok(None) => break,
            Err(error) => {
                *watch.failure = Some(error);
                break;
            }
        }
    }
    watch.queue(gathered);
    watch.ready.len() > queued
}

/// What [`drain`] updates besides the decoder.
struct Watch<'a> {
    observer: &'a mut Option<Observer>,
    pending: &'a mut PendingAnswers,
    /// The top level of the message being passed on in parts, read so far.
    passing: &'a mut Option<TopLevelScan>,
    sent_anything: &'a mut bool,
    failure: &'a mut Option<SseError>,
    ready: &'a mut VecDeque<Bytes>,
}

impl Watch<'_> {
    /// Reads and queues one part of a message passed on as it arrives (a small one, such as
    /// its last line end, `gathered` with the events around it); at its end, settles the
    /// request it answers and tells the observer.
    fn passed(&mut self, part: PassedPart, gathered: &mut Vec<u8>) {
        let scan = self.passing.get_or_insert_with(TopLevelScan::default);
        part.data().for_each(|data| scan.feed(data));
        let ends_event = part.ends_event();
        if part.wire().len() >= OWN_FRAME_BYTES {
            self.queue(std::mem::take(gathered));
            self.queue_bytes(part.into_wire());
        } else {
            gathered.extend_from_slice(part.wire());
        }
        if let Some(scan) = self.passing.take_if(|_| ends_event) {
            let message = scan.finish();
            self.pending.settle(message.answer_id.as_ref());
            if let Some(observer) = self.observer.as_mut() {
                observer.passed(&message);
            }
        }
    }

    fn queue(&mut self, gathered: Vec<u8>) {
        if !gathered.is_empty() {
            self.queue_bytes(Bytes::from(gathered));
        }
    }

    fn queue_bytes(&mut self, bytes: Bytes) {
        if !*self.sent_anything {
            *self.sent_anything = true;
            if SseEvent::needs_stream_start_guard(&bytes) {
                let mut guarded = bytes.to_vec();
                SseEvent::guard_stream_start(&mut guarded);
                self.ready.push_back(Bytes::from(guarded));
                return;
            }
        }
        self.ready.push_back(bytes);
    }
}

/// Puts the observer's `edited` message in place of the data of `event`.
fn replace_data(event: &mut SseEvent, edited: Vec<u8>) {
    let Ok(edited) = String::from_utf8(edited) else {
        return;
    };
    // The edited message is compact JSON (no newlines), so one data line carries it; the
    // other fields (id, event, retry) keep their places.
    let mut edited = Some(edited);
    event.fields.retain_mut(|field| match field {
        SseField::Data(value) => match edited.take() {
            Some(edited) => {
                *value = edited;
                true
            }
            None => false,
        },
        _ => true,
    });
}

pin_project! {
    /// Response body that relays an upstream SSE body one event at a time.
    #[project = SseRelayProj]
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
        // The top level of an event being passed on in parts, read so far.
        passing: Option<TopLevelScan>,
        // The requests whose answers have not passed yet, answered with an error if the stream
        // has to be cut.
        pending: PendingAnswers,
        // A decoding failure met while draining, acted on once the events before it are out.
        failure: Option<SseError>,
        // Frames drained and not yet handed to hyper, oldest first.
        ready: VecDeque<Bytes>,
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
        pending: PendingAnswers,
    ) -> Self {
        let (quiet, timer) = QuietClock::start(settings.quiet, settings.clock.clone());
        Self {
            upstream: Some(upstream),
            decoder: SseDecoder::new(settings.max_event_bytes),
            upstream_done: false,
            sent_anything: false,
            observer,
            passing: None,
            pending,
            failure: None,
            ready: VecDeque::new(),
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
            if let Some(frame) = this.ready.pop_front() {
                this.quiet.sent();
                return Poll::Ready(Some(Ok(Frame::data(frame))));
            }
            if let Some(failure) = this.failure.take() {
                let error = match failure {
                    SseError::EventTooLarge { max } => {
                        this.metrics.record_limit_hit("sse_event_bytes");
                        ProxyError::UpstreamEventTooLarge {
                            upstream: (*this.upstream_label).to_owned(),
                            limit: max,
                        }
                    }
                    other => ProxyError::UpstreamBody {
                        upstream: (*this.upstream_label).to_owned(),
                        source: Box::new(other),
                    },
                };
                return Poll::Ready(cut(&mut this, &error));
            }
            // Cut or ended for idleness: nothing more is relayed.
            if this.upstream.is_none() {
                return Poll::Ready(None);
            }
            // Drain every event already complete: one write per upstream chunk, unless an event
            // is large enough for a frame of its own.
            let mut watch = Watch {
                observer: this.observer,
                pending: this.pending,
                passing: this.passing,
                sent_anything: this.sent_anything,
                failure: this.failure,
                ready: this.ready,
            };
            if drain(this.decoder, &mut watch, false) {
                continue;
            }
            if this.failure.is_some() {
                continue;
            }
            if *this.upstream_done {
                return Poll::Ready(None);
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
                    // A comment now would land inside the event being passed on; the clock
                    // counts it as sent, and the idle timeout still applies.
                    Due::KeepAlive if this.decoder.passing_an_event() => continue,
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
                        // only whole events (one passed on in part is ended as cut), then a
                        // clean end.
                        this.upstream.set(None);
                        *this.upstream_done = true;
                        *this.passing = None;
                        return Poll::Ready(
                            this.decoder
                                .cut_passed_event()
                                .map(|cut| Ok(Frame::data(cut))),
                        );
                    }
                },
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.decoder.push_bytes(data);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    let error = ProxyError::UpstreamBody {
                        upstream: (*this.upstream_label).to_owned(),
                        source: error.into(),
                    };
                    return Poll::Ready(cut(&mut this, &error));
                }
                Poll::Ready(None) => {
                    // The stream ended: whatever the decoder still holds is the last event.
                    *this.upstream_done = true;
                    let mut watch = Watch {
                        observer: this.observer,
                        pending: this.pending,
                        passing: this.passing,
                        sent_anything: this.sent_anything,
                        failure: this.failure,
                        ready: this.ready,
                    };
                    drain(this.decoder, &mut watch, true);
                    // Queued frames go first, then the failure if any, then the end.
                    continue;
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Ends the stream on `error`: logs it, drops the upstream, ends an event passed on in part as
/// one no client reads as a message, and sends each request still waiting for its answer a
/// JSON-RPC error event, so no client waits on a stream that silently ended.
fn cut<B>(
    this: &mut SseRelayProj<'_, B>,
    error: &ProxyError,
) -> Option<Result<Frame<Bytes>, BoxError>> {
    warn!(upstream = *this.upstream_label, %error, "upstream event stream cut");
    this.upstream.set(None);
    *this.upstream_done = true;
    let mut out = this
        .decoder
        .cut_passed_event()
        .map(Vec::from)
        .unwrap_or_default();
    *this.passing = None;
    out.extend_from_slice(&this.pending.answer_all(error));
    if out.is_empty() {
        return None;
    }
    *this.sent_anything = true;
    Some(Ok(Frame::data(Bytes::from(out))))
}
