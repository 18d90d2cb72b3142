//! JSON Web Token verification against a provider's JWKS, shared by bearer-token identity and
//! the approval page's OpenID Connect login: [`JwksVerifier::verify`] takes a token and what it
//! must say, and returns its claims or why not.
//!
//! Only asymmetric algorithms are accepted (RS256, ES256, EdDSA): `alg: none` and every HS*
//! are refused before any key is looked at, so a token can never be "signed" with a public key
//! used as an HMAC secret. The key is the JWKS entry named by the token's `kid` (a JWKS with a
//! single key may serve a token without `kid`), and its type must fit the algorithm. The JWKS
//! is cached; a `kid` it does not hold makes it fetch the set again (key rotation), at most once
//! per [`MIN_REFETCH`], so a stream of bogus `kid`s cannot make the gateway hammer the provider.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::outbound::HttpClient;

/// Shortest time between two JWKS fetches caused by unknown `kid`s.
pub const MIN_REFETCH: Duration = Duration::from_secs(10);

/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const LEEWAY_SECS: u64 = 60;

/// The asymmetric algorithms a verifier may accept; all of them unless narrowed.
pub const ASYMMETRIC: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

/// Why a token was refused. The message is for logs; nobody is told which check failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    #[error("malformed token header")]
    Malformed,
    #[error("algorithm {0} is not accepted")]
    Algorithm(String),
    #[error("no key for this token in the provider's JWKS")]
    UnknownKey,
    #[error("the JWKS could not be fetched: {0}")]
    Jwks(String),
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("nonce does not match")]
    Nonce,
}

/// What a token must say besides a good signature and an unexpired `exp`.
#[derive(Debug, Clone)]
pub struct Expectations<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
    /// The `nonce` sent with the login; `None` when none is expected (bearer tokens).
    pub nonce: Option<&'a str>,
}

/// The accepted algorithm called `name` (`RS256`, `ES256`, `EdDSA`), if it is one.
pub fn asymmetric_named(name: &str) -> Option<Algorithm> {
    ASYMMETRIC
        .into_iter()
        .find(|alg| format!("{alg:?}") == name)
}

/// How strict a verifier is beyond what each token must say.
#[derive(Debug, Clone)]
pub struct Strictness {
    /// Clock skew allowed on `exp`, `nbf` and `iat`, in seconds.
    pub leeway_secs: u64,
    /// The accepted algorithms, a subset of [`ASYMMETRIC`].
    pub algorithms: Vec<Algorithm>,
}

impl Default for Strictness {
    fn default() -> Self {
        Self {
            leeway_secs: LEEWAY_SECS,
            algorithms: ASYMMETRIC.to_vec(),
        }
    }
}

/// Verifies tokens against the JWKS at one URL.
#[derive(Debug)]
pub struct JwksVerifier {
    jwks_uri: String,
    client: HttpClient,
    timeout: Duration,
    min_refetch: Duration,
    max_age: Option<Duration>,
    strictness: Strictness,
    clock: Arc<dyn Clock>,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    keys: Option<JwkSet>,
    fetched_at: Option<Instant>,
}

impl JwksVerifier {
    pub fn new(jwks_uri: String, client: HttpClient, timeout: Duration) -> Self {
        Self {
            jwks_uri,
            client,
            timeout,
            min_refetch: MIN_REFETCH,
            max_age: None,
            strictness: Strictness::default(),
            clock: Arc::new(SystemClock),
            cache: Mutex::new(Cache::default()),
        }
    }

    /// Fetches the set again before use once it is older than `age`, so a key the provider
    /// withdrew stops verifying; if that fetch fails, the keys held are kept.
    #[must_use]
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// Narrows the accepted algorithms and sets the leeway; HS* and `none` are never accepted.
    #[must_use]
    pub fn with_strictness(mut self, strictness: Strictness) -> Self {
        self.strictness = Strictness {
            algorithms: strictness
                .algorithms
                .into_iter()
                .filter(|alg| ASYMMETRIC.contains(alg))
                .collect(),
            ..strictness
        };
        self
    }

