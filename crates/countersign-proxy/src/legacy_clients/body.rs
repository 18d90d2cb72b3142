use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::oneshot;

use crate::body::BoxError;

pin_project! {
    /// The body of every request below the legacy layer: a client's own body, or none for the
    /// requests the layer makes itself (a session's upstream GET stream and its DELETE).
    #[project = AdaptedBodyProj]
    pub enum AdaptedBody<B> {
        Client {
            #[pin]
            body: B,
            // Told when the body has been read to its end.
            taken: Option<Taken>,
        },
        Empty,
    }
}

impl<B> AdaptedBody<B> {
    /// A client's body passed on as it is.
    pub fn client(body: B) -> Self {
        AdaptedBody::Client { body, taken: None }
    }

    /// A client's body that reports, through the returned [`TakenSignal`], when the stack below
    /// has read it to its end: from then on the message is the stack's, whatever it answers.
    pub(super) fn watched(body: B) -> (Self, TakenSignal) {
        let (sender, receiver) = oneshot::channel();
        let flag = Arc::new(AtomicBool::new(false));
        let taken = Taken {
            flag: flag.clone(),
            sender,
        };
        let body = AdaptedBody::Client {
            body,
            taken: Some(taken),
        };
        (body, TakenSignal { flag, receiver })
    }
}

/// The sending half of a [`TakenSignal`].
#[derive(Debug)]
pub struct Taken {
    flag: Arc<AtomicBool>,
    sender: oneshot::Sender<()>,
}

/// Whether a watched body was read to its end.
#[derive(Debug)]
pub(super) struct TakenSignal {
    flag: Arc<AtomicBool>,
    pub(super) receiver: oneshot::Receiver<()>,
}

impl TakenSignal {
    /// A second handle on the flag, for the task that waits for the stack's answer.
    pub(super) fn flag(&self) -> TakenFlag {
        TakenFlag(self.flag.clone())
    }
}

/// Whether a watched body was read to its end, without the notification.
#[derive(Debug, Clone)]
pub(super) struct TakenFlag(Arc<AtomicBool>);

impl TakenFlag {
    /// The body was read to its end. Set before the reader goes on, so once the stack has
    /// answered this is final.
    pub(super) fn was_taken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl<B> Body for AdaptedBody<B>
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
        match self.project() {
            AdaptedBodyProj::Client { body, taken } => {
                let frame = ready!(body.poll_frame(cx));
                if frame.is_none()
                    && let Some(taken) = taken.take()
                {
                    taken.flag.store(true, Ordering::Release);
                    let _ = taken.sender.send(());
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            AdaptedBodyProj::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            // A watched body must be polled to its end to report it.
            AdaptedBody::Client { body, taken } => taken.is_none() && body.is_end_stream(),
            AdaptedBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AdaptedBody::Client { body, .. } => body.size_hint(),
            AdaptedBody::Empty => SizeHint::with_exact(0),
        }
    }
}
