//! Prometheus metrics of the request path. Label values are `&'static str` so recording a request
//! never allocates, and the two families every request records find their metrics by where
//! those values live (`by_address`); decisions, labelled with policy rule names, find their
//! counters from borrowed values (`decisions`), and only refusals still build owned labels.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use by_address::{Address, ByAddress, StaticLabels, address_of};
use decisions::DecisionCounters;

mod by_address;
mod decisions;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Upstream name of the route.
    pub upstream: &'static str,
    /// JSON-RPC method for POSTs (`other` for anything unknown), or `GET` / `DELETE`.
    pub method: &'static str,
    /// `forwarded`, `refused`, `upstream_error` or `internal_error`.
    pub outcome: &'static str,
}

impl StaticLabels<3> for RequestLabels {
    fn address(&self) -> Address<3> {
        [
            address_of(self.upstream),
            address_of(self.method),
            address_of(self.outcome),
        ]
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub upstream: &'static str,
}

impl StaticLabels<1> for UpstreamLabels {
    fn address(&self) -> Address<1> {
        [address_of(self.upstream)]
    }
}

/// Handles to every metric the proxy records; cheap to clone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// `consumed`, `replayed` or `error`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// Which limit was hit: `pending_questions_per_principal`, `pending_questions_per_session`,
    /// `rate_calls`, `rate_held`, `rate_questions`, `connections`, `requests_per_client`,
    /// `in_flight_body_bytes`, `sse_idle_timeout`, `upstream_instances` (a local upstream at
    /// `processes.max`), `upstream_queue` (a session's queue of server messages full, its oldest
    /// dropped), `upstream_stream_stalled` (a client too slow to read its stream from a shared
    /// instance lost it), `legacy_sessions`, `legacy_idle_timeout`.
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateStoreLabels {
    /// What the limit did instead: `local` (this replica's buckets decided) or `refused`.
    pub fallback: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceStartLabels {
    pub upstream: &'static str,
    /// `started` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceExitLabels {
    pub upstream: &'static str,
    /// `stopped` (the gateway ended it: session ended, idle, shutdown) or `crashed` (it ended
    /// on its own).
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassthroughLabels {
    pub upstream: &'static str,
    /// `splice` (socket to socket in the kernel) or `copy` (the system refused to splice).
    pub by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutOfBandLabels {
    /// How the link reached the person: `url_elicitation`, `form_elicitation`,
    /// `input_required_url`, `input_required_form` or `held_result`.
    pub link: &'static str,
    /// `opened`, or `failed` (the approval page could not record it; the call was refused).
    pub outcome: &'static str,
}

/// Labels of one gated call's decision. Owned: the rule names come from the policy file (a
/// bounded set, like the upstreams), and the other values are the gateway's own literals.
/// Principals, tools and arguments are never labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub upstream: String,
    /// The policy's action: `allow`, `confirm` or `deny`.
    pub action: String,
    /// The approval channel (`token`, `elicitation`, `input_required`, `out_of_band`…), or
    /// `none` when the call was not held.
    pub channel: String,
    /// The policy rule that decided.
    pub rule: String,
    /// What the gateway did: `allowed`, `held`, `denied`, `previewed`…
    pub decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub upstream: String,
    /// The refusal code of the audit line's `rejected:<code>`: `invalid_token`, `replayed`,
    /// `not_approved`, `rate_limited`, `store_unavailable`, `unsafe_arguments`…
    pub code: String,
}

/// Catalog metrics are recorded per listing, not per request, so the upstream name is owned.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CatalogLabels {
    pub upstream: String,
}

/// The gateway's metric families. Cloned into every layer and into requests' futures, so a
/// clone is one reference count, not one per family.
#[derive(Debug, Clone)]
pub struct ProxyMetrics(Arc<Families>);

impl std::ops::Deref for ProxyMetrics {
    type Target = Families;

    fn deref(&self) -> &Families {
        &self.0
    }
}

#[derive(Debug)]
pub struct Families {
    requests: ByAddress<RequestLabels, Counter, fn() -> Counter, 3>,
    limit_hits: Family<LimitLabels, Counter>,
    rate_store_fallbacks: Family<RateStoreLabels, Counter>,
    sessions_forgotten: Counter,
    out_of_band: Family<OutOfBandLabels, Counter>,
    upstream_latency: ByAddress<UpstreamLabels, Histogram, fn() -> Histogram, 1>,
    open_streams: Family<UpstreamLabels, Gauge>,
    legacy_sessions: Family<UpstreamLabels, Gauge>,
    store_latency: Family<StoreLabels, Histogram>,
    open_connections: Gauge,
    in_flight_body_bytes: Gauge,
    catalog_tools: Family<CatalogLabels, Gauge>,
    catalog_pins_refused: Family<CatalogLabels, Counter>,
    instances: Family<UpstreamLabels, Gauge>,
    instance_starts: Family<InstanceStartLabels, Counter>,
    instance_exits: Family<InstanceExitLabels, Counter>,
    decisions: DecisionCounters,
    refusals: Family<RefusalLabels, Counter>,
    passthrough: Family<PassthroughLabels, Counter>,
}

impl ProxyMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "countersign_requests",
            "Requests on MCP endpoints by upstream, method and outcome",
            requests.clone(),
        );
        let upstream_latency = Family::<UpstreamLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "countersign_upstream_response_seconds",
            "Time from sending a request upstream to its response headers",
            upstream_latency.clone(),
        );
        let open_streams = Family::<UpstreamLabels, Gauge>::default();
        registry.register(
            "countersign_open_streams",
            "Server-Sent Event streams currently relayed to clients",
            open_streams.clone(),
        );
        let legacy_sessions = Family::<UpstreamLabels, Gauge>::default();
        registry.register(
            "countersign_legacy_sessions",
            "Sessions of 2024-11-05 HTTP+SSE clients currently open, by upstream",
            legacy_sessions.clone(),
        );
        let store_latency = Family::<StoreLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "countersign_replay_store_seconds",
            "Time to consume a confirmation in the replay store, by outcome (error: refused, fail closed)",
            store_latency.clone(),
        );
        let limit_hits = Family::<LimitLabels, Counter>::default();
        registry.register(
            "countersign_limit_hits",
            "Requests refused because they would pass a configured limit, by limit",
            limit_hits.clone(),
        );
        let rate_store_fallbacks = Family::<RateStoreLabels, Counter>::default();
        registry.register(
            "countersign_rate_limit_store_fallbacks",
            "Rate-limit checks decided without the shared store (it failed, or failed under a second ago), by how",
            rate_store_fallbacks.clone(),
        );
        let sessions_forgotten = Counter::default();
        registry.register(
            "countersign_sessions_forgotten",
            "Sessions that could elicit, forgotten because the session book was full; their calls now get the token channel",
            sessions_forgotten.clone(),
        );
        let out_of_band = Family::<OutOfBandLabels, Counter>::default();
        registry.register(
            "countersign_out_of_band_requests",
            "Held calls opened on the approval page, by how the link reached the person and outcome",
            out_of_band.clone(),
        );
        let open_connections = Gauge::default();
        registry.register(
            "countersign_open_connections",
            "Connections currently open on the MCP listener",
            open_connections.clone(),
        );
        let in_flight_body_bytes = Gauge::default();
        registry.register(
            "countersign_in_flight_body_bytes",
            "Request body bytes being read or held at once (counted against limits.max_in_flight_body_bytes)",
            in_flight_body_bytes.clone(),
        );
        let catalog_tools = Family::<CatalogLabels, Gauge>::default();
        registry.register(
            "countersign_catalog_tools",
            "Tools pinned in the catalog per upstream, removed and suspicious ones included",
            catalog_tools.clone(),
        );
        let catalog_pins_refused = Family::<CatalogLabels, Counter>::default();
        registry.register(
            "countersign_catalog_pins_refused",
            "Listed tools not pinned because their upstream has limits.max_tools_per_upstream pinned already; calls to them are unknown",
            catalog_pins_refused.clone(),
        );
        let instances = Family::<UpstreamLabels, Gauge>::default();
        registry.register(
            "countersign_upstream_instances",
            "Instances of local upstreams alive (stdio processes, legacy SSE connections), per upstream",
            instances.clone(),
        );
        let instance_starts = Family::<InstanceStartLabels, Counter>::default();
        registry.register(
            "countersign_upstream_instance_starts",
            "Attempts to start an instance of a local upstream (spawn a stdio process, open a legacy SSE connection), by outcome",
            instance_starts.clone(),
        );
        let instance_exits = Family::<InstanceExitLabels, Counter>::default();
        registry.register(
            "countersign_upstream_instance_exits",
            "Instances of local upstreams that ended, by cause (stopped by the gateway, or crashed)",
            instance_exits.clone(),
        );
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "countersign_decisions",
            "Decisions on gated calls (tools/call, prompts/get, resources/read), by upstream, policy action, approval channel, rule and what the gateway did",
            decisions.clone(),
        );
        let refusals = Family::<RefusalLabels, Counter>::default();
        registry.register(
            "countersign_refusals",
            "Gated calls refused by the approval gate (bad or replayed token, not approved, rate limited…), by upstream and refusal code",
            refusals.clone(),
        );
        let passthrough = Family::<PassthroughLabels, Counter>::default();
        registry.register(
            "countersign_passthrough_answers",
            "Large upstream answers passed on unread, whole, by upstream and how (splice, or copy where the system refused to splice)",
            passthrough.clone(),
        );
        Self(Arc::new(Families {
            passthrough,
            requests: ByAddress::new(requests),
            decisions: DecisionCounters::new(decisions),
            refusals,
            limit_hits,
            rate_store_fallbacks,
            sessions_forgotten,
            out_of_band,
            upstream_latency: ByAddress::new(upstream_latency),
            open_streams,
            legacy_sessions,
            store_latency,
            open_connections,
            in_flight_body_bytes,
            catalog_tools,
            catalog_pins_refused,
            instances,
            instance_starts,
            instance_exits,
        }))
    }

    /// Metrics that go nowhere, for tests and tools that do not expose `/metrics`.
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    pub fn record_request(
        &self,
        upstream: &'static str,
        method: &'static str,
        outcome: &'static str,
    ) {
        let labels = RequestLabels {
            upstream,
            method,
            outcome,
        };
        self.requests.with(&labels, |counter| {
            counter.inc();
        });
    }

    /// Counts what one audit line of a gated call says: a refusal by its code, else a decision.
    /// `outcome` is the line's (`allowed`, `held`, `rejected:invalid_token`…).
    pub fn record_decision(
        &self,
        upstream: &str,
        event: &str,
        action: &str,
        channel: Option<&str>,
        rule: &str,
        outcome: &str,
    ) {
        if let Some(code) = outcome.strip_prefix("rejected:") {
            // `rate_limited(calls)`: the detail in brackets stays in the audit line.
            let code = code.split('(').next().unwrap_or(code);
            self.refusals
                .get_or_create(&RefusalLabels {
                    upstream: upstream.to_owned(),
                    code: code.to_owned(),
                })
                .inc();
        } else if event == "decision" {
            let channel = channel.unwrap_or("none");
            self.decisions
                .inc([upstream, action, channel, rule, outcome]);
        }
    }

    /// Counts one large answer passed on whole without the gateway reading it, `by` splice or
    /// copy.
    pub fn record_passthrough(&self, upstream: &'static str, by: &'static str) {
        self.passthrough
            .get_or_create(&PassthroughLabels { upstream, by })
            .inc();
    }

    /// Counts one request refused by `limit`.
    pub fn record_limit_hit(&self, limit: &'static str) {
        self.limit_hits.get_or_create(&LimitLabels { limit }).inc();
    }

    /// Counts one rate-limit check decided without the shared store, and how.
    pub fn record_rate_store_fallback(&self, fallback: &'static str) {
        self.rate_store_fallbacks
            .get_or_create(&RateStoreLabels { fallback })
            .inc();
    }

    /// Counts eliciting sessions the full session book forgot.
    pub fn record_sessions_forgotten(&self, count: usize) {
        self.sessions_forgotten.inc_by(count as u64);
    }

    /// Counts one held call opened (or not) on the approval page.
    pub fn record_out_of_band(&self, link: &'static str, outcome: &'static str) {
        self.out_of_band
            .get_or_create(&OutOfBandLabels { link, outcome })
            .inc();
    }

    pub fn observe_upstream_latency(&self, upstream: &'static str, elapsed: Duration) {
        self.upstream_latency
            .with(&UpstreamLabels { upstream }, |histogram| {
                histogram.observe(elapsed.as_secs_f64());
            });
    }

    pub fn observe_store(&self, outcome: &'static str, elapsed: Duration) {
        self.store_latency
            .get_or_create(&StoreLabels { outcome })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a stream as open until the returned guard is dropped.
    pub fn stream_opened(&self, upstream: &'static str) -> StreamGuard {
        let gauge = self
            .open_streams
            .get_or_create_owned(&UpstreamLabels { upstream });
        gauge.inc();
        StreamGuard { gauge }
    }

    /// Counts a legacy HTTP+SSE session as open until the returned guard is dropped.
    pub fn legacy_session_opened(&self, upstream: &'static str) -> StreamGuard {
        let gauge = self
            .legacy_sessions
            .get_or_create_owned(&UpstreamLabels { upstream });
        gauge.inc();
        StreamGuard { gauge }
    }

    /// Counts a connection as open until the returned guard is dropped.
    pub fn connection_opened(&self) -> ConnectionGuard {
        self.open_connections.inc();
        ConnectionGuard {
            gauge: self.open_connections.clone(),
        }
    }

    /// The gauge of request body bytes in flight, which the body budget keeps current.
    pub fn in_flight_body_bytes(&self) -> Gauge {
        self.in_flight_body_bytes.clone()
    }

    /// Records how many tools `upstream` has pinned, and how many more a listing could not pin.
    pub fn record_catalog(&self, upstream: &str, pinned: usize, refused: usize) {
        let labels = CatalogLabels {
            upstream: upstream.to_owned(),
        };
        self.catalog_tools
            .get_or_create(&labels)
            .set(i64::try_from(pinned).unwrap_or(i64::MAX));
        if refused > 0 {
            self.catalog_pins_refused
                .get_or_create(&labels)
                .inc_by(refused as u64);
        }
    }
}

