//! Server-Sent Events codec for relaying MCP streams event by event.
//!
//! Follows the WHATWG "event stream interpretation" rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>)
//! but keeps every field, in order, instead of folding them into a dispatched event: the gateway
//! must re-emit `id:`, `event:`, `retry:`, comments and empty priming events intact, and only
//! inspect the `data` of `message` events. Line ends are normalised to `\n` on output.

use std::borrow::Cow;
use std::fmt;

#[cfg(test)]
mod tests;

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
        let mut data: Option<Cow<'_, str>> = None;
        for field in &self.fields {
            if let SseField::Data(value) = field {
                match &mut data {
                    Some(buf) => {
                        let buf = buf.to_mut();
                        buf.push('\n');
                        buf.push_str(value);
                    }
                    None => data = Some(Cow::Borrowed(value)),
                }
            }
        }
        data
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
        if encoded.starts_with(BOM) {
            encoded.splice(0..0, BOM.iter().copied());
        }
    }

    /// [`SseEvent::encode`] into a new buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
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

/// Why an event stream was refused. Once a decoder has failed it keeps returning the error:
/// a stream that lost sync cannot be relayed safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line is not valid UTF-8 (the SSE spec mandates UTF-8).
    #[error("event stream is not valid utf-8")]
    InvalidUtf8,
    /// One event (all its lines, terminators included) exceeds the configured bound.
    #[error("event larger than {max} bytes")]
    EventTooLarge { max: usize },
}

/// Incremental SSE decoder: feed bytes with [`push`](SseDecoder::push), take complete events
/// with [`next_event`](SseDecoder::next_event), and call [`finish`](SseDecoder::finish) at end
/// of stream.
///
/// Work is linear in the input: each byte is scanned for a line end once, however the stream
/// is chunked, and consumed bytes are dropped in amortised O(1).
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Start of the first unconsumed line in `buf`.
    pos: usize,
    /// `buf[pos..scanned]` is known to hold no line end.
    scanned: usize,
    /// The last line ended with CR; an LF at the very next byte belongs to it (CRLF split
    /// across chunks).
    skip_lf: bool,
    bom_resolved: bool,
    fields: Vec<SseField>,
    event_bytes: usize,
    max_event_bytes: usize,
    eof: bool,
    failed: Option<SseError>,
    discarded_partial: bool,
}

impl fmt::Debug for SseDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseDecoder")
            .field("buffered", &(self.buf.len() - self.pos))
            .field("pending_fields", &self.fields.len())
            .field("event_bytes", &self.event_bytes)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("eof", &self.eof)
            .field("failed", &self.failed)
            .finish()
    }
}

impl SseDecoder {
    /// A decoder that refuses any event larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> SseDecoder {
        SseDecoder {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            skip_lf: false,
            bom_resolved: false,
            fields: Vec::new(),
            event_bytes: 0,
            max_event_bytes,
            eof: false,
            failed: None,
            discarded_partial: false,
        }
    }

    /// Appends bytes from the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.failed.is_some() {
            // The stream is already refused; buffering more would only grow memory.
            return;
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            self.scanned = 0;
        } else if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            // Dropping the consumed prefix only once it is at least half the buffer keeps the
            // copying amortised linear.
            self.buf.drain(..self.pos);
            self.scanned -= self.pos;
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event (terminated by a blank line), or `None` until more bytes arrive.
    /// Blank lines with no fields before them produce no event.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if !self.bom_resolved {
            let available = &self.buf[self.pos..];
            if available.len() < BOM.len() && BOM.starts_with(available) && !self.eof {
                return Ok(None);
            }
            if available.starts_with(BOM) {
                self.pos += BOM.len();
                self.scanned = self.scanned.max(self.pos);
            }
            self.bom_resolved = true;
        }
        loop {
            if self.skip_lf {
                match self.buf.get(self.pos) {
                    None => return self.out_of_input(),
                    Some(b'\n') => {
                        self.pos += 1;
                        self.scanned = self.scanned.max(self.pos);
                    }
                    Some(_) => {}
                }
                self.skip_lf = false;
            }
            let Some(offset) = memchr::memchr2(b'\n', b'\r', &self.buf[self.scanned..]) else {
                self.scanned = self.buf.len();
                return self.out_of_input();
            };
            let end = self.scanned + offset;
            let start = self.pos;
            self.skip_lf = self.buf[end] == b'\r';
            self.pos = end + 1;
            self.scanned = self.pos;
            if let Some(event) = self.take_line(start, end)? {
                return Ok(Some(event));
            }
        }
    }

    /// Signals end of stream and returns the next complete event still buffered; call until it
    /// returns `Ok(None)`. A trailing event without its blank line is discarded, as the SSE
    /// spec requires; [`discarded_partial`](SseDecoder::discarded_partial) reports it.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        self.eof = true;
        self.next_event()
    }

    /// Whether [`finish`](SseDecoder::finish) dropped an unterminated trailing event.
    pub fn discarded_partial(&self) -> bool {
        self.discarded_partial
    }

    fn fail<T>(&mut self, err: SseError) -> Result<T, SseError> {
        self.failed = Some(err.clone());
        Err(err)
    }

    fn out_of_input(&mut self) -> Result<Option<SseEvent>, SseError> {
        let partial_line = self.buf.len() - self.pos;
        if self.event_bytes.saturating_add(partial_line) > self.max_event_bytes {
            let max = self.max_event_bytes;
            return self.fail(SseError::EventTooLarge { max });
        }
        if self.eof {
            if partial_line > 0 || !self.fields.is_empty() {
                self.discarded_partial = true;
            }
            self.fields.clear();
            self.event_bytes = 0;
            self.pos = self.buf.len();
            self.scanned = self.pos;
            self.skip_lf = false;
        }
        Ok(None)
    }

    fn take_line(&mut self, start: usize, end: usize) -> Result<Option<SseEvent>, SseError> {
        if start == end {
            self.event_bytes = 0;
            if self.fields.is_empty() {
                return Ok(None);
            }
            return Ok(Some(SseEvent {
                fields: std::mem::take(&mut self.fields),
            }));
        }
        self.event_bytes = self.event_bytes.saturating_add(end - start + 1);
        if self.event_bytes > self.max_event_bytes {
            let max = self.max_event_bytes;
            return self.fail(SseError::EventTooLarge { max });
        }
        let field = match std::str::from_utf8(&self.buf[start..end]) {
            Ok(line) => parse_field(line),
            Err(_) => return self.fail(SseError::InvalidUtf8),
        };
        self.fields.push(field);
        Ok(None)
    }
}

fn strip_one_space(s: &str) -> &str {
    s.strip_prefix(' ').unwrap_or(s)
}

fn parse_field(line: &str) -> SseField {
    if let Some(comment) = line.strip_prefix(':') {
        return SseField::Comment(strip_one_space(comment).to_owned());
    }
    let (name, value) = match line.split_once(':') {
        Some((name, value)) => (name, strip_one_space(value)),
        None => (line, ""),
    };
    let value = value.to_owned();
    match name {
        "event" => SseField::Event(value),
        "data" => SseField::Data(value),
        "id" => SseField::Id(value),
        "retry" => SseField::Retry(value),
        _ => SseField::Other {
            name: name.to_owned(),
            value,
        },
    }
}
