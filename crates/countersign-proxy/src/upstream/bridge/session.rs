//! Serving one request: opening a session with `initialize`, POSTs on a session or without one
//! (2026-07-28), the GET stream and DELETE.

use std::sync::Arc;

use bytes::Bytes;
use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::{Message, Notification, Payload, Request};
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::Full;
use tokio::sync::mpsc;

use super::activity::{Activity, Busy};
use super::instance::{Instance, Kind, StopOnDrop};
use super::rewrite;
use super::routing::{Refusal, STATELESS, SessionKey};
use super::stream::OnDrop;
use super::transport::{self as wire, json_error};
use super::{Inner, Shared};
use crate::body::ResponseBody;
use crate::config::ProcessSharing;
use crate::error::{ProxyError, code};

/// One client session.
pub(super) struct Session {
    pub(super) id: String,
    pub(super) key: SessionKey,
    pub(super) instance: Arc<Instance>,
    /// Per-session sharing: the instance is this session's alone and ends with it.
    owns_instance: bool,
    activity: Arc<Activity>,
    /// Keeps a shared instance busy while the session lives.
    _attached: Option<Busy>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.instance.routing().detach(self.key);
        if self.owns_instance {
            self.instance.stop();
        }
    }
}

type Answer = Result<Response<ResponseBody>, ProxyError>;

impl Inner {
    pub(super) async fn serve(self: Arc<Self>, request: http::Request<Full<Bytes>>) -> Answer {
        let (parts, body) = request.into_parts();
        let session = wire::session_id(&parts.headers).map(str::to_owned);
        let headers = &parts.headers;
        match (parts.method, session) {
            (Method::POST, session) => {
                let payload = match wire::read_payload(body).await {
                    Ok(payload) => payload,
                    Err(refusal) => return Ok(refusal),
                };
                match session {
                    Some(id) => match self.session(&id) {
                        Some(session) => self.post_on_session(&session, &payload, headers).await,
                        None => Ok(wire::session_not_found()),
                    },
                    None => match wire::initialize(&payload) {
                        Some(initialize) => self.open_session(initialize, headers).await,
                        None if wire::is_stateless(headers, Some(&payload)) => {
                            self.post_stateless(&payload, headers).await
                        }
                        None => Ok(wire::session_required()),
                    },
                }
            }
            (Method::GET, Some(id)) => Ok(self.open_get_stream(&id, headers)),
            (Method::DELETE, Some(id)) => Ok(if self.end_session(&id) {
                wire::ok()
            } else {
                wire::session_not_found()
            }),
            (Method::GET | Method::DELETE, None) => Ok(if wire::is_stateless(headers, None) {
                wire::method_not_allowed()
            } else {
                wire::session_required()
            }),
            (_, _) => Ok(wire::method_not_allowed()),
        }
    }

    /// `initialize` without a session: a new session, on a new or the shared instance.
    async fn open_session(self: &Arc<Self>, initialize: &Request, headers: &HeaderMap) -> Answer {
        if !wire::accepts(headers, true) {
            return Ok(wire::not_acceptable(true));
        }
        let key = self.next_serial();
        let (instance, owns_instance, attached, stop) = match self.settings.sharing {
            ProcessSharing::PerSession => {
                let instance = self.start_instance(Kind::PerSession, headers).await?;
                let stop = StopOnDrop::new(instance.clone());
                (instance, true, None, Some(stop))
            }
            ProcessSharing::Shared => {
                let (instance, busy) = self.shared_instance(Shared::Sessions, headers).await?;
                (instance, false, Some(busy), None)
            }
        };
        // Attached before the server answers, so what it says meanwhile (logs) is kept for
        // this session.
        instance.routing().attach(key);
        let answer = if owns_instance {
            self.forward_initialize(&instance, initialize).await
        } else {
            self.shared_initialize(&instance, initialize).await
        };
        let result = match answer {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => {
                // The server refused (an unsupported revision, say): no session.
                instance.routing().detach(key);
                let message = rewrite::response_for_client(initialize.id.clone(), Err(error));
                return Ok(single_event(message, None, Vec::new()));
            }
            Err(error) => {
                instance.routing().detach(key);
                return Err(error);
            }
        };
        let id = uuid::Uuid::new_v4().simple().to_string();
        let me = Arc::downgrade(self);
        let idle_id = id.clone();
        let activity = Activity::new(
            self.settings.idle_timeout,
            Box::new(move || {
                if let Some(inner) = me.upgrade()
                    && inner.end_session(&idle_id)
                {
                    tracing::info!(upstream = %inner.settings.upstream, "ended an idle session");
                }
            }),
        );
        let busy = activity.busy();
        let session = Arc::new(Session {
            id: id.clone(),
            key,
            instance: instance.clone(),
            owns_instance,
            activity,
            _attached: attached,
        });
        if let Some(stop) = stop {
            stop.disarm();
        }
        self.sessions().insert(id.clone(), session);
        let message = rewrite::response_for_client(initialize.id.clone(), Ok(result));
        Ok(single_event(message, Some(&id), vec![Box::new(busy)]))
    }

