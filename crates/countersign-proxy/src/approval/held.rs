//! The calls held on this replica while a person decides: per session, so ending a session
//! settles them, and counted per principal and per session, so one client holding many
//! questions is refused on its own instead of filling the gateway's global limit for everyone.

use std::collections::HashMap;
use std::sync::Mutex;

use countersign_jsonrpc::message::RequestId;

/// How many questions may wait at once for one principal and in one session (on this replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuestionCaps {
    pub per_principal: usize,
    pub per_session: usize,
}

impl Default for QuestionCaps {
    fn default() -> Self {
        Self {
            per_principal: 100,
            per_session: 20,
        }
    }
}

/// Which cap a new question would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OverCap {
    Principal,
    Session,
}

impl OverCap {
    /// The `limit` label of [`ProxyMetrics::record_limit_hit`](crate::metrics::ProxyMetrics).
    pub(super) fn limit(self) -> &'static str {
        match self {
            OverCap::Principal => "pending_questions_per_principal",
            OverCap::Session => "pending_questions_per_session",
        }
    }

    /// The audit outcome of a question refused for this cap.
    pub(super) fn outcome(self) -> &'static str {
        match self {
            OverCap::Principal => "rejected:rate_limited(principal_questions)",
            OverCap::Session => "rejected:rate_limited(session_questions)",
        }
    }
}

#[derive(Debug, Default)]
struct Book {
    by_session: HashMap<String, Vec<RequestId>>,
    by_principal: HashMap<String, usize>,
}

/// The held calls of this replica.
#[derive(Debug, Default)]
pub(super) struct HeldQuestions(Mutex<Book>);

impl HeldQuestions {
    /// Records a question about to be asked, unless that would pass one of `caps`.
    pub(super) fn hold(
        &self,
        session: &str,
        principal: &str,
        call_id: &RequestId,
        caps: QuestionCaps,
    ) -> Result<(), OverCap> {
        let mut book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if book.by_principal.get(principal).copied().unwrap_or(0) >= caps.per_principal {
            return Err(OverCap::Principal);
        }
        if book.by_session.get(session).map_or(0, Vec::len) >= caps.per_session {
            return Err(OverCap::Session);
        }
        *book.by_principal.entry(principal.to_owned()).or_default() += 1;
        book.by_session
            .entry(session.to_owned())
            .or_default()
            .push(call_id.clone());
        Ok(())
    }

    /// Forgets a question recorded by [`HeldQuestions::hold`], once it is settled.
    pub(super) fn release(&self, session: &str, principal: &str, call_id: &RequestId) {
        let mut book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ids) = book.by_session.get_mut(session) {
            if let Some(at) = ids.iter().position(|id| id == call_id) {
                ids.remove(at);
            }
            if ids.is_empty() {
                book.by_session.remove(session);
            }
        }
        if let Some(count) = book.by_principal.get_mut(principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                book.by_principal.remove(principal);
            }
        }
    }

    /// The calls held in `session`.
    pub(super) fn of(&self, session: &str) -> Vec<RequestId> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_session
            .get(session)
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: QuestionCaps = QuestionCaps {
        per_principal: 2,
        per_session: 1,
    };

    #[test]
    fn a_principal_over_its_cap_is_refused_without_touching_others() {
        let held = HeldQuestions::default();
        let id = RequestId::Number(1);
        assert_eq!(held.hold("s1", "mallory", &id, CAPS), Ok(()));
        assert_eq!(held.hold("s2", "mallory", &id, CAPS), Ok(()));
        assert_eq!(
            held.hold("s3", "mallory", &id, CAPS),
            Err(OverCap::Principal)
        );
        assert_eq!(
            held.hold("s4", "ada", &id, CAPS),
            Ok(()),
            "another principal is unaffected"
        );
        held.release("s1", "mallory", &id);
        assert_eq!(
            held.hold("s3", "mallory", &id, CAPS),
            Ok(()),
            "a settled question frees its place"
        );
    }

    #[test]
    fn a_session_over_its_cap_is_refused_and_settled_calls_leave_the_session() {
        let held = HeldQuestions::default();
        assert_eq!(held.hold("s1", "ada", &RequestId::Number(1), CAPS), Ok(()));
        assert_eq!(
            held.hold("s1", "ada", &RequestId::Number(2), CAPS),
            Err(OverCap::Session)
        );
        assert_eq!(held.of("s1"), [RequestId::Number(1)]);
        held.release("s1", "ada", &RequestId::Number(1));
        assert!(held.of("s1").is_empty());
    }
}
