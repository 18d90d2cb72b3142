//! Out of band on the held call's own stream (2025-06-18 / 2025-11-25 sessions that can
//! elicit): the held POST is answered as SSE carrying the gateway's `elicitation/create` with
//! the approval page's link — URL mode where the session declared it, else a form whose message
//! gives the link — and the stream then waits for the page's decision.
//!
//! The client's answer only steers the wait, it never approves: an accept (in URL mode, "the
//! person agreed to open the link"; in form mode, possibly a hook's auto-answer) keeps waiting,
//! a decline or cancel ends the call as `not_approved`. On the page's decision a URL-mode stream
//! sends `notifications/elicitation/complete`; then an approval of exactly this call is consumed
//! (`oob:<id>`) and forwarded, its answer relayed on the same stream.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use countersign_jsonrpc::message::Request;
use futures_util::FutureExt as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::Service;
use tracing::{debug, info};

use super::cleared::Cleared;
use super::context::Gated;
use super::elicitation::{self, Settlement};
use super::oob_outcome::{self, Decided};
use super::out_of_band::Ticket;
use super::refusal::RefusalCode;
use super::results::{self, Refusal};
use super::{KEEP_ALIVE, channel_name};
use crate::audit::CallAudit;
use crate::body::ResponseBody;

/// A held call whose approval page link is about to be sent on its stream.
#[derive(Debug)]
pub(super) struct PendingLink {
    /// The call to forward once approved (token-free, canonical arguments).
    pub(super) call: Request,
    /// The gateway's `elicitation/create`, ready to send.
    pub(super) question: Value,
    /// Its JSON-RPC id: the client's answer to exactly this id is handed over to the stream.
    pub(super) question_id: String,
    pub(super) session: String,
    pub(super) ticket: Ticket,
    /// The call's binding, compared with the page's approval.
    pub(super) binding: String,
    /// URL mode (else a form carrying the link).
    pub(super) url_mode: bool,
    pub(super) audit: CallAudit,
}

/// The held call's response: an SSE stream fed by a task that sends the link, waits for the
/// page, and — if approved — forwards the call through `inner` and relays its answer.
pub(super) fn stream<S>(
    gated: Gated,
    pending: PendingLink,
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
    elicitation::sse_response(receiver)
}

/// How the wait on the stream ended.
enum Ended {
    Decided(Decided),
    /// The client declined or cancelled the question, or cancelled the call.
    Refused(RefusalCode, &'static str),
    ClientGone,
}

/// What the client's answer to the question means here.
enum Answered {
    /// Accepted: keep waiting for the page.
    KeepWaiting,
    Ended(Ended),
}

async fn run<S>(gated: Gated, pending: PendingLink, inner: S, events: mpsc::Sender<Bytes>)
where
    S: Service<http::Request<Cleared>, Response = http::Response<ResponseBody>, Error = Infallible>,
{
    let approvals = gated.approvals.clone();
    let settings = &approvals.settings;
    let Some(page) = settings.out_of_band.clone() else {
        // Only reached with a page configured; stay closed anyway.
        let ended = Ended::Refused(
            RefusalCode::HumanApprovalUnavailable,
            "rejected:human_approval_unavailable",
        );
        return settle(gated, ended, pending, inner, events).await;
    };
    let call_id = pending.call.id.clone();
    let principal = pending.audit.principal.clone();
    let session = pending.session.clone();
    if let Err(over) = approvals
        .held
        .hold(&session, &principal, &call_id, settings.question_caps)
    {
        settings.metrics.record_limit_hit(over.limit());
        let ended = Ended::Refused(RefusalCode::RateLimited, over.outcome());
        return settle(gated, ended, pending, inner, events).await;
    }
    // The request, and with it everything that waits for it, ends at the ticket's expiry.
    let left = Duration::from_secs(
        pending
            .ticket
            .expires_at
            .saturating_sub(settings.clock.unix_secs()),
    );
    let (answer_key, cancel_key) = (
        elicitation::answer_key(&session, &pending.question_id),
        elicitation::cancel_key(&session, &call_id),
    );
    // Register for the answer, a cancellation and the decision before sending the link, so a
    // quick one is never lost.
    let mut answered = settings.handover.wait(&answer_key, left);
    let mut cancelled = settings.handover.wait(&cancel_key, left);
    let mut decision = page.wait(&pending.ticket.id, left);
    debug!(upstream = gated.route.label, tool = %pending.audit.target, "sending the approval page's link");
    // A hand-over registration that failed (full, or its store down) fails at the first poll.
    let mut answer_open = true;
    let at_once = match (
        (&mut answered).now_or_never(),
        (&mut cancelled).now_or_never(),
    ) {
        (Some(Err(_)), _) | (_, Some(Err(_))) => Some(Ended::Refused(
            RefusalCode::StoreUnavailable,
            "rejected:store_unavailable",
        )),
        (_, Some(Ok(Some(_)))) => Some(Ended::Refused(
            RefusalCode::NotApproved,
            "rejected:not_approved(cancelled)",
        )),
        (Some(answer), _) => match judge_answer(answer, &pending.question_id, &principal) {
            Answered::Ended(ended) => Some(ended),
            Answered::KeepWaiting => {
                answer_open = false;
                None
            }
        },
        (None, _) => None,
    };
    let ended = if let Some(ended) = at_once {
        ended
    } else if !elicitation::reachable(settings.handover.as_ref(), &answer_key, &cancel_key).await {
        Ended::Refused(RefusalCode::StoreUnavailable, "rejected:store_unavailable")
    } else if events
        .send(elicitation::event(&pending.question))
        .await
        .is_err()
    {
        Ended::ClientGone
    } else {
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.tick().await;
        loop {
            tokio::select! {
                // What ends the call unrun is looked at first, so that it wins over a decision
                // or an answer that arrived with it: a client that cancelled has abandoned the
                // call, and one that went away can no longer see its result.
                biased;
                cancel = &mut cancelled => break match cancel {
                    Ok(Some(_)) => Ended::Refused(RefusalCode::NotApproved, "rejected:not_approved(cancelled)"),
                    Ok(None) => Ended::Decided(Decided::Refused(RefusalCode::Expired, "rejected:expired")),
                    Err(_) => Ended::Refused(RefusalCode::StoreUnavailable, "rejected:store_unavailable"),
                },
                () = events.closed() => break Ended::ClientGone,
                status = &mut decision => {
                    break Ended::Decided(match oob_outcome::judge(status, &pending.binding) {
                        // The wait ran to the request's expiry: it expired undecided.
                        Decided::Pending => Decided::Refused(RefusalCode::Expired, "rejected:expired"),
                        other => other,
                    });
                }
                answer = &mut answered, if answer_open => {
                    match judge_answer(answer, &pending.question_id, &principal) {
                        Answered::KeepWaiting => answer_open = false,
                        Answered::Ended(ended) => break ended,
                    }
                }
                _ = keep_alive.tick() => {
                    if events.send(Bytes::from_static(b": waiting for the approval page\n\n")).await.is_err() {
                        break Ended::ClientGone;
                    }
                }
            }
        }
    };
    drop((answered, cancelled, decision));
    approvals.held.release(&session, &principal, &call_id);
    if pending.url_mode && matches!(ended, Ended::Decided(_)) {
        // The client may close its URL prompt: the page has decided.
        let complete = json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                              "params": {"elicitationId": pending.ticket.id}});
        let _ = events.send(elicitation::event(&complete)).await;
    }
    settle(gated, ended, pending, inner, events).await;
}

