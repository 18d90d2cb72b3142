//! A raw HTTP/1.1 client: writes exactly the bytes a test gives it. hyper's own client
//! normalises requests too much to send smuggling and framing attacks.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A parsed response, or what could be read before the server closed or went quiet.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("response body is JSON")
    }
}

/// Sends `request` verbatim and reads one response. Returns `None` when the server closed the
/// connection without answering (or did not answer within `wait`).
pub async fn raw_request(addr: SocketAddr, request: &[u8], wait: Duration) -> Option<RawResponse> {
    try_raw_request(addr, request, wait)
        .await
        .expect("connect to gateway")
}

/// [`raw_request`], with a failure to connect as an error instead of a panic: for tests where
/// the server may be gone (a crash is what they look for).
pub async fn try_raw_request(
    addr: SocketAddr,
    request: &[u8],
    wait: Duration,
) -> std::io::Result<Option<RawResponse>> {
    let mut stream = TcpStream::connect(addr).await?;
    if stream.write_all(request).await.is_err() {
        return Ok(None);
    }
    let mut buffer = Vec::new();
    let read = async {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(response) = parse_response(&buffer, false) {
                return Some(response);
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return parse_response(&buffer, true),
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    Ok(tokio::time::timeout(wait, read).await.ok().flatten())
}

/// A POST of `body` to `/mcp` with the headers MCP clients send, `Host: {host}`, the
/// `extra_headers` lines (each ending in `\r\n`) and `Connection: close`.
pub fn raw_post(host: impl std::fmt::Display, body: &[u8], extra_headers: &str) -> Vec<u8> {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// The head of a response whose status line and headers are complete in `buffer`: the status
/// and headers (its `body` left empty), and the offset where the body starts.
pub fn parse_head(buffer: &[u8]) -> Option<(RawResponse, usize)> {
    let head_end = buffer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buffer[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let head = RawResponse {
        status,
        headers,
        body: Vec::new(),
    };
    Some((head, head_end + 4))
}

/// A complete response in `buffer`, framed by Content-Length, chunked encoding, or (once the
/// server closed the connection) by the close.
fn parse_response(buffer: &[u8], closed: bool) -> Option<RawResponse> {
    let (mut response, body_start) = parse_head(buffer)?;
    let rest = &buffer[body_start..];
    let status = response.status;
    let body = if let Some(length) = response.header("content-length") {
        let length: usize = length.parse().ok()?;
        if rest.len() < length {
            return None;
        }
        rest[..length].to_vec()
    } else if response
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        let chunks = dechunk(rest).ok()?;
        if !chunks.finished {
            return None;
        }
        chunks.data
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if closed {
        rest.to_vec()
    } else {
        return None;
    };
    response.body = body;
    Some(response)
}

/// What [`dechunk`] decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dechunked {
    /// The data of the complete chunks, in order.
    pub data: Vec<u8>,
    /// How many bytes of the input those chunks took (the last chunk's included).
    pub consumed: usize,
    /// Whether the last (zero-size) chunk was among them: the body is complete.
    pub finished: bool,
}

/// Decodes the complete chunks at the start of a chunked body, leaving an incomplete one for
/// later. `Err` names a chunk size line that is not one.
pub fn dechunk(raw: &[u8]) -> Result<Dechunked, String> {
    let mut decoded = Dechunked {
        data: Vec::new(),
        consumed: 0,
        finished: false,
    };
    loop {
        let rest = &raw[decoded.consumed..];
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(decoded);
        };
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("bad chunk size {size_text:?}: {e}"))?;
        if size == 0 {
            decoded.consumed += line_end + 2;
            decoded.finished = true;
            return Ok(decoded);
        }
        if rest.len() < line_end + 2 + size + 2 {
            return Ok(decoded);
        }
        decoded
            .data
            .extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        decoded.consumed += line_end + 2 + size + 2;
    }
}
