//! The admin listener: liveness, readiness and Prometheus metrics, apart from the MCP listener so
//! it can stay on loopback while the gateway faces clients.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use countersign_proxy::route::Route;
use countersign_proxy::upstream::UpstreamState;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tracing::debug;

/// What `/readyz` reports: ready once the MCP listener is serving and the replay store answers
/// (Redis reachable, when used); not ready while draining.
///
/// It also lists each upstream's state, but an upstream's trouble does not make the gateway
/// unready: the gateway learns that an upstream recovered from the traffic it sends it, and a
/// replica taken out of rotation gets none.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    serving: Arc<AtomicBool>,
    store: Option<Arc<dyn countersign_store::ReplayStore>>,
    routes: Vec<Route>,
}

impl Readiness {
    pub fn new(store: Option<Arc<dyn countersign_store::ReplayStore>>, routes: Vec<Route>) -> Self {
        Self {
            serving: Arc::default(),
            store,
            routes,
        }
    }

    /// One line per upstream: `upstream NAME (KIND): STATE`.
    pub fn upstream_lines(&self) -> String {
        let mut lines = String::new();
        for route in &self.routes {
            let state = match route.client.state() {
                UpstreamState::Ready => "ready".to_owned(),
                UpstreamState::Starting => "not contacted yet".to_owned(),
                UpstreamState::Failed(why) => format!("failing: {why}"),
            };
            let kind = route.upstream.transport.kind();
            lines.push_str(&format!(
                "upstream {} ({kind}): {state}\n",
                route.upstream.name
            ));
        }
        lines
    }

    pub fn set(&self, ready: bool) {
        self.serving.store(ready, Ordering::Release);
    }

    /// `Ok` when ready, else why not.
    pub async fn check(&self) -> Result<(), String> {
        if !self.serving.load(Ordering::Acquire) {
            return Err("not serving".into());
        }
        match &self.store {
            None => Ok(()),
            Some(store) => store
                .check_ready()
                .await
                .map_err(|e| format!("replay store: {e}")),
        }
    }
}

/// Serves the admin endpoints until the task is dropped.
pub async fn serve_admin(listener: TcpListener, registry: Arc<Registry>, readiness: Readiness) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_secs(5));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let registry = registry.clone();
        let readiness = readiness.clone();
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            service_fn(move |request| {
                let (registry, readiness) = (registry.clone(), readiness.clone());
                async move { Ok::<_, Infallible>(answer(&request, &registry, &readiness).await) }
            }),
        );
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%error, "admin connection ended with an error");
            }
        });
    }
}

async fn answer(
    request: &Request<Incoming>,
    registry: &Registry,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
    }
    match request.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            let (status, first) = match readiness.check().await {
                Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
                Err(why) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {why}\n"),
                ),
            };
            let body = first + &readiness.upstream_lines();
            let mut response = Response::new(Full::new(Bytes::from(body)));
            *response.status_mut() = status;
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
        "/metrics" => {
            let mut body = String::new();
            if prometheus_client::encoding::text::encode(&mut body, registry).is_err() {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "metrics encoding failed\n",
                );
            }
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
