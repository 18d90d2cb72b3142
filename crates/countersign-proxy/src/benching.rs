//! Entry points for the criterion benches in `benches/` into code the crate keeps private: the
//! two HTTP/1.1 head parsers every read runs, once each. Not part of the supported API.

use bytes::BytesMut;

use crate::config::Limits;
use crate::downstream::{HeadLimits, parse_request_head};
use crate::upstream::parse_response_head;

/// Parses `head`, a client's request head, as the gateway's server does with the default
/// limits; the number of fields its map kept. Panics unless `head` is one whole, valid head.
pub fn parse_client_head(head: &[u8]) -> usize {
    let mut buf = BytesMut::from(head);
    let limits = HeadLimits::from(&Limits::default());
    let parsed = parse_request_head(&mut buf, limits).expect("a valid request head");
    assert!(buf.is_empty(), "the whole head was consumed");
    parsed
        .expect("a whole request head")
        .request
        .headers()
        .len()
}

/// Parses `head`, an upstream's response head, as a plain upstream connection does; the
/// number of fields its map kept. Panics unless `head` is one whole, valid head.
pub fn parse_upstream_head(head: &[u8]) -> usize {
    let mut buf = BytesMut::from(head);
    let parsed = parse_response_head(&mut buf).expect("a valid response head");
    assert!(buf.is_empty(), "the whole head was consumed");
    parsed
        .expect("a whole response head")
        .response
        .headers()
        .len()
}
