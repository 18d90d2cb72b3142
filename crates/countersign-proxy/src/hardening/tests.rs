use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use serde_json::json;
use tower::{ServiceExt, service_fn};

use super::{Hardening, HardeningRules};
use crate::body::ResponseBody;
use crate::config::{HostPattern, HostPolicy, default_origin_policy};
use crate::metrics::ProxyMetrics;
use crate::route::Route;
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
                let route = request.extensions().get::<Route>().cloned();
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
