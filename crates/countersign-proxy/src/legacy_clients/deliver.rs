//! Writes the stack's answer to a session's request onto its stream: every JSON-RPC message of
//! a JSON body or of an event stream becomes one `event: message`, in order, as it arrives.

use bytes::Bytes;
use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::sse::{SseDecoder, SseEvent};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use tracing::debug;

use super::requests::InSession;
use super::sessions::{Outgoing, Session};
use crate::body::ResponseBody;
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
        relay_json(session, body, max_message_bytes).await
    }
}

async fn relay_json(session: &Session, mut body: ResponseBody, limit: usize) -> Delivered {
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
                        debug!(session = %session.id, limit, "answer too large for the legacy client; not delivered");
                        return Delivered::Broken;
                    }
                    bytes.extend_from_slice(&data);
                }
            }
            Some(Err(error)) => {
                debug!(session = %session.id, %error, "answer not delivered to the legacy client");
                return Delivered::Broken;
            }
            None => break,
        }
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Delivered::All;
    }
    match std::str::from_utf8(&bytes) {
        Ok(text) => forward(session, text).await,
        Err(_) => {
            debug!(session = %session.id, "answer is not UTF-8; not delivered to the legacy client");
            Delivered::Broken
        }
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
