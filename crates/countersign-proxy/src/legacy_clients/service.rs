use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::Body;
use tokio::sync::{mpsc, oneshot};
use tower::{Service, ServiceExt};
use tracing::debug;

use super::QUEUE_MESSAGES;
use super::body::AdaptedBody;
use super::deliver::{Delivered, deliver};
use super::driver::drive;
use super::layer::LegacySettings;
use super::requests::{message_post, session_headers};
use super::sessions::{Activity, LegacySessions, Session, SessionGuard};
use super::stream::{LegacyStream, endpoint_event};
use crate::body::{BoxError, ResponseBody, empty};
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::future::ResponseFuture;
use crate::identity::Caller;
use crate::route::{LegacyEndpoint, Route};

/// Longest a session's first message after `initialize` waits for the upstream GET stream.
const STREAM_OPEN_WAIT: Duration = Duration::from_secs(10);

/// Serves the legacy HTTP+SSE endpoints of every route and passes everything else on; see the
/// [module docs](super).
#[derive(Debug, Clone)]
pub struct LegacyClients<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared>,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) settings: LegacySettings,
    pub(super) sessions: Arc<LegacySessions>,
}

impl<S, B> Service<Request<B>> for LegacyClients<S>
where
    S: Service<Request<AdaptedBody<B>>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let endpoint = request.extensions().get::<LegacyEndpoint>().copied();
        let Some(endpoint) = endpoint else {
            return ResponseFuture::inner(self.inner.call(request.map(AdaptedBody::client)));
        };
        // The session's requests are sent from tasks of their own, each on a clone; the ready
        // service stays here for the next request.
        let inner = self.inner.clone();
        match endpoint {
            LegacyEndpoint::Stream => ResponseFuture::answered(self.shared.open(request, inner)),
            LegacyEndpoint::Messages => {
                let shared = self.shared.clone();
                ResponseFuture::working(async move { shared.post(request, inner).await })
            }
        }
    }
}

impl Shared {
    /// `GET <sse path>`: a new session and its stream, starting with the `endpoint` event.
    fn open<S, B>(&self, request: Request<B>, inner: S) -> Response<ResponseBody>
    where
        S: Service<Request<AdaptedBody<B>>, Response = Response<ResponseBody>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
    {
        let settings = &self.settings;
        let metrics = &settings.metrics;
        let Some((route, messages_path)) = legacy_route(&request) else {
            return ProxyError::Internal(
                "a legacy request reached its layer without a route".into(),
            )
            .into_response(None);
        };
        let label = route.label;
        // The stream is a request in flight for as long as it is open, as a GET stream is.
        let slot = match settings.client_limit.admit(&request) {
            Ok(slot) => slot,
            Err(refusal) => return *refusal,
        };
        // Bound to the principal the identity layer found for the GET that opened it.
        let principal = caller_id(&request);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (outbox, queue) = mpsc::channel(QUEUE_MESSAGES);
        let activity = Arc::new(Activity::new(settings.clock.clone()));
        let peer = request.extensions().peer();
        let session = Arc::new(Session::new(
            id.clone(),
            route,
            principal,
            (session_headers(request.headers()), peer),
            outbox,
            activity.clone(),
        ));
        if self.sessions.insert(session.clone()).is_err() {
            metrics.record_limit_hit("legacy_sessions");
            let limit = self.sessions.capacity();
            return ProxyError::TooManyLegacySessions { limit }.answer(None, metrics, label, "GET");
        }
        let guard = SessionGuard {
            sessions: self.sessions.clone(),
            id: id.clone(),
            _slot: slot,
            _gauge: metrics.legacy_session_opened(label),
        };
        debug!(session = %id, upstream = label, "legacy session opened");
        tokio::spawn(drive(session, inner, settings.max_message_bytes));

        let stream = LegacyStream::new(
            endpoint_event(&messages_path, &id),
            queue,
            (settings.quiet, activity),
            metrics.clone(),
            guard,
        );
        let mut response = Response::new(ResponseBody::new(stream));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Proxies in front of the gateway must not buffer the stream.
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        response
    }

    /// `POST <messages path>?session_id=…`: the message goes down the stack as a Streamable HTTP
    /// POST of the session; its answer goes to the session's stream.
    async fn post<S, B>(self: Arc<Self>, request: Request<B>, inner: S) -> Response<ResponseBody>
    where
        S: Service<Request<AdaptedBody<B>>, Response = Response<ResponseBody>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
    {
        let metrics = &self.settings.metrics;
        let label = request.extensions().route().map_or("none", |r| r.label);
        let session = session_id(request.uri()).and_then(|id| self.sessions.get(id));
        let principal = caller_id(&request);
        // Another principal's session is answered as if it did not exist: an id is no key.
        let Some(session) = session.filter(|s| s.principal == principal && !s.upstream_gone())
        else {
            return ProxyError::UnknownLegacySession.answer(None, metrics, label, "POST");
        };
        session.activity.touch();
        // Sent once `initialize` has negotiated a version: a message of the initialized session.
        let initialized = session.upstream().protocol_version.is_some();
        // The first such message (`notifications/initialized`) is answered only once the
        // upstream GET stream is open: legacy clients send one message at a time, so nothing
        // the upstream sends in reaction to the next one can miss the stream.
        let opens_stream = initialized && !session.stream_wanted();
        let (request, in_session, taken) = message_post(&session, request);
        let flag = taken.flag();
        let (answer, answered) = oneshot::channel();
        let max_message_bytes = self.settings.max_message_bytes;
        tokio::spawn(async move {
            let Ok(response) = inner.oneshot(request).await;
            if !flag.was_taken() {
                // Refused before the body was read: the message was not taken, and the POST
                // itself says so.
                let _ = answer.send(response);
                return;
            }
            let status = response.status();
            // Only a notification's answer (202, nothing to deliver) waits for the stream; a
            // request's answer may take as long as its call does.
            let mut answer = Some(answer);
            let holds = opens_stream && status == StatusCode::ACCEPTED;
            if !holds && let Some(answer) = answer.take() {
                let _ = answer.send(accepted());
            }
            let delivered = deliver(&session, response, in_session, max_message_bytes).await;
            if status.is_success() && initialized && delivered == Delivered::All {
                session.want_stream();
                if holds {
                    let opened = session.until_stream_answered();
                    let _ = tokio::time::timeout(STREAM_OPEN_WAIT, opened).await;
                }
            }
            if let Some(answer) = answer {
                let _ = answer.send(accepted());
            }
        });
        if opens_stream {
            return answered.await.unwrap_or_else(|_| accepted());
        }
        tokio::select! {
            biased;
            Ok(()) = taken.receiver => accepted(),
            answer = answered => answer.unwrap_or_else(|_| accepted()),
        }
    }
}

/// The route of a legacy request (hardening attached it) and its messages path.
fn legacy_route<B>(request: &Request<B>) -> Option<(Route, String)> {
    let route = request.extensions().route()?.clone();
    let messages = route.legacy.as_ref()?.messages.clone();
    Some((route, messages))
}

/// The session a POST names: its query is exactly `session_id=<id>`, as the `endpoint` event
/// gave it.
fn session_id(uri: &Uri) -> Option<&str> {
    let id = uri.query()?.strip_prefix("session_id=")?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// The answer to a message the stack has taken: its response comes on the stream.
fn accepted() -> Response<ResponseBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// The id of the request's principal, as the identity layer (above this one) found it.
fn caller_id<B>(request: &Request<B>) -> Option<String> {
    match request.extensions().caller() {
        Some(Caller(Some(principal))) => Some(principal.id.clone()),
        _ => None,
    }
}
