//! The approval page's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `approved` or `denied`.
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// `bad_link`, `unknown`, `expired`, `already_decided`, `not_allowed`, `csrf`, `origin`,
    /// `unauthenticated`, `login_failed`, `store_error`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `delivered`, `failed` or `dropped` (queue full).
    pub outcome: &'static str,
}

/// Counters of the approval page; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PageMetrics {
    opened: Counter,
    decisions: Family<DecisionLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
    webhooks: Family<WebhookLabels, Counter>,
}

impl PageMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "countersign_approval_requests_opened",
            "Approval requests opened for the approval page",
            metrics.opened.clone(),
        );
        registry.register(
            "countersign_approval_decisions",
            "Decisions taken on the approval page, by decision",
            metrics.decisions.clone(),
        );
        registry.register(
            "countersign_approval_page_refusals",
            "Approval page requests refused, by reason",
            metrics.refusals.clone(),
        );
        registry.register(
            "countersign_approval_webhooks",
            "Approval webhook notifications, by outcome",
            metrics.webhooks.clone(),
        );
        metrics
    }

    pub fn opened(&self) {
        self.opened.inc();
    }

    pub fn decided(&self, approved: bool) {
        let decision = if approved { "approved" } else { "denied" };
        self.decisions
            .get_or_create(&DecisionLabels { decision })
            .inc();
    }

    pub fn refused(&self, reason: &'static str) {
        self.refusals.get_or_create(&RefusalLabels { reason }).inc();
    }

    pub fn webhook(&self, outcome: &'static str) {
        self.webhooks
            .get_or_create(&WebhookLabels { outcome })
            .inc();
    }

    /// Decisions counted so far (for tests).
    pub fn decisions(&self, approved: bool) -> u64 {
        let decision = if approved { "approved" } else { "denied" };
        self.decisions
            .get_or_create(&DecisionLabels { decision })
            .get()
    }

    /// Webhook notifications counted so far with `outcome` (for tests).
    pub fn webhooks(&self, outcome: &'static str) -> u64 {
        self.webhooks
            .get_or_create(&WebhookLabels { outcome })
            .get()
    }

    /// Refusals counted so far for `reason` (for tests).
    pub fn refusals(&self, reason: &'static str) -> u64 {
        self.refusals.get_or_create(&RefusalLabels { reason }).get()
    }
}
