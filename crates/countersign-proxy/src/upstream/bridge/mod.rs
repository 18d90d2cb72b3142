//! The in-process Streamable HTTP server in front of upstreams that speak JSON-RPC messages on
//! some other channel: stdio programs, and legacy HTTP+SSE servers (one SSE connection per
//! session). It implements [`LocalUpstream`] over any [`Connector`], serving POST, GET and
//! DELETE as a well-behaved Streamable HTTP server would — sessions for 2025-03-26 …
//! 2025-11-25 clients, stateless requests for 2026-07-28 ones — so every layer above it works
//! on one shape of upstream.
//!
//! # Sessions and instances
//!
//! - An `initialize` without `Mcp-Session-Id` opens a session with a random id the gateway
//!   assigns (the `Mcp-Session-Id` of the answer). With `processes.sharing: per-session` (the
//!   default) each session gets an instance of its own, so no two users ever share server
//!   state; DELETE, idle reaping and the instance's end close both. Later requests with an
//!   unknown or ended session id get 404 (`-32001 Session not found`), and clients start over
//!   with a new `initialize`, as the transport says they must.
//! - With `processes.sharing: shared` every session is served by one instance. The first
//!   session's `initialize` is forwarded (the server sees that client's capabilities and
//!   `clientInfo`), the gateway sends `notifications/initialized` itself, and every later
//!   session is answered with the same `InitializeResult`: the protocol version the first
//!   client negotiated, and the server acting on the first client's capabilities (it may send
//!   sampling, elicitation or roots requests to a session whose client never declared them).
//!   Later clients' `notifications/initialized` are not forwarded.
//! - Stateless 2026-07-28 requests (no session, no `initialize`) all go to one instance of
//!   their own, whatever the sharing: servers fix a connection's protocol era on its first
//!   message, and a 2026-07-28 retry carrying `requestState` must reach the instance that
//!   sealed it. That revision keeps no state between requests but what the requests carry.
//! - Every instance counts against `processes.max`; beyond it a new session or a first
//!   stateless request is refused (HTTP 503). Instances are started on demand; see
//!   [`pool`] for the back-off after failed starts.
//!
//! # Requests and streams
//!
//! A POST with requests is answered `text/event-stream`; the stream carries the responses and
//! the server messages that belong to it and ends after the last response. A POST of
//! notifications and responses only is answered 202. Client responses to server requests are
//! passed on only from the session the request was delivered to. GET opens the session's one
//! standalone stream (a second is refused with 409). Every request's id is rewritten to one
//! the instance has never seen and mapped back ([`rewrite`]), so ids of sessions sharing an
//! instance never collide.
//!
//! # Which stream a server message goes to
//!
//! stdio has no `relatedRequestId`: nothing on the wire says which request a server request
//! or a log message belongs to. The bridge routes by what the message does say and, failing
//! that, by what is pending; [`routing`] states the rule. A server asking something in the
//! middle of a tool call (an elicitation, a sampling request) reaches that call's stream as
//! long as it is the session's oldest open request; a server request made with nothing
//! pending (roots right after `initialized`) reaches the GET stream, or waits in the session's
//! queue for one. On a shared instance, concurrent calls of different sessions make the
//! "oldest pending" guess cross sessions: that is the price of sharing.
//!
//! # Bounds
//!
//! Every stream holds at most [`routing::STREAM_CAPACITY`] messages; a per-session instance
//! waits for its slow client, a shared one drops the stream of a client that does not read.
//! Each message is at most the upstream's `max_response_bytes` (the connector ends an
//! instance that sends more); a session's queue holds at most [`routing::MAX_QUEUED`] messages
//! and `max_response_bytes` bytes; at most [`routing::MAX_PENDING`] requests are unanswered
//! per instance.
//!
//! # When an instance ends
//!
//! Every request it left unanswered gets a JSON-RPC error naming the upstream and how it
//! ended (`exit status: 1`); its sessions end, so their later requests get 404.

mod activity;
mod instance;
mod pool;
mod rewrite;
mod routing;
mod session;
mod stream;
mod transport;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use countersign_jsonrpc::RawJson;
use futures_util::future::BoxFuture;
use http::HeaderMap;
use http_body_util::Full;

use self::activity::{Activity, Busy};
use self::instance::{Instance, Kind, OnExit, Start, StopOnDrop};
use self::pool::Pool;
use self::session::Session;
use super::{Connector, LocalUpstream, UpstreamState};
use crate::body::ResponseBody;
use crate::clock::Clock;
use crate::config::ProcessSharing;
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;

