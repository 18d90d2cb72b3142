use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use countersign_policy::{Catalog, Explanation, PinnedTool, Policy, Risk};
use serde_json::Value;
use tokio::time::Instant;
use tracing::{info, warn};

use super::catalog_bound::bound_listing;
use crate::config::Limits;
use crate::metrics::ProxyMetrics;

/// How long a listing answers "is this tool known?" before an unknown tool triggers another.
const RELIST_AFTER: Duration = Duration::from_secs(10);

/// Refused names a log line shows; the metric has the count.
const REFUSED_NAMES_LOGGED: usize = 5;

/// The pinned catalog with its refresh bookkeeping.
#[derive(Debug)]
pub struct CatalogState {
    pins: RwLock<Pins>,
    /// Most tools pinned per upstream ([`bound_listing`]).
    max_tools_per_upstream: usize,
    metrics: ProxyMetrics,
    /// One listing at a time per upstream, so a burst of calls to an unknown tool costs one.
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// What the bound did to the last listing of each upstream (tools left unpinned, tools made
    /// suspicious): every client's `tools/list` repeats it, and a warning is worth giving only
    /// when it changes.
    refused: Mutex<HashMap<String, (usize, usize)>>,
}

/// What every call reads, under one lock: each call asks all three, and a lock taken on every
/// call is a counter every connection worker writes (three locks were three such counters).
#[derive(Debug, Default)]
struct Pins {
    catalog: Catalog,
    /// Upstreams that announced `notifications/tools/list_changed` since their last listing.
    stale: HashSet<String>,
    /// When each upstream was last listed (successfully or not): a tool still unknown right
    /// after a listing is not worth listing again on every call.
    listed: HashMap<String, Instant>,
}

impl Default for CatalogState {
    fn default() -> Self {
        Self::new(
            Limits::default().max_tools_per_upstream.get(),
            ProxyMetrics::unregistered(),
        )
    }
}

