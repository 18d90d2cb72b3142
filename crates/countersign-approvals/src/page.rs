//! [`ApprovalPage`]: the requests' lifecycle behind the page and behind the approval layer's
//! [`OutOfBand`] seam — open a request, read it, decide it once.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use countersign_proxy::approval::out_of_band::{
    ApprovalRequest, ApprovalStatus, OutOfBand, Ticket,
};
use countersign_proxy::audit::{AuditSink, PageDecisionRecord, timestamp};
use countersign_proxy::clock::Clock;
use countersign_store::{ApprovalBook, Decided, StoreError};
use futures_util::future::{BoxFuture, FutureExt as _};
use tracing::{info, warn};

use crate::auth::oidc::Oidc;
use crate::client::HttpClient;
use crate::config::{AuthConfig, PageConfig};
use crate::link::{self, LinkKey};
use crate::metrics::PageMetrics;
use crate::record::{StoredDecision, StoredRequest};
use crate::webhooks::Webhooks;

/// The approval page's shared state: its settings, the book, and where decisions are reported.
#[derive(Debug)]
pub struct ApprovalPage {
    pub(crate) config: PageConfig,
    book: Arc<dyn ApprovalBook>,
    clock: Arc<dyn Clock>,
    audit: AuditSink,
    pub(crate) metrics: PageMetrics,
    webhooks: Webhooks,
    oidc: Option<Oidc>,
}

/// A request as the page finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Undecided and not expired.
    Pending(StoredRequest),
    Decided(StoredRequest, StoredDecision),
    /// Unknown id or expired.
    Gone,
}

/// The outcome of a person's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Taken, and audited.
    Taken(StoredRequest, StoredDecision),
    /// Someone decided first; this is their decision. Nothing changed.
    Already(StoredRequest, StoredDecision),
    Gone,
}

impl ApprovalPage {
    pub fn new(
        config: PageConfig,
        book: Arc<dyn ApprovalBook>,
        clock: Arc<dyn Clock>,
        audit: AuditSink,
        metrics: PageMetrics,
    ) -> Self {
        let webhooks = Webhooks::start(&config, metrics.clone());
        let oidc = match &config.auth {
            AuthConfig::Oidc(oidc) => Some(Oidc::new(oidc.clone(), HttpClient::new())),
            AuthConfig::TrustedHeader { .. } => None,
        };
        Self {
            oidc,
            config,
            book,
            clock,
            audit,
            metrics,
            webhooks,
        }
    }

    pub fn link_key(&self) -> &LinkKey {
        &self.config.link_key
    }

    pub fn config(&self) -> &PageConfig {
        &self.config
    }

    pub(crate) fn oidc(&self) -> Option<&Oidc> {
        self.oidc.as_ref()
    }

