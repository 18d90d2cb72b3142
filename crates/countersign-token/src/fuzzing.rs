//! Invariant checks shared by the cargo-fuzz targets in `fuzz/` and the corpus replay tests in
//! `tests/fuzz_corpus.rs`. Not part of the supported API: each function panics when an invariant
//! is broken, which is what a fuzzer reports as a crash.

use crate::token::{Keyring, VerifyRules, inspect_unverified, mint, verify};

/// The fixed keyring of the `token_decode` target: `k1` (32 bytes `0x00..0x1f`, signing) and
/// `k2` (32 bytes `0xff`).
pub const TOKEN_KEYRING: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8,\
                                 k2:__________________________________________8";

/// The clock the `token_decode` target verifies at; seed tokens are minted around it.
pub const TOKEN_NOW: u64 = 1_700_000_100;

/// `token_decode`: [`inspect_unverified`] and [`verify`] never panic on arbitrary text, and a
/// token [`verify`] accepts is exactly the token the keyring mints for its claims (so nothing
/// but the keyring's own output verifies, and each claim set has one accepted encoding).
pub fn check_token_decode(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let keyring = Keyring::parse(TOKEN_KEYRING).expect("the fixed keyring parses");
    let inspected = inspect_unverified(text);
    let verified = verify(&keyring, text, TOKEN_NOW, &VerifyRules::default());
    if let Ok(claims) = verified {
        let (header, inspected_claims) =
            inspected.expect("inspect_unverified refused a token verify accepted");
        assert_eq!(inspected_claims, claims);
        // The same key alone, so `mint` signs with the key the header names.
        let entry = TOKEN_KEYRING
            .split(',')
            .map(str::trim)
            .find(|entry| {
                entry
                    .split_once(':')
                    .is_some_and(|(kid, _)| kid == header.kid)
            })
            .expect("verify accepted a kid outside the keyring");
        let signer = Keyring::parse(entry).expect("one keyring entry parses");
        assert_eq!(
            mint(&signer, &claims),
            text,
            "verify accepted a token the keyring did not mint"
        );
    }
}
