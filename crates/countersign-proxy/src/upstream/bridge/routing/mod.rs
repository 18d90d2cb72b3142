//! Where every message of one instance goes: the bookkeeping between the client streams served
//! from the instance (POST streams, each session's GET stream) and the requests it has not
//! answered yet. No I/O and no tasks: the instance's reader asks [`Routing::route`] what to do
//! with each message and does it.
//!
//! The rule (the module docs of [`super`] explain why it is the best stdio allows):
//! - a response goes to the stream of the request with its id;
//! - a notification naming a pending request — `notifications/progress` by its
//!   `progressToken`, a 2026-07-28 subscription notification by its `subscriptionId` — goes to
//!   that request's stream;
//! - any other server request or notification goes to the stream of the oldest pending request
//!   that still has an open stream; with none, to the session's GET stream; with none open, to
//!   the session's bounded queue, flushed into the next GET stream. An instance shared by
//!   several sessions sends an unrelated notification to every session that way, and an
//!   unrelated server request to the first session with an open GET stream (else the first
//!   session's queue); a server request no session can take is answered with an error, so
//!   the server never waits for it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;
use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::{
    ErrorObject, Message, Notification, Request, RequestId, Response,
};
use tokio::sync::{mpsc, oneshot};

use super::rewrite;
use crate::metrics::ProxyMetrics;

mod server;

/// A client session served by the instance.
pub(super) type SessionKey = u64;
/// The "session" of 2026-07-28 requests: they belong to none, have no GET stream and no queue.
pub(super) const STATELESS: SessionKey = 0;
/// One client stream (a POST's answer or a session's GET stream).
pub(super) type StreamKey = u64;

/// Messages a client stream holds before its reader waits (or, on a shared instance, before
/// the stream is given up as stalled).
pub(super) const STREAM_CAPACITY: usize = 32;
/// Requests one instance may have unanswered at once.
pub(super) const MAX_PENDING: usize = 1024;
/// Server messages a session without an open GET stream keeps, oldest dropped first. At most
/// [`STREAM_CAPACITY`], so a flushed queue always fits into a new stream.
pub(super) const MAX_QUEUED: usize = 32;
/// Server requests awaiting a client's answer, per instance.
pub(super) const MAX_SERVER_REQUESTS: usize = 1024;

/// The outcome of a request the bridge sent itself (`initialize`): the instance's answer, or
/// how the instance ended before answering.
pub(super) type InternalOutcome = Result<Result<RawJson, ErrorObject>, String>;

/// Why a stream or request could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The instance has ended.
    Closed,
    /// [`MAX_PENDING`] requests are unanswered already.
    TooManyPending,
    /// The session has an open GET stream already.
    StreamOpen,
}

/// What the instance's reader does with one routed message.
#[derive(Debug)]
pub(super) enum Delivery {
    /// Send `message` on a client stream. `on_fail` is written back to the instance when the
    /// stream is gone by then: the error answer to a server request nobody will see.
    Client {
        sink: Sink,
        message: Bytes,
        on_fail: Option<Bytes>,
    },
    /// The answer to a request the bridge sent itself.
    Internal(oneshot::Sender<InternalOutcome>, InternalOutcome),
    /// Write `message` to the instance (the error answer to an undeliverable server request).
    Server(Bytes),
}

/// Where to send to one client stream.
#[derive(Debug, Clone)]
pub(super) struct Sink {
    pub(super) key: StreamKey,
    pub(super) tx: mpsc::Sender<Bytes>,
}

#[derive(Debug)]
struct Pending {
    session: SessionKey,
    client_id: RequestId,
    reply: Reply,
    /// The client's own progress token, restored on the way back.
    progress_token: Option<RawJson>,
}

#[derive(Debug)]
enum Reply {
    Stream(StreamKey),
    Internal(oneshot::Sender<InternalOutcome>),
}

#[derive(Debug)]
struct ClientStream {
    session: SessionKey,
    tx: mpsc::Sender<Bytes>,
    /// POST streams: responses still due; the stream ends with the last one.
    outstanding: usize,
    standalone: bool,
}

#[derive(Debug, Default)]
struct SessionRoutes {
    standalone: Option<StreamKey>,
    queue: VecDeque<Bytes>,
    queued_bytes: usize,
}

