//! Which stream each server message reaches, and what reaches the instance.

use serde_json::json;

use super::*;

#[tokio::test]
async fn ids_and_progress_tokens_are_the_instances_own_and_map_back() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let request = json!({"jsonrpc": "2.0", "id": "client-7", "method": "tools/call",
        "params": {"name": "count", "arguments": {}, "_meta": {"progressToken": "tok"}}});
    let mut answer = h.send(post(Some(&session), &request)).await.unwrap();
    assert_eq!(answer.content_type.as_deref(), Some("text/event-stream"));
    let seen = instance.next().await;
    let id = seen["id"].clone();
    assert!(id.is_i64(), "the instance sees its own integer id: {seen}");
    assert_eq!(seen["params"]["_meta"]["progressToken"], id);
    assert_eq!(seen["params"]["name"], "count");

    instance.say(json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": id, "progress": 1, "total": 2}}));
    instance.say(json!({"jsonrpc": "2.0", "id": id, "result": text_result("done")}));
    assert_eq!(
        answer.message().await,
        json!({"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": "tok", "progress": 1, "total": 2}})
    );
    assert_eq!(
        answer.message().await,
        json!({"jsonrpc": "2.0", "id": "client-7", "result": text_result("done")})
    );
    assert_eq!(
        answer.try_message().await,
        None,
        "the stream ends after its last response"
    );
}

#[tokio::test]
async fn a_server_request_during_a_call_reaches_its_stream_and_the_answer_goes_back() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let mut answer = h
        .send(post(Some(&session), &call(1, "confirm_delete")))
        .await
        .unwrap();
    let seen = instance.next().await;
    let question = json!({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create",
        "params": {"message": "Delete?", "requestedSchema": {"type": "object", "properties": {}}}});
    instance.say(question.clone());
    assert_eq!(
        answer.message().await,
        question,
        "asked on the call's own stream"
    );

    let reply = json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "accept", "content": {}}});
    let accepted = h.send(post(Some(&session), &reply)).await.unwrap();
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    assert_eq!(
        instance.next().await,
        reply,
        "the client's answer reaches the instance as sent"
    );

    instance.say(json!({"jsonrpc": "2.0", "id": seen["id"], "result": text_result("deleted")}));
    assert_eq!(answer.message().await["result"], text_result("deleted"));
}

#[tokio::test]
async fn a_server_request_with_nothing_pending_waits_for_the_get_stream() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, instance, _) = h.open_session().await;
    let roots = json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"});
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    instance.say(roots.clone());
    instance.say(changed.clone());
    let queued = || {
        let session = h
            .bridge
            .inner
            .session(&session)
            .expect("the session is open");
        session.instance.routing().queued(session.key)
    };
    let queued_both = tokio::time::timeout(WAIT, async {
        while queued() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(queued_both.is_ok(), "both are queued");

    let mut stream = h.send(get(&session)).await.unwrap();
    assert_eq!(
        stream.message().await,
        roots,
        "queued until a GET stream opened"
    );
    assert_eq!(stream.message().await, changed);
    let later = json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"});
    instance.say(later.clone());
    assert_eq!(stream.message().await, later, "and then straight onto it");
}

#[tokio::test]
async fn unrelated_notifications_during_a_call_ride_on_its_stream() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let _get = h.send(get(&session)).await.unwrap();
    let mut answer = h
        .send(post(Some(&session), &call(1, "add_note")))
        .await
        .unwrap();
    let seen = instance.next().await;
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}});
    instance.say(log.clone());
    instance.say(json!({"jsonrpc": "2.0", "id": seen["id"], "result": text_result("ok")}));
    assert_eq!(answer.message().await, log);
    assert_eq!(answer.message().await["result"], text_result("ok"));
}

#[tokio::test]
async fn a_batch_is_answered_on_one_stream_that_ends_after_both_answers() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let batch =
        json!([call(1, "a"), {"jsonrpc": "2.0", "method": "notifications/x"}, call(2, "b")]);
    let mut answer = h.send(post(Some(&session), &batch)).await.unwrap();
    let first = instance.next().await;
    assert_eq!(
        instance.next().await["method"],
        "notifications/x",
        "order is kept"
    );
    let second = instance.next().await;
    instance.say(json!({"jsonrpc": "2.0", "id": second["id"], "result": text_result("b")}));
    assert_eq!(answer.message().await["id"], 2);
    instance.say(json!({"jsonrpc": "2.0", "id": first["id"], "result": text_result("a")}));
    assert_eq!(answer.message().await["id"], 1);
    assert_eq!(answer.try_message().await, None);
}

