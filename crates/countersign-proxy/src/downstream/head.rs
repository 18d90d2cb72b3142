//! A client's request head, parsed with `httparse`: the request without its body, how the body
//! is framed, and whether the connection may carry another request after it.
//!
//! The framing is strict where a lenient reading would let the request be read two ways
//! (RFC 9112 §6.3): differing or malformed `Content-Length`s end the connection with 400; with
//! `Transfer-Encoding` the `Content-Length` is dropped (it never frames anything), the body is
//! not read at all, and the connection closes after the answer, which the hardening layer makes
//! a refusal.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version};

use crate::http_fields::{ContentLength, connection_tokens};

/// Header slots on the stack; a `max_headers` above this parses into a heap array.
const STACK_HEADERS: usize = 128;

/// A request head the server refuses; the connection closes after the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeadError {
    #[error("malformed request head: {0}")]
    Malformed(&'static str),
    #[error("request head larger than the limit")]
    TooLarge,
    #[error("more header fields than the limit")]
    TooManyHeaders,
    #[error("unsupported expectation")]
    Expectation,
}

impl HeadError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            HeadError::Malformed(_) => StatusCode::BAD_REQUEST,
            HeadError::TooLarge | HeadError::TooManyHeaders => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            HeadError::Expectation => StatusCode::EXPECTATION_FAILED,
        }
    }
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// A `Transfer-Encoding` body: never read, and the connection is not reused after it.
    Refused,
}

#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) request: Request<()>,
    pub(crate) framing: BodyFraming,
    /// The client allows another request on this connection (HTTP/1.1 without
    /// `Connection: close`, or HTTP/1.0 with `Connection: keep-alive`).
    pub(crate) keep_alive: bool,
    /// The client waits for `100 Continue` before sending the body.
    pub(crate) expect_continue: bool,
}

/// The limits a request head is parsed under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLimits {
    pub(crate) max_headers: usize,
    pub(crate) max_head_bytes: usize,
}

impl From<&crate::config::Limits> for HeadLimits {
    fn from(limits: &crate::config::Limits) -> Self {
        Self {
            max_headers: limits.max_headers.get(),
            max_head_bytes: limits.max_header_bytes.get(),
        }
    }
}

