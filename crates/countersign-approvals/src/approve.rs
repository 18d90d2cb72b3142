//! `GET` and `POST /approve/<id>.<sig>`: show a held call, and take a person's decision.
//!
//! Order matters and fails closed. The link's signature is checked before anything is looked
//! up; a post must come from the page itself (`Origin`, else `Sec-Fetch-Site`) and carry the
//! CSRF token of this browser session and this request; the approver is authenticated on every
//! request, never remembered from the link; and only then is the request read, the approver
//! rules applied, and the decision taken atomically — a second one is refused and reported.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};

use crate::auth::session::PageSession;
use crate::auth::{self, Approver, Identity, cookie};
use crate::link;
use crate::page::{ApprovalPage, Decision, Lookup};
use crate::record::StoredRequest;
use crate::server::{MAX_FORM_BYTES, html_response};
use crate::views;

/// How long a page session lasts without OpenID Connect (it only anchors CSRF tokens).
const ANONYMOUS_SESSION_SECS: u64 = 12 * 3600;

pub(crate) async fn show<B>(
    page: &ApprovalPage,
    request: &Request<B>,
    segment: &str,
) -> Response<Full<Bytes>> {
    let Some(id) = link::verify_segment(page.link_key(), segment) else {
        page.metrics.refused("bad_link");
        return html_response(StatusCode::NOT_FOUND, views::unknown_page());
    };
    let (session, fresh) = session_of(page, request.headers());
    let approver = match auth::identify(&page.config().auth, request.headers(), &session) {
        Identity::Known(approver) => approver,
        Identity::LoginNeeded => return auth::oidc::start_login(page, segment).await,
        Identity::Missing => {
            page.metrics.refused("unauthenticated");
            return html_response(StatusCode::UNAUTHORIZED, views::not_signed_in_page());
        }
    };
    let mut response = match page.lookup(id).await {
        Err(_) => {
            page.metrics.refused("store_error");
            html_response(StatusCode::SERVICE_UNAVAILABLE, views::unavailable_page())
        }
        Ok(Lookup::Gone) => {
            page.metrics.refused("expired");
            html_response(StatusCode::GONE, views::expired_page())
        }
        // Who decided what is only for the people who may decide it, like the call itself.
        Ok(Lookup::Decided(request, decision)) => match refusal(&request, &approver) {
            Some(why) => {
                page.metrics.refused("not_allowed");
                html_response(
                    StatusCode::FORBIDDEN,
                    views::not_allowed_page(&approver.user, why),
                )
            }
            None => html_response(
                StatusCode::OK,
                views::already_decided_page(&request, &decision),
            ),
        },
        Ok(Lookup::Pending(request)) => match refusal(&request, &approver) {
            Some(why) => {
                page.metrics.refused("not_allowed");
                html_response(
                    StatusCode::FORBIDDEN,
                    views::not_allowed_page(&approver.user, why),
                )
            }
            None => html_response(
                StatusCode::OK,
                views::request_page(
                    &request,
                    &approver.user,
                    &session.csrf_token(page.link_key(), id),
                    page.now_unix_ms(),
                ),
            ),
        },
    };
    if fresh {
        set_session_cookie(page, &mut response, &session);
    }
    response
}

pub(crate) async fn decide<B>(
    page: &ApprovalPage,
    request: Request<B>,
    segment: &str,
    peer: SocketAddr,
) -> Response<Full<Bytes>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Some(id) = link::verify_segment(page.link_key(), segment) else {
        page.metrics.refused("bad_link");
        return html_response(StatusCode::NOT_FOUND, views::unknown_page());
    };
    if !same_origin(page, request.headers()) {
        page.metrics.refused("origin");
        return html_response(StatusCode::FORBIDDEN, views::refused_post_page());
    }
    let now_secs = page.now_unix_ms() / 1000;
    let Some(session) = PageSession::from_headers(page.link_key(), request.headers(), now_secs)
    else {
        page.metrics.refused("csrf");
        return html_response(StatusCode::FORBIDDEN, views::refused_post_page());
    };
    let approver = match auth::identify(&page.config().auth, request.headers(), &session) {
        Identity::Known(approver) => approver,
        Identity::LoginNeeded | Identity::Missing => {
            page.metrics.refused("unauthenticated");
            return html_response(StatusCode::UNAUTHORIZED, views::not_signed_in_page());
        }
    };
    let from = client_address(page, request.headers(), peer);
    let Some(form) = read_form(request.into_body()).await else {
        page.metrics.refused("csrf");
        return html_response(StatusCode::BAD_REQUEST, views::refused_post_page());
    };
    let token = form_value(&form, "csrf").unwrap_or_default();
    if !session.csrf_matches(page.link_key(), id, &token) {
        page.metrics.refused("csrf");
        return html_response(StatusCode::FORBIDDEN, views::refused_post_page());
    }
    let approved = match form_value(&form, "decision").as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => return html_response(StatusCode::BAD_REQUEST, views::refused_post_page()),
    };
    let pending = match page.lookup(id).await {
        Err(_) => return unavailable(page),
        Ok(Lookup::Gone) => {
            page.metrics.refused("expired");
            return html_response(StatusCode::GONE, views::expired_page());
        }
        Ok(Lookup::Decided(request, decision)) => {
            if let Some(why) = refusal(&request, &approver) {
                page.metrics.refused("not_allowed");
                return html_response(
                    StatusCode::FORBIDDEN,
                    views::not_allowed_page(&approver.user, why),
                );
            }
            page.metrics.refused("already_decided");
            return html_response(
                StatusCode::CONFLICT,
                views::already_decided_page(&request, &decision),
            );
        }
        Ok(Lookup::Pending(request)) => request,
    };
    if let Some(why) = refusal(&pending, &approver) {
        page.metrics.refused("not_allowed");
        return html_response(
            StatusCode::FORBIDDEN,
            views::not_allowed_page(&approver.user, why),
        );
    }
    match page
        .decide(id, &pending, approved, &approver.user, &from)
        .await
    {
        Err(_) => unavailable(page),
        Ok(Decision::Taken(request, decision)) => {
            html_response(StatusCode::OK, views::decided_now_page(&request, &decision))
        }
        Ok(Decision::Already(request, decision)) => {
            page.metrics.refused("already_decided");
            html_response(
                StatusCode::CONFLICT,
                views::already_decided_page(&request, &decision),
            )
        }
        Ok(Decision::Gone) => {
            page.metrics.refused("expired");
            html_response(StatusCode::GONE, views::expired_page())
        }
    }
}

