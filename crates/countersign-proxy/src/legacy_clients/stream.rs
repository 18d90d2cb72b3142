//! A legacy session's event stream: the `endpoint` event first, then every queued message, a
//! `: keep-alive` comment when it has been quiet, and its end once the session has been idle.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tracing::debug;

use super::sessions::{Activity, Outgoing, SessionGuard};
use crate::body::BoxError;
use crate::metrics::ProxyMetrics;
use crate::relay::QuietLimits;

/// The comment sent on a quiet stream; every SSE parser ignores it.
const KEEP_ALIVE_COMMENT: Bytes = Bytes::from_static(b": keep-alive\n\n");

/// The `endpoint` event announcing where the session's messages go: a path-absolute reference,
/// resolved by the client against the URL it reached the gateway with.
pub(super) fn endpoint_event(messages_path: &str, session_id: &str) -> Bytes {
    Bytes::from(format!(
        "event: endpoint\ndata: {messages_path}?session_id={session_id}\n\n"
    ))
}

pin_project! {
    /// The response body of a legacy session's `GET`.
    pub(super) struct LegacyStream {
        endpoint: Option<Bytes>,
        outbox: mpsc::Receiver<Outgoing>,
        ended: bool,
        quiet: QuietLimits,
        activity: Arc<Activity>,
        sent_at: Instant,
        #[pin]
        timer: Sleep,
        metrics: ProxyMetrics,
        // Dropped with the stream: the session leaves the table, its slot is given back.
        guard: SessionGuard,
    }
}

impl std::fmt::Debug for LegacyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyStream")
            .field("session", &self.guard.id)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl LegacyStream {
    pub(super) fn new(
        endpoint: Bytes,
        outbox: mpsc::Receiver<Outgoing>,
        (quiet, activity): (QuietLimits, Arc<Activity>),
        metrics: ProxyMetrics,
        guard: SessionGuard,
    ) -> Self {
        let now = activity.now();
        let deadline = (now + quiet.keep_alive).min(now + quiet.idle_timeout);
        Self {
            endpoint: Some(endpoint),
            outbox,
            ended: false,
            quiet,
            activity,
            sent_at: now,
            timer: tokio::time::sleep_until(deadline),
            metrics,
            guard,
        }
    }
}

impl Body for LegacyStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if let Some(endpoint) = this.endpoint.take() {
            *this.sent_at = this.activity.now();
            return Poll::Ready(Some(Ok(Frame::data(endpoint))));
        }
        if *this.ended {
            return Poll::Ready(None);
        }
        match this.outbox.poll_recv(cx) {
            Poll::Ready(Some(Outgoing::Message(message))) => {
                this.activity.touch();
                *this.sent_at = this.activity.now();
                return Poll::Ready(Some(Ok(Frame::data(message))));
            }
            Poll::Ready(Some(Outgoing::End) | None) => {
                *this.ended = true;
                this.guard.end();
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        loop {
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = this.activity.now();
            let idle_until = this.activity.last() + this.quiet.idle_timeout;
            if now >= idle_until {
                debug!(
                    session = %this.guard.id,
                    idle_timeout = ?this.quiet.idle_timeout,
                    "legacy session idle for the idle timeout; ended it"
                );
                this.metrics.record_limit_hit("legacy_idle_timeout");
                *this.ended = true;
                this.guard.end();
                return Poll::Ready(None);
            }
            let keep_alive_due = now >= *this.sent_at + this.quiet.keep_alive;
            if keep_alive_due {
                *this.sent_at = now;
            }
            // A POST may have moved the idle deadline since the timer was set: read it again.
            let next = idle_until.min(*this.sent_at + this.quiet.keep_alive);
            this.timer.as_mut().reset(next);
            if keep_alive_due {
                return Poll::Ready(Some(Ok(Frame::data(KEEP_ALIVE_COMMENT))));
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
