//! A plain hyper client for tests that speak well-formed HTTP to the gateway.

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A response with its body read to the end.
#[derive(Debug)]
pub struct Collected {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Collected {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Sends requests and returns responses, streaming or collected.
#[derive(Debug, Clone)]
pub struct TestClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for TestClient {
    fn default() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl TestClient {
    /// Sends a request and returns the response with its body still streaming.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> http::Response<Incoming> {
        let mut request = Request::new(Full::new(body.into()));
        *request.method_mut() = method;
        *request.uri_mut() = url.parse().expect("valid URL");
        for (name, value) in headers {
            request.headers_mut().append(
                http::HeaderName::try_from(*name).expect("valid header name"),
                http::HeaderValue::try_from(*value).expect("valid header value"),
            );
        }
        self.client
            .request(request)
            .await
            .expect("request reaches the gateway")
    }

    /// POSTs a JSON body with the headers MCP clients send, plus `headers`.
    pub async fn post_json(&self, url: &str, headers: &[(&str, &str)], body: &str) -> Collected {
        let mut all = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        collect(self.send(Method::POST, url, &all, body.to_owned()).await).await
    }
}

pub async fn collect(response: http::Response<Incoming>) -> Collected {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("response body").to_bytes();
    Collected {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// The `data:` of one SSE event (its `data` lines joined by newlines); `None` for events without
/// data, such as comments, `retry:` lines and priming events whose data is empty.
pub fn sse_data(event: &str) -> Option<String> {
    let lines: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    let data = lines.join("\n");
    (!data.trim().is_empty()).then_some(data)
}

/// Splits the SSE text in `pending` at its first complete event (line endings normalised to
/// `\n`) and returns that event's raw text; `None` while no event is complete.
pub fn take_sse_event(pending: &mut String) -> Option<String> {
    if pending.contains('\r') {
        *pending = pending.replace("\r\n", "\n");
    }
    let end = pending.find("\n\n")?;
    let event: String = pending.drain(..end + 2).collect();
    Some(event[..end].to_owned())
}

/// Parses one SSE event's data as JSON.
fn event_json(data: &str) -> serde_json::Value {
    serde_json::from_str(data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}"))
}

/// Every `data:` message of a whole SSE body, as JSON.
pub fn sse_messages(text: &str) -> Vec<serde_json::Value> {
    let mut pending = text.to_owned();
    std::iter::from_fn(|| take_sse_event(&mut pending))
        .filter_map(|event| sse_data(&event))
        .map(|data| event_json(&data))
        .collect()
}

/// Reads an SSE response body up to its next `data:` message (skipping comments and events
/// without data, priming events included) and returns that message as JSON. Panics if none
/// arrives within 20 s.
pub async fn next_sse_message<B>(body: &mut B, pending: &mut String) -> serde_json::Value
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    loop {
        if let Some(event) = take_sse_event(pending) {
            if let Some(data) = sse_data(&event) {
                return event_json(&data);
            }
            continue;
        }
        let frame = tokio::time::timeout(std::time::Duration::from_secs(20), body.frame())
            .await
            .expect("an event arrives")
            .expect("the stream is open")
            .expect("the stream has no error");
        if let Ok(data) = frame.into_data() {
            pending.push_str(std::str::from_utf8(&data).expect("SSE is UTF-8"));
        }
    }
}

/// An open `text/event-stream` response, read one `data:` message at a time.
#[derive(Debug)]
pub struct SseStream {
    body: Incoming,
    pending: String,
}

impl SseStream {
    /// Takes over `response`'s body; panics unless it is an event stream.
    pub fn new(response: http::Response<Incoming>) -> Self {
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "expected an SSE response, got {} with content-type {content_type:?}",
            response.status()
        );
        Self {
            body: response.into_body(),
            pending: String::new(),
        }
    }

    /// The next `data:` message as JSON (see [`next_sse_message`]).
    pub async fn next_message(&mut self) -> serde_json::Value {
        next_sse_message(&mut self.body, &mut self.pending).await
    }
}