    /// Reads monotonic time (refetch spacing) from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Spaces refetches caused by unknown `kid`s by `interval` instead of [`MIN_REFETCH`].
    #[must_use]
    pub fn with_min_refetch(mut self, interval: Duration) -> Self {
        self.min_refetch = interval;
        self
    }

    /// A verifier over a fixed key set, never fetched (tests, static keys).
    pub fn with_keys(keys: JwkSet) -> Self {
        let verifier = Self::new(String::new(), HttpClient::new(), Duration::from_secs(1));
        verifier.cache.try_lock().expect("fresh mutex").keys = Some(keys);
        verifier
    }

    /// The claims of `token` if it is signed by a key of the JWKS and says what `expect` asks.
    pub async fn verify(
        &self,
        token: &str,
        expect: &Expectations<'_>,
    ) -> Result<Map<String, Value>, JwtError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| JwtError::Malformed)?;
        if !self.strictness.algorithms.contains(&header.alg) {
            return Err(JwtError::Algorithm(format!("{:?}", header.alg)));
        }
        let jwk = self.key_for(header.kid.as_deref()).await?;
        // A key published for one algorithm is not used for another.
        if let Some(alg) = jwk.common.key_algorithm
            && format!("{alg:?}") != format!("{:?}", header.alg)
        {
            return Err(JwtError::UnknownKey);
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| JwtError::Invalid(e.to_string()))?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.strictness.leeway_secs;
        // Off by default in jsonwebtoken: a token not yet valid is refused like an expired one.
        validation.validate_nbf = true;
        validation.set_issuer(&[expect.issuer]);
        validation.set_audience(&[expect.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| JwtError::Invalid(e.to_string()))?
            .claims;
        if let Some(nonce) = expect.nonce
            && claims.get("nonce").and_then(Value::as_str) != Some(nonce)
        {
            return Err(JwtError::Nonce);
        }
        Ok(claims)
    }

    async fn key_for(&self, kid: Option<&str>) -> Result<Jwk, JwtError> {
        let mut cache = self.cache.lock().await;
        if cache.keys.is_none() {
            self.refetch(&mut cache).await?;
        } else if let (Some(age), Some(at)) = (self.max_age, cache.fetched_at)
            && self.clock.now().saturating_duration_since(at) >= age
            && let Err(error) = self.refetch(&mut cache).await
        {
            tracing::warn!(jwks = %self.jwks_uri, %error, "JWKS refresh failed; keeping the keys held");
        }
        if let Some(key) = cache.keys.as_ref().and_then(|keys| find(keys, kid)) {
            return Ok(key);
        }
        let recently = cache
            .fetched_at
            .is_some_and(|at| self.clock.now().saturating_duration_since(at) < self.min_refetch);
        if recently || self.jwks_uri.is_empty() {
            return Err(JwtError::UnknownKey);
        }
        // The provider may have rotated its keys since we fetched them.
        self.refetch(&mut cache).await?;
        cache
            .keys
            .as_ref()
            .and_then(|keys| find(keys, kid))
            .ok_or(JwtError::UnknownKey)
    }

    async fn refetch(&self, cache: &mut Cache) -> Result<(), JwtError> {
        cache.fetched_at = Some(self.clock.now());
        let (status, _, body) = self
            .client
            .send(
                Method::GET,
                &self.jwks_uri,
                &[("accept", "application/json".to_owned())],
                Bytes::new(),
                self.timeout,
            )
            .await
            .map_err(|e| JwtError::Jwks(e.to_string()))?;
        if !status.is_success() {
            return Err(JwtError::Jwks(format!("status {status}")));
        }
        cache.keys =
            Some(serde_json::from_slice(&body).map_err(|e| JwtError::Jwks(e.to_string()))?);
        Ok(())
    }
}

fn find(keys: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => keys.find(kid).cloned(),
        None if keys.keys.len() == 1 => keys.keys.first().cloned(),
        None => None,
    }
}

#[cfg(test)]
mod tests;
