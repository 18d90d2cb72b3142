//! The Streamable HTTP requests a legacy session sends down the stack: each of the client's
//! messages, and the upstream GET stream and DELETE the gateway makes on its behalf.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};

use super::body::AdaptedBody;
use super::sessions::Session;
use crate::context::RequestContextExt;
use crate::parse::WantRequestIds;
use crate::route::{LegacyEndpoint, Route};
use crate::wire::MCP_PROTOCOL_VERSION;

const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Headers of a legacy request never passed on: the MCP session headers are the gateway's to
/// set (a client naming an upstream session itself could step into another one), and `Accept`
/// is what the gateway, not the legacy client, can read.
fn is_set_by_the_gateway(name: &HeaderName) -> bool {
    *name == MCP_SESSION_ID
        || *name == MCP_PROTOCOL_VERSION
        || *name == LAST_EVENT_ID
        || *name == header::ACCEPT
}

/// The headers of the `GET` that opens a session, kept for the requests made on its behalf:
/// everything but framing, body and the headers the gateway sets.
pub(super) fn session_headers(opening: &HeaderMap) -> HeaderMap {
    let mut headers = opening.clone();
    let dropped: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            is_set_by_the_gateway(name)
                || **name == header::CONTENT_TYPE
                || **name == header::CONTENT_LENGTH
        })
        .cloned()
        .collect();
    for name in dropped {
        headers.remove(name);
    }
    headers
}

/// Whether the request was sent inside the upstream session (it carried its id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct InSession(pub(super) bool);

/// Turns one of the client's POSTs into a Streamable HTTP POST to the route, keeping its own
/// headers (its identity header among them) and extensions (route, peer).
pub(super) fn message_post<B>(
    session: &Session,
    request: Request<B>,
) -> (Request<AdaptedBody<B>>, InSession, super::body::TakenSignal) {
    let (mut parts, body) = request.into_parts();
    let dropped: Vec<HeaderName> = parts
        .headers
        .keys()
        .filter(|name| is_set_by_the_gateway(name))
        .cloned()
        .collect();
    for name in dropped {
        parts.headers.remove(name);
    }
    let in_session = set_session_headers(
        &mut parts.headers,
        session,
        "application/json, text/event-stream",
    );
    parts.uri = route_uri(&session.route);
    parts.extensions.remove::<LegacyEndpoint>();
    // The client cannot see this POST's HTTP status: if the answer holds no JSON-RPC message,
    // the session answers each request itself.
    parts.extensions.insert(WantRequestIds);
    let (body, taken) = AdaptedBody::watched(body);
    (Request::from_parts(parts, body), in_session, taken)
}

/// A bodiless request of the session (`GET` for its stream, `DELETE` at its end), with the
/// headers of the request that opened it.
pub(super) fn session_request<B>(session: &Session, method: Method) -> Request<AdaptedBody<B>> {
    let mut request = Request::new(AdaptedBody::Empty);
    *request.method_mut() = method;
    *request.uri_mut() = route_uri(&session.route);
    let headers = request.headers_mut();
    *headers = session.headers.clone();
    set_session_headers(headers, session, "text/event-stream");
    let context = request.extensions_mut().context_mut();
    context.route = Some(session.route.clone());
    context.peer = session.peer;
    request
}

fn set_session_headers(
    headers: &mut HeaderMap,
    session: &Session,
    accept: &'static str,
) -> InSession {
    headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
    let upstream = session.upstream();
    if let Some(version) = upstream.protocol_version {
        headers.insert(MCP_PROTOCOL_VERSION, version);
    }
    match upstream.id {
        Some(id) => {
            headers.insert(MCP_SESSION_ID, id);
            InSession(true)
        }
        None => InSession(false),
    }
}

fn route_uri(route: &Route) -> Uri {
    Uri::try_from(route.path.as_str()).expect("a configured route path is a valid origin-form URI")
}
