//! Keeping the pinned catalog current: when a call names a tool the catalog cannot answer for
//! (never seen, or the upstream announced `list_changed`), the upstream's tools are listed —
//! once per upstream at a time, with the caller's session — and pinned; pinned risks are then
//! shared with the other replicas. The catalog itself ([`CatalogState`]) does no I/O; this is
//! its only writer that does.

use std::sync::Arc;

use countersign_jsonrpc::mcp::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use countersign_jsonrpc::message::Params;
use countersign_jsonrpc::{ObjectWriter, RawJson};
use countersign_policy::{PinnedTool, Risk};
use countersign_store::PinShare;
use http::HeaderMap;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::route::RouteTarget;
use crate::state::CatalogState;
use crate::upstream::{CallerContext, list_tools};

/// Lists and pins upstream tools on demand, and shares pins across replicas.
#[derive(Debug, Clone)]
pub struct CatalogSync {
    pub state: Arc<CatalogState>,
    pub pins: Arc<dyn PinShare>,
    pub clock: Arc<dyn Clock>,
    /// Largest SSE event accepted in a listing's answer.
    pub max_event_bytes: usize,
}

impl CatalogSync {
    /// The pinned tool if the catalog can say without listing: see [`CatalogState::answer`].
    pub fn cached(&self, upstream: &str, tool: &str) -> Option<Option<PinnedTool>> {
        self.state.answer(upstream, tool, self.clock.now())
    }

    /// The pinned definition of `tool`, listing the upstream's tools first when the catalog
    /// cannot answer. Listing failures leave the tool unknown, which is the strictest class.
    pub async fn pinned_tool(
        &self,
        route: &RouteTarget,
        headers: &HeaderMap,
        stateless_meta: Option<RawJson>,
        tool: &str,
    ) -> Option<PinnedTool> {
        let upstream = &route.upstream.name;
        if let Some(answer) = self.cached(upstream, tool) {
            return answer;
        }
        let lock = self.state.refresh_lock(upstream);
        let _guard = lock.lock().await;
        // Another request may have listed while this one waited.
        if let Some(answer) = self.cached(upstream, tool) {
            return answer;
        }
        let caller = CallerContext {
            headers: headers.clone(),
            stateless_meta,
        };
        let listed = list_tools(
            &route.upstream,
            &route.client,
            &caller,
            self.max_event_bytes,
        )
        .await;
        // Recorded whether or not it worked: a failing upstream is retried after a pause, not
        // on every call.
        self.state.mark_listed(upstream, self.clock.now());
        match listed {
            Ok(tools) => {
                self.state.observe(upstream, &tools);
                // Before this listing decides anything, adopt what other replicas pinned.
                self.share_pins(upstream).await;
            }
            Err(error) => {
                warn!(%error, upstream = %upstream, "could not list tools; treating the tool as unknown")
            }
        }
        self.state.get(upstream, tool)
    }

    /// Raises the shared pins with this replica's and adopts any higher ones. A failure keeps
    /// the local pins: they are never lower than what this replica saw itself.
    pub async fn share_pins(&self, upstream: &str) {
        let local: Vec<(String, u8)> = self
            .state
            .pinned_risks(upstream)
            .into_iter()
            .map(|(tool, risk)| (tool, risk_ordinal(risk)))
            .collect();
        if local.is_empty() {
            return;
        }
        match self.pins.raise(upstream, &local).await {
            Ok(shared) => {
                for (tool, ordinal) in shared {
                    if let Some(risk) = risk_from_ordinal(ordinal)
                        && self.state.raise(upstream, &tool, risk)
                    {
                        info!(upstream = %upstream, tool = %tool, risk = risk.as_str(), "adopted a higher risk pinned by another replica");
                    }
                }
            }
            Err(error) => warn!(%error, upstream = %upstream, "could not share pinned risks"),
        }
    }
}

/// The `_meta` a 2026-07-28 request carries for the gateway's own requests on its behalf: its
/// protocol version and client capabilities, never a progress token or the confirmation.
pub fn stateless_meta(params: Option<&Params>) -> Option<RawJson> {
    let meta = params?.get("_meta")?;
    let version = meta.get(META_PROTOCOL_VERSION)?;
    let mut out = ObjectWriter::new();
    out.push(META_PROTOCOL_VERSION, &version);
    if let Some(capabilities) = meta.get(META_CLIENT_CAPABILITIES) {
        out.push(META_CLIENT_CAPABILITIES, &capabilities);
    }
    Some(out.finish())
}

fn risk_ordinal(risk: Risk) -> u8 {
    match risk {
        Risk::Read => 0,
        Risk::Write => 1,
        Risk::Destructive => 2,
        Risk::Unknown => 3,
    }
}

fn risk_from_ordinal(ordinal: u8) -> Option<Risk> {
    Some(match ordinal {
        0 => Risk::Read,
        1 => Risk::Write,
        2 => Risk::Destructive,
        3 => Risk::Unknown,
        _ => return None,
    })
}
