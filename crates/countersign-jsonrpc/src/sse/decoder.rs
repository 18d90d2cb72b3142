//! The incremental decoder: bytes in, events out, each event also available as the exact bytes
//! it arrived as ([`RawEvent`]), so a relay can pass on an event it did not change without
//! copying or re-encoding it.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::{Buf as _, Bytes, BytesMut};

use super::{BOM, SseEvent, SseField, join_data};

mod passing;

use passing::Passing;
pub use passing::{CUT_EVENT, PASS_FROM_BYTES, PassedPart, Piece};

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

/// Past this much buffered, the buffer grows to the largest event allowed at once.
const LARGE_EVENT_BYTES: usize = 128 << 10;
/// The most a large event's buffer takes at once; beyond it, it doubles as it fills.
const UP_FRONT_BYTES: usize = 64 << 20;

/// Which field a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Comment,
    Event,
    Data,
    Id,
    Retry,
    Other,
}

/// One field line of a [`RawEvent`]: where its name and value are in the event's bytes.
#[derive(Debug, Clone)]
struct RawField {
    kind: Kind,
    name: Range<usize>,
    value: Range<usize>,
}

/// A decoded event together with the bytes it arrived as: from its first field line through
/// the blank line that ended it.
#[derive(Debug, Clone)]
pub struct RawEvent {
    bytes: Bytes,
    fields: Vec<RawField>,
    /// Every line of the event ended with LF alone.
    lf_only: bool,
}

impl RawEvent {
    /// The event's bytes when passing them on means exactly what passing on the decoded event
    /// would: when every line ended with LF alone. A line ended by CR is read by one client as a
    /// line end and by another as part of the line, so such an event is re-encoded instead
    /// ([`RawEvent::into_event`] and [`SseEvent::encode`]), never passed on as received.
    pub fn wire(&self) -> Option<&Bytes> {
        self.lf_only.then_some(&self.bytes)
    }

    /// The data buffer as the SSE spec defines it ([`SseEvent::data`]); borrowed from the
    /// received bytes when the event has one `data` line, as nearly every MCP message does.
    pub fn data(&self) -> Option<Cow<'_, str>> {
        join_data(
            self.fields
                .iter()
                .filter(|field| field.kind == Kind::Data)
                .map(|field| self.text(&field.value)),
        )
    }

    /// The decoded event, every field owned.
    pub fn into_event(self) -> SseEvent {
        let fields = self
            .fields
            .iter()
            .map(|field| {
                let value = self.text(&field.value).to_owned();
                match field.kind {
                    Kind::Comment => SseField::Comment(value),
                    Kind::Event => SseField::Event(value),
                    Kind::Data => SseField::Data(value),
                    Kind::Id => SseField::Id(value),
                    Kind::Retry => SseField::Retry(value),
                    Kind::Other => SseField::Other {
                        name: self.text(&field.name).to_owned(),
                        value,
                    },
                }
            })
            .collect();
        SseEvent { fields }
    }

    /// The text at `range`; the decoder checked every line is UTF-8 before it made the event,
    /// and every range starts and ends at an ASCII byte or a line's end.
    fn text(&self, range: &Range<usize>) -> &str {
        simdutf8::basic::from_utf8(&self.bytes[range.clone()]).unwrap_or_default()
    }
}

