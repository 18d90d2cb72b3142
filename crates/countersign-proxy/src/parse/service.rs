use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tower::Service;

use super::Parsed;
use super::inspect::inspect_post;
use crate::body::{BoxError, ResponseBody};
use crate::config::Limits;
use crate::error::ProxyError;
use crate::future::ResponseFuture;
use crate::metrics::ProxyMetrics;
use crate::route::Route;

/// Reads and parses POST bodies; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct Parse<S> {
    pub(super) inner: S,
    pub(super) settings: Arc<ParseSettings>,
}

/// What every request's parse reads, shared so a request clones one pointer.
#[derive(Debug)]
pub(super) struct ParseSettings {
    pub(super) limits: Limits,
    pub(super) metrics: ProxyMetrics,
}

impl<S, B> Service<Request<B>> for Parse<S>
where
    S: Service<Request<Parsed>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.method() != Method::POST {
            return ResponseFuture::inner(self.inner.call(request.map(|_| Parsed::NoBody)));
        }
        // The ready service goes into the future; a fresh clone stays behind (tower's rule for
        // services called from a future).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let settings = self.settings.clone();
        ResponseFuture::working(async move {
            let (parts, body) = request.into_parts();
            let label = parts.extensions.get::<Route>().map_or("none", |r| r.label);
            let (limits, metrics) = (&settings.limits, &settings.metrics);
            let refuse = |error: ProxyError, id| error.answer(id, metrics, label, "POST");
            let bytes =
                match collect_limited(body, limits.max_body_bytes.get(), limits.body_timeout).await
                {
                    Ok(bytes) => bytes,
                    Err(error) => return refuse(error, None),
                };
            // The payload keeps slices of these bytes: nothing is copied from here on.
            let inspected = match inspect_post(&parts.headers, bytes, limits.max_json_depth.get()) {
                Ok(inspected) => inspected,
                Err((error, id)) => return refuse(error, id.as_ref()),
            };
            let request = Request::from_parts(parts, Parsed::Message(inspected));
            match inner.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        })
    }
}

/// Reads a whole request body, refusing it once it passes `limit` bytes or once `deadline` has
/// passed since the first poll. The deadline covers the whole body, not the gap between frames,
/// so a client dripping one byte at a time cannot hold the request open.
async fn collect_limited<B>(body: B, limit: usize, deadline: Duration) -> Result<Bytes, ProxyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let read = async move {
        let mut body = body;
        // Sized from Content-Length when there is one, so a large body is not copied while
        // the buffer doubles; the parsed payload keeps this buffer, so it should fit.
        let expected = usize::try_from(body.size_hint().lower()).unwrap_or(limit);
        let mut buffer = BytesMut::with_capacity(expected.min(limit));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ProxyError::BodyRead(e.into()))?;
            if let Ok(data) = frame.into_data() {
                if buffer.len() + data.len() > limit {
                    return Err(ProxyError::BodyTooLarge { limit });
                }
                buffer.extend_from_slice(&data);
            }
        }
        Ok(buffer.freeze())
    };
    tokio::time::timeout(deadline, read)
        .await
        .map_err(|_| ProxyError::BodyTimeout(deadline))?
}
