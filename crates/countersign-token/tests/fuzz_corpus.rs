//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the same invariant
//! checks the cargo-fuzz targets run, so every seed and every saved crasher stays a regression
//! test on the stable toolchain.

use countersign_testkit::fuzz_corpus::replay;

#[test]
fn token_decode_corpus() {
    replay(
        "token_decode",
        countersign_token::fuzzing::check_token_decode,
    );
}

/// The `golden_valid` seed really verifies, so the corpus exercises the accepting branch of
/// the check (token equals what the keyring mints) and not only refusals.
#[test]
fn token_decode_corpus_has_a_valid_token() {
    use countersign_token::fuzzing::{TOKEN_KEYRING, TOKEN_NOW};
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/token_decode/golden_valid");
    let token = std::fs::read_to_string(&path).expect("golden_valid seed");
    let keyring = countersign_token::Keyring::parse(TOKEN_KEYRING).expect("fixed keyring");
    countersign_token::verify(&keyring, &token, TOKEN_NOW, &Default::default())
        .expect("golden_valid verifies under the fixed keyring");
}
