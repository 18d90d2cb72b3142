//! Upstreams that speak only the 2024-11-05 HTTP+SSE transport: one [`Channel`] is one SSE
//! connection (`GET` the SSE endpoint, wait for its `endpoint` event, then `POST` every message
//! to that endpoint; every server message, responses included, arrives as an event on the GET
//! stream). The bridge above turns channels into Streamable HTTP sessions.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use countersign_jsonrpc::message::{Message, error_response};
use countersign_jsonrpc::sse::SseDecoder;
use futures_util::future::BoxFuture;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode, Uri};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::bridge::{Bridge, BridgeSettings};
use super::{Channel, Connector, UpstreamBody, UpstreamClient, is_event_stream, upstream_request};
use crate::clock::Clock;
use crate::config::{ProcessSharing, Upstream};
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;
use crate::wire::MCP_PROTOCOL_VERSION;

/// Messages buffered in each direction of one connection; past it the gateway stops reading the
/// upstream's stream (TCP backpressure) or the bridge waits to write.
const CHANNEL_CAPACITY: usize = 64;

/// Opens legacy SSE connections to one upstream.
pub struct LegacySseConnector {
    upstream: Arc<Upstream>,
    client: UpstreamClient,
    max_event_bytes: usize,
}

impl fmt::Debug for LegacySseConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LegacySseConnector")
            .field("upstream", &self.upstream.name)
            .finish_non_exhaustive()
    }
}

impl LegacySseConnector {
    /// `client` must be an HTTP client for `upstream` (it may be `https://`).
    pub fn new(upstream: &Upstream, client: UpstreamClient, max_event_bytes: usize) -> Self {
        Self {
            upstream: Arc::new(upstream.clone()),
            client,
            max_event_bytes: max_event_bytes.min(upstream.max_response_bytes.get()),
        }
    }

    /// Opens one connection carrying `headers` (the client request that opened the session, for
    /// `auth: forward`) on the GET and on every POST.
    pub async fn open_with(&self, headers: &HeaderMap) -> Result<Channel, ProxyError> {
        let upstream = &self.upstream;
        let mut headers = headers.clone();
        // The client's session with the gateway means nothing to the upstream.
        headers.remove("mcp-session-id");
        headers.remove(MCP_PROTOCOL_VERSION);
        headers.remove(header::CONTENT_TYPE);
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let request = upstream_request(upstream, Method::GET, &headers, Bytes::new(), &[]);
        let response = self.client.send(upstream, request).await?;
        if response.status() != StatusCode::OK || !is_event_stream(response.headers()) {
            return Err(refused(
                upstream,
                &format!(
                    "its SSE endpoint answered HTTP {} ({})",
                    response.status(),
                    response
                        .headers()
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("no content type")
                ),
            ));
        }
        let mut body = response.into_body();
        let mut decoder = SseDecoder::new(self.max_event_bytes);
        let endpoint = tokio::time::timeout(
            upstream.response_timeout,
            read_endpoint(upstream, &mut body, &mut decoder),
        )
        .await
        .map_err(|_| refused(upstream, "no `endpoint` event within its response_timeout"))??;
        let endpoint =
            resolve_endpoint(&upstream.url, &endpoint).map_err(|why| refused(upstream, &why))?;
        debug!(upstream = %upstream.name, %endpoint, "legacy SSE connection open");

        let (to_server, outgoing) = mpsc::channel::<Bytes>(CHANNEL_CAPACITY);
        let (incoming, from_server) = mpsc::channel::<Bytes>(CHANNEL_CAPACITY);
        headers.remove(header::ACCEPT);
        let (ended_tx, ended) = tokio::sync::oneshot::channel();
        let reader = tokio::spawn({
            let (upstream, incoming) = (upstream.clone(), incoming.clone());
            async move {
                let why = read_messages(upstream, body, decoder, incoming).await;
                let _ = ended_tx.send(why);
            }
        });
        let writer = tokio::spawn(post_messages(
            upstream.clone(),
            self.client.clone(),
            endpoint.clone(),
            headers,
            outgoing,
            incoming,
        ));
        Ok(Channel {
            to_server,
            from_server,
            instance: Box::new(Connection { reader, writer }),
            describe: format!("legacy SSE connection, messages to {endpoint}"),
            // Aborted with the connection, the reader says nothing: the gateway closed it.
            ended: Box::pin(async move {
                ended
                    .await
                    .unwrap_or_else(|_| "the gateway closed the connection".to_owned())
            }),
        })
    }
}

impl Connector for LegacySseConnector {
    fn open(&self, request: &HeaderMap) -> BoxFuture<'static, Result<Channel, ProxyError>> {
        let connector = Self {
            upstream: self.upstream.clone(),
            client: self.client.clone(),
            max_event_bytes: self.max_event_bytes,
        };
        let headers = request.clone();
        Box::pin(async move { connector.open_with(&headers).await })
    }
}

/// Most legacy SSE connections open at once to one upstream: one per client session.
pub(super) const MAX_CONNECTIONS: usize = 1024;

/// A client session with nothing in flight and no open stream for this long is ended, and its
/// connection closed.
pub(super) const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The [`Bridge`] serving a legacy SSE upstream: one upstream connection per client session,
/// opened with that session's `initialize` request headers (so `auth: forward` sends each
/// client's own credential), and no stateless 2026-07-28 requests (the upstream has only
/// sessions; dual-era clients fall back to `initialize`).
pub(super) fn legacy_sse_upstream(
    upstream: &Upstream,
    client: UpstreamClient,
    label: &'static str,
    metrics: ProxyMetrics,
    clock: Arc<dyn Clock>,
) -> Bridge {
    Bridge::new(
        Arc::new(LegacySseConnector::new(
            upstream,
            client,
            upstream.max_response_bytes.get(),
        )),
        BridgeSettings {
            upstream: upstream.name.clone(),
            label,
            sharing: ProcessSharing::PerSession,
            max_instances: MAX_CONNECTIONS,
            idle_timeout: IDLE_TIMEOUT,
            max_message_bytes: upstream.max_response_bytes.get(),
            start_timeout: upstream.connect_timeout.max(upstream.response_timeout),
            serves_stateless: false,
            clock,
            metrics,
        },
    )
}

