//! HTTP/1.1 on the wire to a plain upstream, without hyper: the request written as one buffer,
//! the response head parsed with `httparse`, and the body's framing decoded from the bytes as
//! they arrive.
//!
//! hyper's client costs a connection task, a channel between it and the request, and buffers
//! of its own for every open connection (bench/floor's `floor-hybrid` against `floor`: about
//! 10 µs of CPU per request). Here the request's own task reads and writes the socket.
//!
//! The framing is strict where a lenient reading would let the upstream's answer be read two
//! ways (RFC 9112 §6.3): differing `Content-Length`s are refused, `Transfer-Encoding` wins over
//! `Content-Length` and the connection is then not reused, a transfer coding other than a final
//! `chunked` is read to the connection's close, and a chunk size or trailer that does not parse
//! is an error. A connection goes back to the pool only after its framing ended exactly.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};

use super::NOT_RETURNED;
use crate::http_fields::{ContentLength, connection_tokens, field_text};

/// A response head larger than this is refused (hyper's client allowed about 400 KiB of
/// buffer; MCP heads are a few hundred bytes).
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;
/// A chunk-size line (size and extensions) longer than this is refused.
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// Trailers are read and dropped, up to this many bytes in all.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// The upstream's answer broke HTTP/1.1: nothing more is read from the connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error("upstream response head is malformed: {0}")]
    Head(String),
    #[error("upstream response head exceeds {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("upstream response framing is malformed: {0}")]
    Framing(&'static str),
    #[error("upstream closed the connection before the response ended")]
    Truncated,
    #[error("reading the upstream's response")]
    Io(#[source] std::io::Error),
}

/// Appends `request` as HTTP/1.1 in origin form: request line, its headers (a
/// `Content-Length` of its own), and the body.
pub(super) fn encode_request(request: &Request<()>, body: &[u8], out: &mut Vec<u8>) {
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |target| target.as_str());
    write_request_line(request.method(), target, out);
    for (name, value) in request.headers() {
        // The body is always whole: its length is the one framing sent.
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        write_field(name.as_str(), value.as_bytes(), out);
    }
    write_length_and_body(request.method(), body, out);
}

/// `METHOD target HTTP/1.1`: the first line of every request written here.
pub(super) fn write_request_line(method: &Method, target: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// One header field line.
pub(super) fn write_field(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Whether a request carries a `Content-Length`: one with a body, or a POST's empty one.
pub(super) fn sends_length(method: &Method, body: &[u8]) -> bool {
    !body.is_empty() || method == Method::POST
}

/// The `Content-Length` the request is framed by (see [`sends_length`]), the end of the head,
/// and the body.
pub(super) fn write_length_and_body(method: &Method, body: &[u8], out: &mut Vec<u8>) {
    if sends_length(method, body) {
        write_field(
            "content-length",
            itoa::Buffer::new().format(body.len()).as_bytes(),
            out,
        );
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// A parsed response head: the response without its body, how the body is framed, and whether
/// the connection can carry another request once the body has ended.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) response: Response<()>,
    pub(super) framing: Framing,
    pub(super) reusable: bool,
}

/// Parses one response head from the front of `buf`, consuming it. `Ok(None)`: more bytes
/// are needed. Interim (1xx) responses are consumed and skipped.
pub(crate) fn parse_head(buf: &mut BytesMut) -> Result<Option<Head>, WireError> {
    loop {
        // Nothing to parse before the first read.
        if buf.is_empty() {
            return Ok(None);
        }
        // Uninitialized slots: filling 128 empty headers before every parse was a fifth of the
        // head's cost.
        let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let parsing = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut parsed,
            buf,
            &mut slots,
        );
        let length = match parsing {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
                return Err(WireError::HeadTooLarge);
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(error) => return Err(WireError::Head(error.to_string())),
        };
        let code = parsed.code.unwrap_or_default();
        let status =
            StatusCode::from_u16(code).map_err(|_| WireError::Head(format!("status {code}")))?;
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(WireError::Head("unrequested protocol switch".into()));
            }
            buf.advance(length);
            continue;
        }
        let hop = HopFields::read(parsed.headers);
        let (framing, exact) = hop.framing(status)?;
        // One copy of the head, sized to it, that every header value shares, rather than an
        // allocation per value; and nothing borrowed from the connection's read buffer, which a
        // long stream's response head would otherwise keep alive.
        let base = buf.as_ptr() as usize;
        let head = Bytes::copy_from_slice(&buf[..length]);
        let mut map = HeaderMap::with_capacity(parsed.headers.len());
        for header in parsed.headers.iter() {
            if hop.leaves_out(header.name) {
                continue;
            }
            let name = HeaderName::from_bytes(header.name.as_bytes())
                .map_err(|_| WireError::Head(format!("header name {:?}", header.name)))?;
            let start = header.value.as_ptr() as usize - base;
            let value =
                HeaderValue::from_maybe_shared(head.slice(start..start + header.value.len()))
                    .map_err(|_| WireError::Head(format!("value of {name}")))?;
            map.append(name, value);
        }
        let http10 = parsed.version == Some(0);
        let close = hop.listed.contains("close");
        buf.advance(length);
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = if http10 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        *response.headers_mut() = map;
        return Ok(Some(Head {
            response,
            framing,
            reusable: exact && !close && !http10,
        }));
    }
}

