//! Replaying the checked-in fuzz corpora (`fuzz/corpus/<target>/`) as ordinary tests, through the
//! same invariant check the cargo-fuzz target runs, so every seed and saved crasher stays a
//! regression test on the stable toolchain.

use std::path::PathBuf;

/// Runs `check` on every file of `fuzz/corpus/<target>/`; fails if the folder is empty or any
/// file breaks an invariant (naming the file).
pub fn replay(target: &str, check: fn(&[u8])) {
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
