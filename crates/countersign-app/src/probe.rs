//! The start-up line for each route: where it goes and whether the upstream answered. An
//! upstream that cannot be started, reached or verified is named with the cause at once, not on
//! a user's first call; the gateway still starts, since the upstream may come up later.

use countersign_proxy::config::Transport;
use countersign_proxy::route::Route;
use countersign_proxy::upstream::probe;
use tracing::{info, warn};

/// Where `route` forwards to, as the operator configured it.
fn target(route: &Route) -> String {
    let upstream = &route.upstream;
    match &upstream.transport {
        Transport::Stdio(command) => {
            let mut line = command.program.clone();
            for arg in &command.args {
                line.push(' ');
                line.push_str(arg);
            }
            line
        }
        Transport::StreamableHttp | Transport::LegacySse => upstream.url.to_string(),
    }
}

/// Logs the route, probes its upstream once and logs the outcome.
pub(crate) async fn announce(route: Route) {
    let (path, name) = (route.path.as_str(), route.upstream.name.as_str());
    let kind = route.upstream.transport.kind();
    let target = target(&route);
    // Where 2024-11-05 HTTP+SSE clients open their sessions, or `off`.
    let legacy_sse = route.legacy.as_ref().map_or("off", |l| l.sse.as_str());
    info!(path, legacy_sse, upstream = name, kind, target, "route");
    match probe(&route.upstream, &route.client).await {
        Ok(()) => info!(upstream = name, kind, "upstream reached"),
        Err(error) => warn!(
            upstream = name,
            kind,
            target,
            %error,
            "upstream cannot be reached; its requests get this error until it can"
        ),
    }
}
