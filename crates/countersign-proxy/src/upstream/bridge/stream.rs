//! The body of a bridged response: the messages of one client stream, written as Server-Sent
//! Events as they arrive, ending when every sender is gone. Dropping it (the client went away,
//! the gateway ended the stream) runs its guards, which tell the routing and the session.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::{Body, Frame};
use tokio::sync::mpsc;

use crate::body::BoxError;

/// A stream of JSON-RPC messages as `text/event-stream`.
pub(super) struct EventStream {
    rx: mpsc::Receiver<Bytes>,
    /// Dropped with the body: the stream's routing entry, the session's activity.
    _guards: Vec<Box<dyn Send>>,
}

impl EventStream {
    pub(super) fn new(rx: mpsc::Receiver<Bytes>, guards: Vec<Box<dyn Send>>) -> Self {
        Self {
            rx,
            _guards: guards,
        }
    }
}

impl Body for EventStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx
            .poll_recv(cx)
            .map(|message| message.map(|m| Ok(Frame::data(event(&m)))))
    }
}

/// One `message` event carrying `message`. Events carry no `id:`: the bridge keeps no event
/// store, so there is nothing a client could resume from.
pub(super) fn event(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(message.len() + 24);
    out.put_slice(b"event: message\ndata: ");
    // A line break would end the `data:` line. In a strictly valid JSON text CR and LF occur
    // only as whitespace between tokens (never raw inside a string), so a space is the same
    // JSON.
    out.extend(
        message
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.put_slice(b"\n\n");
    out.freeze()
}

/// Runs `f` once, when dropped.
pub(super) struct OnDrop<F: FnOnce() + Send>(Option<F>);

impl<F: FnOnce() + Send> OnDrop<F> {
    pub(super) fn new(f: F) -> Self {
        Self(Some(f))
    }
}

impl<F: FnOnce() + Send> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}
