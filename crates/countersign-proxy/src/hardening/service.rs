use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Method, Request, Response};
use tower::Service;
use tracing::debug;

use crate::body::ResponseBody;
use crate::config::{HostPattern, HostPolicy, OriginPolicy};
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::future::ResponseFuture;
use crate::metrics::ProxyMetrics;

use super::fields::HeadFields;
use crate::route::{LegacyEndpoint, Route};

/// What the hardening layer needs to know: the exact paths it serves and the allowlists.
#[derive(Debug)]
pub struct HardeningRules {
    /// The routes served, matched byte-exactly by path: each route's own path and its legacy
    /// HTTP+SSE paths.
    pub routes: Vec<Route>,
    pub origins: OriginPolicy,
    pub hosts: HostPolicy,
    pub max_body_bytes: usize,
    pub metrics: ProxyMetrics,
}

/// Refuses malformed or unwanted requests before anything reads their body.
#[derive(Debug, Clone)]
pub struct Hardening<S> {
    inner: S,
    rules: Arc<HardeningRules>,
}

impl<S> Hardening<S> {
    pub fn new(inner: S, rules: Arc<HardeningRules>) -> Self {
        Self { inner, rules }
    }
}

impl<S, B> Service<Request<B>> for Hardening<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>>,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.rules.check(&request) {
            Ok((route, legacy)) => {
                request.extensions_mut().context_mut().route = Some(route);
                if let Some(endpoint) = legacy {
                    request.extensions_mut().insert(endpoint);
                }
                ResponseFuture::inner(self.inner.call(request))
            }
            Err((error, upstream)) => {
                debug!(%error, method = %request.method(), path = %request.uri().path(), "refused request");
                self.rules.metrics.record_request(
                    upstream,
                    request_method_label(request.method()),
                    error.outcome(),
                );
                ResponseFuture::answered(error.into_response(None))
            }
        }
    }
}

fn request_method_label(method: &Method) -> &'static str {
    match *method {
        Method::POST => "POST",
        Method::GET => "GET",
        Method::DELETE => "DELETE",
        _ => "other",
    }
}

impl HardeningRules {
    /// Runs every check in the order a peer would notice them: framing first, then routing,
    /// then who is asking, then what the body claims to be.
    fn check<B>(
        &self,
        request: &Request<B>,
    ) -> Result<(Route, Option<LegacyEndpoint>), (ProxyError, &'static str)> {
        let unrouted = "none";
        let uri = request.uri();
        if uri.scheme().is_some() || uri.authority().is_some() {
            return Err((ProxyError::AbsoluteFormTarget, unrouted));
        }
        let headers = request.headers();
        let fields = HeadFields::read(headers);
        check_framing(&fields).map_err(|e| (e, unrouted))?;

        let method = request.method();
        let (route, legacy) = self
            .route(uri.path(), method, headers)
            .ok_or((ProxyError::UnknownPath, unrouted))?;
        let upstream = route.label;
        let refuse = |e| (e, upstream);
        // Only a legacy session's messages are addressed by query (`?session_id=…`), as the
        // 2024-11-05 transport has it; the legacy layer reads nothing else from it.
        if uri.query().is_some() && legacy != Some(LegacyEndpoint::Messages) {
            return Err(refuse(ProxyError::QueryNotAllowed));
        }
        let allowed = match legacy {
            None => matches!(*method, Method::POST | Method::GET | Method::DELETE),
            Some(LegacyEndpoint::Stream) => method == Method::GET,
            Some(LegacyEndpoint::Messages) => method == Method::POST,
        };
        if !allowed {
            let error = match legacy {
                None => ProxyError::MethodNotAllowed(method.clone()),
                Some(LegacyEndpoint::Stream) => ProxyError::LegacyMethodNotAllowed {
                    method: method.clone(),
                    allow: "GET",
                },
                Some(LegacyEndpoint::Messages) => ProxyError::LegacyMethodNotAllowed {
                    method: method.clone(),
                    allow: "POST",
                },
            };
            return Err(refuse(error));
        }

        // Origin before Host: the spec makes 403 on a foreign Origin a MUST, and a rebinding
        // attacker controls Host anyway.
        if let Some(origin) = fields.origin {
            let origin = origin.to_str().unwrap_or("<non-ASCII>");
            if !HostPattern::any_matches(&self.origins.allowed, origin) {
                return Err(refuse(ProxyError::OriginNotAllowed(origin.to_owned())));
            }
        }
        if let Some(allowed) = &self.hosts.allowed {
            let host = fields
                .host
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            if !HostPattern::any_matches(allowed, host) {
                return Err(refuse(ProxyError::HostNotAllowed(host.to_owned())));
            }
        }

        if method == Method::POST {
            check_post_body_headers(&fields, self.max_body_bytes).map_err(refuse)?;
        }
        Ok((route.clone(), legacy))
    }

