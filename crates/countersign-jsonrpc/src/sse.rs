//! Server-Sent Events codec for relaying MCP streams event by event.
//!
//! Follows the WHATWG "event stream interpretation" rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>)
//! but keeps every field, in order, instead of folding them into a dispatched event: the gateway
//! must re-emit `id:`, `event:`, `retry:`, comments and empty priming events intact, and only
//! inspect the `data` of `message` events. Line ends are normalised to `\n` on output.

use std::borrow::Cow;

mod decoder;
#[cfg(test)]
mod tests;

pub use decoder::{CUT_EVENT, PASS_FROM_BYTES, PassedPart, Piece, RawEvent, SseDecoder, SseError};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One field line of an event, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseField {
    /// A line starting with `:`; the text after the colon, one leading space removed.
    Comment(String),
    Event(String),
    Data(String),
    Id(String),
    Retry(String),
    /// A field the SSE spec ignores; kept so a relay forwards it unchanged.
    Other {
        name: String,
        value: String,
    },
}

/// The fields between two blank lines, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub fields: Vec<SseField>,
}

impl SseEvent {
    /// An `event: message` event carrying `json` as data, one `data:` line per line of input
    /// and no `id:` (events the gateway injects must not be resumable against the upstream).
    pub fn message(json: &str) -> SseEvent {
        let mut fields = vec![SseField::Event("message".to_owned())];
        fields.extend(split_lines(json).map(|line| SseField::Data(line.to_owned())));
        SseEvent { fields }
    }

    /// The data buffer as the SSE spec defines it: every `data` value joined with `\n`.
    /// `None` when the event has no `data` field at all. Borrowed when the event has one `data`
    /// line, as nearly every MCP message does: a large answer is not copied to be looked at.
    pub fn data(&self) -> Option<Cow<'_, str>> {
        join_data(self.fields.iter().filter_map(|field| match field {
            SseField::Data(value) => Some(value.as_str()),
            _ => None,
        }))
    }

    /// How many bytes [`SseEvent::encode`] writes at most, for sizing its buffer (a field
    /// with line breaks may write one `data: ` prefix more per break; the estimate is a hint).
    pub fn encoded_len_hint(&self) -> usize {
        self.fields
            .iter()
            .map(|field| match field {
                SseField::Comment(v)
                | SseField::Event(v)
                | SseField::Data(v)
                | SseField::Id(v)
                | SseField::Retry(v) => v.len() + 8,
                SseField::Other { name, value } => name.len() + value.len() + 3,
            })
            .sum::<usize>()
            + 1
    }

    /// The last `id` field, ignoring ids that contain NUL (which the SSE spec discards).
    pub fn id(&self) -> Option<&str> {
        self.fields.iter().rev().find_map(|field| match field {
            SseField::Id(id) if !id.contains('\0') => Some(id.as_str()),
            _ => None,
        })
    }

    /// The last `event` field; `None` means the default type, `message`.
    pub fn event_type(&self) -> Option<&str> {
        self.fields.iter().rev().find_map(|field| match field {
            SseField::Event(kind) => Some(kind.as_str()),
            _ => None,
        })
    }

    /// The last `retry` field that is all ASCII digits, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.fields.iter().rev().find_map(|field| match field {
            SseField::Retry(ms) if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) => {
                ms.parse().ok()
            }
            _ => None,
        })
    }

    /// Whether the event has fields and all of them are comments (a keep-alive).
    pub fn is_comment_only(&self) -> bool {
        !self.fields.is_empty()
            && self
                .fields
                .iter()
                .all(|field| matches!(field, SseField::Comment(_)))
    }

    /// Appends the event to `out`: one `name: value\n` line per field (comments as `: text\n`,
    /// an empty comment as `:\n`), then the blank line. An event without fields writes nothing.
    ///
    /// A line break inside a value would inject a line of the encoder's choosing into the
    /// stream, so `data` and comment values containing breaks become several lines (the same
    /// data buffer after decoding) and breaks in any other field are dropped.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.fields.is_empty() {
            return;
        }
        for field in &self.fields {
            match field {
                SseField::Comment(text) => {
                    for line in split_lines(text) {
                        out.push(b':');
                        if !line.is_empty() {
                            out.push(b' ');
                            out.extend_from_slice(line.as_bytes());
                        }
                        out.push(b'\n');
                    }
                }
                SseField::Data(value) => {
                    for line in split_lines(value) {
                        write_line(out, "data", line);
                    }
                }
                SseField::Event(value) => write_single(out, "event", value),
                SseField::Id(value) => write_single(out, "id", value),
                SseField::Retry(value) => write_single(out, "retry", value),
                SseField::Other { name, value } => {
                    let name: String = name
                        .chars()
                        .filter(|&c| c != ':' && c != '\r' && c != '\n')
                        .collect();
                    write_single(out, &name, value);
                }
            }
        }
        out.push(b'\n');
    }

    /// Makes `encoded`, the first bytes of a stream, read back as encoded. A decoder strips one
    /// byte-order mark from the start of a stream, so a first field whose name begins with
    /// U+FEFF (an unknown field, as the decoder keeps it) would lose that character there and
    /// could turn into a `data` line or a comment the sender never meant; one more BOM in front
    /// is what the decoder strips instead.
    pub fn guard_stream_start(encoded: &mut Vec<u8>) {
        if Self::needs_stream_start_guard(encoded) {
            encoded.splice(0..0, BOM.iter().copied());
        }
    }

    /// Whether `encoded`, the first bytes of a stream, needs [`SseEvent::guard_stream_start`].
    pub fn needs_stream_start_guard(encoded: &[u8]) -> bool {
        encoded.starts_with(BOM)
    }

    /// [`SseEvent::encode`] into a new buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// The data buffer of an event whose `data` values are `values`: joined with `\n`, borrowed
/// when there is one; `None` when there are none.
fn join_data<'a>(mut values: impl Iterator<Item = &'a str>) -> Option<Cow<'a, str>> {
    let mut data = Cow::Borrowed(values.next()?);
    for value in values {
        let data = data.to_mut();
        data.push('\n');
        data.push_str(value);
    }
    Some(data)
}

fn write_line(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

fn write_single(out: &mut Vec<u8>, name: &str, value: &str) {
    if value.contains(['\r', '\n']) {
        let clean: String = value.chars().filter(|&c| c != '\r' && c != '\n').collect();
        write_line(out, name, &clean);
    } else {
        write_line(out, name, value);
    }
}

/// Splits on `\r\n`, `\r` or `\n`, the three line ends SSE recognises. Always yields at least
/// one (possibly empty) line.
fn split_lines(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let current = rest?;
        // Both ends are ASCII, so `i` is a char boundary; memchr2 scans a word at a time.
        match memchr::memchr2(b'\r', b'\n', current.as_bytes()) {
            Some(i) => {
                let skip = if current[i..].starts_with("\r\n") {
                    2
                } else {
                    1
                };
                rest = Some(&current[i + skip..]);
                Some(&current[..i])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}
