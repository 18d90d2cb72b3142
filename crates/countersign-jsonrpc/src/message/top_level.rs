//! What a relayed message is, read from its top level as its bytes arrive: which request it
//! answers, and which method it names.
//!
//! A relay that has to answer every request still open when it cuts a stream needs to know, for
//! each upstream message, whether it is a response and to which id; one that watches for
//! `notifications/tools/list_changed` needs its method. That is asked of every message relayed
//! on a stream, up to 16 MiB each, and a large one is relayed piece by piece as it arrives, so
//! only the top level is read, in whatever pieces the bytes come in ([`TopLevelScan`]): each
//! value is passed over by finding where it ends (strings with a vectorised search for `"` and
//! `\`), and only the `id` and `method` values are kept.
//!
//! Nothing here judges a value: it is not the strict parse, and must not stand in for it where a
//! message is classified or forwarded as parsed. It checks the object's members and the nesting
//! of brackets, not each token inside a value, so an answer the upstream malformed inside its
//! result is still recognised by its id: the relay forwards upstream messages as they are, and
//! this only keeps its books. Text that is not an object, or whose members or brackets do not
//! close, is neither an answer nor names a method.

use super::{MAX_METHOD_BYTES, MAX_STRING_ID_BYTES, RequestId};
use crate::raw::scan::skip_whitespace;

/// How deeply values may nest, as in serde_json.
const MAX_DEPTH: usize = 128;

/// The longest member name kept: a name spelt longer, even with every character escaped
/// (`\u0000`, six bytes each), is longer than any member looked for.
const MAX_KEY_BYTES: usize = 64;

/// The longest `id` or `method` value kept, escapes and quotes included: room for the longest
/// id or method the strict parse accepts with every character escaped.
const MAX_KEPT_VALUE_BYTES: usize = 6 * if MAX_STRING_ID_BYTES > MAX_METHOD_BYTES {
    MAX_STRING_ID_BYTES
} else {
    MAX_METHOD_BYTES
} + 2;

/// The id of `text` when it is a JSON-RPC response (an object with `result` or `error`) whose
/// id is a string or an integer; `None` for anything else, including text that is not JSON.
/// A member named twice among `id`, `result` and `error` makes it no answer.
pub fn answer_id(text: &str) -> Option<RequestId> {
    let mut scan = TopLevelScan::default();
    scan.feed(text.as_bytes());
    scan.finish().answer_id
}

/// What [`TopLevelScan`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopLevel {
    /// As [`answer_id`] says.
    pub answer_id: Option<RequestId>,
    /// The `method` member's string, unless it is named twice or the text is no object.
    pub method: Option<String>,
}

/// Reads a message's top level from its bytes in pieces: [`feed`](TopLevelScan::feed) each
/// piece in order, then [`finish`](TopLevelScan::finish). Holds only the member name being read
/// and the `id` and `method` values, whatever the size of the message.
#[derive(Debug, Default)]
pub struct TopLevelScan {
    state: State,
    /// The closing bracket each open nested value expects, innermost last.
    open: Vec<u8>,
    /// Inside a string of a nested value.
    in_string: bool,
    /// The last byte read was a backslash inside a string.
    escaped: bool,
    /// The member whose name or value is being read.
    member: Member,
    /// The name being read, or the kept value being read; `None` once it is too long to keep.
    kept: Option<Vec<u8>>,
    id: Seen,
    method: Seen,
    result: Seen,
    error: Seen,
}

/// Where in the object the next byte is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening brace.
    #[default]
    Start,
    /// After the opening brace: a member name or the closing brace.
    FirstName,
    /// After a comma: a member name.
    Name,
    /// Inside a member name.
    InName,
    Colon,
    Value,
    InString,
    InNested,
    InScalar,
    /// After a value: a comma or the closing brace.
    AfterValue,
    /// After the closing brace: only whitespace.
    Closed,
    /// Not an object, or its members or brackets do not close: nothing is recognised.
    Broken,
}

