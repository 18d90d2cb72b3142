//! Bearer JWTs: a token verified by [`JwksVerifier`] against the configured issuer and
//! audience becomes a principal, its id and groups read from configurable claims.

use std::sync::Arc;

use countersign_policy::Principal;
use serde_json::Value;

use super::Refusal;
use super::jwt::{Expectations, JwksVerifier};

/// Which claims name the principal and its groups.
#[derive(Debug, Clone)]
pub struct ClaimNames {
    /// Default `sub`.
    pub principal: String,
    /// A list of strings or one space- or comma-separated string. Default `groups`.
    pub groups: String,
}

impl Default for ClaimNames {
    fn default() -> Self {
        Self {
            principal: "sub".into(),
            groups: "groups".into(),
        }
    }
}

/// The `jwt` identity method.
#[derive(Debug)]
pub struct BearerJwt {
    pub issuer: String,
    pub audience: String,
    pub claims: ClaimNames,
    pub verifier: JwksVerifier,
}

impl BearerJwt {
    pub(crate) async fn principal(&self, token: &str) -> Result<Principal, Refusal> {
        let expect = Expectations {
            issuer: &self.issuer,
            audience: &self.audience,
            nonce: None,
        };
        let claims = self
            .verifier
            .verify(token, &expect)
            .await
            .map_err(|e| Refusal::Invalid(e.to_string()))?;
        let id = match claims.get(&self.claims.principal) {
            Some(Value::String(id)) if !id.trim().is_empty() => id.trim().to_owned(),
            _ => {
                return Err(Refusal::Invalid(format!(
                    "the token has no `{}` claim naming the principal",
                    self.claims.principal
                )));
            }
        };
        let groups = match claims.get(&self.claims.groups) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(list)) => list
                .split([' ', ','])
                .filter(|g| !g.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Principal {
            id,
            groups,
            claims: Arc::new(claims),
        })
    }
}
