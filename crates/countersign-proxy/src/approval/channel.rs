//! Which channel can reach a person for a held call.
//!
//! | rule says     | client can elicit form | else, approval page configured | else           |
//! |---------------|------------------------|--------------------------------|----------------|
//! | `token`       | token                  | token                          | token          |
//! | `any`         | elicitation / input_required | token                    | token          |
//! | `human`       | elicitation / input_required | out of band              | refused        |
//! | `out_of_band` | out of band            | out of band                    | refused        |
//!
//! Out of band, how the client hears of the approval page follows what it declared
//! ([`Link`]): URL-mode elicitation, a form question carrying the link, or a held result.

use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::mcp::{META_CLIENT_CAPABILITIES, ProtocolVersion};
use countersign_jsonrpc::message::Request;
use countersign_policy::Approval;

use super::context::Gated;
use crate::state::{declares_form_elicitation, declares_url_elicitation};

/// How an approval for a held call is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Channel {
    Token,
    Elicitation,
    InputRequired,
    /// A person decides on the gateway's approval page; the client only carries the link.
    OutOfBand(Link),
}

/// How the link to the approval page reaches the person, by what the client declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// 2025-11-25 session that declared `elicitation.url`: `elicitation/create` in URL mode on
    /// the held call's stream.
    UrlElicitation,
    /// Session that declared form elicitation only: a form question whose message gives the
    /// link, on the held call's stream.
    FormElicitation,
    /// 2026-07-28 request that declared `elicitation.url`: `input_required` with a URL request.
    InputRequiredUrl,
    /// 2026-07-28 request that declared form only: `input_required` with the link in a form.
    InputRequiredForm,
    /// Any other client: a held result with the link and a token that runs the call once the
    /// person approved.
    HeldResult,
}

impl Link {
    /// The `link` label of the out-of-band metrics.
    pub(super) fn label(self) -> &'static str {
        match self {
            Link::UrlElicitation => "url_elicitation",
            Link::FormElicitation => "form_elicitation",
            Link::InputRequiredUrl => "input_required_url",
            Link::InputRequiredForm => "input_required_form",
            Link::HeldResult => "held_result",
        }
    }
}

/// What a client can be asked through.
#[derive(Debug, Clone, Copy, Default)]
struct Reach {
    form: bool,
    url: bool,
}

/// The channel for `call`, or `None` when the policy demands a person and none can be reached.
pub(super) fn pick(gated: &Gated, call: &Request) -> Option<Channel> {
    let approval = gated.judged.decision.approval;
    if approval == Approval::Token {
        return Some(Channel::Token);
    }
    let reach = reach(gated, call);
    let in_band = reach.form.then_some(if gated.stateless {
        Channel::InputRequired
    } else {
        Channel::Elicitation
    });
    // Without an approval page, rules that need one are refused: fail closed.
    let out_of_band = gated
        .approvals
        .settings
        .out_of_band
        .is_some()
        .then(|| Channel::OutOfBand(link(gated.stateless, reach)));
    match approval {
        Approval::Token => Some(Channel::Token),
        Approval::Any => Some(in_band.unwrap_or(Channel::Token)),
        Approval::Human => in_band.or(out_of_band),
        Approval::OutOfBand => out_of_band,
    }
}

fn link(stateless: bool, reach: Reach) -> Link {
    match (stateless, reach.url, reach.form) {
        (false, true, _) => Link::UrlElicitation,
        (false, false, true) => Link::FormElicitation,
        (true, true, _) => Link::InputRequiredUrl,
        (true, false, true) => Link::InputRequiredForm,
        (_, false, false) => Link::HeldResult,
    }
}

fn reach(gated: &Gated, call: &Request) -> Reach {
    if gated.stateless {
        // 2026-07-28: capabilities are declared per request, and only these count.
        let declared: Option<RawJson> = call
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_CLIENT_CAPABILITIES));
        return declared.map_or_else(Reach::default, |c| Reach {
            form: declares_form_elicitation(&c),
            url: declares_url_elicitation(&c),
        });
    }
    // Elicitation exists from 2025-06-18 on, URL mode from 2025-11-25; such clients send the
    // negotiated version on every request, so a request without it is an older session.
    let Some(version) = gated.protocol_version else {
        return Reach::default();
    };
    if version < ProtocolVersion::V2025_06_18 {
        return Reach::default();
    }
    let settings = &gated.approvals.settings;
    let Some(info) = gated.session.as_deref().and_then(|s| {
        settings
            .sessions
            .get(s, &gated.principal.id, settings.clock.now())
    }) else {
        return Reach::default();
    };
    Reach {
        form: info.can_elicit,
        url: info.can_elicit_url && version >= ProtocolVersion::V2025_11_25,
    }
}
