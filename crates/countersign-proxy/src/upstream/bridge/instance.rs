//! One running server instance behind the bridge: its [`Channel`], its [`Routing`], and the
//! reader task that routes every message it sends until it ends, then answers whatever it
//! left pending with an error naming how it ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use countersign_jsonrpc::message::{Params, Request, RequestId};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};

use super::pool::Slot;
use super::rewrite;
use super::routing::{Delivery, InternalOutcome, Refusal, Routing};
use crate::metrics::ProxyMetrics;
use crate::upstream::Channel;

/// How long an instance that stopped talking gets to end by itself before it is stopped.
const ENDING_GRACE: Duration = Duration::from_secs(2);

/// What an instance serves, which decides how its reader treats a slow client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// One session's own instance: a slow client only slows its own server, so the reader
    /// waits for it (nothing is dropped, nothing is buffered beyond the stream's capacity).
    PerSession,
    /// Shared by sessions (`processes.sharing: shared`) or by 2026-07-28 requests: a client
    /// whose stream is full loses that stream rather than stall everyone else.
    Shared,
}

/// Tells the instance's owner it has ended (after its requests were answered with errors).
pub(super) type OnExit = Box<dyn FnOnce(&Arc<Instance>) + Send>;

/// One running instance.
pub(super) struct Instance {
    /// Unique within the bridge, for logs and to tell instances apart.
    pub(super) serial: u64,
    pub(super) describe: String,
    kind: Kind,
    upstream: String,
    to_server: mpsc::Sender<Bytes>,
    routing: Mutex<Routing>,
    /// The connector's handle: dropping it ends the instance.
    handle: Mutex<Option<Box<dyn Send + Sync>>>,
    stopping: AtomicBool,
    stop_signal: watch::Sender<bool>,
    /// `Some(how it ended)` once it has.
    exited: watch::Receiver<Option<String>>,
    /// A shared instance's `InitializeResult`, from the first session's `initialize`.
    pub(super) initialized: tokio::sync::OnceCell<countersign_jsonrpc::RawJson>,
    metrics: ProxyMetrics,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("serial", &self.serial)
            .field("describe", &self.describe)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Everything an instance is started with besides its channel.
pub(super) struct Start {
    pub(super) serial: u64,
    pub(super) kind: Kind,
    pub(super) upstream: String,
    pub(super) label: &'static str,
    pub(super) max_queued_bytes: usize,
    pub(super) metrics: ProxyMetrics,
    pub(super) slot: Slot,
    pub(super) on_exit: OnExit,
}

impl Instance {
    /// Takes over `channel` and starts routing what the instance sends.
    pub(super) fn start(channel: Channel, start: Start) -> Arc<Self> {
        let Channel {
            to_server,
            from_server,
            instance: handle,
            describe,
            ended,
        } = channel;
        let (exited_tx, exited) = watch::channel(None);
        let (stop_signal, _) = watch::channel(false);
        let instance = Arc::new(Self {
            serial: start.serial,
            describe,
            kind: start.kind,
            upstream: start.upstream,
            to_server,
            routing: Mutex::new(Routing::new(
                start.max_queued_bytes,
                start.metrics.clone(),
                start.label,
            )),
            handle: Mutex::new(Some(handle)),
            stopping: AtomicBool::new(false),
            stop_signal,
            exited,
            initialized: tokio::sync::OnceCell::new(),
            metrics: start.metrics,
        });
        tokio::spawn(read(
            instance.clone(),
            from_server,
            ended,
            exited_tx,
            start.slot,
            start.on_exit,
        ));
        instance
    }

    pub(super) fn routing(&self) -> MutexGuard<'_, Routing> {
        self.routing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether it still takes requests.
    pub(super) fn is_alive(&self) -> bool {
        !self.stopping.load(Ordering::Acquire) && !self.routing().is_closed()
    }

    /// Ends the instance (its connector kills the process group or closes the connection).
    /// Idempotent; [`Instance::wait`] resolves once it is gone.
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.stop_signal.send_replace(true);
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(handle);
    }

    /// Resolves once the instance has ended.
    pub(super) async fn wait(&self) {
        let mut exited = self.exited.clone();
        let _ = exited.wait_for(Option::is_some).await;
    }

    /// Writes `messages` to the instance, in order.
    pub(super) async fn write(&self, messages: Vec<Bytes>) -> Result<(), Refusal> {
        for message in messages {
            self.to_server
                .send(message)
                .await
                .map_err(|_| Refusal::Closed)?;
        }
        Ok(())
    }

    /// Sends a request of the bridge's own (`initialize`) and waits for its answer.
    pub(super) async fn request(
        &self,
        method: &str,
        params: Option<countersign_jsonrpc::RawJson>,
    ) -> Result<InternalOutcome, Refusal> {
        let request = Request {
            id: RequestId::Number(0),
            method: method.to_owned(),
            params: params.map(Params::from),
        };
        let (message, answer) = self.routing().internal_request(&request)?;
        self.write(vec![message]).await?;
        answer.await.map_err(|_| Refusal::Closed)
    }

