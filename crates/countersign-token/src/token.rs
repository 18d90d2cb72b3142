//! The confirmation token of docs/confirmation-token.md:
//!
//! ```text
//! mcp_cf_<b64url(header)>.<b64url(claims)>.<b64url(tag)>
//! tag = HMAC-SHA256(key, "countersign-v1\0" || header_b64 || "." || claims_b64)
//! ```
//!
//! As in JWS, the MAC covers the ASCII base64url parts, not the decoded JSON: the verifier then
//! authenticates the exact bytes it is about to decode, and never parses unauthenticated claims.
//! The `countersign-v1\0` prefix separates these MACs from anything else a shared key might
//! ever sign.
//!
//! Verification order matters and is fixed in [`verify`]: length and shape, the header (which
//! must be byte-identical to one this keyring mints, so it selects the key without parsing
//! attacker JSON), strict base64url, the MAC in constant time, and only then the claims JSON
//! and the clock. Binding the
//! verified claims to the request at hand is [`check_binding`]; consuming the `jti` once is
//! the replay store's job, after both.

mod claims;
mod keyring;

use base64::Engine as _;
use hmac::Mac as _;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;

pub use keyring::{Keyring, KeyringError, MAX_KID_LEN, MIN_KEY_BYTES, keygen_entry};

use crate::B64URL;

/// Every token starts with this, so it is recognisable in logs and in arguments.
pub const TOKEN_PREFIX: &str = "mcp_cf_";

/// Tokens longer than this are refused before any decoding. A real one is about 700 bytes; the
/// cap leaves room for a wrapped upstream `requestState` (`st`).
pub const MAX_TOKEN_LEN: usize = 4096;

/// The only algorithm; there is no negotiation (RFC 8725 §3.1).
pub const ALG: &str = "HS256";

/// Explicit typing, so no other HS256 artefact is mistaken for a confirmation (RFC 8725 §3.11).
pub const TYP: &str = "MCP+CONFIRM";

/// The claims format version this crate mints and accepts.
pub const CLAIMS_VERSION: u32 = 1;

/// Clock skew tolerated on `iat` and `exp` (docs/confirmation-token.md).
pub const DEFAULT_LEEWAY_SECS: u64 = 60;

/// Default cap on `exp - iat`: the default `token_ttl` (5 minutes).
pub const DEFAULT_MAX_TTL_SECS: u64 = 300;

/// Domain separation for the MAC input.
const MAC_DOMAIN: &[u8] = b"countersign-v1\0";

/// An HMAC-SHA256 tag is 32 bytes, 43 base64url characters.
const TAG_LEN: usize = 32;

/// A header with the longest kid is about 110 characters once encoded.
const MAX_HEADER_B64_LEN: usize = 256;

/// The token header. Only [`ALG`] and [`TYP`] are accepted; `kid` must be in the keyring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub alg: String,
    pub typ: String,
    pub kid: String,
}

/// What a confirmation token asserts. Field order is the serialization order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// Format version, [`CLAIMS_VERSION`].
    pub v: u32,
    /// Deployment id of the gateway that minted it.
    pub iss: String,
    /// The authenticated principal, from the identity layer (never from the body).
    pub sub: String,
    /// The MCP session, for revisions that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sid: Option<String>,
    /// The configured upstream name.
    pub up: String,
    /// The JSON-RPC method, `tools/call`.
    pub m: String,
    /// The exact tool name.
    pub tool: String,
    /// [`crate::arguments_hash`] of the arguments.
    pub ah: String,
    /// [`crate::params_hash`] of the call's other params that can change what runs (a task
    /// request, `_meta` keys an upstream acts on); absent when the call has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ph: Option<String>,
    /// [`crate::definition_hash`] of the pinned tool definition.
    pub tdh: String,
    /// The policy rule that demanded confirmation.
    pub rule: String,
    /// The approval channel (token, elicitation, input_required, approved, out_of_band).
    pub ch: String,
    /// Issued at, Unix seconds.
    pub iat: u64,
    /// Expires at, Unix seconds.
    pub exp: u64,
    /// 128-bit random id, consumed once by the replay store ([`new_jti`]).
    pub jti: String,
    /// An upstream's own `requestState`, wrapped so it round-trips byte-exact (docs/wire-formats.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub st: Option<String>,
    /// The id of the request on the gateway's approval page, for a token or `requestState`
    /// of the `out_of_band` channel: redeeming it asks the page whether a person approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aid: Option<String>,
}

/// Time rules applied by [`verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyRules {
    /// Clock skew tolerated on both `iat` (future) and `exp` (past), in seconds.
    pub leeway_secs: u64,
    /// Largest accepted `exp - iat`, in seconds, whatever the token claims; set it to the
    /// configured token TTL.
    pub max_ttl_secs: u64,
}

impl Default for VerifyRules {
    fn default() -> Self {
        Self {
            leeway_secs: DEFAULT_LEEWAY_SECS,
            max_ttl_secs: DEFAULT_MAX_TTL_SECS,
        }
    }
}

