//! The configuration file: `RawConfig` mirrors the YAML exactly (unknown keys are errors),
//! `validate()` turns it into the typed [`Config`] everything else uses. Nothing downstream
//! re-validates.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use countersign_proxy::config::{
    HostPattern, HostPolicy, Limits, OriginPolicy, ProxyConfig, Route, Transport,
    default_host_policy, default_origin_policy,
};
use serde::Deserialize;

pub mod approvals;
pub use identity::RawIdentity;
mod identity;
mod legacy_paths;
mod rate_limits;
mod upstream;
mod upstream_flag;
pub use rate_limits::{RateLimitsConfig, RawRate, RawRateLimits, RawUpstreamRates};
pub use upstream::{RawAuth, RawCredential, RawProcesses, RawReplaceAuth, RawTls, RawUpstream};

/// The configuration file as written. Every field is optional; defaults are documented per field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    /// Address of the MCP listener. Default `127.0.0.1:8080`.
    pub listen: Option<String>,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`), or `off`.
    /// Default `127.0.0.1:9090`.
    pub admin: Option<String>,
    /// `text` (default) or `json`.
    pub log_format: Option<String>,
    /// How long in-flight requests and streams may finish after SIGTERM. Default `30s`.
    pub drain_timeout: Option<String>,
    /// The MCP servers behind the gateway, each on its own path. At least one.
    pub upstreams: Vec<RawUpstream>,
    pub limits: RawLimits,
    pub connections: RawConnections,
    /// Browser origins allowed to call the gateway (`scheme://host[:port|:*]`). Requests without
    /// `Origin` are not affected. Default: loopback origins on any port.
    pub allowed_origins: Option<Vec<String>>,
    /// `Host` values the gateway answers to (`host[:port|:*]`), or `["*"]` for any. Default:
    /// loopback names when listening on loopback, any host otherwise.
    pub allowed_hosts: Option<Vec<String>>,
    /// Policy file (see `policies/`). Default: the built-in defaults — reads allowed, writes,
    /// destructive and unknown calls held for confirmation. Reloaded on SIGHUP and on change.
    pub policy: Option<PathBuf>,
    /// Deployment id written into every token (`iss`); tokens from another deployment are
    /// refused. Default `countersign`.
    pub deployment_id: Option<String>,
    /// File with the signing keyring (`kid:base64url-key` entries, first signs). Default: the
    /// `COUNTERSIGN_SIGNING_KEYS` environment variable; with neither, a random key per start.
    pub signing_keys_file: Option<PathBuf>,
    pub identity: RawIdentity,
    pub audit: RawAudit,
    /// Most unexpired spent token ids kept by the in-memory replay store; when full, new
    /// confirmations are refused (fail closed). Default `1000000`.
    pub replay_max_entries: Option<usize>,
    /// How long the gateway waits for a person to answer its elicitation. Default `5m`.
    pub elicitation_timeout: Option<String>,
    /// Most questions waiting for an answer at once; more are refused. Default `10000`.
    pub max_pending_questions: Option<usize>,
    /// Most questions waiting at once for one principal, per replica; past it only that
    /// principal's calls are refused (`rate_limited`). Default `100`.
    pub max_pending_questions_per_principal: Option<usize>,
    /// Most questions waiting at once in one session, per replica. Default `20`.
    pub max_pending_questions_per_session: Option<usize>,
    /// Redis shared by every replica: spent confirmations, elicitation answers and pinned
    /// risks. Without it, all of these live in this process only.
    pub redis: Option<RawRedis>,
    /// Per-principal rate limits on tool calls, held calls and questions (token buckets).
    /// Default: only `questions` (30 a minute, burst 10).
    pub rate_limits: RawRateLimits,
    /// The out-of-band approval page (docs/approval-page.md). Default: none.
    pub approvals: Option<approvals::RawApprovals>,
    /// OpenTelemetry export; see `RawTelemetry`.
    pub telemetry: RawTelemetry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    /// `redis://host:6379`, `rediss://…` (TLS), or `redis-cluster://h1:6379,h2:6379`.
    /// Required, but may come from `--redis` / `COUNTERSIGN_REDIS_URL` instead, so a URL that
    /// carries a password can live in a Kubernetes Secret while the rest stays in the file.
    #[serde(default)]
    pub url: String,
    /// Prefix of every key, so several deployments can share one Redis. Default `countersign`.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Deadline of every Redis command; past it the call is refused (fail closed). Default `250ms`.
    #[serde(default)]
    pub command_timeout: Option<String>,
}

