//! The approval gate: classifies every call that can change the world (`tools/call`, and
//! `prompts/get` / `resources/read` when policy names them) against the policy and the pinned
//! tool catalog, and lets a risky call through only with an approval bound to exactly this call.
//!
//! Approval comes through one of three channels, picked per request:
//! - `input_required` (2026-07-28 clients whose request declares form elicitation): the gateway
//!   answers with its own question and a signed `requestState`; the retry carries the answer;
//! - `elicitation` (2025-06-18 / 2025-11-25 sessions whose `initialize` declared it): the held
//!   POST is answered as an SSE stream carrying the gateway's `elicitation/create`; the answer
//!   arrives on a separate POST and is handed over to the waiting stream;
//! - `token` (any other client, or `approval: token`): a signed single-use token in the result,
//!   which the model presents on the repeated call. `approval: human` refuses this one.
//!
//! Order matters and is fixed: classify → verify the MAC → check the binding against this
//! request → refuse unsafe numbers → consume the `jti` once → forward. The consume comes last so
//! an approval is never burnt by a request that fails a cheaper check, and nothing is forwarded
//! when the replay store cannot answer (fail closed).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use countersign_jsonrpc::message::{Message, Payload, Request, RequestId, Response};
use countersign_policy::{
    Action, Approval, CallFacts, Catalog, Decision, Method, PinnedTool, Policy, Principal,
};
use countersign_store::{AnswerHandover, Consumption, PinShare, ReplayStore};
use countersign_token::{
    Claims, Expectation, Keyring, TokenRejection, VerifyRules, arguments_hash, check_binding,
    check_safe_numbers, mint, new_jti, normalize_numbers, verify,
};
use http::{HeaderMap, HeaderName, StatusCode};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};

use crate::audit::{AuditRecord, AuditSink, timestamp};
use crate::catalog_fetch::{CallerContext, list_tools};
use crate::config::Upstream;
use crate::elicit::{APPROVAL_KEY, Question, REQUEST_ID_PREFIX, approves, elicitation_params};
use crate::error::ProxyError;
use crate::forward::UpstreamClient;
use crate::results::{self, Held, Refusal};
use crate::rewrite::{TOKEN_ARGUMENT, TOKEN_META};
use crate::sessions::{SessionBook, declares_form_elicitation};

/// Channel names, bound into tokens (`ch`) and written to the audit trail.
pub mod channel {
    /// A token handed to the model in the held result.
    pub const TOKEN: &str = "token";
    /// The gateway's `elicitation/create` on the held call's SSE stream.
    pub const ELICITATION: &str = "elicitation";
    /// MCP 2026-07-28 `input_required`: the `requestState` of the gateway's question.
    pub const INPUT_REQUIRED: &str = "input_required";
    /// A `requestState` wrapping an upstream's own state after the person approved: the retry
    /// is forwarded without asking again.
    pub const APPROVED: &str = "approved";
}

/// `tdh` for a tool the catalog does not know: a later pin of that tool changes it, so an
/// approval for an unknown tool stops working once the tool's real definition is known.
const UNKNOWN_DEFINITION: &str = "unknown";
/// How often a waiting question stream sends a keep-alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Where the caller's identity comes from.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// Trusted header naming the principal, set by an authenticating proxy in front of the
    /// gateway. `None`: every caller is `anonymous`.
    pub header: Option<HeaderName>,
    /// Trusted header with comma-separated group names.
    pub groups_header: Option<HeaderName>,
}

impl Identity {
    /// The caller, or `None` when the identity header is configured but absent or unusable.
    pub fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        let Some(header) = &self.header else {
            return Some(Principal {
                id: "anonymous".into(),
                groups: Vec::new(),
            });
        };
        let id = headers.get(header)?.to_str().ok()?.trim();
        if id.is_empty() {
            return None;
        }
        let groups = self
            .groups_header
            .as_ref()
            .and_then(|h| headers.get(h))
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Some(Principal {
            id: id.to_owned(),
            groups,
        })
    }
}

/// The current policy; replaced whole on reload, so a request sees one policy throughout.
#[derive(Debug, Default)]
pub struct PolicyHandle(RwLock<Arc<Policy>>);

impl PolicyHandle {
    pub fn new(policy: Policy) -> Self {
        Self(RwLock::new(Arc::new(policy)))
    }

    pub fn current(&self) -> Arc<Policy> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }
}

/// The pinned catalog with its refresh bookkeeping.
#[derive(Debug, Default)]
pub struct CatalogState {
    catalog: RwLock<Catalog>,
    /// Upstreams that announced `notifications/tools/list_changed` since their last listing.
    stale: Mutex<HashSet<String>>,
    /// One listing at a time per upstream, so a burst of calls to an unknown tool costs one.
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// When each upstream was last listed (successfully or not): a tool still unknown right
    /// after a listing is not worth listing again on every call.
    listed: Mutex<HashMap<String, Instant>>,
}

/// How long a listing answers "is this tool known?" before an unknown tool triggers another.
const RELIST_AFTER: Duration = Duration::from_secs(10);

impl CatalogState {
    pub fn get(&self, upstream: &str, tool: &str) -> Option<PinnedTool> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(upstream, tool)
            .cloned()
    }

    pub fn pinned_risks(&self, upstream: &str) -> Vec<(String, countersign_policy::Risk)> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .pinned_risks(upstream)
    }

    pub fn raise(&self, upstream: &str, tool: &str, risk: countersign_policy::Risk) -> bool {
        self.catalog
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .raise(upstream, tool, risk)
    }

    pub fn mark_stale(&self, upstream: &str) {
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(upstream.to_owned());
    }

    fn listed_recently(&self, upstream: &str) -> bool {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(upstream)
            .is_some_and(|at| at.elapsed() < RELIST_AFTER)
    }

    fn mark_listed(&self, upstream: &str) {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(upstream.to_owned(), Instant::now());
    }

    fn is_stale(&self, upstream: &str) -> bool {
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(upstream)
    }

    /// Pins one complete listing.
    pub fn observe(&self, upstream: &str, tools: &[Value]) {
        let events = self
            .catalog
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .observe(upstream, tools);
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(upstream);
        for event in events {
            info!(?event, "tool catalog changed");
        }
    }

    fn refresh_lock(&self, upstream: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.refreshing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(upstream.to_owned())
            .or_default()
            .clone()
    }
}

