use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower::Service;

use super::{Caller, Identity};

/// Attaches the [`Caller`] to every request; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct Identify<S> {
    pub(super) inner: S,
    pub(super) identity: Arc<Identity>,
}

impl<S, B> Service<Request<B>> for Identify<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // Whatever a client put in extensions-shaped headers, the caller is decided here only.
        let caller = Caller(self.identity.principal(request.headers()));
        request.extensions_mut().insert(caller);
        self.inner.call(request)
    }
}
