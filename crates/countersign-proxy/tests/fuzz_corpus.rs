//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the same invariant
//! checks the cargo-fuzz targets run, so every seed and every saved crasher stays a regression
//! test on the stable toolchain.

use countersign_testkit::fuzz_corpus::replay;

#[test]
fn inspect_post_corpus() {
    replay(
        "inspect_post",
        countersign_proxy::fuzzing::check_inspect_post,
    );
}
