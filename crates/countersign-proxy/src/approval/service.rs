use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use countersign_jsonrpc::mcp::ProtocolVersion;
use countersign_jsonrpc::message::{Message, Payload, Request as Call};
use countersign_policy::{Action, Principal};
use http::{HeaderName, HeaderValue, Method, Request, Response, request};
use tower::Service;
use tracing::warn;

use super::answer::{Answer, Asked};
use super::cleared::Cleared;
use super::context::{Gated, Subject, Verdict};
use super::refusal::RefusalCode;
use super::{
    Approvals, batch, channel_name, elicitation, hold, input_required, oob_stream, redeem,
};
use crate::audit::CallAudit;
use crate::body::ResponseBody;
use crate::classify::Judged;
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::future::ResponseFuture;
use crate::parse::{InspectedPost, Parsed};
use crate::route::Route;
use crate::wire::MCP_PROTOCOL_VERSION;

/// Lets through only what policy allows or a person approved; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct Approve<S> {
    pub(super) inner: S,
    pub(super) approvals: Arc<Approvals>,
}

type Mirrored = Vec<(HeaderName, HeaderValue)>;

impl<S> Service<Request<Parsed>> for Approve<S>
where
    S: Service<Request<Cleared>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Parsed>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        // One lookup for all it reads of the context.
        let context = parts.extensions.context_mut();
        let Some(route) = context.route.clone() else {
            let error = ProxyError::Internal("request reached approval without a route".into());
            return ResponseFuture::answered(error.into_response(None));
        };
        let classification = context.classification.take().unwrap_or_default();
        // Nothing below reads the caller again: taken, not copied.
        let principal = context.caller.take().and_then(|caller| caller.0);
        let post = match body {
            Parsed::NoBody => return self.no_body(parts),
            Parsed::Message(post) => post,
        };
        let asked = Asked::of(&post);
        let stateless = asked.stateless;
        let InspectedPost {
            payload, mirrored, ..
        } = post;
        let label = route.label;
        let metrics = &self.approvals.settings.metrics;
        match payload {
            Payload::Batch(messages) => match batch::judge(&messages, &classification) {
                Ok(()) => {
                    // Every gated call in it is allowed; each gets its decision and outcome line.
                    // (Classification refuses gated calls without a principal, so there is one.)
                    let audits: Vec<CallAudit> = classification
                        .calls
                        .into_iter()
                        .filter_map(|judged| {
                            let principal = principal.as_ref()?.id.clone();
                            Some(self.allowed(&parts.headers, &route, principal, stateless, judged))
                        })
                        .collect();
                    parts.extensions.context_mut().audits = audits;
                    self.pass(parts, Payload::Batch(messages), mirrored)
                }
                Err(error) => ResponseFuture::answered(
                    Answer::Refuse(error).into_response(&asked, metrics, label),
                ),
            },
            Payload::Single(Message::Response(reply)) if elicitation::is_our_question(&reply) => {
                let approvals = self.approvals.clone();
                ResponseFuture::working(async move {
                    let taken = elicitation::take_answer(
                        &approvals,
                        &parts.headers,
                        principal.as_ref(),
                        reply,
                    )
                    .await;
                    taken.into_response(&asked, &approvals.settings.metrics, label)
                })
            }
            Payload::Single(Message::Notification(cancel))
                if cancel.method == "notifications/cancelled" =>
            {
                let approvals = self.approvals.clone();
                let mut inner = self.take_inner();
                ResponseFuture::working(async move {
                    elicitation::cancel(&approvals, &parts.headers, principal.as_ref(), &cancel)
                        .await;
                    let payload = Payload::Single(Message::Notification(cancel));
                    let request = Request::from_parts(parts, Cleared::passed(payload, mirrored));
                    let Ok(response) = inner.call(request).await;
                    response
                })
            }
            Payload::Single(message) => {
                let judged = classification.calls.into_iter().next();
                match (message, judged, principal) {
                    (Message::Request(call), Some(judged), Some(principal)) => {
                        self.judge(parts, route, principal, judged, call, asked, mirrored)
                    }
                    // A call sent as a notification cannot carry a held or refused result, so
                    // only a call the policy simply allows goes on.
                    (Message::Notification(mut notification), Some(judged), principal) => {
                        if judged.decision.action == Action::Allow {
                            judged
                                .call
                                .strip_params(notification.params.as_mut(), false);
                            if let Some(principal) = &principal {
                                let principal = principal.id.clone();
                                let audit = self.allowed(
                                    &parts.headers,
                                    &route,
                                    principal,
                                    stateless,
                                    judged,
                                );
                                parts.extensions.context_mut().audits.push(audit);
                            }
                            let payload = Payload::Single(Message::Notification(notification));
                            self.pass(parts, payload, mirrored)
                        } else {
                            let error = ProxyError::GatedNotification(judged.call.target);
                            ResponseFuture::answered(
                                Answer::Refuse(error).into_response(&asked, metrics, label),
                            )
                        }
                    }
                    (_, Some(_), None) => ResponseFuture::answered(
                        Answer::Refuse(ProxyError::Unauthenticated)
                            .into_response(&asked, metrics, label),
                    ),
                    (Message::Request(call), None, principal) if call.method == "initialize" => {
                        self.initialize(parts, call, principal, mirrored)
                    }
                    (message, _, _) => self.pass(parts, Payload::Single(message), mirrored),
                }
            }
        }
    }
}

