//! Instances starting, failing, crashing, idling and stopping.

use serde_json::json;

use super::*;
use crate::upstream::UpstreamState;

/// Waits until `done` holds (the bridge finishes an instance's end in its own task).
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(WAIT, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what} never happened");
}

fn instances_alive(h: &Harness) -> Vec<String> {
    h.metric("countersign_upstream_instances{")
}

#[tokio::test]
async fn an_instance_that_ends_answers_its_pending_requests_and_ends_its_sessions() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    let mut answer = h.send(post(Some(&session), &call(4, "add"))).await.unwrap();
    instance.next().await;
    instance.exit("exit status: 1");

    let error = answer.message().await;
    assert_eq!(error["id"], 4);
    assert_eq!(error["error"]["code"], -32603);
    assert_eq!(
        error["error"]["message"],
        "upstream `notes` ended (exit status: 1) before answering this request"
    );
    assert_eq!(answer.try_message().await, None);
    eventually("the session ends", || {
        h.bridge.inner.session(&session).is_none()
    })
    .await;
    let later = h.send(post(Some(&session), &call(5, "add"))).await.unwrap();
    assert_eq!(
        later.status,
        StatusCode::NOT_FOUND,
        "so the client initializes again"
    );
    assert_eq!(
        h.metric("countersign_upstream_instance_exits_total"),
        ["countersign_upstream_instance_exits_total{upstream=\"notes\",cause=\"crashed\"} 1"]
    );
}

#[tokio::test]
async fn an_instance_that_exits_at_once_fails_initialize_with_a_clear_error() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let pending = h.send(post(None, &initialize(0)));
    let mut instance = h.instance().await;
    assert_eq!(instance.next().await["method"], "initialize");
    instance.exit("exit status: 2");
    let answer = pending.await.unwrap();
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        answer.error_text(),
        "upstream `notes` is unavailable: it ended (exit status: 2) before answering; its stderr is in the gateway's log"
    );
    eventually("the failure is the upstream's state", || {
        matches!(h.bridge.state(), UpstreamState::Failed(_))
    })
    .await;
}

#[tokio::test]
async fn a_session_beyond_processes_max_is_refused_with_503() {
    let mut h = Harness::with(settings(ProcessSharing::PerSession, 1));
    let (session, mut instance, _) = h.open_session().await;
    let refused = h.send(post(None, &initialize(0))).await.unwrap();
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert!(
        refused.error_text().contains("processes.max"),
        "{}",
        refused.error_text()
    );
    assert!(h.no_new_instance());
    assert_eq!(
        h.metric("countersign_limit_hits_total{limit=\"upstream_instances\"}"),
        ["countersign_limit_hits_total{limit=\"upstream_instances\"} 1"]
    );

    h.send(delete(&session)).await.unwrap();
    instance.gone().await;
    eventually("the place is free", || {
        instances_alive(&h) == ["countersign_upstream_instances{upstream=\"notes\"} 0"]
    })
    .await;
    h.open_session().await;
}

#[tokio::test(start_paused = true)]
async fn failed_starts_back_off_exponentially_and_meanwhile_requests_get_the_last_failure() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let reason = "cannot start `mcp-notes`: no such program (on PATH, or at that path)";
    h.connector.failures.lock().unwrap().extend([
        reason.to_owned(),
        reason.to_owned(),
        reason.to_owned(),
    ]);
    let attempts = |h: &Harness| h.connector.attempts.load(Ordering::SeqCst);
    let initialize_now = |h: &Harness| h.send(post(None, &initialize(0)));

    let first = initialize_now(&h).await.unwrap();
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert!(
        first.error_text().contains(reason),
        "{}",
        first.error_text()
    );
    assert_eq!(h.bridge.state(), UpstreamState::Failed(reason.to_owned()));

    // Within the back-off nothing is started; the request says why and when.
    let waiting = initialize_now(&h).await.unwrap();
    assert_eq!(waiting.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(waiting.retry_after.as_deref(), Some("1"));
    assert!(
        waiting.error_text().contains(reason),
        "{}",
        waiting.error_text()
    );
    assert_eq!(attempts(&h), 1);

    // 500 ms, then 1 s, then 2 s between attempts.
    for (wait_ms, attempts_after) in [(500, 2), (600, 2), (400, 3), (1_900, 3), (100, 4)] {
        tokio::time::advance(Duration::from_millis(wait_ms)).await;
        let answer = initialize_now(&h);
        if attempts_after == 4 {
            let mut instance = h.instance().await;
            instance
                .answer(
                    "initialize",
                    json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
                )
                .await;
            assert_eq!(answer.await.unwrap().status, StatusCode::OK);
        } else {
            answer.await.unwrap();
        }
        assert_eq!(
            attempts(&h),
            attempts_after,
            "after waiting {wait_ms} ms more"
        );
    }
    assert_eq!(h.bridge.state(), UpstreamState::Ready);
}

