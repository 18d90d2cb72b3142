//! The response future the gateway's layers share: a layer either answers at once, passes the
//! request on (the inner service's future, unboxed), or first does work of its own that awaits
//! I/O — a body read, a tool listing, the replay store — as one boxed async block. The common
//! paths (a refusal, a pass-through) allocate nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use http::Response;
use pin_project_lite::pin_project;

use crate::body::ResponseBody;

pin_project! {
    #[project = ResponseFutureProj]
    pub enum ResponseFuture<F> {
        /// The layer answered itself.
        Answered { response: Option<Response<ResponseBody>> },
        /// Passed on to the inner service.
        Inner { #[pin] future: F },
        /// The layer's own asynchronous work, which ends in an answer or in calling the inner
        /// service.
        Working { future: BoxFuture<'static, Response<ResponseBody>> },
    }
}

impl<F> ResponseFuture<F> {
    pub fn answered(response: Response<ResponseBody>) -> Self {
        Self::Answered {
            response: Some(response),
        }
    }

    pub fn inner(future: F) -> Self {
        Self::Inner { future }
    }

    pub fn working(future: impl Future<Output = Response<ResponseBody>> + Send + 'static) -> Self {
        Self::Working {
            future: Box::pin(future),
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
            ResponseFutureProj::Inner { future } => future.poll(cx),
            ResponseFutureProj::Working { future } => future.as_mut().poll(cx).map(Ok),
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self {
            Self::Answered { .. } => "Answered",
            Self::Inner { .. } => "Inner",
            Self::Working { .. } => "Working",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}

/// The future of a layer that always does work of its own before or around the inner service:
/// one boxed future, so the layers above it hold a pointer rather than the whole unboxed chain
/// below (which they would move, whole, each time one of them wraps it).
pub struct BoxedResponse(BoxFuture<'static, Response<ResponseBody>>);

impl BoxedResponse {
    pub fn new(future: impl Future<Output = Response<ResponseBody>> + Send + 'static) -> Self {
        Self(Box::pin(future))
    }
}

impl Future for BoxedResponse {
    type Output = Result<Response<ResponseBody>, std::convert::Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
    }
}

impl std::fmt::Debug for BoxedResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedResponse")
    }
}