    pub(crate) fn now_unix_ms(&self) -> u64 {
        self.clock
            .wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// The link to request `id`.
    pub fn link(&self, id: &str) -> String {
        format!(
            "{}/approve/{}",
            self.config.base(),
            link::link_segment(&self.config.link_key, id)
        )
    }

    async fn open_request(&self, request: ApprovalRequest) -> Result<Ticket, StoreError> {
        let id = link::new_id();
        let opened = self.now_unix_ms();
        let ttl_ms = u64::try_from(self.config.ttl.as_millis()).unwrap_or(u64::MAX);
        let expires = opened.saturating_add(ttl_ms);
        let stored = StoredRequest::new(request, opened, expires);
        self.book.create(&id, stored.encode(), expires).await?;
        self.metrics.opened();
        let url = self.link(&id);
        info!(approval = %id, principal = %stored.principal, tool = %stored.tool, "approval requested");
        self.webhooks.notify(&stored, &url);
        Ok(Ticket {
            id,
            url,
            // Whole seconds, rounded down, so nothing built on the ticket outlives the request.
            expires_at: expires / 1000,
        })
    }

    /// Request `id` as it stands. A record this page cannot read is a store fault, never a
    /// pending request.
    pub async fn lookup(&self, id: &str) -> Result<Lookup, StoreError> {
        let Some(entry) = self.book.read(id).await? else {
            return Ok(Lookup::Gone);
        };
        self.interpret(entry.request.as_slice(), entry.decision.as_deref())
    }

    fn interpret(&self, request: &[u8], decision: Option<&[u8]>) -> Result<Lookup, StoreError> {
        let request = StoredRequest::decode(request).ok_or_else(unreadable)?;
        // The page's clock too, not only the store's expiry: whichever says "expired" first wins.
        if request.expires_at_unix_ms <= self.now_unix_ms() {
            return Ok(Lookup::Gone);
        }
        match decision {
            None => Ok(Lookup::Pending(request)),
            Some(bytes) => {
                let decision = StoredDecision::decode(bytes).ok_or_else(unreadable)?;
                Ok(Lookup::Decided(request, decision))
            }
        }
    }

    /// Records `approver`'s decision on request `id`, unless someone decided first. The caller
    /// has checked that `approver` may decide `request` (read just before); the request is
    /// read again here only through the book's atomic decide.
    pub async fn decide(
        &self,
        id: &str,
        request: &StoredRequest,
        approved: bool,
        approver: &str,
        from: &str,
    ) -> Result<Decision, StoreError> {
        let now = self.now_unix_ms();
        if request.expires_at_unix_ms <= now {
            return Ok(Decision::Gone);
        }
        let decision = StoredDecision {
            approved,
            approver: approver.to_owned(),
            decided_at_unix_ms: now,
            from: from.to_owned(),
        };
        match self.book.decide(id, decision.encode()).await? {
            Decided::First => {
                self.audit_decision(id, request, &decision);
                self.metrics.decided(approved);
                info!(approval = %id, approver = %approver, approved, "approval decided");
                Ok(Decision::Taken(request.clone(), decision))
            }
            Decided::Already(first) => {
                let first = StoredDecision::decode(&first).ok_or_else(unreadable)?;
                Ok(Decision::Already(request.clone(), first))
            }
            Decided::Gone => Ok(Decision::Gone),
        }
    }

    fn audit_decision(&self, id: &str, request: &StoredRequest, decision: &StoredDecision) {
        self.audit.record_page_decision(&PageDecisionRecord {
            ts: timestamp(UNIX_EPOCH + Duration::from_millis(decision.decided_at_unix_ms)),
            event: "page_decision",
            approval: id,
            principal: &request.principal,
            upstream: &request.upstream,
            tool: &request.tool,
            session: request.session.as_deref(),
            risk: &request.risk,
            rule: request.rule.as_deref(),
            decision: if decision.approved {
                "approved"
            } else {
                "denied"
            },
            approver: &decision.approver,
            client_ip: &decision.from,
        });
    }

    fn status_of(&self, lookup: Lookup) -> ApprovalStatus {
        match lookup {
            Lookup::Gone => ApprovalStatus::Gone,
            Lookup::Pending(_) => ApprovalStatus::Pending,
            Lookup::Decided(request, decision) if decision.approved => ApprovalStatus::Approved {
                approver: decision.approver,
                binding: request.binding,
            },
            Lookup::Decided(_, decision) => ApprovalStatus::Denied {
                approver: decision.approver,
            },
        }
    }

    async fn status_now(&self, id: &str) -> Result<ApprovalStatus, StoreError> {
        Ok(self.status_of(self.lookup(id).await?))
    }

    async fn wait_for(&self, id: &str, timeout: Duration) -> Result<ApprovalStatus, StoreError> {
        let lookup = match self.book.wait(id, timeout).await? {
            None => Lookup::Gone,
            Some(entry) => self.interpret(&entry.request, entry.decision.as_deref())?,
        };
        Ok(self.status_of(lookup))
    }
}

fn unreadable() -> StoreError {
    warn!("an approval record in the store cannot be read; refusing it");
    StoreError::Unavailable("unreadable approval record".to_owned())
}

impl OutOfBand for ApprovalPage {
    fn open(&self, request: ApprovalRequest) -> BoxFuture<'_, Result<Ticket, StoreError>> {
        self.open_request(request).boxed()
    }

    fn status<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApprovalStatus, StoreError>> {
        self.status_now(id).boxed()
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ApprovalStatus, StoreError>> {
        self.wait_for(id, timeout).boxed()
    }
}
