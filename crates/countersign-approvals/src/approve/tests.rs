use countersign_proxy::approval::out_of_band::{ApprovalStatus, Approvers, OutOfBand as _};
use http::StatusCode;

use crate::server::handle;
use crate::testing::*;

fn peer() -> std::net::SocketAddr {
    PEER.parse().expect("peer")
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Opens the page for `user` and returns the session cookie and the CSRF token.
async fn open_page(fx: &Fixture, path: &str, user: &str) -> (String, String) {
    let response = handle(&fx.page, get(path, Some(user), None), peer()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let cookie = session_cookie(&response).expect("a session cookie is set");
    let page = body_text(response).await;
    (cookie, csrf_of(&page))
}

async fn approve_as(fx: &Fixture, path: &str, user: &str, decision: &str) -> (StatusCode, String) {
    let (cookie, csrf) = open_page(fx, path, user).await;
    let form = format!("csrf={csrf}&decision={decision}");
    let response = handle(
        &fx.page,
        post(path, Some(user), Some(&cookie), Some(PUBLIC), &form),
        peer(),
    )
    .await;
    let status = response.status();
    (status, body_text(response).await)
}

#[tokio::test]
async fn page_shows_every_argument_escaped_with_invisible_characters_visible() {
    let fx = fixture();
    let arguments = r#"{"id":"n-1","note":"<script>alert(1)</script>","to":"ada\u202egpj.exe","big":12345678901234567890.5}"#;
    let ticket = fx
        .page
        .open(held_call(arguments, Approvers::default()))
        .await
        .expect("open");
    let response = handle(
        &fx.page,
        get(&path_of(&ticket.url), Some("ada"), None),
        peer(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    let page = body_text(response).await;
    assert!(
        !page.contains("<script>"),
        "no markup from the arguments reaches the page"
    );
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        page.contains("ada\\u{202e}gpj.exe"),
        "the override is shown, not applied"
    );
    assert!(
        page.contains("12345678901234567890.5"),
        "numbers are shown exactly"
    );
    for shown in [
        "ada",
        "Claude Desktop",
        "s-1",
        "notes",
        "delete_note",
        "destructive",
        "destructive-needs-approval",
        "would delete 1 note",
        "10 min 00 s",
    ] {
        assert!(page.contains(shown), "{shown} is on the page");
    }
    let csp = headers["content-security-policy"].to_str().expect("ascii");
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert_eq!(headers["cache-control"], "no-store");
    let cookie = headers["set-cookie"].to_str().expect("ascii");
    for flag in ["Secure", "HttpOnly", "SameSite=Lax"] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
}

#[tokio::test]
async fn approval_is_recorded_once_audited_and_reported_to_the_layer() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
    let (status, page) = approve_as(&fx, &path_of(&ticket.url), "ada", "approve").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("You approved"));
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Approved {
            approver: "ada".to_owned(),
            binding: "binding-digest".to_owned()
        })
    );
    let audit = fx.lines.text(&fx.audit);
    assert_eq!(audit.lines().count(), 1, "{audit}");
    for field in [
        r#""event":"page_decision""#,
        r#""decision":"approved""#,
        r#""approver":"ada""#,
        r#""client_ip":"192.0.2.7""#,
        r#""tool":"delete_note""#,
    ] {
        assert!(audit.contains(field), "{field} in {audit}");
    }
    assert_eq!(fx.page.metrics.decisions(true), 1);
}

#[tokio::test]
async fn denial_is_reported_as_denied() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let (status, page) = approve_as(&fx, &path_of(&ticket.url), "ada", "deny").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("You denied"));
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Denied {
            approver: "ada".to_owned()
        })
    );
}

#[tokio::test]
async fn post_without_the_sessions_csrf_token_is_refused() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let (cookie, csrf) = open_page(&fx, &path, "ada").await;
    let (other_cookie, _) = open_page(&fx, &path, "ada").await;
    let attempts = [
        (
            Some(cookie.as_str()),
            "decision=approve".to_owned(),
            "no token",
        ),
        (
            Some(cookie.as_str()),
            "csrf=AAAA&decision=approve".to_owned(),
            "a wrong token",
        ),
        (
            Some(other_cookie.as_str()),
            format!("csrf={csrf}&decision=approve"),
            "another session's token",
        ),
        (None, format!("csrf={csrf}&decision=approve"), "no session"),
        (
            Some(cookie.as_str()),
            format!("csrf={csrf}&csrf={csrf}&decision=approve"),
            "a repeated token",
        ),
    ];
    for (cookie, form, what) in attempts {
        let response = handle(
            &fx.page,
            post(&path, Some("ada"), cookie, Some(PUBLIC), &form),
            peer(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{what}");
    }
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Pending),
        "nothing was decided"
    );
    assert_eq!(fx.lines.text(&fx.audit), "", "nothing audited");
}

