//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the same invariant
//! checks the cargo-fuzz targets run, so every seed and every saved crasher stays a regression
//! test on the stable toolchain.

use countersign_testkit::fuzz_corpus::replay;

#[test]
fn strict_json_corpus() {
    replay(
        "strict_json",
        countersign_jsonrpc::fuzzing::check_strict_json,
    );
}

#[test]
fn sse_decoder_corpus() {
    replay(
        "sse_decoder",
        countersign_jsonrpc::fuzzing::check_sse_decoder,
    );
}