/// The hop-by-hop fields of a response head (RFC 9110 §7.6.1), read from the raw fields: they
/// frame the body and decide whether the connection is reused, and are never passed on, so the
/// head's map is built without them. The relay removes the same fields from any answer
/// (`upstream::is_not_returned` and the names `Connection` lists); building them into the map
/// only for it to find and remove them cost about 2,000 instructions an answer
/// (`bash bench/instructions.sh`).
struct HopFields<'h> {
    length: ContentLength,
    /// Whether any `Transfer-Encoding` field came.
    transfer_encoding: bool,
    /// The last coding the `Transfer-Encoding` fields named, or that one of them is not text.
    last_coding: Result<Option<&'h str>, &'static str>,
    /// The names `Connection` fields list (`close` among them, for reuse): left out too.
    listed: Listed<'h>,
}

/// The names `Connection` fields list, the first few kept here (an answer lists one or two, if
/// any); past those, the fields are read again for each name asked about.
struct Listed<'h> {
    fields: &'h [httparse::Header<'h>],
    names: [&'h str; 4],
    count: usize,
}

impl<'h> Listed<'h> {
    fn add(&mut self, name: &'h str) {
        if let Some(slot) = self.names.get_mut(self.count) {
            *slot = name;
        }
        self.count += 1;
    }

    fn contains(&self, name: &str) -> bool {
        if let Some(kept) = self.names.get(..self.count) {
            return kept.iter().any(|listed| listed.eq_ignore_ascii_case(name));
        }
        self.fields
            .iter()
            .filter(|field| field.name.eq_ignore_ascii_case("connection"))
            .any(|field| connection_tokens(field.value).any(|t| t.eq_ignore_ascii_case(name)))
    }
}

impl<'h> HopFields<'h> {
    /// Reads the fields; a malformed one is an error only where [`Self::framing`] needs it.
    fn read(fields: &'h [httparse::Header<'h>]) -> Self {
        let mut hop = HopFields {
            length: ContentLength::default(),
            transfer_encoding: false,
            last_coding: Ok(None),
            listed: Listed {
                fields,
                names: [""; 4],
                count: 0,
            },
        };
        for field in fields {
            let name = field.name;
            if name.eq_ignore_ascii_case("content-length") {
                hop.length.add(field.value);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                hop.transfer_encoding = true;
                if let Ok(before) = hop.last_coding {
                    hop.last_coding = match field_text(field.value) {
                        None => Err("transfer-encoding is not ASCII"),
                        Some(value) => Ok(value
                            .split(',')
                            .map(str::trim)
                            .rfind(|coding| !coding.is_empty())
                            .or(before)),
                    };
                }
            } else if name.eq_ignore_ascii_case("connection") {
                connection_tokens(field.value).for_each(|token| hop.listed.add(token));
            }
        }
        hop
    }

    /// How the body is framed, and whether that framing is unambiguous enough to reuse the
    /// connection after it.
    fn framing(&self, status: StatusCode) -> Result<(Framing, bool), WireError> {
        if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            return Ok((Framing::Length(0), true));
        }
        if self.transfer_encoding {
            return Ok(match self.last_coding.map_err(WireError::Framing)? {
                Some(coding) if coding.eq_ignore_ascii_case("chunked") => {
                    (Framing::chunked(), !self.length.is_present())
                }
                _ => (Framing::UntilClose, false),
            });
        }
        Ok(match self.length.value().map_err(WireError::Framing)? {
            Some(length) => (Framing::Length(length), true),
            None => (Framing::UntilClose, false),
        })
    }

    /// Whether the field `name` is hop-by-hop: one the relay never returns, or one a
    /// `Connection` field lists.
    fn leaves_out(&self, name: &str) -> bool {
        NOT_RETURNED
            .iter()
            .any(|hop| name.eq_ignore_ascii_case(hop))
            || self.listed.contains(name)
    }
}

