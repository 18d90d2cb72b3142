//! The page's signed cookies: the approver's session and, during an OpenID Connect login, the
//! login's own state. Values are base64url JSON plus an HMAC under the link key (purpose
//! `cookie:<name>`), so a cookie from one purpose cannot stand in for another, and a cookie
//! cannot be edited or forged without the key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::link::LinkKey;

/// The approver's session on the page.
pub const SESSION: &str = "countersign_page";
/// An OpenID Connect login in progress.
pub const LOGIN: &str = "countersign_login";

/// `value` signed for cookie `name`.
pub fn seal<T: Serialize>(key: &LinkKey, name: &str, value: &T) -> String {
    let json = serde_json::to_vec(value).expect("cookie values serialize");
    let body = URL_SAFE_NO_PAD.encode(json);
    let signature = key.sign_text(&format!("cookie:{name}"), &[body.as_bytes()]);
    format!("{body}.{signature}")
}

/// The value of a sealed cookie, if its signature is good.
pub fn open<T: DeserializeOwned>(key: &LinkKey, name: &str, sealed: &str) -> Option<T> {
    let (body, signature) = sealed.split_once('.')?;
    if !key.verify_text(&format!("cookie:{name}"), &[body.as_bytes()], signature) {
        return None;
    }
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()
}

/// A `Set-Cookie` value: `Secure` (HTTPS only; browsers treat `localhost` as secure too),
/// `HttpOnly` (no script reads it; the page has none anyway), `SameSite=Lax` (not sent on
/// cross-site POSTs, but sent when a person follows a link from chat or mail).
pub fn set_cookie(name: &str, value: &str, path: &str, max_age_secs: u64) -> String {
    format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; Secure; HttpOnly; SameSite=Lax")
}

/// Removes cookie `name`.
pub fn clear_cookie(name: &str, path: &str) -> String {
    set_cookie(name, "", path, 0)
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn find<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_under_their_name_and_key() {
        let key = LinkKey::generate();
        let sealed = seal(&key, SESSION, &("ada", 1_u64));
        assert_eq!(
            open::<(String, u64)>(&key, SESSION, &sealed),
            Some(("ada".to_owned(), 1))
        );
        assert_eq!(
            open::<(String, u64)>(&key, LOGIN, &sealed),
            None,
            "another cookie's purpose"
        );
        assert_eq!(
            open::<(String, u64)>(&LinkKey::generate(), SESSION, &sealed),
            None
        );
        let (body, signature) = sealed.split_once('.').expect("dot");
        let forged = URL_SAFE_NO_PAD.encode(br#"["mallory",1]"#);
        assert_eq!(
            open::<(String, u64)>(&key, SESSION, &format!("{forged}.{signature}")),
            None
        );
        assert!(
            open::<(String, u64)>(&key, SESSION, body).is_none(),
            "unsigned"
        );
    }

    #[test]
    fn cookies_are_secure_http_only_and_same_site_lax() {
        let cookie = set_cookie(SESSION, "v", "/", 60);
        for flag in ["Secure", "HttpOnly", "SameSite=Lax", "Max-Age=60", "Path=/"] {
            assert!(
                cookie.split("; ").any(|part| part == flag),
                "{flag} in {cookie}"
            );
        }
    }

    #[test]
    fn cookie_is_found_among_others() {
        let mut headers = http::HeaderMap::new();
        headers.append(
            http::header::COOKIE,
            "a=1; countersign_page=xyz".parse().expect("value"),
        );
        assert_eq!(find(&headers, SESSION), Some("xyz"));
        assert_eq!(find(&headers, LOGIN), None);
    }
}
