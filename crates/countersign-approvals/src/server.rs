//! The approval page's listener: routes, security headers and graceful drain.
//!
//! Every response carries the same headers, whatever produced it: a strict CSP (nothing
//! loads, no script, the one stylesheet by hash, forms post only to the page, never framed),
//! `X-Frame-Options: DENY` for browsers without `frame-ancestors`, `Referrer-Policy:
//! no-referrer` so the link never leaks to another site, `Cache-Control: no-store` so a
//! shared machine's cache keeps no request or decision, and `nosniff`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::page::ApprovalPage;
use crate::{approve, html, views};

/// Largest form body the page reads (a CSRF token and a decision).
pub(crate) const MAX_FORM_BYTES: usize = 8 << 10;

/// Connections served at once; past it the accept loop waits (new connections queue in the
/// listen backlog), so a flood cannot make the page hold unbounded memory. People, not
/// programs, use the page: a thousand at once is far beyond any approval queue.
const MAX_CONNECTIONS: usize = 1024;

/// Serves the page on `listener` until `shutdown` resolves, then lets open connections finish
/// for at most `drain`.
pub async fn serve(
    listener: TcpListener,
    page: Arc<ApprovalPage>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .max_buf_size(64 << 10);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_closed) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    debug!(%error, "approval page accept failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let page = Arc::clone(&page);
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            service_fn(move |request| {
                let page = Arc::clone(&page);
                async move { Ok::<_, Infallible>(handle(&page, request, peer).await) }
            }),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%error, "approval page connection ended with an error");
            }
            drop(slot);
        });
    }
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("approval page connections still open after the drain timeout");
    }
}

/// Answers one request.
pub async fn handle<B>(
    page: &ApprovalPage,
    request: Request<B>,
    peer: SocketAddr,
) -> Response<Full<Bytes>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let base = page.config().base_path();
    let path = request.uri().path().to_owned();
    let Some(route) = path.strip_prefix(base.as_str()) else {
        return secure(html_response(StatusCode::NOT_FOUND, views::unknown_page()));
    };
    let response = match (request.method(), route) {
        (&Method::GET, r) if r.starts_with("/approve/") => {
            approve::show(page, &request, &r["/approve/".len()..]).await
        }
        (&Method::POST, r) if r.starts_with("/approve/") => {
            let segment = r["/approve/".len()..].to_owned();
            approve::decide(page, request, &segment, peer).await
        }
        (&Method::GET, "/oidc/callback") => crate::auth::oidc::callback(page, &request).await,
        (_, r) if r.starts_with("/approve/") || r == "/oidc/callback" => {
            html_response(StatusCode::METHOD_NOT_ALLOWED, views::unknown_page())
        }
        _ => html_response(StatusCode::NOT_FOUND, views::unknown_page()),
    };
    secure(response)
}

pub(crate) fn html_response(status: StatusCode, html: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(html)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// A `303 See Other` to `location`.
pub(crate) fn redirect(location: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SEE_OTHER;
    match HeaderValue::from_str(location) {
        Ok(value) => {
            response.headers_mut().insert(header::LOCATION, value);
        }
        Err(_) => *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR,
    }
    response
}

fn secure(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let headers = response.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&html::content_security_policy()) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
