//! The request head as hardening reads it: one walk over the fields, where each check looking
//! its field up (hashing the name, probing the map) cost a read about 1,000 instructions
//! (`bash bench/instructions.sh`).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::http_fields::{ContentLength, connection_tokens};

/// Headers that must appear at most once: a second copy is how parser differentials start
/// (one hop reads the first, another the last). Lowercase, and as the refusal names them.
const SINGLETON_HEADERS: &[(&str, &str)] = &[
    ("host", "Host"),
    ("content-length", "Content-Length"),
    ("content-type", "Content-Type"),
    ("content-encoding", "Content-Encoding"),
    ("origin", "Origin"),
    ("authorization", "Authorization"),
    ("mcp-session-id", "Mcp-Session-Id"),
    ("mcp-protocol-version", "MCP-Protocol-Version"),
    ("mcp-method", "Mcp-Method"),
    ("mcp-name", "Mcp-Name"),
    ("last-event-id", "Last-Event-ID"),
];

/// What the checks ask of a request's fields. A field's value here is its first, as
/// `HeaderMap::get` gives it; a singleton given twice is refused before any value is read.
#[derive(Debug, Default)]
pub(super) struct HeadFields<'a> {
    /// The first singleton field given more than once, in field order.
    pub(super) repeated_singleton: Option<&'static str>,
    /// The first field name with an underscore, in field order.
    pub(super) underscore: Option<&'a HeaderName>,
    pub(super) host: Option<&'a HeaderValue>,
    pub(super) origin: Option<&'a HeaderValue>,
    pub(super) content_type: Option<&'a HeaderValue>,
    pub(super) content_encoding: Option<&'a HeaderValue>,
    pub(super) length: ContentLength,
    /// An `Upgrade` field, or a `Connection` field listing `upgrade`.
    pub(super) upgrade: bool,
    pub(super) transfer_encoding: bool,
}

impl<'a> HeadFields<'a> {
    pub(super) fn read(headers: &'a HeaderMap) -> Self {
        let mut fields = HeadFields::default();
        // A map yields every value of one name before the next name.
        let mut previous: Option<&HeaderName> = None;
        for (name, value) in headers {
            let repeat = previous.is_some_and(|previous| std::ptr::eq(previous, name));
            previous = Some(name);
            if repeat {
                if fields.repeated_singleton.is_none() {
                    fields.repeated_singleton = SINGLETON_HEADERS
                        .iter()
                        .find(|(lower, _)| *lower == name.as_str())
                        .map(|(_, display)| *display);
                }
            } else if fields.underscore.is_none() && name.as_str().contains('_') {
                fields.underscore = Some(name);
            }
            fields.note(name, value);
        }
        fields
    }

    /// Takes in the next value of `name`; of a field the checks read once, the first is kept.
    fn note(&mut self, name: &HeaderName, value: &'a HeaderValue) {
        if name == header::HOST {
            self.host.get_or_insert(value);
        } else if name == header::ORIGIN {
            self.origin.get_or_insert(value);
        } else if name == header::CONTENT_TYPE {
            self.content_type.get_or_insert(value);
        } else if name == header::CONTENT_ENCODING {
            self.content_encoding.get_or_insert(value);
        } else if name == header::CONTENT_LENGTH {
            self.length.add(value.as_bytes());
        } else if name == header::UPGRADE {
            self.upgrade = true;
        } else if name == header::CONNECTION {
            self.upgrade |=
                connection_tokens(value.as_bytes()).any(|t| t.eq_ignore_ascii_case("upgrade"));
        } else if name == header::TRANSFER_ENCODING {
            self.transfer_encoding = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::http_fields::has_connection_token;

    /// The checks' reading before the walk: a lookup per field.
    fn looked_up(headers: &HeaderMap) -> String {
        let repeated = headers.keys().find_map(|name| {
            let singleton = SINGLETON_HEADERS
                .iter()
                .find(|(lower, _)| *lower == name.as_str())?;
            headers.get_all(name).iter().nth(1).map(|_| singleton.1)
        });
        let mut length = ContentLength::default();
        for value in headers.get_all(header::CONTENT_LENGTH) {
            length.add(value.as_bytes());
        }
        let length = length.value();
        format!(
            "{repeated:?} {:?} {:?} {:?} {:?} {:?} {length:?} {} {}",
            headers.keys().find(|name| name.as_str().contains('_')),
            headers.get(header::HOST),
            headers.get(header::ORIGIN),
            headers.get(header::CONTENT_TYPE),
            headers.get(header::CONTENT_ENCODING),
            headers.contains_key(header::UPGRADE) || has_connection_token(headers, "upgrade"),
            headers.contains_key(header::TRANSFER_ENCODING),
        )
    }

    fn walked(headers: &HeaderMap) -> String {
        let fields = HeadFields::read(headers);
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {}",
            fields.repeated_singleton,
            fields.underscore,
            fields.host,
            fields.origin,
            fields.content_type,
            fields.content_encoding,
            fields.length.value(),
            fields.upgrade,
            fields.transfer_encoding,
        )
    }

    proptest! {
        #[test]
        fn one_walk_reads_what_a_lookup_per_field_read(
            fields in prop::collection::vec((0usize..12, 0usize..5), 0..10)
        ) {
            const NAMES: [&str; 12] = [
                "host", "origin", "content-type", "content-encoding", "content-length",
                "connection", "upgrade", "transfer-encoding", "x_under", "accept", "mcp-name",
                "a_b",
            ];
            const VALUES: [&str; 5] = ["5", "6, 6", "keep-alive, Upgrade", "x", "close"];
            let mut headers = HeaderMap::new();
            for (name, value) in fields {
                headers.append(NAMES[name], HeaderValue::from_static(VALUES[value]));
            }
            prop_assert_eq!(walked(&headers), looked_up(&headers));
        }
    }
}
