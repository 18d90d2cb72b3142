//! One `upstreams:` entry: where the upstream is, how the gateway authenticates to it, and its
//! timeouts and response limit.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use countersign_proxy::config::{
    ClientCertificate, LegacyPaths, ProcessSharing, Route, Secret, StdioCommand, TlsSettings,
    Transport, Upstream, UpstreamAuth,
};
use http::Uri;
use http::uri::Scheme;
use serde::Deserialize;

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

/// `tls:` of an `https://` upstream. The built-in roots (Mozilla's, from webpki-roots) are always
/// trusted; `ca_file` adds more.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTls {
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

/// What an entry asks for its legacy HTTP+SSE endpoints; [`legacy_endpoints`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LegacySetting {
    /// Beside the route's path, if free.
    Default,
    Off,
    Path(String),
}

impl RawUpstream {
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
fn check_path(path: &str) -> anyhow::Result<()> {
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

/// Gives each route the legacy HTTP+SSE endpoints `settings` ask for (one setting per route,
/// in order). Paths given in the configuration are claimed first and must be free; a default
/// that is taken is simply not served, so adding an upstream never fails for lack of one.
pub(super) fn legacy_endpoints(
    routes: &mut [Route],
    settings: &[LegacySetting],
) -> anyhow::Result<()> {
    let route_paths: Vec<String> = routes.iter().map(|r| r.path.clone()).collect();
    let mut claimed: Vec<String> = Vec::new();
    // Free for route `own`: no other route's path and no endpoint claimed already; the SSE
    // path may be the route's own.
    let free = |paths: &LegacyPaths, own: &str, claimed: &[String]| {
        let sse_free = paths.sse == own || !route_paths.contains(&paths.sse);
        let messages_free = !route_paths.contains(&paths.messages);
        let unclaimed = !claimed.contains(&paths.sse) && !claimed.contains(&paths.messages);
        sse_free && messages_free && unclaimed && paths.sse != paths.messages
    };
    for (i, (route, setting)) in routes.iter_mut().zip(settings).enumerate() {
        if let LegacySetting::Path(path) = setting {
            let paths = LegacyPaths::new(path);
            ensure!(
                free(&paths, &route.path, &claimed),
                "upstreams[{i}]: legacy_sse_path {} (messages at {}) is already used by another \
                 endpoint of the gateway",
                paths.sse,
                paths.messages
            );
            claimed.extend([paths.sse.clone(), paths.messages.clone()]);
            route.legacy = Some(paths);
        }
    }
    for (route, setting) in routes.iter_mut().zip(settings) {
        if *setting == LegacySetting::Default {
            let paths = LegacyPaths::new(&default_sse_path(&route.path));
            if free(&paths, &route.path, &claimed) {
                claimed.extend([paths.sse.clone(), paths.messages.clone()]);
                route.legacy = Some(paths);
            }
        }
    }
    Ok(())
}

/// `/sse` beside `path`, where a legacy client's configuration most likely points: `/mcp` →
/// `/sse`, `/a/mcp` → `/a/sse`; a path that ends in `/sse` already (a legacy server's URL,
/// swapped for the gateway's) is its own; any other path gets `/sse` appended.
fn default_sse_path(path: &str) -> String {
    if path.ends_with("/sse") {
        path.to_owned()
    } else if let Some(parent) = path.strip_suffix("/mcp") {
        format!("{parent}/sse")
    } else {
        format!("{}/sse", path.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(path: &str) -> Route {
        let mut raw = RawUpstream {
            url: Some(format!("http://127.0.0.1:3001{path}")),
            name: Some(path.replace('/', "_")),
            ..RawUpstream::default()
        };
        raw.legacy_sse_path = None;
        raw.validate().expect("a valid upstream").0
    }

    fn resolve(paths: &[&str], settings: &[LegacySetting]) -> anyhow::Result<Vec<Option<String>>> {
        let mut routes: Vec<Route> = paths.iter().map(|p| route(p)).collect();
        legacy_endpoints(&mut routes, settings)?;
        Ok(routes
            .into_iter()
            .map(|r| r.legacy.map(|l| format!("{} {}", l.sse, l.messages)))
            .collect())
    }

    #[test]
    fn the_default_sits_beside_the_route_path() {
        use LegacySetting::Default;
        assert_eq!(
            resolve(
                &["/mcp", "/a/mcp", "/github", "/old/sse"],
                &[Default, Default, Default, Default]
            )
            .expect("valid"),
            [
                Some("/sse /sse/messages".to_owned()),
                Some("/a/sse /a/sse/messages".to_owned()),
                Some("/github/sse /github/sse/messages".to_owned()),
                Some("/old/sse /old/sse/messages".to_owned()),
            ]
        );
    }

    #[test]
    fn a_taken_default_is_off_and_a_taken_explicit_path_is_an_error() {
        use LegacySetting::{Default, Off, Path};
        // `/sse` is another route's path: the first route's default is not served.
        assert_eq!(
            resolve(&["/mcp", "/sse"], &[Default, Default]).expect("valid"),
            [None, Some("/sse /sse/messages".to_owned())]
        );
        // An explicit path wins over a default.
        assert_eq!(
            resolve(&["/mcp", "/b/mcp"], &[Default, Path("/sse".into())]).expect("valid"),
            [None, Some("/sse /sse/messages".to_owned())]
        );
        assert_eq!(resolve(&["/mcp"], &[Off]).expect("valid"), [None]);
        let error = resolve(&["/mcp", "/sse"], &[Path("/sse".into()), Default])
            .expect_err("another route's path");
        assert!(
            error.to_string().contains("legacy_sse_path /sse"),
            "{error}"
        );
        assert!(
            resolve(&["/mcp", "/sse/messages"], &[Default, Off]).expect("valid")[0].is_none(),
            "the messages path is another route's"
        );
    }
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
        Ok(TlsSettings {
            ca_file: raw.ca_file,
            client_cert,
        })
    }
}
