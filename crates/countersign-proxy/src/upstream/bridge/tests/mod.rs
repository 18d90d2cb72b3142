//! The bridge against scripted in-process instances: a [`FakeConnector`] hands the test each
//! instance it opens, and the test reads what the bridge wrote to it and answers as a server
//! would. What the fake instance received is the evidence.

mod lifecycle;
mod routing;
mod sessions;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::{Bridge, BridgeSettings};
use crate::body::ResponseBody;
use crate::clock::SystemClock;
use crate::config::ProcessSharing;
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;
use crate::upstream::{Channel, Connector, LocalUpstream};

const UPSTREAM: &str = "notes";
/// How long a test waits for something that must happen.
const WAIT: Duration = Duration::from_secs(10);

/// Opens fake instances, or fails to, as the test scripted.
#[derive(Debug, Default)]
struct FakeConnector {
    opened: Mutex<Option<mpsc::UnboundedSender<FakeInstance>>>,
    failures: Mutex<VecDeque<String>>,
    attempts: AtomicUsize,
    /// The headers of the request each open was for.
    opened_for: Mutex<Vec<http::HeaderMap>>,
}

impl Connector for FakeConnector {
    fn open(&self, request: &http::HeaderMap) -> BoxFuture<'static, Result<Channel, ProxyError>> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.opened_for.lock().unwrap().push(request.clone());
        let failure = self.failures.lock().unwrap().pop_front();
        let result = match failure {
            Some(reason) => Err(ProxyError::UpstreamUnavailable {
                upstream: UPSTREAM.into(),
                reason,
                retry_after: None,
            }),
            None => {
                let (channel, instance) = fake_instance();
                let sent = self
                    .opened
                    .lock()
                    .unwrap()
                    .as_ref()
                    .map(|tx| tx.send(instance));
                assert!(
                    matches!(sent, Some(Ok(()))),
                    "the test takes every instance"
                );
                Ok(channel)
            }
        };
        Box::pin(async move { result })
    }
}

/// The test's side of one instance.
struct FakeInstance {
    received: mpsc::Receiver<Bytes>,
    say: mpsc::UnboundedSender<Bytes>,
    exit: Option<oneshot::Sender<String>>,
    stopped: Arc<AtomicBool>,
    gone: Option<oneshot::Receiver<()>>,
}

/// The handle the bridge holds: dropping it "kills" the instance.
struct KillSwitch(Option<oneshot::Sender<()>>);

impl Drop for KillSwitch {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

fn fake_instance() -> (Channel, FakeInstance) {
    let (to_server, received) = mpsc::channel(64);
    let (from_tx, from_server) = mpsc::channel(64);
    let (say, mut said) = mpsc::unbounded_channel::<Bytes>();
    let (exit, exit_rx) = oneshot::channel::<String>();
    let (kill, mut killed) = oneshot::channel::<()>();
    let (ended_tx, ended_rx) = oneshot::channel::<String>();
    let (gone_tx, gone) = oneshot::channel();
    let stopped = Arc::new(AtomicBool::new(false));
    let stopped_flag = stopped.clone();
    tokio::spawn(async move {
        let mut exit_rx = exit_rx;
        let how = loop {
            tokio::select! {
                message = said.recv() => match message {
                    Some(message) => { let _ = from_tx.send(message).await; }
                    None => break "the test dropped it".to_owned(),
                },
                how = &mut exit_rx => break how.unwrap_or_else(|_| "the test dropped it".to_owned()),
                _ = &mut killed => {
                    stopped_flag.store(true, Ordering::SeqCst);
                    break "signal: 15 (SIGTERM)".to_owned();
                }
            }
        };
        drop(from_tx);
        let _ = ended_tx.send(how);
        let _ = gone_tx.send(());
    });
    let channel = Channel {
        to_server,
        from_server,
        instance: Box::new(KillSwitch(Some(kill))),
        describe: "fake".into(),
        ended: Box::pin(async move { ended_rx.await.unwrap_or_default() }),
    };
    let instance = FakeInstance {
        received,
        say,
        exit: Some(exit),
        stopped,
        gone: Some(gone),
    };
    (channel, instance)
}

impl FakeInstance {
    /// The next message the bridge wrote to the instance.
    async fn next(&mut self) -> Value {
        let bytes = tokio::time::timeout(WAIT, self.received.recv())
            .await
            .expect("the bridge writes to the instance")
            .expect("the instance is still open");
        serde_json::from_slice(&bytes).expect("the bridge writes JSON")
    }

