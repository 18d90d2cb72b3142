//! Who is calling: the principal of every request, taken from a trusted header that an
//! authenticating proxy in front of the gateway sets, into the request's extensions as
//! [`Caller`]. The body never names the caller.
//!
//! A request without a usable identity is not refused here: ordinary protocol traffic passes
//! without one, and the layers that bind approvals to a principal refuse it
//! (`Unauthenticated`) when they need one.

mod layer;
mod service;

pub use layer::IdentityLayer;
pub use service::Identify;

use countersign_policy::Principal;
use http::{HeaderMap, HeaderName};

/// The caller of a request, in its extensions. `None`: the identity header is configured but
/// absent or unusable.
#[derive(Debug, Clone)]
pub struct Caller(pub Option<Principal>);

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

#[cfg(test)]
mod tests;
