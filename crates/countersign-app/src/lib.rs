//! Turns configuration into a running gateway: loads and validates the config file, composes the
//! proxy stack, starts the MCP and admin listeners, sets up telemetry, and drains on shutdown.
//! Used by the `countersign` binary and by tests that run the gateway in-process.
//!
//! The only crate besides the binary that uses `anyhow`, always with context.

#![forbid(unsafe_code)]

pub mod admin;
mod approvals;
pub mod config;
pub mod live;
mod probe;
mod reload;
pub mod telemetry;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use countersign_proxy::approval::ApprovalSettings;
use countersign_proxy::audit::AuditSink;
use countersign_proxy::clock::{Clock, SystemClock};
use countersign_proxy::limits::RateLimits;
use countersign_proxy::state::{CatalogState, PolicyHandle, SessionBook};
use countersign_proxy::workers::Workers;
use countersign_proxy::{Gateway, ProxyMetrics, gateway_service};
use countersign_store::{
    AnswerHandover, LocalPins, MemoryAnswerHandover, MemoryReplayStore, PinShare, RateShare,
    RedisAnswerHandover, RedisPinShare, RedisRateShare, RedisReplayStore, ReplayStore,
};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tracing::{info, warn};

pub use config::{AuditTarget, Config, KeyringSource, Overrides, RawConfig};

use admin::Readiness;

/// How long a stopping gateway waits for its audit writer to catch up.
const AUDIT_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A gateway whose listeners are bound and serving.
#[derive(Debug)]
pub struct RunningGateway {
    pub addr: SocketAddr,
    pub admin_addr: Option<SocketAddr>,
    /// The approval page's listener, when `approvals:` is configured.
    pub approvals_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningGateway {
    /// Binds the listeners of `config` and serves in background tasks.
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        let mut registry = Registry::default();
        let metrics = ProxyMetrics::register(&mut registry);
        let mut gateway = build_gateway(&config, metrics.clone()).await?;
        let page = approvals::prepare(&config, &mut gateway, &mut registry).await?;
        let approvals_addr = page.as_ref().and_then(|p| p.listener.local_addr().ok());
        // Bound only now that the stores are connected: a client that can connect is served,
        // never queued in the backlog of a gateway that then fails to start, and whoever
        // waits for the port to open waits for a gateway that can answer.
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding the MCP listener on {}", config.listen))?;
        let admin_listener = match config.admin {
            Some(addr) => Some(TcpListener::bind(addr).await.with_context(|| {
                format!(
                    "binding the admin listener on {addr} (use --admin to move it, or --admin off)"
                )
            })?),
            None => None,
        };
        let addr = listener
            .local_addr()
            .context("reading the MCP listener address")?;
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());

        let reloader = config
            .approval
            .policy_path
            .clone()
            .map(|path| tokio::spawn(reload::watch_policy(path, gateway.policy.clone())));
        let readiness = Readiness::new(
            config
                .approval
                .redis
                .is_some()
                .then(|| gateway.approval.store.clone()),
            gateway.routes.clone(),
        );
        let routes = gateway.routes.clone();
        let audit = gateway.approval.audit.clone();
        let service = gateway_service(&config.proxy, gateway);

        let admin_task = admin_listener
            .map(|l| tokio::spawn(admin::serve_admin(l, Arc::new(registry), readiness.clone())));
        for route in &routes {
            tokio::spawn(probe::announce(route.clone()));
        }
        info!(%addr, admin = ?admin_addr, "countersign is listening");

        let (stop, stopped) = oneshot::channel::<()>();
        // The page stops accepting with the MCP listener and drains as long.
        let (stop_page, page_stopped) = tokio::sync::watch::channel(false);
        let page_task = page.map(|page| {
            let mut page_stopped = page_stopped.clone();
            let shutdown = async move {
                let _ = page_stopped.wait_for(|stopped| *stopped).await;
            };
            tokio::spawn(countersign_approvals::serve(
                page.listener,
                page.page,
                shutdown,
                config.drain_timeout,
            ))
        });
        let listener_limits = countersign_proxy::ListenerLimits {
            limits: config.proxy.limits.clone(),
            connections: config.proxy.connections.clone(),
            metrics: metrics.clone(),
        };
        let drain = config.drain_timeout;
        let workers = Workers::start(listener_limits.connections.workers)
            .context("starting the connection workers")?;
        info!(workers = workers.count(), "connection workers started");
        readiness.set(true);
        let done = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
                readiness.set(false);
                stop_page.send_replace(true);
            };
            let result = countersign_proxy::serve(
                listener,
                service,
                &listener_limits,
                &workers,
                shutdown,
                drain,
            )
            .await;
            // After the drain, so no request still needs them: stop the processes of stdio
            // upstreams (their whole process groups) and wait until they are gone.
            for route in &routes {
                route.client.shutdown().await;
            }
            if let Some(task) = page_task {
                let _ = task.await;
            }
            if let Some(task) = admin_task {
                task.abort();
            }
            if let Some(task) = reloader {
                task.abort();
            }
            // Last: the workers' threads end with it, and every task still on them.
            drop(workers);
            // The audit writer batches lines for a few milliseconds; the last ones must be written
            // before the process exits.
            let flushed = tokio::task::spawn_blocking(move || audit.flush(AUDIT_FLUSH_TIMEOUT))
                .await
                .unwrap_or(false);
            if !flushed {
                warn!(
                    "the audit trail could not be written out before stopping; its last records may be lost"
                );
            }
            result
        });
        Ok(Self {
            addr,
            admin_addr,
            approvals_addr,
            stop: Some(stop),
            done,
        })
    }

    /// Stops accepting, drains, and waits until the gateway has stopped.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.done)
            .await
            .context("gateway task panicked")?
            .context("gateway failed")
    }

    /// Runs until `signal` resolves, then drains.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> anyhow::Result<()> {
        signal.await;
        info!("shutting down: draining in-flight requests");
        self.shutdown().await
    }
}