/// Signing, replay, hand-over and identity settings of the gate.
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// Deployment id, the tokens' `iss`.
    pub issuer: String,
    pub keyring: Arc<Keyring>,
    pub store: Arc<dyn ReplayStore>,
    /// Carries elicitation answers from the POST that brings them to the stream that asked.
    pub handover: Arc<dyn AnswerHandover>,
    /// How long the gateway waits for a person to answer its question.
    pub elicitation_timeout: Duration,
    pub identity: Identity,
    pub audit: AuditSink,
    /// Clock skew tolerated on token times, seconds.
    pub leeway_secs: u64,
    /// Pinned risks shared with the other replicas.
    pub pins: Arc<dyn PinShare>,
    pub metrics: crate::metrics::ProxyMetrics,
}

/// Shared by every route of a listener.
#[derive(Debug)]
pub struct Gate {
    pub settings: GateSettings,
    pub policy: Arc<PolicyHandle>,
    pub catalog: Arc<CatalogState>,
    pub sessions: Arc<SessionBook>,
}

/// What the endpoint does with a POST after the gate.
#[derive(Debug)]
pub enum Verdict {
    /// Forward this payload (approval artefacts stripped, risky arguments in canonical form).
    Forward(Payload, Option<Box<ForwardContext>>),
    /// Answer the client with this JSON-RPC result; nothing goes upstream.
    Answer(Value),
    /// Answer the client with this JSON-RPC error; nothing goes upstream.
    AnswerError {
        status: StatusCode,
        code: i64,
        message: String,
        data: Value,
    },
    /// Ask the person on an SSE stream, then forward or refuse.
    Ask(Box<PendingQuestion>),
    /// An answer to one of the gateway's questions was handed to its waiting stream (202).
    Accepted,
    /// Refuse at the HTTP level.
    Refuse(ProxyError),
}

/// What travels with a forwarded call: its audit record, and (for an approved call) how to
/// wrap an upstream's own `input_required` state so the person is not asked again.
#[derive(Debug)]
pub struct ForwardContext {
    pub audit: CallAudit,
    pub wrap: Option<StateWrap>,
}

/// The bindings of an approved call, to mint `approved` states from.
#[derive(Debug, Clone)]
pub struct StateWrap {
    claims: Claims,
    ttl_secs: u64,
}

/// A held call waiting for the person's answer on its SSE stream.
#[derive(Debug)]
pub struct PendingQuestion {
    /// The call to forward once approved (token-free, canonical arguments).
    pub call: Request,
    /// The gateway's `elicitation/create`, ready to send.
    pub question: Value,
    /// Hand-over key: session and the held call's id.
    pub handover_key: String,
    /// The id of the gateway's question; only an answer to exactly this id counts.
    pub question_id: String,
    pub audit: CallAudit,
}

/// What the endpoint needs to write the outcome line of a forwarded call.
#[derive(Debug, Clone)]
pub struct CallAudit {
    pub principal: String,
    pub session: Option<String>,
    pub method: &'static str,
    pub target: String,
    pub risk: &'static str,
    pub rule: String,
    pub action: &'static str,
    pub channel: Option<&'static str>,
    pub jti: Option<String>,
    pub args_hash: Option<String>,
    pub started: Instant,
}

/// The request being judged, with what the gate needs from around it.
#[derive(Debug)]
pub struct GateRequest<'a> {
    pub upstream: &'a Upstream,
    pub client: &'a UpstreamClient,
    pub headers: &'a HeaderMap,
    pub max_event_bytes: usize,
    /// The request is MCP 2026-07-28 (stateless).
    pub stateless: bool,
}

/// The call-like requests the gate judges.
fn gated_method(method: &str) -> Option<Method> {
    match method {
        "tools/call" => Some(Method::ToolsCall),
        "prompts/get" => Some(Method::PromptsGet),
        "resources/read" => Some(Method::ResourcesRead),
        _ => None,
    }
}

/// How an approval for a held call is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    Token,
    Elicitation,
    InputRequired,
}

impl Gate {
    pub async fn check(&self, request: &GateRequest<'_>, payload: Payload) -> Verdict {
        match payload {
            Payload::Single(Message::Request(call)) if gated_method(&call.method).is_some() => {
                self.check_call(request, call).await
            }
            Payload::Single(Message::Response(answer)) if is_our_question(&answer) => {
                self.take_answer(request, answer).await
            }
            Payload::Batch(messages) => self.check_batch(request, messages).await,
            Payload::Single(Message::Notification(cancel))
                if cancel.method == "notifications/cancelled" =>
            {
                self.cancel_question(request, &cancel).await;
                Verdict::Forward(Payload::Single(Message::Notification(cancel)), None)
            }
            other => Verdict::Forward(other, None),
        }
    }

    /// A client that cancels a held call has given up on it: the question is settled as not
    /// approved, so a late approval can never run it. (The notification is still forwarded;
    /// the upstream ignores ids it does not know.)
    async fn cancel_question(
        &self,
        request: &GateRequest<'_>,
        cancel: &countersign_jsonrpc::message::Notification,
    ) {
        let Some(session) = session_id(request.headers) else {
            return;
        };
        let Some(principal) = self.settings.identity.principal(request.headers) else {
            return;
        };
        if self.sessions.get(&session, &principal.id).is_none() {
            return;
        }
        let Some(call_id) = cancel
            .params
            .as_ref()
            .and_then(|p| p.get("requestId"))
            .and_then(|id| RequestId::from_value(id).ok())
        else {
            return;
        };
        let key = handover_key(
            &session,
            &question_id(&self.settings.keyring, &session, &call_id),
        );
        if let Ok(true) = self
            .settings
            .handover
            .deliver(&key, Settlement::Cancelled.encode())
            .await
        {
            info!(session = %session, "held call cancelled by the client; its question is closed");
        }
    }

    /// A session ended (DELETE): its held calls are settled as not approved.
    pub async fn end_session(&self, session: &str, pending_call_ids: &[RequestId]) {
        for call_id in pending_call_ids {
            let _ = self
                .settings
                .handover
                .deliver(
                    &handover_key(
                        session,
                        &question_id(&self.settings.keyring, session, call_id),
                    ),
                    Settlement::Cancelled.encode(),
                )
                .await;
        }
    }

