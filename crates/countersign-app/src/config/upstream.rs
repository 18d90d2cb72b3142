//! One `upstreams:` entry: where the upstream is, how the gateway authenticates to it, and its
//! timeouts and response limit.

use anyhow::{Context, bail, ensure};
use countersign_proxy::config::{Route, Secret, Upstream, UpstreamAuth};
use http::Uri;
use http::uri::Scheme;

use super::{RawAuth, RawReplaceAuth, RawUpstream, duration, size};

impl RawUpstream {
    pub(super) fn validate(self) -> anyhow::Result<Route> {
        let url: Uri = self
            .url
            .parse()
            .with_context(|| format!("url `{}` is not a valid URL", self.url))?;
        let scheme = url
            .scheme()
            .cloned()
            .context("url must be absolute (http://host:port/path)")?;
        ensure!(
            scheme == Scheme::HTTP,
            "url `{}`: only http:// upstreams are supported so far (put the gateway beside the server, \
             e.g. as a sidecar, or terminate TLS in front of the upstream)",
            self.url
        );
        let authority = url.authority().cloned().context("url has no host")?;
        ensure!(url.query().is_none(), "url must not have a query string");
        let path = match self.path {
            Some(path) => path,
            None => url.path().to_owned(),
        };
        ensure!(
            path.starts_with('/')
                && !path.contains(['?', '#', '%', '\\', ';'])
                && !path.contains("//")
                && !path
                    .split('/')
                    .any(|segment| segment == "." || segment == ".."),
            "path `{path}` must be a plain absolute path such as /mcp"
        );
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
        Ok(Route {
            path,
            upstream: Upstream {
                name,
                scheme,
                authority,
                url,
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
        })
    }
}
