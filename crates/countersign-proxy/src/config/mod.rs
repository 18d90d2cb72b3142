//! Typed, already-validated settings the proxy runs with. `countersign-app` builds these from the
//! configuration file; nothing here re-validates.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

mod upstream;

pub use upstream::{
    ClientCertificate, ProcessSharing, Secret, StdioCommand, TlsRoots, TlsSettings, Transport,
    Upstream, UpstreamAuth,
};

use http::HeaderName;

/// Everything one gateway listener needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// MCP endpoints, matched byte-exactly against the request path.
    pub routes: Vec<Route>,
    pub limits: Limits,
    pub connections: ConnectionLimits,
    pub origins: OriginPolicy,
    pub hosts: HostPolicy,
}

/// One MCP endpoint of the gateway and the upstream server behind it.
#[derive(Debug, Clone)]
pub struct Route {
    /// Exact request path, such as `/mcp`.
    pub path: String,
    pub upstream: Upstream,
    /// Where clients of the 2024-11-05 HTTP+SSE transport reach the same upstream, through the
    /// same layers; `None`: not served.
    pub legacy: Option<LegacyPaths>,
}

/// The two endpoints of the 2024-11-05 HTTP+SSE transport for one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyPaths {
    /// `GET` here opens a legacy session, such as `/sse`. It may equal the route's own path: a
    /// `GET` there without `Mcp-Session-Id` is then a legacy client's.
    pub sse: String,
    /// Where the session's messages are POSTed, as its `endpoint` event announces:
    /// `<sse>/messages`, or `/messages` when `sse` is `/`.
    pub messages: String,
}

impl LegacyPaths {
    /// The endpoints of a legacy SSE path, its messages path derived from it.
    pub fn new(sse: &str) -> Self {
        let messages = format!("{}/messages", sse.trim_end_matches('/'));
        Self {
            sse: sse.to_owned(),
            messages,
        }
    }
}

/// Limits that bound what one client can make the gateway hold or do.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body; larger ones get 413 before they are read.
    pub max_body_bytes: NonZeroUsize,
    /// Whole-body deadline, so a drip-fed body cannot hold a connection forever.
    pub body_timeout: Duration,
    /// Time allowed for a request's header block (slowloris guard).
    pub header_read_timeout: Duration,
    /// Most header fields in one request; more get 431.
    pub max_headers: NonZeroUsize,
    /// Largest request head (request line plus headers) in bytes; larger gets 431.
    pub max_header_bytes: NonZeroUsize,
    /// Deepest JSON nesting accepted in a request body.
    pub max_json_depth: NonZeroUsize,
    /// Largest single SSE event relayed from an upstream.
    pub max_sse_event_bytes: NonZeroUsize,
    /// Request body bytes the listener reads or holds at once, over every request (held calls
    /// waiting for a person included); past it a request gets 503 before its body is read.
    pub max_in_flight_body_bytes: NonZeroUsize,
    /// Most tools pinned per upstream; further new tools are not pinned and stay `unknown`.
    pub max_tools_per_upstream: NonZeroUsize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: nz(4 * 1024 * 1024),
            body_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            max_headers: nz(100),
            max_header_bytes: nz(64 * 1024),
            max_json_depth: nz(64),
            max_sse_event_bytes: nz(16 * 1024 * 1024),
            max_in_flight_body_bytes: nz(DEFAULT_BODY_BUDGET_BODIES * 4 * 1024 * 1024),
            max_tools_per_upstream: nz(10_000),
        }
    }
}

/// The default in-flight body budget, in maximum-size bodies: room for that many bodies of
/// `max_body_bytes` at once (thousands of ordinary, few-KiB MCP messages).
pub const DEFAULT_BODY_BUDGET_BODIES: usize = 16;

