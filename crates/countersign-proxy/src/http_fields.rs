//! The two HTTP/1.1 fields the gateway reads in several places, read the same way in each: the
//! server (`downstream/`), the plain-upstream client (`upstream/http1_wire.rs`) and hardening.
//! Each reads them from the fields it walks anyway (the raw head, or the map once), one value
//! at a time. A length the server framed a body by is never read another way further in; the
//! body read asks the body itself (its exact size hint).

use http::HeaderMap;
use http::header::CONNECTION;

/// Whether a `Connection` field lists `token` (case-insensitively, RFC 9110 §7.6.1).
pub(crate) fn has_connection_token(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .any(|value| connection_tokens(value.as_bytes()).any(|t| t.eq_ignore_ascii_case(token)))
}

/// The names one `Connection` field value lists; none when the value is not text.
pub(crate) fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &str> {
    field_text(value)
        .into_iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
}

/// A message's `Content-Length`, fed one field value at a time: every field and every element
/// of a comma-separated list must be digits and all must agree (RFC 9110 §8.6), or the message
/// could be framed two ways.
///
/// Read as bytes: every request and every upstream answer is framed by it, so the text route
/// (UTF-8 check, `split`, `trim`, `parse`) was about 500 instructions a reading. The first
/// error is kept, not returned: the reader decides whether the length frames anything (a 204's
/// does not, nor one beside `Transfer-Encoding`).
#[derive(Debug)]
pub(crate) struct ContentLength {
    /// The length the fields so far agreed on (`None`: no field yet), or why they give none.
    read: Result<Option<u64>, &'static str>,
    /// Whether any field came, readable or not.
    present: bool,
}

impl Default for ContentLength {
    fn default() -> Self {
        ContentLength {
            read: Ok(None),
            present: false,
        }
    }
}

impl ContentLength {
    /// Reads the value of one more `Content-Length` field.
    pub(crate) fn add(&mut self, value: &[u8]) {
        self.present = true;
        if let Ok(seen) = self.read {
            self.read = Self::agreed(seen, value);
        }
    }

    fn agreed(mut seen: Option<u64>, value: &[u8]) -> Result<Option<u64>, &'static str> {
        // A field that is not visible ASCII is refused whole, before any of its parts is read
        // (what `HeaderValue::to_str` refuses).
        if !is_visible_ascii(value) {
            return Err(NOT_A_NUMBER);
        }
        for part in value.split(|&byte| byte == b',') {
            let parsed = decimal(part.trim_ascii())?;
            if seen.is_some_and(|seen| seen != parsed) {
                return Err("content-lengths differ");
            }
            seen = Some(parsed);
        }
        Ok(seen)
    }

    /// The length every field agreed on (`None` when there was no field), or why they did not.
    pub(crate) fn value(&self) -> Result<Option<u64>, &'static str> {
        self.read
    }

    /// Whether the message had a `Content-Length` field at all.
    pub(crate) fn is_present(&self) -> bool {
        self.present
    }
}

/// A field value as text, when it is text `HeaderValue::to_str` accepts.
pub(crate) fn field_text(value: &[u8]) -> Option<&str> {
    is_visible_ascii(value)
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// Whether a field value is text `HeaderValue::to_str` accepts: visible ASCII, spaces and tabs.
fn is_visible_ascii(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&byte| byte == b'\t' || (b' '..=b'~').contains(&byte))
}

const NOT_A_NUMBER: &str = "content-length is not a number";

/// A non-empty run of ASCII digits as a number.
fn decimal(digits: &[u8]) -> Result<u64, &'static str> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(NOT_A_NUMBER);
    }
    digits.iter().try_fold(0u64, |number, &digit| {
        number
            .checked_mul(10)
            .and_then(|number| number.checked_add(u64::from(digit - b'0')))
            .ok_or("content-length is too large")
    })
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use proptest::prelude::*;

    use super::*;
    use http::header::CONTENT_LENGTH;

    /// Every `Content-Length` field of `headers`, read in order.
    fn content_length(headers: &HeaderMap) -> Result<Option<u64>, &'static str> {
        let mut length = ContentLength::default();
        for value in headers.get_all(CONTENT_LENGTH) {
            length.add(value.as_bytes());
        }
        length.value()
    }

    /// The reading this module had before it read bytes: the reference the byte reading must
    /// agree with on every input.
    fn text_reading(headers: &HeaderMap) -> Result<Option<u64>, &'static str> {
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

    fn fields(values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(CONTENT_LENGTH, HeaderValue::from_bytes(value).unwrap());
        }
        headers
    }

    #[test]
    fn lengths_are_read_strictly() {
        assert_eq!(content_length(&fields(&[])), Ok(None));
        assert_eq!(content_length(&fields(&[b"42"])), Ok(Some(42)));
        assert_eq!(content_length(&fields(&[b" 42 , 42"])), Ok(Some(42)));
        assert_eq!(content_length(&fields(&[b"42", b"42"])), Ok(Some(42)));
        assert_eq!(
            content_length(&fields(&[b"42", b"43"])),
            Err("content-lengths differ")
        );
        for bad in [
            &b""[..],
            b"4 2",
            b"+42",
            b"-1",
            b"0x10",
            b"42,",
            b"\xc2\xb2",
        ] {
            assert_eq!(
                content_length(&fields(&[bad])),
                Err("content-length is not a number"),
                "{bad:?}"
            );
        }
        assert_eq!(
            content_length(&fields(&[b"18446744073709551616"])),
            Err("content-length is too large")
        );
        assert_eq!(
            content_length(&fields(&[b"18446744073709551615"])),
            Ok(Some(u64::MAX))
        );
    }

    proptest! {
        #[test]
        fn bytes_read_as_the_text_did(
            values in prop::collection::vec(
                prop::collection::vec(
                    prop::sample::select(b"0123456789 ,\t+-x9\x80\xff".to_vec()),
                    0..24,
                ),
                0..3,
            )
        ) {
            let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            let headers = fields(&values);
            prop_assert_eq!(content_length(&headers), text_reading(&headers));
        }
    }
}