fn unavailable(page: &ApprovalPage) -> Response<Full<Bytes>> {
    page.metrics.refused("store_error");
    html_response(StatusCode::SERVICE_UNAVAILABLE, views::unavailable_page())
}

/// Why `approver` may not decide `request`, or `None` when they may.
pub(crate) fn refusal(request: &StoredRequest, approver: &Approver) -> Option<&'static str> {
    let approvers = request.approvers();
    if approvers.allows(&request.principal, &approver.user, &approver.groups) {
        return None;
    }
    Some(
        if approvers.four_eyes && approver.user == request.principal {
            "this rule needs a second person (four eyes): you cannot approve your own call."
        } else if approvers.users.is_empty() && approvers.groups.is_empty() {
            "only the person who made the call may decide it."
        } else {
            "you are not among the approvers this rule names (users or groups)."
        },
    )
}

/// The session of the request's cookie, or a new one (`true`) to be set on the response.
fn session_of(page: &ApprovalPage, headers: &http::HeaderMap) -> (PageSession, bool) {
    let now = page.now_unix_ms() / 1000;
    match PageSession::from_headers(page.link_key(), headers, now) {
        Some(session) => (session, false),
        None => (PageSession::anonymous(now, ANONYMOUS_SESSION_SECS), true),
    }
}

pub(crate) fn set_session_cookie(
    page: &ApprovalPage,
    response: &mut Response<Full<Bytes>>,
    session: &PageSession,
) {
    let max_age = session.expires_at.saturating_sub(page.now_unix_ms() / 1000);
    let path = cookie_path(page);
    let value = cookie::set_cookie(
        cookie::SESSION,
        &session.seal(page.link_key()),
        &path,
        max_age,
    );
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

pub(crate) fn cookie_path(page: &ApprovalPage) -> String {
    let base = page.config().base_path();
    if base.is_empty() {
        "/".to_owned()
    } else {
        base
    }
}

/// A post comes from the page when its `Origin` is the page's, or, when the browser sent no
/// usable `Origin`, when `Sec-Fetch-Site` says `same-origin`. Browsers send `Origin: null` for
/// the page's own form under its `Referrer-Policy: no-referrer`, so `null` defers to
/// `Sec-Fetch-Site` (which a cross-site page cannot set) rather than pass. Neither: refused.
fn same_origin(page: &ApprovalPage, headers: &http::HeaderMap) -> bool {
    let fetched_same_origin = || {
        headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes() == b"same-origin")
    };
    match headers.get(header::ORIGIN) {
        Some(origin) if origin.as_bytes() == b"null" => fetched_same_origin(),
        Some(origin) => origin.as_bytes() == page.config().origin().as_bytes(),
        None => fetched_same_origin(),
    }
}

/// The socket's address, or, when configured to trust it, the last `X-Forwarded-For` entry:
/// the one the trusted proxy appended (earlier ones are whatever the client claimed), as the
/// MCP listener's `client_address_header` reads it.
fn client_address(page: &ApprovalPage, headers: &http::HeaderMap, peer: SocketAddr) -> String {
    if page.config().trust_forwarded_for {
        let forwarded = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty());
        if let Some(forwarded) = forwarded {
            return forwarded.to_owned();
        }
    }
    peer.ip().to_string()
}

async fn read_form<B>(body: B) -> Option<Vec<(String, String)>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let bytes = Limited::new(body, MAX_FORM_BYTES)
        .collect()
        .await
        .ok()?
        .to_bytes();
    Some(url::form_urlencoded::parse(&bytes).into_owned().collect())
}

/// A field given exactly once; a repeated one is refused (`None`).
fn form_value(form: &[(String, String)], name: &str) -> Option<String> {
    let mut values = form.iter().filter(|(n, _)| n == name);
    let (_, value) = values.next()?;
    values.next().is_none().then(|| value.clone())
}

#[cfg(test)]
mod tests;