impl ProxyMetrics {
    /// Counts an attempt to start an instance of `upstream`; a started one counts as alive
    /// until the returned guard is dropped.
    pub fn instance_started(&self, upstream: &'static str) -> InstanceGuard {
        self.instance_starts
            .get_or_create(&InstanceStartLabels {
                upstream,
                outcome: "started",
            })
            .inc();
        let gauge = self
            .instances
            .get_or_create_owned(&UpstreamLabels { upstream });
        gauge.inc();
        InstanceGuard { gauge }
    }

    /// Counts a failed attempt to start an instance of `upstream`.
    pub fn instance_start_failed(&self, upstream: &'static str) {
        self.instance_starts
            .get_or_create(&InstanceStartLabels {
                upstream,
                outcome: "failed",
            })
            .inc();
    }

    /// Counts an instance of `upstream` that ended, and why.
    pub fn instance_exited(&self, upstream: &'static str, crashed: bool) {
        let cause = if crashed { "crashed" } else { "stopped" };
        self.instance_exits
            .get_or_create(&InstanceExitLabels { upstream, cause })
            .inc();
    }
}

/// Decrements the live-instances gauge when the instance is gone.
#[derive(Debug)]
pub struct InstanceGuard {
    gauge: Gauge,
}

impl Drop for InstanceGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Decrements the open-connections gauge when the connection ends, however it ends.
#[derive(Debug)]
pub struct ConnectionGuard {
    gauge: Gauge,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~100 s: loopback sidecars and slow tools alike.
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

/// Decrements the open-streams (or legacy-sessions) gauge when the stream ends, however it ends.
#[derive(Debug)]
pub struct StreamGuard {
    gauge: Gauge,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Bounded metric label for a JSON-RPC method name: the MCP method itself (a `'static` name
/// from the protocol's method lists), or `other`.
pub fn method_label(method: &str) -> &'static str {
    use countersign_jsonrpc::mcp::{KNOWN_NOTIFICATION_METHODS, KNOWN_REQUEST_METHODS};
    KNOWN_REQUEST_METHODS
        .iter()
        .chain(KNOWN_NOTIFICATION_METHODS)
        .copied()
        .find(|known| *known == method)
        .unwrap_or("other")
}

/// Shared so the app can hand one registry to the admin listener.
pub type SharedRegistry = Arc<Registry>;

#[cfg(test)]
mod tests;
