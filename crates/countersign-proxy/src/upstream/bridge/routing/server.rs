//! The server's side of the routing: where each message of the instance goes, by the rule in
//! the [parent module](super).

use bytes::Bytes;
use countersign_jsonrpc::message::{
    ErrorObject, Message, Notification, Request, RequestId, Response,
};

use super::{Delivery, MAX_QUEUED, MAX_SERVER_REQUESTS, Reply, Routing, SessionKey, Sink};
use crate::upstream::bridge::rewrite;

impl Routing {
    /// What to do with one message of the instance (`line` is its text, passed on unchanged
    /// when nothing in it needs rewriting).
    pub(in crate::upstream::bridge) fn route(
        &mut self,
        message: Message,
        line: Bytes,
    ) -> Vec<Delivery> {
        match message {
            Message::Response(response) => self.route_response(response),
            Message::Notification(notification) => self.route_notification(&notification, line),
            Message::Request(request) => self.route_server_request(&request, line),
        }
    }

    fn route_response(&mut self, response: Response) -> Vec<Delivery> {
        let Some(RequestId::Number(id)) = response.id else {
            tracing::debug!(
                upstream = self.upstream,
                "dropped a response without a known id"
            );
            return Vec::new();
        };
        let Some(pending) = self.pending.remove(&id) else {
            tracing::debug!(
                upstream = self.upstream,
                id,
                "dropped a response nobody waits for"
            );
            return Vec::new();
        };
        match pending.reply {
            Reply::Internal(tx) => vec![Delivery::Internal(tx, Ok(response.outcome))],
            Reply::Stream(key) => {
                let sink = self.sink(key);
                self.answered(key);
                sink.map(|sink| Delivery::Client {
                    sink,
                    message: rewrite::response_for_client(pending.client_id, response.outcome),
                    on_fail: None,
                })
                .into_iter()
                .collect()
            }
        }
    }

    fn route_notification(&mut self, notification: &Notification, line: Bytes) -> Vec<Delivery> {
        if let Some(delivery) = self.related_notification(notification) {
            return delivery.into_iter().collect();
        }
        // A server cancelling its own request: that request's session is the one to tell.
        let hint = (notification.method == "notifications/cancelled")
            .then(|| notification.params.as_ref()?.get("requestId"))
            .flatten()
            .and_then(|id| RequestId::from_raw(&id).ok())
            .and_then(|id| self.server_requests.remove(&id));
        if let Some(sink) = self.oldest_pending_stream(hint) {
            return vec![Delivery::Client {
                sink,
                message: line,
                on_fail: None,
            }];
        }
        let sessions: Vec<SessionKey> = match hint {
            Some(session) => vec![session],
            None => self.sessions.keys().copied().collect(),
        };
        sessions
            .into_iter()
            .filter_map(|session| self.standalone_or_queue(session, line.clone()))
            .map(|sink| Delivery::Client {
                sink,
                message: line.clone(),
                on_fail: None,
            })
            .collect()
    }

    /// A notification that names a request — by progress token or subscription id — goes
    /// to that request's stream, or nowhere once the request is gone (`Some(None)`); `None`
    /// for a notification that names none.
    fn related_notification(&mut self, notification: &Notification) -> Option<Option<Delivery>> {
        let params = notification.params.as_ref()?;
        let (marker, key, in_meta) = if notification.method == "notifications/progress" {
            (params.get("progressToken")?, "progressToken", false)
        } else {
            let meta = params.get("_meta")?;
            (
                meta.get(rewrite::SUBSCRIPTION_ID)?,
                rewrite::SUBSCRIPTION_ID,
                true,
            )
        };
        let Some(pending) = rewrite::instance_number(&marker).and_then(|id| self.pending.get(&id))
        else {
            tracing::debug!(upstream = self.upstream, method = %notification.method, "dropped a notification for a request that is gone");
            return Some(None);
        };
        let original = if in_meta {
            rewrite::raw_id(&pending.client_id)
        } else {
            match pending.progress_token.clone() {
                Some(token) => token,
                None => return Some(None),
            }
        };
        let Reply::Stream(stream) = pending.reply else {
            return Some(None);
        };
        let message = rewrite::notification_with(notification, key, &original, in_meta);
        Some(self.sink(stream).map(|sink| Delivery::Client {
            sink,
            message,
            on_fail: None,
        }))
    }

    fn route_server_request(&mut self, request: &Request, line: Bytes) -> Vec<Delivery> {
        let undeliverable = |why: &str| {
            let error = ErrorObject {
                code: crate::error::code::INTERNAL_ERROR,
                message: format!("the gateway cannot deliver `{}`: {why}", request.method),
                data: None,
            };
            Delivery::Server(rewrite::response_for_client(request.id.clone(), Err(error)))
        };
        if self.server_requests.len() >= MAX_SERVER_REQUESTS {
            return vec![undeliverable("too many requests await an answer")];
        }
        let target = match self.oldest_pending_stream(None) {
            Some(sink) => Some((self.streams[&sink.key].session, Some(sink))),
            None => self.standalone_target(),
        };
        let Some((session, sink)) = target else {
            return vec![undeliverable("no client session can take it")];
        };
        self.server_requests.insert(request.id.clone(), session);
        let on_fail = || {
            let error = ErrorObject {
                code: crate::error::code::INTERNAL_ERROR,
                message: format!(
                    "the client's stream closed before `{}` reached it",
                    request.method
                ),
                data: None,
            };
            Some(rewrite::response_for_client(request.id.clone(), Err(error)))
        };
        match sink {
            Some(sink) => vec![Delivery::Client {
                sink,
                message: line,
                on_fail: on_fail(),
            }],
            None => self
                .standalone_or_queue(session, line.clone())
                .map(|sink| Delivery::Client {
                    sink,
                    message: line,
                    on_fail: on_fail(),
                })
                .into_iter()
                .collect(),
        }
    }

    /// The session an unrelated server request goes to: the first with an open GET stream,
    /// else the first one (its queue).
    fn standalone_target(&self) -> Option<(SessionKey, Option<Sink>)> {
        let with_stream = self.sessions.iter().find_map(|(session, routes)| {
            let sink = self.sink(routes.standalone?)?;
            Some((*session, Some(sink)))
        });
        with_stream.or_else(|| self.sessions.keys().next().map(|s| (*s, None)))
    }

    /// The stream of the oldest pending request (of `session`, when given) whose stream is
    /// still open.
    fn oldest_pending_stream(&self, session: Option<SessionKey>) -> Option<Sink> {
        self.pending.values().find_map(|p| match p.reply {
            Reply::Stream(key) if session.is_none_or(|s| s == p.session) => self.sink(key),
            _ => None,
        })
    }

    /// `session`'s open GET stream; with none, `message` joins its queue and `None` is returned.
    fn standalone_or_queue(&mut self, session: SessionKey, message: Bytes) -> Option<Sink> {
        let standalone = self.sessions.get(&session)?.standalone;
        if let Some(sink) = standalone.and_then(|key| self.sink(key)) {
            return Some(sink);
        }
        let routes = self.sessions.get_mut(&session)?;
        routes.standalone = None;
        routes.queued_bytes += message.len();
        routes.queue.push_back(message);
        while routes.queue.len() > MAX_QUEUED || routes.queued_bytes > self.max_queued_bytes {
            let Some(dropped) = routes.queue.pop_front() else {
                break;
            };
            routes.queued_bytes -= dropped.len();
            self.metrics.record_limit_hit("upstream_queue");
            tracing::warn!(
                upstream = self.upstream,
                "a session without a GET stream has too many server messages queued; dropped the oldest"
            );
        }
        None
    }
}
