#![no_main]

use libfuzzer_sys::fuzz_target;

// The invariants live in the library so tests/fuzz_corpus.rs replays the corpus through the
// same function on the stable toolchain.
fuzz_target!(|data: &[u8]| countersign_jsonrpc::fuzzing::check_sse_decoder(data));