/// How the MCP listener holds connections, and how long a quiet relayed stream lives.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Most connections open at once; at the limit the listener stops accepting, and new
    /// connections wait in the listen backlog until one closes.
    pub max_open: NonZeroUsize,
    /// Most requests in flight at once from one client address, streams and held calls
    /// included; more get 429.
    pub max_requests_per_client: NonZeroUsize,
    /// Where a request's client address comes from.
    pub client_address: ClientAddress,
    /// A relayed stream on which nothing was sent for this long gets a `: keep-alive` comment.
    pub sse_keep_alive: Duration,
    /// A relayed upstream stream that sent no bytes for this long is ended.
    pub sse_idle_timeout: Duration,
    /// How many connection workers (threads, each with its own event loop) serve clients.
    pub workers: NonZeroUsize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_open: nz(10_000),
            max_requests_per_client: nz(1_000),
            client_address: ClientAddress::Peer,
            sse_keep_alive: Duration::from_secs(15),
            sse_idle_timeout: Duration::from_secs(3600),
            workers: crate::workers::default_count(),
        }
    }
}

/// What identifies a client for the per-client request limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAddress {
    /// The TCP peer: right when clients connect directly. Behind a proxy every client shares
    /// the proxy's address.
    Peer,
    /// The last address in this header, as set by a trusted proxy in front (`X-Real-IP`,
    /// `X-Forwarded-For`); the peer address when the header is missing or not an address.
    Header(HeaderName),
}

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).expect("limit defaults are non-zero")
}

/// A token bucket: `burst` tokens when full, one more every minute / `per_minute`; each counted
/// event takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Sustained events per minute.
    pub per_minute: NonZeroU32,
    /// Events allowed at once after a quiet spell: the bucket's size.
    pub burst: NonZeroU32,
}

impl Rate {
    /// Time for one token to come back.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(60) / self.per_minute.get()
    }
}

/// One rate limit: the bucket every upstream without its own shares, and the upstreams that
/// have their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitRates {
    /// The rate of the principal's shared bucket; `None`: off.
    pub default: Option<Rate>,
    /// Upstreams (by name) whose calls count in a bucket of their own with this rate instead of
    /// the shared one; `None`: off for that upstream.
    pub per_upstream: BTreeMap<String, Option<Rate>>,
}

/// What a limit does when the store shared between replicas cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// This replica's own buckets decide until the store answers again.
    Open,
    /// Refuse (HTTP 503) until the store answers again.
    Closed,
}

/// Per-principal rate limits (token buckets); see `docs/operations.md#rate-limits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// Every `tools/call`.
    pub calls: LimitRates,
    /// Every call the gateway holds for approval (a token minted or a question asked).
    pub held: LimitRates,
    /// Every question put to a person (elicitation, `input_required`).
    pub questions: LimitRates,
    pub on_store_error: OnStoreError,
    /// Most principals whose buckets this replica keeps in memory.
    pub max_principals: NonZeroUsize,
}

impl Default for RateLimitConfig {
    /// `calls` and `held` off (a sustainable rate depends on the upstream and the deployment),
    /// `questions` 30 a minute with a burst of 10 (a person cannot judge more), failing open.
    fn default() -> Self {
        Self {
            calls: LimitRates::default(),
            held: LimitRates::default(),
            questions: LimitRates {
                default: Some(Rate {
                    per_minute: NonZeroU32::new(30).expect("non-zero"),
                    burst: NonZeroU32::new(10).expect("non-zero"),
                }),
                per_upstream: BTreeMap::new(),
            },
            on_store_error: OnStoreError::Open,
            max_principals: nz(100_000),
        }
    }
}

impl RateLimitConfig {
    /// Every limit off.
    pub fn off() -> Self {
        Self {
            questions: LimitRates::default(),
            ..Self::default()
        }
    }
}

/// Which browser origins may talk to the gateway. Requests without `Origin` (non-browser clients)
/// are always allowed past this check.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    pub allowed: Vec<HostPattern>,
}