    /// A per-session instance's `initialize`, forwarded as the client sent it.
    async fn forward_initialize(
        &self,
        instance: &Instance,
        initialize: &Request,
    ) -> Result<Result<RawJson, countersign_jsonrpc::message::ErrorObject>, ProxyError> {
        match instance
            .request("initialize", initialize.params.as_deref().cloned())
            .await
        {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(how)) => Err(self.unavailable(how)),
            Err(_) => Err(self.unavailable("it ended before answering".into())),
        }
    }

    /// A shared instance's `InitializeResult`: the first session's `initialize` forwarded,
    /// then the same answer for everyone.
    async fn shared_initialize(
        &self,
        instance: &Instance,
        initialize: &Request,
    ) -> Result<Result<RawJson, countersign_jsonrpc::message::ErrorObject>, ProxyError> {
        let mut refused = None;
        let cached = instance
            .initialized
            .get_or_try_init(|| async {
                match self.forward_initialize(instance, initialize).await? {
                    Ok(result) => {
                        let initialized = Message::Notification(Notification {
                            method: "notifications/initialized".into(),
                            params: None,
                        });
                        let _ = instance
                            .write(vec![Bytes::from(initialized.to_vec())])
                            .await;
                        Ok(result)
                    }
                    Err(error) => {
                        // Not cached: the next session's `initialize` is forwarded afresh.
                        refused = Some(error);
                        Err(None)
                    }
                }
            })
            .await;
        match cached {
            Ok(result) => Ok(Ok(result.clone())),
            Err(None) => Ok(Err(refused.expect("a refusal was recorded"))),
            Err(Some(error)) => Err(error),
        }
    }

    /// A POST on an open session.
    async fn post_on_session(
        &self,
        session: &Session,
        payload: &Payload,
        headers: &HeaderMap,
    ) -> Answer {
        if wire::initialize(payload).is_some() {
            return Ok(json_error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "Invalid Request: the session is already initialized",
            ));
        }
        let busy = session.activity.busy();
        let skip_initialized = !session.owns_instance;
        self.post(
            &session.instance,
            session.key,
            Some(&session.id),
            payload,
            headers,
            busy,
            skip_initialized,
        )
        .await
    }

    /// A POST of the stateless 2026-07-28 revision.
    async fn post_stateless(&self, payload: &Payload, headers: &HeaderMap) -> Answer {
        if !self.settings.serves_stateless {
            return Ok(wire::sessions_only(&self.settings.upstream));
        }
        let (instance, busy) = self.shared_instance(Shared::Stateless, headers).await?;
        self.post(&instance, STATELESS, None, payload, headers, busy, true)
            .await
    }

    /// Writes a POST's messages to `instance`; requests are answered on a new stream.
    #[allow(clippy::too_many_arguments)]
    async fn post(
        &self,
        instance: &Arc<Instance>,
        session: SessionKey,
        session_id: Option<&str>,
        payload: &Payload,
        headers: &HeaderMap,
        busy: Busy,
        skip_initialized: bool,
    ) -> Answer {
        let requests: Vec<&Request> = payload
            .messages()
            .iter()
            .filter_map(|m| match m {
                Message::Request(r) => Some(r),
                _ => None,
            })
            .collect();
        if !requests.is_empty() && !wire::accepts(headers, true) {
            return Ok(wire::not_acceptable(true));
        }
        let (stream, writes) = {
            let mut routing = instance.routing();
            let stream = if requests.is_empty() {
                None
            } else {
                match routing.open_post(session, &requests) {
                    Ok(opened) => Some(opened),
                    Err(refusal) => return Ok(self.refused(refusal)),
                }
            };
            let mut rewritten = stream
                .as_ref()
                .map(|(_, _, r)| r.clone())
                .unwrap_or_default()
                .into_iter();
            let mut writes = Vec::with_capacity(payload.messages().len());
            for message in payload.messages() {
                match message {
                    Message::Request(_) => writes.extend(rewritten.next()),
                    Message::Response(response) => match routing.client_response(session, response)
                    {
                        Some(answer) => writes.push(answer),
                        None => tracing::debug!(
                            upstream = %self.settings.upstream,
                            "dropped a client's response to a request this session was not sent"
                        ),
                    },
                    Message::Notification(n)
                        if n.method == "notifications/initialized" && skip_initialized => {}
                    Message::Notification(n) if n.method == "notifications/cancelled" => {
                        writes.extend(routing.client_cancel(session, n));
                    }
                    Message::Notification(n) => {
                        writes.push(Bytes::from(Message::Notification(n.clone()).to_vec()));
                    }
                }
            }
            (stream.map(|(key, rx, _)| (key, rx)), writes)
        };
        let closed_guard = stream
            .as_ref()
            .map(|(key, _)| close_on_drop(instance, *key));
        if instance.write(writes).await.is_err() {
            // The instance ended under the request: a session's client starts over on 404, a
            // stateless one is told the upstream is gone.
            return match session_id {
                Some(_) => Ok(wire::session_not_found()),
                None => Err(self.unavailable("it ended before the request reached it".into())),
            };
        }
        match (stream, closed_guard) {
            (Some((_, rx)), Some(guard)) => Ok(wire::event_stream(
                rx,
                vec![Box::new(busy), Box::new(guard)],
                session_id,
            )),
            _ => Ok(wire::accepted()),
        }
    }

    /// GET: the session's standalone stream.
    fn open_get_stream(&self, id: &str, headers: &HeaderMap) -> Response<ResponseBody> {
        let Some(session) = self.session(id) else {
            return wire::session_not_found();
        };
        if !wire::accepts(headers, false) {
            return wire::not_acceptable(false);
        }
        let busy = session.activity.busy();
        let opened = session.instance.routing().open_standalone(session.key);
        match opened {
            Ok((key, rx)) => {
                let guard = close_on_drop(&session.instance, key);
                wire::event_stream(rx, vec![Box::new(busy), Box::new(guard)], Some(id))
            }
            Err(Refusal::StreamOpen) => json_error(
                StatusCode::CONFLICT,
                None,
                code::TRANSPORT,
                "Conflict: Only one SSE stream is allowed per session",
            ),
            Err(refusal) => self.refused(refusal),
        }
    }

    fn refused(&self, refusal: Refusal) -> Response<ResponseBody> {
        match refusal {
            Refusal::Closed => wire::session_not_found(),
            Refusal::StreamOpen => wire::session_not_found(),
            Refusal::TooManyPending => {
                self.settings.metrics.record_limit_hit("upstream_pending");
                let mut response = json_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    code::TRANSPORT,
                    &format!(
                        "upstream `{}` has {} requests unanswered already; retry shortly",
                        self.settings.upstream,
                        super::routing::MAX_PENDING
                    ),
                );
                response.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from_static(crate::error::RETRY_AFTER_SECS),
                );
                response
            }
        }
    }
}

/// Tells the routing when the client side of stream `key` goes away.
fn close_on_drop(
    instance: &Arc<Instance>,
    key: super::routing::StreamKey,
) -> OnDrop<impl FnOnce() + Send + use<>> {
    let weak = Arc::downgrade(instance);
    OnDrop::new(move || {
        if let Some(instance) = weak.upgrade() {
            let cancellations = instance.routing().stream_closed(key);
            instance.write_now(cancellations);
        }
    })
}

/// A stream of exactly one message.
fn single_event(
    message: Bytes,
    session: Option<&str>,
    guards: Vec<Box<dyn Send>>,
) -> Response<ResponseBody> {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(message);
    wire::event_stream(rx, guards, session)
}