/// Keeps the connection's two tasks; dropping it aborts them, which drops the GET body and so
/// closes the connection, ending the upstream's session.
struct Connection {
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// Reads events until the `endpoint` event and returns its data.
async fn read_endpoint(
    upstream: &Upstream,
    body: &mut UpstreamBody,
    decoder: &mut SseDecoder,
) -> Result<String, ProxyError> {
    loop {
        while let Some(event) = decoder
            .next_event()
            .map_err(|e| refused(upstream, &e.to_string()))?
        {
            if event.event_type() == Some("endpoint") {
                return event
                    .data()
                    .map(|data| data.trim().to_owned())
                    .filter(|data| !data.is_empty())
                    .ok_or_else(|| refused(upstream, "its `endpoint` event is empty"));
            }
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    decoder.push(&data);
                }
            }
            Some(Err(source)) => {
                return Err(ProxyError::UpstreamBody {
                    upstream: upstream.name.clone(),
                    source,
                });
            }
            None => return Err(refused(upstream, "its SSE stream ended before `endpoint`")),
        }
    }
}

/// The endpoint an `endpoint` event announces, resolved against the SSE URL. It must be on the
/// upstream's own origin: the messages carry the client's calls and credentials.
fn resolve_endpoint(sse_url: &Uri, announced: &str) -> Result<Uri, String> {
    let origin = |uri: &Uri| (uri.scheme().cloned(), uri.authority().cloned());
    let resolved: Uri = if announced.starts_with("http://") || announced.starts_with("https://") {
        announced.parse().map_err(|_| bad_endpoint(announced))?
    } else {
        let scheme = sse_url.scheme_str().unwrap_or("http");
        let authority = sse_url.authority().map_or("", |a| a.as_str());
        let path = if announced.starts_with('/') {
            announced.to_owned()
        } else {
            // A relative reference replaces the last segment of the SSE URL's path.
            let base = sse_url.path();
            let directory = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            format!("{directory}{announced}")
        };
        format!("{scheme}://{authority}{path}")
            .parse()
            .map_err(|_| bad_endpoint(announced))?
    };
    if origin(&resolved) != origin(sse_url) {
        return Err(format!(
            "its `endpoint` event names another origin ({announced}); the gateway only posts to \
             the upstream's own"
        ));
    }
    Ok(resolved)
}

fn bad_endpoint(announced: &str) -> String {
    format!("its `endpoint` event is not a URL: {announced:?}")
}

/// Relays every message event of the stream to `incoming` until the stream ends or fails;
/// returns how it ended.
async fn read_messages(
    upstream: Arc<Upstream>,
    mut body: UpstreamBody,
    mut decoder: SseDecoder,
    incoming: mpsc::Sender<Bytes>,
) -> String {
    loop {
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => {
                    // The transport's server messages are `message` events; the SSE default
                    // type is `message` too.
                    if !matches!(event.event_type(), None | Some("message")) {
                        continue;
                    }
                    let Some(data) = event.data() else { continue };
                    if incoming.send(Bytes::from(data.into_owned())).await.is_err() {
                        return "the gateway closed the connection".to_owned();
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    warn!(upstream = %upstream.name, %error, "legacy SSE stream cut");
                    return format!("its SSE stream was cut: {error}");
                }
            }
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    decoder.push(&data);
                }
            }
            Some(Err(error)) => {
                warn!(upstream = %upstream.name, %error, "legacy SSE stream failed");
                return format!("its SSE stream failed: {error}");
            }
            None => {
                debug!(upstream = %upstream.name, "legacy SSE stream ended");
                return "its SSE stream ended".to_owned();
            }
        }
    }
}

/// POSTs every outgoing message to the endpoint, in order. A request the upstream refuses gets a
/// JSON-RPC error on `incoming`, so its caller is answered instead of waiting for its timeout.
async fn post_messages(
    upstream: Arc<Upstream>,
    client: UpstreamClient,
    endpoint: Uri,
    headers: HeaderMap,
    mut outgoing: mpsc::Receiver<Bytes>,
    incoming: mpsc::Sender<Bytes>,
) {
    let mut headers = headers;
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    while let Some(message) = outgoing.recv().await {
        let mut request = upstream_request(&upstream, Method::POST, &headers, message.clone(), &[]);
        *request.uri_mut() = endpoint.clone();
        let failure = match client.send(&upstream, request).await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(refused(
                &upstream,
                &format!("it answered a message with HTTP {}", response.status()),
            )),
            Err(error) => Some(error),
        };
        let Some(failure) = failure else { continue };
        warn!(upstream = %upstream.name, error = %failure, "legacy SSE message not delivered");
        if let Ok(Message::Request(request)) = Message::parse(&message) {
            let answer = error_response(
                Some(&request.id),
                failure.jsonrpc_code(),
                failure.to_string(),
                None,
            );
            if incoming.send(Bytes::from(answer)).await.is_err() {
                return;
            }
        }
    }
}

fn refused(upstream: &Upstream, why: &str) -> ProxyError {
    ProxyError::UpstreamConnect {
        upstream: upstream.name.clone(),
        source: format!("legacy SSE: {why}").into(),
    }
}

#[cfg(test)]
mod tests;
