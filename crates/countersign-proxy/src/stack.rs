//! Composes the gateway's request path. Outermost first; each layer's comment says why it sits
//! where it does.

use std::sync::Arc;

use tower::ServiceBuilder;

use crate::config::ProxyConfig;
use crate::endpoint::{McpEndpoints, RouteTarget};
use crate::forward::UpstreamClient;
use crate::gate::Gate;
use crate::hardening::{Hardening, HardeningLayer, HardeningRules};
use crate::metrics::ProxyMetrics;

/// The full service for one listener.
pub type GatewayService = Hardening<McpEndpoints>;

/// Builds the request path for `config`. Upstream names become `'static` metric labels once, at
/// start-up, so recording a request never allocates.
pub fn gateway_service(
    config: &ProxyConfig,
    metrics: ProxyMetrics,
    gate: Arc<Gate>,
) -> GatewayService {
    let labels: Vec<&'static str> = config
        .routes
        .iter()
        .map(|route| &*Box::leak(route.upstream.name.clone().into_boxed_str()))
        .collect();
    let rules = HardeningRules {
        routes: config
            .routes
            .iter()
            .zip(&labels)
            .map(|(r, l)| (r.path.clone(), *l))
            .collect(),
        origins: config.origins.clone(),
        hosts: config.hosts.clone(),
        max_body_bytes: config.limits.max_body_bytes.get(),
        metrics: metrics.clone(),
    };
    let targets = config
        .routes
        .iter()
        .zip(labels)
        .map(|(route, label)| RouteTarget {
            upstream: route.upstream.clone(),
            label,
            client: UpstreamClient::new(&route.upstream),
        })
        .collect();

    ServiceBuilder::new()
        // Framing, routing, Host and Origin checks come first: nothing may read the body of a
        // request that is smuggled, misrouted, or sent by a foreign page.
        .layer(HardeningLayer::new(Arc::new(rules)))
        // Innermost: bounded body read, the one strict parse, the approval gate judging that
        // parsed value, and forwarding of its re-serialization — one owner, so what is judged
        // and what is forwarded can never differ.
        .service(McpEndpoints::new(
            targets,
            config.limits.clone(),
            metrics,
            gate,
        ))
}
