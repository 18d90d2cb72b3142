use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use countersign_testkit::{RecordedRequest, RecordingUpstream, Reply};
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt as _, service_fn};

use super::*;
use crate::body::{ResponseBody, empty};
use crate::config::{HostPattern, HostPolicy};
use crate::identity::ResourceMetadata;
use crate::testing::{route, unreachable_url};

const METADATA: &str = "/.well-known/oauth-protected-resource/mcp";
const UPSTREAM_CHALLENGE: &str = r#"Bearer error="invalid_token", resource_metadata="http://10.1.2.3:9000/.well-known/oauth-protected-resource/mcp""#;

/// Monotonic time that moves only when told to (the cache's clock).
#[derive(Debug)]
struct SteppedClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl SteppedClock {
    #[allow(clippy::disallowed_methods)]
    fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    fn advance(&self, by: Duration) {
        *self.offset.lock().expect("clock") += by;
    }
}

impl Clock for SteppedClock {
    fn now(&self) -> Instant {
        self.start + *self.offset.lock().expect("clock")
    }

    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH
    }
}

fn document() -> Value {
    json!({
        "resource": "http://10.1.2.3:9000/mcp",
        "authorization_servers": ["https://login.example.com"],
        "scopes_supported": ["notes:read", "notes:write"],
        "resource_name": "Notes",
    })
}

/// An upstream serving `document()` at the well-known URL for `/mcp` only.
async fn upstream_with_document() -> RecordingUpstream {
    RecordingUpstream::with_responder(|request: &RecordedRequest| {
        if request.target == "/.well-known/oauth-protected-resource/mcp" {
            Reply::json(200, document())
        } else {
            Reply::status(404)
        }
    })
    .await
}

/// The discovery layer in front of an inner service that answers every request with 401 and
/// `UPSTREAM_CHALLENGE`, as an upstream doing its own OAuth does.
fn gateway(identity: &Identity, upstream_url: &str, clock: Arc<dyn Clock>) -> Gateway {
    gateway_for_hosts(identity, upstream_url, &HostPolicy { allowed: None }, clock)
}

/// [`gateway`] admitting only `hosts`.
fn gateway_for_hosts(
    identity: &Identity,
    upstream_url: &str,
    hosts: &HostPolicy,
    clock: Arc<dyn Clock>,
) -> Gateway {
    let discovery = Discovery::new(identity, &[route(upstream_url)], hosts, clock);
    Gateway::new(
        DiscoveryLayer::new(discovery).layer(service_fn(|_request: Request<()>| async {
            let mut response = Response::new(empty());
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static(UPSTREAM_CHALLENGE),
            );
            Ok::<_, Infallible>(response)
        })),
    )
}

type Gateway = BoxCloneService<Request<()>, Response<ResponseBody>, Infallible>;

async fn get(
    service: &Gateway,
    method: http::Method,
    path: &str,
) -> (StatusCode, http::HeaderMap, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "gw.example.com:8443")
        .body(())
        .expect("request");
    let response = service.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, json)
}

/// The gateway's answer to a `GET` of the route's metadata URL.
async fn metadata(service: &Gateway) -> (StatusCode, http::HeaderMap, Value) {
    get(service, http::Method::GET, METADATA).await
}

fn challenge(headers: &http::HeaderMap) -> &str {
    headers
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_upstreams_document_is_relayed_with_the_gateway_as_its_resource() {
    let upstream = upstream_with_document().await;
    let service = gateway(&Identity::default(), &upstream.url(), SteppedClock::new());
    for path in [METADATA, "/.well-known/oauth-protected-resource"] {
        let (status, headers, body) = get(&service, http::Method::GET, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let mut expected = document();
        expected["resource"] = json!("http://gw.example.com:8443/mcp");
        assert_eq!(
            body, expected,
            "{path}: all but `resource` as the upstream wrote it"
        );
    }

    let configured = Identity {
        public_url: Some("https://mcp.example.com".into()),
        ..Identity::default()
    };
    let service = gateway(&configured, &upstream.url(), SteppedClock::new());
    let (_, _, body) = metadata(&service).await;
    assert_eq!(body["resource"], "https://mcp.example.com/mcp");
}

#[tokio::test]
async fn the_upstreams_challenges_point_at_the_gateways_document() {
    let upstream = upstream_with_document().await;
    let service = gateway(&Identity::default(), &upstream.url(), SteppedClock::new());
    let (status, headers, _) = get(&service, http::Method::POST, "/mcp").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge(&headers),
        r#"Bearer error="invalid_token", resource_metadata="http://gw.example.com:8443/.well-known/oauth-protected-resource/mcp""#
    );
    // Only the route's answers are the upstream's to rewrite.
    let (_, headers, _) = get(&service, http::Method::POST, "/elsewhere").await;
    assert_eq!(challenge(&headers), UPSTREAM_CHALLENGE);
}

#[tokio::test]
async fn a_host_hardening_would_refuse_is_never_named_back() {
    let upstream = upstream_with_document().await;
    let only_the_real_host = HostPolicy {
        allowed: Some(vec![
            HostPattern::parse("mcp.example.com:8443").expect("pattern"),
        ]),
    };
    let service = gateway_for_hosts(
        &Identity::default(),
        &upstream.url(),
        &only_the_real_host,
        SteppedClock::new(),
    );
    // The test requests name gw.example.com:8443, which is not admitted.
    let (status, _, body) = metadata(&service).await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(body, Value::Null, "no document");
    assert!(
        upstream.requests().is_empty(),
        "the upstream was asked nothing"
    );
    let (_, headers, _) = get(&service, http::Method::POST, "/mcp").await;
    assert_eq!(
        challenge(&headers),
        UPSTREAM_CHALLENGE,
        "no rewrite naming a foreign host"
    );
}

#[tokio::test]
async fn the_origins_bare_well_known_url_is_asked_when_the_path_has_none() {
    let upstream = RecordingUpstream::with_responder(|request: &RecordedRequest| {
        if request.target == "/.well-known/oauth-protected-resource" {
            Reply::json(200, document())
        } else {
            Reply::status(404)
        }
    })
    .await;
    let service = gateway(&Identity::default(), &upstream.url(), SteppedClock::new());
    let (status, _, body) = metadata(&service).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["authorization_servers"],
        json!(["https://login.example.com"])
    );
    let asked: Vec<String> = upstream.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        asked,
        [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource"
        ]
    );
}