/// The audit trail: one JSON line per decision and outcome.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAudit {
    /// `-` for stdout (default), a file path to append to, or `off`.
    pub path: Option<String>,
    /// Also record call arguments. Default `false`: they may hold personal data.
    pub include_arguments: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLimits {
    /// Largest request body. Default `4MiB`.
    pub max_body_bytes: Option<RawSize>,
    /// Whole-body read deadline. Default `30s`.
    pub body_timeout: Option<String>,
    /// Deadline for a request's header block. Default `10s`.
    pub header_read_timeout: Option<String>,
    /// Most header fields per request. Default `100`.
    pub max_headers: Option<usize>,
    /// Largest request head in bytes (at least 8KiB). Default `64KiB`.
    pub max_header_bytes: Option<RawSize>,
    /// Deepest JSON nesting in a request body. Default `64`.
    pub max_json_depth: Option<usize>,
    /// Largest single relayed SSE event. Default `16MiB`.
    pub max_sse_event_bytes: Option<RawSize>,
    /// Request body bytes read or held at once over all requests; past it, 503. Default: 16
    /// times `max_body_bytes` (`64MiB`).
    pub max_in_flight_body_bytes: Option<RawSize>,
    /// Most tools pinned per upstream; new ones past it stay `unknown`. Default `10000`.
    pub max_tools_per_upstream: Option<usize>,
}

/// A size as a plain byte count or a string with a unit (`64KiB`, `4MiB`, `1GiB`, `500KB`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(usize),
    Text(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub log_format: LogFormat,
    pub drain_timeout: Duration,
    pub proxy: ProxyConfig,
    pub approval: ApprovalConfig,
    pub rate_limits: RateLimitsConfig,
    /// The approval page, when `approvals:` is configured.
    pub approvals: Option<approvals::ApprovalsConfig>,
    /// Where traces go, when anywhere.
    pub telemetry: TelemetryConfig,
}

/// `telemetry:` in the config file.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// Base URL of an OTLP/HTTP receiver (`http://collector:4318`; traces go to `/v1/traces`).
    /// Default: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, taken
    /// as is); neither set means no traces and no exporter.
    pub otlp_endpoint: Option<String>,
}

/// Validated `telemetry:`.
#[derive(Debug, Default, Clone)]
pub struct TelemetryConfig {
    /// The traces URL (`…/v1/traces`) from the config file; `None` leaves it to the
    /// `OTEL_EXPORTER_OTLP_*` variables.
    pub otlp_traces_url: Option<String>,
}

/// Settings of the approval gate.
#[derive(Debug, Clone)]
pub struct ApprovalConfig {
    pub policy_path: Option<PathBuf>,
    /// The policy as loaded at start-up.
    pub policy: countersign_policy::Policy,
    pub deployment_id: String,
    pub keyring: KeyringSource,
    pub identity: countersign_proxy::identity::Identity,
    pub audit: AuditTarget,
    pub audit_arguments: bool,
    pub replay_max_entries: NonZeroUsize,
    pub elicitation_timeout: Duration,
    pub max_pending_questions: usize,
    pub question_caps: countersign_proxy::approval::QuestionCaps,
    pub redis: Option<RedisConfig>,
}

/// Where replicas share their state.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub url: String,
    pub namespace: String,
    pub command_timeout: Duration,
}

/// Where the signing keys came from; a generated keyring is worth a warning.
#[derive(Debug, Clone)]
pub enum KeyringSource {
    Configured(std::sync::Arc<countersign_token::Keyring>),
    Generated(std::sync::Arc<countersign_token::Keyring>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    Stdout,
    File(PathBuf),
    Off,
}

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub upstream: Option<String>,
    pub redis: Option<String>,
    pub policy: Option<PathBuf>,
    pub audit: Option<String>,
    pub path: Option<String>,
    pub listen: Option<String>,
    pub admin: Option<String>,
    pub log_format: Option<String>,
}

