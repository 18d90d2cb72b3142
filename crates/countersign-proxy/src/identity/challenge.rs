//! What a refused client is told, as the MCP authorization spec (2025-06-18, 2025-11-25) and
//! RFC 6750/RFC 9728 describe: 401 with `WWW-Authenticate: Bearer resource_metadata="…"`
//! (plus `error="invalid_token"` when a credential was presented and failed), and the
//! protected-resource metadata document that URL serves, naming the authorization servers.

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::json;

use super::Refusal;
use crate::body::{ResponseBody, full};

/// Where metadata documents are served (RFC 9728 §3), followed by the resource's path.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The protected-resource metadata of the gateway's MCP endpoints.
#[derive(Debug, Clone)]
pub struct ResourceMetadata {
    /// The gateway's public origin as clients reach it, e.g. `https://mcp.example.com`.
    pub public_url: String,
    /// The MCP paths of the listener; each is one resource, `public_url` + path.
    pub paths: Vec<String>,
    /// Issuers clients get tokens from (the `jwt` methods' issuers unless configured).
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
}

impl ResourceMetadata {
    fn origin(&self) -> &str {
        self.public_url.trim_end_matches('/')
    }

    /// The metadata URL for the resource at `path` (RFC 9728 §3.1: the well-known prefix
    /// inserted before the resource's path).
    fn url_for(&self, path: &str) -> String {
        metadata_url(self.origin(), self.resource_path(path))
    }

    /// The configured MCP path a request path belongs to: itself, or the first route when the
    /// request went elsewhere (a legacy client's `/sse` or `/messages`).
    fn resource_path<'a>(&'a self, path: &'a str) -> &'a str {
        if self.paths.iter().any(|p| p == path) {
            return path;
        }
        self.paths.first().map_or("", String::as_str)
    }

    /// The metadata document for a `GET` of the well-known URL, if `request` is one.
    pub fn serve<B>(&self, request: &Request<B>) -> Option<Response<ResponseBody>> {
        let suffix = request.uri().path().strip_prefix(WELL_KNOWN)?;
        if !(suffix.is_empty() || suffix.starts_with('/')) {
            return None;
        }
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return Some(status_only(StatusCode::METHOD_NOT_ALLOWED));
        }
        let path = if suffix.is_empty() {
            self.resource_path("")
        } else if self.paths.iter().any(|p| p == suffix) {
            suffix
        } else {
            return Some(status_only(StatusCode::NOT_FOUND));
        };
        let document = json!({
            "resource": format!("{}{}", self.origin(), path),
            "authorization_servers": self.authorization_servers,
            "scopes_supported": self.scopes_supported,
            "bearer_methods_supported": ["header"],
        });
        Some(metadata_document(StatusCode::OK, &document))
    }
}

/// A metadata document (or a JSON error in its place) as served at the well-known URL.
pub(crate) fn metadata_document(
    status: StatusCode,
    document: &serde_json::Value,
) -> Response<ResponseBody> {
    let mut response = Response::new(full(Bytes::from(document.to_string())));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Clients in browsers fetch it cross-origin (spec: discovery from a web client).
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

/// Where the metadata of the resource at `origin` + `path` is served (RFC 9728 §3.1: the
/// well-known prefix inserted between the origin and the resource's path).
pub fn metadata_url(origin: &str, path: &str) -> String {
    format!("{origin}{WELL_KNOWN}{}", path.trim_end_matches('/'))
}

/// The 401 for `refusal` of a request to `path`.
pub(crate) fn unauthorized(
    metadata: Option<&ResourceMetadata>,
    path: &str,
    refusal: &Refusal,
) -> Response<ResponseBody> {
    let mut challenge = String::from("Bearer");
    let mut params = Vec::new();
    if let Some(metadata) = metadata {
        params.push(format!("resource_metadata=\"{}\"", metadata.url_for(path)));
    }
    let message = match refusal {
        Refusal::Missing => "this endpoint requires a credential",
        Refusal::Invalid(_) => {
            params.push("error=\"invalid_token\"".into());
            "the credential is invalid or expired"
        }
    };
    if !params.is_empty() {
        challenge.push(' ');
        challenge.push_str(&params.join(", "));
    }
    let body = json!({ "error": if matches!(refusal, Refusal::Missing) {
        "unauthorized"
    } else {
        "invalid_token"
    }, "error_description": message });
    let mut response = Response::new(full(Bytes::from(body.to_string())));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Built from configuration (checked at start) and fixed text only.
    if let Ok(value) = HeaderValue::try_from(challenge) {
        headers.insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// An empty answer with `status` (the well-known URLs' 404 and 405).
pub(crate) fn status_only(status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}
