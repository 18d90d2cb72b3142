//! An approval page in memory for the out-of-band tests, and a replay store that is down.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use countersign_store::{Consumption, ReplayStore, StoreError};
use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use crate::approval::out_of_band::{ApprovalRequest, ApprovalStatus, OutOfBand, Ticket};
use crate::clock::{Clock, ManualClock};

/// How long the fake page keeps a request open.
pub(super) const REQUEST_TTL_SECS: u64 = 600;

/// An approval page in memory: records what was opened; the test decides.
#[derive(Debug)]
pub(super) struct FakePage {
    clock: Arc<ManualClock>,
    pub(super) opened: Mutex<Vec<(Ticket, ApprovalRequest)>>,
    decided: Mutex<HashMap<String, ApprovalStatus>>,
    changed: Notify,
    /// Every operation fails, as when the shared store is down.
    pub(super) down: AtomicBool,
}

impl FakePage {
    pub(super) fn new(clock: Arc<ManualClock>) -> Arc<Self> {
        Arc::new(Self {
            clock,
            opened: Mutex::default(),
            decided: Mutex::default(),
            changed: Notify::new(),
            down: AtomicBool::new(false),
        })
    }

    /// The one request opened so far.
    pub(super) fn only_request(&self) -> (Ticket, ApprovalRequest) {
        let opened = self.opened.lock().expect("lock");
        let [one] = opened.as_slice() else {
            panic!("expected one opened request, got {}", opened.len());
        };
        one.clone()
    }

    pub(super) fn decide(&self, id: &str, status: ApprovalStatus) {
        self.decided
            .lock()
            .expect("lock")
            .insert(id.to_owned(), status);
        self.changed.notify_waiters();
    }

    /// A person approves the one request, for exactly the call it was opened for.
    pub(super) fn approve(&self) {
        let (ticket, request) = self.only_request();
        self.decide(
            &ticket.id,
            ApprovalStatus::Approved {
                approver: "carol".into(),
                binding: request.binding,
            },
        );
    }

    pub(super) fn deny(&self) {
        let (ticket, _) = self.only_request();
        self.decide(
            &ticket.id,
            ApprovalStatus::Denied {
                approver: "carol".into(),
            },
        );
    }

    fn now_status(&self, id: &str) -> Result<ApprovalStatus, StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the page's store is down".into()));
        }
        if let Some(decided) = self.decided.lock().expect("lock").get(id) {
            return Ok(decided.clone());
        }
        let opened = self.opened.lock().expect("lock");
        match opened.iter().find(|(t, _)| t.id == id) {
            Some((ticket, _)) if self.clock.unix_secs() < ticket.expires_at => {
                Ok(ApprovalStatus::Pending)
            }
            _ => Ok(ApprovalStatus::Gone),
        }
    }
}

impl OutOfBand for FakePage {
    fn open(&self, request: ApprovalRequest) -> BoxFuture<'_, Result<Ticket, StoreError>> {
        Box::pin(async move {
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("the page's store is down".into()));
            }
            let mut opened = self.opened.lock().expect("lock");
            let id = format!("req-{}", opened.len() + 1);
            let ticket = Ticket {
                url: format!("https://approve.example/r/{id}.sig"),
                id,
                expires_at: self.clock.unix_secs() + REQUEST_TTL_SECS,
            };
            opened.push((ticket.clone(), request));
            Ok(ticket)
        })
    }

    fn status<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApprovalStatus, StoreError>> {
        Box::pin(async move { self.now_status(id) })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ApprovalStatus, StoreError>> {
        Box::pin(async move {
            let waited = tokio::time::timeout(timeout, async {
                loop {
                    let changed = self.changed.notified();
                    let status = self.now_status(id)?;
                    if status != ApprovalStatus::Pending {
                        return Ok(status);
                    }
                    changed.await;
                }
            })
            .await;
            waited.unwrap_or(Ok(ApprovalStatus::Pending))
        })
    }
}

/// A replay store that is down.
#[derive(Debug)]
pub(super) struct DownStore;

impl ReplayStore for DownStore {
    fn consume<'a>(
        &'a self,
        _jti: &'a str,
        _expires_at_ms: u64,
    ) -> BoxFuture<'a, Result<Consumption, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }

    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
}
