//! Request ids and the signed links that carry them.
//!
//! An id is 128 random bits (32 lowercase hex digits); its link is
//! `<public_url>/approve/<id>.<sig>` with `sig` the base64url HMAC-SHA256 of the id under the
//! **link key**, which is not one of the token keys: a leaked token key must not let anyone
//! forge a link, and the reverse. The page checks the signature before it looks anything up,
//! so guessing at ids costs the store nothing.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a generated link key.
const GENERATED_KEY_BYTES: usize = 32;

/// Shortest link key accepted from configuration.
pub const MIN_KEY_BYTES: usize = 32;

/// The secret under which links, CSRF tokens and page cookies are signed. Never printed.
#[derive(Clone)]
pub struct LinkKey(Vec<u8>);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

impl LinkKey {
    /// A key from configuration; `None` when shorter than [`MIN_KEY_BYTES`].
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() >= MIN_KEY_BYTES).then_some(Self(bytes))
    }

    /// A random key for this process only.
    pub fn generate() -> Self {
        Self(rand::random::<[u8; GENERATED_KEY_BYTES]>().to_vec())
    }

    /// HMAC-SHA256 over `parts`, each prefixed by its length so no two part lists collide;
    /// `purpose` separates the uses of the one key (links, CSRF, cookies).
    pub fn sign(&self, purpose: &str, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for part in std::iter::once(purpose.as_bytes()).chain(parts.iter().copied()) {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// [`sign`](Self::sign) as base64url text.
    pub fn sign_text(&self, purpose: &str, parts: &[&[u8]]) -> String {
        URL_SAFE_NO_PAD.encode(self.sign(purpose, parts))
    }

    /// Whether `signature` (base64url) is the signature of `parts`, compared in constant time.
    pub fn verify_text(&self, purpose: &str, parts: &[&[u8]], signature: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        bool::from(given.ct_eq(&self.sign(purpose, parts)))
    }
}

/// A fresh request id.
pub fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn is_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The last path segment of a request's link: `<id>.<sig>`.
pub fn link_segment(key: &LinkKey, id: &str) -> String {
    format!("{id}.{}", key.sign_text("link", &[id.as_bytes()]))
}

/// The id in `segment` if its signature is good; `None` for anything else (malformed, wrong
/// key, tampered id).
pub fn verify_segment<'a>(key: &LinkKey, segment: &'a str) -> Option<&'a str> {
    let (id, signature) = segment.split_once('.')?;
    (is_id(id) && key.verify_text("link", &[id.as_bytes()], signature)).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_link_verifies_to_its_id() {
        let key = LinkKey::generate();
        let id = new_id();
        assert_eq!(
            verify_segment(&key, &link_segment(&key, &id)),
            Some(id.as_str())
        );
    }

    #[test]
    fn bad_signatures_are_refused() {
        let key = LinkKey::generate();
        let id = new_id();
        let segment = link_segment(&key, &id);
        let other = LinkKey::generate();
        assert_eq!(verify_segment(&other, &segment), None, "another key's link");
        let (_, sig) = segment.split_once('.').expect("has a dot");
        let tampered = format!("{}.{sig}", new_id());
        assert_eq!(
            verify_segment(&key, &tampered),
            None,
            "a signature moved to another id"
        );
        assert_eq!(verify_segment(&key, &id), None, "no signature");
        assert_eq!(
            verify_segment(&key, &format!("{id}.")),
            None,
            "empty signature"
        );
        let upper = format!("{}.{sig}", id.to_uppercase());
        assert_eq!(
            verify_segment(&key, &upper),
            None,
            "ids are lowercase hex only"
        );
    }

    #[test]
    fn purposes_do_not_share_signatures() {
        let key = LinkKey::generate();
        let link = key.sign_text("link", &[b"x"]);
        assert!(!key.verify_text("csrf", &[b"x"], &link));
        assert!(key.verify_text("link", &[b"x"], &link));
        // Length prefixes: ("ab", "c") and ("a", "bc") differ.
        assert_ne!(key.sign("p", &[b"ab", b"c"]), key.sign("p", &[b"a", b"bc"]));
    }

    #[test]
    fn short_configured_keys_are_refused() {
        assert!(LinkKey::new(vec![7; MIN_KEY_BYTES - 1]).is_none());
        assert!(LinkKey::new(vec![7; MIN_KEY_BYTES]).is_some());
    }
}
