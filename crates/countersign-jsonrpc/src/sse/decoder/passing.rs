//! Passing a large event on in parts as it arrives, instead of holding it until its blank line.
//!
//! An event is held whole so a relay can look at, or edit, its message. A relay that only needs
//! to read a message as it goes by (which request it answers) has no need to hold a 16 MiB
//! answer: once a data line is [`PASS_FROM_BYTES`] long and still arriving, its event is passed on
//! as the bytes arrive, each part checked as UTF-8 and counted against the event bound first.
//! The parts are slices of the received bytes (of whole upstream chunks, mostly), never copies;
//! only a line ended by CR is rewritten, to end with LF, as a held event would be re-encoded.
//!
//! A passed event can be cut part way: the upstream fails, sends bytes that are not UTF-8, or
//! goes past the bound. Its parts are already with the client, so the decoder then ends it with
//! [`CUT_EVENT`] as its type ([`SseDecoder::cut_passed_event`]): a client dispatches it, but not
//! as a `message`, so no client reads the truncated data as a message.

use std::ops::Range;

use bytes::Bytes;

use super::{Kind, RawEvent, SseDecoder, SseError, parse_field};

/// A data line this long, still arriving, has its event passed on in parts.
pub const PASS_FROM_BYTES: usize = 32 << 10;

/// The type given to an event passed on in part and then cut.
pub const CUT_EVENT: &str = "countersign-incomplete";

/// Where the passing of an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Passing {
    /// Inside the data line that started it: what arrives of that line goes on as it arrives.
    InLine,
    /// Between the event's later lines, each passed on once it is whole.
    AtLineStart,
}

/// What [`SseDecoder::next_piece`] yields.
#[derive(Debug)]
pub enum Piece {
    /// A whole event, held until its blank line.
    Event(RawEvent),
    /// The next part of an event passed on as it arrives.
    Part(PassedPart),
}

/// Bytes of a passed event to send on as they are, and which of them are its data.
#[derive(Debug)]
pub struct PassedPart {
    wire: Bytes,
    /// The part of `wire` that belongs to the event's data buffer.
    data: Option<Range<usize>>,
    /// The data starts a data line after the event's first: the data buffer has a line break
    /// before it.
    new_data_line: bool,
    ends_event: bool,
}

impl PassedPart {
    fn new(wire: Bytes, data: Option<Range<usize>>) -> PassedPart {
        PassedPart {
            wire,
            data,
            new_data_line: false,
            ends_event: false,
        }
    }

    /// The bytes to send on; every line in them ends with LF.
    pub fn wire(&self) -> &Bytes {
        &self.wire
    }

    pub fn into_wire(self) -> Bytes {
        self.wire
    }

    /// What this part adds to the event's data buffer, in order ([`SseEvent::data`]
    /// (super::super::SseEvent::data) read in parts).
    pub fn data(&self) -> impl Iterator<Item = &[u8]> {
        let line_break = self.new_data_line.then_some(&b"\n"[..]);
        let data = self.data.clone().map(|range| &self.wire[range]);
        line_break.into_iter().chain(data)
    }

    /// This is the event's last part: the event is complete, unless the decoder cut it (then
    /// its data is not a whole message either).
    pub fn ends_event(&self) -> bool {
        self.ends_event
    }
}

impl SseDecoder {
    /// The next whole event, or, when `pass_long_data` and an event has a data line longer
    /// than [`PASS_FROM_BYTES`] still arriving, the next part of that event: see the module
    /// documentation. `Ok(None)` until more bytes arrive. Not to be mixed with
    /// [`next_raw_event`](SseDecoder::next_raw_event) on one stream.
    pub fn next_piece(&mut self, pass_long_data: bool) -> Result<Option<Piece>, SseError> {
        if self.passing.is_some() {
            return self.next_part().map(|part| part.map(Piece::Part));
        }
        if let Some(event) = self.next_raw_event()? {
            return Ok(Some(Piece::Event(event)));
        }
        if pass_long_data && self.may_start_passing() {
            return Ok(Some(Piece::Part(self.start_passing())));
        }
        Ok(None)
    }

    /// [`next_piece`](SseDecoder::next_piece) at the end of the stream: as
    /// [`finish_raw`](SseDecoder::finish_raw), and an event passed in part is cut.
    pub fn finish_piece(&mut self, pass_long_data: bool) -> Result<Option<Piece>, SseError> {
        self.eof = true;
        self.next_piece(pass_long_data)
    }

    /// Appends a chunk of the stream. While a long data line is passed on, what the chunk holds
    /// of that line is passed on as a slice of it, not copied; only what follows the line's end
    /// is buffered.
    pub fn push_bytes(&mut self, mut chunk: Bytes) {
        let may_pass_directly = self.passing == Some(Passing::InLine)
            && self.direct.is_none()
            && self.pos == self.buf.len()
            && !self.skip_lf
            && self.failed.is_none();
        if may_pass_directly {
            let line_part = memchr::memchr2(b'\n', b'\r', &chunk).unwrap_or(chunk.len());
            // A character cut off by the chunk's end is buffered, to be checked whole.
            let valid = match simdutf8::compat::from_utf8(&chunk[..line_part]) {
                Ok(_) => line_part,
                Err(error) if error.error_len().is_none() => error.valid_up_to(),
                Err(_) => 0,
            };
            if valid > 0 {
                self.direct = Some(chunk.split_to(valid));
            }
        } else if let Some(direct) = self.direct.take() {
            self.push(&direct);
        }
        if !chunk.is_empty() {
            self.push(&chunk);
        }
    }

