//! One `upstreams:` entry: where the upstream is, how the gateway authenticates to it, and its
//! timeouts and response limit.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use countersign_proxy::config::{
    ClientCertificate, ProcessSharing, Route, Secret, StdioCommand, TlsRoots, TlsSettings,
    Transport, Upstream, UpstreamAuth,
};
use http::Uri;
use http::uri::Scheme;
use serde::Deserialize;

use super::legacy_paths::LegacySetting;
use super::{RawSize, duration, nonzero, size};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// Name used in logs, metrics and policy rules. Default `default`.
    #[serde(default)]
    pub name: Option<String>,
    /// Gateway path clients use. Default: the path of `url`.
    #[serde(default)]
    pub path: Option<String>,
    /// Where clients of the 2024-11-05 HTTP+SSE transport open their sessions (`GET`), or
    /// `off`; their messages go to `<legacy_sse_path>/messages`. Default: `/sse` beside `path`
    /// (`/mcp` → `/sse`, `/a/mcp` → `/a/sse`; a `path` ending in `/sse` serves both transports
    /// itself; any other `<path>/sse`) when no other endpoint of the gateway uses it, else off.
    #[serde(default)]
    pub legacy_sse_path: Option<String>,
    /// The upstream's endpoint: Streamable HTTP (`http://127.0.0.1:3001/mcp`,
    /// `https://mcp.example.com/mcp`) or, with `transport: sse`, a legacy SSE endpoint. Exactly
    /// one of `url` and `command`.
    #[serde(default)]
    pub url: Option<String>,
    /// `streamable-http` (default) or `sse` (the 2024-11-05 HTTP+SSE transport). Only with `url`.
    #[serde(default)]
    pub transport: Option<String>,
    /// TLS for `https://` URLs: extra CA bundle, client certificate.
    #[serde(default)]
    pub tls: Option<RawTls>,
    /// A stdio server the gateway starts itself, e.g. `npx`. Exactly one of `url` and `command`.
    #[serde(default)]
    pub command: Option<String>,
    /// The stdio server's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables set for the stdio server, on top of the gateway's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The stdio server's working directory. Default: the gateway's.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// How the stdio server's processes are shared, capped and reaped.
    #[serde(default)]
    pub processes: Option<RawProcesses>,
    /// The `--upstream` flag this entry came from, parsed when validated
    /// ([`upstream_flag`](super::upstream_flag)).
    #[serde(skip)]
    pub flag: Option<String>,
    /// `forward` (default: the client's `Authorization` passes through) or
    /// `{ replace: { env: VAR } }` / `{ replace: { file: PATH } }` (the client's is dropped and the
    /// gateway's own credential is sent instead).
    #[serde(default)]
    pub auth: Option<RawAuth>,
    /// TCP connect timeout. Default `5s`.
    #[serde(default)]
    pub connect_timeout: Option<String>,
    /// Time until the upstream's response headers. Default `60s`.
    #[serde(default)]
    pub response_timeout: Option<String>,
    /// Largest non-streamed upstream response. Default `16MiB`.
    #[serde(default)]
    pub max_response_bytes: Option<RawSize>,
}

/// `forward`, or `{ replace: { env: VAR } }` / `{ replace: { file: PATH } }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawAuth {
    Mode(String),
    Replace(RawReplaceAuth),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplaceAuth {
    pub replace: RawCredential,
}

/// The gateway's own `Authorization` value, from an environment variable or a file (such as a
/// mounted Kubernetes secret; surrounding whitespace is trimmed). Exactly one of the two.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawCredential {
    pub env: Option<String>,
    pub file: Option<std::path::PathBuf>,
}

/// `tls:` of an `https://` upstream. Every file is read and checked at start-up.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTls {
    /// Trust anchors besides `ca_file`: `webpki` (default: Mozilla's roots, built in, the same
    /// on every machine), `system` (the operating system's store, read at start-up) or `none`
    /// (only `ca_file`).
    pub roots: Option<String>,
    /// PEM bundle of extra CA certificates, e.g. a private CA.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for upstreams that require mTLS. Needs `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
}