    /// Whether the bridge has written nothing more (so far).
    fn nothing_more(&mut self) -> bool {
        self.received.try_recv().is_err()
    }

    /// The instance sends `message`.
    fn say(&self, message: Value) {
        self.say
            .send(Bytes::from(message.to_string()))
            .expect("the instance is running");
    }

    /// Answers the bridge's next message, which must be a request of `method`, with `result`.
    async fn answer(&mut self, method: &str, result: Value) -> Value {
        let request = self.next().await;
        assert_eq!(request["method"], method, "{request}");
        self.say(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}));
        request
    }

    /// The instance ends by itself, `how`.
    fn exit(&mut self, how: &str) {
        if let Some(exit) = self.exit.take() {
            let _ = exit.send(how.to_owned());
        }
    }

    /// Whether the bridge stopped it (dropped its handle).
    fn was_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Waits until the instance is gone, however it ended.
    async fn gone(&mut self) {
        if let Some(gone) = self.gone.take() {
            tokio::time::timeout(WAIT, gone)
                .await
                .expect("the instance ends")
                .expect("the fake reports its end");
        }
    }
}

/// A bridge over a [`FakeConnector`], and the instances it opens.
struct Harness {
    bridge: Bridge,
    connector: Arc<FakeConnector>,
    opened: mpsc::UnboundedReceiver<FakeInstance>,
    registry: prometheus_client::registry::Registry,
}

fn settings(
    sharing: ProcessSharing,
    max: usize,
) -> (BridgeSettings, prometheus_client::registry::Registry) {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ProxyMetrics::register(&mut registry);
    let settings = BridgeSettings {
        upstream: UPSTREAM.into(),
        label: UPSTREAM,
        sharing,
        max_instances: max,
        idle_timeout: Duration::from_secs(600),
        max_message_bytes: 1 << 20,
        start_timeout: Duration::from_secs(5),
        serves_stateless: true,
        clock: Arc::new(SystemClock),
        metrics,
    };
    (settings, registry)
}

impl Harness {
    fn new(sharing: ProcessSharing) -> Self {
        Self::with(settings(sharing, 8))
    }

    fn with((settings, registry): (BridgeSettings, prometheus_client::registry::Registry)) -> Self {
        let connector = Arc::new(FakeConnector::default());
        let (tx, opened) = mpsc::unbounded_channel();
        *connector.opened.lock().unwrap() = Some(tx);
        let bridge = Bridge::new(connector.clone(), settings);
        Self {
            bridge,
            connector,
            opened,
            registry,
        }
    }

    /// The next instance the bridge opened.
    async fn instance(&mut self) -> FakeInstance {
        tokio::time::timeout(WAIT, self.opened.recv())
            .await
            .expect("the bridge opens an instance")
            .expect("the connector is alive")
    }

    fn no_new_instance(&mut self) -> bool {
        self.opened.try_recv().is_err()
    }

    /// Sends a request to the bridge in the background.
    fn send(&self, request: Request<Full<Bytes>>) -> tokio::task::JoinHandle<Answer> {
        let future = self.bridge.serve(request);
        tokio::spawn(async move {
            let answer = tokio::time::timeout(WAIT, future)
                .await
                .expect("the bridge answers in time");
            Answer::from(answer)
        })
    }

