use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use super::slots::ClientSlot;
use crate::body::ResponseBody;

pin_project! {
    /// The inner service's answer, its body holding the client's slot until it ends.
    #[project = ResponseFutureProj]
    pub enum ResponseFuture<F> {
        /// Refused: this client has its limit in flight.
        Answered { response: Option<Response<ResponseBody>> },
        Inner { #[pin] future: F, slot: Option<ClientSlot> },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn answered(response: Response<ResponseBody>) -> Self {
        Self::Answered {
            response: Some(response),
        }
    }

    pub(super) fn inner(future: F, slot: ClientSlot) -> Self {
        Self::Inner {
            future,
            slot: Some(slot),
        }
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResponseBody>, E>>,
{
    type Output = Result<Response<ResponseBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("an answered ResponseFuture is polled only until it is ready"))),
            ResponseFutureProj::Inner { future, slot } => {
                let response = ready!(future.poll(cx))?;
                let slot = slot
                    .take()
                    .expect("a ResponseFuture is polled only until it is ready");
                // A stream is a request still in flight: the slot goes with the body.
                Poll::Ready(Ok(response.map(|body| body.hold(slot))))
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self {
            Self::Answered { .. } => "Answered",
            Self::Inner { .. } => "Inner",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}
