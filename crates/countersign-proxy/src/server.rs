//! Accept loop: hyper HTTP/1.1 connections with the limits a public listener needs, and a
//! graceful drain on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::Service;
use tracing::{debug, info, warn};

use crate::body::ResponseBody;
use crate::config::Limits;

/// Serves `service` on `listener` until `shutdown` resolves, then stops accepting and lets
/// in-flight requests and streams finish for up to `drain`.
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = http1::Builder::new();
    // Without a timer hyper silently disables the header read timeout (slowloris).
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(limits.max_headers.get())
        .max_buf_size(limits.max_header_bytes.get().max(8192))
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);

    loop {
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
                let _ = stream.set_nodelay(true);
                let connection = builder
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service.clone()));
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    info!(in_flight = graceful.count(), "draining connections");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(
            ?drain,
            "drain deadline passed; closing remaining connections"
        );
    }
    Ok(())
}
