//! The two HTTP/1.1 fields the gateway reads in several places, read the same way in each: the
//! server (`downstream/`), the plain-upstream client (`upstream/http1_wire.rs`), hardening and
//! the body read. A length the server framed a body by is never read another way further in.

use http::HeaderMap;
use http::header::{CONNECTION, CONTENT_LENGTH};

/// Whether a `Connection` field lists `token` (case-insensitively, RFC 9110 §7.6.1).
pub(crate) fn has_connection_token(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value
                .split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    })
}

/// The message's `Content-Length`, if it has one: every field and every element of a
/// comma-separated list must be digits and all must agree (RFC 9110 §8.6), or the message could
/// be framed two ways.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, &'static str> {
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.to_str().unwrap_or("x").split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err("content-length is not a number");
            }
            let parsed: u64 = part.parse().map_err(|_| "content-length is too large")?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err("content-lengths differ");
            }
            length = Some(parsed);
        }
    }
    Ok(length)
}