#[tokio::test(start_paused = true)]
async fn a_crash_loop_backs_off_instead_of_spinning() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (session, mut instance, _) = h.open_session().await;
    instance.exit("exit status: 1");
    eventually("the session ends", || {
        h.bridge.inner.session(&session).is_none()
    })
    .await;
    let next = h.send(post(None, &initialize(0))).await.unwrap();
    assert_eq!(
        next.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        next.error_text()
    );
    assert!(
        next.error_text().contains("exit status: 1"),
        "{}",
        next.error_text()
    );
    assert!(h.no_new_instance());
}

#[tokio::test(start_paused = true)]
async fn an_idle_session_is_ended_and_its_instance_stopped() {
    let (mut settings, registry) = settings(ProcessSharing::PerSession, 8);
    settings.idle_timeout = Duration::from_secs(60);
    let mut h = Harness::with((settings, registry));
    let (session, mut instance, _) = h.open_session().await;
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert!(!instance.was_stopped());
    tokio::time::sleep(Duration::from_secs(2)).await;
    instance.gone().await;
    assert!(
        instance.was_stopped(),
        "reaped after 60 s with nothing in flight"
    );
    let later = h.send(post(Some(&session), &call(1, "add"))).await.unwrap();
    assert_eq!(later.status, StatusCode::NOT_FOUND);
}

#[tokio::test(start_paused = true)]
async fn an_open_get_stream_keeps_its_session_alive() {
    let (mut settings, registry) = settings(ProcessSharing::PerSession, 8);
    settings.idle_timeout = Duration::from_secs(60);
    let mut h = Harness::with((settings, registry));
    let (session, mut instance, _) = h.open_session().await;
    let stream = h.send(get(&session)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        !instance.was_stopped(),
        "a client listening on its GET stream is not idle"
    );
    drop(stream);
    tokio::time::sleep(Duration::from_secs(61)).await;
    instance.gone().await;
    assert!(instance.was_stopped());
}

#[tokio::test(start_paused = true)]
async fn an_idle_shared_instance_is_stopped_once_its_last_session_ends() {
    let (mut settings, registry) = settings(ProcessSharing::Shared, 8);
    settings.idle_timeout = Duration::from_secs(60);
    let mut h = Harness::with((settings, registry));
    let first = h.send(post(None, &initialize(0)));
    let mut instance = h.instance().await;
    instance
        .answer(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    instance.next().await;
    let session = first.await.unwrap().session.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    h.send(delete(&session)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(45)).await;
    assert!(!instance.was_stopped(), "idle for 45 s of 60");
    tokio::time::sleep(Duration::from_secs(20)).await;
    instance.gone().await;
    assert!(instance.was_stopped());
}

#[tokio::test]
async fn shutdown_stops_every_instance_and_waits_until_they_are_gone() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let (_, mut a, _) = h.open_session().await;
    let (_, mut b, _) = h.open_session().await;
    let stateless = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let _open = h.send(post(None, &stateless)).await.unwrap();
    let mut c = h.instance().await;

    tokio::time::timeout(WAIT, h.bridge.shutdown())
        .await
        .expect("shutdown finishes");
    for instance in [&mut a, &mut b, &mut c] {
        assert!(instance.was_stopped());
        instance.gone().await;
    }
    let after = h.send(post(None, &initialize(0))).await.unwrap();
    assert!(
        after.error_text().contains("shutting down"),
        "{}",
        after.error_text()
    );
    assert!(h.no_new_instance());
}

#[tokio::test]
async fn the_request_that_needs_an_instance_is_handed_to_the_connector() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let mut initialize = post(None, &initialize(0));
    initialize.headers_mut().insert(
        "authorization",
        http::HeaderValue::from_static("Bearer the-clients"),
    );
    let pending = h.send(initialize);
    let mut instance = h.instance().await;
    instance
        .answer(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    pending.await.unwrap();
    let opened_for = h.connector.opened_for.lock().unwrap().clone();
    assert_eq!(
        opened_for[0]["authorization"], "Bearer the-clients",
        "a connector that forwards credentials gets them from the session's initialize"
    );
}

#[tokio::test]
async fn the_probe_starts_an_instance_has_it_answer_and_stops_it() {
    let mut h = Harness::new(ProcessSharing::PerSession);
    let probe = tokio::spawn(h.bridge.probe());
    let mut instance = h.instance().await;
    let asked = instance
        .answer(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    assert_eq!(asked["params"]["clientInfo"]["name"], "countersign-probe");
    probe.await.unwrap().expect("the probe succeeds");
    instance.gone().await;
    assert!(instance.was_stopped(), "the probe leaves nothing running");

    let failing = Harness::new(ProcessSharing::PerSession);
    failing
        .connector
        .failures
        .lock()
        .unwrap()
        .push_back("cannot start `x`: no such program (on PATH, or at that path)".into());
    let error = failing.bridge.probe().await.expect_err("it cannot start");
    assert!(error.to_string().contains("no such program"), "{error}");
    assert!(matches!(failing.bridge.state(), UpstreamState::Failed(_)));
}
