//! Entry points for the criterion benches in `benches/` into code the crate keeps private: the
//! two HTTP/1.1 head parsers every read runs, once each. Not part of the supported API.

use bytes::BytesMut;

/// Parses `head`, a client's request head, as the gateway's server does with its default
/// limits; the number of fields it kept. Panics when the head is not a complete, valid one.
pub fn parse_client_head(head: &[u8]) -> usize {
    let mut buf = BytesMut::from(head);
    let parsed = crate::downstream::parse_head_for_bench(&mut buf);
    assert!(buf.is_empty(), "the whole head was consumed");
    parsed
}

/// Parses `head`, an upstream's response head, as a plain upstream connection does; the
/// number of fields it kept. Panics when the head is not a complete, valid one.
pub fn parse_upstream_head(head: &[u8]) -> usize {
    let mut buf = BytesMut::from(head);
    let parsed = crate::upstream::parse_head_for_bench(&mut buf);
    assert!(buf.is_empty(), "the whole head was consumed");
    parsed
}
