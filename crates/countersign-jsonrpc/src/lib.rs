//! countersign-jsonrpc owns the gateway's view of the wire format:
//!
//! - [`strict`]: the one strict JSON parse every body goes through (duplicate and escaped
//!   duplicate keys, BOM, trailing data, depth, invalid UTF-8, lone surrogates and
//!   non-finite numbers are refused);
//! - [`raw`]: a validated value kept as the bytes it was read from, read lazily, so a parsed
//!   body costs about its own size in memory;
//! - [`fold`]: keys a lenient decoder would read as one;
//! - [`message`]: the JSON-RPC 2.0 envelope and its canonical re-serialization;
//! - [`mcp`]: MCP protocol revisions, the standard method set, reserved `_meta` keys and the
//!   SEP-2243 mirrored-header value codec;
//! - [`sse`]: an incremental Server-Sent Events decoder and encoder for relaying streams.
//!
//! ```
//! use countersign_jsonrpc::{Payload, mcp};
//!
//! let body = br#"{"id":1,"jsonrpc":"2.0","method":"tools\/call","params":{"name":"get_weather"}}"#;
//! let payload = Payload::parse(body)?;
//! let call = &payload.messages()[0];
//! assert_eq!(call.method(), Some("tools/call"));
//! assert!(mcp::is_known_method("tools/call"));
//! // What goes upstream is the canonical re-serialization, never `body`.
//! assert_eq!(
//!     payload.to_vec(),
//!     br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather"}}"#
//! );
//!
//! let shadowed = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a","Name":"b"}}"#;
//! assert_eq!(Payload::parse(shadowed).expect_err("case-folded duplicate").jsonrpc_code(), -32600);
//! # Ok::<(), countersign_jsonrpc::Error>(())
//! ```
//!
//! It is pure data handling: it must not import tokio, hyper or do any IO, so every other
//! crate can depend on it and fuzz targets can drive it directly.

#![forbid(unsafe_code)]

pub mod fold;
#[doc(hidden)]
pub mod fuzzing;
pub mod mcp;
pub mod message;
#[cfg(test)]
mod pieces;
pub mod raw;
pub mod sse;
pub mod strict;

pub use fold::fold_key;
pub use message::{
    EnvelopeError, Error, ErrorObject, Message, Notification, Payload, Request, RequestId,
    Response, error_response,
};
pub use raw::{Kind, MemberEdit, MemberSpan, ObjectWriter, RawJson, write_json_string};
pub use strict::{ParseError, ParseLimits, parse_strict, parse_strict_with, validate_strict};
