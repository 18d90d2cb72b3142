//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the same invariant
//! checks the cargo-fuzz targets run, so every seed and every saved crasher stays a regression
//! test on the stable toolchain.

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    entries.sort();
    assert!(
        !entries.is_empty(),
        "{} holds no corpus files",
        dir.display()
    );
    for path in entries {
        let data =
            std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "corpus file {} broke an invariant",
            path.display()
        );
    }
}

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
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/token_decode/golden_valid");
    let token = std::fs::read_to_string(&path).expect("golden_valid seed");
    let keyring = countersign_token::Keyring::parse(TOKEN_KEYRING).expect("fixed keyring");
    countersign_token::verify(&keyring, &token, TOKEN_NOW, &Default::default())
        .expect("golden_valid verifies under the fixed keyring");
}
