use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use countersign_testkit::{RecordingUpstream, Reply};
use http::{HeaderMap, HeaderValue, Method, Uri};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{LegacySseConnector, resolve_endpoint};
use crate::config::Transport;
use crate::testing;
use crate::upstream::UpstreamClient;

#[test]
fn the_endpoint_resolves_against_the_sse_url_on_its_origin_only() {
    let sse: Uri = "http://127.0.0.1:3002/v1/sse".parse().expect("uri");
    let resolved = |announced: &str| resolve_endpoint(&sse, announced).map(|u| u.to_string());
    assert_eq!(
        resolved("/messages/?session_id=ab").as_deref(),
        Ok("http://127.0.0.1:3002/messages/?session_id=ab")
    );
    assert_eq!(
        resolved("message?sessionId=1").as_deref(),
        Ok("http://127.0.0.1:3002/v1/message?sessionId=1"),
        "a relative reference replaces the last path segment"
    );
    assert_eq!(
        resolved("http://127.0.0.1:3002/m?s=1").as_deref(),
        Ok("http://127.0.0.1:3002/m?s=1")
    );
    for foreign in [
        "http://evil.example/m?s=1",
        "https://127.0.0.1:3002/m",
        "http://127.0.0.1:3003/m",
    ] {
        let error = resolved(foreign).expect_err(foreign);
        assert!(error.contains("another origin"), "{foreign}: {error}");
    }
}

/// A legacy SSE server: `GET /sse` opens the stream the test feeds (starting with `endpoint`),
/// every POST is recorded and answered `post_status`.
async fn legacy_server(
    endpoint: &str,
    post_status: u16,
) -> (RecordingUpstream, mpsc::Sender<Bytes>) {
    let (stream, feed) = Reply::sse_stream();
    let stream = Arc::new(Mutex::new(Some(stream)));
    let server = RecordingUpstream::with_responder(move |request| {
        if request.method == Method::GET {
            stream
                .lock()
                .expect("lock")
                .take()
                .unwrap_or_else(|| Reply::status(409))
        } else {
            Reply::status(post_status)
        }
    })
    .await;
    feed.send(Bytes::from(format!(
        "event: endpoint\ndata: {endpoint}\n\n"
    )))
    .await
    .expect("the stream is open");
    (server, feed)
}

fn connector(server: &RecordingUpstream) -> LegacySseConnector {
    let route = testing::route(&format!("http://{}/sse", server.addr()));
    let mut upstream = route.upstream.clone();
    upstream.transport = Transport::LegacySse;
    LegacySseConnector::new(&upstream, UpstreamClient::new(&upstream), 1 << 20)
}

async fn next_message(from_server: &mut mpsc::Receiver<Bytes>) -> Value {
    let message = tokio::time::timeout(Duration::from_secs(10), from_server.recv())
        .await
        .expect("a message in time")
        .expect("the channel is open");
    serde_json::from_slice(&message).expect("JSON")
}

#[tokio::test]
async fn messages_go_to_the_announced_endpoint_and_answers_come_back_from_the_stream() {
    let (server, feed) = legacy_server("/messages/?session_id=ab12", 202).await;
    let mut headers = HeaderMap::new();
    headers.insert("authorization", HeaderValue::from_static("Bearer alice"));
    headers.insert(
        "mcp-session-id",
        HeaderValue::from_static("gateway-session"),
    );
    let mut channel = connector(&server).open_with(&headers).await.expect("opens");

    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    channel
        .to_server
        .send(Bytes::from_static(ping.as_bytes()))
        .await
        .expect("send");
    // The server answers on the stream once it has the message.
    tokio::time::timeout(Duration::from_secs(10), async {
        while !server.requests().iter().any(|r| r.method == Method::POST) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the message is posted");
    feed.send(Bytes::from_static(
        b": keep-alive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
    ))
    .await
    .expect("feed");

    assert_eq!(
        next_message(&mut channel.from_server).await,
        json!({"jsonrpc":"2.0","id":1,"result":{}})
    );
    let requests = server.requests();
    let get = &requests[0];
    assert_eq!(get.method, Method::GET);
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(get.header("authorization"), Some("Bearer alice"));
    let post = requests
        .iter()
        .find(|r| r.method == Method::POST)
        .expect("the message was posted");
    assert_eq!(post.target, "/messages/?session_id=ab12");
    assert_eq!(post.body, ping.as_bytes());
    assert_eq!(post.header("content-type"), Some("application/json"));
    assert_eq!(post.header("authorization"), Some("Bearer alice"));
    assert_eq!(
        post.header("mcp-session-id"),
        None,
        "the gateway's session id is not the upstream's business"
    );
}

#[tokio::test]
async fn a_refused_message_answers_its_request_with_an_error() {
    let (server, _feed) = legacy_server("/message?sessionId=1", 404).await;
    let mut channel = connector(&server)
        .open_with(&HeaderMap::new())
        .await
        .expect("opens");
    channel
        .to_server
        .send(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":"q","method":"tools/list"}"#,
        ))
        .await
        .expect("send");

    let answer = next_message(&mut channel.from_server).await;
    assert_eq!(answer["id"], "q");
    let message = answer["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("upstream `store`") && message.contains("HTTP 404"),
        "{message}"
    );
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_nothing_is_posted() {
    let (server, _feed) = legacy_server("http://203.0.113.9/messages?s=1", 202).await;
    let error = connector(&server)
        .open_with(&HeaderMap::new())
        .await
        .expect_err("foreign endpoint");
    assert!(error.to_string().contains("another origin"), "{error}");
    assert!(server.requests().iter().all(|r| r.method == Method::GET));
}

#[tokio::test]
async fn dropping_the_channel_closes_the_upstream_stream() {
    let (server, feed) = legacy_server("/messages/?session_id=1", 202).await;
    let channel = connector(&server)
        .open_with(&HeaderMap::new())
        .await
        .expect("opens");
    drop(channel);
    tokio::time::timeout(Duration::from_secs(10), feed.closed())
        .await
        .expect("the upstream saw its stream closed");
}

#[tokio::test]
async fn a_server_that_is_not_legacy_sse_is_a_clear_error() {
    let server = RecordingUpstream::with_responder(|_| Reply::status(405)).await;
    let error = connector(&server)
        .open_with(&HeaderMap::new())
        .await
        .expect_err("not SSE");
    assert!(
        error.to_string().contains("SSE endpoint answered HTTP 405"),
        "{error}"
    );
}
