use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, header};
use tower::{Service, ServiceExt as _};
use tracing::info;

use super::challenge::unauthorized;
use super::{Caller, Claim, Identified, Identity, Refusal};
use crate::body::ResponseBody;
use crate::context::RequestContextExt;
use crate::future::ResponseFuture;

/// Attaches the [`Caller`] to every request or answers 401; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct Identify<S> {
    pub(super) inner: S,
    pub(super) identity: Arc<Identity>,
}

impl<S, B> Service<Request<B>> for Identify<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let identity = self.identity.clone();
        match identity.claim(request.headers()) {
            Claim::Decided(decided) => match admit(&identity, request, decided) {
                Ok(request) => ResponseFuture::inner(self.inner.call(request)),
                Err(refusal) => ResponseFuture::answered(*refusal),
            },
            Claim::Jwt(method, token) => {
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::working(async move {
                    let decided = method.principal(&token).await.map(|principal| Identified {
                        principal,
                        consumed_authorization: true,
                    });
                    match admit(&identity, request, decided) {
                        Ok(request) => match inner.oneshot(request).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        },
                        Err(refusal) => *refusal,
                    }
                })
            }
        }
    }
}

/// The request with its [`Caller`], or the 401 that refuses it.
fn admit<B>(
    identity: &Identity,
    mut request: Request<B>,
    decided: Result<Identified, Refusal>,
) -> Result<Request<B>, Box<Response<ResponseBody>>> {
    match decided {
        Ok(identified) => {
            if identified.consumed_authorization && !identity.forward_consumed_token {
                // The token was for the gateway; an upstream with `auth: forward` must not be
                // able to replay it elsewhere.
                request.headers_mut().remove(header::AUTHORIZATION);
            }
            // Whatever a client put in extension-shaped headers, the caller is decided here.
            request.extensions_mut().context_mut().caller =
                Some(Caller(Some(identified.principal)));
            Ok(request)
        }
        Err(refusal) => {
            if let Refusal::Invalid(reason) = &refusal {
                info!(path = request.uri().path(), %reason, "credential refused");
            }
            Err(Box::new(unauthorized(
                identity.metadata.as_deref(),
                request.uri().path(),
                &refusal,
            )))
        }
    }
}