/// The revision the start-up probe's `initialize` asks for (any answer proves the server runs).
const PROBE_PROTOCOL_VERSION: &str = "2025-11-25";

/// How a bridge manages its instances.
#[derive(Debug, Clone)]
pub struct BridgeSettings {
    /// The upstream's name, for errors and logs.
    pub upstream: String,
    /// The same name as a `'static` metric label.
    pub label: &'static str,
    pub sharing: ProcessSharing,
    /// Most instances alive at once (`processes.max`).
    pub max_instances: usize,
    /// A session (or a shared instance) with nothing in flight and no open stream for this
    /// long is ended.
    pub idle_timeout: Duration,
    /// The upstream's `max_response_bytes`: bounds each session's queue of server messages.
    pub max_message_bytes: usize,
    /// Time allowed to open an instance (`connect_timeout`): spawn a process, connect.
    pub start_timeout: Duration,
    /// Whether stateless 2026-07-28 requests go to an instance of their own. Off for legacy
    /// HTTP+SSE upstreams: those speak only sessions, and a shared connection would carry every
    /// later client's calls with the first client's credentials (`auth: forward`).
    pub serves_stateless: bool,
    pub clock: Arc<dyn Clock>,
    pub metrics: ProxyMetrics,
}

/// A [`LocalUpstream`] serving Streamable HTTP from instances a [`Connector`] opens.
#[derive(Debug, Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    settings: BridgeSettings,
    connector: Arc<dyn Connector>,
    pool: Arc<Pool>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The instance of every session, with `sharing: shared`.
    shared: tokio::sync::Mutex<Option<SharedInstance>>,
    /// The instance of 2026-07-28 requests.
    stateless: tokio::sync::Mutex<Option<SharedInstance>>,
    /// Every live instance, to stop them all on shutdown.
    instances: Mutex<HashMap<u64, Arc<Instance>>>,
    next_serial: AtomicU64,
    me: Weak<Inner>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("upstream", &self.settings.upstream)
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

/// An instance serving more than one client, reaped when idle.
struct SharedInstance {
    instance: Arc<Instance>,
    activity: Arc<Activity>,
}

/// Which shared instance.
#[derive(Debug, Clone, Copy)]
enum Shared {
    Sessions,
    Stateless,
}

impl Bridge {
    pub fn new(connector: Arc<dyn Connector>, settings: BridgeSettings) -> Self {
        let pool = Pool::new(
            settings.upstream.clone(),
            settings.label,
            settings.max_instances,
            settings.clock.clone(),
            settings.metrics.clone(),
        );
        let inner = Arc::new_cyclic(|me| Inner {
            settings,
            connector,
            pool,
            sessions: Mutex::default(),
            shared: tokio::sync::Mutex::default(),
            stateless: tokio::sync::Mutex::default(),
            instances: Mutex::default(),
            next_serial: AtomicU64::new(1),
            me: me.clone(),
        });
        Self { inner }
    }

    /// Reports a problem found before any start (the program does not exist) as the
    /// upstream's state until an instance starts. Starts are still attempted.
    pub fn record_precheck_failure(&self, reason: String) {
        self.inner.pool.record_precheck_failure(reason);
    }
}

impl LocalUpstream for Bridge {
    fn serve(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> BoxFuture<'static, Result<http::Response<ResponseBody>, ProxyError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.serve(request).await })
    }

    fn state(&self) -> UpstreamState {
        self.inner.pool.state()
    }

    fn shutdown(&self) -> BoxFuture<'static, ()> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.shutdown().await })
    }

    fn probe(&self) -> BoxFuture<'static, Result<(), ProxyError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.probe().await })
    }
}

impl Inner {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn instances(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Instance>>> {
        self.instances.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Ordering::Relaxed)
    }