/// The routing state of one instance.
#[derive(Debug)]
pub(super) struct Routing {
    next_id: i64,
    next_stream: StreamKey,
    /// By the id the instance saw; ids only grow, so iteration order is age order.
    pending: BTreeMap<i64, Pending>,
    streams: HashMap<StreamKey, ClientStream>,
    /// In the order the sessions attached.
    sessions: BTreeMap<SessionKey, SessionRoutes>,
    /// Server requests delivered to a session, so only that session may answer them.
    server_requests: HashMap<RequestId, SessionKey>,
    max_queued_bytes: usize,
    closed: bool,
    metrics: ProxyMetrics,
    upstream: &'static str,
}

impl Routing {
    /// `max_queued_bytes` bounds each session's queue (the upstream's `max_response_bytes`).
    pub(super) fn new(
        max_queued_bytes: usize,
        metrics: ProxyMetrics,
        upstream: &'static str,
    ) -> Self {
        Self {
            next_id: 1,
            next_stream: 1,
            pending: BTreeMap::new(),
            streams: HashMap::new(),
            sessions: BTreeMap::new(),
            server_requests: HashMap::new(),
            max_queued_bytes,
            closed: false,
            metrics,
            upstream,
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Messages waiting in `session`'s queue.
    #[cfg(test)]
    pub(super) fn queued(&self, session: SessionKey) -> usize {
        self.sessions.get(&session).map_or(0, |r| r.queue.len())
    }

    pub(super) fn attach(&mut self, session: SessionKey) {
        self.sessions.entry(session).or_default();
    }

    /// Forgets `session`: its streams end, its requests' answers will be dropped, and its
    /// queued messages are discarded.
    pub(super) fn detach(&mut self, session: SessionKey) {
        self.sessions.remove(&session);
        self.streams.retain(|_, s| s.session != session);
        self.pending.retain(|_, p| p.session != session);
        self.server_requests.retain(|_, s| *s != session);
    }

    /// Registers a POST stream for `requests` of `session`; returns the stream and the
    /// requests as the instance must see them.
    pub(super) fn open_post(
        &mut self,
        session: SessionKey,
        requests: &[&Request],
    ) -> Result<(StreamKey, mpsc::Receiver<Bytes>, Vec<Bytes>), Refusal> {
        if self.closed {
            return Err(Refusal::Closed);
        }
        if self.pending.len() + requests.len() > MAX_PENDING {
            return Err(Refusal::TooManyPending);
        }
        let (key, rx) = self.new_stream(session, requests.len(), false);
        let messages = requests
            .iter()
            .map(|request| {
                let id = self.next_id();
                let (message, progress_token) = rewrite::request_for_instance(request, id);
                self.pending.insert(
                    id,
                    Pending {
                        session,
                        client_id: request.id.clone(),
                        reply: Reply::Stream(key),
                        progress_token,
                    },
                );
                message
            })
            .collect();
        Ok((key, rx, messages))
    }

    /// Registers a request the bridge sends itself; returns it as the instance must see it.
    pub(super) fn internal_request(
        &mut self,
        request: &Request,
    ) -> Result<(Bytes, oneshot::Receiver<InternalOutcome>), Refusal> {
        if self.closed {
            return Err(Refusal::Closed);
        }
        if self.pending.len() >= MAX_PENDING {
            return Err(Refusal::TooManyPending);
        }
        let id = self.next_id();
        let (message, _) = rewrite::request_for_instance(request, id);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            id,
            Pending {
                session: STATELESS,
                client_id: request.id.clone(),
                reply: Reply::Internal(tx),
                progress_token: None,
            },
        );
        Ok((message, rx))
    }

    /// Opens `session`'s GET stream, with whatever the session's queue held.
    pub(super) fn open_standalone(
        &mut self,
        session: SessionKey,
    ) -> Result<(StreamKey, mpsc::Receiver<Bytes>), Refusal> {
        if self.closed {
            return Err(Refusal::Closed);
        }
        let open = self
            .sessions
            .get(&session)
            .and_then(|r| r.standalone)
            .and_then(|key| self.streams.get(&key))
            .is_some_and(|s| !s.tx.is_closed());
        if open {
            return Err(Refusal::StreamOpen);
        }
        let (key, rx) = self.new_stream(session, 0, true);
        let Some(routes) = self.sessions.get_mut(&session) else {
            self.streams.remove(&key);
            return Err(Refusal::Closed);
        };
        routes.standalone = Some(key);
        routes.queued_bytes = 0;
        let stream = &self.streams[&key];
        for message in routes.queue.drain(..) {
            // Cannot fail: the queue is never longer than a new stream's capacity.
            let _ = stream.tx.try_send(message);
        }
        Ok((key, rx))
    }

    /// The client side of `key` went away. Returns what to tell the instance: a 2026-07-28
    /// request whose stream closed is cancelled, as that revision says a closed stream means.
    pub(super) fn stream_closed(&mut self, key: StreamKey) -> Vec<Bytes> {
        let Some(stream) = self.streams.remove(&key) else {
            return Vec::new();
        };
        if stream.standalone {
            if let Some(routes) = self.sessions.get_mut(&stream.session)
                && routes.standalone == Some(key)
            {
                routes.standalone = None;
            }
            return Vec::new();
        }
        let mut cancellations = Vec::new();
        self.pending.retain(|id, p| {
            let on_stream = matches!(p.reply, Reply::Stream(k) if k == key);
            if on_stream && p.session == STATELESS {
                cancellations.push(rewrite::cancellation(*id, "the client closed its stream"));
            }
            !on_stream
        });
        cancellations
    }

    /// A client's answer to a server request: passed on only from the session it was sent to.
    pub(super) fn client_response(
        &mut self,
        session: SessionKey,
        response: &Response,
    ) -> Option<Bytes> {
        let id = response.id.as_ref()?;
        if self.server_requests.get(id) != Some(&session) {
            return None;
        }
        self.server_requests.remove(id);
        Some(Bytes::from(Message::Response(response.clone()).to_vec()))
    }

    /// A client's `notifications/cancelled` for one of its own requests, with the id the
    /// instance knows; the request is forgotten (its stream ends if it was the last).
    pub(super) fn client_cancel(
        &mut self,
        session: SessionKey,
        notification: &Notification,
    ) -> Option<Bytes> {
        let params = notification.params.as_ref()?;
        let client_id = RequestId::from_raw(&params.get("requestId")?).ok()?;
        let (&id, _) = self
            .pending
            .iter()
            .find(|(_, p)| p.session == session && p.client_id == client_id)?;
        let pending = self.pending.remove(&id)?;
        if let Reply::Stream(key) = pending.reply {
            self.answered(key);
        }
        let number = RawJson::from_value(&serde_json::Value::from(id));
        Some(rewrite::notification_with(
            notification,
            "requestId",
            &number,
            false,
        ))
    }

    /// The instance has ended: every pending request is answered with `reason` (named in an
    /// error response on its stream), every stream ends, nothing more is accepted.
    pub(super) fn close(&mut self, stream_reason: &str, internal_reason: &str) -> Vec<Delivery> {
        self.closed = true;
        let mut deliveries = Vec::new();
        for (_, pending) in std::mem::take(&mut self.pending) {
            match pending.reply {
                Reply::Internal(tx) => {
                    deliveries.push(Delivery::Internal(tx, Err(internal_reason.to_owned())));
                }
                Reply::Stream(key) => {
                    if let Some(sink) = self.sink(key) {
                        let error = ErrorObject {
                            code: crate::error::code::INTERNAL_ERROR,
                            message: stream_reason.to_owned(),
                            data: None,
                        };
                        deliveries.push(Delivery::Client {
                            sink,
                            message: rewrite::response_for_client(pending.client_id, Err(error)),
                            on_fail: None,
                        });
                    }
                }
            }
        }
        self.streams.clear();
        self.sessions.clear();
        self.server_requests.clear();
        deliveries
    }

    fn sink(&self, key: StreamKey) -> Option<Sink> {
        let stream = self.streams.get(&key)?;
        (!stream.tx.is_closed()).then(|| Sink {
            key,
            tx: stream.tx.clone(),
        })
    }

    /// One of `key`'s responses was routed; a POST stream ends after its last.
    fn answered(&mut self, key: StreamKey) {
        if let Some(stream) = self.streams.get_mut(&key) {
            stream.outstanding = stream.outstanding.saturating_sub(1);
            if stream.outstanding == 0 && !stream.standalone {
                self.streams.remove(&key);
            }
        }
    }

    fn new_stream(
        &mut self,
        session: SessionKey,
        outstanding: usize,
        standalone: bool,
    ) -> (StreamKey, mpsc::Receiver<Bytes>) {
        let key = self.next_stream;
        self.next_stream += 1;
        let (tx, rx) = mpsc::channel(STREAM_CAPACITY);
        self.streams.insert(
            key,
            ClientStream {
                session,
                tx,
                outstanding,
                standalone,
            },
        );
        (key, rx)
    }

    fn next_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}
