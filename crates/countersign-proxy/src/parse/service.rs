use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::request::Parts;
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tower::Service;

use super::budget::{BodyBudget, BodyReservation, HeldBody, OverBudget};
use super::inspect::inspect_post;
use super::{Parsed, RequestIds, WantRequestIds};
use crate::body::{BoxError, ResponseBody};
use crate::config::Limits;
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::future::BoxedResponse;
use crate::metrics::ProxyMetrics;

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
    /// Shared by every request of the listener.
    pub(super) budget: BodyBudget,
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
    /// Boxed on every path: a POST's body read and parse is the layer's own work, and a
    /// bodiless request (an SSE GET, a DELETE) is rare enough that boxing it costs nothing
    /// while sparing every POST an enum the size of the whole chain below.
    type Future = BoxedResponse;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.method() != Method::POST {
            let passed = self.inner.call(request.map(|_| Parsed::NoBody));
            return BoxedResponse::new(passed.map(|answer| answer.unwrap_or_else(|e| match e {})));
        }
        // The ready service goes into the future; a fresh clone stays behind (tower's rule for
        // services called from a future).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        // Taken apart here and handed over as arguments: an async block taking the request
        // apart itself keeps both in its boxed state, moved whole into its box on every call.
        BoxedResponse::new(parse_then_call(inner, self.settings.clone(), parts, body))
    }
}

/// Reads and inspects the body, then passes the parsed request to `inner`; or answers the
/// refusal.
async fn parse_then_call<S, B>(
    mut inner: S,
    settings: Arc<ParseSettings>,
    mut parts: Parts,
    body: B,
) -> Response<ResponseBody>
where
    S: Service<Request<Parsed>, Response = Response<ResponseBody>, Error = Infallible>,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let label = parts.extensions.route().map_or("none", |r| r.label);
    let (limits, metrics) = (&settings.limits, &settings.metrics);
    let refuse = |error: ProxyError, id| error.answer(id, metrics, label, "POST");
    let over_budget = |over: OverBudget| {
        metrics.record_limit_hit("in_flight_body_bytes");
        refuse(
            ProxyError::OverBodyBudget {
                budget: over.budget,
            },
            None,
        )
    };
    // Before a byte is read: a body the gateway cannot afford now stays on the wire.
    let mut reservation = match settings.budget.admit(declared_length(&body)) {
        Ok(reservation) => reservation,
        Err(over) => return over_budget(over),
    };
    let read = collect_limited(
        body,
        limits.max_body_bytes.get(),
        limits.body_timeout,
        (&settings.budget, &mut reservation),
    )
    .await;
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(BodyError::OverBudget(over)) => return over_budget(over),
        Err(BodyError::Refused(error)) => return refuse(error, None),
    };
    // The payload keeps slices of these bytes: nothing is copied from here on.
    let inspected = match inspect_post(&parts.headers, bytes, limits.max_json_depth.get()) {
        Ok(inspected) => inspected,
        Err((error, id)) => return refuse(error, id.as_ref()),
    };
    // The parsed value is the body in another form: its bytes stay counted for as long
    // as the request lives, a held call's wait for a person included.
    parts.extensions.context_mut().held_body = Some(HeldBody::new(reservation));
    let ids = parts
        .extensions
        .get::<WantRequestIds>()
        .map(|_| request_ids(&inspected));
    let request = Request::from_parts(parts, Parsed::Message(inspected));
    let mut response = match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if let Some(ids) = ids {
        response.extensions_mut().insert(ids);
    }
    response
}

/// The ids of the requests in `inspected`, for [`WantRequestIds`].
fn request_ids(inspected: &super::InspectedPost) -> RequestIds {
    RequestIds(inspected.payload.request_ids())
}

/// Why a body read stopped.
enum BodyError {
    /// The client's doing: too large, too slow, broken.
    Refused(ProxyError),
    /// More arrived than the listener's budget has room for.
    OverBudget(OverBudget),
}

/// The body size the request declares, as its body knows it: the `Content-Length` the server
/// framed it by (hardening has checked it is within `max_body_bytes`), or nothing for a body
/// without one. Asked of the body rather than read from the field again, which the server and
/// hardening have each parsed by now.
fn declared_length<B: Body>(body: &B) -> usize {
    body.size_hint()
        .exact()
        .and_then(|length| usize::try_from(length).ok())
        .unwrap_or(0)
}

/// What a body buffer starts with before its bytes arrive.
const FIRST_CHUNK: usize = 64 * 1024;

/// Reads a whole request body, refusing it once it passes `limit` bytes or once `deadline` has
/// passed since the first poll. The deadline covers the whole body, not the gap between frames,
/// so a client dripping one byte at a time cannot hold the request open. Every byte is counted
/// in `reservation` as it arrives.
///
/// A combinator around the read rather than an `async fn`, whose state would keep the read
/// beside the timeout it is moved into.
fn collect_limited<'a, B>(
    body: B,
    limit: usize,
    deadline: Duration,
    (budget, reservation): (&'a BodyBudget, &'a mut BodyReservation),
) -> impl Future<Output = Result<Bytes, BodyError>> + 'a
where
    B: Body<Data = Bytes> + Unpin + 'a,
    B::Error: Into<BoxError>,
{
    let read = async move {
        let mut body = body;
        // A body that arrives as one frame (a call that came with its head, or in one read) is
        // kept as that frame, in the allocation it was read into: copying it into a buffer of
        // its own cost a read an allocation and a copy. A second frame starts the buffer.
        let mut whole: Option<Bytes> = None;
        let mut buffer = BytesMut::new();
        // The parsed payload keeps this buffer, so it should fit the body: once bytes have
        // arrived the buffer grows to the declared length at once, rather than doubling past
        // it. A client that declares much and sends little holds only the first chunk.
        let expected = usize::try_from(body.size_hint().lower())
            .unwrap_or(limit)
            .min(limit);
        let mut received = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Refused(ProxyError::BodyRead(e.into())))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            received += data.len();
            if received > limit {
                return Err(BodyError::Refused(ProxyError::BodyTooLarge { limit }));
            }
            budget
                .grow(reservation, data.len())
                .map_err(BodyError::OverBudget)?;
            // The first bytes: nothing to join them to yet.
            if received == data.len() {
                whole = Some(data);
                continue;
            }
            if buffer.capacity() == 0 {
                buffer.reserve(expected.min(FIRST_CHUNK));
            }
            if received > buffer.capacity() {
                buffer.reserve(expected.max(received) - buffer.len());
            }
            if let Some(first) = whole.take() {
                buffer.extend_from_slice(&first);
            }
            buffer.extend_from_slice(&data);
        }
        Ok(match whole {
            Some(whole) => whole,
            None => buffer.freeze(),
        })
    };
    tokio::time::timeout(deadline, read).map(move |read| {
        read.unwrap_or_else(|_| Err(BodyError::Refused(ProxyError::BodyTimeout(deadline))))
    })
}
