use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use serde_json::json;
use tower::{ServiceExt, service_fn};

use super::{Hardening, HardeningRules};
use crate::body::ResponseBody;
use crate::config::{HostPattern, HostPolicy, default_origin_policy};
use crate::context::RequestContextExt;
use crate::metrics::ProxyMetrics;
use crate::route::{LegacyEndpoint, Route};
use crate::testing::{PATH, UPSTREAM, body_json, json_response, unused_route};

/// Sends `request` through hardening in front of an inner service that records the route of
/// every request it gets; returns the response and those routes.
async fn harden(request: Request<()>) -> (Response<ResponseBody>, Vec<Option<Route>>) {
    let rules = HardeningRules {
        routes: vec![unused_route()],
        origins: default_origin_policy(),
        hosts: HostPolicy {
            allowed: Some(HostPattern::loopback(None)),
        },
        max_body_bytes: 1024,
        metrics: ProxyMetrics::unregistered(),
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = {
        let seen = seen.clone();
        service_fn(move |request: Request<()>| {
            let seen = seen.clone();
            async move {
                let route = request.extensions().route().cloned();
                seen.lock().expect("lock").push(route);
                Ok::<_, Infallible>(json_response(&json!({"inner": true})))
            }
        })
    };
    let Ok(response) = Hardening::new(inner, Arc::new(rules))
        .oneshot(request)
        .await;
    let seen = seen.lock().expect("lock").clone();
    (response, seen)
}

fn post(path: &str) -> http::request::Builder {
    Request::post(path)
        .header("host", "localhost:8080")
        .header("content-type", "application/json")
}

#[tokio::test]
async fn an_unknown_path_is_404_and_never_reaches_the_inner_service() {
    let request = post("/mcp/").body(()).expect("request");

    let (response, seen) = harden(request).await;

    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(seen.is_empty(), "the inner service was called");
}

#[tokio::test]
async fn a_foreign_origin_is_403_and_never_reaches_the_inner_service() {
    let request = post(PATH)
        .header("origin", "http://evil.example")
        .body(())
        .expect("request");

    let (response, seen) = harden(request).await;

    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let answer = body_json(response).await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("http://evil.example")),
        "{answer}"
    );
    assert!(seen.is_empty(), "the inner service was called");
}

#[tokio::test]
async fn a_request_that_passes_carries_its_route() {
    let request = post(PATH)
        .header("origin", "http://localhost:3000")
        .body(())
        .expect("request");

    let (response, seen) = harden(request).await;

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_json(response).await, json!({"inner": true}));
    let [Some(route)] = seen.as_slice() else {
        panic!("expected one request with a Route inside, got {seen:?}");
    };
    assert_eq!(route.path, PATH);
    assert_eq!(route.upstream.name, UPSTREAM);
}

/// A route at `path` whose legacy SSE endpoint is `sse` (messages at `<sse>/messages`).
fn legacy_route(path: &str, sse: &str) -> Route {
    let plain = unused_route();
    Route(Arc::new(crate::route::RouteTarget {
        path: path.to_owned(),
        upstream: plain.upstream.clone(),
        label: plain.label,
        client: plain.client.clone(),
        legacy: Some(crate::config::LegacyPaths::new(sse)),
    }))
}

/// Sends `request` through hardening serving `routes`; returns the status and, if the request
/// got through, the path of its route and the legacy endpoint it was sent to.
async fn route_of(
    routes: Vec<Route>,
    request: Request<()>,
) -> (StatusCode, Option<(String, Option<LegacyEndpoint>)>) {
    let rules = HardeningRules {
        routes,
        origins: default_origin_policy(),
        hosts: HostPolicy { allowed: None },
        max_body_bytes: 1024,
        metrics: ProxyMetrics::unregistered(),
    };
    let seen = Arc::new(Mutex::new(None));
    let inner = {
        let seen = seen.clone();
        service_fn(move |request: Request<()>| {
            let seen = seen.clone();
            async move {
                let route = request.extensions().route().map(|r| r.path.clone());
                let legacy = request.extensions().get::<LegacyEndpoint>().copied();
                *seen.lock().expect("lock") = route.map(|r| (r, legacy));
                Ok::<_, Infallible>(json_response(&json!({})))
            }
        })
    };
    let Ok(response) = Hardening::new(inner, Arc::new(rules))
        .oneshot(request)
        .await;
    let seen = seen.lock().expect("lock").clone();
    (response.status(), seen)
}

fn get(target: &str) -> http::request::Builder {
    Request::get(target).header("host", "localhost:8080")
}

