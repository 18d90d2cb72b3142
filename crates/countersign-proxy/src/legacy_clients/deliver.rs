//! Writes the stack's answer to a session's request onto its stream: every JSON-RPC message of
//! a JSON body or of an event stream becomes one `event: message`, in order, as it arrives.

use bytes::Bytes;
use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::error_response;
use countersign_jsonrpc::sse::{SseDecoder, SseEvent};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use tracing::debug;

use super::requests::InSession;
use super::sessions::{Outgoing, Session};
use crate::body::ResponseBody;
use crate::error::code;
use crate::parse::RequestIds;
use crate::upstream::is_event_stream;

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivered {
    /// Every message of the answer reached the queue (there may have been none).
    All,
    /// The answer had events and then stopped early: the stream failed.
    Broken,
    /// The session's stream closed; what was left of the answer was dropped with it.
    Closed,
    /// The upstream no longer knows the session (404 to a request inside it).
    SessionGone,
}

/// Delivers `response`, the stack's answer to a request of `session`, and learns the upstream
/// session id and the negotiated version from it. `max_message_bytes` bounds a buffered body
/// and each event.
pub(super) async fn deliver(
    session: &Session,
    response: Response<ResponseBody>,
    in_session: InSession,
    max_message_bytes: usize,
) -> Delivered {
    let (parts, body) = response.into_parts();
    if parts.status == StatusCode::NOT_FOUND && in_session.0 {
        session.mark_upstream_gone();
        debug!(session = %session.id, upstream = session.route.label, "upstream ended the session");
        session.send(Outgoing::End).await;
        return Delivered::SessionGone;
    }
    if parts.status.is_success()
        && let Some(id) = parts.headers.get("mcp-session-id")
    {
        session.learn_id(id);
    }
    if is_event_stream(&parts.headers) {
        relay_events(session, body, max_message_bytes).await
    } else {
        let unanswered = Unanswered {
            status: parts.status,
            ids: parts.extensions.get::<RequestIds>(),
        };
        relay_json(session, body, max_message_bytes, unanswered).await
    }
}

/// The requests of a POST whose answer may hold no JSON-RPC message (an upstream that answered
/// `405 Method Not Allowed` in plain text, say), and the status it came with.
struct Unanswered<'a> {
    status: StatusCode,
    ids: Option<&'a RequestIds>,
}

impl Unanswered<'_> {
    /// A JSON-RPC error for each request, so a legacy client, which never sees the HTTP status,
    /// is not left waiting for an answer that will not come.
    async fn answer(&self, session: &Session) -> Delivered {
        let Some(RequestIds(ids)) = self.ids else {
            return Delivered::All;
        };
        let message = format!(
            "upstream `{}` answered HTTP {} without a JSON-RPC response the gateway could pass on",
            session.route.upstream.name, self.status
        );
        for id in ids {
            let error = error_response(Some(id), code::INTERNAL_ERROR, message.clone(), None);
            let error = String::from_utf8(error).expect("a serialized error is UTF-8");
            let delivered = forward(session, &error).await;
            if delivered != Delivered::All {
                return delivered;
            }
        }
        Delivered::All
    }
}

async fn relay_json(
    session: &Session,
    mut body: ResponseBody,
    limit: usize,
    unanswered: Unanswered<'_>,
) -> Delivered {
    // Read frame by frame rather than with `Limited`: the relay has bounded the body already,
    // this only keeps a legacy client's message within the same limit as an event.
    let mut bytes = Vec::new();
    loop {
        let frame = tokio::select! {
            biased;
            () = session.outbox.closed() => return Delivered::Closed,
            frame = body.frame() => frame,
        };
        match frame {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if bytes.len() + data.len() > limit {
                        debug!(session = %session.id, limit, "answer too large for the legacy client");
                        return unanswered.answer(session).await;
                    }
                    bytes.extend_from_slice(&data);
                }
            }
            Some(Err(error)) => {
                debug!(session = %session.id, %error, "answer broke off before the legacy client got it");
                return unanswered.answer(session).await;
            }
            None => break,
        }
    }
    // Only JSON is a message; anything else (an empty 202, an upstream's plain-text error) is
    // not written to the stream.
    match std::str::from_utf8(&bytes) {
        Ok(text) if RawJson::parse_slice(text.as_bytes()).is_ok() => forward(session, text).await,
        _ => unanswered.answer(session).await,
    }
}

async fn relay_events(session: &Session, mut body: ResponseBody, limit: usize) -> Delivered {
    let mut decoder = SseDecoder::new(limit);
    loop {
        let frame = tokio::select! {
            biased;
            () = session.outbox.closed() => return Delivered::Closed,
            frame = body.frame() => frame,
        };
        let decoded = match frame {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    decoder.push(&data);
                }
                let mut delivered = Delivered::All;
                while delivered == Delivered::All {
                    match decoder.next_event() {
                        Ok(Some(event)) => delivered = forward_event(session, &event).await,
                        Ok(None) => break,
                        Err(error) => {
                            debug!(session = %session.id, %error, "event stream to the legacy client broke off");
                            delivered = Delivered::Broken;
                        }
                    }
                }
                delivered
            }
            Some(Err(error)) => {
                debug!(session = %session.id, %error, "event stream to the legacy client broke off");
                Delivered::Broken
            }
            // Whatever the decoder still holds is the last event.
            None => {
                return match decoder.finish() {
                    Ok(Some(event)) => forward_event(session, &event).await,
                    Ok(None) => Delivered::All,
                    Err(_) => Delivered::Broken,
                };
            }
        };
        if decoded != Delivered::All {
            return decoded;
        }
    }
}

/// Queues the message of one event. Priming events, comments and `retry:` carry none; event ids
/// mean nothing to a legacy client, which cannot resume.
async fn forward_event(session: &Session, event: &SseEvent) -> Delivered {
    let Some(data) = event.data().filter(|d| !d.trim().is_empty()) else {
        return Delivered::All;
    };
    if !matches!(event.event_type(), None | Some("message")) {
        return Delivered::All;
    }
    forward(session, &data).await
}

/// Queues one message, first learning the negotiated version if it is the `initialize` result.
async fn forward(session: &Session, json: &str) -> Delivered {
    if let Some(version) = negotiated_version(json) {
        session.learn_version(version);
    }
    let event = Bytes::from(SseEvent::message(json).to_vec());
    if session.send(Outgoing::Message(event)).await {
        Delivered::All
    } else {
        Delivered::Closed
    }
}

/// `result.protocolVersion` of an `initialize` result (it also names `serverInfo`), as a header
/// value; `None` for any other message.
fn negotiated_version(json: &str) -> Option<HeaderValue> {
    let message = RawJson::parse_slice(json.as_bytes()).ok()?;
    let result = message.get("result")?;
    result.get("serverInfo")?;
    let version = result.get("protocolVersion")?;
    let version = version.as_str()?;
    let plausible = version.len() <= 32
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    plausible
        .then(|| HeaderValue::from_str(&version).ok())
        .flatten()
}
