//! Sessions: opened by `initialize`, one instance each or one shared, ended by DELETE; the
//! HTTP answers of a well-behaved Streamable HTTP server.

use http::Method;
use serde_json::json;

use super::*;

#[tokio::test]
async fn initialize_opens_a_session_the_gateway_names_on_its_own_instance() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, _instance, received) = h.open_session().await;
    assert_eq!(session.len(), 32, "a 128-bit random id: {session}");
    assert!(session.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        received["params"]["clientInfo"]["name"], "test",
        "the instance gets the client's own initialize"
    );
}

#[tokio::test]
async fn every_session_gets_an_instance_of_its_own() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (first, mut a, _) = h.open_session().await;
    let (second, mut b, _) = h.open_session().await;
    assert_ne!(first, second);

    let mut on_second = h.send(post(Some(&second), &call(1, "add"))).await.unwrap();
    let seen = b.answer("tools/call", text_result("b did it")).await;
    assert_eq!(seen["params"]["name"], "add");
    assert_eq!(on_second.message().await["result"], text_result("b did it"));
    assert!(
        a.nothing_more(),
        "the first session's instance never saw the second's call"
    );
    assert_eq!(
        h.metric("countersign_upstream_instances{"),
        ["countersign_upstream_instances{upstream=\"notes\"} 2"]
    );
}

#[tokio::test]
async fn an_unknown_session_is_not_found_so_the_client_starts_over() {
    let h = Harness::new(ProcessSharing::PerSession);
    for request in [
        post(Some("0123"), &call(1, "add")),
        get("0123"),
        delete("0123"),
    ] {
        let answer = h.send(request).await.unwrap();
        assert_eq!(answer.status, StatusCode::NOT_FOUND);
        let body = answer.json().await;
        assert_eq!(body["error"]["code"], -32001);
        assert_eq!(body["error"]["message"], "Session not found");
    }
}

#[tokio::test]
async fn delete_ends_the_session_and_stops_its_instance() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let answer = h.send(delete(&session)).await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    instance.gone().await;
    assert!(instance.was_stopped(), "the gateway stopped the process");
    let later = h.send(post(Some(&session), &call(1, "add"))).await.unwrap();
    assert_eq!(later.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_request_without_a_session_that_is_not_initialize_is_refused() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let answer = h.send(post(None, &call(1, "add"))).await.unwrap();
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(h.no_new_instance(), "nothing was started for it");
}

#[tokio::test]
async fn notifications_and_responses_alone_are_accepted_with_202() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let answer = h
        .send(post(
            Some(&session),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ))
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(instance.next().await["method"], "notifications/initialized");
}

#[tokio::test]
async fn a_second_get_stream_is_refused_while_the_first_is_open() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, _instance, _) = h.open_session().await;
    let first = h.send(get(&session)).await.unwrap();
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.content_type.as_deref(), Some("text/event-stream"));
    let second = h.send(get(&session)).await.unwrap();
    assert_eq!(second.status, StatusCode::CONFLICT);
    drop(first);
    let again = h.send(get(&session)).await.unwrap();
    assert_eq!(
        again.status,
        StatusCode::OK,
        "a client that lost its stream opens another"
    );
}

#[tokio::test]
async fn a_client_that_does_not_accept_event_streams_is_told_so() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, _instance, _) = h.open_session().await;
    let mut request = post(Some(&session), &call(1, "add"));
    request
        .headers_mut()
        .insert("accept", http::HeaderValue::from_static("application/json"));
    let answer = h.send(request).await.unwrap();
    assert_eq!(answer.status, StatusCode::NOT_ACCEPTABLE);
}

#[tokio::test]
async fn a_shared_instance_is_initialized_once_for_every_session() {
    let mut h = Harness::new(ProcessSharing::Shared);
    let first = h.send(post(None, &initialize(0)));
    let mut instance = h.instance().await;
    let result = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "shared", "version": "1"}});
    instance.answer("initialize", result.clone()).await;
    assert_eq!(
        instance.next().await["method"],
        "notifications/initialized",
        "the gateway completes the handshake itself"
    );
    let mut first = first.await.unwrap();
    assert_eq!(first.message().await["result"], result);

    let mut second = h.send(post(None, &initialize(5))).await.unwrap();
    let answer = second.message().await;
    assert_eq!(answer["id"], 5);
    assert_eq!(
        answer["result"], result,
        "the first session's InitializeResult, reused"
    );
    assert_ne!(first.session, second.session);
    assert!(h.no_new_instance(), "one instance for both sessions");

    // Neither client's own `initialized` reaches the server a second time.
    for session in [&first.session, &second.session] {
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = h
            .send(post(session.as_deref(), &initialized))
            .await
            .unwrap();
        assert_eq!(answer.status, StatusCode::ACCEPTED);
    }
    assert!(instance.nothing_more());
}

#[tokio::test]
async fn shared_sessions_using_the_same_ids_get_their_own_answers() {
    let mut h = Harness::new(ProcessSharing::Shared);
    let first = h.send(post(None, &initialize(0)));
    let mut instance = h.instance().await;
    instance
        .answer(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    instance.next().await;
    let a = first.await.unwrap().session.unwrap();
    let b = h
        .send(post(None, &initialize(0)))
        .await
        .unwrap()
        .session
        .unwrap();

    let mut on_a = h.send(post(Some(&a), &call(1, "who")));
    let seen_a = instance.next().await;
    let on_b = h.send(post(Some(&b), &call(1, "who")));
    let seen_b = instance.next().await;
    assert_ne!(
        seen_a["id"], seen_b["id"],
        "the instance never sees two requests with one id"
    );
    // Answered in the other order: each answer still finds its own session.
    instance.say(json!({"jsonrpc": "2.0", "id": seen_b["id"], "result": text_result("b")}));
    instance.say(json!({"jsonrpc": "2.0", "id": seen_a["id"], "result": text_result("a")}));
    let mut on_b = on_b.await.unwrap();
    assert_eq!(
        on_b.message().await,
        json!({"jsonrpc": "2.0", "id": 1, "result": text_result("b")})
    );
    let mut on_a = (&mut on_a).await.unwrap();
    assert_eq!(on_a.message().await["result"], text_result("a"));
}

#[tokio::test]
async fn a_server_refusing_initialize_opens_no_session() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let pending = h.send(post(None, &initialize(3)));
    let mut instance = h.instance().await;
    let request = instance.next().await;
    instance.say(json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": "Unsupported protocol version"}}));
    let mut answer = pending.await.unwrap();
    assert_eq!(answer.session, None);
    let message = answer.message().await;
    assert_eq!(message["id"], 3);
    assert_eq!(message["error"]["message"], "Unsupported protocol version");
    instance.gone().await;
    assert!(
        instance.was_stopped(),
        "an instance without a session is not kept"
    );
}

#[tokio::test]
async fn get_and_delete_without_a_session_are_refused_by_revision() {
    let h = Harness::new(ProcessSharing::PerSession);
    let legacy = h.send(request(Method::GET, None, "", &[])).await.unwrap();
    assert_eq!(legacy.status, StatusCode::BAD_REQUEST);
    let modern = h
        .send(request(
            Method::DELETE,
            None,
            "",
            &[("mcp-protocol-version", "2026-07-28")],
        ))
        .await
        .unwrap();
    assert_eq!(modern.status, StatusCode::METHOD_NOT_ALLOWED);
}
