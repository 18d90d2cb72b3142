//! What the gateway remembers about legacy (2025-03-26 … 2025-11-25) sessions: who opened each
//! one and whether its client declared it can elicit, learned from the `initialize` exchange.
//! The gateway may ask a person through a session only when that session's client said it can
//! show the question, and accepts the answer only from the session and principal it asked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use countersign_jsonrpc::RawJson;
use tokio::time::Instant;

/// Most sessions remembered; the least recently seen is forgotten first. A forgotten session
/// only loses the elicitation channel (its calls fall back to the token channel).
const MAX_SESSIONS: usize = 100_000;
/// A session unseen this long is forgotten.
const IDLE: Duration = Duration::from_secs(24 * 3600);
/// Longest `clientInfo.name` remembered: enough for any real client's name, and a bound on
/// what a hostile one makes every session entry hold.
const MAX_CLIENT_NAME_CHARS: usize = 128;

#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The principal that initialized the session.
    pub principal: String,
    /// The client declared form-mode elicitation in `initialize`.
    pub can_elicit: bool,
    /// The client declared URL-mode elicitation (`elicitation.url`, 2025-11-25) in
    /// `initialize`: it can send the person to the approval page.
    pub can_elicit_url: bool,
    /// `clientInfo.name` from `initialize`, escaped and cut to [`MAX_CLIENT_NAME_CHARS`]; shown
    /// on the approval page as what the client calls itself (the client's claim, not proof).
    pub client_name: Option<String>,
    last_seen: Instant,
}

#[derive(Debug)]
pub struct SessionBook {
    sessions: Mutex<HashMap<String, SessionInfo>>,
    capacity: usize,
}

impl Default for SessionBook {
    fn default() -> Self {
        Self::with_capacity(MAX_SESSIONS)
    }
}

impl SessionBook {
    /// A book that remembers at most `capacity` sessions.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            sessions: Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    /// Records a session the upstream just opened for `principal`'s `initialize`. Returns how
    /// many sessions that could still elicit were forgotten to make room: their calls now get
    /// the token channel, which the caller must say out loud.
    pub fn opened(
        &self,
        session: &str,
        principal: &str,
        initialize_params: Option<&RawJson>,
        now: Instant,
    ) -> usize {
        let capabilities = initialize_params.and_then(|p| p.get("capabilities"));
        let can_elicit = capabilities.as_ref().is_some_and(declares_form_elicitation);
        let can_elicit_url = capabilities.as_ref().is_some_and(declares_url_elicitation);
        let client_name = initialize_params
            .and_then(|p| p.get("clientInfo"))
            .and_then(|info| info.get("name"))
            .and_then(|name| name.as_str().map(|n| n.into_owned()))
            .map(|name| {
                crate::display::escape(&crate::display::truncate(&name, MAX_CLIENT_NAME_CHARS))
            });
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mut downgraded = 0;
        if sessions.len() >= self.capacity && !sessions.contains_key(session) {
            // Idle sessions go first: they were forgotten anyway at their next call.
            sessions.retain(|_, s| now.saturating_duration_since(s.last_seen) < IDLE);
            if sessions.len() >= self.capacity
                && let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(k, _)| k.clone())
                && let Some(evicted) = sessions.remove(&oldest)
            {
                downgraded += usize::from(evicted.can_elicit || evicted.can_elicit_url);
            }
        }
        sessions.insert(
            session.to_owned(),
            SessionInfo {
                principal: principal.to_owned(),
                can_elicit,
                can_elicit_url,
                client_name,
                last_seen: now,
            },
        );
        downgraded
    }

    /// The session, if it is known, was opened by `principal`, and is not idle-expired.
    pub fn get(&self, session: &str, principal: &str, now: Instant) -> Option<SessionInfo> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let info = sessions.get_mut(session)?;
        if info.principal != principal || now.saturating_duration_since(info.last_seen) >= IDLE {
            return None;
        }
        info.last_seen = now;
        Some(info.clone())
    }

    pub fn closed(&self, session: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }
}

/// `capabilities.elicitation` present and covering form mode: `{}` (2025-06-18: form is the only
/// mode; 2025-11-25: empty means form) or an object with `form`.
pub fn declares_form_elicitation(capabilities: &RawJson) -> bool {
    let Some(modes) = capabilities.get("elicitation") else {
        return false;
    };
    let Some(mut modes) = modes.members() else {
        return false;
    };
    let mut any = false;
    let form = modes.any(|(mode, _)| {
        any = true;
        mode == "form"
    });
    form || !any
}