/// Which `Host` values the gateway answers to. `None` allows any host: right for a gateway behind
/// a load balancer; a loopback listener defaults to loopback names only (DNS-rebinding guard).
#[derive(Debug, Clone)]
pub struct HostPolicy {
    pub allowed: Option<Vec<HostPattern>>,
}

/// A scheme-optional `host[:port]` pattern where the port may be `*`, such as
/// `http://localhost:*` for origins or `gateway.internal:8080` for hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    pub scheme: Option<String>,
    pub host: String,
    pub port: PortPattern,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortPattern {
    Any,
    /// No port given: only the scheme's default (or none) matches.
    Default,
    Exact(u16),
}

impl HostPattern {
    /// Parses `[scheme://]host[:port|:*]`. Host names are compared ASCII case-insensitively.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        let (scheme, rest) = split_scheme(pattern);
        let scheme = scheme.map(str::to_ascii_lowercase);
        if rest.is_empty() || rest.contains('/') {
            return Err(format!(
                "`{pattern}` is not of the form [scheme://]host[:port]"
            ));
        }
        let (host, port) = split_host_port(rest)
            .ok_or_else(|| format!("`{pattern}` is not of the form [scheme://]host[:port]"))?;
        let port = match port {
            None => PortPattern::Default,
            Some("*") => PortPattern::Any,
            Some(p) => PortPattern::Exact(
                p.parse()
                    .map_err(|_| format!("`{pattern}` has an invalid port"))?,
            ),
        };
        Ok(Self {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// Loopback names on any port, the safe default for a gateway bound to loopback.
    pub fn loopback(scheme: Option<&str>) -> Vec<Self> {
        ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(|host| Self {
                scheme: scheme.map(str::to_owned),
                host: host.to_owned(),
                port: PortPattern::Any,
            })
            .collect()
    }

    /// Does `value` (an `Origin` like `http://localhost:3000` or a `Host` like `localhost:8080`)
    /// match any of `patterns`? The value is split once, not once per pattern: this runs on
    /// every request.
    pub fn any_matches(patterns: &[Self], value: &str) -> bool {
        let Some(value) = AuthorityParts::split(value) else {
            return false;
        };
        patterns.iter().any(|pattern| pattern.matches_split(&value))
    }

    fn matches_split(&self, value: &AuthorityParts<'_>) -> bool {
        if let Some(want) = &self.scheme {
            match value.scheme {
                Some(got) if got.eq_ignore_ascii_case(want) => {}
                _ => return false,
            }
        }
        if !value.host.eq_ignore_ascii_case(&self.host) {
            return false;
        }
        match (&self.port, value.port) {
            (PortPattern::Any, _) => true,
            (PortPattern::Default, None) => true,
            (PortPattern::Default, Some(_)) => false,
            (PortPattern::Exact(want), Some(got)) => got.parse::<u16>().ok() == Some(*want),
            (PortPattern::Exact(_), None) => false,
        }
    }
}

/// A `Host` or `Origin` value split into the parts a [`HostPattern`] compares.
struct AuthorityParts<'a> {
    scheme: Option<&'a str>,
    host: &'a str,
    port: Option<&'a str>,
}

impl<'a> AuthorityParts<'a> {
    /// `None` when the value is no `[scheme://]host[:port]`, which then matches no pattern.
    fn split(value: &'a str) -> Option<Self> {
        let (scheme, rest) = split_scheme(value);
        let (host, port) = split_host_port(rest)?;
        Some(Self { scheme, host, port })
    }
}

/// Splits an optional `scheme://` off the front: the same for a pattern and a value.
///
/// Found byte by byte: this runs for every request's `Host`, a few bytes long, for which
/// `split_once("://")` set up a substring searcher on every call.
fn split_scheme(value: &str) -> (Option<&str>, &str) {
    let bytes = value.as_bytes();
    let separator = (0..bytes.len()).find(|&at| bytes[at..].starts_with(b"://"));
    match separator {
        Some(colon) => (Some(&value[..colon]), &value[colon + 3..]),
        None => (None, value),
    }
}

/// Splits `host[:port]`, keeping IPv6 brackets on the host.
fn split_host_port(value: &str) -> Option<(&str, Option<&str>)> {
    if value.starts_with('[') {
        let end = value.find(']')?;
        let (host, rest) = value.split_at(end + 1);
        match rest {
            "" => Some((host, None)),
            _ => rest.strip_prefix(':').map(|p| (host, Some(p))),
        }
    } else {
        // Byte by byte, as in `split_scheme`.
        let bytes = value.as_bytes();
        match bytes.iter().position(|&byte| byte == b':') {
            Some(colon) if bytes[colon + 1..].contains(&b':') => None,
            Some(colon) => Some((&value[..colon], Some(&value[colon + 1..]))),
            None => Some((value, None)),
        }
    }
}

/// Default host policy for a listener: loopback listeners answer only to loopback names.
pub fn default_host_policy(listen: SocketAddr) -> HostPolicy {
    if listen.ip().is_loopback() {
        HostPolicy {
            allowed: Some(HostPattern::loopback(None)),
        }
    } else {
        HostPolicy { allowed: None }
    }
}

/// Default origin policy: loopback pages only, over http or https.
pub fn default_origin_policy() -> OriginPolicy {
    let mut allowed = HostPattern::loopback(Some("http"));
    allowed.extend(HostPattern::loopback(Some("https")));
    OriginPolicy { allowed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origin_patterns_match_any_port_but_not_other_hosts() {
        let policy = default_origin_policy();
        let ok = |v: &str| HostPattern::any_matches(&policy.allowed, v);
        assert!(ok("http://localhost:3000"));
        assert!(ok("http://127.0.0.1"));
        assert!(ok("https://[::1]:8443"));
        assert!(!ok("http://evil.example.com"));
        assert!(!ok("http://localhost.evil.example:80"));
        assert!(!ok("null"));
        assert!(!ok("file://localhost"));
    }

    #[test]
    fn exact_port_patterns_require_that_port() {
        let matches =
            |p: &HostPattern, v: &str| HostPattern::any_matches(std::slice::from_ref(p), v);
        let p = HostPattern::parse("gateway.internal:8080").expect("valid");
        assert!(matches(&p, "Gateway.Internal:8080"));
        assert!(!matches(&p, "gateway.internal:8081"));
        assert!(!matches(&p, "gateway.internal"));
        let d = HostPattern::parse("gateway.internal").expect("valid");
        assert!(matches(&d, "gateway.internal"));
        assert!(!matches(&d, "gateway.internal:9"));
    }

    /// The std splits these replaced, byte loops being cheaper for a `Host` of a few bytes.
    fn split_by_std(value: &str) -> Option<(Option<&str>, &str, Option<&str>)> {
        let (scheme, rest) = match value.split_once("://") {
            Some((scheme, rest)) => (Some(scheme), rest),
            None => (None, value),
        };
        let (host, port) = if rest.starts_with('[') {
            let end = rest.find(']')?;
            let (host, after) = rest.split_at(end + 1);
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':')?)),
            }
        } else {
            match rest.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => (host, Some(port)),
                Some(_) => return None,
                None => (rest, None),
            }
        };
        Some((scheme, host, port))
    }

    proptest::proptest! {
        #[test]
        fn values_split_as_the_std_splits_did(value in "[a:/\\[\\]1.]{0,12}") {
            let split = AuthorityParts::split(&value).map(|p| (p.scheme, p.host, p.port));
            proptest::prop_assert_eq!(split, split_by_std(&value));
        }
    }

    #[test]
    fn malformed_patterns_are_refused() {
        assert!(HostPattern::parse("http://a/b").is_err());
        assert!(HostPattern::parse("a:port").is_err());
        assert!(HostPattern::parse("").is_err());
    }
}
