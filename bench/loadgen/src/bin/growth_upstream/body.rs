//! The two response bodies the upstream sends: a few ready pieces, and an open event stream.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// A body of ready pieces. Large answers share their payload (`Bytes` is reference counted),
/// so a 16 MiB answer costs the upstream no copy per call and direct figures measure transfer,
/// not the upstream's memcpy.
pub struct Pieces {
    pieces: VecDeque<Bytes>,
    /// Declare the length (a JSON answer, `Content-Length`) or not (an SSE answer, chunked).
    declared: bool,
}

impl Pieces {
    pub fn json(pieces: Vec<Bytes>) -> Self {
        Self {
            pieces: pieces.into(),
            declared: true,
        }
    }

    pub fn chunked(pieces: Vec<Bytes>) -> Self {
        Self {
            pieces: pieces.into(),
            declared: false,
        }
    }
}

impl Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.pieces.pop_front().map(|piece| Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        if self.declared {
            SizeHint::with_exact(self.pieces.iter().map(|p| p.len() as u64).sum())
        } else {
            SizeHint::default()
        }
    }
}

/// A GET stream: silent until the upstream pushes an event into it; open until the client goes.
pub struct Stream {
    events: mpsc::UnboundedReceiver<Bytes>,
}

impl Stream {
    pub fn new(events: mpsc::UnboundedReceiver<Bytes>) -> Self {
        Self { events }
    }
}

impl Body for Stream {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.events
            .poll_recv(cx)
            .map(|event| event.map(|e| Ok(Frame::data(e))))
    }
}