#[tokio::test]
async fn legacy_paths_are_routed_to_their_route_with_the_endpoint_marked() {
    let routes = || vec![legacy_route("/mcp", "/sse")];
    let stream = get("/sse").body(()).expect("request");
    assert_eq!(
        route_of(routes(), stream).await,
        (
            StatusCode::OK,
            Some(("/mcp".into(), Some(LegacyEndpoint::Stream)))
        )
    );
    let message = post("/sse/messages?session_id=abc")
        .body(())
        .expect("request");
    assert_eq!(
        route_of(routes(), message).await,
        (
            StatusCode::OK,
            Some(("/mcp".into(), Some(LegacyEndpoint::Messages)))
        )
    );
    let plain = post(PATH).body(()).expect("request");
    assert_eq!(
        route_of(routes(), plain).await,
        (StatusCode::OK, Some(("/mcp".into(), None)))
    );
}

#[tokio::test]
async fn each_legacy_path_takes_only_its_own_method_and_only_messages_take_a_query() {
    let routes = || vec![legacy_route("/mcp", "/sse")];
    for (request, status) in [
        (post("/sse").body(()), StatusCode::METHOD_NOT_ALLOWED),
        (
            Request::delete("/sse")
                .header("host", "localhost:8080")
                .body(()),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            get("/sse/messages?session_id=abc").body(()),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (get("/sse?session_id=abc").body(()), StatusCode::BAD_REQUEST),
        (
            post("/mcp?session_id=abc").body(()),
            StatusCode::BAD_REQUEST,
        ),
        (
            Request::post("/sse/messages?session_id=abc")
                .header("host", "localhost:8080")
                .header("content-type", "text/plain")
                .body(()),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
    ] {
        let request = request.expect("request");
        let what = format!("{} {}", request.method(), request.uri());
        assert_eq!(route_of(routes(), request).await, (status, None), "{what}");
    }
}

#[tokio::test]
async fn a_shared_path_opens_a_legacy_session_only_for_a_get_without_a_session_id() {
    let routes = || vec![legacy_route("/sse", "/sse")];
    let legacy = get("/sse").body(()).expect("request");
    assert_eq!(
        route_of(routes(), legacy).await,
        (
            StatusCode::OK,
            Some(("/sse".into(), Some(LegacyEndpoint::Stream)))
        )
    );
    let session_stream = get("/sse")
        .header("mcp-session-id", "s-1")
        .body(())
        .expect("request");
    assert_eq!(
        route_of(routes(), session_stream).await,
        (StatusCode::OK, Some(("/sse".into(), None)))
    );
    let message = post("/sse").body(()).expect("request");
    assert_eq!(
        route_of(routes(), message).await,
        (StatusCode::OK, Some(("/sse".into(), None)))
    );
}

#[tokio::test]
async fn a_content_length_list_the_server_accepted_is_read_as_its_one_value() {
    // The server frames `5, 5` as five bytes (RFC 9110 §8.6); hardening must read it the same
    // way rather than call it an internal error, and still bound it by the body limit.
    let request = post(PATH)
        .header("content-length", "5, 5")
        .body(())
        .expect("request");
    let (response, seen) = harden(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(seen.len(), 1, "the inner service was not called");

    let request = post(PATH)
        .header("content-length", "2048, 2048")
        .body(())
        .expect("request");
    let (response, seen) = harden(request).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(seen.is_empty(), "the inner service was called");
}

#[tokio::test]
async fn a_singleton_header_given_twice_is_refused_whatever_else_repeats() {
    // Alone, and beside a header that may repeat: the duplicate check must not be skipped
    // because some other header also has two values.
    for extra in [
        None,
        Some(("accept", ["application/json", "text/event-stream"])),
    ] {
        for singleton in ["mcp-name", "content-type", "authorization"] {
            let mut request = post(PATH).header(singleton, "one").header(singleton, "two");
            if let Some((name, values)) = extra {
                request = request.header(name, values[0]).header(name, values[1]);
            }
            let (response, seen) = harden(request.body(()).expect("request")).await;
            assert_eq!(
                response.status(),
                StatusCode::BAD_REQUEST,
                "{singleton} twice, {extra:?}"
            );
            assert!(seen.is_empty(), "the inner service was called");
        }
    }
    // Repeats of a header that may repeat are not refused.
    let request = post(PATH)
        .header("accept", "application/json")
        .header("accept", "text/event-stream")
        .body(())
        .expect("request");
    let (response, seen) = harden(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(seen.len(), 1, "the inner service was not called");
}
