//! Invariant checks shared by the cargo-fuzz targets in `fuzz/` and the corpus replay tests in
//! `tests/fuzz_corpus.rs`. Not part of the supported API: each function panics when an invariant
//! is broken, which is what a fuzzer reports as a crash.

use bytes::Bytes;
use countersign_jsonrpc::mcp;
use countersign_jsonrpc::message::Payload;
use countersign_jsonrpc::strict::ParseLimits;
use http::{HeaderMap, HeaderValue};

use crate::parse::inspect_post;
use crate::wire::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION};

/// Depth limit the `inspect_post` target inspects with.
pub const INSPECT_MAX_DEPTH: usize = 64;

/// The revisions the first input byte chooses between for `MCP-Protocol-Version`.
pub const INSPECT_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2026-07-28"];

/// The headers a client would plausibly send with `body`: JSON content type, the revision the
/// selector byte picks, and `Mcp-Method` / `Mcp-Name` read naively from the body's top-level
/// `method` and `params.name` (or `params.uri`), when the body is a JSON object at all.
pub fn inspect_headers(selector: u8, body: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let version = INSPECT_VERSIONS[usize::from(selector) % INSPECT_VERSIONS.len()];
    headers.insert(MCP_PROTOCOL_VERSION, HeaderValue::from_static(version));
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(body)
    else {
        return headers;
    };
    let mut put = |name, value: &str| {
        if let Ok(value) = HeaderValue::try_from(mcp::encode_header_value(value).as_ref()) {
            headers.insert(name, value);
        }
    };
    if let Some(method) = map.get("method").and_then(|m| m.as_str()) {
        put(MCP_METHOD, method);
    }
    if let Some(params) = map.get("params").and_then(|p| p.as_object()) {
        if let Some(name) = params.get("name").and_then(|n| n.as_str()) {
            put(MCP_NAME, name);
        } else if let Some(uri) = params.get("uri").and_then(|u| u.as_str()) {
            put(MCP_NAME, uri);
        }
    }
    headers
}

/// `inspect_post`: the first byte picks the protocol revision, the rest is the body.
/// [`inspect_post`] never panics; a payload it accepts re-serializes to bytes the strict parser
/// accepts as the same payload, whose serialization is a fixed point.
pub fn check_inspect_post(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let headers = inspect_headers(selector, body);
    let Ok(inspected) = inspect_post(&headers, Bytes::copy_from_slice(body), INSPECT_MAX_DEPTH)
    else {
        return;
    };
    let bytes = inspected.payload.to_vec();
    let limits = ParseLimits {
        max_depth: INSPECT_MAX_DEPTH,
    };
    let again = Payload::parse_with(Bytes::from(bytes.clone()), &limits).unwrap_or_else(|e| {
        panic!(
            "forwarded payload {:?} is refused by the strict parser: {e}",
            String::from_utf8_lossy(&bytes)
        )
    });
    assert_eq!(
        again.to_vec(),
        bytes,
        "the forwarded payload is not a fixed point"
    );
    let _ = inspected.request_id();
    let _ = inspected.method_label();
    let _ = inspected.stateless();
}
