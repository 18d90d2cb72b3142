//! The body of an upstream's response, whichever kind of upstream sent it.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use super::http1_pool::Lent;
use crate::body::{BoxError, ResponseBody};

pin_project! {
    /// An HTTP upstream's body as hyper read it, or a local upstream's (no extra box on the
    /// HTTP path). A plain upstream's body holds the connection it arrives on, and hands it
    /// back to the pool once it has ended.
    #[project = UpstreamBodyProj]
    pub enum UpstreamBody {
        Http { #[pin] body: Incoming, connection: Option<Lent> },
        Local { #[pin] body: ResponseBody },
    }
}

impl UpstreamBody {
    pub fn http(body: Incoming, connection: Option<Lent>) -> Self {
        UpstreamBody::Http { body, connection }
    }

    pub fn local(body: ResponseBody) -> Self {
        UpstreamBody::Local { body }
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
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
            UpstreamBodyProj::Http {
                mut body,
                connection,
            } => {
                let polled = ready!(body.as_mut().poll_frame(cx));
                match &polled {
                    // The whole response has been read: the connection is free for another.
                    None => give_back(connection),
                    Some(Ok(_)) if body.is_end_stream() => give_back(connection),
                    // A broken body leaves the connection in no state to reuse; dropping it
                    // closes it.
                    Some(Err(_)) => drop(connection.take()),
                    Some(Ok(_)) => {}
                }
                Poll::Ready(polled.map(|frame| frame.map_err(Into::into)))
            }
            UpstreamBodyProj::Local { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Http { body, .. } => body.is_end_stream(),
            UpstreamBody::Local { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Http { body, .. } => body.size_hint(),
            UpstreamBody::Local { body } => body.size_hint(),
        }
    }
}

fn give_back(connection: &mut Option<Lent>) {
    if let Some(connection) = connection.take() {
        connection.give_back();
    }
}
