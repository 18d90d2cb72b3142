//! The id rewriting between clients and one instance. Every request a client sends gets an id
//! the instance has never seen (a counter of the instance), so any number of sessions can share
//! one instance without their ids colliding, and every answer maps back by that id alone.
//! Progress tokens are rewritten the same way (to the request's own instance id), and so is the
//! 2026-07-28 `subscriptionId` the instance stamps on a `subscriptions/listen` stream.

use bytes::Bytes;
use countersign_jsonrpc::message::{Message, Notification, Request, RequestId, Response};
use countersign_jsonrpc::{ParseLimits, RawJson};
use serde_json::Value;

/// `params._meta` key of a 2026-07-28 subscription notification: the listen request's id.
pub(super) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Deepest nesting accepted in a server's message: the strict parser's ceiling, not the
/// client-facing default, since results (tool schemas) nest deeper than requests.
const SERVER_MAX_DEPTH: usize = 126;

/// Parses one line an instance sent.
pub(super) fn parse_server_message(line: &Bytes) -> Result<Message, countersign_jsonrpc::Error> {
    let raw = RawJson::parse(
        line.clone(),
        &ParseLimits {
            max_depth: SERVER_MAX_DEPTH,
        },
    )?;
    Ok(Message::from_raw(&raw)?)
}

/// `request` as the instance sees it: id `upstream_id`, and its progress token (if any)
/// replaced by the same number. Returns the message and the client's own token.
pub(super) fn request_for_instance(
    request: &Request,
    upstream_id: i64,
) -> (Bytes, Option<RawJson>) {
    let number = RawJson::from_value(&Value::from(upstream_id));
    let meta = request.params.as_ref().and_then(|p| p.get("_meta"));
    let token = meta.as_ref().and_then(|m| m.get("progressToken"));
    let params = match (&request.params, &meta, &token) {
        (Some(params), Some(meta), Some(_)) => Some(
            params
                .with_member("_meta", &meta.with_member("progressToken", &number))
                .into(),
        ),
        _ => request.params.clone(),
    };
    let message = Message::Request(Request {
        id: RequestId::Number(upstream_id),
        method: request.method.clone(),
        params,
    });
    (Bytes::from(message.to_vec()), token)
}

/// The response to `client_id` carrying the instance's `outcome`.
pub(super) fn response_for_client(
    client_id: RequestId,
    outcome: Result<RawJson, countersign_jsonrpc::message::ErrorObject>,
) -> Bytes {
    Bytes::from(
        Message::Response(Response {
            id: Some(client_id),
            outcome,
        })
        .to_vec(),
    )
}

/// `notification` with `params[key]` replaced by `value` (`progressToken`), or
/// `params._meta[key]` when `in_meta` (the subscription id).
pub(super) fn notification_with(
    notification: &Notification,
    key: &str,
    value: &RawJson,
    in_meta: bool,
) -> Bytes {
    let params = notification.params.as_ref().map(|params| {
        if in_meta {
            let meta = params.get("_meta").unwrap_or_else(RawJson::empty_object);
            params.with_member("_meta", &meta.with_member(key, value))
        } else {
            params.with_member(key, value)
        }
        .into()
    });
    Bytes::from(
        Message::Notification(Notification {
            method: notification.method.clone(),
            params,
        })
        .to_vec(),
    )
}

/// A JSON id as raw JSON, to put back into a message.
pub(super) fn raw_id(id: &RequestId) -> RawJson {
    RawJson::from_value(&id.to_value())
}

/// `notifications/cancelled` for the instance's request `upstream_id`.
pub(super) fn cancellation(upstream_id: i64, reason: &str) -> Bytes {
    let params = serde_json::json!({"requestId": upstream_id, "reason": reason});
    Bytes::from(
        Message::Notification(Notification {
            method: "notifications/cancelled".into(),
            params: Some(RawJson::from_value(&params).into()),
        })
        .to_vec(),
    )
}

/// The instance's own number for an id it echoes back (a response's id, a progress token):
/// the bridge only ever hands out integers.
pub(super) fn instance_number(value: &RawJson) -> Option<i64> {
    value.as_i64()
}
