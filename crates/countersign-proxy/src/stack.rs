//! Composes the gateway's request path, outermost first; each layer's comment says why it sits
//! where it does. `ARCHITECTURE.md` at the repository root walks through the same order.

use std::sync::Arc;

use countersign_store::PinShare;
use tower::ServiceBuilder;

use crate::approval::{ApprovalLayer, ApprovalSettings, Approvals, Approve};
use crate::audit::{AuditLayer, AuditOutcomes};
use crate::catalog::CatalogSync;
use crate::classify::{Classify, ClassifyLayer};
use crate::client_limit::{ClientLimit, ClientLimitLayer};
use crate::clock::Clock;
use crate::config::ProxyConfig;
use crate::discovery::{Discover, Discovery, DiscoveryLayer};
use crate::edits::ResponseEdits;
use crate::forward::Forwarder;
use crate::hardening::{Hardening, HardeningLayer, HardeningRules};
use crate::identity::{Identify, Identity, IdentityLayer};
use crate::legacy_clients::{LegacyClients, LegacyClientsLayer, LegacySettings};
use crate::limits::{LimitCalls, LimitCallsLayer};
use crate::metrics::ProxyMetrics;
use crate::parse::{Parse, ParseLayer};
use crate::relay::{QuietLimits, StreamSettings};
use crate::route::{Route, RouteTarget};
use crate::state::{CatalogState, PolicyHandle};
use crate::trace::{RequestSpans, RequestSpansLayer};
use crate::upstream::UpstreamClient;

/// Everything the request path shares across requests, built once by the app.
#[derive(Debug, Clone)]
pub struct Gateway {
    pub identity: Identity,
    pub policy: Arc<PolicyHandle>,
    pub catalog: Arc<CatalogState>,
    /// Pinned risks shared with the other replicas.
    pub pins: Arc<dyn PinShare>,
    pub approval: ApprovalSettings,
    pub metrics: ProxyMetrics,
    /// The routes of the listener, from [`routes`]; the app keeps clones to report each
    /// upstream's state and to stop local upstreams' processes on shutdown.
    pub routes: Vec<Route>,
}

/// The full service for one listener: the layers of [`gateway_service`], outermost first.
pub type GatewayService = Discover<
    Identify<
        Hardening<
            LegacyClients<
                ClientLimit<
                    Parse<RequestSpans<LimitCalls<Classify<Approve<AuditOutcomes<Forwarder>>>>>>,
                >,
            >,
        >,
    >,
>;

/// Builds the request path for `config`.
pub fn gateway_service(config: &ProxyConfig, gateway: Gateway) -> GatewayService {
    let routes = gateway.routes;
    let clock = gateway.approval.clock.clone();
    let discovery = Discovery::new(&gateway.identity, &routes, &config.hosts, clock.clone());
    let max_event_bytes = config.limits.max_sse_event_bytes.get();
    let catalog = CatalogSync {
        state: gateway.catalog.clone(),
        pins: gateway.pins.clone(),
        clock: clock.clone(),
        max_event_bytes,
    };
    let edits = ResponseEdits {
        policy: gateway.policy.clone(),
        catalog: catalog.clone(),
        clock: clock.clone(),
    };
    let audit = gateway.approval.audit.clone();
    let rate_limits = gateway.approval.rate_limits.clone();
    let approvals = Arc::new(Approvals::new(gateway.approval));
    let metrics = gateway.metrics;
    let quiet = QuietLimits {
        keep_alive: config.connections.sse_keep_alive,
        idle_timeout: config.connections.sse_idle_timeout,
    };
    let client_limit = ClientLimitLayer::new(&config.connections, metrics.clone());
    let legacy = LegacySettings {
        client_limit: client_limit.clone(),
        quiet,
        max_sessions: config.connections.max_open.get(),
        max_message_bytes: max_event_bytes,
        clock: clock.clone(),
        metrics: metrics.clone(),
    };
    let hardening = HardeningRules {
        routes,
        origins: config.origins.clone(),
        hosts: config.hosts.clone(),
        max_body_bytes: config.limits.max_body_bytes.get(),
        metrics: metrics.clone(),
    };

    ServiceBuilder::new()
        // Discovery documents are public and fetched before a client has any credential, so
        // they are served first of all; on the way out, upstreams' 401s are pointed at them.
        .layer(DiscoveryLayer::new(discovery))
        // Who is calling, first of all: a request whose credential fails costs one verification
        // and a 401, reaches no session, body read or upstream, and takes no client slot. Legacy
        // clients' GETs and POSTs pass here like any other request, so they get the very same
        // checks.
        .layer(IdentityLayer::new(gateway.identity))
        // Framing, routing, Host and Origin checks come first: nothing may read the body of a
        // request that is smuggled, misrouted, or sent by a foreign page.
        .layer(HardeningLayer::new(Arc::new(hardening)))
        // Turns the messages of 2024-11-05 HTTP+SSE clients into Streamable HTTP requests sent
        // down everything below, so they get the very same gate; after hardening, which has
        // routed them and checked their framing, Host and Origin.
        .layer(LegacyClientsLayer::new(legacy))
        // Before the body is read, so a client past its limit costs a refusal and nothing more;
        // after hardening, so a smuggled or misrouted request never takes a slot.
        .layer(client_limit)
        // The one bounded body read and strict parse; below it, nobody sees the client's bytes.
        .layer(ParseLayer::new(config.limits.clone(), metrics.clone()))
        // One trace span per request, where method, id and tool are known; above everything that
        // decides, so their audit lines carry its ids and the upstream request its traceparent.
        .layer(RequestSpansLayer::new())
        // The `calls` rate limit keys on the principal and the route, not on risk: refusing
        // before classification spares a flood policy conditions and tool listings.
        .layer(LimitCallsLayer::new(rate_limits, metrics.clone()))
        // Policy and pinned catalog judge the parsed value; may list the upstream's tools.
        .layer(ClassifyLayer::new(gateway.policy, catalog, metrics.clone()))
        // Answers holds, denials and refusals itself; lets through only a Cleared request.
        .layer(ApprovalLayer::new(approvals))
        // Below approval, so it sees exactly the calls that go upstream, however they ended.
        .layer(AuditLayer::new(audit, clock.clone()))
        // Innermost: serializes the Cleared value, relays the answer through the edits.
        .service(Forwarder::new(
            Arc::new(edits),
            metrics,
            StreamSettings {
                max_event_bytes,
                quiet,
                clock,
            },
        ))
}

/// The routes of `config`, each with the client that reaches its upstream (stdio upstreams
/// start no process until a client needs one). Upstream names become `'static` metric labels
/// once, at start-up, so recording a request never allocates.
pub fn routes(config: &ProxyConfig, metrics: &ProxyMetrics, clock: &Arc<dyn Clock>) -> Vec<Route> {
    config
        .routes
        .iter()
        .map(|route| {
            let label: &'static str = Box::leak(route.upstream.name.clone().into_boxed_str());
            Route(Arc::new(RouteTarget {
                path: route.path.clone(),
                upstream: route.upstream.clone(),
                label,
                client: UpstreamClient::for_upstream(&route.upstream, label, metrics, clock),
                legacy: route.legacy.clone(),
            }))
        })
        .collect()
}
