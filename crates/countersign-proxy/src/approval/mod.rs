//! Approval: lets a gated call through only as its [`Classification`] allows — at once when
//! policy allows it, never when policy denies it, and for `confirm` only with an approval bound
//! to exactly this call. It answers holds, denials and refusals itself; what it lets through
//! becomes a [`Cleared`] request for the layers below, the only body the forwarder accepts.
//!
//! Approval comes through one of three channels, picked per request ([`channel`]):
//! - `input_required` (2026-07-28 clients whose request declares form elicitation): the gateway
//!   answers with its own question and a signed `requestState`; the retry carries the answer
//!   ([`input_required`]);
//! - `elicitation` (2025-06-18 / 2025-11-25 sessions whose `initialize` declared it): the held
//!   POST is answered as an SSE stream carrying the gateway's `elicitation/create`; the answer
//!   arrives on a separate POST and is handed over to the waiting stream ([`elicitation`]);
//! - `token` (any other client, or `approval: token`): a signed single-use token in the result,
//!   which the model presents on the repeated call ([`token`]). `approval: human` refuses this
//!   one.
//! - `out_of_band` (`approval: out_of_band`, or `human` meeting a client that cannot elicit,
//!   when the approval page is configured): a person decides on the gateway's own page; the
//!   client only carries the link, as a URL or form question on the stream, an `input_required`,
//!   or a held result with a token ([`oob_request`], [`oob_stream`]). Whatever carries the
//!   outcome back, `oob:<id>` is consumed in the replay store before the call is forwarded, so
//!   it runs once across replicas ([`oob_outcome`]).
//!
//! Redeeming a token or a `requestState` runs in a fixed order ([`redeem`]): verify the MAC →
//! check the binding against this request → refuse unsafe numbers → consume the `jti` once →
//! forward. The consume comes last so an approval is never burnt by a request that fails a
//! cheaper check, and nothing is forwarded when the replay store cannot answer (fail closed).
//!
//! [`Classification`]: crate::classify::Classification

mod answer;
mod batch;
mod channel;
mod cleared;
mod context;
mod definition_hashes;
mod elicitation;
mod held;
mod hold;
mod input_required;
mod layer;
mod oob_outcome;
mod oob_request;
mod oob_stream;
pub mod out_of_band;
mod preview;
mod question;
mod redeem;
mod refusal;
mod results;
mod service;
mod token;

pub use cleared::Cleared;
pub use held::QuestionCaps;
pub use input_required::StateWrap;
pub use layer::ApprovalLayer;
pub use refusal::{RefusalCode, RefusalText};
pub use service::Approve;

use std::sync::Arc;
use std::time::Duration;

use countersign_store::{AnswerHandover, ReplayStore};
use countersign_token::Keyring;

use crate::audit::AuditSink;
use crate::clock::Clock;
use crate::limits::RateLimits;
use crate::metrics::ProxyMetrics;
use crate::state::SessionBook;

/// Channel names, bound into tokens (`ch`) and written to the audit trail.
pub mod channel_name {
    /// A token handed to the model in the held result.
    pub const TOKEN: &str = "token";
    /// The gateway's `elicitation/create` on the held call's SSE stream.
    pub const ELICITATION: &str = "elicitation";
    /// MCP 2026-07-28 `input_required`: the `requestState` of the gateway's question.
    pub const INPUT_REQUIRED: &str = "input_required";
    /// A `requestState` wrapping an upstream's own state after the person approved: the retry
    /// is forwarded without asking again.
    pub const APPROVED: &str = "approved";
    /// The gateway's approval page: a person decides there, whatever carried the link (a URL
    /// or form question, an `input_required`, a held result with a token).
    pub const OUT_OF_BAND: &str = "out_of_band";
}

/// How often a waiting question stream sends a keep-alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Signing, replay, hand-over and audit settings of the approval layer.
#[derive(Debug, Clone)]
pub struct ApprovalSettings {
    /// Deployment id, the tokens' `iss`.
    pub issuer: String,
    pub keyring: Arc<Keyring>,
    pub store: Arc<dyn ReplayStore>,
    /// Carries elicitation answers from the POST that brings them to the stream that asked.
    pub handover: Arc<dyn AnswerHandover>,
    /// How long the gateway waits for a person to answer its question.
    pub elicitation_timeout: Duration,
    pub audit: AuditSink,
    /// Clock skew tolerated on token times, seconds.
    pub leeway_secs: u64,
    pub metrics: ProxyMetrics,
    pub clock: Arc<dyn Clock>,
    /// Who opened each session and whether it can elicit.
    pub sessions: Arc<SessionBook>,
    /// Largest SSE event accepted in the answer to a dry-run preview.
    pub max_event_bytes: usize,
    /// Questions that may wait at once per principal and per session, on this replica.
    pub question_caps: QuestionCaps,
    /// The rate limits; the approval layer takes `held` and `questions` from them.
    pub rate_limits: Arc<RateLimits>,
    /// The gateway's approval page, when `approvals:` is configured; without it, rules that
    /// need a person the client cannot reach are refused (`human_approval_unavailable`).
    pub out_of_band: Option<Arc<dyn out_of_band::OutOfBand>>,
}

/// Everything the approval layer shares across requests.
#[derive(Debug)]
pub struct Approvals {
    pub settings: ApprovalSettings,
    /// Held calls waiting on this replica, per session and principal.
    held: held::HeldQuestions,
    /// The `tdh` of each pinned definition approvals were bound to.
    definition_hashes: definition_hashes::DefinitionHashes,
}

impl Approvals {
    pub fn new(settings: ApprovalSettings) -> Self {
        Self {
            settings,
            held: held::HeldQuestions::default(),
            definition_hashes: definition_hashes::DefinitionHashes::default(),
        }
    }
}

#[cfg(test)]
mod tests;
