//! Pending approvals: requests a person decides on the approval page, and their decisions.
//!
//! The book stores opaque bytes under opaque keys; what a request or a decision says is the
//! approval page's business. Its one rule is that a request is decided **once**: of any number
//! of concurrent decisions, on any replica sharing the backend, exactly one is taken and every
//! other is told which one was. A decision lives exactly as long as its request, so an expired
//! request can no longer be approved, and an approval cannot outlive the call it was for.

use std::fmt::Debug;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::StoreError;

/// A request as the book holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalEntry {
    /// The bytes it was created with.
    pub request: Vec<u8>,
    /// When it stops existing, decided or not (Unix ms).
    pub expires_at_unix_ms: u64,
    /// The decision's bytes, once one was taken.
    pub decision: Option<Vec<u8>>,
}

/// What became of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// This decision was taken.
    First,
    /// Another decision was taken before; these are its bytes. Nothing changed.
    Already(Vec<u8>),
    /// No such request, or it expired. Nothing was recorded.
    Gone,
}

/// Requests waiting for a person, shared by the page and the held calls.
///
/// Object-safe so the gateway can hold an `Arc<dyn ApprovalBook>` picked by configuration.
pub trait ApprovalBook: Send + Sync + Debug {
    /// Records a new, undecided request under `key`, alive until `expires_at_unix_ms`. A key
    /// that is already present is refused ([`StoreError::Unavailable`]) and left as it was:
    /// keys are random, so a collision is a bug, never a reason to overwrite.
    fn create<'a>(
        &'a self,
        key: &'a str,
        request: Vec<u8>,
        expires_at_unix_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The request under `key` with its decision, or `None` when unknown or expired.
    fn read<'a>(&'a self, key: &'a str)
    -> BoxFuture<'a, Result<Option<ApprovalEntry>, StoreError>>;

    /// Takes `decision` for the request under `key` unless one was taken before (atomic across
    /// replicas), and wakes whoever [waits](Self::wait) for it.
    fn decide<'a>(
        &'a self,
        key: &'a str,
        decision: Vec<u8>,
    ) -> BoxFuture<'a, Result<Decided, StoreError>>;

    /// Waits at most `timeout` for the request under `key` to be decided, then returns it as it
    /// stands: decided, still undecided (the wait timed out), or `None` (unknown or expired). A
    /// decision taken just before the wait started is seen, not missed.
    fn wait<'a>(
        &'a self,
        key: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<ApprovalEntry>, StoreError>>;

    /// Whether the backend answers now, for `/readyz`.
    fn check_ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}

mod memory;

pub use memory::MemoryApprovalBook;
