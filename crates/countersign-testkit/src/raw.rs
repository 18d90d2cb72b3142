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
    let mut stream = TcpStream::connect(addr).await.expect("connect to gateway");
    stream.write_all(request).await.ok()?;
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
    tokio::time::timeout(wait, read).await.ok().flatten()
}

/// A complete response in `buffer`, framed by Content-Length, chunked encoding, or (once the
/// server closed the connection) by the close.
fn parse_response(buffer: &[u8], closed: bool) -> Option<RawResponse> {
    let head_end = buffer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buffer[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &buffer[head_end + 4..];
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let body = if let Some(length) = header("content-length") {
        let length: usize = length.parse().ok()?;
        if rest.len() < length {
            return None;
        }
        rest[..length].to_vec()
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if closed {
        rest.to_vec()
    } else {
        return None;
    };
    Some(RawResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
