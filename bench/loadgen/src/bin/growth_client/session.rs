//! One 2025-11-25 MCP session over one HTTP/1.1 keep-alive connection, as a client holds it:
//! `initialize` (keeping the `Mcp-Session-Id`), `notifications/initialized`, then calls, or
//! the session's GET stream (which takes the connection over).

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where the MCP endpoint is: `host:port` and path of an `http://` URL.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub authority: String,
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Self, Error> {
        let rest = url.strip_prefix("http://").ok_or("only http:// URLs")?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        Ok(Self {
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// Opens a connection to `authority` (plain HTTP/1.1).
pub async fn connect(authority: &str) -> Result<SendRequest<Full<Bytes>>, Error> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

pub struct Session {
    sender: SendRequest<Full<Bytes>>,
    endpoint: Endpoint,
    id: String,
    next_id: u64,
}

impl Session {
    pub async fn open(endpoint: &Endpoint) -> Result<Self, Error> {
        let mut sender = connect(&endpoint.authority).await?;
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "growth-client", "version": "1"}}});
        let request = post(endpoint, None, initialize.to_string())?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        if response.status() != StatusCode::OK {
            return Err(format!("initialize: HTTP {}", response.status()).into());
        }
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or("initialize: no Mcp-Session-Id")?
            .to_owned();
        response.into_body().collect().await?;
        let mut session = Self {
            sender,
            endpoint: endpoint.clone(),
            id,
            next_id: 0,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _) = session.send(initialized.to_string()).await?;
        if status != StatusCode::ACCEPTED {
            return Err(format!("notifications/initialized: HTTP {status}").into());
        }
        Ok(session)
    }

    /// POSTs one message; returns the status and the whole body.
    pub async fn send(&mut self, message: String) -> Result<(StatusCode, Bytes), Error> {
        let request = post(&self.endpoint, Some(&self.id), message)?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// Sends a request of `method`; the whole answer's body when it is a 200.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Bytes, Error> {
        // Ten digits throughout, so every answer to the same call has the same length.
        let id = 1_000_000_000 + self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, body) = self.send(message.to_string()).await?;
        if status != StatusCode::OK {
            return Err(format!(
                "{method}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        // A refused or held call is a 200 too; the figures must only count forwarded ones.
        let small = body.len() < 4096;
        if small && (contains(&body, b"\"error\":") || contains(&body, b"requires_confirmation")) {
            return Err(format!("{method}: {}", String::from_utf8_lossy(&body)).into());
        }
        Ok(body)
    }

    pub async fn call(&mut self, tool: &str, arguments: Value) -> Result<Bytes, Error> {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// Opens the session's GET stream; its body once the headers are a 200 event stream.
    pub async fn open_stream(mut self) -> Result<Incoming, Error> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(&self.endpoint.path)
            .header("host", &self.endpoint.authority)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &self.id)
            .body(Full::new(Bytes::new()))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let is_stream = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if response.status() != StatusCode::OK || !is_stream {
            return Err(format!("GET stream: HTTP {}", response.status()).into());
        }
        Ok(response.into_body())
    }
}

fn post(
    endpoint: &Endpoint,
    session: Option<&str>,
    body: String,
) -> Result<Request<Full<Bytes>>, Error> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(&endpoint.path)
        .header("host", &endpoint.authority)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    Ok(request.body(Full::new(Bytes::from(body)))?)
}

/// POSTs `body` to a plain URL and returns the answer's body (the upstream's control paths).
pub async fn post_plain(url: &str, body: &'static str) -> Result<Bytes, Error> {
    let endpoint = Endpoint::parse(url)?;
    let mut sender = connect(&endpoint.authority).await?;
    let request = Request::builder()
        .method(Method::POST)
        .uri(&endpoint.path)
        .header("host", &endpoint.authority)
        .body(Full::new(Bytes::from_static(body.as_bytes())))?;
    let response = sender.send_request(request).await?;
    Ok(response.into_body().collect().await?.to_bytes())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