/// Why a token was refused. [`TokenRejection::code`] is the docs/wire-formats.md refusal code.
///
/// Variants carry no detail on purpose: the reason goes to the client, and a finer-grained
/// reason for a forged token would only help the forger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TokenRejection {
    /// Not a well-formed token: prefix, shape, encoding, header, claims, version, future
    /// `iat`, or a lifetime above the cap.
    #[error("the confirmation token is malformed")]
    Malformed,
    /// The MAC does not match.
    #[error("the confirmation token signature is invalid")]
    BadSignature,
    /// The header names a key this gateway does not have (or no longer has).
    #[error("the confirmation token was signed with an unknown key")]
    UnknownKey,
    /// Past `exp` plus leeway.
    #[error("the confirmation token has expired")]
    Expired,
    /// Minted for another principal.
    #[error("the confirmation token was issued to another principal")]
    SubjectMismatch,
    /// Minted in another session.
    #[error("the confirmation token belongs to another session")]
    SessionMismatch,
    /// Minted for another upstream.
    #[error("the confirmation token was issued for another upstream")]
    UpstreamMismatch,
    /// Minted for another method or tool.
    #[error("the confirmation token was issued for another tool")]
    ToolMismatch,
    /// The arguments differ from the confirmed ones.
    #[error("the arguments differ from the confirmed ones")]
    ArgumentsMismatch,
    /// The tool's definition changed since confirmation.
    #[error("the tool definition changed since confirmation")]
    DefinitionChanged,
}

impl TokenRejection {
    /// The refusal `code` of docs/wire-formats.md.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::BadSignature => "bad_signature",
            Self::UnknownKey => "unknown_key",
            Self::Expired => "expired",
            Self::SubjectMismatch => "subject_mismatch",
            Self::SessionMismatch => "session_mismatch",
            Self::UpstreamMismatch => "upstream_mismatch",
            Self::ToolMismatch => "tool_mismatch",
            Self::ArgumentsMismatch => "arguments_mismatch",
            Self::DefinitionChanged => "definition_changed",
        }
    }
}

/// What the current request is, to compare against verified claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expectation<'a> {
    pub sub: &'a str,
    pub sid: Option<&'a str>,
    pub up: &'a str,
    pub m: &'a str,
    pub tool: &'a str,
    pub ah: &'a str,
    pub ph: Option<&'a str>,
    pub tdh: &'a str,
}

/// A fresh 128-bit random token id, base64url (22 characters).
pub fn new_jti() -> String {
    B64URL.encode(rand::random::<[u8; 16]>())
}

/// Signs `claims` with the keyring's signing key.
///
/// Claims are serialized as given; a token whose claims [`verify`] would refuse (wrong `v`,
/// lifetime over the cap) is minted all the same and refused later, which is the safe side.
pub fn mint(keyring: &Keyring, claims: &Claims) -> String {
    let key = keyring.signer();
    let claims_json = claims::write(claims);
    let mut token = String::with_capacity(
        TOKEN_PREFIX.len() + key.header_b64.len() + claims_json.len() * 4 / 3 + 50,
    );
    token.push_str(TOKEN_PREFIX);
    token.push_str(&key.header_b64);
    token.push('.');
    B64URL.encode_string(&claims_json, &mut token);
    let mut mac = key.mac();
    mac.update(&token.as_bytes()[TOKEN_PREFIX.len()..]);
    token.push('.');
    B64URL.encode_string(mac.finalize().into_bytes(), &mut token);
    token
}

/// Verifies a token's MAC, format and lifetime at `now_unix` and returns its claims. The
/// claims still have to be compared with the request ([`check_binding`]) and the `jti`
/// consumed.
pub fn verify(
    keyring: &Keyring,
    token: &str,
    now_unix: u64,
    rules: &VerifyRules,
) -> Result<Claims, TokenRejection> {
    let parts = Parts::split(token)?;
    let key = match keyring.find_by_header(parts.header_b64) {
        Some(key) => key,
        None => {
            // Not byte-identical to a header this keyring mints: decode it only to give the
            // right refusal. A known kid under any other spelling is still malformed, so each
            // token has exactly one accepted encoding.
            let header = parts.header()?;
            if header.alg != ALG || header.typ != TYP || keyring.find(&header.kid).is_some() {
                return Err(TokenRejection::Malformed);
            }
            return Err(TokenRejection::UnknownKey);
        }
    };

    // Decode everything strictly before the MAC, so a re-encoded (padded, non-canonical)
    // token is refused as malformed whatever its tag says.
    let claims_json = decode_part(parts.claims_b64)?;
    let tag = decode_part(parts.tag_b64)?;
    if tag.len() != TAG_LEN {
        return Err(TokenRejection::Malformed);
    }
    let mut mac = key.mac();
    mac.update(parts.signed.as_bytes());
    // `verify_slice` compares in constant time.
    mac.verify_slice(&tag)
        .map_err(|_| TokenRejection::BadSignature)?;

    // Authenticated from here on.
    let claims = claims::read(&claims_json)?;
    if claims.v != CLAIMS_VERSION {
        return Err(TokenRejection::Malformed);
    }
    // The verifier caps the lifetime whatever the token says.
    match claims.exp.checked_sub(claims.iat) {
        Some(ttl) if ttl <= rules.max_ttl_secs => {}
        _ => return Err(TokenRejection::Malformed),
    }
    if claims.iat > now_unix.saturating_add(rules.leeway_secs) {
        return Err(TokenRejection::Malformed);
    }
    if now_unix > claims.exp.saturating_add(rules.leeway_secs) {
        return Err(TokenRejection::Expired);
    }
    Ok(claims)
}

