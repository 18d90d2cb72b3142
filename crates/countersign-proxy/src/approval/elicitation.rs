//! The elicitation channel (2025-06-18 / 2025-11-25 sessions that declared form elicitation):
//! the held POST is answered as an SSE stream that carries the gateway's `elicitation/create`,
//! keep-alives while the person decides, and then either the upstream's answer to the approved
//! call or a `not_approved` result.
//!
//! Every hold gets its own question id, `countersign-<uuid>`, derived from a fresh nonce and
//! bound to the call's arguments hash, so an answer settles only the question it was asked
//! for: after a held call is cancelled, a later call that reuses its JSON-RPC id gets a new
//! question, and an answer to the old one finds nobody waiting. The answer POST is handed over
//! (possibly to another replica) under the session and the question id; a cancellation, which
//! names only the call's id, under the session and the call id.

use countersign_jsonrpc::{ObjectWriter, RawJson};
use std::convert::Infallible;

use bytes::Bytes;
use countersign_jsonrpc::message::{Message, Notification, Request, RequestId, Response};
use countersign_jsonrpc::sse::SseEvent;
use countersign_policy::Principal;
use futures_util::FutureExt as _;
use http::{HeaderMap, HeaderValue, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::{Service, ServiceExt};
use tracing::{debug, info, warn};

use super::answer::Answer;
use super::cleared::Cleared;
use super::context::{Gated, Verdict};
use super::question::approves;
use super::refusal::RefusalCode;
use super::results::{self, Refusal};
use super::{Approvals, KEEP_ALIVE, channel_name};
use crate::audit::CallAudit;
use crate::body::{BoxError, ResponseBody};
use crate::context::RequestContextExt;
use crate::error::ProxyError;
use crate::wire::REQUEST_ID_PREFIX;

/// A held call waiting for the person's answer on its SSE stream.
#[derive(Debug)]
pub(super) struct PendingQuestion {
    /// The call to forward once approved (token-free, canonical arguments).
    call: Request,
    /// The gateway's `elicitation/create`, ready to send.
    question: Value,
    /// The id of the gateway's question; only an answer to exactly this id counts.
    question_id: String,
    session: String,
    audit: CallAudit,
}

/// Holds `call` on its own stream: the question is sent as soon as the stream starts.
pub(super) fn ask(
    gated: &Gated,
    call: Request,
    arguments: &RawJson,
    ah: String,
    preview: Option<&str>,
) -> Verdict {
    let Some(session) = gated.session.clone() else {
        return Verdict::Answer(gated.human_unavailable());
    };
    let question_id = question_id(&gated.approvals, &session, &call.id, &ah);
    gated.audit(
        "decision",
        "asked",
        Some(channel_name::ELICITATION),
        Some(&question_id),
        Some(&ah),
    );
    let params = gated.question(arguments, preview);
    let question = json!({"jsonrpc": "2.0", "id": question_id, "method": "elicitation/create", "params": params});
    let Ok(call) = gated.judged.call.approved_call(call, false, arguments) else {
        return Verdict::Answer(gated.refusal(RefusalCode::UnsafeArguments));
    };
    Verdict::Ask(PendingQuestion {
        call,
        question,
        question_id: question_id.clone(),
        session,
        audit: gated.call_audit(Some(channel_name::ELICITATION), Some(question_id), Some(ah)),
    })
}

/// The held call's response: an SSE stream fed by a task that asks, waits and — if approved —
/// forwards the call through `inner` and relays its answer.
pub(super) fn stream<S>(
    gated: Gated,
    pending: PendingQuestion,
    inner: S,
) -> http::Response<ResponseBody>
where
    S: Service<http::Request<Cleared>, Response = http::Response<ResponseBody>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let (events, receiver) = mpsc::channel::<Bytes>(16);
    tokio::spawn(run(gated, pending, inner, events));
    sse_response(receiver)
}

