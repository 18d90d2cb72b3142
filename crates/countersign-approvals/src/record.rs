//! What the approval book holds for a request and for its decision, as JSON bytes.
//!
//! The book itself stores opaque bytes (`countersign-store` knows nothing of approvals); the
//! shape lives here so every replica reads what any other wrote.

use countersign_proxy::approval::out_of_band::{ApprovalRequest, Approvers};
use serde::{Deserialize, Serialize};

/// A held call as written into the book when it is opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRequest {
    pub principal: String,
    pub principal_groups: Vec<String>,
    pub client_name: Option<String>,
    pub session: Option<String>,
    pub upstream: String,
    pub tool: String,
    pub risk: String,
    pub rule: Option<String>,
    pub arguments: String,
    pub preview: Option<String>,
    pub approver_users: Vec<String>,
    pub approver_groups: Vec<String>,
    pub four_eyes: bool,
    pub binding: String,
    /// When it was opened and when it expires, Unix ms.
    pub opened_at_unix_ms: u64,
    pub expires_at_unix_ms: u64,
}

impl StoredRequest {
    pub fn new(request: ApprovalRequest, opened_at_unix_ms: u64, expires_at_unix_ms: u64) -> Self {
        let ApprovalRequest {
            principal,
            principal_groups,
            client_name,
            session,
            upstream,
            tool,
            risk,
            rule,
            arguments,
            preview,
            approvers,
            binding,
        } = request;
        Self {
            principal,
            principal_groups,
            client_name,
            session,
            upstream,
            tool,
            risk,
            rule,
            arguments,
            preview,
            approver_users: approvers.users,
            approver_groups: approvers.groups,
            four_eyes: approvers.four_eyes,
            binding,
            opened_at_unix_ms,
            expires_at_unix_ms,
        }
    }

    pub fn approvers(&self) -> Approvers {
        Approvers {
            users: self.approver_users.clone(),
            groups: self.approver_groups.clone(),
            four_eyes: self.four_eyes,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings, bools and integers always serializes.
        serde_json::to_vec(self).expect("a stored request serializes")
    }

    /// `None` for bytes no replica of this version wrote: the caller treats it as a store fault.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// A person's decision as written into the book.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDecision {
    pub approved: bool,
    pub approver: String,
    pub decided_at_unix_ms: u64,
    /// The client address the decision came from, as the page saw it.
    pub from: String,
}

impl StoredDecision {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a decision serializes")
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}