/// Where a body's decoding stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Framing {
    /// This many bytes of body remain.
    Length(u64),
    Chunked(Chunk),
    /// Everything until the upstream closes the connection.
    UntilClose,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// This many bytes of the current chunk remain.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines up to an empty one, this many bytes read so far.
    Trailers(usize),
    Done,
}

/// What one step of decoding gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decoded {
    Data(Bytes),
    /// The body ended exactly.
    End,
    /// More bytes are needed.
    More,
}

impl Framing {
    fn chunked() -> Self {
        Framing::Chunked(Chunk::Size)
    }

    /// Whether the body has ended.
    pub(super) fn is_done(&self) -> bool {
        matches!(self, Framing::Length(0) | Framing::Chunked(Chunk::Done))
    }

    /// Decodes the next piece of body from the front of `buf`.
    pub(super) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, WireError> {
        match self {
            Framing::Length(0) => Ok(Decoded::End),
            Framing::Length(remaining) => Ok(take(buf, remaining)),
            Framing::UntilClose if buf.is_empty() => Ok(Decoded::More),
            Framing::UntilClose => Ok(Decoded::Data(buf.split().freeze())),
            Framing::Chunked(chunk) => decode_chunk(chunk, buf),
        }
    }

    /// The connection closed: the end of an until-close body, a truncation of any other.
    pub(super) fn at_close(&self) -> Result<(), WireError> {
        match self {
            Framing::UntilClose => Ok(()),
            _ if self.is_done() => Ok(()),
            _ => Err(WireError::Truncated),
        }
    }
}

/// Up to `remaining` bytes of body from `buf`.
fn take(buf: &mut BytesMut, remaining: &mut u64) -> Decoded {
    if buf.is_empty() {
        return Decoded::More;
    }
    let n = usize::try_from(*remaining).map_or(buf.len(), |left| left.min(buf.len()));
    *remaining -= n as u64;
    Decoded::Data(buf.split_to(n).freeze())
}

fn decode_chunk(chunk: &mut Chunk, buf: &mut BytesMut) -> Result<Decoded, WireError> {
    loop {
        match chunk {
            Chunk::Size => {
                let Some(line) = take_line(buf, MAX_CHUNK_LINE)? else {
                    return Ok(Decoded::More);
                };
                let size = chunk_size(&line)?;
                *chunk = if size == 0 {
                    Chunk::Trailers(0)
                } else {
                    Chunk::Data(size)
                };
            }
            Chunk::Data(remaining) => {
                let data = take(buf, remaining);
                if *remaining == 0 {
                    *chunk = Chunk::DataEnd;
                }
                return Ok(data);
            }
            Chunk::DataEnd => {
                if buf.len() < 2 {
                    return Ok(Decoded::More);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(WireError::Framing("chunk data not followed by CRLF"));
                }
                buf.advance(2);
                *chunk = Chunk::Size;
            }
            Chunk::Trailers(read) => {
                let Some(line) = take_line(buf, MAX_TRAILER_BYTES.saturating_sub(*read))? else {
                    return Ok(Decoded::More);
                };
                if line.is_empty() {
                    *chunk = Chunk::Done;
                } else {
                    *read += line.len() + 2;
                }
            }
            Chunk::Done => return Ok(Decoded::End),
        }
    }
}

/// One CRLF-terminated line from the front of `buf`, without its CRLF; `None` until whole.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, WireError> {
    let Some(at) = buf.windows(2).position(|pair| pair == b"\r\n") else {
        if buf.len() > max {
            return Err(WireError::Framing("chunk line too long"));
        }
        return Ok(None);
    };
    if at > max {
        return Err(WireError::Framing("chunk line too long"));
    }
    let line = buf.split_to(at);
    buf.advance(2);
    Ok(Some(line))
}

/// The size of a chunk-size line: hex digits, then optional `;extensions` (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, WireError> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii_end();
    if digits.is_empty() || digits.len() > 15 {
        return Err(WireError::Framing("chunk size"));
    }
    let mut size = 0u64;
    for &b in digits {
        let digit = (b as char)
            .to_digit(16)
            .ok_or(WireError::Framing("chunk size"))?;
        size = size * 16 + u64::from(digit);
    }
    Ok(size)
}

#[cfg(test)]
#[path = "http1_wire_tests.rs"]
mod tests;