#[tokio::test]
async fn only_the_session_asked_may_answer_a_shared_instances_request() {
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

    let mut on_a = h.send(post(Some(&a), &call(1, "ask"))).await.unwrap();
    instance.next().await;
    instance
        .say(json!({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {}}));
    assert_eq!(on_a.message().await["method"], "sampling/createMessage");

    let forged = json!({"jsonrpc": "2.0", "id": 0, "result": {"model": "b's answer"}});
    let answer = h.send(post(Some(&b), &forged)).await.unwrap();
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let real = json!({"jsonrpc": "2.0", "id": 0, "result": {"model": "a's answer"}});
    h.send(post(Some(&a), &real)).await.unwrap();
    assert_eq!(
        instance.next().await,
        real,
        "only the asked session's answer arrived"
    );
    assert!(instance.nothing_more());
}

#[tokio::test]
async fn a_server_request_nobody_can_take_is_answered_with_an_error() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    // A stateless (2026-07-28) request: no session, so no GET stream and no queue.
    let listing = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let mut open = h.send(post(None, &listing)).await.unwrap();
    let mut instance = h.instance().await;
    let seen = instance.next().await;
    let ask = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"});
    instance.say(ask(50));
    assert_eq!(
        open.message().await,
        ask(50),
        "while a request is open, its stream takes it"
    );
    instance.say(json!({"jsonrpc": "2.0", "id": seen["id"], "result": {"tools": []}}));
    assert_eq!(open.message().await["id"], 1);

    instance.say(ask(51));
    let answer = instance.next().await;
    assert_eq!(answer["id"], 51, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("roots/list"),
        "the instance is not left waiting: {answer}"
    );
}

#[tokio::test]
async fn stateless_requests_share_one_instance_and_a_closed_stream_cancels_its_request() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let stateless = |id: i64| {
        post(
            None,
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "slow", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
        )
    };
    let first = h.send(stateless(1)).await.unwrap();
    let mut instance = h.instance().await;
    let seen_first = instance.next().await;
    let mut second = h.send(stateless(1)).await.unwrap();
    let seen_second = instance.next().await;
    assert!(
        h.no_new_instance(),
        "one instance serves every stateless request"
    );
    assert_ne!(seen_first["id"], seen_second["id"]);
    assert_eq!(first.session, None, "no session for 2026-07-28");

    drop(first);
    let cancelled = instance.next().await;
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], seen_first["id"]);

    instance.say(json!({"jsonrpc": "2.0", "id": seen_second["id"], "result": text_result("2")}));
    assert_eq!(second.message().await["result"], text_result("2"));
}

#[tokio::test]
async fn a_client_cancelling_its_request_is_rewritten_for_the_instance() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let mut answer = h
        .send(post(Some(&session), &call("c1", "slow")))
        .await
        .unwrap();
    let seen = instance.next().await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "c1", "reason": "user"}});
    h.send(post(Some(&session), &cancel)).await.unwrap();
    let forwarded = instance.next().await;
    assert_eq!(forwarded["params"]["requestId"], seen["id"]);
    assert_eq!(forwarded["params"]["reason"], "user");
    assert_eq!(
        answer.try_message().await,
        None,
        "a cancelled request's stream ends"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_a_shared_stream_loses_it_and_stalls_nobody() {
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
    let slow = first.await.unwrap().session.unwrap();
    let quick = h
        .send(post(None, &initialize(0)))
        .await
        .unwrap()
        .session
        .unwrap();

    let mut flood_call = call(1, "flood");
    flood_call["params"]["_meta"] = json!({"progressToken": "p"});
    let mut unread = h.send(post(Some(&slow), &flood_call)).await.unwrap();
    let flood = instance.next().await;
    let mut on_quick = h.send(post(Some(&quick), &call(1, "quick"))).await.unwrap();
    let quick_call = instance.next().await;
    for i in 0..(super::super::routing::STREAM_CAPACITY + 8) {
        instance.say(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": flood["id"], "progress": i}}));
    }
    instance.say(json!({"jsonrpc": "2.0", "id": quick_call["id"], "result": text_result("quick")}));
    assert_eq!(on_quick.message().await["result"], text_result("quick"));
    let mut delivered = 0;
    while unread.try_message().await.is_some() {
        delivered += 1;
    }
    assert_eq!(
        delivered,
        super::super::routing::STREAM_CAPACITY,
        "the stalled stream was cut, not buffered"
    );
    assert_eq!(
        h.metric("countersign_limit_hits_total{limit=\"upstream_stream_stalled\"}"),
        ["countersign_limit_hits_total{limit=\"upstream_stream_stalled\"} 1"]
    );
}