/// Incremental SSE decoder: feed bytes with [`push`](SseDecoder::push), take complete events
/// with [`next_event`](SseDecoder::next_event) (or [`next_raw_event`](SseDecoder::next_raw_event)),
/// and call [`finish`](SseDecoder::finish) at end of stream.
///
/// Work is linear in the input: each byte is scanned for a line end once, however the stream
/// is chunked, and consumed bytes are dropped in O(1). A complete event is split off the
/// buffer, not copied out of it.
pub struct SseDecoder {
    pub(super) buf: BytesMut,
    /// Start of the first unconsumed line in `buf`.
    pos: usize,
    /// `buf[pos..scanned]` is known to hold no line end.
    scanned: usize,
    /// The current line's bytes up to here are known to be UTF-8 (`buf[pos..checked]`, ending
    /// on a character boundary): a long line is checked chunk by chunk as it arrives, while
    /// its bytes are still in cache, not in one pass over the whole line at its end.
    checked: usize,
    /// The current line has bytes that are not UTF-8; reported once the line ends, as a whole
    /// line's would be.
    line_not_utf8: bool,
    /// The last line ended with CR; an LF at the very next byte belongs to it (CRLF split
    /// across chunks).
    skip_lf: bool,
    bom_resolved: bool,
    /// Where the pending event's first field line starts in `buf`; field ranges are relative
    /// to it.
    event_start: usize,
    fields: Vec<RawField>,
    /// A line of the pending event ended with CR.
    event_saw_cr: bool,
    event_bytes: usize,
    max_event_bytes: usize,
    eof: bool,
    failed: Option<SseError>,
    discarded_partial: bool,
    /// An event passed on in parts as it arrives ([`passing`]), and where.
    passing: Option<Passing>,
    /// A chunk of the passing data line taken whole, to be passed on as it is.
    direct: Option<Bytes>,
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
            buf: BytesMut::new(),
            pos: 0,
            scanned: 0,
            checked: 0,
            line_not_utf8: false,
            skip_lf: false,
            bom_resolved: false,
            event_start: 0,
            fields: Vec::new(),
            event_saw_cr: false,
            event_bytes: 0,
            max_event_bytes,
            eof: false,
            failed: None,
            discarded_partial: false,
            passing: None,
            direct: None,
        }
    }

    /// Appends bytes from the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.failed.is_some() {
            // The stream is already refused; buffering more would only grow memory.
            return;
        }
        // Bytes before the pending event (or, with none pending, before the current line) are
        // consumed: moving the buffer's start past them copies nothing.
        let consumed = if self.fields.is_empty() {
            self.pos
        } else {
            self.event_start
        };
        if consumed > 0 {
            self.buf.advance(consumed);
            self.pos -= consumed;
            self.scanned -= consumed;
            self.checked = self.checked.saturating_sub(consumed);
            self.event_start = self.event_start.saturating_sub(consumed);
        }
        let needed = self.buf.len() + chunk.len();
        // An event passed on in parts is never held whole.
        if needed > self.buf.capacity() && needed > LARGE_EVENT_BYTES && self.passing.is_none() {
            // A large event grows the buffer chunk by chunk; doubling would copy it over and
            // over (the allocator moves what it cannot grow in place). Room for the largest
            // event allowed (up to a bound) is taken once instead: address space, its pages
            // touched (and counted as memory) only as bytes arrive.
            let room = self.max_event_bytes.min(UP_FRONT_BYTES) + LARGE_EVENT_BYTES;
            self.buf.reserve(room.max(needed) - self.buf.len());
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event (terminated by a blank line), or `None` until more bytes arrive.
    /// Blank lines with no fields before them produce no event.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        Ok(self.next_raw_event()?.map(RawEvent::into_event))
    }

    /// [`next_event`](SseDecoder::next_event), with the bytes the event arrived as.
    pub fn next_raw_event(&mut self) -> Result<Option<RawEvent>, SseError> {
        debug_assert!(
            self.passing.is_none(),
            "next_raw_event while passing an event"
        );
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
            let Some(end) = self.next_line_end() else {
                return self.out_of_input();
            };
            let start = self.pos;
            let utf8 = self.line_is_utf8(start, end);
            self.skip_lf = self.buf[end] == b'\r';
            self.pos = end + 1;
            self.scanned = self.pos;
            if let Some(event) = self.take_line(start, end, utf8)? {
                return Ok(Some(event));
            }
        }
    }

    /// Signals end of stream and returns the next complete event still buffered; call until it
    /// returns `Ok(None)`. A trailing event without its blank line is discarded, as the SSE
    /// spec requires; [`discarded_partial`](SseDecoder::discarded_partial) reports it.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        Ok(self.finish_raw()?.map(RawEvent::into_event))
    }

    /// [`finish`](SseDecoder::finish), with the bytes each event arrived as.
    pub fn finish_raw(&mut self) -> Result<Option<RawEvent>, SseError> {
        self.eof = true;
        self.next_raw_event()
    }

    /// Whether [`finish`](SseDecoder::finish) dropped an unterminated trailing event.
    pub fn discarded_partial(&self) -> bool {
        self.discarded_partial
    }

    /// Where the current line ends, past the LF of a CRLF whose CR ended the last line; `None`
    /// when the input ends first, what arrived of the line then checked as UTF-8.
    fn next_line_end(&mut self) -> Option<usize> {
        if self.skip_lf {
            if *self.buf.get(self.pos)? == b'\n' {
                self.pos += 1;
                self.scanned = self.scanned.max(self.pos);
            }
            self.skip_lf = false;
        }
        match memchr::memchr2(b'\n', b'\r', &self.buf[self.scanned..]) {
            Some(offset) => Some(self.scanned + offset),
            None => {
                self.scanned = self.buf.len();
                self.check_partial_line();
                None
            }
        }
    }

    /// Adds `passed` bytes to the event's count; fails once the event, with `unfinished` bytes
    /// of a line still arriving, is past the bound.
    fn count_event_bytes(&mut self, passed: usize, unfinished: usize) -> Result<(), SseError> {
        self.event_bytes = self.event_bytes.saturating_add(passed);
        if self.event_bytes.saturating_add(unfinished) > self.max_event_bytes {
            let max = self.max_event_bytes;
            return self.fail(SseError::EventTooLarge { max });
        }
        Ok(())
    }

    /// Checks what arrived of the current, unfinished line. A character cut off at the end
    /// is checked again once the rest of it arrives.
    fn check_partial_line(&mut self) {
        let from = self.checked.max(self.pos);
        if self.line_not_utf8 || from == self.buf.len() {
            return;
        }
        match simdutf8::compat::from_utf8(&self.buf[from..]) {
            Ok(_) => self.checked = self.buf.len(),
            Err(error) if error.error_len().is_none() => self.checked = from + error.valid_up_to(),
            Err(_) => self.line_not_utf8 = true,
        }
    }

    /// Whether the line `buf[start..end]` is UTF-8, checking what [`check_partial_line`]
    /// (Self::check_partial_line) has not; the next line starts unchecked.
    fn line_is_utf8(&mut self, start: usize, end: usize) -> bool {
        let from = self.checked.max(start);
        let utf8 = !self.line_not_utf8 && simdutf8::basic::from_utf8(&self.buf[from..end]).is_ok();
        self.checked = 0;
        self.line_not_utf8 = false;
        utf8
    }

    fn fail<T>(&mut self, err: SseError) -> Result<T, SseError> {
        self.failed = Some(err.clone());
        Err(err)
    }

    fn out_of_input(&mut self) -> Result<Option<RawEvent>, SseError> {
        let partial_line = self.buf.len() - self.pos;
        self.count_event_bytes(0, partial_line)?;
        if self.eof {
            if partial_line > 0 || !self.fields.is_empty() {
                self.discarded_partial = true;
            }
            self.fields.clear();
            self.event_saw_cr = false;
            self.event_bytes = 0;
            self.pos = self.buf.len();
            self.scanned = self.pos;
            self.checked = 0;
            self.line_not_utf8 = false;
            self.skip_lf = false;
        }
        Ok(None)
    }

    /// Takes the line `buf[start..end]`, whose line end is at `end`; `utf8` says whether it is.
    fn take_line(
        &mut self,
        start: usize,
        end: usize,
        utf8: bool,
    ) -> Result<Option<RawEvent>, SseError> {
        let ended_by_cr = self.skip_lf;
        if start == end {
            self.event_bytes = 0;
            if self.fields.is_empty() {
                return Ok(None);
            }
            let lf_only = !(self.event_saw_cr || ended_by_cr);
            // The event's lines and its blank line leave the buffer without being copied.
            let consumed = self.pos;
            let bytes = self
                .buf
                .split_to(consumed)
                .freeze()
                .slice(self.event_start..);
            self.pos = 0;
            self.scanned -= consumed;
            self.event_start = 0;
            self.event_saw_cr = false;
            return Ok(Some(RawEvent {
                bytes,
                fields: std::mem::take(&mut self.fields),
                lf_only,
            }));
        }
        self.event_bytes = self.event_bytes.saturating_add(end - start + 1);
        if self.event_bytes > self.max_event_bytes {
            let max = self.max_event_bytes;
            return self.fail(SseError::EventTooLarge { max });
        }
        if !utf8 {
            return self.fail(SseError::InvalidUtf8);
        }
        if self.fields.is_empty() {
            self.event_start = start;
        }
        self.event_saw_cr |= ended_by_cr;
        let base = self.event_start;
        let field = parse_field(&self.buf[start..end], start - base);
        self.fields.push(field);
        Ok(None)
    }
}

