//! A real OpenID Connect provider (`tests/peers/node/oidc-provider.mjs`, npm `oidc-provider`)
//! and logging in through it in a real browser: what the approval page's browser tests share.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::webdriver::Browser;
use crate::{peers_dir, tool_env};

/// The provider's client secret for the `countersign` client.
pub const CLIENT_SECRET: &str = "countersign-test-secret";

/// Starts the OpenID Connect provider with the pages' callbacks; returns it and its issuer.
pub async fn start_provider(page_urls: &[String]) -> (Child, String) {
    let mut command = Command::new(tool_env("COUNTERSIGN_NODE"));
    command
        .arg(peers_dir().join("node/oidc-provider.mjs"))
        .args(page_urls.iter().map(|u| format!("{u}/oidc/callback")))
        .current_dir(peers_dir().join("node"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("start oidc-provider");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("oidc-provider starts within a minute")
        .expect("read")
        .expect("oidc-provider printed its issuer");
    let issuer = serde_json::from_str::<serde_json::Value>(&line).expect("json")["issuer"]
        .as_str()
        .expect("issuer")
        .to_owned();
    // Keep reading: the provider dies of EPIPE if its stdout is closed under it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, issuer)
}

/// Follows `link`, logs in at the provider as `user` (login, then consent the first time),
/// and returns the approval page's heading once the browser is back on the page.
pub async fn log_in_and_open(browser: &Browser, link: &str, user: &str) -> String {
    let page_origin = link.split("/approve/").next().expect("a link").to_owned();
    browser.goto(link).await;
    browser
        .find("input[name=login]")
        .await
        .type_text(user)
        .await;
    browser
        .find("input[name=password]")
        .await
        .type_text("any password")
        .await;
    browser.find("button[type=submit]").await.click().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut consented = false;
    loop {
        let state = browser
            .execute(
                "return [location.href, !!document.querySelector('input[name=login]'), \
                 !!document.querySelector('button[type=submit]'), \
                 (document.querySelector('main h1') || {}).innerText || null];",
            )
            .await;
        let url = state[0].as_str().unwrap_or_default();
        if url.starts_with(&page_origin) {
            if let Some(heading) = state[3].as_str() {
                return heading.to_owned();
            }
        } else if !consented && state[1] == false && state[2] == true {
            // The consent screen: no login field, one submit button.
            browser.find("button[type=submit]").await.click().await;
            consented = true;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stuck logging in at {url}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