    /// The principal of a request, for the endpoint's session bookkeeping.
    pub fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        self.settings.identity.principal(headers)
    }

    /// An answer to the gateway's own question never goes upstream: it is handed to the stream
    /// that asked — only if it comes from the same session and principal.
    async fn take_answer(&self, request: &GateRequest<'_>, answer: Response) -> Verdict {
        let Some(principal) = self.settings.identity.principal(request.headers) else {
            return Verdict::Refuse(ProxyError::Unauthenticated);
        };
        // The hand-over key includes the session the answer came on, and the waiting stream
        // checks the principal, so an answer from anywhere else finds no question to settle.
        // No local session state is needed: the answer may reach any replica.
        let Some(session) = session_id(request.headers) else {
            return Verdict::Refuse(ProxyError::UnknownAnswer);
        };
        let Some(RequestId::String(id)) = &answer.id else {
            return Verdict::Refuse(ProxyError::UnknownAnswer);
        };
        let key = handover_key(&session, id);
        let question_id = id.clone();
        let response = Message::Response(answer).to_value();
        let bytes = Settlement::Answer {
            question_id,
            principal: principal.id,
            response,
        }
        .encode();
        match self.settings.handover.deliver(&key, bytes).await {
            Ok(true) => Verdict::Accepted,
            Ok(false) => Verdict::Refuse(ProxyError::UnknownAnswer),
            Err(error) => {
                warn!(%error, "answer hand-over failed");
                Verdict::Refuse(ProxyError::UnknownAnswer)
            }
        }
    }

    /// A batch is forwarded only when every call in it would be allowed on its own: a held
    /// call cannot be answered inside a batch, so the batch is refused whole.
    async fn check_batch(&self, request: &GateRequest<'_>, messages: Vec<Message>) -> Verdict {
        let Some(principal) = self.settings.identity.principal(request.headers) else {
            return Verdict::Refuse(ProxyError::Unauthenticated);
        };
        let policy = self.policy.current();
        for message in &messages {
            if let Message::Response(answer) = message {
                if is_our_question(answer) {
                    return Verdict::Refuse(ProxyError::RiskyBatch(
                        "answers to the gateway's questions are sent one per request".into(),
                    ));
                }
                continue;
            }
            let Message::Request(call) = message else {
                continue;
            };
            let Some(method) = gated_method(&call.method) else {
                continue;
            };
            let parts = match CallParts::of(call, method) {
                Ok(parts) => parts,
                Err(error) => return Verdict::Refuse(error),
            };
            if parts.meta_token.is_some() || parts.argument_token.is_some() {
                return Verdict::Refuse(ProxyError::RiskyBatch(format!(
                    "`{}` carries a confirmation token; confirmations are redeemed one call per request",
                    parts.target
                )));
            }
            let pinned = self.pinned_tool(request, &parts, call).await;
            let decision = classify(
                &policy,
                request.upstream,
                &parts,
                &principal,
                pinned.as_ref(),
            );
            if decision.action != Action::Allow {
                return Verdict::Refuse(ProxyError::RiskyBatch(format!(
                    "`{}` is {} by rule `{}`; send that call on its own",
                    parts.target,
                    if decision.action == Action::Deny {
                        "denied"
                    } else {
                        "held for confirmation"
                    },
                    decision.rule
                )));
            }
        }
        Verdict::Forward(Payload::Batch(messages), None)
    }

    async fn check_call(&self, request: &GateRequest<'_>, call: Request) -> Verdict {
        let started = Instant::now();
        let Some(method) = gated_method(&call.method) else {
            return Verdict::Forward(Payload::Single(Message::Request(call)), None);
        };
        let Some(principal) = self.settings.identity.principal(request.headers) else {
            return Verdict::Refuse(ProxyError::Unauthenticated);
        };
        let parts = match CallParts::of(&call, method) {
            Ok(parts) => parts,
            Err(error) => return Verdict::Refuse(error),
        };
        let policy = self.policy.current();
        let pinned = self.pinned_tool(request, &parts, &call).await;
        let parts = parts.with_definition(pinned.as_ref());
        let decision = classify(
            &policy,
            request.upstream,
            &parts,
            &principal,
            pinned.as_ref(),
        );
        // Sessions exist only before 2026-07-28; a stateless request's header means nothing.
        let session = if request.stateless {
            None
        } else {
            session_id(request.headers)
        };
        let ctx = Context {
            upstream: &request.upstream.name,
            principal: &principal,
            session: session.as_deref(),
            stateless: request.stateless,
            protocol_version: request
                .headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .and_then(countersign_jsonrpc::mcp::ProtocolVersion::parse),
            method,
            parts: &parts,
            decision: &decision,
            pinned: pinned.as_ref(),
            started,
        };
        if let Some(error) = &decision.condition_error {
            warn!(rule = %decision.rule, error = %error, "policy condition failed; decided fail-closed");
        }

        match decision.action {
            Action::Allow => {
                self.audit(&ctx, "decision", "allowed", None, None, None);
                let audit = ctx.call_audit(None, None, None);
                let call = parts.strip_approval(call, false);
                Verdict::Forward(
                    Payload::Single(Message::Request(call)),
                    Some(Box::new(ForwardContext { audit, wrap: None })),
                )
            }
            Action::Deny => {
                self.audit(&ctx, "decision", "denied", None, None, None);
                let message = match &decision.reason {
                    Some(reason) => {
                        format!("This call is not allowed by policy, so nothing was sent: {reason}")
                    }
                    None => {
                        "This call is not allowed by policy, so nothing was sent. Do not retry it."
                            .to_owned()
                    }
                };
                ctx.refusal("denied", "policy_denied", message)
            }
            Action::Confirm => {
                if parts.conflicting_tokens() {
                    self.audit(
                        &ctx,
                        "outcome",
                        "rejected:malformed",
                        Some(channel::TOKEN),
                        None,
                        None,
                    );
                    return ctx.refusal(
                        "rejected",
                        "malformed",
                        results::rejection_message("malformed", &parts.target),
                    );
                }
                if let Some(token) = parts.presented_token() {
                    let token = token.to_owned();
                    return self
                        .redeem(request, &ctx, call, &token, channel::TOKEN)
                        .await;
                }
                if request.stateless
                    && let Some(state) = request_state(&call)
                {
                    return self
                        .redeem(request, &ctx, call, &state, channel::INPUT_REQUIRED)
                        .await;
                }
                self.hold(request, &ctx, call).await
            }
        }
    }

    /// The pinned definition of the call's tool, listing the upstream's tools first when the
    /// tool is unknown or the upstream announced a change. Listing failures leave it unknown,
    /// which is the strictest class.
    async fn pinned_tool(
        &self,
        request: &GateRequest<'_>,
        parts: &CallParts,
        call: &Request,
    ) -> Option<PinnedTool> {
        if parts.method != Method::ToolsCall {
            return None;
        }
        let upstream = &request.upstream.name;
        if !self.catalog.is_stale(upstream) {
            // Known, or unknown although the upstream was just listed: answer from the catalog.
            let pin = self.catalog.get(upstream, &parts.target);
            if pin.is_some() || self.catalog.listed_recently(upstream) {
                return pin;
            }
        }
        let lock = self.catalog.refresh_lock(upstream);
        let _guard = lock.lock().await;
        // Another request may have listed while this one waited.
        if !self.catalog.is_stale(upstream) {
            let pin = self.catalog.get(upstream, &parts.target);
            if pin.is_some() || self.catalog.listed_recently(upstream) {
                return pin;
            }
        }
        let caller = CallerContext {
            headers: request.headers.clone(),
            stateless_meta: stateless_meta(call),
        };
        let listed = list_tools(
            request.upstream,
            request.client,
            &caller,
            request.max_event_bytes,
        )
        .await;
        // Recorded whether or not it worked: a failing upstream is retried after a pause, not
        // on every call.
        self.catalog.mark_listed(upstream);
        match listed {
            Ok(tools) => {
                self.catalog.observe(upstream, &tools);
                // Before this listing decides anything, adopt what other replicas pinned.
                self.share_pins(upstream).await;
            }
            Err(error) => {
                warn!(%error, upstream = %upstream, "could not list tools; treating the tool as unknown")
            }
        }
        self.catalog.get(upstream, &parts.target)
    }

    /// Raises the shared pins with this replica's and adopts any higher ones. A failure keeps
    /// the local pins: they are never lower than what this replica saw itself.
    pub async fn share_pins(&self, upstream: &str) {
        let local: Vec<(String, u8)> = self
            .catalog
            .pinned_risks(upstream)
            .into_iter()
            .map(|(tool, risk)| (tool, risk_ordinal(risk)))
            .collect();
        if local.is_empty() {
            return;
        }
        match self.settings.pins.raise(upstream, &local).await {
            Ok(shared) => {
                for (tool, ordinal) in shared {
                    if let Some(risk) = risk_from_ordinal(ordinal)
                        && self.catalog.raise(upstream, &tool, risk)
                    {
                        info!(upstream = %upstream, tool = %tool, risk = risk.as_str(), "adopted a higher risk pinned by another replica");
                    }
                }
            }
            Err(error) => warn!(%error, upstream = %upstream, "could not share pinned risks"),
        }
    }

    /// Which channel can reach a person for this call, or `None` when the policy demands a
    /// person and none can be reached.
    fn channel(&self, ctx: &Context<'_>, call: &Request) -> Option<Channel> {
        let approval = ctx.decision.approval;
        if approval == Approval::Token {
            return Some(Channel::Token);
        }
        let reachable = if ctx.stateless {
            // 2026-07-28: capabilities are declared per request, and only these count.
            let declared = call
                .params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(countersign_jsonrpc::mcp::META_CLIENT_CAPABILITIES))
                .is_some_and(declares_form_elicitation);
            declared.then_some(Channel::InputRequired)
        } else {
            // Elicitation exists from 2025-06-18 on; such clients send the negotiated version
            // on every request, so a request without it is an older session.
            let version_can_elicit = ctx
                .protocol_version
                .is_some_and(|v| v >= countersign_jsonrpc::mcp::ProtocolVersion::V2025_06_18);
            ctx.session
                .filter(|_| version_can_elicit)
                .and_then(|s| self.sessions.get(s, &ctx.principal.id))
                .filter(|s| s.can_elicit)
                .map(|_| Channel::Elicitation)
        };
        match (reachable, approval) {
            (Some(channel), _) => Some(channel),
            (None, Approval::Human) => None,
            (None, _) => Some(Channel::Token),
        }
    }

    async fn hold(&self, request: &GateRequest<'_>, ctx: &Context<'_>, call: Request) -> Verdict {
        let Some(channel) = self.channel(ctx, &call) else {
            self.audit(
                ctx,
                "decision",
                "rejected:human_approval_unavailable",
                None,
                None,
                None,
            );
            return ctx.human_unavailable();
        };
        let arguments = ctx.parts.arguments_without_token();
        let ah = match arguments_hash(&arguments) {
            Ok(ah) => ah,
            Err(error) => {
                debug!(%error, "unsafe numbers in risky arguments");
                self.audit(
                    ctx,
                    "decision",
                    "rejected:unsafe_arguments",
                    None,
                    None,
                    None,
                );
                return ctx.refusal(
                    "rejected",
                    "unsafe_arguments",
                    results::rejection_message("unsafe_arguments", &ctx.parts.target),
                );
            }
        };
        let preview = match self.preview(request, ctx, &call, &arguments).await {
            Ok(preview) => preview,
            Err(verdict) => return verdict,
        };
        let preview = preview.as_deref();
        match channel {
            Channel::Token => self.hold_with_token(ctx, &arguments, ah, preview),
            Channel::InputRequired => self.ask_input_required(ctx, &arguments, ah, preview),
            Channel::Elicitation => self.ask_on_stream(ctx, call, &arguments, ah, preview),
        }
    }

    /// A dry run the policy asked for (`preview: {arguments: {dry_run: true}}`): the tool is
    /// called with those extra arguments first and its text shown with the question. A preview
    /// that fails is answered as it is, without asking: there is nothing sound to approve.
    async fn preview(
        &self,
        request: &GateRequest<'_>,
        ctx: &Context<'_>,
        call: &Request,
        arguments: &Value,
    ) -> Result<Option<String>, Verdict> {
        let Some(extra) = ctx
            .decision
            .preview
            .as_ref()
            .and_then(|p| p.get("arguments"))
            .and_then(Value::as_object)
        else {
            return Ok(None);
        };
        if ctx.method != Method::ToolsCall {
            return Ok(None);
        }
        let mut preview_arguments = arguments.as_object().cloned().unwrap_or_default();
        preview_arguments.extend(extra.clone());
        let id = RequestId::String(format!(
            "{REQUEST_ID_PREFIX}preview-{}",
            uuid::Uuid::new_v4()
        ));
        let mut params = Map::new();
        params.insert("name".into(), Value::String(ctx.parts.target.clone()));
        params.insert("arguments".into(), Value::Object(preview_arguments));
        let mut mirrored = Vec::new();
        if let Some(meta) = stateless_meta(call) {
            params.insert("_meta".into(), Value::Object(meta));
            mirrored.push((
                crate::inspect::MCP_METHOD,
                http::HeaderValue::from_static("tools/call"),
            ));
            if let Ok(name) = http::HeaderValue::try_from(
                countersign_jsonrpc::mcp::encode_header_value(&ctx.parts.target),
            ) {
                mirrored.push((crate::inspect::MCP_NAME, name));
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": id.to_value(), "method": "tools/call", "params": params});
        let upstream_request = crate::forward::upstream_request(
            request.upstream,
            http::Method::POST,
            request.headers,
            bytes::Bytes::from(body.to_string()),
            &mirrored,
        );
        let outcome = crate::catalog_fetch::call(
            request.upstream,
            request.client,
            upstream_request,
            &id,
            request.max_event_bytes,
        )
        .await;
        match outcome {
            Ok(Ok(result)) if result.get("isError") != Some(&Value::Bool(true)) => {
                let text: Vec<&str> = result
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|block| block.get("text").and_then(Value::as_str))
                    .collect();
                self.audit(ctx, "decision", "previewed", None, None, None);
                Ok(Some(text.join("\n")))
            }
            Ok(Ok(failed)) => {
                self.audit(ctx, "outcome", "preview_failed", None, None, None);
                Err(Verdict::Answer(Value::Object(failed)))
            }
            Ok(Err(error)) => {
                self.audit(ctx, "outcome", "preview_failed", None, None, None);
                Err(Verdict::AnswerError {
                    status: StatusCode::OK,
                    code: error.code,
                    message: error.message,
                    data: error.data.unwrap_or(Value::Null),
                })
            }
            Err(error) => Err(Verdict::Refuse(error)),
        }
    }

    fn claims(&self, ctx: &Context<'_>, ah: String, ch: &str, st: Option<String>) -> (Claims, u64) {
        let now = unix_now();
        let ttl = ctx.decision.ttl.as_secs().max(1);
        let claims = Claims {
            v: 1,
            iss: self.settings.issuer.clone(),
            sub: ctx.principal.id.clone(),
            sid: ctx.session.map(str::to_owned),
            up: ctx.upstream.to_owned(),
            m: ctx.method.as_str().to_owned(),
            tool: ctx.parts.target.clone(),
            ah,
            tdh: ctx.definition_hash(),
            rule: ctx.decision.rule.clone(),
            ch: ch.to_owned(),
            iat: now,
            exp: now + ttl,
            jti: new_jti(),
            st,
        };
        (claims, ttl)
    }

    /// Mints the signed artefact of a held call for channel `ch` and records the decision;
    /// returns it with its lifetime in seconds.
    fn issue(
        &self,
        ctx: &Context<'_>,
        ah: String,
        ch: &'static str,
        outcome: &str,
    ) -> (String, u64) {
        let (claims, ttl) = self.claims(ctx, ah, ch, None);
        let minted = mint(&self.settings.keyring, &claims);
        self.audit(
            ctx,
            "decision",
            outcome,
            Some(ch),
            Some(&claims.jti),
            Some(&claims.ah),
        );
        (minted, ttl)
    }

    fn hold_with_token(
        &self,
        ctx: &Context<'_>,
        arguments: &Value,
        ah: String,
        preview: Option<&str>,
    ) -> Verdict {
        let (token, ttl) = self.issue(ctx, ah, channel::TOKEN, "held");
        let mut summary = ctx.summary();
        if let Some(preview) = preview {
            summary.push_str(&format!(
                "\nPreview (dry run): {}",
                crate::elicit::escape(preview)
            ));
        }
        let held = Held {
            token: &token,
            tool: &ctx.parts.target,
            upstream: ctx.upstream,
            risk: ctx.decision.risk.as_str(),
            rule: &ctx.decision.rule,
            summary: &summary,
            arguments,
            expires_in_secs: ttl,
            token_as_argument: ctx.parts.token_argument_is_ours,
        };
        match ctx.method {
            Method::ToolsCall => Verdict::Answer(results::held(&held, ctx.has_output_schema())),
            Method::PromptsGet | Method::ResourcesRead => {
                let result = results::held(&held, true);
                Verdict::AnswerError {
                    status: StatusCode::OK,
                    code: HELD_ERROR_CODE,
                    message: result["content"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    data: result["_meta"][results::CONFIRMATION_META].clone(),
                }
            }
        }
    }

    /// 2026-07-28: answer with the gateway's question; the signed `requestState` binds it to
    /// this exact call.
    fn ask_input_required(
        &self,
        ctx: &Context<'_>,
        arguments: &Value,
        ah: String,
        preview: Option<&str>,
    ) -> Verdict {
        let (state, _) = self.issue(ctx, ah, channel::INPUT_REQUIRED, "asked");
        let question = ctx.question(arguments, preview);
        Verdict::Answer(json!({
            "resultType": "input_required",
            "inputRequests": { APPROVAL_KEY: {"method": "elicitation/create", "params": question} },
            "requestState": state,
        }))
    }

    /// Legacy sessions: the held POST becomes an SSE stream carrying the question.
    fn ask_on_stream(
        &self,
        ctx: &Context<'_>,
        call: Request,
        arguments: &Value,
        ah: String,
        preview: Option<&str>,
    ) -> Verdict {
        let Some(session) = ctx.session else {
            return ctx.human_unavailable();
        };
        let question_id = question_id(&self.settings.keyring, session, &call.id);
        self.audit(
            ctx,
            "decision",
            "asked",
            Some(channel::ELICITATION),
            Some(&question_id),
            Some(&ah),
        );
        let params = ctx.question(arguments, preview);
        let question = json!({"jsonrpc": "2.0", "id": question_id, "method": "elicitation/create", "params": params});
        let handover_key = handover_key(session, &question_id);
        let mut call = ctx.parts.strip_approval(call, false);
        if normalize_call_arguments(&mut call).is_err() {
            return ctx.refusal(
                "rejected",
                "unsafe_arguments",
                results::rejection_message("unsafe_arguments", &ctx.parts.target),
            );
        }
        Verdict::Ask(Box::new(PendingQuestion {
            call,
            question,
            handover_key,
            question_id: question_id.clone(),
            audit: ctx.call_audit(Some(channel::ELICITATION), Some(question_id), Some(ah)),
        }))
    }

    /// Verifies a presented approval (a confirmation token, or a 2026-07-28 `requestState`),
    /// checks it is bound to this very call, spends it, and forwards the call.
    async fn redeem(
        &self,
        request: &GateRequest<'_>,
        ctx: &Context<'_>,
        call: Request,
        presented: &str,
        via: &'static str,
    ) -> Verdict {
        let reject = |code: &str| {
            self.audit(
                ctx,
                "outcome",
                &format!("rejected:{code}"),
                Some(via),
                None,
                None,
            );
            ctx.refusal(
                "rejected",
                code,
                results::rejection_message(code, &ctx.parts.target),
            )
        };
        let rules = VerifyRules {
            leeway_secs: self.settings.leeway_secs,
            max_ttl_secs: countersign_policy::MAX_TOKEN_TTL.as_secs(),
        };
        let claims = match verify(&self.settings.keyring, presented, unix_now(), &rules) {
            Ok(claims) => claims,
            Err(rejection) => return reject(rejection.code()),
        };
        let arguments = ctx.parts.arguments_without_token();
        let Ok(ah) = arguments_hash(&arguments) else {
            return reject("unsafe_arguments");
        };
        let tdh = ctx.definition_hash();
        let expected = Expectation {
            sub: &ctx.principal.id,
            sid: ctx.session,
            up: ctx.upstream,
            m: ctx.method.as_str(),
            tool: &ctx.parts.target,
            ah: &ah,
            tdh: &tdh,
        };
        if let Err(rejection) = check_binding(&claims, &expected) {
            return reject(rejection.code());
        }
        if claims.iss != self.settings.issuer {
            return reject(TokenRejection::BadSignature.code());
        }
        // Each channel's artefact works only in its own place: a requestState is not a token
        // the model can present, and a token does not answer the gateway's question.
        let upstream_state = match (via, claims.ch.as_str()) {
            (channel::TOKEN, channel::TOKEN) => {
                if ctx.decision.approval == Approval::Human {
                    return reject("human_approval_unavailable");
                }
                None
            }
            (channel::INPUT_REQUIRED, channel::INPUT_REQUIRED) => {
                match input_response(&call) {
                    // The retry lacks the answer: ask again rather than fail.
                    None => return self.hold(request, ctx, call).await,
                    Some(answer) if !approves(answer) => {
                        self.audit(
                            ctx,
                            "outcome",
                            "rejected:not_approved",
                            Some(via),
                            Some(&claims.jti),
                            Some(&ah),
                        );
                        return ctx.refusal(
                            "rejected",
                            "not_approved",
                            results::rejection_message("not_approved", &ctx.parts.target),
                        );
                    }
                    Some(_) => None,
                }
            }
            (channel::INPUT_REQUIRED, channel::APPROVED) => Some(claims.st.clone()),
            _ => return reject(TokenRejection::Malformed.code()),
        };
        if check_safe_numbers(&arguments).is_err() {
            return reject("unsafe_arguments");
        }
        // Last check before forwarding: spend the approval. Any store failure refuses.
        let expires_at_ms = (claims.exp + self.settings.leeway_secs + 1) * 1000;
        let consuming = Instant::now();
        let consumed = self
            .settings
            .store
            .consume(&claims.jti, expires_at_ms)
            .await;
        let outcome = match &consumed {
            Ok(Consumption::First) => "consumed",
            Ok(Consumption::AlreadySpent) => "replayed",
            Err(_) => "error",
        };
        self.settings
            .metrics
            .observe_store(outcome, consuming.elapsed());
        match consumed {
            Ok(Consumption::First) => {}
            Ok(Consumption::AlreadySpent) => return reject("replayed"),
            Err(error) => {
                warn!(%error, "replay store failed; refusing the approved call");
                return reject("store_unavailable");
            }
        }
        self.audit(
            ctx,
            "decision",
            "confirmed",
            Some(via),
            Some(&claims.jti),
            Some(&ah),
        );
        let mut forwarded = ctx.parts.strip_approval(call, true);
        if let Some(state) = upstream_state {
            // The upstream gets its own state back byte for byte (or none, if it sent none).
            if let (Some(params), Some(state)) = (forwarded.params.as_mut(), state) {
                params.insert("requestState".into(), Value::String(state));
            }
        }
        // The upstream must receive exactly what was hashed and shown, not `1.0` where the
        // person approved `1`.
        if normalize_call_arguments(&mut forwarded).is_err() {
            return reject("unsafe_arguments");
        }
        let wrap = ctx.stateless.then(|| {
            let (mut template, ttl_secs) = self.claims(ctx, ah.clone(), channel::APPROVED, None);
            template.sid = None;
            StateWrap {
                claims: template,
                ttl_secs,
            }
        });
        let audit = ctx.call_audit(Some(via), Some(claims.jti), Some(ah));
        Verdict::Forward(
            Payload::Single(Message::Request(forwarded)),
            Some(Box::new(ForwardContext { audit, wrap })),
        )
    }

    /// Wraps an upstream's `input_required` answer to an approved call: its `requestState` goes
    /// inside a signed `approved` state, so the retry is forwarded without asking again and the
    /// upstream's state comes back byte-exact. An upstream that asks under the gateway's own key
    /// could make its question look like the gateway's approval, so that answer is refused.
    pub fn wrap_upstream_state(
        &self,
        wrap: &StateWrap,
        result: &mut Map<String, Value>,
    ) -> Result<(), String> {
        if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return Ok(());
        }
        if result
            .get("inputRequests")
            .and_then(|r| r.get(APPROVAL_KEY))
            .is_some()
        {
            return Err(format!(
                "the upstream used the gateway's reserved input key `{APPROVAL_KEY}`"
            ));
        }
        let upstream_state = match result.get("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(state)) => Some(state.clone()),
            Some(_) => return Err("the upstream's requestState is not a string".into()),
        };
        let now = unix_now();
        let claims = Claims {
            iat: now,
            exp: now + wrap.ttl_secs,
            jti: new_jti(),
            st: upstream_state,
            ..wrap.claims.clone()
        };
        result.insert(
            "requestState".into(),
            Value::String(mint(&self.settings.keyring, &claims)),
        );
        Ok(())
    }

    fn audit(
        &self,
        ctx: &Context<'_>,
        event: &'static str,
        outcome: &str,
        channel: Option<&str>,
        jti: Option<&str>,
        args_hash: Option<&str>,
    ) {
        let include = self.settings.audit.include_arguments();
        self.settings.audit.record(&AuditRecord {
            ts: timestamp(SystemTime::now()),
            event,
            principal: &ctx.principal.id,
            upstream: ctx.upstream,
            method: ctx.method.as_str(),
            tool: &ctx.parts.target,
            session: ctx.session,
            risk: Some(ctx.decision.risk.as_str()),
            rule: Some(&ctx.decision.rule),
            action: Some(ctx.decision.action.as_str()),
            channel,
            jti,
            args_hash,
            outcome,
            latency_ms: None,
            arguments: include.then_some(&ctx.parts.arguments),
        });
    }

    /// Writes the outcome line of a forwarded (or asked-then-settled) call.
    pub fn audit_outcome(&self, audit: &CallAudit, upstream: &str, outcome: &str) {
        self.settings.audit.record(&AuditRecord {
            ts: timestamp(SystemTime::now()),
            event: "outcome",
            principal: &audit.principal,
            upstream,
            method: audit.method,
            tool: &audit.target,
            session: audit.session.as_deref(),
            risk: Some(audit.risk),
            rule: Some(&audit.rule),
            action: Some(audit.action),
            channel: audit.channel,
            jti: audit.jti.as_deref(),
            args_hash: audit.args_hash.as_deref(),
            outcome,
            latency_ms: Some(audit.started.elapsed().as_secs_f64() * 1000.0),
            arguments: None,
        });
    }

    /// Whether a listed tool may be held, so `tools/list` offers it the token argument.
    pub fn may_confirm(&self, upstream: &str, tool: &Value) -> bool {
        let policy = self.policy.current();
        policy
            .explain(upstream, std::slice::from_ref(tool))
            .first()
            .is_none_or(|e| e.action == Action::Confirm || !e.conditional_rules.is_empty())
    }
}