    /// Writes a cancellation or answer without waiting: used from `Drop`, where nothing may
    /// block, for messages whose loss only costs the instance some wasted work.
    pub(super) fn write_now(&self, messages: Vec<Bytes>) {
        for message in messages {
            let _ = self.to_server.try_send(message);
        }
    }

    async fn deliver(&self, delivery: Delivery) {
        match delivery {
            Delivery::Client {
                sink,
                message,
                on_fail,
            } => {
                if !self.send_to_client(&sink, message).await
                    && let Some(answer) = on_fail
                {
                    self.write_now(vec![answer]);
                }
            }
            Delivery::Internal(tx, outcome) => {
                let _ = tx.send(outcome);
            }
            Delivery::Server(message) => self.write_now(vec![message]),
        }
    }

    /// Whether `message` reached the stream.
    async fn send_to_client(&self, sink: &super::routing::Sink, message: Bytes) -> bool {
        match self.kind {
            Kind::PerSession => {
                let mut stop = self.stop_signal.subscribe();
                tokio::select! {
                    sent = sink.tx.send(message) => sent.is_ok(),
                    _ = stop.wait_for(|stopping| *stopping) => false,
                }
            }
            Kind::Shared => match sink.tx.try_send(message) {
                Ok(()) => true,
                Err(TrySendError::Closed(_)) => false,
                Err(TrySendError::Full(_)) => {
                    self.metrics.record_limit_hit("upstream_stream_stalled");
                    tracing::warn!(
                        upstream = %self.upstream,
                        instance = %self.describe,
                        "a client does not read its stream from a shared instance; ended that stream"
                    );
                    let cancellations = self.routing().stream_closed(sink.key);
                    self.write_now(cancellations);
                    false
                }
            },
        }
    }
}

/// The reader: routes every message until the instance ends, then reports.
async fn read(
    instance: Arc<Instance>,
    mut from_server: mpsc::Receiver<Bytes>,
    ended: futures_util::future::BoxFuture<'static, String>,
    exited: watch::Sender<Option<String>>,
    slot: Slot,
    on_exit: OnExit,
) {
    while let Some(line) = from_server.recv().await {
        let message = match rewrite::parse_server_message(&line) {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(
                    upstream = %instance.upstream,
                    instance = %instance.describe,
                    %error,
                    "upstream sent a line that is not a JSON-RPC message; ignored"
                );
                continue;
            }
        };
        let deliveries = instance.routing().route(message, line);
        for delivery in deliveries {
            instance.deliver(delivery).await;
        }
    }
    // Nothing more will come. An instance ending by itself says how; one that closed its
    // side but lingers is stopped.
    let mut ended = ended;
    let how = match tokio::time::timeout(ENDING_GRACE, &mut ended).await {
        Ok(how) => how,
        Err(_) => {
            let handle = instance
                .handle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            drop(handle);
            ended.await
        }
    };
    drop(
        instance
            .handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
    );
    let requested = instance.stopping.load(Ordering::Acquire);
    let (stream_reason, internal_reason) = if requested {
        (
            format!(
                "upstream `{}` was stopped (its session ended, or the gateway is shutting down) before answering this request",
                instance.upstream
            ),
            "it was stopped before answering".to_owned(),
        )
    } else {
        (
            format!(
                "upstream `{}` ended ({how}) before answering this request",
                instance.upstream
            ),
            format!("it ended ({how}) before answering; its stderr is in the gateway's log"),
        )
    };
    let deliveries = instance.routing().close(&stream_reason, &internal_reason);
    for delivery in deliveries {
        // Only streams remain to be told; a slow one must not hold the report up.
        if let Delivery::Client { sink, message, .. } = delivery {
            let _ = sink.tx.try_send(message);
        } else if let Delivery::Internal(tx, outcome) = delivery {
            let _ = tx.send(outcome);
        }
    }
    if requested {
        tracing::debug!(upstream = %instance.upstream, instance = %instance.describe, %how, "upstream instance stopped");
    } else {
        tracing::warn!(upstream = %instance.upstream, instance = %instance.describe, %how, "upstream instance ended on its own");
    }
    slot.exited(!requested, &how);
    on_exit(&instance);
    exited.send_replace(Some(how));
}

/// Stops the instance when dropped, unless disarmed: for the paths that start one and may be
/// abandoned half-way (a timed-out `initialize`).
pub(super) struct StopOnDrop(Option<Arc<Instance>>);

impl StopOnDrop {
    pub(super) fn new(instance: Arc<Instance>) -> Self {
        Self(Some(instance))
    }

    pub(super) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(instance) = self.0.take() {
            instance.stop();
        }
    }
}
