//! How the gateway reaches one upstream: over Streamable HTTP (plain or TLS), over the legacy
//! 2024-11-05 HTTP+SSE transport, or by spawning a local stdio program.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use http::Uri;
use http::uri::{Authority, Scheme};

/// How the gateway reaches one upstream MCP server.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Name used in logs, metrics and policy rules.
    pub name: String,
    /// What kind of server it is and how it is reached.
    pub transport: Transport,
    /// The URL every request to it carries. For HTTP upstreams the endpoint itself (requests
    /// always go here, whatever the client asked for); for the legacy SSE transport its SSE
    /// endpoint; for stdio a placeholder `http://stdio.invalid/` that never reaches a network.
    pub url: Uri,
    pub scheme: Scheme,
    /// Sent as `Host` so upstreams with DNS-rebinding protection accept the gateway.
    pub authority: Authority,
    /// TLS settings for `https://` URLs; unused otherwise.
    pub tls: TlsSettings,
    pub auth: UpstreamAuth,
    /// Time allowed for the TCP connection to the upstream (or for a stdio program to start).
    pub connect_timeout: Duration,
    /// Time allowed until the upstream's response headers arrive.
    pub response_timeout: Duration,
    /// Largest non-streaming response body accepted from the upstream.
    pub max_response_bytes: NonZeroUsize,
}

/// The transport an upstream speaks.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Streamable HTTP (2025-03-26 and later) at `url`.
    StreamableHttp,
    /// The 2024-11-05 HTTP+SSE transport: `url` is the SSE endpoint; messages go to the endpoint
    /// its `endpoint` event announces.
    LegacySse,
    /// A local program speaking MCP on its stdin and stdout.
    Stdio(StdioCommand),
}

impl Transport {
    /// The transport's name in logs, `/readyz` and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::StreamableHttp => "streamable-http",
            Transport::LegacySse => "sse",
            Transport::Stdio(_) => "stdio",
        }
    }
}

/// The program behind a stdio upstream and how its processes are managed.
#[derive(Debug, Clone)]
pub struct StdioCommand {
    /// The program, looked up on `PATH` when it has no `/`.
    pub program: String,
    pub args: Vec<String>,
    /// Set on top of the gateway's own environment.
    pub env: Vec<(String, String)>,
    /// Variables of the gateway's environment the program must not get: those holding the
    /// gateway's upstream credentials (`auth.replace.env`). `COUNTERSIGN_*` never reach it
    /// either; `env` may still set any of them explicitly.
    pub withheld_env: Vec<String>,
    /// Working directory; default the gateway's.
    pub cwd: Option<PathBuf>,
    pub sharing: ProcessSharing,
    /// Most processes alive at once for this upstream.
    pub max_processes: NonZeroUsize,
    /// A session with no request and no open stream for this long is ended and its process
    /// stopped.
    pub idle_timeout: Duration,
}

/// Which client sessions share one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessSharing {
    /// One process per client session (2025-xx sessions), so no two users share server state.
    PerSession,
    /// One process for every client of the upstream.
    Shared,
}

/// TLS for `https://` upstreams: which certificates the upstream's must chain to, and the
/// gateway's own client certificate. Built by [`TlsSettings::load`], which reads and checks every
/// file at start-up, so a missing or malformed file is a configuration error, never a failed
/// request. The default trusts the built-in roots and presents no client certificate.
#[derive(Clone, Default)]
pub struct TlsSettings {
    /// The trust anchors besides `ca_file`.
    pub roots: TlsRoots,
    /// Extra trust anchors (PEM) on top of `roots`.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain and key (PEM) for upstreams that require mTLS.
    pub client_cert: Option<ClientCertificate>,
    /// The rustls configuration [`TlsSettings::load`] built from the fields above; `None` for
    /// the default, which needs no file.
    pub(crate) client_config: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The rustls configuration would print every trust anchor.
        f.debug_struct("TlsSettings")
            .field("roots", &self.roots)
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .finish_non_exhaustive()
    }
}

/// Where an `https://` upstream's trust anchors come from, besides `ca_file`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsRoots {
    /// Mozilla's root certificates compiled into the gateway (webpki-roots): the same trust on
    /// every machine, also in containers that have no CA store.
    #[default]
    Webpki,
    /// The operating system's trust store (rustls-native-certs, which honours `SSL_CERT_FILE`
    /// and `SSL_CERT_DIR`), read once at start-up: where IT installs a corporate CA.
    System,
    /// None: only `ca_file`, for upstreams that must present a certificate of a private CA.
    CaFileOnly,
}

/// A client certificate chain and its private key, both PEM files.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// What happens to the client's `Authorization` header.
#[derive(Debug, Clone)]
pub enum UpstreamAuth {
    /// Pass the client's credential through unchanged (drop-in URL swap).
    Forward,
    /// Drop the client's credential and send the gateway's own.
    Replace(Secret),
}

/// A header value that never shows up in `Debug` output or logs.
#[derive(Clone)]
pub struct Secret(pub http::HeaderValue);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}
