//! The approver's session on the page and the CSRF tokens bound to it.
//!
//! Every visitor gets a session: with a trusted header it only anchors CSRF tokens (the header
//! names the approver on every request); with OpenID Connect it also holds who logged in and
//! their groups, until it expires. A CSRF token is the HMAC of the session id and the request
//! id, so a form is good for one request, in one browser session, and no page can make one
//! for another visitor.

use serde::{Deserialize, Serialize};

use super::cookie;
use crate::link::LinkKey;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageSession {
    /// 128 random bits, hex.
    pub sid: String,
    /// Who logged in (OpenID Connect only).
    pub user: Option<String>,
    pub groups: Vec<String>,
    /// Unix seconds after which the session is refused.
    pub expires_at: u64,
}

impl PageSession {
    pub fn anonymous(now_unix: u64, ttl_secs: u64) -> Self {
        Self {
            sid: format!("{:032x}", rand::random::<u128>()),
            user: None,
            groups: Vec::new(),
            expires_at: now_unix.saturating_add(ttl_secs),
        }
    }

    /// The session in the request's cookie, if it is genuine and unexpired.
    pub fn from_headers(key: &LinkKey, headers: &http::HeaderMap, now_unix: u64) -> Option<Self> {
        let sealed = cookie::find(headers, cookie::SESSION)?;
        cookie::open::<Self>(key, cookie::SESSION, sealed).filter(|s| s.expires_at > now_unix)
    }

    pub fn seal(&self, key: &LinkKey) -> String {
        cookie::seal(key, cookie::SESSION, self)
    }

    pub fn csrf_token(&self, key: &LinkKey, request_id: &str) -> String {
        key.sign_text("csrf", &[self.sid.as_bytes(), request_id.as_bytes()])
    }

    pub fn csrf_matches(&self, key: &LinkKey, request_id: &str, token: &str) -> bool {
        key.verify_text("csrf", &[self.sid.as_bytes(), request_id.as_bytes()], token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_token_is_bound_to_the_session_and_the_request() {
        let key = LinkKey::generate();
        let session = PageSession::anonymous(0, 60);
        let other = PageSession::anonymous(0, 60);
        let token = session.csrf_token(&key, "r1");
        assert!(session.csrf_matches(&key, "r1", &token));
        assert!(!session.csrf_matches(&key, "r2", &token), "another request");
        assert!(!other.csrf_matches(&key, "r1", &token), "another session");
        assert!(!session.csrf_matches(&key, "r1", ""), "no token");
    }

    #[test]
    fn expired_or_forged_sessions_are_not_read() {
        let key = LinkKey::generate();
        let session = PageSession::anonymous(100, 60);
        let mut headers = http::HeaderMap::new();
        let value = format!("{}={}", cookie::SESSION, session.seal(&key));
        headers.insert(http::header::COOKIE, value.parse().expect("value"));
        assert_eq!(
            PageSession::from_headers(&key, &headers, 159),
            Some(session.clone())
        );
        assert_eq!(
            PageSession::from_headers(&key, &headers, 160),
            None,
            "expired"
        );
        assert_eq!(
            PageSession::from_headers(&LinkKey::generate(), &headers, 100),
            None
        );
    }
}