/// `capabilities.elicitation.url` present (2025-11-25 URL mode; never implied by `{}`).
pub fn declares_url_elicitation(capabilities: &RawJson) -> bool {
    capabilities
        .get("elicitation")
        .and_then(|modes| {
            modes
                .members()
                .map(|mut m| m.any(|(mode, _)| mode == "url"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::clock::{Clock, SystemClock};

    #[test]
    fn elicitation_capability_means_form_unless_only_url_is_declared() {
        assert!(declares_form_elicitation(
            &json!({"elicitation": {}}).into()
        ));
        assert!(declares_form_elicitation(
            &json!({"elicitation": {"form": {}, "url": {}}}).into()
        ));
        assert!(!declares_form_elicitation(
            &json!({"elicitation": {"url": {}}}).into()
        ));
        assert!(!declares_form_elicitation(&json!({"sampling": {}}).into()));
        assert!(!declares_form_elicitation(
            &json!({"elicitation": true}).into()
        ));
        // As a client may write it: whitespace, and an escaped key.
        let spaced = RawJson::parse_slice(br#"{ "elicitation" : { "\u0066orm" : { } } }"#);
        assert!(declares_form_elicitation(&spaced.expect("json")));
        let spaced = RawJson::parse_slice(br#"{ "elicitation" : { "url" : { } } }"#);
        assert!(!declares_form_elicitation(&spaced.expect("json")));
    }

    #[test]
    fn url_elicitation_is_only_what_is_declared_by_name() {
        assert!(declares_url_elicitation(
            &json!({"elicitation": {"url": {}}}).into()
        ));
        assert!(declares_url_elicitation(
            &json!({"elicitation": {"form": {}, "url": {}}}).into()
        ));
        assert!(!declares_url_elicitation(
            &json!({"elicitation": {}}).into()
        ));
        assert!(!declares_url_elicitation(
            &json!({"elicitation": {"form": {}}}).into()
        ));
        assert!(!declares_url_elicitation(&json!({"sampling": {}}).into()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_remembers_url_elicitation_and_the_client_name_escaped() {
        let book = SessionBook::default();
        let params: RawJson = json!({"capabilities": {"elicitation": {"url": {}}},
                                     "clientInfo": {"name": "cli\u{202e}ent", "version": "1"}})
        .into();
        let now = SystemClock.now();
        book.opened("s1", "ada", Some(&params), now);
        let info = book.get("s1", "ada", now).expect("known");
        assert!(info.can_elicit_url && !info.can_elicit);
        assert_eq!(info.client_name.as_deref(), Some("cli\\u{202e}ent"));
        book.opened("s2", "ada", None, now);
        let info = book.get("s2", "ada", now).expect("known");
        assert!(!info.can_elicit_url && info.client_name.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_is_only_found_for_the_principal_that_opened_it() {
        let book = SessionBook::default();
        let params: RawJson = json!({"capabilities": {"elicitation": {}}}).into();
        let now = SystemClock.now();
        book.opened("s1", "ada", Some(&params), now);
        assert!(book.get("s1", "ada", now).is_some_and(|s| s.can_elicit));
        assert!(book.get("s1", "mallory", now).is_none());
        book.closed("s1");
        assert!(book.get("s1", "ada", now).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_book_forgets_the_least_recently_seen_session_and_says_so() {
        let book = SessionBook::with_capacity(2);
        let eliciting: RawJson = json!({"capabilities": {"elicitation": {}}}).into();
        assert_eq!(
            book.opened("s1", "ada", Some(&eliciting), SystemClock.now()),
            0
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(book.opened("s2", "ada", None, SystemClock.now()), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            book.opened("s3", "bob", None, SystemClock.now()),
            1,
            "s1 could elicit and was forgotten: its calls fall back to the token channel"
        );
        assert!(book.get("s1", "ada", SystemClock.now()).is_none());
        assert!(book.get("s2", "ada", SystemClock.now()).is_some());
        assert_eq!(book.opened("s4", "bob", None, SystemClock.now()), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_session_is_forgotten() {
        let book = SessionBook::default();
        book.opened("s1", "ada", None, SystemClock.now());
        tokio::time::advance(IDLE).await;
        assert!(book.get("s1", "ada", SystemClock.now()).is_none());
    }
}
