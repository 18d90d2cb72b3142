//! The names the gateway itself puts on the wire: where a client presents a confirmation, the
//! key of the gateway's question, its request-id prefix, and its own JSON-RPC error codes.
//! Kept apart so the layers that read them and the edits that advertise them share one spelling.

use http::HeaderName;

/// `MCP-Protocol-Version`, on every request after `initialize`.
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// MCP 2026-07-28 `Mcp-Method`: mirrors the body's method for load balancers.
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// MCP 2026-07-28 `Mcp-Name`: mirrors the body's tool, prompt or resource name.
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// The argument name clients use to present a confirmation token, for tools that do not
/// declare an argument of that name themselves.
pub const TOKEN_ARGUMENT: &str = "confirmationToken";
/// The `_meta` key clients use to present a confirmation token; works for every tool and method.
pub const TOKEN_META: &str = "countersign/confirmationToken";
/// `_meta` key of the machine-readable form of the gateway's own results.
pub const CONFIRMATION_META: &str = "countersign/confirmation";
/// The key of the gateway's question in `inputRequests` / `inputResponses` (2026-07-28).
pub const APPROVAL_KEY: &str = "countersign/approval";
/// Prefix of the gateway's own JSON-RPC request ids on a session. Upstreams number their
/// requests (the TypeScript SDK from 0) or use their own strings; a UUID under this prefix
/// never collides with them.
pub const REQUEST_ID_PREFIX: &str = "countersign-";

/// JSON-RPC error code for a held `prompts/get` / `resources/read` (they have no result shape
/// that can say "held"); the confirmation is in the error's `data`.
pub const HELD_ERROR_CODE: i64 = -32011;
/// JSON-RPC error code for a refused or denied `prompts/get` / `resources/read`.
pub const REFUSED_ERROR_CODE: i64 = -32010;
/// JSON-RPC error code for a request refused by a rate limit (HTTP 429, or 503 when the limit
/// fails closed); `data.limit` names the limit.
pub const RATE_LIMITED_ERROR_CODE: i64 = -32012;
/// MCP 2026-07-28 `MissingRequiredClientCapability`.
pub const MISSING_CAPABILITY_CODE: i64 = -32021;