#[tokio::test]
async fn one_fetch_answers_every_discovery_for_a_minute() {
    let upstream = upstream_with_document().await;
    let clock = SteppedClock::new();
    let service = gateway(&Identity::default(), &upstream.url(), clock.clone());
    let path = METADATA;
    let answers =
        futures_util::future::join_all((0..20).map(|_| get(&service, http::Method::GET, path)))
            .await;
    assert!(
        answers
            .iter()
            .all(|(status, _, _)| *status == StatusCode::OK)
    );
    assert_eq!(
        upstream.requests().len(),
        1,
        "concurrent discoveries share one fetch"
    );

    clock.advance(Duration::from_secs(59));
    get(&service, http::Method::GET, path).await;
    assert_eq!(upstream.requests().len(), 1);
    clock.advance(Duration::from_secs(2));
    get(&service, http::Method::GET, path).await;
    assert_eq!(upstream.requests().len(), 2, "stale after a minute");
}

#[tokio::test]
async fn a_document_that_cannot_be_read_is_a_502_and_none_at_all_a_404() {
    let service = gateway(
        &Identity::default(),
        &unreachable_url(),
        SteppedClock::new(),
    );
    let path = METADATA;
    let (status, _, body) = get(&service, http::Method::GET, path).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(body["error"], "upstream_unavailable");

    for (reply, expected) in [
        (json!(["not", "an", "object"]), StatusCode::BAD_GATEWAY),
        (
            json!({"padding": "x".repeat(70 * 1024)}),
            StatusCode::BAD_GATEWAY,
        ),
    ] {
        let upstream = RecordingUpstream::with_responder(move |_: &RecordedRequest| {
            Reply::json(200, reply.clone())
        })
        .await;
        let service = gateway(&Identity::default(), &upstream.url(), SteppedClock::new());
        let (status, _, _) = get(&service, http::Method::GET, path).await;
        assert_eq!(status, expected);
    }

    let upstream =
        RecordingUpstream::with_responder(|_: &RecordedRequest| Reply::status(404)).await;
    let service = gateway(&Identity::default(), &upstream.url(), SteppedClock::new());
    let (status, _, body) = get(&service, http::Method::GET, path).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "not_found");

    let (status, headers, _) = get(&service, http::Method::POST, path).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers[header::ALLOW], "GET, HEAD");
}

#[tokio::test]
async fn a_gateway_that_is_the_resource_server_serves_its_own_and_relays_nothing() {
    let upstream = upstream_with_document().await;
    let identity = Identity {
        metadata: Some(Arc::new(ResourceMetadata {
            public_url: "https://mcp.example.com".into(),
            paths: vec!["/mcp".into()],
            authorization_servers: vec!["https://id.example.com".into()],
            scopes_supported: Vec::new(),
        })),
        public_url: Some("https://mcp.example.com".into()),
        ..Identity::default()
    };
    let service = gateway(&identity, &upstream.url(), SteppedClock::new());
    let (status, _, body) = metadata(&service).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["resource"], "https://mcp.example.com/mcp");
    assert_eq!(
        body["authorization_servers"],
        json!(["https://id.example.com"])
    );
    let (_, headers, _) = get(&service, http::Method::POST, "/mcp").await;
    assert_eq!(challenge(&headers), UPSTREAM_CHALLENGE);
    assert!(
        upstream.requests().is_empty(),
        "the upstream was asked nothing"
    );
}