#[tokio::test]
async fn post_from_another_origin_is_refused() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let (cookie, csrf) = open_page(&fx, &path, "ada").await;
    let form = format!("csrf={csrf}&decision=approve");
    for origin in [Some("https://evil.example"), Some("null"), None] {
        let response = handle(
            &fx.page,
            post(&path, Some("ada"), Some(&cookie), origin, &form),
            peer(),
        )
        .await;
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "origin {origin:?}"
        );
        let mut cross_site = post(&path, Some("ada"), Some(&cookie), origin, &form);
        cross_site
            .headers_mut()
            .insert("sec-fetch-site", "cross-site".parse().expect("value"));
        let response = handle(&fx.page, cross_site, peer()).await;
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "cross-site, origin {origin:?}"
        );
    }
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
    // The page's own form under `Referrer-Policy: no-referrer`: `Origin: null`, same-origin fetch.
    let mut own = post(&path, Some("ada"), Some(&cookie), Some("null"), &form);
    own.headers_mut()
        .insert("sec-fetch-site", "same-origin".parse().expect("value"));
    assert_eq!(handle(&fx.page, own, peer()).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn link_with_a_bad_signature_is_refused() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let tampered = format!(
        "/approve/{}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ticket.id
    );
    let response = handle(&fx.page, get(&tampered, Some("ada"), None), peer()).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(body_text(response).await.contains("Unknown link"));
    let response = handle(
        &fx.page,
        post(
            &tampered,
            Some("ada"),
            None,
            Some(PUBLIC),
            "decision=approve",
        ),
        peer(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(fx.page.metrics.refusals("bad_link"), 2);
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
}

#[tokio::test]
async fn only_named_users_and_groups_may_decide() {
    let fx = fixture();
    let approvers = Approvers {
        users: names(&["carol"]),
        groups: names(&["sre"]),
        four_eyes: false,
    };
    let ticket = fx
        .page
        .open(held_call("{}", approvers))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let response = handle(&fx.page, get(&path, Some("mallory"), None), peer()).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(
        body_text(response)
            .await
            .contains("not among the approvers")
    );
    let ada = handle(&fx.page, get(&path, Some("ada"), None), peer()).await;
    assert_eq!(
        ada.status(),
        StatusCode::FORBIDDEN,
        "the requester is not named"
    );
    let mut request = get(&path, Some("bob"), None);
    request
        .headers_mut()
        .insert("x-forwarded-groups", "dev,sre".parse().expect("value"));
    let bob = handle(&fx.page, request, peer()).await;
    assert_eq!(
        bob.status(),
        StatusCode::OK,
        "a member of a named group may decide"
    );
    let (status, _) = approve_as(&fx, &path, "carol", "approve").await;
    assert_eq!(status, StatusCode::OK, "a named user may decide");
}

#[tokio::test]
async fn four_eyes_refuses_self_approval() {
    let fx = fixture();
    let approvers = Approvers {
        users: names(&["ada", "bob"]),
        groups: Vec::new(),
        four_eyes: true,
    };
    let ticket = fx
        .page
        .open(held_call("{}", approvers))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let response = handle(&fx.page, get(&path, Some("ada"), None), peer()).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(body_text(response).await.contains("four eyes"));
    // A form obtained as bob and posted as ada is refused too.
    let (cookie, csrf) = open_page(&fx, &path, "bob").await;
    let form = format!("csrf={csrf}&decision=approve");
    let response = handle(
        &fx.page,
        post(&path, Some("ada"), Some(&cookie), Some(PUBLIC), &form),
        peer(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Pending)
    );
}

#[tokio::test]
async fn expired_request_cannot_be_decided() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let (cookie, csrf) = open_page(&fx, &path, "ada").await;
    fx.clock.advance(std::time::Duration::from_secs(600));
    let response = handle(&fx.page, get(&path, Some("ada"), None), peer()).await;
    assert_eq!(response.status(), StatusCode::GONE);
    assert!(body_text(response).await.contains("expired"));
    let form = format!("csrf={csrf}&decision=approve");
    let response = handle(
        &fx.page,
        post(&path, Some("ada"), Some(&cookie), Some(PUBLIC), &form),
        peer(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::GONE);
    assert_eq!(fx.page.status(&ticket.id).await, Ok(ApprovalStatus::Gone));
}

#[tokio::test]
async fn second_decision_is_refused_and_names_the_first() {
    let fx = fixture();
    let approvers = Approvers {
        users: names(&["bob", "carol"]),
        groups: Vec::new(),
        four_eyes: false,
    };
    let ticket = fx
        .page
        .open(held_call("{}", approvers))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let (carol_cookie, carol_csrf) = open_page(&fx, &path, "carol").await;
    let (status, _) = approve_as(&fx, &path, "bob", "approve").await;
    assert_eq!(status, StatusCode::OK);
    let form = format!("csrf={carol_csrf}&decision=deny");
    let response = handle(
        &fx.page,
        post(
            &path,
            Some("carol"),
            Some(&carol_cookie),
            Some(PUBLIC),
            &form,
        ),
        peer(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let page = body_text(response).await;
    assert!(
        page.contains("already approved by <strong>bob</strong>"),
        "{page}"
    );
    assert_eq!(
        fx.page.status(&ticket.id).await,
        Ok(ApprovalStatus::Approved {
            approver: "bob".to_owned(),
            binding: "binding-digest".to_owned()
        })
    );
    assert_eq!(
        fx.lines.text(&fx.audit).lines().count(),
        1,
        "one decision audited"
    );
}

#[tokio::test]
async fn page_without_the_trusted_header_is_not_signed_in() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let response = handle(&fx.page, get(&path_of(&ticket.url), None, None), peer()).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(
        !body_text(response).await.contains("delete_note"),
        "nothing of the call is shown"
    );
}

#[tokio::test]
async fn forwarded_for_is_used_only_when_trusted() {
    let mut config = config();
    config.trust_forwarded_for = true;
    let fx = fixture_with(config);
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let (cookie, csrf) = open_page(&fx, &path, "ada").await;
    let mut request = post(
        &path,
        Some("ada"),
        Some(&cookie),
        Some(PUBLIC),
        &format!("csrf={csrf}&decision=approve"),
    );
    request.headers_mut().insert(
        "x-forwarded-for",
        "198.51.100.1, 203.0.113.9".parse().expect("value"),
    );
    assert_eq!(
        handle(&fx.page, request, peer()).await.status(),
        StatusCode::OK
    );
    assert!(
        fx.lines
            .text(&fx.audit)
            .contains(r#""client_ip":"203.0.113.9""#)
    );
}

#[tokio::test]
async fn wait_returns_as_soon_as_the_page_decides() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let waiting = {
        let (page, id) = (fx.page.clone(), ticket.id.clone());
        tokio::spawn(async move { page.wait(&id, std::time::Duration::from_secs(3600)).await })
    };
    let (status, _) = approve_as(&fx, &path_of(&ticket.url), "ada", "approve").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        waiting.await.expect("task"),
        Ok(ApprovalStatus::Approved {
            approver: "ada".to_owned(),
            binding: "binding-digest".to_owned()
        })
    );
}

#[tokio::test]
async fn decided_request_is_not_shown_to_someone_who_may_not_decide_it() {
    let fx = fixture();
    let ticket = fx
        .page
        .open(held_call("{}", Approvers::default()))
        .await
        .expect("open");
    let path = path_of(&ticket.url);
    let (status, _) = approve_as(&fx, &path, "ada", "approve").await;
    assert_eq!(status, StatusCode::OK);
    let response = handle(&fx.page, get(&path, Some("mallory"), None), peer()).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let page = body_text(response).await;
    assert!(
        !page.contains("delete_note") && !page.contains("approved by"),
        "{page}"
    );
    let response = handle(&fx.page, get(&path, Some("ada"), None), peer()).await;
    assert!(
        body_text(response)
            .await
            .contains("already approved by <strong>ada</strong>")
    );
}
