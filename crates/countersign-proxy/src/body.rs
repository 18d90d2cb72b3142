//! The body types of the gateway's responses.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use pin_project_lite::pin_project;

use crate::relay::JsonRelay;
use crate::upstream::WireBody;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body the gateway produces: buffered JSON, relayed SSE, nothing, or a plain
/// upstream's answer passed on unchanged.
///
/// The last kind is the only one the server may send with `splice` (socket to socket in the
/// kernel, never through the gateway's memory; see [`ResponseBody::passthrough_mut`]). A body
/// is of that kind only as [`crate::relay`] made it: wrapping a body in anything else makes it
/// an ordinary one, so bytes another layer changes or watches are never spliced past it.
pub struct ResponseBody(Kind);

// Two pointers at most: every response is moved through each layer's future, and a larger
// body type made each of those moves a copy of more bytes.
enum Kind {
    Boxed(UnsyncBoxBody<Bytes, BoxError>),
    Passthrough(Pin<Box<Passthrough>>),
}

pin_project! {
    struct Passthrough {
        #[pin]
        relay: JsonRelay<WireBody>,
        held: Option<Box<dyn Send>>,
    }
}

pin_project! {
    /// A body that keeps `guard` until it is dropped.
    struct Holding<G> {
        #[pin]
        body: UnsyncBoxBody<Bytes, BoxError>,
        guard: G,
    }
}

impl ResponseBody {
    pub fn new<B>(body: B) -> Self
    where
        B: Body<Data = Bytes, Error = BoxError> + Send + 'static,
    {
        ResponseBody(Kind::Boxed(body.boxed_unsync()))
    }

    /// A plain upstream's answer relayed unchanged within its bounds.
    pub(crate) fn passthrough(relay: JsonRelay<WireBody>) -> Self {
        ResponseBody(Kind::Passthrough(Box::pin(Passthrough {
            relay,
            held: None,
        })))
    }

    /// The relay of a [passthrough](ResponseBody::passthrough) body, for the server to send
    /// the rest of it with `splice`; `None` for any other body.
    pub(crate) fn passthrough_mut(&mut self) -> Option<Pin<&mut JsonRelay<WireBody>>> {
        match &mut self.0 {
            Kind::Passthrough(passthrough) => Some(passthrough.as_mut().project().relay),
            Kind::Boxed(_) => None,
        }
    }

    /// Keeps `guard` until this body is dropped, whatever kind of body it is.
    pub(crate) fn hold(self, guard: impl Send + 'static) -> Self {
        match self.0 {
            Kind::Boxed(body) => ResponseBody::new(Holding { body, guard }),
            Kind::Passthrough(mut passthrough) => {
                let held = passthrough.as_mut().project().held;
                *held = Some(match held.take() {
                    None => Box::new(guard),
                    Some(earlier) => Box::new((earlier, guard)),
                });
                ResponseBody(Kind::Passthrough(passthrough))
            }
        }
    }
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            Kind::Boxed(_) => "Boxed",
            Kind::Passthrough(_) => "Passthrough",
        };
        f.debug_tuple("ResponseBody").field(&kind).finish()
    }
}

impl<G> Body for Holding<G> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().0 {
            Kind::Boxed(body) => Pin::new(body).poll_frame(cx),
            Kind::Passthrough(passthrough) => passthrough.as_mut().project().relay.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Kind::Boxed(body) => body.is_end_stream(),
            Kind::Passthrough(passthrough) => passthrough.relay.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Kind::Boxed(body) => body.size_hint(),
            Kind::Passthrough(passthrough) => passthrough.relay.size_hint(),
        }
    }
}

pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    ResponseBody::new(Full::new(bytes.into()).map_err(|never| match never {}))
}

pub fn empty() -> ResponseBody {
    ResponseBody::new(Empty::new().map_err(|never| match never {}))
}
