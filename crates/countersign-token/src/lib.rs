//! countersign-token owns the confirmation token and what it binds:
//!
//! - [`canonical`]: RFC 8785 canonical JSON, the safe-number rule, the arguments hash (`ah`)
//!   and the tool-definition hash (`tdh`);
//! - [`token`]: the keyring, the `mcp_cf_…` format of docs/confirmation-token.md, minting, verification and
//!   the binding checks, with the docs/wire-formats.md refusal codes.
//!
//! It is pure computation: it must not import tokio, touch files, read the environment or
//! keep a clock. Callers pass the current time and the key specification in, so every check is
//! deterministic under test and the crate can be fuzzed directly. The only outside input is
//! the operating system's random source, for keys and token ids.

#![forbid(unsafe_code)]

pub mod canonical;
#[doc(hidden)]
pub mod fuzzing;
pub mod token;

pub use canonical::{
    CanonicalError, arguments_hash, arguments_hash_raw, canonical_number, canonicalize,
    check_safe_numbers, check_safe_numbers_raw, definition_hash, normalize_numbers,
    normalize_numbers_raw, params_hash, params_hash_raw,
};
pub use token::{
    Claims, Expectation, Header, Keyring, KeyringError, TokenRejection, VerifyRules, check_binding,
    inspect_unverified, keygen_entry, mint, new_jti, verify,
};

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// base64url without padding, decoding strictly: padding and non-canonical trailing bits are
/// refused, so every byte string has exactly one accepted encoding.
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(false),
);