/// JSON-RPC error code for a held `prompts/get` / `resources/read` (they have no result shape
/// that can say "held"); the confirmation is in the error's `data`.
pub const HELD_ERROR_CODE: i64 = -32011;
/// JSON-RPC error code for a refused or denied `prompts/get` / `resources/read`.
pub const REFUSED_ERROR_CODE: i64 = -32010;
/// MCP 2026-07-28 `MissingRequiredClientCapability`.
pub const MISSING_CAPABILITY_CODE: i64 = -32021;

fn risk_ordinal(risk: countersign_policy::Risk) -> u8 {
    match risk {
        countersign_policy::Risk::Read => 0,
        countersign_policy::Risk::Write => 1,
        countersign_policy::Risk::Destructive => 2,
        countersign_policy::Risk::Unknown => 3,
    }
}

fn risk_from_ordinal(ordinal: u8) -> Option<countersign_policy::Risk> {
    Some(match ordinal {
        0 => countersign_policy::Risk::Read,
        1 => countersign_policy::Risk::Write,
        2 => countersign_policy::Risk::Destructive,
        3 => countersign_policy::Risk::Unknown,
        _ => return None,
    })
}

fn is_our_question(answer: &Response) -> bool {
    matches!(&answer.id, Some(RequestId::String(id)) if id.starts_with(REQUEST_ID_PREFIX))
}