    /// Whether an event is being passed on in parts: until it ends, nothing may be sent between
    /// its parts (not even a comment, which would land inside its line).
    pub fn passing_an_event(&self) -> bool {
        self.passing.is_some()
    }

    /// The bytes that end an event passed on in part, when one was, as the decoder stops
    /// passing it: a line end if it stopped inside a line, then the [`CUT_EVENT`] type and the
    /// blank line.
    pub fn cut_passed_event(&mut self) -> Option<Bytes> {
        let passing = self.passing.take()?;
        self.direct = None;
        Some(cut_event(passing))
    }

    /// Whether the line arriving now is the event's first data line, long enough to pass.
    fn may_start_passing(&self) -> bool {
        self.failed.is_none()
            && !self.eof
            && self.bom_resolved
            && !self.skip_lf
            && !self.event_saw_cr
            && !self.line_not_utf8
            && self.checked >= self.pos + PASS_FROM_BYTES
            && self.buf[self.pos..].starts_with(b"data:")
            && self.fields.iter().all(|field| field.kind != Kind::Data)
    }

    /// Passes on the event so far: its earlier lines, whole, and what arrived of its data line.
    fn start_passing(&mut self) -> PassedPart {
        let start = if self.fields.is_empty() {
            self.pos
        } else {
            self.event_start
        };
        let value = self.pos + skip_space(&self.buf[self.pos..], 5);
        let upto = self.checked;
        self.event_bytes += upto - self.pos;
        let wire = self.buf.split_to(upto).freeze().slice(start..);
        self.fields.clear();
        self.event_start = 0;
        self.rebase_to_start();
        self.passing = Some(Passing::InLine);
        PassedPart::new(wire, Some(value - start..upto - start))
    }

    fn next_part(&mut self) -> Result<Option<PassedPart>, SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if let Some(chunk) = self.direct.take() {
            self.count_event_bytes(chunk.len(), 0)?;
            let data = 0..chunk.len();
            return Ok(Some(PassedPart::new(chunk, Some(data))));
        }
        let Some(end) = self.next_line_end() else {
            if self.passing != Some(Passing::InLine) {
                return self.out_of_passing_input();
            }
            if self.line_not_utf8 {
                return self.fail(SseError::InvalidUtf8);
            }
            let upto = self.checked.max(self.pos);
            if upto == self.pos {
                return self.out_of_passing_input();
            }
            self.count_event_bytes(upto - self.pos, self.buf.len() - upto)?;
            let wire = self.buf.split_to(upto).freeze().slice(self.pos..);
            self.rebase_to_start();
            let data = 0..wire.len();
            return Ok(Some(PassedPart::new(wire, Some(data))));
        };
        let start = self.pos;
        if !self.line_is_utf8(start, end) {
            return self.fail(SseError::InvalidUtf8);
        }
        self.skip_lf = self.buf[end] == b'\r';
        let line = self.buf.split_to(end + 1).freeze().slice(start..);
        self.rebase_to_start();
        if self.passing == Some(Passing::InLine) {
            self.count_event_bytes(end - start + 1, 0)?;
            self.passing = Some(Passing::AtLineStart);
            let data = 0..end - start;
            return Ok(Some(PassedPart::new(lf_ended(line), Some(data))));
        }
        if start == end {
            self.passing = None;
            self.event_bytes = 0;
            let mut part = PassedPart::new(lf_ended(line), None);
            part.ends_event = true;
            return Ok(Some(part));
        }
        self.count_event_bytes(end - start + 1, 0)?;
        let field = parse_field(&line[..end - start], 0);
        let data = (field.kind == Kind::Data).then_some(field.value);
        let mut part = PassedPart::new(lf_ended(line), data);
        part.new_data_line = part.data.is_some();
        Ok(Some(part))
    }

    /// Out of bytes while passing: at the end of the stream the event is cut.
    fn out_of_passing_input(&mut self) -> Result<Option<PassedPart>, SseError> {
        self.count_event_bytes(0, self.buf.len() - self.pos)?;
        if !self.eof {
            return Ok(None);
        }
        self.discarded_partial = true;
        let Some(wire) = self.cut_passed_event() else {
            return Ok(None);
        };
        self.event_bytes = 0;
        let mut part = PassedPart::new(wire, None);
        part.ends_event = true;
        Ok(Some(part))
    }

    /// The buffer now starts where the next unread byte is.
    fn rebase_to_start(&mut self) {
        self.pos = 0;
        self.scanned = 0;
        self.checked = 0;
    }
}

/// `line` (ending with its line end) ending with LF alone.
fn lf_ended(line: Bytes) -> Bytes {
    if line.ends_with(b"\n") {
        return line;
    }
    let mut ended = Vec::with_capacity(line.len());
    ended.extend_from_slice(&line[..line.len() - 1]);
    ended.push(b'\n');
    Bytes::from(ended)
}

/// What ends an event cut while passing it.
fn cut_event(passing: Passing) -> Bytes {
    let line_end = if passing == Passing::InLine { "\n" } else { "" };
    Bytes::from(format!("{line_end}event: {CUT_EVENT}\n\n"))
}

/// Past a field name of `name_len` bytes and its colon's one optional space.
fn skip_space(line: &[u8], name_len: usize) -> usize {
    if line.get(name_len) == Some(&b' ') {
        name_len + 1
    } else {
        name_len
    }
}

#[cfg(test)]
mod tests;
