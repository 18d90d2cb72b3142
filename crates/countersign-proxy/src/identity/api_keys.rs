//! Static API keys, stored only as SHA-256 hashes. The keys are high-entropy random strings
//! (`countersign apikey new` makes one), so a plain, unsalted SHA-256 is enough: there is no
//! dictionary to try, and a leaked file reveals no key. A presented key is hashed and compared
//! with every stored hash in constant time, without stopping at the first match.

use std::sync::Arc;

use countersign_policy::Principal;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// One key's hash and whom it names.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub sha256: [u8; 32],
    pub principal: String,
    pub groups: Vec<String>,
}

/// The `api_keys` identity method.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    keys: Vec<ApiKey>,
}

/// `sha256:<64 hex digits>`, the form the keys file stores.
pub fn hash_key(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A new random key: `csk_` and 244 random bits (two v4 UUIDs, from the OS's generator).
pub fn new_key() -> String {
    format!(
        "csk_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The 32 bytes of a `sha256:<hex>` string, or `None` if it is not one.
pub fn parse_hash(text: &str) -> Option<[u8; 32]> {
    let hex = text.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

impl ApiKeys {
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Self { keys }
    }

    /// The principal of `key`, if it is one of the stored keys.
    pub fn principal(&self, key: &str) -> Option<Principal> {
        let presented: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut found = None;
        for stored in &self.keys {
            if bool::from(stored.sha256.ct_eq(&presented)) && found.is_none() {
                found = Some(stored);
            }
        }
        found.map(|key| Principal {
            id: key.principal.clone(),
            groups: key.groups.clone(),
            claims: Arc::default(),
        })
    }
}