impl<S> Approve<S>
where
    S: Service<Request<Cleared>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    /// The ready inner service, for a future to call; a fresh clone stays behind.
    fn take_inner(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }

    /// Writes an allowed call's decision line and returns what its outcome line is written
    /// from. An allowed call goes on without a `Gated` (alone, as a notification, or in a
    /// batch): it needs none of the held paths' state. Its principal's id, target and rule move
    /// into the record instead of being copied.
    fn allowed(
        &self,
        headers: &http::HeaderMap,
        route: &Route,
        principal: String,
        stateless: bool,
        judged: Judged,
    ) -> CallAudit {
        let session = session_of(headers, stateless);
        let subject = Subject {
            approvals: &self.approvals,
            upstream: &route.upstream.name,
            principal: &principal,
            session,
            judged: &judged,
            started: self.approvals.settings.clock.now(),
        };
        subject.audit("decision", "allowed", None, None, None);
        let (session, started) = (session.map(str::to_owned), subject.started);
        let Judged { call, decision, .. } = judged;
        CallAudit {
            principal,
            session,
            method: call.method.as_str(),
            target: call.target,
            risk: decision.risk.as_str(),
            rule: decision.rule,
            action: decision.action.as_str(),
            channel: None,
            jti: None,
            args_hash: None,
            started,
        }
    }

    /// Traffic that needs no approval: forwarded as parsed.
    fn pass(
        &mut self,
        parts: request::Parts,
        payload: Payload,
        mirrored: Mirrored,
    ) -> ResponseFuture<S::Future> {
        let request = Request::from_parts(parts, Cleared::passed(payload, mirrored));
        ResponseFuture::inner(self.inner.call(request))
    }

    /// GET and DELETE. Ending a session settles the calls still held in it: they will never
    /// get an answer.
    fn no_body(&mut self, parts: request::Parts) -> ResponseFuture<S::Future> {
        let session = (parts.method == Method::DELETE)
            .then(|| parts.headers.get("mcp-session-id"))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let Some(session) = session else {
            let request = Request::from_parts(parts, Cleared::no_body());
            return ResponseFuture::inner(self.inner.call(request));
        };
        let approvals = self.approvals.clone();
        let mut inner = self.take_inner();
        ResponseFuture::working(async move {
            approvals.settings.sessions.closed(&session);
            elicitation::end_session(&approvals, &session).await;
            let Ok(response) = inner
                .call(Request::from_parts(parts, Cleared::no_body()))
                .await;
            response
        })
    }

    /// Forwards `initialize` and learns from the exchange who opened the session and whether
    /// its client can be asked.
    fn initialize(
        &mut self,
        parts: request::Parts,
        call: Call,
        principal: Option<Principal>,
        mirrored: Mirrored,
    ) -> ResponseFuture<S::Future> {
        let params = call.params.clone();
        let approvals = self.approvals.clone();
        let mut inner = self.take_inner();
        ResponseFuture::working(async move {
            let request = Request::from_parts(parts, Cleared::call(call, mirrored));
            let Ok(response) = inner.call(request).await;
            let session = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok());
            if let (Some(session), Some(principal)) = (session, principal) {
                let settings = &approvals.settings;
                let forgotten = settings.sessions.opened(
                    session,
                    &principal.id,
                    params.as_deref(),
                    settings.clock.now(),
                );
                if forgotten > 0 {
                    warn!(
                        forgotten,
                        "session book full: forgot the least recently seen session; its calls \
                         now get the token channel instead of elicitation"
                    );
                    settings.metrics.record_sessions_forgotten(forgotten);
                }
            }
            response
        })
    }

    /// One gated request: allowed calls go on at once; denied ones are answered; held ones are
    /// redeemed or asked about.
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &mut self,
        parts: request::Parts,
        route: Route,
        principal: Principal,
        judged: Judged,
        call: Call,
        asked: Asked,
        mirrored: Mirrored,
    ) -> ResponseFuture<S::Future> {
        let stateless = asked.stateless;
        if judged.decision.action == Action::Allow {
            let call = judged.call.strip_approval(call, false);
            let audit = self.allowed(&parts.headers, &route, principal.id, stateless, judged);
            let mut request = Request::from_parts(parts, Cleared::call(call, mirrored));
            request.extensions_mut().context_mut().audits.push(audit);
            return ResponseFuture::inner(self.inner.call(request));
        }
        let gated = Gated {
            approvals: self.approvals.clone(),
            session: session_of(&parts.headers, stateless).map(str::to_owned),
            protocol_version: parts
                .headers
                .get(MCP_PROTOCOL_VERSION)
                .and_then(|v| v.to_str().ok())
                .and_then(ProtocolVersion::parse),
            stateless,
            started: self.approvals.settings.clock.now(),
            route,
            parts,
            principal,
            judged,
            mirrored,
            tdh: OnceLock::new(),
        };
        if gated.judged.decision.action == Action::Deny {
            gated.audit("decision", "denied", None, None, None);
            let denial = gated.denial();
            let label = gated.route.label;
            return ResponseFuture::answered(denial.into_response(
                &asked,
                &self.approvals.settings.metrics,
                label,
            ));
        }
        let inner = self.take_inner();
        ResponseFuture::working(confirm(gated, call, asked, inner))
    }
}

