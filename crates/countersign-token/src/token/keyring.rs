//! The signing keyring: several HMAC keys by `kid`, the first signs, all verify.

use std::fmt;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, Mac};
use rand::TryRngCore as _;
use rand::rngs::OsRng;
use sha2::Sha256;

use super::{ALG, Header, MAC_DOMAIN, TYP};
use crate::B64URL;

/// Shorter keys are refused: HMAC-SHA256 wants at least its output size.
pub const MIN_KEY_BYTES: usize = 32;

/// Longest accepted key id.
pub const MAX_KID_LEN: usize = 32;

/// Keys are written by people and tools (`openssl rand -base64 32 | tr '+/' '-_'`), so padding
/// is tolerated here. Token parts, by contrast, are decoded strictly.
const KEY_ENCODING: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(false),
);

/// Why a keyring spec was refused. Entries are numbered from 1 in reading order (blank lines
/// and comments not counted); key material never appears in these messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// No entries at all.
    #[error("the keyring has no keys")]
    Empty,
    /// An entry without the `kid:key` separator.
    #[error("keyring entry {entry} is not of the form kid:key")]
    MissingSeparator { entry: usize },
    /// A key id outside `[A-Za-z0-9_.-]{1,32}`. The id is not echoed: with a mangled
    /// separator it may be key material.
    #[error(
        "keyring entry {entry} has an invalid key id (1 to 32 ascii letters, digits, '_', '.' or '-')"
    )]
    InvalidKid { entry: usize },
    /// The same key id twice; which key would verify would be ambiguous.
    #[error("key id {kid:?} appears more than once in the keyring")]
    DuplicateKid { kid: String },
    /// The key is not base64url.
    #[error("key {kid:?} is not base64url")]
    InvalidKey { kid: String },
    /// The key decodes to fewer than [`MIN_KEY_BYTES`] bytes.
    #[error("key {kid:?} has {len} bytes; at least {MIN_KEY_BYTES} are required")]
    KeyTooShort { kid: String, len: usize },
}

/// Signing and verification keys by `kid`.
///
/// Rotation: distribute `k2:…,k1:…` to every replica with `k1` still first,
/// then swap the order so `k2` signs, and drop `k1` once every `k1` token has expired. Only
/// keyed HMAC states are kept, not the raw key bytes, and `Debug` shows key ids only.
#[derive(Clone)]
pub struct Keyring {
    /// Never empty; the first key signs.
    keys: Vec<Key>,
}

#[derive(Clone)]
pub(super) struct Key {
    pub(super) kid: String,
    /// The base64url header every token signed with this key carries; computed once.
    pub(super) header_b64: String,
    /// HMAC-SHA256 keyed and already fed the domain-separation prefix, cloned per use so the
    /// key schedule is not redone for every token.
    mac: Hmac<Sha256>,
}

impl Key {
    fn new(kid: String, secret: &[u8]) -> Self {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
        mac.update(MAC_DOMAIN);
        let header = Header {
            alg: ALG.to_owned(),
            typ: TYP.to_owned(),
            kid: kid.clone(),
        };
        let header_json = serde_json::to_vec(&header).expect("a header of strings serializes");
        Self {
            kid,
            header_b64: B64URL.encode(header_json),
            mac,
        }
    }

    /// A MAC state over `countersign-v1\0`, ready for the signed part of a token.
    pub(super) fn mac(&self) -> Hmac<Sha256> {
        self.mac.clone()
    }
}

impl Keyring {
    /// Parses `"k2:<base64url>,k1:<base64url>"`. Entries may also be separated by newlines, and
    /// blank lines and `#` comment lines are skipped, so a mounted key file works unchanged.
    pub fn parse(spec: &str) -> Result<Self, KeyringError> {
        let mut keys: Vec<Key> = Vec::new();
        let entries = spec
            .lines()
            .map(str::trim)
            .filter(|line| !line.starts_with('#'))
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|entry| !entry.is_empty());
        for (index, entry) in entries.enumerate() {
            let number = index + 1;
            let (kid, encoded) = entry
                .split_once(':')
                .ok_or(KeyringError::MissingSeparator { entry: number })?;
            let (kid, encoded) = (kid.trim(), encoded.trim());
            if !is_valid_kid(kid) {
                return Err(KeyringError::InvalidKid { entry: number });
            }
            if keys.iter().any(|k| k.kid == kid) {
                return Err(KeyringError::DuplicateKid {
                    kid: kid.to_owned(),
                });
            }
            let secret = KEY_ENCODING
                .decode(encoded)
                .map_err(|_| KeyringError::InvalidKey {
                    kid: kid.to_owned(),
                })?;
            if secret.len() < MIN_KEY_BYTES {
                return Err(KeyringError::KeyTooShort {
                    kid: kid.to_owned(),
                    len: secret.len(),
                });
            }
            keys.push(Key::new(kid.to_owned(), &secret));
        }
        if keys.is_empty() {
            return Err(KeyringError::Empty);
        }
        Ok(Self { keys })
    }

    /// One fresh random 32-byte key with kid `ephemeral-<8 hex>`, for a gateway started without
    /// configured keys. Its tokens do not survive a restart or cross replicas.
    pub fn generate() -> Self {
        let secret: [u8; 32] = os_random();
        let kid = format!("ephemeral-{}", hex(&os_random::<4>()));
        Self {
            keys: vec![Key::new(kid, &secret)],
        }
    }

    /// The key id new tokens are signed with.
    pub fn signing_kid(&self) -> &str {
        &self.signer().kid
    }

    /// Every key id, signing key first.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.kid.as_str())
    }

    /// A value derived from the signing key for `purpose` and `input`: unguessable without the
    /// key, and the same on every replica that shares it. The input is domain-separated from
    /// token MACs (which cover base64url text only) by its leading NUL.
    pub fn derive(&self, purpose: &str, input: &[u8]) -> [u8; 32] {
        let mut mac = self.signer().mac();
        mac.update(b"\0derive\0");
        mac.update(purpose.as_bytes());
        mac.update(b"\0");
        mac.update(input);
        mac.finalize().into_bytes().into()
    }

    pub(super) fn signer(&self) -> &Key {
        self.keys.first().expect("a keyring is never empty")
    }

    /// The key whose minted header is exactly `header_b64`.
    pub(super) fn find_by_header(&self, header_b64: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.header_b64 == header_b64)
    }

    pub(super) fn find(&self, kid: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("kids", &self.kids().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// One `kid:key` entry for `countersign keygen`: kid `k<8 hex>`, 32 random bytes base64url.
pub fn keygen_entry() -> String {
    let secret: [u8; 32] = os_random();
    format!("k{}:{}", hex(&os_random::<4>()), B64URL.encode(secret))
}

fn is_valid_kid(kid: &str) -> bool {
    (1..=MAX_KID_LEN).contains(&kid.len())
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Key material comes straight from the operating system rather than a user-space generator.
fn os_random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system random source is available");
    bytes
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