/// Judges what the hand-over brought for the question. Only its own answer, from the
/// principal that was asked, counts; and even an accept approves nothing.
fn judge_answer(
    handed: Result<Option<Vec<u8>>, countersign_store::StoreError>,
    question_id: &str,
    principal: &str,
) -> Answered {
    let refused = |outcome| Answered::Ended(Ended::Refused(RefusalCode::NotApproved, outcome));
    let bytes = match handed {
        Ok(Some(bytes)) => bytes,
        // The hand-over waited until the request's expiry.
        Ok(None) => {
            return Answered::Ended(Ended::Decided(Decided::Refused(
                RefusalCode::Expired,
                "rejected:expired",
            )));
        }
        Err(_) => {
            return Answered::Ended(Ended::Refused(
                RefusalCode::StoreUnavailable,
                "rejected:store_unavailable",
            ));
        }
    };
    match Settlement::decode(&bytes) {
        Some(Settlement::Answer {
            question_id: answered,
            principal: from,
            response,
        }) if answered == question_id && from == principal => match response.get("result") {
            Some(result) if oob_outcome::accepted(&result) => Answered::KeepWaiting,
            Some(_) => refused("rejected:not_approved(declined)"),
            None => refused("rejected:not_approved(client_error)"),
        },
        Some(Settlement::Cancelled) => refused("rejected:not_approved(cancelled)"),
        _ => refused("rejected:not_approved(unknown_answer)"),
    }
}

/// Ends the stream: the audit line, then the refusal, or — approved and consumed — the call's
/// answer.
async fn settle<S>(
    gated: Gated,
    ended: Ended,
    pending: PendingLink,
    inner: S,
    events: mpsc::Sender<Bytes>,
) where
    S: Service<http::Request<Cleared>, Response = http::Response<ResponseBody>, Error = Infallible>,
{
    let PendingLink {
        call,
        ticket,
        audit,
        ..
    } = pending;
    let settings = &gated.approvals.settings;
    let refused = match ended {
        Ended::ClientGone => None,
        Ended::Refused(code, outcome) | Ended::Decided(Decided::Refused(code, outcome)) => {
            Some((code, outcome.to_owned()))
        }
        // Unreachable (a pending wait is judged as expired), but never a reason to run.
        Ended::Decided(Decided::Pending) => Some((
            RefusalCode::PendingApproval,
            "rejected:pending_approval".to_owned(),
        )),
        Ended::Decided(Decided::Run) => {
            match oob_outcome::consume(settings, &ticket.id, ticket.expires_at).await {
                Ok(()) => None,
                Err(code) => Some((code, format!("rejected:{}", code.as_str()))),
            }
        }
    };
    let outcome = match (&refused, &ended) {
        (Some((_, outcome)), _) => outcome.as_str(),
        (None, Ended::ClientGone) => "client_gone",
        (None, _) => "approved",
    };
    info!(upstream = gated.route.label, tool = %audit.target, outcome, "out-of-band question settled");
    if outcome != "approved" {
        // An approved call's outcome line is the audit layer's, once it was forwarded.
        gated.audit(
            "outcome",
            outcome,
            Some(channel_name::OUT_OF_BAND),
            Some(&ticket.id),
            audit.args_hash.as_deref(),
        );
    }
    match (refused, ended) {
        (Some((code, _)), _) => {
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
            let answer = json!({"jsonrpc": "2.0", "id": call.id.to_value(), "result": refusal});
            let _ = events.send(elicitation::event(&answer)).await;
        }
        (None, Ended::ClientGone) => {}
        (None, _) => {
            gated.audit(
                "decision",
                "confirmed",
                Some(channel_name::OUT_OF_BAND),
                Some(&ticket.id),
                audit.args_hash.as_deref(),
            );
            elicitation::forward(gated, call, audit, inner, events).await;
        }
    }
}
