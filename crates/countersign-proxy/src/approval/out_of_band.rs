//! The seam between the approval layer and the gateway's own approval page.
//!
//! When a rule says `approval: out_of_band`, or `approval: human` meets a client that cannot
//! elicit, the held call is written down as an [`ApprovalRequest`] and a person decides it on
//! the approval page, which the model cannot reach. The approval layer only opens requests and
//! reads their outcome through [`OutOfBand`]; the page, its login and the shared records live
//! behind that trait (crate `countersign-approvals`), so this crate knows nothing of HTML,
//! cookies or OpenID Connect.
//!
//! A decision is not an approval to run the call twice: whatever channel carries the outcome
//! back (a waiting stream, a retried `input_required`, a retried token), the layer consumes
//! `oob:<id>` in the replay store before it forwards, so the call runs exactly once across
//! replicas.

use std::fmt::Debug;
use std::time::Duration;

use countersign_store::StoreError;
use futures_util::future::BoxFuture;

/// Who may decide a request. Resolved from the matching rule when the call is held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvers {
    /// Principals named by the rule (`approvers.users`).
    pub users: Vec<String>,
    /// Groups named by the rule (`approvers.groups`); a member of any of them may decide.
    pub groups: Vec<String>,
    /// Forbid the requesting principal from deciding their own call (`four_eyes: true`).
    pub four_eyes: bool,
}

impl Approvers {
    /// Whether `approver` (with `groups`) may decide a call asked by `requester`.
    ///
    /// With no users and no groups named, only the requester may decide (the default), and
    /// four-eyes then leaves nobody: such a rule is refused when the policy loads.
    pub fn allows(&self, requester: &str, approver: &str, groups: &[String]) -> bool {
        if self.four_eyes && approver == requester {
            return false;
        }
        if self.users.is_empty() && self.groups.is_empty() {
            return approver == requester;
        }
        self.users.iter().any(|u| u == approver) || self.groups.iter().any(|g| groups.contains(g))
    }
}

/// A held call, written down for the person who will decide it. Everything shown on the page
/// comes from here, and everything here comes from the gateway's own parse of the call, never
/// from model text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The requesting principal.
    pub principal: String,
    pub principal_groups: Vec<String>,
    /// `clientInfo.name` of the session, when known.
    pub client_name: Option<String>,
    pub session: Option<String>,
    pub upstream: String,
    pub tool: String,
    /// The risk the call was classified as (`write`, `destructive`, …).
    pub risk: String,
    /// Name of the policy rule that held it, if a rule did.
    pub rule: Option<String>,
    /// The canonical arguments as JSON text (the re-serialization of the one strict parse).
    pub arguments: String,
    /// The dry-run preview's text, when the rule asked for one.
    pub preview: Option<String>,
    pub approvers: Approvers,
    /// Digest binding the decision to this exact call (principal, session, upstream, tool,
    /// tool definition, arguments); the layer compares it before it forwards.
    pub binding: String,
}

/// An opened request: its id and the link a person follows to decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// Random, unguessable id of the request.
    pub id: String,
    /// The approval page's link for it, carrying the id signed under the link key.
    pub url: String,
    /// When the request expires undecided, seconds since the Unix epoch (`approvals.ttl` after
    /// it was opened); a token or `requestState` for it expires then too.
    pub expires_at: u64,
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalStatus {
    /// Nobody has decided yet.
    Pending,
    /// `approver` approved it; `binding` is the request's, for the layer to compare.
    Approved { approver: String, binding: String },
    /// `approver` denied it.
    Denied { approver: String },
    /// Unknown id, or the request expired undecided.
    Gone,
}

/// What the approval layer needs from the approval page's side.
pub trait OutOfBand: Send + Sync + Debug {
    /// Records `request` as pending, tells the configured webhooks, and returns its ticket.
    fn open(&self, request: ApprovalRequest) -> BoxFuture<'_, Result<Ticket, StoreError>>;

    /// Where request `id` stands now.
    fn status<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApprovalStatus, StoreError>>;

    /// Waits until request `id` is decided or gone, at most `timeout`; `Pending` when the wait
    /// timed out. Dropping the future stops the wait.
    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ApprovalStatus, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn by_default_only_the_requester_decides() {
        let a = Approvers::default();
        assert!(a.allows("ada", "ada", &[]));
        assert!(!a.allows("ada", "bob", &names(&["admins"])));
    }

    #[test]
    fn named_users_and_groups_decide_and_others_do_not() {
        let a = Approvers {
            users: names(&["carol"]),
            groups: names(&["sre"]),
            four_eyes: false,
        };
        assert!(a.allows("ada", "carol", &[]));
        assert!(a.allows("ada", "bob", &names(&["dev", "sre"])));
        assert!(!a.allows("ada", "bob", &names(&["dev"])));
        assert!(!a.allows("ada", "ada", &[]), "the requester is not named");
    }

    #[test]
    fn four_eyes_refuses_the_requester_even_when_named() {
        let a = Approvers {
            users: names(&["ada"]),
            groups: names(&["sre"]),
            four_eyes: true,
        };
        assert!(!a.allows("ada", "ada", &names(&["sre"])));
        assert!(a.allows("ada", "bob", &names(&["sre"])));
    }
}
