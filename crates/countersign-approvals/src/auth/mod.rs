//! Who is deciding. The page never takes a link alone as authority: the approver is named by
//! an authenticating proxy in front of the page (a trusted header) or by the page's own
//! OpenID Connect login, and the request's approver rules then say whether they may decide.

pub mod cookie;
pub mod oidc;
pub mod session;

use http::HeaderMap;

use crate::config::AuthConfig;
use session::PageSession;

/// An authenticated person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    pub user: String,
    pub groups: Vec<String>,
}

/// Who the request comes from, by the configured means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Known(Approver),
    /// OpenID Connect with no logged-in session: send the person to log in.
    LoginNeeded,
    /// Trusted header missing or unusable: the proxy in front did not authenticate them.
    Missing,
}

/// The approver of a request, given its headers and its page session.
pub fn identify(auth: &AuthConfig, headers: &HeaderMap, session: &PageSession) -> Identity {
    match auth {
        AuthConfig::TrustedHeader { user, groups } => {
            let Some(name) = header_text(headers, user) else {
                return Identity::Missing;
            };
            let groups = groups
                .as_ref()
                .and_then(|header| header_text(headers, header))
                .map(|list| {
                    list.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Identity::Known(Approver {
                user: name.to_owned(),
                groups,
            })
        }
        AuthConfig::Oidc(_) => match &session.user {
            Some(user) => Identity::Known(Approver {
                user: user.clone(),
                groups: session.groups.clone(),
            }),
            None => Identity::LoginNeeded,
        },
    }
}

/// A header's value when it is present once, visible ASCII or UTF-8, and not blank. A header
/// given twice is refused: two proxies disagreeing about who this is is no identity.
fn header_text<'a>(headers: &'a HeaderMap, name: &http::HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    std::str::from_utf8(value.as_bytes())
        .ok()
        .map(str::trim)
        .filter(|v| !v.is_empty() && !v.chars().any(char::is_control))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted() -> AuthConfig {
        AuthConfig::TrustedHeader {
            user: http::HeaderName::from_static("x-forwarded-user"),
            groups: Some(http::HeaderName::from_static("x-forwarded-groups")),
        }
    }

    #[test]
    fn trusted_header_names_the_approver_and_groups() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-user", "carol".parse().expect("value"));
        headers.insert("x-forwarded-groups", "dev, sre,".parse().expect("value"));
        let session = PageSession::anonymous(0, 60);
        assert_eq!(
            identify(&trusted(), &headers, &session),
            Identity::Known(Approver {
                user: "carol".to_owned(),
                groups: vec!["dev".to_owned(), "sre".to_owned()],
            })
        );
    }

    #[test]
    fn missing_blank_or_repeated_trusted_header_is_no_identity() {
        let session = PageSession::anonymous(0, 60);
        assert_eq!(
            identify(&trusted(), &HeaderMap::new(), &session),
            Identity::Missing
        );
        let mut blank = HeaderMap::new();
        blank.insert("x-forwarded-user", " ".parse().expect("value"));
        assert_eq!(identify(&trusted(), &blank, &session), Identity::Missing);
        let mut twice = HeaderMap::new();
        twice.append("x-forwarded-user", "ada".parse().expect("value"));
        twice.append("x-forwarded-user", "bob".parse().expect("value"));
        assert_eq!(identify(&trusted(), &twice, &session), Identity::Missing);
    }
}