/// Hand-over key of a held call's question.
fn handover_key(session: &str, question_id: &str) -> String {
    format!("{session}\n{question_id}")
}

/// The id of the gateway's question for a held call, `countersign-<uuid>`: derived from the
/// signing key, the session and the call's id, so it is unguessable, and a replica that receives
/// the client's `notifications/cancelled` for the call finds the same question without any
/// shared state.
fn question_id(keyring: &Keyring, session: &str, call_id: &RequestId) -> String {
    let mut input = session.as_bytes().to_vec();
    input.push(0);
    input.extend_from_slice(call_id.to_value().to_string().as_bytes());
    let mut bytes: [u8; 16] = keyring.derive("question", &input)[..16]
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

/// What the hand-over carries to a waiting question stream.
#[derive(Debug)]
pub enum Settlement {
    /// The client's JSON-RPC response to the question with this id, and who sent it.
    Answer {
        question_id: String,
        principal: String,
        response: Value,
    },
    /// The client cancelled the held call, or ended its session.
    Cancelled,
}

impl Settlement {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Settlement::Answer {
                question_id,
                principal,
                response,
            } => json!({"question": question_id, "principal": principal, "response": response})
                .to_string()
                .into_bytes(),
            Settlement::Cancelled => br#"{"cancelled":true}"#.to_vec(),
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<Settlement> {
        let value = countersign_jsonrpc::strict::parse_strict(bytes).ok()?;
        if value.get("cancelled") == Some(&Value::Bool(true)) {
            return Some(Settlement::Cancelled);
        }
        Some(Settlement::Answer {
            question_id: value.get("question")?.as_str()?.to_owned(),
            principal: value.get("principal")?.as_str()?.to_owned(),
            response: value.get("response")?.clone(),
        })
    }
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn request_state(call: &Request) -> Option<String> {
    call.params
        .as_ref()?
        .get("requestState")?
        .as_str()
        .map(str::to_owned)
}

fn input_response(call: &Request) -> Option<&Value> {
    call.params
        .as_ref()?
        .get("inputResponses")?
        .get(APPROVAL_KEY)
}

/// Rewrites the call's argument numbers to their canonical text.
fn normalize_call_arguments(call: &mut Request) -> Result<(), ()> {
    if let Some(Value::Object(args)) = call.params.as_mut().and_then(|p| p.get_mut("arguments")) {
        let mut value = Value::Object(std::mem::take(args));
        normalize_numbers(&mut value).map_err(|_| ())?;
        if let Value::Object(normalized) = value {
            *args = normalized;
        }
    }
    Ok(())
}

fn classify(
    policy: &Policy,
    upstream: &Upstream,
    parts: &CallParts,
    principal: &Principal,
    pinned: Option<&PinnedTool>,
) -> Decision {
    policy.classify(&CallFacts {
        upstream: &upstream.name,
        method: parts.method,
        target: &parts.target,
        arguments: &parts.arguments,
        principal,
        tool: pinned,
    })
}

/// The `_meta` a 2026-07-28 request carries for the gateway's own listing: its protocol version
/// and client capabilities, never a progress token or the confirmation.
fn stateless_meta(call: &Request) -> Option<Map<String, Value>> {
    let meta = call.params.as_ref()?.get("_meta")?.as_object()?;
    let version = meta.get(countersign_jsonrpc::mcp::META_PROTOCOL_VERSION)?;
    let mut out = Map::new();
    out.insert(
        countersign_jsonrpc::mcp::META_PROTOCOL_VERSION.to_owned(),
        version.clone(),
    );
    if let Some(capabilities) = meta.get(countersign_jsonrpc::mcp::META_CLIENT_CAPABILITIES) {
        out.insert(
            countersign_jsonrpc::mcp::META_CLIENT_CAPABILITIES.to_owned(),
            capabilities.clone(),
        );
    }
    Some(out)
}

/// The target, arguments and presented token of a gated call.
#[derive(Debug)]
struct CallParts {
    method: Method,
    target: String,
    /// `arguments` as sent (`Null` when absent).
    arguments: Value,
    /// `_meta["countersign/confirmationToken"]`: works for every tool and method.
    meta_token: Option<String>,
    /// `arguments.confirmationToken`, when a string.
    argument_token: Option<String>,
    /// Whether `arguments.confirmationToken` is the gateway's (a `tools/call` whose tool declares
    /// no argument of that name), so it is read and stripped rather than left for the tool.
    token_argument_is_ours: bool,
}

impl CallParts {
    fn of(call: &Request, method: Method) -> Result<Self, ProxyError> {
        let params = call.params.as_ref();
        let target_key = if method == Method::ResourcesRead {
            "uri"
        } else {
            "name"
        };
        let target = params
            .and_then(|p| p.get(target_key))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ProxyError::InvalidParams(format!(
                    "{} needs a string `params.{target_key}`",
                    method.as_str()
                ))
            })?
            .to_owned();
        let arguments = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => Value::Null,
            Some(Value::Object(args)) => Value::Object(args.clone()),
            Some(_) => {
                return Err(ProxyError::InvalidParams(
                    "`params.arguments` must be an object".into(),
                ));
            }
        };
        let meta_token = match params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(TOKEN_META))
        {
            None => None,
            Some(Value::String(token)) => Some(token.clone()),
            Some(_) => {
                return Err(ProxyError::InvalidParams(format!(
                    "`_meta.{TOKEN_META}` must be a string"
                )));
            }
        };
        // A non-string value here is the gateway's only if the tool declares no such argument
        // (settled in `with_definition`); keep it so it can be refused rather than ignored.
        let argument_token = match arguments.get(TOKEN_ARGUMENT) {
            None => None,
            Some(Value::String(token)) => Some(token.clone()),
            Some(other) => Some(other.to_string()),
        };
        Ok(Self {
            method,
            target,
            arguments,
            meta_token,
            argument_token,
            token_argument_is_ours: method == Method::ToolsCall,
        })
    }

    /// Settles whose `confirmationToken` argument it is, once the tool's definition is known:
    /// a tool that declares one keeps it, and only the `_meta` form is read.
    fn with_definition(mut self, pinned: Option<&PinnedTool>) -> Self {
        let tool_declares_it = pinned
            .and_then(|p| p.definition.get("inputSchema"))
            .and_then(|s| s.get("properties"))
            .and_then(|p| p.get(TOKEN_ARGUMENT))
            .is_some();
        if tool_declares_it {
            self.token_argument_is_ours = false;
        }
        self
    }

    /// A token in `_meta` and a different one in the arguments is ambiguous: which did the
    /// person approve? Such calls are refused as malformed.
    fn conflicting_tokens(&self) -> bool {
        self.token_argument_is_ours
            && matches!((&self.meta_token, &self.argument_token), (Some(a), Some(b)) if a != b)
    }

    fn presented_token(&self) -> Option<&str> {
        self.meta_token.as_deref().or(self
            .argument_token
            .as_deref()
            .filter(|_| self.token_argument_is_ours))
    }

    /// The arguments the upstream should see, which are also what is hashed.
    fn arguments_without_token(&self) -> Value {
        match &self.arguments {
            Value::Object(args) if self.token_argument_is_ours => {
                let mut args = args.clone();
                args.remove(TOKEN_ARGUMENT);
                Value::Object(args)
            }
            Value::Null => Value::Object(Map::new()),
            other => other.clone(),
        }
    }

    /// The request without the gateway's approval artefacts: the token in `_meta` and (when
    /// ours) `arguments`, and — once an approval was redeemed — the gateway's `requestState` and
    /// its key in `inputResponses`.
    fn strip_approval(&self, mut call: Request, redeemed: bool) -> Request {
        if let Some(params) = call.params.as_mut() {
            if redeemed {
                params.remove("requestState");
                if let Some(Value::Object(responses)) = params.get_mut("inputResponses") {
                    responses.remove(APPROVAL_KEY);
                    if responses.is_empty() {
                        params.remove("inputResponses");
                    }
                }
            }
            if let Some(Value::Object(meta)) = params.get_mut("_meta") {
                meta.remove(TOKEN_META);
            }
            if self.token_argument_is_ours
                && let Some(Value::Object(args)) = params.get_mut("arguments")
            {
                args.remove(TOKEN_ARGUMENT);
            }
        }
        call
    }
}