/// The SSE response a held call's stream task feeds through `receiver`.
pub(super) fn sse_response(receiver: mpsc::Receiver<Bytes>) -> http::Response<ResponseBody> {
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|bytes| (Ok::<_, BoxError>(Frame::data(bytes)), receiver))
    });
    let mut response = http::Response::new(ResponseBody::new(StreamBody::new(stream)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert(
        http::HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

/// How a question ended.
enum Settled {
    Approved,
    /// Refused with this code; the audit outcome says more.
    Refused(RefusalCode, &'static str),
    ClientGone,
}

/// The life of one question stream. Ends early, forwarding nothing, when the client goes away.
async fn run<S>(gated: Gated, pending: PendingQuestion, inner: S, events: mpsc::Sender<Bytes>)
where
    S: Service<http::Request<Cleared>, Response = http::Response<ResponseBody>, Error = Infallible>,
{
    let approvals = gated.approvals.clone();
    let settings = &approvals.settings;
    let PendingQuestion {
        call,
        question,
        question_id,
        session,
        audit,
    } = pending;
    let call_id = call.id.clone();
    let (answer_key, cancel_key) = (
        answer_key(&session, &question_id),
        cancel_key(&session, &call_id),
    );
    // One client may hold only so many questions: past its cap it alone is refused, before
    // anything is registered on its behalf.
    if let Err(over) =
        approvals
            .held
            .hold(&session, &audit.principal, &call_id, settings.question_caps)
    {
        settings.metrics.record_limit_hit(over.limit());
        let refused = Settled::Refused(RefusalCode::RateLimited, over.outcome());
        return settle(gated, refused, call, audit, inner, events).await;
    }
    // Register for the answer and for a cancellation before asking, so a quick one is never
    // lost.
    let mut answered = settings
        .handover
        .wait(&answer_key, settings.elicitation_timeout);
    let mut cancelled = settings
        .handover
        .wait(&cancel_key, settings.elicitation_timeout);
    debug!(upstream = gated.route.label, tool = %audit.target, "asking the person on the call's stream");
    // A registration the hand-over refused (full, or its store down) fails at the first poll:
    // then the person is not asked a question whose answer could never arrive.
    let at_once = match (
        (&mut answered).now_or_never(),
        (&mut cancelled).now_or_never(),
    ) {
        (_, Some(cancel)) => Some(cancellation(cancel)),
        (Some(answer), None) => Some(judge(answer, &question_id, &audit.principal)),
        (None, None) => None,
    };
    let settled = if let Some(settled) = at_once {
        settled
    } else if !reachable(settings.handover.as_ref(), &answer_key, &cancel_key).await {
        Settled::Refused(RefusalCode::StoreUnavailable, "rejected:store_unavailable")
    } else if events.send(event(&question)).await.is_err() {
        Settled::ClientGone
    } else {
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.tick().await;
        loop {
            tokio::select! {
                // What ends the call unrun is looked at first, so that it wins over an answer
                // that arrived with it: a client that cancelled has abandoned the call, and one
                // that went away can no longer see its result.
                biased;
                cancel = &mut cancelled => break cancellation(cancel),
                () = events.closed() => break Settled::ClientGone,
                answer = &mut answered => break judge(answer, &question_id, &audit.principal),
                _ = keep_alive.tick() => {
                    // A comment keeps clients and intermediaries from dropping a quiet stream.
                    // (Progress would be out of order with the tool's own.)
                    if events.send(Bytes::from_static(b": waiting for the user's approval\n\n")).await.is_err() {
                        break Settled::ClientGone;
                    }
                }
            }
        }
    };
    drop((answered, cancelled));
    approvals.held.release(&session, &audit.principal, &call_id);
    settle(gated, settled, call, audit, inner, events).await;
}

/// Ends a question stream: the audit line, then the refusal or the approved call's answer.
async fn settle<S>(
    gated: Gated,
    settled: Settled,
    call: Request,
    audit: CallAudit,
    inner: S,
    events: mpsc::Sender<Bytes>,
) where
    S: Service<http::Request<Cleared>, Response = http::Response<ResponseBody>, Error = Infallible>,
{
    let call_id = call.id.clone();
    let outcome = match &settled {
        Settled::Approved => "approved",
        Settled::Refused(_, outcome) => outcome,
        Settled::ClientGone => "client_gone",
    };
    info!(upstream = gated.route.label, tool = %audit.target, outcome, "question settled");
    if !matches!(settled, Settled::Approved) {
        // An approved call's outcome line is the audit layer's, once it was forwarded.
        gated.audit(
            "outcome",
            outcome,
            Some(channel_name::ELICITATION),
            audit.jti.as_deref(),
            audit.args_hash.as_deref(),
        );
    }
    match settled {
        Settled::ClientGone => {}
        Settled::Refused(code, _) => {
            let refusal = results::refused(
                &Refusal {
                    code,
                    tool: &audit.target,
                    upstream: gated.upstream(),
                    message: code.message(&audit.target),
                    rule: Some(&audit.rule),
                },
                true,
            )
            .finish();
            let _ = events
                .send(event(
                    &json!({"jsonrpc": "2.0", "id": call_id.to_value(), "result": refusal}),
                ))
                .await;
        }
        Settled::Approved => forward(gated, call, audit, inner, events).await,
    }
}

/// Approved: forward the call through the layers below and stream the upstream's answer on
/// this same response.
pub(super) async fn forward<S>(
    gated: Gated,
    call: Request,
    audit: CallAudit,
    inner: S,
    events: mpsc::Sender<Bytes>,
) where
    S: Service<http::Request<Cleared>, Response = http::Response<ResponseBody>, Error = Infallible>,
{
    let call_id = call.id.clone();
    let mut request = http::Request::from_parts(gated.parts, Cleared::call(call, gated.mirrored));
    request.extensions_mut().context_mut().audits.push(audit);
    let Ok(response) = inner.oneshot(request).await;
    let is_stream = crate::upstream::is_event_stream(response.headers());
    let status = response.status();
    let mut body = response.into_body();
    if is_stream {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data()
                && events.send(data).await.is_err()
            {
                return;
            }
        }
        return;
    }
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let message = if status.is_success() && !bytes.is_empty() {
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        json!({"jsonrpc": "2.0", "id": call_id.to_value(),
               "error": {"code": -32603, "message": format!("the upstream answered HTTP {status}")}})
        .to_string()
    };
    let mut out = Vec::new();
    SseEvent::message(&message).encode(&mut out);
    let _ = events.send(Bytes::from(out)).await;
}

/// Whether the waiters for a question's answer and its call's cancellation can be reached
/// from every replica, as they must be before the question goes out: a client that answers or
/// cancels at once, through another replica, must find them. A registration that failed (its
/// store down or slow) means the person is not asked a question whose answer could not arrive.
pub(super) async fn reachable(
    handover: &dyn countersign_store::AnswerHandover,
    answer_key: &str,
    cancel_key: &str,
) -> bool {
    let both = futures_util::future::try_join(
        handover.reachable(answer_key),
        handover.reachable(cancel_key),
    );
    match both.await {
        Ok(_) => true,
        Err(error) => {
            warn!(%error, "the answer hand-over could not register the question");
            false
        }
    }
}

/// What the wait for the call's cancellation ended in.
fn cancellation(waited: Result<Option<Vec<u8>>, countersign_store::StoreError>) -> Settled {
    match waited {
        Ok(Some(_)) => {
            Settled::Refused(RefusalCode::NotApproved, "rejected:not_approved(cancelled)")
        }
        Ok(None) => Settled::Refused(RefusalCode::NotApproved, "rejected:not_approved(timeout)"),
        Err(_) => Settled::Refused(RefusalCode::StoreUnavailable, "rejected:store_unavailable"),
    }
}

/// Judges what the hand-over brought for the question: only an accept with the box ticked, to
/// exactly this question, from the principal that was asked, approves.
fn judge(
    handed: Result<Option<Vec<u8>>, countersign_store::StoreError>,
    question_id: &str,
    principal: &str,
) -> Settled {
    let bytes = match handed {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Settled::Refused(RefusalCode::NotApproved, "rejected:not_approved(timeout)");
        }
        Err(_) => {
            return Settled::Refused(RefusalCode::StoreUnavailable, "rejected:store_unavailable");
        }
    };
    match Settlement::decode(&bytes) {
        Some(Settlement::Answer {
            question_id: answered,
            principal: from,
            response,
        }) if answered == question_id && from == principal => match response.get("result") {
            Some(result) if approves(&result) => Settled::Approved,
            Some(_) => Settled::Refused(RefusalCode::NotApproved, "rejected:not_approved"),
            None => Settled::Refused(
                RefusalCode::NotApproved,
                "rejected:not_approved(client_error)",
            ),
        },
        Some(Settlement::Cancelled) => {
            Settled::Refused(RefusalCode::NotApproved, "rejected:not_approved(cancelled)")
        }
        _ => Settled::Refused(
            RefusalCode::NotApproved,
            "rejected:not_approved(unknown_answer)",
        ),
    }
}

/// Whether `answer` is a client's response to one of the gateway's questions.
pub(super) fn is_our_question(answer: &Response) -> bool {
    matches!(&answer.id, Some(RequestId::String(id)) if id.starts_with(REQUEST_ID_PREFIX))
}

/// An answer to the gateway's own question never goes upstream: it is handed to the stream
/// that asked — only if it comes from the same session and principal.
pub(super) async fn take_answer(
    approvals: &Approvals,
    headers: &HeaderMap,
    principal: Option<&Principal>,
    answer: Response,
) -> Answer {
    let Some(principal) = principal else {
        return Answer::Refuse(ProxyError::Unauthenticated);
    };
    // The hand-over key includes the session the answer came on, and the waiting stream
    // checks the principal, so an answer from anywhere else finds no question to settle. No
    // local session state is needed: the answer may reach any replica.
    let (Some(session), Some(RequestId::String(id))) = (session_id(headers), &answer.id) else {
        return Answer::Refuse(ProxyError::UnknownAnswer);
    };
    let key = answer_key(&session, id);
    let bytes = Settlement::Answer {
        question_id: id.clone(),
        principal: principal.id.clone(),
        response: RawJson::parse_slice(&Message::Response(answer).to_vec())
            .expect("a serialized message is strictly valid"),
    }
    .encode();
    match approvals.settings.handover.deliver(&key, bytes).await {
        Ok(true) => Answer::Accepted,
        Ok(false) => Answer::Refuse(ProxyError::UnknownAnswer),
        Err(error) => {
            warn!(%error, "answer hand-over failed");
            Answer::Refuse(ProxyError::UnknownAnswer)
        }
    }
}

/// A client that cancels a held call has given up on it: its question is settled as not
/// approved, so a late approval can never run it. (The notification is still forwarded; the
/// upstream ignores ids it does not know.)
pub(super) async fn cancel(
    approvals: &Approvals,
    headers: &HeaderMap,
    principal: Option<&Principal>,
    cancel: &Notification,
) {
    let (Some(session), Some(principal)) = (session_id(headers), principal) else {
        return;
    };
    let settings = &approvals.settings;
    if settings
        .sessions
        .get(&session, &principal.id, settings.clock.now())
        .is_none()
    {
        return;
    }
    let Some(call_id) = cancel
        .params
        .as_ref()
        .and_then(|p| p.get("requestId"))
        .and_then(|id| RequestId::from_raw(&id).ok())
    else {
        return;
    };
    let key = cancel_key(&session, &call_id);
    if let Ok(true) = settings
        .handover
        .deliver(&key, Settlement::Cancelled.encode())
        .await
    {
        info!(session = %session, "held call cancelled by the client; its question is closed");
    }
}

/// A session ended (DELETE): the calls held in it on this replica are settled as not approved.
pub(super) async fn end_session(approvals: &Approvals, session: &str) {
    for call_id in approvals.held.of(session) {
        let _ = approvals
            .settings
            .handover
            .deliver(
                &cancel_key(session, &call_id),
                Settlement::Cancelled.encode(),
            )
            .await;
    }
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Hand-over key of the answer to a question.
pub(super) fn answer_key(session: &str, question_id: &str) -> String {
    format!("{session}\nanswer\n{question_id}")
}

/// Hand-over key of a held call's cancellation, which names only the call's id.
pub(super) fn cancel_key(session: &str, call_id: &RequestId) -> String {
    format!("{session}\ncancel\n{}", call_id.to_value())
}

/// A fresh question id, `countersign-<uuid>`: a random nonce bound, through the signing key, to
/// the session, the call's id and its arguments hash, so it is unguessable, never repeats, and
/// names the exact call it asks about in the audit trail.
pub(super) fn question_id(
    approvals: &Approvals,
    session: &str,
    call_id: &RequestId,
    ah: &str,
) -> String {
    let nonce: [u8; 16] = rand_nonce();
    let mut input = Vec::with_capacity(session.len() + ah.len() + 64);
    for part in [
        session.as_bytes(),
        call_id.to_value().to_string().as_bytes(),
        ah.as_bytes(),
        &nonce,
    ] {
        input.extend_from_slice(part);
        input.push(0);
    }
    let mut bytes: [u8; 16] = approvals.settings.keyring.derive("question", &input)[..16]
        .try_into()
        .expect("32 >= 16");
    // Shaped as a version-4 UUID, the form clients and logs expect.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format!(
        "{REQUEST_ID_PREFIX}{}",
        uuid::Uuid::from_bytes(bytes).hyphenated()
    )
}

fn rand_nonce() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// One SSE `message` event, without an id: the gateway's events must never be mistaken for
/// the upstream's resumable ones.
pub(super) fn event(message: &Value) -> Bytes {
    let mut out = Vec::new();
    SseEvent::message(&message.to_string()).encode(&mut out);
    Bytes::from(out)
}

/// What the hand-over carries to a waiting question stream.
#[derive(Debug)]
pub(super) enum Settlement {
    /// The client's JSON-RPC response to the question with this id, and who sent it.
    Answer {
        question_id: String,
        principal: String,
        /// Kept as text: the answer is the client's, of any size.
        response: RawJson,
    },
    /// The client cancelled the held call, or ended its session.
    Cancelled,
}

impl Settlement {
    fn encode(&self) -> Vec<u8> {
        match self {
            Settlement::Answer {
                question_id,
                principal,
                response,
            } => {
                let mut out = ObjectWriter::new();
                out.push("question", &RawJson::string(question_id));
                out.push("principal", &RawJson::string(principal));
                out.push("response", response);
                out.finish().as_bytes().to_vec()
            }
            Settlement::Cancelled => br#"{"cancelled":true}"#.to_vec(),
        }
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Settlement> {
        let value = RawJson::parse_slice(bytes).ok()?;
        if value.get("cancelled").and_then(|c| c.as_bool()) == Some(true) {
            return Some(Settlement::Cancelled);
        }
        Some(Settlement::Answer {
            question_id: value.get("question")?.as_str()?.into_owned(),
            principal: value.get("principal")?.as_str()?.into_owned(),
            response: value.get("response")?,
        })
    }
}
