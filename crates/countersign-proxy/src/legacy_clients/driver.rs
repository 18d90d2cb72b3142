//! The task behind each legacy session: once the session is initialized it opens the upstream's
//! GET stream through the stack and relays it, reopening it when it ends; when the client's
//! stream closes it ends the upstream session with a DELETE.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::{Service, ServiceExt};
use tracing::debug;

use super::body::AdaptedBody;
use super::deliver::{Delivered, deliver};
use super::requests::{InSession, session_request};
use super::sessions::Session;
use crate::body::ResponseBody;

/// Upstream GET streams that fail or end without a message this many times in a row are not
/// reopened: the session goes on without server-initiated messages.
const MAX_STREAM_FAILURES: u32 = 3;
/// Wait before reopening a GET stream, doubled for each failure in a row.
const REOPEN_DELAY: Duration = Duration::from_secs(1);

/// Runs `session` until its stream closes, then ends the upstream session.
pub(super) async fn drive<S, B>(session: Arc<Session>, inner: S, max_message_bytes: usize)
where
    S: Service<Request<AdaptedBody<B>>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    let outbox = session.outbox.clone();
    tokio::select! {
        biased;
        () = outbox.closed() => {}
        () = relay_server_stream(&session, inner.clone(), max_message_bytes) => outbox.closed().await,
    }
    drop(outbox);
    let upstream = session.upstream();
    if upstream.id.is_none() || session.upstream_gone() {
        return;
    }
    let request = session_request::<B>(&session, Method::DELETE);
    let Ok(response) = inner.oneshot(request).await;
    debug!(
        session = %session.id,
        upstream = session.route.label,
        status = %response.status(),
        "legacy stream closed; ended the upstream session"
    );
    let _ = response.into_body().collect().await;
}

/// Relays the upstream's GET stream to the session from the moment the session is
/// initialized; returns when it will not be reopened.
async fn relay_server_stream<S, B>(session: &Session, inner: S, max_message_bytes: usize)
where
    S: Service<Request<AdaptedBody<B>>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone,
{
    session.until_stream_wanted().await;
    let mut failures = 0;
    loop {
        let request = session_request::<B>(session, Method::GET);
        let Ok(response) = inner.clone().oneshot(request).await;
        session.stream_answered();
        let status = response.status();
        let in_session = InSession(session.upstream().id.is_some());
        let opened = status.is_success();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            debug!(session = %session.id, upstream = session.route.label, "upstream has no GET stream");
            return;
        }
        let queued_before = session.messages_queued();
        let delivered = if opened || status == StatusCode::NOT_FOUND {
            deliver(session, response, in_session, max_message_bytes).await
        } else {
            debug!(session = %session.id, %status, "upstream refused the GET stream");
            Delivered::Broken
        };
        match delivered {
            Delivered::Closed | Delivered::SessionGone => return,
            Delivered::All | Delivered::Broken => {}
        }
        // A stream that carried something was worth having: reopen it promptly.
        if opened && session.messages_queued() > queued_before {
            failures = 0;
        } else {
            failures += 1;
            if failures >= MAX_STREAM_FAILURES {
                debug!(session = %session.id, upstream = session.route.label, "not reopening the GET stream");
                return;
            }
        }
        tokio::time::sleep(REOPEN_DELAY * 2u32.pow(failures)).await;
    }
}
