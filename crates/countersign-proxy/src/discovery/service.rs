use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::header::{self, HeaderValue};
use http::uri::Authority;
use http::{Method, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::upstream_document::UpstreamDocument;
use super::{Discovery, NoOrigin, challenge, metadata_suffix};
use crate::body::ResponseBody;
use crate::future::ResponseFuture;
use crate::identity::{metadata_url, status_only};

/// Applies [`Discover`] to a service.
#[derive(Debug, Clone)]
pub struct DiscoveryLayer {
    discovery: Arc<Discovery>,
}

impl DiscoveryLayer {
    pub fn new(discovery: Discovery) -> Self {
        Self {
            discovery: Arc::new(discovery),
        }
    }
}

impl<S> Layer<S> for DiscoveryLayer {
    type Service = Discover<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Discover {
            inner,
            discovery: self.discovery.clone(),
        }
    }
}

/// Serves the protected-resource metadata and points the upstreams' challenges at it; see the
/// [module docs](super).
#[derive(Debug, Clone)]
pub struct Discover<S> {
    inner: S,
    discovery: Arc<Discovery>,
}

impl<S, B> Service<Request<B>> for Discover<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = DiscoveryFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let discovery = &self.discovery;
        let path = request.uri().path();
        if let Some(suffix) = metadata_suffix(path) {
            if let Some(document) = discovery.own.as_ref().and_then(|own| own.serve(&request)) {
                return DiscoveryFuture::plain(ResponseFuture::answered(document));
            }
            if let Some(relayed) = discovery.relayed_for_metadata(suffix) {
                return DiscoveryFuture::plain(relay(discovery, relayed, &request));
            }
            // No such document: below, hardening answers 404 as for any unknown path.
        } else if discovery.own.is_none()
            && let Some(relayed) = discovery.relayed_for_request(path)
        {
            // Kept cheap (two reference counts, two shared header values): the URL is built
            // only if the upstream does challenge the client.
            let rewrite = ChallengeRewrite {
                discovery: discovery.clone(),
                relayed: relayed.clone(),
                authority: request.uri().authority().cloned(),
                host: request.headers().get(header::HOST).cloned(),
            };
            return DiscoveryFuture {
                inner: ResponseFuture::inner(self.inner.call(request)),
                rewrite: Some(rewrite),
            };
        }
        DiscoveryFuture::plain(ResponseFuture::inner(self.inner.call(request)))
    }
}

/// The relayed document for a request of the well-known URL of `relayed`'s route.
fn relay<F, B>(
    discovery: &Discovery,
    relayed: &Arc<UpstreamDocument>,
    request: &Request<B>,
) -> ResponseFuture<F> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = status_only(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return ResponseFuture::answered(response);
    }
    let origin = match discovery.origin(
        request.uri().authority(),
        request.headers().get(header::HOST),
    ) {
        Ok(origin) => origin,
        Err(NoOrigin::Unusable) => {
            return ResponseFuture::answered(status_only(StatusCode::BAD_REQUEST));
        }
        Err(NoOrigin::NotAllowed) => {
            return ResponseFuture::answered(status_only(StatusCode::MISDIRECTED_REQUEST));
        }
    };
    let resource = format!("{origin}{}", relayed.route_path);
    let relayed = relayed.clone();
    ResponseFuture::working(async move { relayed.respond(&resource).await })
}

/// What a response to an MCP request of a relayed route needs to have its challenges rewritten.
#[derive(Debug)]
struct ChallengeRewrite {
    discovery: Arc<Discovery>,
    relayed: Arc<UpstreamDocument>,
    authority: Option<Authority>,
    host: Option<HeaderValue>,
}

impl ChallengeRewrite {
    fn apply(self, response: &mut Response<ResponseBody>) {
        if !response.headers().contains_key(header::WWW_AUTHENTICATE) {
            return;
        }
        if let Ok(origin) = self
            .discovery
            .origin(self.authority.as_ref(), self.host.as_ref())
        {
            let url = metadata_url(&origin, &self.relayed.route_path);
            challenge::point_at(response.headers_mut(), &url);
        }
    }
}

pin_project! {
    /// The inner response, its challenges rewritten when it answers a relayed route.
    pub struct DiscoveryFuture<F> {
        #[pin]
        inner: ResponseFuture<F>,
        rewrite: Option<ChallengeRewrite>,
    }
}

impl<F> DiscoveryFuture<F> {
    fn plain(inner: ResponseFuture<F>) -> Self {
        Self {
            inner,
            rewrite: None,
        }
    }
}

impl<F> Future for DiscoveryFuture<F>
where
    F: Future<Output = Result<Response<ResponseBody>, Infallible>>,
{
    type Output = Result<Response<ResponseBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(mut response) = ready!(this.inner.poll(cx));
        if let Some(rewrite) = this.rewrite.take() {
            rewrite.apply(&mut response);
        }
        Poll::Ready(Ok(response))
    }
}
