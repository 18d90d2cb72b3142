//! Measuring the gateway's memory from outside the process: hostile `tools/call` bodies of a
//! chosen shape and size, and the kernel's accounting of a process's memory
//! (`/proc/<pid>/status`, `/proc/<pid>/clear_refs`).
//!
//! The shapes are the cheap-to-send, expensive-to-hold inputs of issue 9: each one is a few bytes
//! on the wire per JSON value, so a representation that spends tens of bytes per value (or keeps
//! several copies of the arguments) multiplies the body many times over.

use std::fmt::Write as _;

/// Nesting of the [`Shape::Nesting`] bodies, counted over the whole body as the gateway counts it
/// (`{}` and `[]` are one level, the body itself is the first): four levels below the default
/// `limits.max_json_depth` of 64, so the body is legal and still about as deep as one can be.
pub const NESTING_DEPTH: usize = 60;

/// Levels the body takes before the nested values start: the body, `params`, `arguments` and
/// the `trees` array.
const ENVELOPE_DEPTH: usize = 4;

/// What fills a hostile body's `arguments`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One array of single-digit numbers, `[1,2,3,…,9,0,1,…]`: two bytes per value.
    Numbers,
    /// Many chains of alternating objects and arrays, [`NESTING_DEPTH`] levels deep in the
    /// body: about four bytes per container.
    Nesting,
    /// Four strings of about 1 MiB each.
    LongStrings,
    /// One object with one distinct 8-byte key per 13 bytes (about 320,000 for 4 MiB).
    ManyKeys,
}

impl Shape {
    pub const ALL: [Shape; 4] = [
        Shape::Numbers,
        Shape::Nesting,
        Shape::LongStrings,
        Shape::ManyKeys,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Numbers => "numbers",
            Shape::Nesting => "nesting",
            Shape::LongStrings => "long strings",
            Shape::ManyKeys => "many keys",
        }
    }

    /// A `tools/call` request of `tool` with request id `id`, whose arguments have this shape,
    /// at most `len` bytes long and within a few hundred bytes of it (small `len`s still get
    /// one value of the shape, so a warm-up call takes the same code paths).
    pub fn call_body(self, id: u64, tool: &str, len: usize) -> String {
        let head = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":"#
        );
        let tail = "}}";
        let budget = len.saturating_sub(head.len() + tail.len());
        let mut body = String::with_capacity(len);
        body.push_str(&head);
        self.write_arguments(&mut body, budget);
        body.push_str(tail);
        body
    }

    /// Appends an arguments object of this shape, at most `budget` bytes long (when the budget
    /// fits one value at all).
    fn write_arguments(self, out: &mut String, budget: usize) {
        match self {
            Shape::Numbers => {
                out.push_str(r#"{"numbers":["#);
                let count = (budget.saturating_sub(14) / 2).max(1);
                for i in 0..count {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push(char::from(b'0' + ((i + 1) % 10) as u8));
                }
                out.push_str("]}");
            }
            Shape::Nesting => {
                let pairs = (NESTING_DEPTH - ENVELOPE_DEPTH) / 2;
                let chain = format!("{}1{}", r#"{"n":["#.repeat(pairs), "]}".repeat(pairs));
                out.push_str(r#"{"trees":["#);
                let count = (budget.saturating_sub(12) / (chain.len() + 1)).max(1);
                for i in 0..count {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&chain);
                }
                out.push_str("]}");
            }
            Shape::LongStrings => {
                const STRINGS: usize = 4;
                const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 ";
                let each = (budget.saturating_sub(2 + STRINGS * 8) / STRINGS).max(1);
                out.push('{');
                for s in 0..STRINGS {
                    if s > 0 {
                        out.push(',');
                    }
                    write!(out, r#""s{s}":""#).expect("writing to a String");
                    out.extend((0..each).map(|i| char::from(ALPHABET[i % ALPHABET.len()])));
                    out.push('"');
                }
                out.push('}');
            }
            Shape::ManyKeys => {
                // `"k0000001":1,` is 13 bytes; seven digits keep every key the same length.
                let count = (budget.saturating_sub(2) / 13).max(1);
                out.push('{');
                for i in 0..count {
                    if i > 0 {
                        out.push(',');
                    }
                    write!(out, r#""k{i:07}":{}"#, i % 10).expect("writing to a String");
                }
                out.push('}');
            }
        }
    }
}

/// The memory figures of one process, in bytes, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStatus {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the most that was resident at once, since start or the last [`reset_peak`].
    pub peak: u64,
    /// `VmSize`: address space mapped now (what `RLIMIT_AS` limits), reserved or in use.
    pub address_space: u64,
    /// `VmPeak`: the most address space mapped at once, since start.
    pub address_space_peak: u64,
}

/// Reads `pid`'s resident and peak resident memory.
pub fn memory_status(pid: u32) -> MemoryStatus {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kib| kib.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("{path} has no {name} line in kB:\n{status}"))
    };
    MemoryStatus {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
        address_space: field("VmSize:"),
        address_space_peak: field("VmPeak:"),
    }
}

/// Resets `pid`'s `VmHWM` to its current `VmRSS` (Linux 4.0+, `clear_refs` value 5), so the
/// next reading's peak belongs to what happens after this call and not to start-up or earlier
/// requests. Returns the status right after the reset.
pub fn reset_peak(pid: u32) -> MemoryStatus {
    let path = format!("/proc/{pid}/clear_refs");
    std::fs::write(&path, "5").unwrap_or_else(|e| {
        panic!("writing {path} (needed to reset the peak resident memory): {e}")
    });
    memory_status(pid)
}

/// Bytes as MiB with one decimal, for the tables the tests print.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_just_under_the_requested_size_and_valid_json() {
        let len = 4 << 20;
        for shape in Shape::ALL {
            let body = shape.call_body(7, "lookup", len);
            assert!(body.len() <= len, "{}: {} bytes", shape.name(), body.len());
            assert!(
                body.len() > len - 512,
                "{}: {} bytes",
                shape.name(),
                body.len()
            );
            let value: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
            assert_eq!(value["params"]["name"], "lookup");
        }
    }

    #[test]
    fn nesting_reaches_the_advertised_depth_and_no_further() {
        fn depth(value: &serde_json::Value) -> usize {
            match value {
                serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
                serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
                _ => 0,
            }
        }
        let body = Shape::Nesting.call_body(1, "lookup", 4096);
        let value: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
        assert_eq!(depth(&value), NESTING_DEPTH);
    }

    #[test]
    fn small_bodies_still_carry_one_value_of_their_shape() {
        for shape in Shape::ALL {
            let body = shape.call_body(1, "lookup", 64);
            let value: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
            let arguments = value["params"]["arguments"].as_object().expect("object");
            assert!(!arguments.is_empty(), "{}", shape.name());
        }
    }
}
