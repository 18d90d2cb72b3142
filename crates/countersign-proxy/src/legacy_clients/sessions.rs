//! The open legacy sessions: what each one knows about its upstream session, and the queue to
//! its client's stream. A session is in the table exactly as long as its stream is open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::client_limit::{ClientSlot, PeerAddr};
use crate::clock::Clock;
use crate::metrics::StreamGuard;
use crate::route::Route;

/// What goes to a session's stream.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// One encoded `event: message`.
    Message(Bytes),
    /// The upstream session is gone: end the stream after what is queued.
    End,
}

/// One open legacy session.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) id: String,
    pub(super) route: Route,
    /// The principal that opened it; only its POSTs are accepted.
    pub(super) principal: Option<String>,
    /// The headers of the `GET` that opened it (identity and authorization included, framing
    /// and MCP session headers removed), for the requests the gateway makes on its behalf.
    pub(super) headers: HeaderMap,
    pub(super) peer: Option<PeerAddr>,
    pub(super) outbox: mpsc::Sender<Outgoing>,
    upstream: Mutex<UpstreamSession>,
    /// Where the upstream GET stream of the session stands.
    stream: watch::Sender<ServerStream>,
    /// The upstream answered a request of the session with 404: it ended the session.
    upstream_gone: AtomicBool,
    /// Messages queued for the client so far.
    queued: AtomicU64,
    pub(super) activity: Arc<Activity>,
}

/// The upstream GET stream of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerStream {
    /// The session is not initialized yet.
    NotYet,
    /// The upstream accepted a message of the initialized session: time to open it.
    Wanted,
    /// The upstream has answered the first attempt to open it (or it will not be opened).
    Answered,
}

/// What the gateway learnt from the upstream's answer to `initialize`.
#[derive(Debug, Default, Clone)]
pub(super) struct UpstreamSession {
    /// Its `Mcp-Session-Id`, sent on every later request.
    pub(super) id: Option<HeaderValue>,
    /// The negotiated protocol version, sent as `MCP-Protocol-Version`.
    pub(super) protocol_version: Option<HeaderValue>,
}

impl Session {
    pub(super) fn new(
        id: String,
        route: Route,
        principal: Option<String>,
        (headers, peer): (HeaderMap, Option<PeerAddr>),
        outbox: mpsc::Sender<Outgoing>,
        activity: Arc<Activity>,
    ) -> Self {
        Self {
            id,
            route,
            principal,
            headers,
            peer,
            outbox,
            upstream: Mutex::default(),
            stream: watch::Sender::new(ServerStream::NotYet),
            upstream_gone: AtomicBool::new(false),
            queued: AtomicU64::new(0),
            activity,
        }
    }

    pub(super) fn upstream(&self) -> UpstreamSession {
        self.upstream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the upstream's session id, from the first answer that carries one.
    pub(super) fn learn_id(&self, id: &HeaderValue) {
        let mut upstream = self.upstream.lock().unwrap_or_else(|p| p.into_inner());
        if upstream.id.is_none() {
            upstream.id = Some(id.clone());
        }
    }

    /// Records the negotiated version, from the first `initialize` result; `false` if one was
    /// known already.
    pub(super) fn learn_version(&self, version: HeaderValue) -> bool {
        let mut upstream = self.upstream.lock().unwrap_or_else(|p| p.into_inner());
        if upstream.protocol_version.is_some() {
            return false;
        }
        upstream.protocol_version = Some(version);
        true
    }

    /// The upstream accepted a message of the initialized session: its GET stream may open.
    pub(super) fn want_stream(&self) {
        self.stream.send_if_modified(|state| {
            let first = *state == ServerStream::NotYet;
            if first {
                *state = ServerStream::Wanted;
            }
            first
        });
    }

    pub(super) fn stream_wanted(&self) -> bool {
        *self.stream.borrow() != ServerStream::NotYet
    }

    /// Waits until [`Self::want_stream`].
    pub(super) async fn until_stream_wanted(&self) {
        let mut state = self.stream.subscribe();
        let _ = state.wait_for(|s| *s != ServerStream::NotYet).await;
    }

    /// The first attempt to open the GET stream has its answer.
    pub(super) fn stream_answered(&self) {
        self.stream.send_replace(ServerStream::Answered);
    }

    /// Waits until [`Self::stream_answered`].
    pub(super) async fn until_stream_answered(&self) {
        let mut state = self.stream.subscribe();
        let _ = state.wait_for(|s| *s == ServerStream::Answered).await;
    }

    pub(super) fn mark_upstream_gone(&self) {
        self.upstream_gone.store(true, Ordering::Release);
    }

    pub(super) fn upstream_gone(&self) -> bool {
        self.upstream_gone.load(Ordering::Acquire)
    }

    /// Queues `message` for the client; `false` once the stream has closed.
    pub(super) async fn send(&self, message: Outgoing) -> bool {
        let sent = self.outbox.send(message).await.is_ok();
        if sent {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    pub(super) fn messages_queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }
}

/// When the session last heard from its client or had something for it.
pub(super) struct Activity {
    clock: Arc<dyn Clock>,
    last: Mutex<Instant>,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity").finish_non_exhaustive()
    }
}

impl Activity {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Self {
        let last = Mutex::new(clock.now());
        Self { clock, last }
    }

    pub(super) fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = self.clock.now();
    }

    pub(super) fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn now(&self) -> Instant {
        self.clock.now()
    }
}

/// Every open legacy session of the listener, by the id its `endpoint` event announced.
#[derive(Debug)]
pub(super) struct LegacySessions {
    open: Mutex<HashMap<String, Arc<Session>>>,
    capacity: usize,
}

impl LegacySessions {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            open: Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds `session`, or gives it back when the table is full.
    pub(super) fn insert(&self, session: Arc<Session>) -> Result<(), Arc<Session>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= self.capacity {
            return Err(session);
        }
        open.insert(session.id.clone(), session);
        Ok(())
    }

    pub(super) fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn remove(&self, id: &str) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// Held by a session's stream: when the stream goes (it ended, or the client went away), the
/// session leaves the table at once, so its next POST is refused, and its client slot and
/// gauge are given back.
#[derive(Debug)]
pub(super) struct SessionGuard {
    pub(super) sessions: Arc<LegacySessions>,
    pub(super) id: String,
    pub(super) _slot: ClientSlot,
    pub(super) _gauge: StreamGuard,
}

impl SessionGuard {
    /// The stream has ended: the session leaves the table now, not when the body is dropped.
    pub(super) fn end(&self) {
        self.sessions.remove(&self.id);
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.sessions.remove(&self.id);
    }
}