    /// `initialize` on a per-session bridge: a new instance answers it. Returns the session id,
    /// the instance, and what it received.
    async fn open_session(&mut self) -> (String, FakeInstance, Value) {
        let pending = self.send(post(None, &initialize(0)));
        let mut instance = self.instance().await;
        let received = instance
            .answer("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "fake", "version": "1"}}))
            .await;
        let mut answer = pending.await.expect("the bridge answers");
        assert_eq!(answer.status, StatusCode::OK);
        let session = answer.session.clone().expect("a session id");
        assert_eq!(
            answer.message().await["result"]["serverInfo"]["name"],
            "fake"
        );
        (session, instance, received)
    }

    /// The metrics in Prometheus text: the lines mentioning `name`.
    fn metric(&self, name: &str) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("encodes");
        text.lines()
            .filter(|line| line.starts_with(name))
            .map(str::to_owned)
            .collect()
    }
}

/// A bridge's answer, its body read message by message.
struct Answer {
    status: StatusCode,
    session: Option<String>,
    content_type: Option<String>,
    retry_after: Option<String>,
    body: Option<ResponseBody>,
    /// The error the bridge answered with, as the client will read it.
    error: Option<String>,
}

impl From<Result<Response<ResponseBody>, ProxyError>> for Answer {
    fn from(result: Result<Response<ResponseBody>, ProxyError>) -> Self {
        match result {
            Ok(response) => {
                let header = |name: &str| {
                    response
                        .headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                Answer {
                    status: response.status(),
                    session: header("mcp-session-id"),
                    content_type: header("content-type"),
                    retry_after: header("retry-after"),
                    body: Some(response.into_body()),
                    error: None,
                }
            }
            Err(error) => {
                // The headers the forwarder will answer with (Retry-After).
                let text = error.to_string();
                let response = error.into_response(None);
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                Answer {
                    status: response.status(),
                    session: None,
                    content_type: None,
                    retry_after,
                    body: None,
                    error: Some(text),
                }
            }
        }
    }
}

impl Answer {
    /// The next message of an event-stream answer.
    async fn message(&mut self) -> Value {
        self.try_message()
            .await
            .expect("one more message on the stream")
    }

    /// The next message, or `None` once the stream has ended.
    async fn try_message(&mut self) -> Option<Value> {
        let body = self.body.as_mut().expect("an answer with a body");
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("the stream moves")?
            .expect("the stream has no error");
        let data = frame.into_data().expect("a data frame");
        let text = std::str::from_utf8(&data).expect("SSE is UTF-8");
        let json = text
            .strip_prefix("event: message\ndata: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("one message event per frame: {text:?}"));
        Some(serde_json::from_str(json).expect("a JSON message"))
    }

    /// The whole body of a non-streaming answer, as JSON.
    async fn json(self) -> Value {
        let body = self.body.expect("an answer with a body");
        let bytes = body.collect().await.expect("a body").to_bytes();
        serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("JSON: {bytes:?}"))
    }

    fn error_text(&self) -> String {
        self.error.clone().unwrap_or_default()
    }
}

fn request(
    method: Method,
    session: Option<&str>,
    body: &str,
    extra: &[(&str, &str)],
) -> Request<Full<Bytes>> {
    let mut builder = Request::builder()
        .method(method)
        .uri("http://stdio.invalid/")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(session) = session {
        builder = builder.header("mcp-session-id", session);
    }
    for (name, value) in extra {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a valid request")
}

fn post(session: Option<&str>, message: &Value) -> Request<Full<Bytes>> {
    request(Method::POST, session, &message.to_string(), &[])
}

fn get(session: &str) -> Request<Full<Bytes>> {
    request(Method::GET, Some(session), "", &[])
}

fn delete(session: &str) -> Request<Full<Bytes>> {
    request(Method::DELETE, Some(session), "", &[])
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "test", "version": "1"}}})
}

fn call(id: impl Into<Value>, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": "tools/call",
           "params": {"name": tool, "arguments": {}}})
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}