    /// Starts a new instance for a request with `headers`.
    async fn start_instance(
        &self,
        kind: Kind,
        headers: &HeaderMap,
    ) -> Result<Arc<Instance>, ProxyError> {
        let reservation = self.pool.reserve()?;
        let opened =
            tokio::time::timeout(self.settings.start_timeout, self.connector.open(headers))
                .await
                .unwrap_or_else(|_| {
                    Err(ProxyError::UpstreamUnavailable {
                        upstream: self.settings.upstream.clone(),
                        reason: format!(
                            "it did not start within {:?}",
                            self.settings.start_timeout
                        ),
                        retry_after: None,
                    })
                });
        let channel = match opened {
            Ok(channel) => channel,
            Err(error) => {
                let reason = match &error {
                    ProxyError::UpstreamUnavailable { reason, .. } => reason.clone(),
                    other => other.to_string(),
                };
                reservation.failed(reason);
                return Err(error);
            }
        };
        let me = self.me.clone();
        let on_exit: OnExit = Box::new(move |instance| {
            if let Some(inner) = me.upgrade() {
                inner.instance_ended(instance);
            }
        });
        let instance = Instance::start(
            channel,
            Start {
                serial: self.next_serial(),
                kind,
                upstream: self.settings.upstream.clone(),
                max_queued_bytes: self.settings.max_message_bytes,
                metrics: self.settings.metrics.clone(),
                label: self.settings.label,
                slot: reservation.started(),
                on_exit,
            },
        );
        tracing::info!(upstream = %self.settings.upstream, instance = %instance.describe, "started an upstream instance");
        self.instances().insert(instance.serial, instance.clone());
        if self.pool.is_closed() {
            // Shutdown began while it started: it must not outlive the gateway.
            instance.stop();
        }
        Ok(instance)
    }

    /// The shared instance (started if there is none), busy until the guard is dropped.
    async fn shared_instance(
        &self,
        which: Shared,
        headers: &HeaderMap,
    ) -> Result<(Arc<Instance>, Busy), ProxyError> {
        let slot = match which {
            Shared::Sessions => &self.shared,
            Shared::Stateless => &self.stateless,
        };
        // Held across the start, so concurrent first requests start one instance, not many.
        let mut current = slot.lock().await;
        if let Some(shared) = current.as_ref()
            && shared.instance.is_alive()
        {
            return Ok((shared.instance.clone(), shared.activity.busy()));
        }
        let instance = self.start_instance(Kind::Shared, headers).await?;
        let weak = Arc::downgrade(&instance);
        let activity = Activity::new(
            self.settings.idle_timeout,
            Box::new(move || {
                if let Some(instance) = weak.upgrade() {
                    tracing::info!(instance = %instance.describe, "stopping an idle shared upstream instance");
                    instance.stop();
                }
            }),
        );
        let busy = activity.busy();
        *current = Some(SharedInstance {
            instance: instance.clone(),
            activity,
        });
        Ok((instance, busy))
    }

    /// An instance has ended: its sessions end with it.
    fn instance_ended(&self, instance: &Arc<Instance>) {
        self.instances().remove(&instance.serial);
        let ended: Vec<Arc<Session>> = {
            let mut sessions = self.sessions();
            let ids: Vec<String> = sessions
                .iter()
                .filter(|(_, s)| s.instance.serial == instance.serial)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| sessions.remove(id)).collect()
        };
        // Dropped outside the lock: a session's drop detaches it from its instance.
        drop(ended);
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions().get(id).cloned()
    }

    /// Ends the session `id` (DELETE, idle): its instance stops if it was its own.
    fn end_session(&self, id: &str) -> bool {
        let removed = self.sessions().remove(id);
        removed.is_some()
    }

    /// Starts a throwaway instance and has it answer an `initialize`.
    async fn probe(&self) -> Result<(), ProxyError> {
        let instance = self
            .start_instance(Kind::PerSession, &HeaderMap::new())
            .await?;
        let _stop = StopOnDrop::new(instance.clone());
        let params = serde_json::json!({
            "protocolVersion": PROBE_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "countersign-probe", "version": env!("CARGO_PKG_VERSION")},
        });
        let answer = instance
            .request("initialize", Some(RawJson::from_value(&params)))
            .await;
        match answer {
            // An error answer is an answer: the server runs.
            Ok(Ok(_)) => Ok(()),
            Ok(Err(how)) => Err(self.unavailable(how)),
            Err(_) => Err(self.unavailable("it ended before answering".into())),
        }
    }

    fn unavailable(&self, reason: String) -> ProxyError {
        ProxyError::UpstreamUnavailable {
            upstream: self.settings.upstream.clone(),
            reason,
            retry_after: None,
        }
    }

    async fn shutdown(&self) {
        self.pool.close();
        let sessions: Vec<Arc<Session>> = self.sessions().drain().map(|(_, s)| s).collect();
        drop(sessions);
        let instances: Vec<Arc<Instance>> = self.instances().values().cloned().collect();
        for instance in &instances {
            instance.stop();
        }
        for instance in &instances {
            instance.wait().await;
        }
    }
}
