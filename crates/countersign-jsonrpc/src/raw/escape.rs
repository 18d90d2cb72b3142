//! Writing text as a JSON string: the one string writer of everything the gateway builds (held
//! results, questions, refusals, audit lines).
//!
//! The output is byte-for-byte what `serde_json` writes for the same `&str` — `"`, `\` and the C0
//! controls escaped, with the short forms `\b \t \n \f \r` and `\u00XX` for the rest; DEL and all
//! non-ASCII text copied as they are — but text is copied in runs found eight bytes at a time,
//! instead of byte by byte: what the gateway writes is mostly prose and identifiers with nothing
//! to escape, and serde's byte loop was a tenth of a held call's instructions.

/// Appends `text` as a JSON string (quotes included) to `out`.
pub fn write_json_string(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    loop {
        let at = next_escape(bytes, start);
        out.extend_from_slice(&bytes[start..at]);
        let Some(&byte) = bytes.get(at) else { break };
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
        }
        start = at + 1;
    }
    out.push(b'"');
}

/// The index of the first byte at or after `at` that must be escaped (`bytes.len()` if none).
/// Read the other way, it is where a run of plain string contents ends: the strict scanner
/// finds the end of each string it reads with it.
pub(crate) fn next_escape(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // `word - n * ONES` borrows into the high bit of each byte below `n` (bytes of 0x80 and up
    // keep theirs out through `!word`); the lowest flag is always a real one, since borrows
    // only run upwards from it, and so is the lowest of the three terms' flags.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let found = below(word, 0x20)
            | below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1);
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    // A byte loop for the last few: on strings this short it costs less than one more word
    // (a padded copy and the flag arithmetic) does.
    while at < bytes.len() && !needs_escape(bytes[at]) {
        at += 1;
    }
    at
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(text: &str) -> String {
        let mut out = Vec::new();
        write_json_string(&mut out, text);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn every_escape_is_serdes() {
        let text = "ada \"the\" \\ \u{7f} é 😀 \n\t\r\u{8}\u{c}\u{1}\u{1f}\u{0}";
        assert_eq!(written(text), serde_json::to_string(text).expect("serde"));
        assert_eq!(written(""), "\"\"");
    }

    proptest! {
        #[test]
        fn the_next_escape_is_the_first_byte_at_or_after_the_start_that_needs_one(
            // Bytes that must be escaped and the bytes just above them, before and after the
            // start, and texts shorter and longer than a word.
            bytes in proptest::collection::vec(
                prop_oneof![
                    Just(b'"'), Just(b'#'), Just(b'\\'), Just(b']'), Just(0u8), Just(0x1f),
                    Just(b' '), Just(b'a'), Just(0x7f), Just(0x80), Just(0xff),
                ],
                0..24,
            ),
            start in 0usize..25,
        ) {
            let start = start.min(bytes.len());
            let expected = bytes[start..]
                .iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
                .map_or(bytes.len(), |i| start + i);
            prop_assert_eq!(next_escape(&bytes, start), expected);
        }

        #[test]
        fn any_text_is_written_as_serde_writes_it(
            // Space, `#` and `]` sit just above a byte that must be escaped (a control, `"`, a
            // backslash): where a word-at-a-time search could flag them falsely.
            text in prop_oneof![any::<String>(), "[a-z \\#\\]\"\\\\\u{0}-\u{1f}\u{7f}é😀]{0,40}"]
        ) {
            let line = written(&text);
            prop_assert_eq!(&line, &serde_json::to_string(&text).expect("serde"));
            let parsed: String = serde_json::from_str(&line).expect("valid JSON");
            prop_assert_eq!(parsed, text);
        }
    }
}
