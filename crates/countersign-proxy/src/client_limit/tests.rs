use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

use super::slots::client_key;
use super::{ClientLimitLayer, PeerAddr};
use crate::config::{ClientAddress, ConnectionLimits};
use crate::context::RequestContextExt;
use crate::error::code;
use crate::metrics::ProxyMetrics;
use crate::testing::{MockHandle, PATH, body_json, json_response, mock_inner, received_nothing};

fn layer(limit: usize) -> ClientLimitLayer {
    let connections = ConnectionLimits {
        max_requests_per_client: NonZeroUsize::new(limit).expect("non-zero"),
        ..ConnectionLimits::default()
    };
    ClientLimitLayer::new(&connections, ProxyMetrics::unregistered())
}

fn from(peer: &str) -> Request<Full<Bytes>> {
    let mut request = Request::post(PATH)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("a valid request");
    let peer: SocketAddr = peer.parse().expect("a socket address");
    request.extensions_mut().context_mut().peer = Some(PeerAddr(peer));
    request
}

/// Sends `request` and lets the mock answer it; the response (its body still unread) is what
/// holds the client's slot.
async fn answered<S>(
    service: &mut S,
    handle: &mut MockHandle<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> http::Response<crate::body::ResponseBody>
where
    S: Service<
            Request<Full<Bytes>>,
            Response = http::Response<crate::body::ResponseBody>,
            Error = std::convert::Infallible,
        >,
{
    let response = service.ready().await.expect("ready").call(request);
    let (_, reply) = handle
        .next_request()
        .await
        .expect("the request reaches inside");
    reply.send_response(json_response(
        &json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
    ));
    response.await.expect("infallible")
}

#[tokio::test]
async fn a_client_past_its_limit_gets_429_and_nothing_passes() {
    let (inner, mut handle) = mock_inner();
    let mut service = layer(2).layer(inner);
    let _first = answered(&mut service, &mut handle, from("192.0.2.1:1000")).await;
    let _second = answered(&mut service, &mut handle, from("192.0.2.1:1001")).await;

    let refused = service
        .ready()
        .await
        .expect("ready")
        .call(from("192.0.2.1:1002"))
        .await
        .expect("infallible");

    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let answer = body_json(refused).await;
    assert_eq!(answer["error"]["code"], json!(code::TRANSPORT));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("max_requests_per_client"),
        "the error names the limit: {message}"
    );
    assert!(received_nothing(&mut handle));
}

#[tokio::test]
async fn a_finished_response_gives_the_slot_back() {
    let (inner, mut handle) = mock_inner();
    let mut service = layer(1).layer(inner);
    let first = answered(&mut service, &mut handle, from("192.0.2.1:1000")).await;
    // Headers alone do not finish a request: a stream holds its slot until its body ends.
    let refused = service
        .ready()
        .await
        .expect("ready")
        .call(from("192.0.2.1:1001"))
        .await
        .expect("infallible");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

    body_json(first).await;
    let second = answered(&mut service, &mut handle, from("192.0.2.1:1002")).await;
    assert_eq!(second.status(), StatusCode::OK);
}

#[tokio::test]
async fn other_clients_keep_their_own_slots() {
    let (inner, mut handle) = mock_inner();
    let mut service = layer(1).layer(inner);
    let _busy = answered(&mut service, &mut handle, from("192.0.2.1:1000")).await;
    let other = answered(&mut service, &mut handle, from("192.0.2.2:1000")).await;
    assert_eq!(other.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_slot_count_forgets_clients_with_nothing_in_flight() {
    let slots = std::sync::Arc::new(super::slots::ClientSlots::new(3));
    let a = slots.take(Some("192.0.2.1".parse().expect("ip")));
    let b = slots.take(Some("192.0.2.2".parse().expect("ip")));
    assert_eq!(slots.clients(), 2);
    drop((a, b));
    assert_eq!(slots.clients(), 0, "no entry outlives its last request");
}

fn ip(text: &str) -> Option<IpAddr> {
    Some(text.parse().expect("an IP address"))
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::try_from(*name).expect("a header name"),
            HeaderValue::try_from(*value).expect("a header value"),
        );
    }
    map
}

#[test]
fn the_peer_is_the_client_unless_a_header_is_configured() {
    let spoofed = headers(&[("x-forwarded-for", "198.51.100.7")]);
    assert_eq!(
        client_key(&ClientAddress::Peer, &spoofed, ip("192.0.2.1")),
        ip("192.0.2.1"),
        "a header nobody said to trust is ignored"
    );
    assert_eq!(
        client_key(
            &ClientAddress::Peer,
            &HeaderMap::new(),
            ip("::ffff:192.0.2.1")
        ),
        ip("192.0.2.1"),
        "an IPv4 client on a dual-stack listener is one client"
    );
}

#[test]
fn a_configured_header_names_the_client_by_its_last_entry() {
    let header = ClientAddress::Header(HeaderName::from_static("x-forwarded-for"));
    let peer = ip("10.0.0.9");
    // The client wrote the first entry; the trusted proxy appended the last.
    let chain = headers(&[("x-forwarded-for", "203.0.113.1, 198.51.100.7")]);
    assert_eq!(client_key(&header, &chain, peer), ip("198.51.100.7"));
    let repeated = headers(&[
        ("x-forwarded-for", "203.0.113.1"),
        ("x-forwarded-for", "198.51.100.8"),
    ]);
    assert_eq!(client_key(&header, &repeated, peer), ip("198.51.100.8"));
    let with_port = headers(&[("x-forwarded-for", "[2001:db8::1]:5000")]);
    assert_eq!(client_key(&header, &with_port, peer), ip("2001:db8::1"));
}

#[test]
fn a_missing_or_unreadable_header_counts_against_the_peer() {
    let header = ClientAddress::Header(HeaderName::from_static("x-real-ip"));
    let peer = ip("10.0.0.9");
    assert_eq!(client_key(&header, &HeaderMap::new(), peer), peer);
    let garbage = headers(&[("x-real-ip", "not-an-address")]);
    assert_eq!(client_key(&header, &garbage, peer), peer);
    assert_eq!(
        client_key(&header, &HeaderMap::new(), None),
        None,
        "no address at all is one shared client, not an unlimited one"
    );
}
