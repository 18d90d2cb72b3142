//! Everything that can stop a request, which side caused it, and how each one is answered.
//!
//! Mapping an error to an HTTP status and a JSON-RPC code is an exhaustive `match` with no `_`
//! arm, so every new variant forces a decision.

use std::time::Duration;

use bytes::Bytes;
use countersign_jsonrpc::message::{RequestId, error_response};
use http::{HeaderValue, Response, StatusCode, header};

use crate::body::{BoxError, ResponseBody};
use crate::limits::{HitReason, LimitHit};

/// Who caused a failure; picks the status class and the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    Internal,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }
}

/// JSON-RPC codes the gateway uses besides the standard -32700..-32603.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Generic transport-level refusal, as the MCP SDKs answer HTTP-level problems.
    pub const TRANSPORT: i64 = -32000;
    /// MCP 2026-07-28 `HeaderMismatch`.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28 `UnsupportedProtocolVersion`.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// `Retry-After` of capacity refusals (429, 503), in seconds.
pub const RETRY_AFTER_SECS: &str = "1";

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no MCP endpoint is served at this path")]
    UnknownPath,
    #[error("method {0} is not allowed on an MCP endpoint (use POST, GET or DELETE)")]
    MethodNotAllowed(http::Method),
    #[error("method {method} is not allowed on this legacy HTTP+SSE endpoint (use {allow})")]
    LegacyMethodNotAllowed {
        method: http::Method,
        allow: &'static str,
    },
    #[error(
        "no legacy SSE session with this session_id is open at the gateway (it ended, or never \
         existed); open a new one with GET on the SSE endpoint"
    )]
    UnknownLegacySession,
    #[error(
        "the gateway has {limit} legacy SSE sessions open (connections.max_open); retry once one \
         has ended"
    )]
    TooManyLegacySessions { limit: usize },
    #[error("absolute-form request targets are refused; send origin-form (`POST /mcp`)")]
    AbsoluteFormTarget,
    #[error("query strings are not accepted on MCP endpoints")]
    QueryNotAllowed,
    #[error("request has no Host header")]
    MissingHost,
    #[error("request carries more than one {0} header")]
    DuplicateHeader(&'static str),
    #[error("header name `{0}` contains an underscore; such names are refused")]
    UnderscoreHeader(String),
    #[error("Host `{0}` is not served by this gateway")]
    HostNotAllowed(String),
    #[error("Origin `{0}` is not allowed")]
    OriginNotAllowed(String),
    #[error("protocol upgrades (WebSocket, h2c) are not supported on MCP endpoints")]
    UpgradeRefused,
    #[error(
        "Transfer-Encoding is refused on requests; send the body with a Content-Length \
         (this rules out request smuggling)"
    )]
    TransferEncodingRefused,
    #[error("POST bodies must be application/json, got {0}")]
    UnsupportedMediaType(String),
    #[error("Content-Encoding `{0}` is refused; send the body uncompressed")]
    UnsupportedContentEncoding(String),
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("request body was not received within {0:?}")]
    BodyTimeout(Duration),
    #[error("request body could not be read: {0}")]
    BodyRead(#[source] crate::body::BoxError),
    #[error(
        "this client already has {limit} requests in flight at the gateway \
         (connections.max_requests_per_client); retry once one of them has finished"
    )]
    TooManyClientRequests { limit: usize },
    #[error(
        "the gateway is over its in-flight body budget ({budget} bytes of request bodies being \
         read or held at once, limits.max_in_flight_body_bytes); nothing was sent, retry shortly"
    )]
    OverBodyBudget { budget: usize },
    #[error("{0}")]
    Json(#[source] countersign_jsonrpc::Error),
    #[error("JSON-RPC batches are not allowed on protocol revision {0}; send one message per POST")]
    BatchNotAllowed(String),
    #[error("method `{0}` is not an MCP method")]
    UnknownMethod(String),
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error("batch refused whole: {0}")]
    RiskyBatch(String),
    #[error(
        "`{0}` was sent as a notification (no id); a call the policy does not simply allow is \
         answered with a held or refused result, which needs an id: send it as a request"
    )]
    GatedNotification(String),
    #[error(
        "the request carries no usable identity; it must come through the authenticating proxy"
    )]
    Unauthenticated,
    #[error("no question of the gateway with this id is waiting for an answer in this session")]
    UnknownAnswer,
    #[error("batch refused whole: {0}")]
    InvalidBatch(Box<ProxyError>),
    #[error("notification method `{0}` is not an MCP notification")]
    UnknownNotification(String),
    #[error("{0}")]
    HeaderMismatch(String),
    #[error("unsupported protocol version `{0}`")]
    UnsupportedProtocolVersion(String),
    #[error("upstream `{upstream}` is unreachable: {}", causes(source.as_ref()))]
    UpstreamConnect {
        upstream: String,
        #[source]
        source: BoxError,
    },
    #[error("upstream `{upstream}` did not answer within {timeout:?}")]
    UpstreamTimeout { upstream: String, timeout: Duration },
    #[error("upstream `{upstream}` sent a response larger than {limit} bytes")]
    UpstreamResponseTooLarge { upstream: String, limit: usize },
    #[error(
        "upstream `{upstream}` sent an event larger than {limit} bytes (its max_response_bytes \
         or limits.max_sse_event_bytes, whichever is smaller)"
    )]
    UpstreamEventTooLarge { upstream: String, limit: usize },
    #[error("upstream `{upstream}` response body failed: {}", causes(source.as_ref()))]
    UpstreamBody {
        upstream: String,
        #[source]
        source: BoxError,
    },
    #[error("could not list the tools of upstream `{upstream}`: {reason}")]
    CatalogUnavailable { upstream: String, reason: String },
    /// A local upstream (a stdio program, a legacy SSE server) cannot take the request: it
    /// cannot be started, it is backing off after failed starts, or it just ended.
    #[error("upstream `{upstream}` is unavailable: {reason}")]
    UpstreamUnavailable {
        upstream: String,
        reason: String,
        /// Seconds until the next start is attempted, when it is backing off.
        retry_after: Option<u64>,
    },
    #[error(
        "upstream `{upstream}` already runs its maximum of {max} instances (processes.max); \
         retry once a session ends"
    )]
    UpstreamAtCapacity { upstream: String, max: usize },
    #[error("{0}")]
    RateLimited(LimitHit),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ProxyError {
    pub fn side(&self) -> Side {
        match self {
            ProxyError::UnknownPath
            | ProxyError::MethodNotAllowed(_)
            | ProxyError::LegacyMethodNotAllowed { .. }
            | ProxyError::UnknownLegacySession
            | ProxyError::AbsoluteFormTarget
            | ProxyError::QueryNotAllowed
            | ProxyError::MissingHost
            | ProxyError::DuplicateHeader(_)
            | ProxyError::UnderscoreHeader(_)
            | ProxyError::HostNotAllowed(_)
            | ProxyError::OriginNotAllowed(_)
            | ProxyError::UpgradeRefused
            | ProxyError::TransferEncodingRefused
            | ProxyError::UnsupportedMediaType(_)
            | ProxyError::UnsupportedContentEncoding(_)
            | ProxyError::BodyTooLarge { .. }
            | ProxyError::BodyTimeout(_)
            | ProxyError::BodyRead(_)
            | ProxyError::TooManyClientRequests { .. }
            | ProxyError::Json(_)
            | ProxyError::BatchNotAllowed(_)
            | ProxyError::UnknownMethod(_)
            | ProxyError::InvalidParams(_)
            | ProxyError::RiskyBatch(_)
            | ProxyError::GatedNotification(_)
            | ProxyError::Unauthenticated
            | ProxyError::UnknownAnswer
            | ProxyError::InvalidBatch(_)
            | ProxyError::UnknownNotification(_)
            | ProxyError::HeaderMismatch(_)
            | ProxyError::UnsupportedProtocolVersion(_) => Side::Client,
            ProxyError::UpstreamConnect { .. }
            | ProxyError::UpstreamTimeout { .. }
            | ProxyError::UpstreamResponseTooLarge { .. }
            | ProxyError::UpstreamEventTooLarge { .. }
            | ProxyError::UpstreamBody { .. }
            | ProxyError::CatalogUnavailable { .. }
            | ProxyError::UpstreamUnavailable { .. }
            | ProxyError::UpstreamAtCapacity { .. } => Side::Upstream,
            ProxyError::RateLimited(hit) => match hit.reason {
                HitReason::Exhausted { .. } | HitReason::OverBurst { .. } => Side::Client,
                // Failing closed on a store outage is the gateway's trouble, not the caller's.
                HitReason::StoreUnavailable => Side::Internal,
            },
            // The gateway's own capacity, not anything the client sent.
            ProxyError::OverBodyBudget { .. }
            | ProxyError::TooManyLegacySessions { .. }
            | ProxyError::Internal(_) => Side::Internal,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::UnknownPath | ProxyError::UnknownLegacySession => StatusCode::NOT_FOUND,
            ProxyError::MethodNotAllowed(_) | ProxyError::LegacyMethodNotAllowed { .. } => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            ProxyError::AbsoluteFormTarget
            | ProxyError::QueryNotAllowed
            | ProxyError::MissingHost
            | ProxyError::DuplicateHeader(_)
            | ProxyError::UnderscoreHeader(_)
            | ProxyError::UpgradeRefused
            | ProxyError::BodyRead(_)
            | ProxyError::Json(_)
            | ProxyError::BatchNotAllowed(_)
            | ProxyError::InvalidBatch(_)
            | ProxyError::RiskyBatch(_)
            | ProxyError::GatedNotification(_)
            | ProxyError::UnknownAnswer
            | ProxyError::UnknownNotification(_)
            | ProxyError::HeaderMismatch(_)
            | ProxyError::UnsupportedProtocolVersion(_) => StatusCode::BAD_REQUEST,
            ProxyError::Unauthenticated => StatusCode::UNAUTHORIZED,
            // A request on the JSON-RPC layer: the answer is a JSON-RPC error, so SDK clients
            // surface "method not found" rather than an HTTP failure.
            ProxyError::UnknownMethod(_) | ProxyError::InvalidParams(_) => StatusCode::OK,
            ProxyError::HostNotAllowed(_) => StatusCode::MISDIRECTED_REQUEST,
            ProxyError::OriginNotAllowed(_) => StatusCode::FORBIDDEN,
            ProxyError::TransferEncodingRefused => StatusCode::LENGTH_REQUIRED,
            ProxyError::UnsupportedMediaType(_) | ProxyError::UnsupportedContentEncoding(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            ProxyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::TooManyClientRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            // Not 413: the body is within the limit, the gateway is just busy.
            ProxyError::OverBodyBudget { .. } | ProxyError::TooManyLegacySessions { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::UpstreamConnect { .. }
            | ProxyError::UpstreamResponseTooLarge { .. }
            | ProxyError::UpstreamEventTooLarge { .. }
            | ProxyError::UpstreamBody { .. }
            | ProxyError::CatalogUnavailable { .. } => StatusCode::BAD_GATEWAY,
            ProxyError::UpstreamUnavailable { retry_after, .. } => match retry_after {
                // Backing off: it will be tried again, so "come back later".
                Some(_) => StatusCode::SERVICE_UNAVAILABLE,
                None => StatusCode::BAD_GATEWAY,
            },
            ProxyError::UpstreamAtCapacity { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::RateLimited(hit) => hit.status(),
            ProxyError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn jsonrpc_code(&self) -> i64 {
        match self {
            ProxyError::Json(e) => i64::from(e.jsonrpc_code()),
            ProxyError::BatchNotAllowed(_)
            | ProxyError::InvalidBatch(_)
            | ProxyError::RiskyBatch(_)
            | ProxyError::GatedNotification(_)
            | ProxyError::UnknownAnswer
            | ProxyError::UnknownNotification(_) => code::INVALID_REQUEST,
            ProxyError::InvalidParams(_) => code::INVALID_PARAMS,
            ProxyError::UnknownMethod(_) => code::METHOD_NOT_FOUND,
            ProxyError::HeaderMismatch(_) => code::HEADER_MISMATCH,
            ProxyError::UnsupportedProtocolVersion(_) => code::UNSUPPORTED_PROTOCOL_VERSION,
            ProxyError::UnknownPath
            | ProxyError::MethodNotAllowed(_)
            | ProxyError::LegacyMethodNotAllowed { .. }
            | ProxyError::UnknownLegacySession
            | ProxyError::TooManyLegacySessions { .. }
            | ProxyError::AbsoluteFormTarget
            | ProxyError::QueryNotAllowed
            | ProxyError::MissingHost
            | ProxyError::DuplicateHeader(_)
            | ProxyError::UnderscoreHeader(_)
            | ProxyError::HostNotAllowed(_)
            | ProxyError::OriginNotAllowed(_)
            | ProxyError::UpgradeRefused
            | ProxyError::TransferEncodingRefused
            | ProxyError::UnsupportedMediaType(_)
            | ProxyError::UnsupportedContentEncoding(_)
            | ProxyError::BodyTooLarge { .. }
            | ProxyError::BodyTimeout(_)
            | ProxyError::BodyRead(_)
            | ProxyError::TooManyClientRequests { .. }
            | ProxyError::OverBodyBudget { .. }
            | ProxyError::Unauthenticated => code::TRANSPORT,
            ProxyError::UpstreamConnect { .. }
            | ProxyError::UpstreamTimeout { .. }
            | ProxyError::UpstreamResponseTooLarge { .. }
            | ProxyError::UpstreamEventTooLarge { .. }
            | ProxyError::UpstreamBody { .. }
            | ProxyError::CatalogUnavailable { .. }
            | ProxyError::UpstreamUnavailable { .. }
            | ProxyError::UpstreamAtCapacity { .. }
            | ProxyError::Internal(_) => code::INTERNAL_ERROR,
            ProxyError::RateLimited(_) => crate::wire::RATE_LIMITED_ERROR_CODE,
        }
    }

    /// Short, bounded label for the `outcome` metric.
    pub fn outcome(&self) -> &'static str {
        match self.side() {
            Side::Client => "refused",
            Side::Upstream => "upstream_error",
            Side::Internal => "internal_error",
        }
    }

    /// Answers a request the gateway does not forward, and counts it.
    pub fn answer(
        self,
        id: Option<&RequestId>,
        metrics: &crate::metrics::ProxyMetrics,
        upstream_label: &'static str,
        method: &'static str,
    ) -> Response<ResponseBody> {
        tracing::debug!(upstream = upstream_label, error = %self, side = self.side().as_str(), "request not forwarded");
        metrics.record_request(upstream_label, method, self.outcome());
        self.into_response(id)
    }

    /// The HTTP answer: a JSON-RPC error object, with the request's id when it is known.
    pub fn into_response(self, id: Option<&RequestId>) -> Response<ResponseBody> {
        let status = self.status();
        let data = match &self {
            ProxyError::RateLimited(hit) => Some(hit.data()),
            _ => None,
        };
        let body = error_response(id, self.jsonrpc_code(), self.to_string(), data);
        let mut response = Response::new(crate::body::full(Bytes::from(body)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let ProxyError::RateLimited(hit) = &self
            && let Some(secs) = hit.retry_after_secs()
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let ProxyError::UpstreamUnavailable {
            retry_after: Some(secs),
            ..
        } = &self
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*secs));
        }
        if matches!(self, ProxyError::UpstreamAtCapacity { .. }) {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        match &self {
            ProxyError::MethodNotAllowed(_) => {
                headers.insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            }
            ProxyError::LegacyMethodNotAllowed { allow, .. } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        // A refused body may still be on the wire; closing is the only safe framing then.
        if matches!(
            self,
            ProxyError::BodyTooLarge { .. }
                | ProxyError::BodyTimeout(_)
                | ProxyError::TooManyClientRequests { .. }
                | ProxyError::OverBodyBudget { .. }
                | ProxyError::TransferEncodingRefused
                | ProxyError::UpgradeRefused
        ) {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        // Capacity refusals pass once other requests finish, which takes moments, not minutes.
        if matches!(
            self,
            ProxyError::TooManyClientRequests { .. }
                | ProxyError::OverBodyBudget { .. }
                | ProxyError::TooManyLegacySessions { .. }
        ) {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        response
    }
}

/// `error` and every error under it, `: `-separated, leaving out a cause whose text its parent
/// already shows. Client errors (hyper's among them) keep the useful part — "connection
/// refused", the TLS verdict — in their sources, not in their own text.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}
