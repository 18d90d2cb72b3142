//! HTTP/1.1 glue: the accept loop, routing to `/mcp`, body limits and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, ORIGIN};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::mcp::{Endpoint, Refusal, Reply, SESSION_HEADER};
use crate::store::DemoStore;

const MCP_PATH: &str = "/mcp";
/// Drops connections that open but never finish their headers (slowloris).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The same for bodies, which hyper's header timeout does not cover.
const BODY_DEADLINE: Duration = Duration::from_secs(30);
/// Far above any real tool call to this store.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How long shutdown waits for in-flight exchanges before giving up on them.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves the demo store's MCP endpoint at `/mcp` on `listener` until `shutdown` completes,
/// then stops accepting and lets in-flight exchanges finish (for at most a few seconds).
pub async fn serve(
    listener: TcpListener,
    store: DemoStore,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, path = MCP_PATH, "demo store listening");
    let endpoint = Endpoint::new(store);
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let endpoint = endpoint.clone();
        let service = service_fn(move |request| {
            let endpoint = endpoint.clone();
            async move { Ok::<_, Infallible>(route(&endpoint, request).await) }
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // Bounded so a client that never finishes its request cannot keep the demo alive.
    if tokio::time::timeout(DRAIN_DEADLINE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("demo store stopped with exchanges still in flight");
    }
    tracing::info!(%addr, "demo store stopped");
    Ok(())
}

async fn route(endpoint: &Endpoint, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.uri().path() != MCP_PATH {
        return plain(StatusCode::NOT_FOUND);
    }
    // DNS rebinding defence the spec requires: a browser page on a foreign origin must not
    // drive a server on localhost.
    if let Some(origin) = request.headers().get(ORIGIN)
        && !is_local_origin(origin)
    {
        return into_response(Refusal::ForbiddenOrigin.into_reply(None));
    }
    let reply = match *request.method() {
        Method::POST => post(endpoint, request).await,
        Method::DELETE => endpoint.delete(request.headers()),
        // GET would open a server-initiated stream; this server never sends such messages.
        _ => Refusal::MethodNotAllowed.into_reply(None),
    };
    into_response(reply)
}

async fn post(endpoint: &Endpoint, request: Request<Incoming>) -> Reply {
    if !is_json(request.headers()) {
        return Refusal::UnsupportedMediaType.into_reply(None);
    }
    let (parts, body) = request.into_parts();
    let collected =
        tokio::time::timeout(BODY_DEADLINE, Limited::new(body, MAX_BODY_BYTES).collect());
    let body = match collected.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<LengthLimitError>() => {
            return Refusal::BodyTooLarge.into_reply(None);
        }
        Ok(Err(_)) => return Refusal::BodyUnreadable.into_reply(None),
        Err(_elapsed) => return Refusal::BodyTimeout.into_reply(None),
    };
    endpoint.post(&parts.headers, &body)
}

fn into_response(reply: Reply) -> Response<Full<Bytes>> {
    let (status, body, session) = match reply {
        Reply::Accepted => return plain(StatusCode::ACCEPTED),
        Reply::Ended => return plain(StatusCode::OK),
        Reply::Json {
            status,
            body,
            session,
        } => (status, body, session),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
    }
    if let Some(session) = session {
        let value = HeaderValue::from_str(&session).expect("a UUID is a valid header value");
        headers.insert(SESSION_HEADER, value);
    }
    response
}

fn plain(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::default());
    *response.status_mut() = status;
    response
}

fn is_json(headers: &HeaderMap) -> bool {
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    content_type
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

fn is_local_origin(origin: &HeaderValue) -> bool {
    let uri = origin.to_str().ok().and_then(|o| o.parse::<Uri>().ok());
    matches!(
        uri.as_ref().and_then(Uri::host),
        Some("localhost" | "127.0.0.1" | "[::1]")
    )
}