/// Everything known about one gated call, for answers and audit lines.
struct Context<'a> {
    upstream: &'a str,
    principal: &'a Principal,
    session: Option<&'a str>,
    stateless: bool,
    protocol_version: Option<countersign_jsonrpc::mcp::ProtocolVersion>,
    method: Method,
    parts: &'a CallParts,
    decision: &'a Decision,
    pinned: Option<&'a PinnedTool>,
    started: Instant,
}

impl Context<'_> {
    fn definition_hash(&self) -> String {
        match self.pinned {
            Some(pin) => countersign_token::definition_hash(&pin.definition),
            None => UNKNOWN_DEFINITION.to_owned(),
        }
    }

    fn has_output_schema(&self) -> bool {
        self.pinned.is_some_and(|p| {
            p.definition
                .get("outputSchema")
                .is_some_and(|s| !s.is_null())
        })
    }

    /// The gateway's `elicitation/create` params for this call.
    fn question(&self, arguments: &Value, preview: Option<&str>) -> Value {
        elicitation_params(&Question {
            tool: &self.parts.target,
            upstream: self.upstream,
            risk: self.decision.risk.as_str(),
            summary: self.decision.summary.as_deref(),
            arguments,
            preview,
        })
    }

    fn summary(&self) -> String {
        self.decision
            .summary
            .clone()
            .unwrap_or_else(|| format!("run {} on {}", self.parts.target, self.upstream))
    }

    fn refusal(&self, status: &'static str, code: &str, message: String) -> Verdict {
        let refusal = Refusal {
            status,
            code,
            tool: &self.parts.target,
            upstream: self.upstream,
            message,
            rule: Some(&self.decision.rule),
        };
        match self.method {
            Method::ToolsCall => {
                Verdict::Answer(results::refused(&refusal, self.has_output_schema()))
            }
            Method::PromptsGet | Method::ResourcesRead => {
                let result = results::refused(&refusal, true);
                Verdict::AnswerError {
                    status: StatusCode::OK,
                    code: REFUSED_ERROR_CODE,
                    message: refusal.message.clone(),
                    data: result["_meta"][results::CONFIRMATION_META].clone(),
                }
            }
        }
    }

    /// The policy wants a person and this client cannot ask one. On 2026-07-28 that is the
    /// protocol's `MissingRequiredClientCapability` (-32021, HTTP 400).
    fn human_unavailable(&self) -> Verdict {
        let message = results::rejection_message("human_approval_unavailable", &self.parts.target);
        if self.stateless {
            return Verdict::AnswerError {
                status: StatusCode::BAD_REQUEST,
                code: MISSING_CAPABILITY_CODE,
                message: message.clone(),
                data: json!({
                    "requiredCapabilities": {"elicitation": {"form": {}}},
                    "status": "rejected",
                    "code": "human_approval_unavailable",
                    "tool": self.parts.target,
                    "upstream": self.upstream,
                }),
            };
        }
        self.refusal("rejected", "human_approval_unavailable", message)
    }

    fn call_audit(
        &self,
        channel: Option<&'static str>,
        jti: Option<String>,
        args_hash: Option<String>,
    ) -> CallAudit {
        CallAudit {
            principal: self.principal.id.clone(),
            session: self.session.map(str::to_owned),
            method: self.method.as_str(),
            target: self.parts.target.clone(),
            risk: self.decision.risk.as_str(),
            rule: self.decision.rule.clone(),
            action: self.decision.action.as_str(),
            channel,
            jti,
            args_hash,
            started: self.started,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