/// The members looked for; every other member is passed over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Member {
    Id,
    Method,
    Result,
    Error,
    #[default]
    Other,
}

/// How often a member was seen, and the value kept of it.
#[derive(Debug, Default)]
enum Seen {
    #[default]
    Never,
    /// Once; the raw value when it is kept and short enough.
    Once(Option<Vec<u8>>),
    Twice,
}

impl Seen {
    fn saw(&mut self, value: Option<Vec<u8>>) {
        *self = match self {
            Seen::Never => Seen::Once(value),
            _ => Seen::Twice,
        };
    }

    fn once(&self) -> bool {
        matches!(self, Seen::Once(_))
    }

    fn twice(&self) -> bool {
        matches!(self, Seen::Twice)
    }

    fn value(&self) -> Option<&[u8]> {
        match self {
            Seen::Once(Some(value)) => Some(value),
            _ => None,
        }
    }
}

impl TopLevelScan {
    /// Reads the next piece of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while at < bytes.len() {
            at = match self.state {
                State::Broken => return,
                State::InName | State::InString => self.read_string(bytes, at),
                State::InNested => self.read_nested(bytes, at),
                State::InScalar => self.read_scalar(bytes, at),
                _ => {
                    at = skip_whitespace(bytes, at);
                    match bytes.get(at) {
                        Some(&byte) => self.structural(byte, at),
                        None => return,
                    }
                }
            };
        }
    }

    /// What the message is, once every piece was fed.
    pub fn finish(self) -> TopLevel {
        if self.state != State::Closed {
            return TopLevel::default();
        }
        let answers = (self.result.once() || self.error.once())
            && !(self.id.twice() || self.result.twice() || self.error.twice());
        TopLevel {
            answer_id: self.id.value().filter(|_| answers).and_then(request_id),
            method: self
                .method
                .value()
                .and_then(|raw| serde_json::from_slice(raw).ok()),
        }
    }

    /// `byte`, at `at`, is the next byte outside any value; returns where reading goes on.
    fn structural(&mut self, byte: u8, at: usize) -> usize {
        self.state = match (self.state, byte) {
            (State::Start, b'{') => State::FirstName,
            (State::FirstName, b'}') | (State::AfterValue, b'}') => State::Closed,
            (State::FirstName | State::Name, b'"') => {
                self.kept = Some(vec![b'"']);
                State::InName
            }
            (State::Colon, b':') => State::Value,
            (State::AfterValue, b',') => State::Name,
            (State::Value, b'"') => {
                self.start_value(b"\"");
                State::InString
            }
            (State::Value, b'{' | b'[') => {
                self.start_value(&[byte]);
                self.open.push(if byte == b'{' { b'}' } else { b']' });
                State::InNested
            }
            (State::Value, b',' | b'}' | b']' | b':') => State::Broken,
            (State::Value, _) => {
                self.start_value(&[byte]);
                State::InScalar
            }
            _ => State::Broken,
        };
        at + 1
    }

    /// A value of the current member starts with `first`: keep it if it is looked for.
    fn start_value(&mut self, first: &[u8]) {
        self.kept = matches!(self.member, Member::Id | Member::Method).then(|| first.to_vec());
    }

    /// Inside a name or a top-level string value, from `at`.
    fn read_string(&mut self, bytes: &[u8], at: usize) -> usize {
        let (end, closed) = self.string_part(bytes, at);
        self.keep(&bytes[at..end]);
        if closed {
            if self.state == State::InName {
                self.member = self.kept.take().map_or(Member::Other, |name| member(&name));
                self.state = State::Colon;
            } else {
                self.value_ended();
            }
        }
        end
    }

    /// Inside a nested value, from `at`: strings are passed over whole, brackets counted.
    fn read_nested(&mut self, bytes: &[u8], from: usize) -> usize {
        let mut at = from;
        while at < bytes.len() {
            if self.in_string {
                let (end, closed) = self.string_part(bytes, at);
                at = end;
                self.in_string = !closed;
                continue;
            }
            match bytes[at] {
                b'"' => self.in_string = true,
                b'{' => self.open.push(b'}'),
                b'[' => self.open.push(b']'),
                close @ (b'}' | b']') => {
                    if self.open.pop() != Some(close) {
                        self.state = State::Broken;
                        return bytes.len();
                    }
                    if self.open.is_empty() {
                        self.keep(&bytes[from..=at]);
                        self.value_ended();
                        return at + 1;
                    }
                }
                _ => {}
            }
            if self.open.len() > MAX_DEPTH {
                self.state = State::Broken;
                return bytes.len();
            }
            at += 1;
        }
        self.keep(&bytes[from..]);
        at
    }

    /// Inside a number or a literal, from `at`: it ends where a delimiter or whitespace starts.
    fn read_scalar(&mut self, bytes: &[u8], at: usize) -> usize {
        let end = bytes[at..]
            .iter()
            .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
            .map_or(bytes.len(), |n| at + n);
        self.keep(&bytes[at..end]);
        if end < bytes.len() {
            self.value_ended();
        }
        end
    }

    /// Inside a string, from `at`: where reading stopped, and whether the string closed there
    /// (just past its closing quote) or the piece ended first.
    fn string_part(&mut self, bytes: &[u8], mut at: usize) -> (usize, bool) {
        if std::mem::take(&mut self.escaped) {
            at += 1;
        }
        loop {
            let Some(found) = bytes
                .get(at..)
                .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
            else {
                return (bytes.len(), false);
            };
            at += found;
            if bytes[at] == b'"' {
                return (at + 1, true);
            }
            // A backslash and the byte it escapes, which may be in the next piece.
            if at + 1 == bytes.len() {
                self.escaped = true;
                return (bytes.len(), false);
            }
            at += 2;
        }
    }

    /// Adds `bytes` to the name or value being kept, giving it up once it is too long to be
    /// anything looked for.
    fn keep(&mut self, bytes: &[u8]) {
        let limit = if self.state == State::InName {
            MAX_KEY_BYTES
        } else {
            MAX_KEPT_VALUE_BYTES
        };
        if let Some(kept) = &mut self.kept {
            if kept.len() + bytes.len() > limit {
                self.kept = None;
            } else {
                kept.extend_from_slice(bytes);
            }
        }
    }

    fn value_ended(&mut self) {
        let kept = self.kept.take();
        match self.member {
            Member::Id => self.id.saw(kept),
            Member::Method => self.method.saw(kept),
            Member::Result => self.result.saw(None),
            Member::Error => self.error.saw(None),
            Member::Other => {}
        }
        self.state = State::AfterValue;
    }
}

/// Which member the quoted name `name` is; [`Member::Other`] when its escapes do not decode.
fn member(name: &[u8]) -> Member {
    let unescaped: String;
    let name = if name.contains(&b'\\') {
        match serde_json::from_slice(name) {
            Ok(decoded) => {
                unescaped = decoded;
                unescaped.as_bytes()
            }
            Err(_) => return Member::Other,
        }
    } else {
        &name[1..name.len() - 1]
    };
    match name {
        b"id" => Member::Id,
        b"method" => Member::Method,
        b"result" => Member::Result,
        b"error" => Member::Error,
        _ => Member::Other,
    }
}

/// The request id the raw value `raw` spells: a string or an integer.
fn request_id(raw: &[u8]) -> Option<RequestId> {
    if raw.starts_with(b"\"") {
        serde_json::from_slice::<String>(raw)
            .ok()
            .map(RequestId::String)
    } else {
        std::str::from_utf8(raw)
            .ok()?
            .parse()
            .ok()
            .map(RequestId::Number)
    }
}

#[cfg(test)]
mod tests;
