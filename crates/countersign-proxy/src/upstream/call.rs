//! The gateway's own requests to an upstream: `tools/list` when a call names a tool the pinned
//! catalog has not seen — with the caller's session and credentials, since what a session may
//! see can depend on them — following every page, and single calls such as dry-run previews.

use bytes::Bytes;
use countersign_jsonrpc::message::{ErrorObject, Message, Request, RequestId};
use countersign_jsonrpc::sse::SseDecoder;
use countersign_jsonrpc::{ObjectWriter, RawJson};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Map, Value};

use super::{UpstreamClient, is_event_stream, upstream_request};
use crate::config::Upstream;
use crate::error::ProxyError;
use crate::wire::REQUEST_ID_PREFIX;
use crate::wire::{MCP_METHOD, MCP_NAME};

/// Most pages followed before the listing is treated as hostile.
const MAX_PAGES: usize = 64;

/// Everything about the caller that the gateway's own request must carry.
#[derive(Debug, Clone, Default)]
pub struct CallerContext {
    /// The client's request headers (session id, protocol version, credentials…).
    pub headers: HeaderMap,
    /// For 2026-07-28 requests: the `_meta` to send (protocol version and client capabilities).
    pub stateless_meta: Option<RawJson>,
}

/// Lists every tool of `upstream` as the caller would see them.
pub async fn list_tools(
    upstream: &Upstream,
    client: &UpstreamClient,
    caller: &CallerContext,
    max_event_bytes: usize,
) -> Result<Vec<Value>, ProxyError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let id = RequestId::String(format!(
            "{REQUEST_ID_PREFIX}{}",
            uuid::Uuid::new_v4().simple()
        ));
        let mut params = ObjectWriter::new();
        if let Some(cursor) = &cursor {
            params.push("cursor", &RawJson::string(cursor));
        }
        let mut mirrored: Vec<(HeaderName, HeaderValue)> = Vec::new();
        if let Some(meta) = &caller.stateless_meta {
            params.push("_meta", meta);
            mirrored.push((MCP_METHOD, HeaderValue::from_static("tools/list")));
        }
        let body = Message::Request(Request {
            id: id.clone(),
            method: "tools/list".into(),
            params: Some(params.finish().into()),
        })
        .to_vec();
        let mut headers = caller.headers.clone();
        headers.remove(MCP_NAME);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let request = upstream_request(
            upstream,
            Method::POST,
            &headers,
            Bytes::from(body),
            &mirrored,
        );
        let result = call(upstream, client, request, &id, max_event_bytes)
            .await?
            .map_err(|e| listing_error(upstream, &format!("error {}: {}", e.code, e.message)))?;
        let page = result
            .get("tools")
            .and_then(Value::as_array)
            .ok_or_else(|| listing_error(upstream, "the result has no tools array"))?;
        tools.extend(page.iter().cloned());
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => return Ok(tools),
        }
    }
    Err(listing_error(upstream, "more than 64 pages"))
}

/// Sends one request and returns the `result` (or JSON-RPC error) of the response carrying `id`,
/// from a JSON body or from the SSE stream (skipping the notifications and requests that may
/// precede it).
pub async fn call(
    upstream: &Upstream,
    client: &UpstreamClient,
    request: http::Request<http_body_util::Full<Bytes>>,
    id: &RequestId,
    max_event_bytes: usize,
) -> Result<Result<Map<String, Value>, ErrorObject>, ProxyError> {
    let response = client.send(upstream, request).await?;
    let status = response.status();
    if status != StatusCode::OK {
        return Err(listing_error(upstream, &format!("HTTP {status}")));
    }
    let event_stream = is_event_stream(response.headers());
    let body = response.into_body();
    // One deadline for the whole body, so an upstream dripping events cannot hold it open.
    tokio::time::timeout(
        upstream.response_timeout,
        read_response(upstream, body, event_stream, id, max_event_bytes),
    )
    .await
    .map_err(|_| ProxyError::UpstreamTimeout {
        upstream: upstream.name.clone(),
        timeout: upstream.response_timeout,
    })?
}

async fn read_response(
    upstream: &Upstream,
    mut body: super::UpstreamBody,
    event_stream: bool,
    id: &RequestId,
    max_event_bytes: usize,
) -> Result<Result<Map<String, Value>, ErrorObject>, ProxyError> {
    let limit = upstream.max_response_bytes.get();
    let mut decoder = SseDecoder::new(max_event_bytes);
    let mut buffered = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|source| ProxyError::UpstreamBody {
            upstream: upstream.name.clone(),
            source,
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if !event_stream {
            if buffered.len() + data.len() > limit {
                return Err(ProxyError::UpstreamResponseTooLarge {
                    upstream: upstream.name.clone(),
                    limit,
                });
            }
            buffered.extend_from_slice(&data);
            continue;
        }
        decoder.push(&data);
        while let Some(event) = decoder
            .next_event()
            .map_err(|e| listing_error(upstream, &e.to_string()))?
        {
            if let Some(result) = event
                .data()
                .and_then(|data| response_result(data.as_bytes(), id))
            {
                return Ok(result);
            }
        }
    }
    if event_stream {
        return Err(listing_error(
            upstream,
            "the stream ended without the response",
        ));
    }
    response_result(&buffered, id)
        .ok_or_else(|| listing_error(upstream, "the body is not the response"))
}

/// `Some(Ok(result))` for the successful response to `id`, `Some(Err)` for its error response,
/// `None` for any other message.
fn response_result(
    bytes: &[u8],
    id: &RequestId,
) -> Option<Result<Map<String, Value>, ErrorObject>> {
    let Ok(Message::Response(response)) = Message::parse(bytes) else {
        return None;
    };
    if response.id.as_ref() != Some(id) {
        return None;
    }
    // An upstream's own result, bounded by its response limit: small enough to build as a tree.
    Some(match response.outcome.map(|result| result.to_value()) {
        Ok(Value::Object(result)) => Ok(result),
        Ok(_) => Err(ErrorObject {
            code: -32603,
            message: "the result is not an object".into(),
            data: None,
        }),
        Err(error) => Err(error),
    })
}

fn listing_error(upstream: &Upstream, why: &str) -> ProxyError {
    ProxyError::CatalogUnavailable {
        upstream: upstream.name.clone(),
        reason: why.to_owned(),
    }
}