/// `processes:` of a stdio upstream.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawProcesses {
    /// `per-session` (default: one process per client session) or `shared`.
    pub sharing: Option<String>,
    /// Most processes alive at once. Default `64`.
    pub max: Option<usize>,
    /// A session idle this long is ended and its process stopped. Default `10m`.
    pub idle_timeout: Option<String>,
}

impl RawUpstream {
    /// The environment variable holding the gateway's own credential for this upstream, if
    /// one does: a stdio upstream's program must not inherit it.
    pub(super) fn credential_variable(&self) -> Option<&str> {
        match &self.auth {
            Some(RawAuth::Replace(RawReplaceAuth { replace })) => replace.env.as_deref(),
            _ => None,
        }
    }

    pub(super) fn validate(mut self) -> anyhow::Result<(Route, LegacySetting)> {
        let legacy = match self.legacy_sse_path.take() {
            None => LegacySetting::Default,
            Some(off) if off == "off" => LegacySetting::Off,
            Some(path) => {
                check_path(&path).context("legacy_sse_path")?;
                LegacySetting::Path(path)
            }
        };
        if let Some(flag) = self.flag.take() {
            super::upstream_flag::apply(&flag, &mut self)?;
        }
        let (transport, url) = self.transport_and_url()?;
        let scheme = url.scheme().cloned().unwrap_or(Scheme::HTTP);
        let authority = url.authority().cloned().context("url has no host")?;
        let tls = self.tls_settings(&scheme)?;
        let path = match self.path {
            Some(path) => path,
            None if matches!(transport, Transport::Stdio(_)) => "/mcp".to_owned(),
            None => url.path().to_owned(),
        };
        check_path(&path)?;
        let name = self.name.unwrap_or_else(|| "default".to_owned());
        ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)),
            "name `{name}` must use only letters, digits, `_`, `.` and `-`"
        );
        let auth = match self.auth {
            None => UpstreamAuth::Forward,
            Some(RawAuth::Mode(mode)) if mode == "forward" => UpstreamAuth::Forward,
            Some(RawAuth::Mode(mode)) => {
                bail!("auth must be `forward` or `{{ replace: {{ env: VAR }} }}`, not `{mode}`")
            }
            Some(RawAuth::Replace(RawReplaceAuth { replace })) => {
                let value = match (replace.env, replace.file) {
                    (Some(env), None) => std::env::var(&env).with_context(|| {
                        format!("auth.replace.env: environment variable {env} is not set")
                    })?,
                    (None, Some(file)) => std::fs::read_to_string(&file)
                        .with_context(|| format!("auth.replace.file: reading {}", file.display()))?
                        .trim()
                        .to_owned(),
                    _ => bail!("auth.replace needs exactly one of `env` or `file`"),
                };
                let mut value = http::HeaderValue::try_from(value)
                    .context("auth.replace: the credential is not a valid header value")?;
                value.set_sensitive(true);
                UpstreamAuth::Replace(Secret(value))
            }
        };
        let route = Route {
            path,
            legacy: None,
            upstream: Upstream {
                name,
                transport,
                scheme,
                authority,
                url,
                tls,
                auth,
                connect_timeout: duration(
                    self.connect_timeout.as_deref(),
                    "5s",
                    "connect_timeout",
                )?,
                response_timeout: duration(
                    self.response_timeout.as_deref(),
                    "60s",
                    "response_timeout",
                )?,
                max_response_bytes: size(self.max_response_bytes, 16 << 20, "max_response_bytes")?,
            },
        };
        Ok((route, legacy))
    }
}

/// A path the gateway can match byte-exactly and nothing in front of it reads differently.
pub(super) fn check_path(path: &str) -> anyhow::Result<()> {
    ensure!(
        path.starts_with('/')
            && !path.contains(['?', '#', '%', '\\', ';'])
            && !path.contains("//")
            && !path
                .split('/')
                .any(|segment| segment == "." || segment == ".."),
        "path `{path}` must be a plain absolute path such as /mcp"
    );
    Ok(())
}