/// Parses one request head from the front of `buf`, consuming it. `Ok(None)`: more bytes are
/// needed. Blank lines before a request line are skipped (RFC 9112 §2.2).
pub(crate) fn parse_request_head(
    buf: &mut BytesMut,
    limits: HeadLimits,
) -> Result<Option<RequestHead>, HeadError> {
    let blank = buf
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count();
    buf.advance(blank);
    if buf.is_empty() {
        return Ok(None);
    }
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= STACK_HEADERS {
        &mut stack[..limits.max_headers]
    } else {
        heap.resize_with(limits.max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut parsed = httparse::Request::new(&mut []);
    let length = match parsed.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(length)) if length > limits.max_head_bytes => {
            return Err(HeadError::TooLarge);
        }
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buf.len() > limits.max_head_bytes => {
            return Err(HeadError::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(_) => return Err(HeadError::Malformed("request line or header syntax")),
    };
    let method = Method::from_bytes(parsed.method.unwrap_or_default().as_bytes())
        .map_err(|_| HeadError::Malformed("method"))?;
    let uri: Uri = parsed
        .path
        .unwrap_or_default()
        .parse()
        .map_err(|_| HeadError::Malformed("request target"))?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    // One copy of the head, sized to it, that every header value shares: the values borrow
    // nothing from the read buffer, so a long-lived request does not keep that buffer alive.
    let base = buf.as_ptr() as usize;
    let head = Bytes::copy_from_slice(&buf[..length]);
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    let mut fields = FramingFields::default();
    for header in parsed.headers.iter() {
        fields.read(header);
        let name = header_name(header.name.as_bytes())?;
        let start = header.value.as_ptr() as usize - base;
        let value = HeaderValue::from_maybe_shared(head.slice(start..start + header.value.len()))
            .map_err(|_| HeadError::Malformed("header value"))?;
        headers.append(name, value);
    }
    buf.advance(length);

    let framing = if fields.transfer_encoding {
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, which a proxy must remove.
        headers.remove(CONTENT_LENGTH);
        BodyFraming::Refused
    } else {
        let length = fields.length.value().map_err(HeadError::Malformed)?;
        BodyFraming::Length(length.unwrap_or(0))
    };
    let keep_alive = match version {
        Version::HTTP_10 => fields.keep_alive,
        _ => !fields.close,
    } && framing != BodyFraming::Refused;
    let expect_continue = match fields.expect {
        None => false,
        Some(true) => version == Version::HTTP_11,
        Some(false) => return Err(HeadError::Expectation),
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Some(RequestHead {
        request,
        framing,
        keep_alive,
        expect_continue,
    }))
}

/// The fields MCP clients send that are not among `http`'s standard names, which
/// `HeaderName::from_bytes` would copy into an allocation of their own on every request.
/// A `static`: a `const` array is built and dropped again at every use, once per header.
static MCP_FIELDS: [HeaderName; 6] = [
    crate::wire::MCP_PROTOCOL_VERSION,
    crate::wire::MCP_METHOD,
    crate::wire::MCP_NAME,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("last-event-id"),
    HeaderName::from_static("traceparent"),
];

fn header_name(name: &[u8]) -> Result<HeaderName, HeadError> {
    if let Some(known) = MCP_FIELDS
        .iter()
        .find(|known| known.as_str().as_bytes().eq_ignore_ascii_case(name))
    {
        return Ok(known.clone());
    }
    HeaderName::from_bytes(name).map_err(|_| HeadError::Malformed("header name"))
}

/// The fields that frame the body and decide the connection's fate, read from the raw fields
/// in the pass that builds the map: looking each up in the map again cost about 900
/// instructions a request (`bash bench/instructions.sh`). Read as `http_fields` reads a map.
#[derive(Default)]
struct FramingFields {
    length: ContentLength,
    transfer_encoding: bool,
    /// A `Connection` field lists `close` / `keep-alive`.
    close: bool,
    keep_alive: bool,
    /// The first `Expect` field: whether it is `100-continue`.
    expect: Option<bool>,
}

impl FramingFields {
    fn read(&mut self, field: &httparse::Header<'_>) {
        let (name, value) = (field.name, field.value);
        if name.eq_ignore_ascii_case("content-length") {
            self.length.add(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            self.transfer_encoding = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in connection_tokens(value) {
                self.close |= token.eq_ignore_ascii_case("close");
                self.keep_alive |= token.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") && self.expect.is_none() {
            self.expect = Some(value.eq_ignore_ascii_case(b"100-continue"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<RequestHead, HeadError> {
        let limits = HeadLimits {
            max_headers: 32,
            max_head_bytes: 4096,
        };
        parse_request_head(&mut BytesMut::from(text.as_bytes()), limits)
            .map(|head| head.expect("a whole head"))
    }

    #[test]
    fn the_framing_fields_are_read_with_the_map_as_the_map_would_give_them() {
        // Keep-alive: HTTP/1.0 only when asked, in any case and place of the list; HTTP/1.1
        // unless `close` is listed, in any of its `Connection` fields.
        let keep = |text| parsed(text).expect("a head").keep_alive;
        assert!(keep("GET / HTTP/1.0\r\nConnection: x, Keep-Alive\r\n\r\n"));
        assert!(!keep("GET / HTTP/1.0\r\n\r\n"));
        assert!(keep("GET / HTTP/1.1\r\n\r\n"));
        assert!(!keep(
            "GET / HTTP/1.1\r\nConnection: x\r\nconnection: y, CLOSE\r\n\r\n"
        ));
        // The first `Expect` decides, as `HeaderMap::get` would.
        let expect = |text| parsed(text).map(|head| head.expect_continue);
        assert_eq!(
            expect("POST / HTTP/1.1\r\nExpect: 100-Continue\r\nExpect: x\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(
            expect("POST / HTTP/1.1\r\nExpect: x\r\nExpect: 100-continue\r\n\r\n"),
            Err(HeadError::Expectation)
        );
        // Lengths: a list of one value is that value; a malformed one is refused, unless
        // Transfer-Encoding makes the length frame nothing (it is then dropped from the map).
        let framing = |text| parsed(text).map(|head| head.framing);
        assert_eq!(
            framing("POST / HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n"),
            Ok(BodyFraming::Length(2))
        );
        assert!(matches!(
            framing("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        let chunked =
            parsed("POST / HTTP/1.1\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n")
                .expect("a head");
        assert_eq!(chunked.framing, BodyFraming::Refused);
        assert!(!chunked.keep_alive);
        assert!(!chunked.request.headers().contains_key(CONTENT_LENGTH));
    }
}