/// The session a request belongs to. Sessions exist only before 2026-07-28; a stateless
/// request's header means nothing.
fn session_of(headers: &http::HeaderMap, stateless: bool) -> Option<&str> {
    if stateless {
        return None;
    }
    headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

/// A call that needs confirmation: redeem what it presents, or hold it and ask.
async fn confirm<S>(gated: Gated, call: Call, asked: Asked, mut inner: S) -> Response<ResponseBody>
where
    S: Service<Request<Cleared>, Response = Response<ResponseBody>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let parts = &gated.judged.call;
    let verdict = if parts.conflicting_tokens() {
        Verdict::Answer(gated.reject(RefusalCode::Malformed, Some(channel_name::TOKEN)))
    } else if let Some(token) = parts.presented_token().map(str::to_owned) {
        redeem::redeem(&gated, call, &token, channel_name::TOKEN).await
    } else if let Some(state) = gated
        .stateless
        .then(|| input_required::request_state(&call))
        .flatten()
    {
        redeem::redeem(&gated, call, &state, channel_name::INPUT_REQUIRED).await
    } else {
        hold::hold(&gated, call).await
    };
    let metrics = gated.approvals.settings.metrics.clone();
    let label = gated.route.label;
    match verdict {
        Verdict::Answer(answer) => answer.into_response(&asked, &metrics, label),
        Verdict::Forward { call, audit, wrap } => {
            let mut request = Request::from_parts(gated.parts, Cleared::call(call, gated.mirrored));
            request.extensions_mut().context_mut().audits.push(audit);
            if let Some(wrap) = wrap {
                request.extensions_mut().insert(wrap);
            }
            let Ok(response) = inner.call(request).await;
            response
        }
        Verdict::Ask(pending) => {
            metrics.record_request(label, asked.method, "asked");
            elicitation::stream(gated, pending, inner)
        }
        Verdict::AskOutOfBand(pending) => {
            metrics.record_request(label, asked.method, "asked");
            oob_stream::stream(gated, pending, inner)
        }
    }
}