/// Compares verified claims with the request, in the fixed order sub, sid, up, m/tool, ah,
/// tdh, so the first mismatch decides the refusal code.
pub fn check_binding(claims: &Claims, expected: &Expectation<'_>) -> Result<(), TokenRejection> {
    if claims.sub != expected.sub {
        return Err(TokenRejection::SubjectMismatch);
    }
    if claims.sid.as_deref() != expected.sid {
        return Err(TokenRejection::SessionMismatch);
    }
    if claims.up != expected.up {
        return Err(TokenRejection::UpstreamMismatch);
    }
    if claims.m != expected.m || claims.tool != expected.tool {
        return Err(TokenRejection::ToolMismatch);
    }
    // Hashes are compared in constant time so a client probing argument variants learns
    // nothing from timing about how much of the hash matched.
    if !bool::from(claims.ah.as_bytes().ct_eq(expected.ah.as_bytes())) {
        return Err(TokenRejection::ArgumentsMismatch);
    }
    // The other bound params count as part of "the arguments the person approved".
    let claimed_ph = claims.ph.as_deref().unwrap_or_default().as_bytes();
    let expected_ph = expected.ph.unwrap_or_default().as_bytes();
    if claims.ph.is_some() != expected.ph.is_some() || !bool::from(claimed_ph.ct_eq(expected_ph)) {
        return Err(TokenRejection::ArgumentsMismatch);
    }
    if !bool::from(claims.tdh.as_bytes().ct_eq(expected.tdh.as_bytes())) {
        return Err(TokenRejection::DefinitionChanged);
    }
    Ok(())
}

/// Decodes a token's header and claims **without verifying anything**: no MAC, no key, no
/// clock, no version. Only for showing a token to an operator (`countersign token inspect`);
/// nothing returned here may be trusted or acted upon.
pub fn inspect_unverified(token: &str) -> Result<(Header, Claims), TokenRejection> {
    let parts = Parts::split(token)?;
    let header = parts.header()?;
    let claims = claims::read(&decode_part(parts.claims_b64)?)?;
    Ok((header, claims))
}

/// The three base64url parts of a token, and the `header.claims` span the MAC covers.
struct Parts<'a> {
    signed: &'a str,
    header_b64: &'a str,
    claims_b64: &'a str,
    tag_b64: &'a str,
}

impl<'a> Parts<'a> {
    fn split(token: &'a str) -> Result<Self, TokenRejection> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenRejection::Malformed);
        }
        let body = token
            .strip_prefix(TOKEN_PREFIX)
            .ok_or(TokenRejection::Malformed)?;
        let (signed, tag_b64) = body.rsplit_once('.').ok_or(TokenRejection::Malformed)?;
        let (header_b64, claims_b64) = signed.split_once('.').ok_or(TokenRejection::Malformed)?;
        // The base64url alphabet has no '.', but refuse a fourth part explicitly rather than
        // leave it to the decoder.
        if claims_b64.contains('.') {
            return Err(TokenRejection::Malformed);
        }
        if header_b64.len() > MAX_HEADER_B64_LEN {
            return Err(TokenRejection::Malformed);
        }
        Ok(Self {
            signed,
            header_b64,
            claims_b64,
            tag_b64,
        })
    }

    fn header(&self) -> Result<Header, TokenRejection> {
        parse_object(&decode_part(self.header_b64)?)
    }
}

/// Header and claims are JSON objects exactly as minted. serde's derived structs would also
/// accept an array of the field values, and serde_json leading whitespace; neither is ever
/// minted, so neither is accepted.
fn parse_object<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, TokenRejection> {
    if json.first() != Some(&b'{') {
        return Err(TokenRejection::Malformed);
    }
    serde_json::from_slice(json).map_err(|_| TokenRejection::Malformed)
}

/// Strict base64url: URL-safe alphabet only, no padding, no non-canonical trailing bits, no
/// empty part. One token has exactly one encoding, so it cannot be re-encoded into a "new" one.
fn decode_part(part: &str) -> Result<Vec<u8>, TokenRejection> {
    if part.is_empty() {
        return Err(TokenRejection::Malformed);
    }
    B64URL.decode(part).map_err(|_| TokenRejection::Malformed)
}

#[cfg(test)]
mod tests;
