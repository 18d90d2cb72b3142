//! The page's screens, as HTML strings. Every value from a request goes through
//! [`html::shown`]; nothing is shortened.

use std::time::{Duration, UNIX_EPOCH};

use countersign_proxy::audit::timestamp;

use crate::html::{self, escape_html, shown};
use crate::record::{StoredDecision, StoredRequest};

/// The held call with its Approve and Deny buttons.
pub(crate) fn request_page(
    request: &StoredRequest,
    approver: &str,
    csrf: &str,
    now_unix_ms: u64,
) -> String {
    let mut rows = String::new();
    let mut row = |label: &str, value: &str| {
        rows.push_str(&format!("<dt>{label}</dt><dd>{value}</dd>"));
    };
    row("Requested by", &shown(&request.principal));
    row("Client", &optional(request.client_name.as_deref()));
    row("Session", &optional(request.session.as_deref()));
    row("Upstream", &shown(&request.upstream));
    row(
        "Tool",
        &format!("<strong>{}</strong>", shown(&request.tool)),
    );
    row(
        "Risk",
        &format!("<span class=\"risk\">{}</span>", shown(&request.risk)),
    );
    row("Rule", &optional(request.rule.as_deref()));
    row(
        "Time left",
        &time_left(request.expires_at_unix_ms, now_unix_ms),
    );
    let preview = request
        .preview
        .as_deref()
        .map_or_else(String::new, |preview| {
            format!(
                "<div class=\"card\"><h2>Preview (dry run)</h2><pre id=\"preview\">{}</pre></div>",
                shown(preview)
            )
        });
    let body = format!(
        "<h1>Approve this tool call?</h1>\
         <div class=\"card\"><dl>{rows}</dl></div>\
         <div class=\"card\"><h2>Arguments</h2><pre id=\"arguments\">{arguments}</pre></div>\
         {preview}\
         <form method=\"post\" class=\"card\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <p class=\"note\">Signed in as <strong>{approver}</strong>. The call runs once, exactly as \
         shown, only if you approve.</p>\
         <div class=\"actions\">\
         <button class=\"approve\" type=\"submit\" name=\"decision\" value=\"approve\" id=\"approve\">Approve</button>\
         <button class=\"deny\" type=\"submit\" name=\"decision\" value=\"deny\" id=\"deny\">Deny</button>\
         </div></form>",
        arguments = shown(&pretty_arguments(&request.arguments)),
        csrf = escape_html(csrf),
        approver = shown(approver),
    );
    html::document("Approval requested", &body)
}

/// After this approver's decision was taken.
pub(crate) fn decided_now_page(request: &StoredRequest, decision: &StoredDecision) -> String {
    let (title, kind, verb) = if decision.approved {
        ("Approved", "ok", "approved")
    } else {
        ("Denied", "bad", "denied")
    };
    let after = if decision.approved {
        "The call runs once, for the session that asked."
    } else {
        "The call will not run."
    };
    html::message_page(
        title,
        kind,
        &format!(
            "<p id=\"outcome\">You {verb} <strong>{tool}</strong> on {upstream} for {principal}.</p><p>{after}</p>",
            tool = shown(&request.tool),
            upstream = shown(&request.upstream),
            principal = shown(&request.principal),
        ),
    )
}

/// The request was decided before (by whom, when).
pub(crate) fn already_decided_page(request: &StoredRequest, decision: &StoredDecision) -> String {
    let verb = if decision.approved {
        "approved"
    } else {
        "denied"
    };
    html::message_page(
        "Already decided",
        "info",
        &format!(
            "<p id=\"outcome\"><strong>{tool}</strong> for {principal} was already {verb} by \
             <strong>{approver}</strong> at {at}.</p><p>A request is decided once; nothing changed.</p>",
            tool = shown(&request.tool),
            principal = shown(&request.principal),
            approver = shown(&decision.approver),
            at = utc(decision.decided_at_unix_ms),
        ),
    )
}

pub(crate) fn expired_page() -> String {
    html::message_page(
        "Request expired",
        "info",
        "<p id=\"outcome\">This approval request has expired or was already used up. Nothing will \
         run; ask again from the client if the call is still wanted.</p>",
    )
}

pub(crate) fn unknown_page() -> String {
    html::message_page(
        "Unknown link",
        "bad",
        "<p id=\"outcome\">This link is not a valid approval link. Check that it was copied whole.</p>",
    )
}

/// The approver may not decide this request; `why` says which rule refused them.
pub(crate) fn not_allowed_page(approver: &str, why: &str) -> String {
    html::message_page(
        "Not allowed",
        "bad",
        &format!(
            "<p id=\"outcome\">You are signed in as <strong>{}</strong>, who may not decide this request: {}</p>",
            shown(approver),
            escape_html(why),
        ),
    )
}

pub(crate) fn not_signed_in_page() -> String {
    html::message_page(
        "Not signed in",
        "bad",
        "<p id=\"outcome\">The approval page could not tell who you are. It must be reached through \
         the sign-in proxy in front of it.</p>",
    )
}

/// A refused form post (bad CSRF token or origin).
pub(crate) fn refused_post_page() -> String {
    html::message_page(
        "Refused",
        "bad",
        "<p id=\"outcome\">This form was not sent from the approval page in this browser session. \
         Nothing was decided; open the link again.</p>",
    )
}

pub(crate) fn unavailable_page() -> String {
    html::message_page(
        "Unavailable",
        "bad",
        "<p id=\"outcome\">The approval store cannot be reached. Nothing was decided; try again in a moment.</p>",
    )
}

pub(crate) fn login_failed_page() -> String {
    html::message_page(
        "Sign-in failed",
        "bad",
        "<p id=\"outcome\">Signing in did not complete. Open the approval link again to retry.</p>",
    )
}

fn optional(value: Option<&str>) -> String {
    value.map_or_else(|| "<span class=\"note\">(none)</span>".to_owned(), shown)
}

/// The arguments as pretty JSON (exact numbers and key order are kept by the workspace's
/// serde_json features); text that is not JSON is shown as it is.
fn pretty_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| arguments.to_owned())
}

fn time_left(expires_at_unix_ms: u64, now_unix_ms: u64) -> String {
    let left = expires_at_unix_ms.saturating_sub(now_unix_ms) / 1000;
    format!(
        "<span id=\"time-left\">{} min {:02} s</span> <span class=\"note\">(until {})</span>",
        left / 60,
        left % 60,
        utc(expires_at_unix_ms)
    )
}

fn utc(unix_ms: u64) -> String {
    timestamp(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}
