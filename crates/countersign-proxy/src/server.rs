//! Accept loop: HTTP/1.1 connections (`downstream/`) with the limits a public listener needs, a cap on
//! open connections, and a graceful drain on shutdown. Each accepted connection is served on one
//! of the connection workers (`workers.rs`).
//!
//! At `connections.max_open` the loop stops accepting, as nginx (`worker_connections`) and
//! HAProxy (`maxconn`) do, rather than accepting to close again as Envoy does. A connection over
//! the cap then costs the gateway nothing: it waits in the kernel's listen backlog and is served,
//! in arrival order, as soon as another one closes. Accepting it only to refuse would spend an
//! accept, a write and a close on every excess connection during exactly the overload being
//! shed, and closing on a request not yet read often reaches the client as a reset rather than
//! as the refusal. Idle keep-alive connections do not hold the cap for long: a connection that
//! sends no request head within `limits.header_read_timeout` is closed.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::{Service, ServiceExt};
use tracing::{info, warn};

use crate::body::ResponseBody;
use crate::client_limit::PeerAddr;
use crate::config::{ConnectionLimits, Limits};
use crate::context::RequestContextExt;
use crate::downstream::{ConnectionSettings, HeadLimits, RequestBody, serve_connection};
use crate::metrics::{ConnectionGuard, ProxyMetrics};
use crate::workers::Workers;

/// What the accept loop enforces besides the service's own checks.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    pub limits: Limits,
    pub connections: ConnectionLimits,
    pub metrics: ProxyMetrics,
}

/// Serves `service` on `listener`, each connection on one of `workers`, until `shutdown`
/// resolves, then stops accepting and lets in-flight requests and streams finish for up to
/// `drain`. The workers outlive the call: tasks that requests started on them (an stdio
/// upstream's process, say) are the caller's to stop before dropping them.
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    settings: &ListenerLimits,
    workers: &Workers,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()>
where
    S: Service<Request<RequestBody>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let limits = &settings.limits;
    let connection_settings = ConnectionSettings {
        head: HeadLimits::from(limits),
        header_read_timeout: limits.header_read_timeout,
    };
    // Every connection holds a receiver: `true` asks idle ones to close, and the sender's
    // `closed()` is the end of the drain.
    let (stop, stopping) = watch::channel(false);
    let mut slots = ConnectionSlots::new(&settings.connections, settings.metrics.clone());
    tokio::pin!(shutdown);

    loop {
        // A slot first, then accept: over the cap nothing is accepted, nothing spins.
        let permit = tokio::select! {
            permit = slots.next() => permit,
            () = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Usually fd exhaustion; back off instead of spinning.
                        warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let slot = ConnectionSlot {
                    _permit: permit,
                    _open: settings.metrics.connection_opened(),
                };
                let _ = stream.set_nodelay(true);
                // Every request learns which peer it came from: the per-client limit keys on it.
                let service = service.clone().map_request(move |mut request: Request<RequestBody>| {
                    request.extensions_mut().context_mut().peer = Some(PeerAddr(peer));
                    request
                });
                let stopping = stopping.clone();
                workers.spawn_connection(stream, move |stream| async move {
                    serve_connection(stream, service, connection_settings, stopping).await;
                    drop(slot);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(stopping);
    let _ = stop.send(true);
    info!(in_flight = stop.receiver_count(), "draining connections");
    if tokio::time::timeout(drain, stop.closed()).await.is_err() {
        warn!(
            ?drain,
            "drain deadline passed; closing remaining connections"
        );
    }
    Ok(())
}

/// The open-connection cap of one listener.
#[derive(Debug)]
struct ConnectionSlots {
    free: Arc<Semaphore>,
    max_open: usize,
    metrics: ProxyMetrics,
    /// Whether the cap was reached and has not had room since: one warning per episode, not
    /// one per connection while it lasts.
    full: bool,
}

/// One open connection: its share of the cap and of the open-connections gauge.
#[derive(Debug)]
struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    _open: ConnectionGuard,
}

impl ConnectionSlots {
    fn new(connections: &ConnectionLimits, metrics: ProxyMetrics) -> Self {
        let max_open = connections.max_open.get().min(Semaphore::MAX_PERMITS);
        Self {
            free: Arc::new(Semaphore::new(max_open)),
            max_open,
            metrics,
            full: false,
        }
    }

    /// Room for the next connection, waiting for one to close when all are taken.
    async fn next(&mut self) -> OwnedSemaphorePermit {
        match self.free.clone().try_acquire_owned() {
            Ok(permit) => {
                self.full = false;
                permit
            }
            Err(_) => {
                if !self.full {
                    self.full = true;
                    self.metrics.record_limit_hit("connections");
                    warn!(
                        max_open = self.max_open,
                        "connection limit reached; new connections wait in the listen backlog until one closes"
                    );
                }
                self.free
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the connection semaphore is never closed")
            }
        }
    }
}
