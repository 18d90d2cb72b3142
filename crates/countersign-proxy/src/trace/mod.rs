//! OpenTelemetry traces of the request path: one server span per MCP request, named and
//! attributed after the OpenTelemetry semantic conventions for MCP (`tools/call delete_file`,
//! `mcp.method.name`, `gen_ai.tool.name`, `jsonrpc.request.id`, `mcp.session.id`, …), plus the
//! gateway's own `countersign.*` attributes for what it decided.
//!
//! The span is a `tracing` span; `countersign-app` exports it over OTLP through
//! `tracing-opentelemetry` when an endpoint is configured and then calls [`enable`]. Until then
//! nothing here does any work: the layer instruments with a disabled span, the audit lines carry
//! no ids, and upstream requests get no `traceparent` of the gateway's (a client's own passes
//! through untouched, as every other header does).
//!
//! - [`RequestSpansLayer`] opens the span just below parse, where the method, id and tool are
//!   known, continuing the client's W3C `traceparent` (header, or the message's
//!   `params._meta.traceparent` as the MCP conventions and SEP-414 put it, which wins).
//! - [`record_decision`] adds what the approval and audit layers decided, where they write their
//!   audit lines, so the span and the audit trail cannot disagree.
//! - [`TraceIds::current`] gives the audit line its `trace_id` and `span_id`.
//! - [`inject`] sets the upstream request's `traceparent` to the gateway's span.

mod layer;
mod propagation;
mod service;

use std::sync::atomic::{AtomicBool, Ordering};

pub use layer::RequestSpansLayer;
pub use propagation::inject;
pub use service::RequestSpans;

use crate::audit::AuditRecord;

use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of the request spans; the app's exporter takes this target only.
pub const TARGET: &str = "countersign::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the request spans on, for the whole process: the app calls it once the exporter is set
/// up (the tracer provider and propagator are process-wide too).
pub fn enable() {
    ENABLED.store(true, Ordering::Release);
}

/// Whether request spans are exported; false unless [`enable`] was called.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The trace and span id of the current request span, as lower-case hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceIds {
    trace_id: [u8; 32],
    span_id: [u8; 16],
}

impl TraceIds {
    /// The ids of the span the current request runs in; `None` when tracing is off or the
    /// request has no span.
    pub fn current() -> Option<Self> {
        if !enabled() {
            return None;
        }
        let context = tracing::Span::current().context();
        let span = context.span();
        let ids = span.span_context();
        if !ids.is_valid() {
            return None;
        }
        let mut out = Self {
            trace_id: [b'0'; 32],
            span_id: [b'0'; 16],
        };
        hex(&ids.trace_id().to_bytes(), &mut out.trace_id);
        hex(&ids.span_id().to_bytes(), &mut out.span_id);
        Some(out)
    }

    pub fn trace_id(&self) -> &str {
        std::str::from_utf8(&self.trace_id).unwrap_or_default()
    }

    pub fn span_id(&self) -> &str {
        std::str::from_utf8(&self.span_id).unwrap_or_default()
    }
}

fn hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(byte >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// What the gateway decided about the call of the current request, as span attributes: the
/// audit sink calls it with every line it is given (whether or not audit lines are written), so
/// the span and the audit trail cannot disagree, and the last line of a call (its outcome) is
/// what the span keeps.
pub fn record_decision(line: &AuditRecord<'_>) {
    if !enabled() {
        return;
    }
    let span = tracing::Span::current();
    span.record("countersign.upstream", line.upstream);
    span.record("countersign.principal", line.principal);
    for (name, value) in [
        ("countersign.risk", line.risk),
        ("countersign.rule", line.rule),
        ("countersign.action", line.action),
        ("countersign.channel", line.channel),
    ] {
        if let Some(value) = value {
            span.record(name, value);
        }
    }
    let outcome = line.outcome;
    span.record("countersign.outcome", outcome);
    if let Some(code) = outcome.strip_prefix("rejected:") {
        // A refused call ended in error, as the conventions ask for a failed operation.
        let code = code.split('(').next().unwrap_or(code);
        span.record("error.type", code);
        span.record("otel.status_code", "ERROR");
    } else if outcome == "denied" {
        span.record("error.type", "denied");
        span.record("otel.status_code", "ERROR");
    } else if outcome == "upstream_error" || outcome == "internal_error" {
        span.record("error.type", outcome);
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests;
