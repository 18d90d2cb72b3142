use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use countersign_policy::{Catalog, PinnedTool, Risk};
use serde_json::Value;
use tokio::time::Instant;
use tracing::info;

/// How long a listing answers "is this tool known?" before an unknown tool triggers another.
const RELIST_AFTER: Duration = Duration::from_secs(10);

/// The pinned catalog with its refresh bookkeeping.
#[derive(Debug, Default)]
pub struct CatalogState {
    catalog: RwLock<Catalog>,
    /// Upstreams that announced `notifications/tools/list_changed` since their last listing.
    stale: Mutex<HashSet<String>>,
    /// One listing at a time per upstream, so a burst of calls to an unknown tool costs one.
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// When each upstream was last listed (successfully or not): a tool still unknown right
    /// after a listing is not worth listing again on every call.
    listed: Mutex<HashMap<String, Instant>>,
}

impl CatalogState {
    pub fn get(&self, upstream: &str, tool: &str) -> Option<PinnedTool> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(upstream, tool)
            .cloned()
    }

    /// The pinned tool when the catalog can answer without listing the upstream again:
    /// `Some(pin)` (the pin, or `None` for a tool still unknown right after a listing), or
    /// `None` when the upstream must be listed first.
    pub fn answer(&self, upstream: &str, tool: &str, now: Instant) -> Option<Option<PinnedTool>> {
        if self.is_stale(upstream) {
            return None;
        }
        let pin = self.get(upstream, tool);
        (pin.is_some() || self.listed_recently(upstream, now)).then_some(pin)
    }

    pub fn pinned_risks(&self, upstream: &str) -> Vec<(String, Risk)> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .pinned_risks(upstream)
    }

    pub fn raise(&self, upstream: &str, tool: &str, risk: Risk) -> bool {
        self.catalog
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .raise(upstream, tool, risk)
    }

    pub fn mark_stale(&self, upstream: &str) {
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(upstream.to_owned());
    }

    fn listed_recently(&self, upstream: &str, now: Instant) -> bool {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(upstream)
            .is_some_and(|at| now.saturating_duration_since(*at) < RELIST_AFTER)
    }

    pub fn mark_listed(&self, upstream: &str, now: Instant) {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(upstream.to_owned(), now);
    }

    fn is_stale(&self, upstream: &str) -> bool {
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(upstream)
    }

    /// Pins one complete listing.
    pub fn observe(&self, upstream: &str, tools: &[Value]) {
        let events = self
            .catalog
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .observe(upstream, tools);
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(upstream);
        for event in events {
            info!(?event, "tool catalog changed");
        }
    }

    /// The lock held while listing `upstream`.
    pub fn refresh_lock(&self, upstream: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.refreshing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(upstream.to_owned())
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::clock::{Clock, SystemClock};

    fn tool(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}})
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_tool_is_answered_from_a_fresh_listing_then_listed_again() {
        let state = CatalogState::default();
        let start = SystemClock.now();
        assert!(
            state.answer("store", "nope", start).is_none(),
            "never listed"
        );
        state.observe("store", &[tool("list_products")]);
        state.mark_listed("store", start);
        assert!(matches!(
            state.answer("store", "list_products", start),
            Some(Some(_))
        ));
        assert!(matches!(state.answer("store", "nope", start), Some(None)));
        tokio::time::advance(RELIST_AFTER).await;
        assert!(
            state.answer("store", "nope", SystemClock.now()).is_none(),
            "listing is old"
        );
        assert!(
            state
                .answer("store", "list_products", SystemClock.now())
                .is_some()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn list_changed_makes_even_known_tools_wait_for_a_listing() {
        let state = CatalogState::default();
        let now = SystemClock.now();
        state.observe("store", &[tool("list_products")]);
        state.mark_listed("store", now);
        state.mark_stale("store");
        assert!(state.answer("store", "list_products", now).is_none());
        state.observe("store", &[tool("list_products")]);
        assert!(state.answer("store", "list_products", now).is_some());
    }
}
