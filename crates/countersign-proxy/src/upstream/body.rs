//! The body of an upstream's response, whichever kind of upstream sent it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use super::http1_conn::WireBody;
use crate::body::{BoxError, ResponseBody};

pin_project! {
    /// A plain upstream's body as the gateway reads it from the connection it arrives on
    /// (handed back to the pool once it has ended), an HTTPS upstream's as hyper read it, or a
    /// local upstream's (no extra box on either HTTP path).
    #[project = UpstreamBodyProj]
    pub enum UpstreamBody {
        Wire { #[pin] body: WireBody },
        Http { #[pin] body: Incoming },
        Local { #[pin] body: ResponseBody },
    }
}

impl UpstreamBody {
    pub fn wire(body: WireBody) -> Self {
        UpstreamBody::Wire { body }
    }

    pub fn http(body: Incoming) -> Self {
        UpstreamBody::Http { body }
    }

    pub fn local(body: ResponseBody) -> Self {
        UpstreamBody::Local { body }
    }

    /// The body as the plain upstream's connection it is still to be read from, when at least
    /// `at_least` bytes of it are unread and its length is declared: a body the server can
    /// send on with `splice`. Any other body is given back as it was.
    // The body given back is the one handed in, moved once per answer: boxing it would add an
    // allocation to every answer to save a copy of a few dozen bytes.
    #[allow(clippy::result_large_err)]
    pub fn into_spliceable(self, at_least: u64) -> Result<WireBody, Self> {
        match self {
            UpstreamBody::Wire { body } if body.unread_len().is_some_and(|n| n >= at_least) => {
                Ok(body)
            }
            other => Err(other),
        }
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamBody::Wire { .. } => f.write_str("UpstreamBody::Wire"),
            UpstreamBody::Http { .. } => f.write_str("UpstreamBody::Http"),
            UpstreamBody::Local { .. } => f.write_str("UpstreamBody::Local"),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            UpstreamBodyProj::Wire { body } => body.poll_frame(cx),
            UpstreamBodyProj::Http { body } => body
                .poll_frame(cx)
                .map(|polled| polled.map(|frame| frame.map_err(Into::into))),
            UpstreamBodyProj::Local { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Wire { body } => body.is_end_stream(),
            UpstreamBody::Http { body } => body.is_end_stream(),
            UpstreamBody::Local { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Wire { body } => body.size_hint(),
            UpstreamBody::Http { body } => body.size_hint(),
            UpstreamBody::Local { body } => body.size_hint(),
        }
    }
}
