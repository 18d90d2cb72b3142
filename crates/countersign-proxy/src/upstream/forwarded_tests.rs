//! The wire encoding of a forwarded request against the header map it stands in for.

use proptest::prelude::*;

use super::*;
use crate::config::Secret;
use crate::testing::route;
use crate::upstream::http1_wire::encode_request;

/// Field names a client may send: forwarded ones, hop-by-hop and spoofing ones, the mirrored
/// ones, a credential, and names its `Connection` field may list.
const NAMES: &[&str] = &[
    "accept",
    "content-type",
    "mcp-protocol-version",
    "mcp-session-id",
    "x-custom",
    "x-listed",
    "authorization",
    "connection",
    "keep-alive",
    "te",
    "host",
    "content-length",
    "origin",
    "x-forwarded-host",
    "mcp-method",
    "mcp-name",
    "traceparent",
];

/// The request `encode_request` writes for [`Forwarded::into_request`].
fn through_the_map(forwarded: Forwarded<'_>, upstream: &Upstream) -> Vec<u8> {
    let (parts, body) = forwarded.into_request(upstream).into_parts();
    let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(body))
        .expect("a whole body is ready")
        .expect("infallible")
        .to_bytes();
    let mut wire = Vec::new();
    encode_request(&Request::from_parts(parts, ()), &body, &mut wire);
    wire
}

fn direct(forwarded: &Forwarded<'_>, upstream: &Upstream) -> Vec<u8> {
    let mut wire = Vec::new();
    forwarded.encode_http1(upstream, &mut wire);
    wire
}

fn upstream(replace_auth: bool) -> Upstream {
    let mut upstream = route("http://127.0.0.1:9/mcp?tenant=a").upstream.clone();
    if replace_auth {
        upstream.auth = UpstreamAuth::Replace(Secret(HeaderValue::from_static("Bearer gateway")));
    }
    upstream
}

#[test]
fn a_typical_call_is_written_with_the_gateways_fields_and_without_hop_by_hop_ones() {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("host", "gateway.example"),
        ("content-type", "application/json"),
        ("connection", "keep-alive, x-listed"),
        ("x-listed", "dropped"),
        ("authorization", "Bearer client"),
        ("mcp-method", "tools/call"),
        ("accept", "application/json"),
        ("accept", "text/event-stream"),
    ] {
        headers.append(name, HeaderValue::from_static(value));
    }
    let extra = [(
        HeaderName::from_static("mcp-method"),
        HeaderValue::from_static("tools/call"),
    )];
    let forwarded = Forwarded {
        method: Method::POST,
        client_headers: &headers,
        body: Bytes::from_static(b"{}"),
        extra: &extra,
    };
    let upstream = upstream(true);

    let wire = String::from_utf8(direct(&forwarded, &upstream)).expect("ascii");

    assert_eq!(
        wire,
        "POST /mcp?tenant=a HTTP/1.1\r\n\
         content-type: application/json\r\n\
         accept: application/json\r\n\
         accept: text/event-stream\r\n\
         authorization: Bearer gateway\r\n\
         host: 127.0.0.1:9\r\n\
         mcp-method: tools/call\r\n\
         content-length: 2\r\n\
         \r\n\
         {}"
    );
    assert_eq!(wire.as_bytes(), through_the_map(forwarded, &upstream));
}

/// A field value, often one naming other fields (as a `Connection` field's would).
fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("x-listed".to_owned()),
        Just("x-custom, te".to_owned()),
        Just("Keep-Alive, X-Listed".to_owned()),
        "[a-z, -]{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the client sends, the wire gets exactly what the map would have carried, in
    /// the same order: the direct encoding cannot forward a field the map path drops.
    #[test]
    fn the_wire_encoding_is_the_maps(
        fields in prop::collection::vec((0..NAMES.len(), field_value()), 0..12),
        method in prop::sample::select(vec![Method::POST, Method::GET, Method::DELETE]),
        body in prop::collection::vec(any::<u8>(), 0..4),
        replace_auth in any::<bool>(),
        mirrored in 0..3usize,
    ) {
        let mut headers = HeaderMap::new();
        for (name, value) in &fields {
            headers.append(NAMES[*name], HeaderValue::from_str(value).expect("visible ascii"));
        }
        let extra = [
            (HeaderName::from_static("mcp-method"), HeaderValue::from_static("tools/call")),
            (HeaderName::from_static("mcp-name"), HeaderValue::from_static("t")),
        ];
        let forwarded = || Forwarded {
            method: method.clone(),
            client_headers: &headers,
            body: Bytes::from(body.clone()),
            extra: &extra[..mirrored],
        };
        let upstream = upstream(replace_auth);
        prop_assert_eq!(direct(&forwarded(), &upstream), through_the_map(forwarded(), &upstream));
    }
}
