//! A response head as the server writes it: status line, the service's headers except the
//! ones that frame the message (the server sets those), `Date`, and the framing it chose.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::response::Parts;
use http::{Method, StatusCode, Version};
use http_body::SizeHint;

/// How the server delimits a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseFraming {
    /// No body may follow (HEAD, 1xx, 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding: a stream whose length is not known up front.
    Chunked,
    /// An HTTP/1.0 client's stream of unknown length: ended by closing the connection.
    UntilClose,
}

/// Chooses the framing for a response to a `method` request of `version`: the body's exact
/// size when it knows it, else a `Content-Length` the service set, else chunked (or, for
/// HTTP/1.0, the connection's close).
pub(crate) fn choose_framing(
    method: &Method,
    version: Version,
    parts: &Parts,
    hint: &SizeHint,
) -> ResponseFraming {
    let status = parts.status;
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return ResponseFraming::None;
    }
    if let Some(exact) = hint.exact() {
        return ResponseFraming::Length(exact);
    }
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok());
    match declared {
        Some(length) => ResponseFraming::Length(length),
        None if version == Version::HTTP_10 => ResponseFraming::UntilClose,
        None => ResponseFraming::Chunked,
    }
}

/// Appends the head of a response: its status line, its headers, and the framing and
/// connection fields the server decided on.
pub(crate) fn encode_head(
    parts: &Parts,
    framing: ResponseFraming,
    version: Version,
    keep_alive: bool,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    let mut dated = false;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
            continue;
        }
        dated |= name == DATE;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !dated {
        out.extend_from_slice(b"date: ");
        with_date(|date| out.extend_from_slice(date));
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        ResponseFraming::Length(length) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        ResponseFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        ResponseFraming::None | ResponseFraming::UntilClose => {}
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The answer to a request head the server refused: no body, and the connection closes.
pub(crate) fn refusal(status: StatusCode) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\ndate: ");
    with_date(|date| out.extend_from_slice(date));
    out.extend_from_slice(b"\r\n\r\n");
    out
}

thread_local! {
    /// The formatted `Date` of the current second, per connection worker thread.
    static DATE_CACHE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
}

fn with_date(write: impl FnOnce(&[u8])) {
    let now = wall_clock();
    let second = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    DATE_CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.0 != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                cache.1.copy_from_slice(text.as_bytes());
                cache.0 = second;
            }
        }
        write(&cache.1);
    });
}

// The `Date` field is message metadata (RFC 9110 §6.6.1), not request timing: the wall clock
// directly, as hyper's server read it.
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> SystemTime {
    SystemTime::now()
}