impl RawUpstream {
    /// Which transport, and the URL requests carry (a placeholder for stdio).
    fn transport_and_url(&mut self) -> anyhow::Result<(Transport, Uri)> {
        let stdio_only = !self.args.is_empty()
            || !self.env.is_empty()
            || self.cwd.is_some()
            || self.processes.is_some();
        match (self.url.take(), self.command.take()) {
            (Some(_), Some(_)) => bail!("give either `url` or `command`, not both"),
            (None, None) => bail!(
                "give `url` (an HTTP or SSE server) or `command` (a stdio server the gateway starts)"
            ),
            (Some(text), None) => {
                ensure!(
                    !stdio_only,
                    "`args`, `env`, `cwd` and `processes` belong to stdio upstreams (`command`)"
                );
                let url: Uri = text
                    .parse()
                    .with_context(|| format!("url `{text}` is not a valid URL"))?;
                let scheme = url
                    .scheme()
                    .context("url must be absolute (http://host:port/path)")?;
                ensure!(
                    *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS,
                    "url `{text}`: the scheme must be http:// or https://"
                );
                ensure!(url.authority().is_some(), "url `{text}` has no host");
                ensure!(url.query().is_none(), "url must not have a query string");
                let transport = match self.transport.as_deref() {
                    None | Some("streamable-http") => Transport::StreamableHttp,
                    Some("sse") => Transport::LegacySse,
                    Some(other) => {
                        bail!("transport must be `streamable-http` or `sse`, not `{other}`")
                    }
                };
                Ok((transport, url))
            }
            (None, Some(program)) => {
                ensure!(
                    self.transport.is_none(),
                    "`transport` is for `url` upstreams; a `command` upstream speaks stdio"
                );
                ensure!(self.tls.is_none(), "`tls` is for https:// upstreams");
                ensure!(!program.trim().is_empty(), "`command` must not be empty");
                let processes = self.processes.take().unwrap_or_default();
                let sharing = match processes.sharing.as_deref() {
                    None | Some("per-session") => ProcessSharing::PerSession,
                    Some("shared") => ProcessSharing::Shared,
                    Some(other) => {
                        bail!("processes.sharing must be `per-session` or `shared`, not `{other}`")
                    }
                };
                let command = StdioCommand {
                    program,
                    args: std::mem::take(&mut self.args),
                    env: std::mem::take(&mut self.env).into_iter().collect(),
                    // Filled in once every upstream is known (`Config::validate`).
                    withheld_env: Vec::new(),
                    cwd: self.cwd.take(),
                    sharing,
                    max_processes: nonzero(processes.max.unwrap_or(64), "processes.max")?,
                    idle_timeout: duration(
                        processes.idle_timeout.as_deref(),
                        "10m",
                        "processes.idle_timeout",
                    )?,
                };
                let url = Uri::from_static("http://stdio.invalid/");
                Ok((Transport::Stdio(command), url))
            }
        }
    }

    fn tls_settings(&mut self, scheme: &Scheme) -> anyhow::Result<TlsSettings> {
        let Some(raw) = self.tls.take() else {
            return Ok(TlsSettings::default());
        };
        ensure!(
            *scheme == Scheme::HTTPS,
            "`tls` is for https:// upstreams only"
        );
        let client_cert = match (raw.client_cert, raw.client_key) {
            (None, None) => None,
            (Some(cert_file), Some(key_file)) => Some(ClientCertificate {
                cert_file,
                key_file,
            }),
            _ => bail!("tls.client_cert and tls.client_key go together"),
        };
        let roots = match raw.roots.as_deref() {
            None | Some("webpki") => TlsRoots::Webpki,
            Some("system") => TlsRoots::System,
            Some("none") => TlsRoots::CaFileOnly,
            Some(other) => bail!("tls.roots must be `webpki`, `system` or `none`, not `{other}`"),
        };
        Ok(TlsSettings::load(roots, raw.ca_file, client_cert)?)
    }
}