impl CatalogState {
    /// An empty catalog that pins at most `max_tools_per_upstream` tools per upstream.
    pub fn new(max_tools_per_upstream: usize, metrics: ProxyMetrics) -> Self {
        Self {
            pins: RwLock::default(),
            max_tools_per_upstream,
            metrics,
            refreshing: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    pub fn get(&self, upstream: &str, tool: &str) -> Option<PinnedTool> {
        self.read().catalog.get(upstream, tool).cloned()
    }

    /// The pinned tool when the catalog can answer without listing the upstream again:
    /// `Some(pin)` (the pin, or `None` for a tool still unknown right after a listing), or
    /// `None` when the upstream must be listed first.
    pub fn answer(&self, upstream: &str, tool: &str, now: Instant) -> Option<Option<PinnedTool>> {
        let pins = self.read();
        if pins.stale.contains(upstream) {
            return None;
        }
        let pin = pins.catalog.get(upstream, tool).cloned();
        let listed_recently = || {
            pins.listed
                .get(upstream)
                .is_some_and(|at| now.saturating_duration_since(*at) < RELIST_AFTER)
        };
        (pin.is_some() || listed_recently()).then_some(pin)
    }

    pub fn pinned_risks(&self, upstream: &str) -> Vec<(String, Risk)> {
        self.read().catalog.pinned_risks(upstream)
    }

    pub fn raise(&self, upstream: &str, tool: &str, risk: Risk) -> bool {
        self.write().catalog.raise(upstream, tool, risk)
    }

    pub fn mark_stale(&self, upstream: &str) {
        self.write().stale.insert(upstream.to_owned());
    }

    pub fn mark_listed(&self, upstream: &str, now: Instant) {
        self.write().listed.insert(upstream.to_owned(), now);
    }

    fn read(&self) -> RwLockReadGuard<'_, Pins> {
        self.pins.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Pins> {
        self.pins.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pins one complete listing, within the upstream's bound: new tools past it stay unpinned
    /// (and so `unknown`), pinned ones are never evicted.
    pub fn observe(&self, upstream: &str, tools: &[Value]) {
        let (events, bounded, pinned) = {
            let mut pins = self.write();
            let catalog = &mut pins.catalog;
            let bounded = bound_listing(
                tools,
                |name| catalog.get(upstream, name).is_some(),
                catalog.tools(upstream).count(),
                self.max_tools_per_upstream,
            );
            let events = catalog.observe(upstream, &bounded.tools);
            let pinned = catalog.tools(upstream).count();
            pins.stale.remove(upstream);
            (events, bounded, pinned)
        };
        for event in events {
            info!(?event, "tool catalog changed");
        }
        let outcome = (bounded.refused.len(), bounded.collisions.len());
        let before = self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(upstream.to_owned(), outcome);
        let news = before != Some(outcome);
        if news && !bounded.collisions.is_empty() {
            warn!(upstream = %upstream, tools = ?bounded.collisions, "listed tools differ only by case from tools the full catalog could not pin; pinned them as suspicious");
        }
        if news && !bounded.refused.is_empty() {
            let shown = &bounded.refused[..bounded.refused.len().min(REFUSED_NAMES_LOGGED)];
            warn!(
                upstream = %upstream,
                max_tools_per_upstream = self.max_tools_per_upstream,
                refused = bounded.refused.len(),
                first = ?shown,
                "tool catalog full; new tools not pinned, calls to them are treated as unknown"
            );
        }
        self.metrics
            .record_catalog(upstream, pinned, bounded.refused.len());
    }

    /// How `policy` treats each tool of `tools` against the pins held for `upstream`
    /// ([`Policy::explain_pinned`]): for a listing just pinned here, without pinning it again.
    pub fn explain(&self, policy: &Policy, upstream: &str, tools: &[Value]) -> Vec<Explanation> {
        policy.explain_pinned(upstream, tools, &self.read().catalog)
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

    fn bounded(max: usize) -> CatalogState {
        CatalogState::new(max, ProxyMetrics::unregistered())
    }

    fn destructive(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}})
    }

    #[test]
    fn a_full_catalog_leaves_new_tools_unpinned_and_keeps_every_pinned_one() {
        let state = bounded(2);
        state.observe("store", &[tool("list_products"), tool("get_order")]);
        // The upstream drops one tool and offers new ones: the removed pin still counts.
        state.observe(
            "store",
            &[tool("list_products"), tool("delete_all"), tool("export")],
        );

        assert!(state.get("store", "list_products").is_some());
        let removed = state.get("store", "get_order").expect("never evicted");
        assert_eq!(
            removed.effective_risk(),
            Risk::Unknown,
            "a removed tool stays pinned, at unknown"
        );
        assert!(
            state.get("store", "delete_all").is_none(),
            "not pinned, so classified unknown"
        );
        assert!(state.get("store", "export").is_none());
        assert_eq!(state.pinned_risks("store").len(), 2);
    }

    #[test]
    fn a_full_catalog_still_raises_the_risk_of_a_pinned_tool() {
        let state = bounded(1);
        state.observe("store", &[tool("get_order")]);
        state.observe("store", &[destructive("get_order"), tool("other")]);
        let pin = state.get("store", "get_order").expect("pinned");
        assert_eq!(pin.effective_risk(), Risk::Destructive);
    }

    #[test]
    fn a_name_the_full_catalog_refused_still_makes_its_case_twin_suspicious() {
        let state = bounded(1);
        state.observe("store", &[tool("get_order")]);
        state.observe("store", &[tool("get_order"), destructive("GET_ORDER")]);
        let pin = state.get("store", "get_order").expect("pinned");
        assert_eq!(pin.status, countersign_policy::PinStatus::Suspicious);
        assert_eq!(pin.effective_risk(), Risk::Unknown);
        assert!(state.get("store", "GET_ORDER").is_none());
    }

    #[test]
    fn catalog_size_and_refusals_are_measured() {
        let mut registry = prometheus_client::registry::Registry::default();
        let state = CatalogState::new(1, ProxyMetrics::register(&mut registry));
        state.observe("store", &[tool("a"), tool("b"), tool("c")]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains("countersign_catalog_tools{upstream=\"store\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("countersign_catalog_pins_refused_total{upstream=\"store\"} 2"),
            "{text}"
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
