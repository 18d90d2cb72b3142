//! Turns configuration into a running gateway: loads and validates the config file, composes the
//! proxy stack, starts the MCP and admin listeners, sets up telemetry, and drains on shutdown.
//! Used by the `countersign` binary and by tests that run the gateway in-process.
//!
//! The only crate besides the binary that uses `anyhow`, always with context.

#![forbid(unsafe_code)]

pub mod admin;
pub mod config;
pub mod telemetry;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use countersign_proxy::{ProxyMetrics, gateway_service};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tracing::info;

pub use config::{Config, Overrides, RawConfig};

use admin::Readiness;

/// A gateway whose listeners are bound and serving.
#[derive(Debug)]
pub struct RunningGateway {
    pub addr: SocketAddr,
    pub admin_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningGateway {
    /// Binds the listeners of `config` and serves in background tasks.
    pub async fn start(config: Config) -> anyhow::Result<Self> {
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

        let mut registry = Registry::with_prefix("");
        let metrics = ProxyMetrics::register(&mut registry);
        let service = gateway_service(&config.proxy, metrics);
        let readiness = Readiness::default();

        let admin_task = admin_listener
            .map(|l| tokio::spawn(admin::serve_admin(l, Arc::new(registry), readiness.clone())));
        for route in &config.proxy.routes {
            info!(path = %route.path, upstream = %route.upstream.name, url = %route.upstream.url, "route");
        }
        info!(%addr, admin = ?admin_addr, "countersign is listening");

        let (stop, stopped) = oneshot::channel::<()>();
        let limits = config.proxy.limits.clone();
        let drain = config.drain_timeout;
        readiness.set(true);
        let done = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
                readiness.set(false);
            };
            let result =
                countersign_proxy::serve(listener, service, &limits, shutdown, drain).await;
            if let Some(task) = admin_task {
                task.abort();
            }
            result
        });
        Ok(Self {
            addr,
            admin_addr,
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
