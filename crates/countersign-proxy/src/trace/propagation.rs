//! W3C trace context in and out, through the process's propagator (the app installs the W3C
//! one with the exporter).

use countersign_jsonrpc::RawJson;
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The client's trace context: the message's `params._meta` (`traceparent`, `tracestate`, as the
/// MCP conventions put it) when it carries one, else the HTTP headers.
pub(super) fn extract(headers: &HeaderMap, meta: Option<&RawJson>) -> Context {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        if let Some(meta) = meta
            && meta.get("traceparent").is_some()
        {
            return propagator.extract(&Meta(meta));
        }
        propagator.extract(&Headers(headers))
    })
}

/// Sets `traceparent` (and `tracestate`) of an upstream request to the current request span,
/// replacing the client's: the upstream's spans are children of the gateway's. Does nothing when
/// tracing is off.
pub fn inject(headers: &mut HeaderMap) {
    if !super::enabled() {
        return;
    }
    let context = tracing::Span::current().context();
    headers.remove("traceparent");
    headers.remove("tracestate");
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeadersOut(headers));
    });
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeadersOut<'a>(&'a mut HeaderMap);

impl Injector for HeadersOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// `params._meta` as a carrier. Its values are JSON strings; anything else is no context.
struct Meta<'a>(&'a RawJson);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key)?;
        // Only plain (unescaped) strings are valid trace context. The propagator wants a `&str`
        // that outlives `value`, so the same bytes are borrowed from the carrier itself.
        let inner = value
            .as_text()
            .strip_prefix('"')?
            .strip_suffix('"')
            .filter(|inner| !inner.contains('\\'))?;
        let start = self.0.as_text().find(inner)?;
        Some(&self.0.as_text()[start..start + inner.len()])
    }

    fn keys(&self) -> Vec<&str> {
        Vec::new()
    }
}