/// The field of `line` (a complete line without its end), its ranges offset by `at`.
fn parse_field(line: &[u8], at: usize) -> RawField {
    let (kind, name, value) = match memchr::memchr(b':', line) {
        Some(0) => (Kind::Comment, 0..0, skip_one_space(line, 1)..line.len()),
        Some(colon) => {
            let kind = match &line[..colon] {
                b"event" => Kind::Event,
                b"data" => Kind::Data,
                b"id" => Kind::Id,
                b"retry" => Kind::Retry,
                _ => Kind::Other,
            };
            (kind, 0..colon, skip_one_space(line, colon + 1)..line.len())
        }
        None => {
            let kind = match line {
                b"event" => Kind::Event,
                b"data" => Kind::Data,
                b"id" => Kind::Id,
                b"retry" => Kind::Retry,
                _ => Kind::Other,
            };
            (kind, 0..line.len(), line.len()..line.len())
        }
    };
    RawField {
        kind,
        name: name.start + at..name.end + at,
        value: value.start + at..value.end + at,
    }
}

/// `from`, or one past it when the byte there is a space (the SSE spec strips exactly one).
fn skip_one_space(line: &[u8], from: usize) -> usize {
    if line.get(from) == Some(&b' ') {
        from + 1
    } else {
        from
    }
}

#[cfg(test)]
mod tests;
