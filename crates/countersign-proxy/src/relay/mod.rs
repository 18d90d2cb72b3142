//! Relays an upstream's answer to the client: Server-Sent Events streamed event by event
//! ([`SseRelay`]), anything else (a JSON body) streamed as it arrives within the upstream's
//! size and time bounds ([`JsonRelay`]), or buffered whole when an observer needs the whole
//! message. Every SSE message, and every JSON body an observer asks for, passes a
//! [`MessageObserver`] on its way, which is how the gateway's response edits and catalog
//! watching see upstream traffic without the relay knowing anything about them.

mod json;
mod pending;
mod quiet;
mod sse;

pub use json::{BodyBounds, JsonRelay};
pub use pending::PendingAnswers;
pub use quiet::QuietLimits;
pub use sse::{SseRelay, StreamSettings};

use std::sync::Arc;

use bytes::Bytes;
use countersign_jsonrpc::message::TopLevel;
use http::Response;
use http::header::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::body::{ResponseBody, full};
use crate::config::Upstream;
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;
use crate::route::RouteTarget;
use crate::upstream::{
    Forwarded, UpstreamBody, connection_listed_names, is_event_stream, is_not_returned,
};

/// Watches, and may edit, the messages of one relayed response.
pub trait MessageObserver: Send {
    /// Sees one upstream message (a JSON body, or one SSE event's data); returns its
    /// replacement when it edited it.
    fn observe(&mut self, message: &[u8]) -> Option<Vec<u8>>;

    /// Whether it must see every message whole, which may make it edit them. `true` makes the
    /// relay buffer a JSON (non-SSE) body up to `max_response_bytes` before answering, and
    /// hold each SSE event until it is complete. Otherwise a JSON body is streamed and the
    /// observer never sees it, and an SSE event with a long data line is passed on in parts as
    /// it arrives, the observer told only what [`passed`](MessageObserver::passed) says.
    /// Defaults to `true`: an observer that does not say is shown every message.
    fn needs_whole_messages(&self) -> bool {
        true
    }

    /// Sees what was read of an SSE message passed on in parts (only when it does not
    /// [need whole messages](MessageObserver::needs_whole_messages)): its top level, as the
    /// bytes went by.
    fn passed(&mut self, _message: &TopLevel) {}
}

/// The observer of one response.
pub type Observer = Box<dyn MessageObserver>;

/// Picks the observer for the response to each forwarded request.
pub trait WatchResponses: Send + Sync + std::fmt::Debug {
    /// `payload` is the forwarded message (`None` for GET and DELETE). Takes the watcher's
    /// handle, so the observer can keep it rather than copy what it needs of it.
    fn watch(
        self: Arc<Self>,
        route: &RouteTarget,
        request: &http::request::Parts,
        payload: Option<&countersign_jsonrpc::message::Payload>,
    ) -> Option<Observer>;
}

/// The unread part of a streamed answer from which it is sent on with `splice` rather than
/// copied. Below it, the pipe's setup and the extra step cost more than the copies: most MCP
/// answers arrive whole with their head, and a read that size copies in microseconds.
const SPLICE_AT_LEAST: u64 = 64 * 1024;

/// Sends `request` upstream and relays the answer.
pub async fn relay(
    route: &RouteTarget,
    request: Forwarded<'_>,
    metrics: &ProxyMetrics,
    streams: &StreamSettings,
    mut observer: Option<Observer>,
    pending: PendingAnswers,
) -> Result<Response<ResponseBody>, ProxyError> {
    let upstream = &route.upstream;
    let clock = &streams.clock;
    let started = clock.now();
    let response = route.client.forward(upstream, request, started).await?;
    let headers_at = clock.now();
    metrics.observe_upstream_latency(route.label, headers_at.duration_since(started));

    let (mut parts, body) = response.into_parts();
    let listed_in_connection = connection_listed_names(&parts.headers);
    let returned: Vec<_> = parts
        .headers
        .keys()
        .filter(|name| is_not_returned(name) || listed_in_connection.contains(name))
        .cloned()
        .collect();
    for name in returned {
        parts.headers.remove(name);
    }

    let body = if is_event_stream(&parts.headers) {
        // Proxies in front of the gateway must not buffer the stream either.
        parts.headers.insert(
            HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        );
        // One message may not exceed the upstream's response limit, streamed or not.
        let settings = StreamSettings {
            max_event_bytes: streams
                .max_event_bytes
                .min(upstream.max_response_bytes.get()),
            ..streams.clone()
        };
        ResponseBody::new(SseRelay::new(
            body,
            &settings,
            metrics,
            route.label,
            observer,
            pending,
        ))
    } else if let Some(observer) = observer.as_mut().filter(|o| o.needs_whole_messages()) {
        let bytes = buffer(upstream, body).await?;
        match observer.observe(&bytes) {
            Some(edited) => full(edited),
            None => full(bytes),
        }
    } else {
        let bounds = BodyBounds {
            max_bytes: upstream.max_response_bytes.get(),
            deadline: upstream.response_timeout,
        };
        match body.into_spliceable(SPLICE_AT_LEAST) {
            Ok(wire) => ResponseBody::passthrough(JsonRelay::new(
                wire,
                bounds,
                headers_at,
                metrics,
                route.label,
            )?),
            Err(body) => ResponseBody::new(JsonRelay::new(
                body,
                bounds,
                headers_at,
                metrics,
                route.label,
            )?),
        }
    };
    Ok(Response::from_parts(parts, body))
}

/// Reads a JSON body whole for an observer, within the upstream's size limit and
/// `response_timeout`.
async fn buffer(upstream: &Upstream, body: UpstreamBody) -> Result<Bytes, ProxyError> {
    let limit = upstream.max_response_bytes.get();
    let collected = tokio::time::timeout(
        upstream.response_timeout,
        Limited::new(body, limit).collect(),
    )
    .await
    .map_err(|_| ProxyError::UpstreamTimeout {
        upstream: upstream.name.clone(),
        timeout: upstream.response_timeout,
    })?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(ProxyError::UpstreamResponseTooLarge {
            upstream: upstream.name.clone(),
            limit,
        }),
        Err(source) => Err(ProxyError::UpstreamBody {
            upstream: upstream.name.clone(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