impl RawConfig {
    /// Reads a configuration file. Relative `policy` and `signing_keys_file` paths are taken
    /// relative to the file's own folder, so a config and its policy can move together.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading configuration file {}", path.display()))?;
        let mut raw = Self::from_yaml(&text)
            .with_context(|| format!("in configuration file {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for file in [&mut raw.policy, &mut raw.signing_keys_file]
            .into_iter()
            .flatten()
        {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
        if let Some(approvals) = &mut raw.approvals {
            approvals.resolve_paths(base);
        }
        Ok(raw)
    }

    pub fn from_yaml(text: &str) -> anyhow::Result<Self> {
        serde_yaml_ng::from_str(text).context("invalid configuration")
    }

    pub fn apply(&mut self, overrides: Overrides) {
        if let Some(url) = overrides.upstream {
            self.upstreams = vec![RawUpstream {
                path: overrides.path,
                flag: Some(url),
                ..RawUpstream::default()
            }];
        } else if let (Some(path), [only]) = (overrides.path, self.upstreams.as_mut_slice()) {
            only.path = Some(path);
        }
        if overrides.listen.is_some() {
            self.listen = overrides.listen;
        }
        if overrides.policy.is_some() {
            self.policy = overrides.policy;
        }
        if let Some(url) = overrides.redis {
            let mut redis = self.redis.take().unwrap_or_default();
            redis.url = url;
            self.redis = Some(redis);
        }
        if overrides.audit.is_some() {
            self.audit.path = overrides.audit;
        }
        if overrides.admin.is_some() {
            self.admin = overrides.admin;
        }
        if overrides.log_format.is_some() {
            self.log_format = overrides.log_format;
        }
    }

    pub fn validate(self) -> anyhow::Result<Config> {
        let listen = parse_addr(self.listen.as_deref().unwrap_or("127.0.0.1:8080"), "listen")?;
        let admin = match self.admin.as_deref().unwrap_or("127.0.0.1:9090") {
            "off" => None,
            addr => Some(parse_addr(addr, "admin")?),
        };
        // Port 0 asks the system for a free port, so two of them never collide.
        ensure!(
            admin != Some(listen) || listen.port() == 0,
            "admin and listen must be different addresses"
        );
        let log_format = match self.log_format.as_deref().unwrap_or("text") {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => bail!("log_format must be `text` or `json`, not `{other}`"),
        };
        let drain_timeout = duration(self.drain_timeout.as_deref(), "30s", "drain_timeout")?;
        let limits = self.limits.validate()?;
        let connections = self.connections.validate()?;

        ensure!(
            !self.upstreams.is_empty(),
            "no upstream configured: pass --upstream URL or list `upstreams:` in the config file"
        );
        let credential_variables: Vec<String> = self
            .upstreams
            .iter()
            .filter_map(|u| u.credential_variable().map(str::to_owned))
            .collect();
        let mut routes: Vec<Route> = Vec::with_capacity(self.upstreams.len());
        let mut legacy = Vec::with_capacity(self.upstreams.len());
        for (i, raw) in self.upstreams.into_iter().enumerate() {
            let (route, legacy_setting) =
                raw.validate().with_context(|| format!("upstreams[{i}]"))?;
            legacy.push(legacy_setting);
            if let Some(other) = routes.iter().find(|r| r.path == route.path) {
                bail!(
                    "upstreams[{i}]: path {} is already used by upstream `{}`",
                    route.path,
                    other.upstream.name
                );
            }
            if let Some(other) = routes
                .iter()
                .find(|r| r.upstream.name == route.upstream.name)
            {
                bail!(
                    "upstreams[{i}]: name `{}` is used twice",
                    other.upstream.name
                );
            }
            routes.push(route);
        }
        for route in &mut routes {
            if let Transport::Stdio(command) = &mut route.upstream.transport {
                command.withheld_env = credential_variables.clone();
            }
        }
        legacy_paths::legacy_endpoints(&mut routes, &legacy)?;

        let origins = match self.allowed_origins {
            None => default_origin_policy(),
            Some(list) => OriginPolicy {
                allowed: patterns(&list, "allowed_origins")?,
            },
        };
        let hosts = match self.allowed_hosts {
            None => default_host_policy(listen),
            Some(list) if list.iter().any(|h| h == "*") => HostPolicy { allowed: None },
            Some(list) => HostPolicy {
                allowed: Some(patterns(&list, "allowed_hosts")?),
            },
        };
        let paths: Vec<String> = routes.iter().map(|r| r.path.clone()).collect();
        let mut approval = approval_config(
            self.policy,
            self.deployment_id,
            self.signing_keys_file,
            self.identity.validate(&paths)?,
            self.audit,
            self.replay_max_entries,
        )?;
        approval.elicitation_timeout = duration(
            self.elicitation_timeout.as_deref(),
            "5m",
            "elicitation_timeout",
        )?;
        approval.redis = match self.redis {
            None => None,
            Some(raw) => Some(RedisConfig {
                url: {
                    ensure!(
                        !raw.url.is_empty(),
                        "redis.url is not set: give it in the file, with --redis or in COUNTERSIGN_REDIS_URL"
                    );
                    raw.url
                },
                namespace: raw.namespace.unwrap_or_else(|| "countersign".to_owned()),
                command_timeout: duration(
                    raw.command_timeout.as_deref(),
                    "250ms",
                    "redis.command_timeout",
                )?,
            }),
        };
        approval.max_pending_questions = nonzero(
            self.max_pending_questions.unwrap_or(10_000),
            "max_pending_questions",
        )?
        .get();
        let defaults = countersign_proxy::approval::QuestionCaps::default();
        approval.question_caps = countersign_proxy::approval::QuestionCaps {
            per_principal: nonzero(
                self.max_pending_questions_per_principal
                    .unwrap_or(defaults.per_principal),
                "max_pending_questions_per_principal",
            )?
            .get(),
            per_session: nonzero(
                self.max_pending_questions_per_session
                    .unwrap_or(defaults.per_session),
                "max_pending_questions_per_session",
            )?
            .get(),
        };
        let upstream_names: Vec<&str> = routes.iter().map(|r| r.upstream.name.as_str()).collect();
        let rate_limits = self
            .rate_limits
            .validate(&upstream_names, approval.redis.is_some())?;
        let other_listeners: Vec<SocketAddr> = std::iter::once(listen).chain(admin).collect();
        let approvals = self
            .approvals
            .map(|raw| raw.validate(&other_listeners))
            .transpose()?;
        let telemetry = TelemetryConfig {
            otlp_traces_url: match self.telemetry.otlp_endpoint.as_deref() {
                None | Some("") => None,
                Some(base) => {
                    let url = url::Url::parse(base).with_context(|| {
                        format!("telemetry.otlp_endpoint `{base}` is not a URL")
                    })?;
                    ensure!(
                        matches!(url.scheme(), "http" | "https"),
                        "telemetry.otlp_endpoint must be an http:// or https:// URL, not `{base}`"
                    );
                    Some(format!("{}/v1/traces", base.trim_end_matches('/')))
                }
            },
        };
        Ok(Config {
            telemetry,
            approvals,
            rate_limits,
            listen,
            admin,
            log_format,
            drain_timeout,
            proxy: ProxyConfig {
                routes,
                limits,
                connections,
                origins,
                hosts,
            },
            approval,
        })
    }
}

impl RawLimits {
    fn validate(self) -> anyhow::Result<Limits> {
        let max_header_bytes = size(self.max_header_bytes, 64 << 10, "limits.max_header_bytes")?;
        ensure!(
            max_header_bytes.get() >= 8192,
            "limits.max_header_bytes must be at least 8KiB"
        );
        let max_json_depth = nonzero(self.max_json_depth.unwrap_or(64), "limits.max_json_depth")?;
        ensure!(
            max_json_depth.get() <= 128,
            "limits.max_json_depth must be at most 128"
        );
        let max_body_bytes = size(self.max_body_bytes, 4 << 20, "limits.max_body_bytes")?;
        Ok(Limits {
            max_body_bytes,
            body_timeout: duration(self.body_timeout.as_deref(), "30s", "limits.body_timeout")?,
            header_read_timeout: duration(
                self.header_read_timeout.as_deref(),
                "10s",
                "limits.header_read_timeout",
            )?,
            max_headers: nonzero(self.max_headers.unwrap_or(100), "limits.max_headers")?,
            max_header_bytes,
            max_json_depth,
            max_sse_event_bytes: size(
                self.max_sse_event_bytes,
                16 << 20,
                "limits.max_sse_event_bytes",
            )?,
            max_in_flight_body_bytes: capacity::body_budget(
                self.max_in_flight_body_bytes,
                max_body_bytes,
            )?,
            max_tools_per_upstream: capacity::max_tools_per_upstream(self.max_tools_per_upstream)?,
        })
    }
}

/// Reads and parses a policy file.
pub fn load_policy(path: &Path) -> anyhow::Result<countersign_policy::Policy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading policy file {}", path.display()))?;
    countersign_policy::Policy::from_yaml(&text)
        .with_context(|| format!("in policy file {}", path.display()))
}

/// The signing keyring: `COUNTERSIGN_SIGNING_KEYS` if set, else the configured file, else a
/// key generated for this process.
pub fn load_keyring(file: Option<&Path>) -> anyhow::Result<KeyringSource> {
    use countersign_token::Keyring;
    if let Ok(spec) = std::env::var("COUNTERSIGN_SIGNING_KEYS") {
        let keyring = Keyring::parse(&spec).context("COUNTERSIGN_SIGNING_KEYS")?;
        return Ok(KeyringSource::Configured(std::sync::Arc::new(keyring)));
    }
    if let Some(file) = file {
        let spec = std::fs::read_to_string(file)
            .with_context(|| format!("reading signing keys from {}", file.display()))?;
        let keyring =
            Keyring::parse(&spec).with_context(|| format!("signing keys in {}", file.display()))?;
        return Ok(KeyringSource::Configured(std::sync::Arc::new(keyring)));
    }
    Ok(KeyringSource::Generated(std::sync::Arc::new(
        Keyring::generate(),
    )))
}

fn approval_config(
    policy_path: Option<PathBuf>,
    deployment_id: Option<String>,
    signing_keys_file: Option<PathBuf>,
    identity: countersign_proxy::identity::Identity,
    audit: RawAudit,
    replay_max_entries: Option<usize>,
) -> anyhow::Result<ApprovalConfig> {
    let policy = match &policy_path {
        Some(path) => load_policy(path)?,
        None => countersign_policy::Policy::default(),
    };
    let deployment_id = deployment_id.unwrap_or_else(|| "countersign".to_owned());
    ensure!(
        !deployment_id.is_empty()
            && deployment_id.len() <= 64
            && deployment_id.chars().all(|c| c.is_ascii_graphic()),
        "deployment_id must be 1-64 visible ASCII characters"
    );
    let audit_target = match audit.path.as_deref() {
        None | Some("-") => AuditTarget::Stdout,
        Some("off") => AuditTarget::Off,
        Some(path) => AuditTarget::File(PathBuf::from(path)),
    };
    Ok(ApprovalConfig {
        policy_path,
        policy,
        deployment_id,
        keyring: load_keyring(signing_keys_file.as_deref())?,
        identity,
        audit: audit_target,
        audit_arguments: audit.include_arguments,
        replay_max_entries: nonzero(
            replay_max_entries.unwrap_or(1_000_000),
            "replay_max_entries",
        )?,
        elicitation_timeout: Duration::from_secs(300),
        max_pending_questions: 10_000,
        question_caps: countersign_proxy::approval::QuestionCaps::default(),
        redis: None,
    })
}

fn parse_addr(text: &str, field: &str) -> anyhow::Result<SocketAddr> {
    text.parse()
        .with_context(|| format!("{field}: `{text}` is not an address like 127.0.0.1:8080"))
}

fn duration(text: Option<&str>, default: &str, field: &str) -> anyhow::Result<Duration> {
    let text = text.unwrap_or(default);
    let value = humantime::parse_duration(text)
        .with_context(|| format!("{field}: `{text}` is not a duration like 30s or 5m"))?;
    ensure!(!value.is_zero(), "{field} must be greater than zero");
    Ok(value)
}

fn nonzero(value: usize, field: &str) -> anyhow::Result<NonZeroUsize> {
    NonZeroUsize::new(value).with_context(|| format!("{field} must be greater than zero"))
}

fn size(raw: Option<RawSize>, default: usize, field: &str) -> anyhow::Result<NonZeroUsize> {
    let bytes = match raw {
        None => default,
        Some(RawSize::Bytes(n)) => n,
        Some(RawSize::Text(text)) => {
            parse_size(&text).with_context(|| format!("{field}: `{text}`"))?
        }
    };
    nonzero(bytes, field)
}

/// `64KiB`, `4MiB`, `1GiB`, `500KB`, `1MB` or a plain number of bytes.
pub fn parse_size(text: &str) -> anyhow::Result<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number.parse().context("not a size like 64KiB or 4MiB")?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        other => bail!("unknown size unit `{other}` (use B, KB, KiB, MB, MiB, GB or GiB)"),
    };
    number.checked_mul(factor).context("size overflows")
}

fn patterns(list: &[String], field: &str) -> anyhow::Result<Vec<HostPattern>> {
    list.iter()
        .map(|p| {
            HostPattern::parse(p)
                .map_err(anyhow::Error::msg)
                .with_context(|| field.to_owned())
        })
        .collect()
}

mod capacity;
pub use capacity::RawConnections;

#[cfg(test)]
mod tests;
