use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use countersign_policy::{Action, Policy, Risk};
use countersign_testkit::RecordingUpstream;
use countersign_testkit::mcp::{ScriptedServer, tool_call, tool_call_notification};
use http::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt, service_fn};

use super::Classification;
use crate::body::ResponseBody;
use crate::context::RequestContextExt;
use crate::error::code;
use crate::parse::Parsed;
use crate::route::Route;
use crate::state::CatalogState;
use crate::testing::{
    body_json, classify_layer, json_response, parsed_post, pinned_catalog, route, tool,
    unused_route,
};

/// What reached the inner service: one entry per request, with its classification.
type Seen = Arc<Mutex<Vec<Option<Classification>>>>;

/// The classify layer in front of an inner service that records what it gets.
fn classify(
    catalog: Arc<CatalogState>,
) -> (
    impl Service<Request<Parsed>, Response = Response<ResponseBody>, Error = Infallible> + Clone,
    Seen,
) {
    let seen = Seen::default();
    let inner = {
        let seen = seen.clone();
        service_fn(move |request: Request<Parsed>| {
            let seen = seen.clone();
            async move {
                let classification = request
                    .extensions()
                    .context()
                    .and_then(|c| c.classification.clone());
                seen.lock().expect("lock").push(classification);
                Ok::<_, Infallible>(json_response(&json!({"inner": true})))
            }
        })
    };
    let service = classify_layer(Policy::default(), catalog).layer(inner);
    (service, seen)
}

fn store_tools() -> Vec<Value> {
    vec![tool("list_products", true), tool("create_order", false)]
}

/// The one classification that reached the inner service.
fn only(seen: &Seen) -> Classification {
    let seen = seen.lock().expect("lock");
    let [Some(classification)] = seen.as_slice() else {
        panic!("expected one classified request inside, got {seen:?}");
    };
    classification.clone()
}

fn listings(upstream: &RecordingUpstream) -> usize {
    upstream
        .messages()
        .iter()
        .filter(|m| m["method"] == "tools/list")
        .count()
}

#[tokio::test]
async fn a_known_read_tool_is_allowed_without_listing_the_upstream() {
    let upstream = ScriptedServer::new(store_tools()).start().await;
    let (service, seen) = classify(pinned_catalog(&store_tools()));
    let call = tool_call(1, "list_products", json!({"q": "socks"}));

    let response = service
        .oneshot(parsed_post(
            &route(&upstream.url()),
            Some("ada"),
            &[],
            &call,
        ))
        .await;

    assert_eq!(response.expect("infallible").status(), StatusCode::OK);
    let classification = only(&seen);
    let [judged] = classification.calls.as_slice() else {
        panic!("one gated call: {classification:?}");
    };
    assert_eq!(judged.call.target, "list_products");
    assert_eq!(judged.call.arguments, json!({"q": "socks"}));
    assert_eq!(judged.decision.action, Action::Allow);
    assert!(
        judged.pinned.is_some(),
        "decided with the pinned definition"
    );
    assert!(upstream.requests().is_empty(), "nothing was listed");
}

#[tokio::test]
async fn an_unknown_tool_is_listed_once_with_the_callers_session_then_classified() {
    let upstream = ScriptedServer::new(store_tools()).start().await;
    let (service, seen) = classify(Arc::new(CatalogState::default()));
    let call = tool_call(1, "create_order", json!({"sku": "A-1"}));
    let request = parsed_post(
        &route(&upstream.url()),
        Some("ada"),
        &[("mcp-session-id", "session-1")],
        &call,
    );

    service.oneshot(request).await.expect("infallible");

    let requests = upstream.requests();
    let [listing] = requests.as_slice() else {
        panic!("expected exactly one request upstream, got {requests:?}");
    };
    assert_eq!(listing.json()["method"], "tools/list");
    assert_eq!(listing.header("mcp-session-id"), Some("session-1"));
    let classification = only(&seen);
    let judged = &classification.calls[0];
    assert!(judged.pinned.is_some(), "the listed definition was pinned");
    assert_eq!(judged.decision.risk, Risk::Write);
    assert_eq!(judged.decision.action, Action::Confirm);
}

#[tokio::test]
async fn concurrent_calls_to_the_same_unknown_tool_cause_one_listing() {
    let upstream = ScriptedServer::new(store_tools()).start().await;
    let (service, seen) = classify(Arc::new(CatalogState::default()));
    let route = route(&upstream.url());
    let call = |id| {
        parsed_post(
            &route,
            Some("ada"),
            &[],
            &tool_call(id, "create_order", json!({})),
        )
    };

    let (first, second) = tokio::join!(
        service.clone().oneshot(call(1)),
        service.clone().oneshot(call(2))
    );

    assert!(first.is_ok() && second.is_ok());
    assert_eq!(listings(&upstream), 1, "{:?}", upstream.messages());
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 2);
    for classification in seen.iter() {
        let judged = &classification.as_ref().expect("classified").calls[0];
        assert_eq!(judged.decision.risk, Risk::Write, "both used the listing");
    }
}

#[tokio::test]
async fn a_tools_call_sent_as_a_notification_is_classified_too() {
    let (service, seen) = classify(pinned_catalog(&store_tools()));
    let call = tool_call_notification("create_order", json!({"sku": "A-1"}));

    service
        .oneshot(parsed_post(&unused_route(), Some("ada"), &[], &call))
        .await
        .expect("infallible");

    let classification = only(&seen);
    let [judged] = classification.calls.as_slice() else {
        panic!("one gated call: {classification:?}");
    };
    assert_eq!(judged.call.target, "create_order");
    assert_eq!(judged.decision.action, Action::Confirm);
}

#[tokio::test]
async fn ungated_methods_pass_without_a_classification() {
    let (service, seen) = classify(pinned_catalog(&store_tools()));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    service
        .oneshot(parsed_post(&unused_route(), Some("ada"), &[], &list))
        .await
        .expect("infallible");

    assert!(matches!(seen.lock().expect("lock").as_slice(), [None]));
}

#[tokio::test]
async fn invalid_params_are_refused_with_the_request_id_and_never_reach_the_inner_service() {
    let (service, seen) = classify(pinned_catalog(&store_tools()));
    let nameless = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"arguments": {}}});

    let response = service
        .oneshot(parsed_post(&unused_route(), Some("ada"), &[], &nameless))
        .await
        .expect("infallible");

    let answer = body_json(response).await;
    assert_eq!(answer["id"], json!(9));
    assert_eq!(answer["error"]["code"], json!(code::INVALID_PARAMS));
    assert!(seen.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_gated_call_without_a_principal_is_401_and_lists_nothing() {
    let upstream = ScriptedServer::new(store_tools()).start().await;
    let (service, seen) = classify(Arc::new(CatalogState::default()));
    let call = tool_call(4, "create_order", json!({}));
    let route: Route = route(&upstream.url());

    let response = service
        .oneshot(parsed_post(&route, None, &[], &call))
        .await
        .expect("infallible");

    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(body_json(response).await["id"], json!(4));
    assert!(seen.lock().expect("lock").is_empty());
    assert!(
        upstream.requests().is_empty(),
        "an unauthenticated call made the gateway list tools"
    );
}