/// What the request path of `config` shares: policy, empty catalog, keyring, replay store,
/// audit sink.
async fn build_gateway(config: &Config, metrics: ProxyMetrics) -> anyhow::Result<Gateway> {
    let approval = &config.approval;
    let keyring = match &approval.keyring {
        KeyringSource::Configured(keyring) => keyring.clone(),
        KeyringSource::Generated(keyring) if approval.redis.is_some() => {
            warn!(
                "Redis is configured for several replicas, but no shared signing keys are \
                 (COUNTERSIGN_SIGNING_KEYS or signing_keys_file): each replica signs with its own \
                 random key, so a confirmation minted on one replica is refused by the others"
            );
            keyring.clone()
        }
        KeyringSource::Generated(keyring) => {
            warn!(
                "no signing keys configured (COUNTERSIGN_SIGNING_KEYS or signing_keys_file): using a random \
                 key, so confirmation tokens will not survive a restart or work across replicas"
            );
            keyring.clone()
        }
    };
    let audit = match &approval.audit {
        AuditTarget::Off => AuditSink::disabled(),
        AuditTarget::Stdout => {
            AuditSink::new(Box::new(std::io::stdout()), approval.audit_arguments)
        }
        AuditTarget::File(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening the audit log {}", path.display()))?;
            AuditSink::new(Box::new(file), approval.audit_arguments)
        }
    };
    // Each held question waits on two hand-over keys: its answer and its call's cancellation.
    let handover_waiters = approval.max_pending_questions.saturating_mul(2);
    let (store, handover, pins): (
        Arc<dyn ReplayStore>,
        Arc<dyn AnswerHandover>,
        Arc<dyn PinShare>,
    ) = match &approval.redis {
        None => (
            Arc::new(MemoryReplayStore::new(approval.replay_max_entries.get())),
            Arc::new(MemoryAnswerHandover::new(handover_waiters)),
            Arc::new(LocalPins),
        ),
        Some(redis) => {
            let connect_error = || format!("connecting to Redis at {}", redact(&redis.url));
            let store =
                RedisReplayStore::connect(&redis.url, &redis.namespace, redis.command_timeout)
                    .await
                    .with_context(connect_error)?;
            let handover =
                RedisAnswerHandover::connect(&redis.url, &redis.namespace, redis.command_timeout)
                    .await
                    .with_context(connect_error)?
                    .with_max_waiters(handover_waiters);
            let pins = RedisPinShare::connect(&redis.url, &redis.namespace, redis.command_timeout)
                .await
                .with_context(connect_error)?;
            info!(redis = %redact(&redis.url), namespace = %redis.namespace, "sharing confirmations, answers and pins through Redis");
            (Arc::new(store), Arc::new(handover), Arc::new(pins))
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let rate_limits = rate_limits(config, clock.clone(), metrics.clone()).await?;
    let routes = countersign_proxy::routes(&config.proxy, &metrics, &clock);
    Ok(Gateway {
        identity: approval.identity.clone(),
        policy: Arc::new(PolicyHandle::new(approval.policy.clone())),
        catalog: Arc::new(CatalogState::new(
            config.proxy.limits.max_tools_per_upstream.get(),
            metrics.clone(),
        )),
        pins,
        approval: ApprovalSettings {
            issuer: approval.deployment_id.clone(),
            keyring,
            store,
            handover,
            elicitation_timeout: approval.elicitation_timeout,
            audit,
            leeway_secs: countersign_token::token::DEFAULT_LEEWAY_SECS,
            metrics: metrics.clone(),
            clock,
            sessions: Arc::new(SessionBook::default()),
            max_event_bytes: config.proxy.limits.max_sse_event_bytes.get(),
            question_caps: approval.question_caps,
            rate_limits,
            out_of_band: None,
        },
        metrics,
        routes,
    })
}

/// The rate limits of `config`, counted in Redis when they are shared.
async fn rate_limits(
    config: &Config,
    clock: Arc<dyn Clock>,
    metrics: ProxyMetrics,
) -> anyhow::Result<Arc<RateLimits>> {
    let shared: Option<Arc<dyn RateShare>> = match &config.approval.redis {
        Some(redis) if config.rate_limits.shared => Some(Arc::new(
            RedisRateShare::connect(&redis.url, &redis.namespace, redis.command_timeout)
                .await
                .with_context(|| format!("connecting to Redis at {}", redact(&redis.url)))?,
        )),
        _ => None,
    };
    Ok(Arc::new(RateLimits::new(
        &config.rate_limits.limits,
        shared,
        clock,
        metrics,
    )))
}

/// The URL without credentials, for logs and errors.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
