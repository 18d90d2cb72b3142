use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use super::{AuditRecord, AuditSink, CallAudit, ForwardReply, timestamp};
use crate::body::ResponseBody;
use crate::clock::Clock;
use crate::route::RouteTarget;

/// What is needed to write one outcome line.
pub(super) struct Pending {
    pub(super) calls: Vec<CallAudit>,
    pub(super) upstream: Arc<RouteTarget>,
    pub(super) sink: AuditSink,
    pub(super) clock: Arc<dyn Clock>,
}

pin_project! {
    /// The inner future; when it is ready, the call's outcome line is written.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        pending: Option<Pending>,
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, pending: Option<Pending>) -> Self {
        Self { inner, pending }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("audited", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ForwardReply, E>>,
{
    type Output = Result<Response<ResponseBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let Some(pending) = this.pending.take() {
            let outcome = match &result {
                Ok((_, outcome)) => outcome.0,
                Err(_) => "internal_error",
            };
            for call in &pending.calls {
                record_outcome(&pending, call, outcome);
            }
        }
        Poll::Ready(result.map(|(response, _)| response))
    }
}

fn record_outcome(pending: &Pending, audit: &CallAudit, outcome: &str) {
    let latency = pending.clock.now().duration_since(audit.started);
    let upstream = &pending.upstream.upstream.name;
    let trace = crate::trace::TraceIds::current();
    pending.sink.record(&AuditRecord {
        ts: timestamp(pending.clock.wall()),
        event: "outcome",
        principal: &audit.principal,
        upstream,
        method: audit.method,
        tool: &audit.target,
        session: audit.session.as_deref(),
        risk: Some(audit.risk),
        rule: Some(&audit.rule),
        action: Some(audit.action),
        channel: audit.channel,
        jti: audit.jti.as_deref(),
        args_hash: audit.args_hash.as_deref(),
        outcome,
        latency_ms: Some(latency.as_secs_f64() * 1000.0),
        trace_id: trace.as_ref().map(crate::trace::TraceIds::trace_id),
        span_id: trace.as_ref().map(crate::trace::TraceIds::span_id),
        arguments: None,
    });
}
