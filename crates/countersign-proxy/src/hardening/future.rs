use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use crate::body::ResponseBody;

pin_project! {
    /// Either the inner service's future or an immediate refusal.
    #[project = ResponseFutureProj]
    pub enum ResponseFuture<F> {
        Refused { response: Option<Response<ResponseBody>> },
        Inner { #[pin] future: F },
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResponseBody>, E>>,
{
    type Output = Result<Response<ResponseBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("a refused ResponseFuture is polled only until it is ready"))),
            ResponseFutureProj::Inner { future } => future.poll(cx),
        }
    }
}