    /// The route serving `path`, and which of its legacy endpoints `path` is, matched
    /// byte-exactly. Where a route's legacy SSE path is its own path, a `GET` without
    /// `Mcp-Session-Id` is a legacy client opening its session: a Streamable HTTP client opens
    /// its GET stream only inside the session that `initialize` gave it.
    fn route(
        &self,
        path: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<(&Route, Option<LegacyEndpoint>)> {
        self.routes.iter().find_map(|route| {
            let legacy = route.legacy.as_ref();
            let legacy_stream = legacy.is_some_and(|l| l.sse == path);
            if route.path == path {
                let opens_legacy_session = legacy_stream
                    && method == Method::GET
                    && !headers.contains_key("mcp-session-id");
                return Some((
                    route,
                    opens_legacy_session.then_some(LegacyEndpoint::Stream),
                ));
            }
            if legacy_stream {
                return Some((route, Some(LegacyEndpoint::Stream)));
            }
            legacy
                .is_some_and(|l| l.messages == path)
                .then_some((route, Some(LegacyEndpoint::Messages)))
        })
    }
}

fn check_framing(fields: &HeadFields<'_>) -> Result<(), ProxyError> {
    if let Some(display) = fields.repeated_singleton {
        return Err(ProxyError::DuplicateHeader(display));
    }
    if fields.host.is_none() {
        return Err(ProxyError::MissingHost);
    }
    if let Some(name) = fields.underscore {
        return Err(ProxyError::UnderscoreHeader(name.as_str().to_owned()));
    }
    if fields.upgrade {
        return Err(ProxyError::UpgradeRefused);
    }
    // The server drops Content-Length when Transfer-Encoding is present, so CL+TE cannot be told
    // apart from plain chunked here. MCP clients always send Content-Length, so refusing every
    // Transfer-Encoding closes the whole smuggling class at no cost to them.
    if fields.transfer_encoding {
        return Err(ProxyError::TransferEncodingRefused);
    }
    Ok(())
}

fn check_post_body_headers(
    fields: &HeadFields<'_>,
    max_body_bytes: usize,
) -> Result<(), ProxyError> {
    if let Some(encoding) = fields.content_encoding {
        let encoding = encoding.to_str().unwrap_or("<non-ASCII>");
        if !encoding.trim().eq_ignore_ascii_case("identity") {
            return Err(ProxyError::UnsupportedContentEncoding(encoding.to_owned()));
        }
    }
    let content_type = fields
        .content_type
        .map(|v| v.to_str().unwrap_or("<non-ASCII>"))
        .unwrap_or("no Content-Type");
    if !is_json_utf8(content_type) {
        return Err(ProxyError::UnsupportedMediaType(content_type.to_owned()));
    }
    // The server's own reading, so a length it framed the body by is never read another way.
    let length = fields.length.value().map_err(|_| {
        ProxyError::Internal("the server accepted an invalid Content-Length".into())
    })?;
    if length.is_some_and(|length| length > max_body_bytes as u64) {
        return Err(ProxyError::BodyTooLarge {
            limit: max_body_bytes,
        });
    }
    Ok(())
}

/// `application/json`, matched case-insensitively, with no parameter but an optional
/// `charset=utf-8`.
pub(crate) fn is_json_utf8(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|param| {
        let Some((name, value)) = param.split_once('=') else {
            return false;
        };
        let value = value.trim().trim_matches('"');
        name.trim().eq_ignore_ascii_case("charset") && value.eq_ignore_ascii_case("utf-8")
    })
}
