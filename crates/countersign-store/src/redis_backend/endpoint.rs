//! Where Redis is and how to reach it: URL parsing (standalone and Cluster forms) and the
//! connection settings every backend shares.

use std::fmt;
use std::time::Duration;

use ::redis::aio::ConnectionManagerConfig;
use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
use ::redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo as _, ProtocolVersion};

use super::per_runtime::PerRuntime;
use super::{Commands, store_error};
use crate::StoreError;

/// A parsed Redis URL. Its `Display` leaves out credentials, so it can go into logs.
pub(super) struct Endpoint {
    target: Target,
    redacted: String,
}

enum Target {
    /// The command client (RESP3) and the subscriber's client (as configured).
    Standalone(Client, Client),
    /// The Cluster client, plus one plain client per seed node for the pub/sub subscriber
    /// (classic pub/sub messages reach every node of a Cluster, so any one will do).
    Cluster(ClusterClient, Vec<Client>),
}

impl Endpoint {
    /// Accepts `redis://`, `rediss://` (with the `redis-tls` feature), `unix://` and
    /// `redis+unix://` as redis-rs parses them, and
    /// `redis-cluster://[user:pass@]host:port[,host:port…][?node=host:port…]` (also
    /// `rediss-cluster://`) for Redis Cluster.
    pub(super) fn parse(url: &str, command_timeout: Duration) -> Result<Self, StoreError> {
        if let Some(cluster) = ClusterUrl::parse(url) {
            let cluster = cluster?;
            let nodes = cluster
                .node_urls()
                .map(|node| connection_info(&node))
                .collect::<Result<Vec<_>, _>>()?;
            ensure_crypto_provider(&nodes);
            let client = ClusterClientBuilder::new(nodes.clone())
                .use_protocol(ProtocolVersion::RESP3)
                // No retries: the library would resend a command whose connection dropped
                // mid-flight, and a resent `SET NX` reads nil after the first one landed.
                // MOVED/ASK/TRYAGAIN then surface as errors once, while the slot map refreshes.
                .retries(0)
                .connection_timeout(connection_timeout(command_timeout))
                .response_timeout(command_timeout)
                .tcp_settings(tcp_settings())
                .build()
                .map_err(invalid_url)?;
            let subscribers = nodes
                .into_iter()
                .map(Client::open)
                .collect::<Result<Vec<_>, _>>()
                .map_err(invalid_url)?;
            let redacted = format!(
                "{}://{}",
                if cluster.tls {
                    "rediss-cluster"
                } else {
                    "redis-cluster"
                },
                cluster.hosts.join(",")
            );
            return Ok(Self {
                target: Target::Cluster(client, subscribers),
                redacted,
            });
        }
        let info = connection_info(url)?;
        ensure_crypto_provider(std::slice::from_ref(&info));
        let redacted = redact(&info);
        let commands = Client::open(resp3(info.clone())).map_err(invalid_url)?;
        let subscriber = Client::open(info).map_err(invalid_url)?;
        Ok(Self {
            target: Target::Standalone(commands, subscriber),
            redacted,
        })
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(..))
    }

    /// Opens the command connection and checks it answers a `PING` within the time allowed for
    /// connecting and one command.
    pub(super) async fn connect(&self, command_timeout: Duration) -> Result<Commands, StoreError> {
        let commands = match &self.target {
            Target::Standalone(client, _) => {
                // One plain attempt first: the manager retries a failed connect quietly, so all
                // it could report is a timeout; this says why (refused, TLS, AUTH).
                let probe = client.get_multiplexed_async_connection();
                match tokio::time::timeout(connection_timeout(command_timeout), probe).await {
                    Ok(Ok(_probe)) => {}
                    Ok(Err(error)) => return Err(store_error(error)),
                    Err(_elapsed) => return Err(StoreError::Timeout),
                }
                Commands::Standalone(manager(client, command_timeout).map_err(store_error)?)
            }
            Target::Cluster(client, _) => {
                let connect = client.get_async_connection();
                match tokio::time::timeout(connection_timeout(command_timeout), connect).await {
                    Ok(connection) => Commands::Cluster(connection.map_err(store_error)?),
                    Err(_elapsed) => return Err(StoreError::Timeout),
                }
            }
        };
        // The manager connects on this first command: its TCP and TLS handshakes and the
        // client's own setup commands come first, which one command's timeout does not cover
        // on a slow link (start-up failed there at 250 ms). Connecting has its own allowance.
        ping(&commands, first_answer_timeout(command_timeout)).await?;
        Ok(commands)
    }

    /// [`Endpoint::connect`], and with it a connection of their own for the other runtimes
    /// that send commands ([`PerRuntime`]); a Cluster connection is shared by all.
    pub(super) async fn connect_per_runtime(
        &self,
        command_timeout: Duration,
    ) -> Result<PerRuntime, StoreError> {
        let shared = self.connect(command_timeout).await?;
        let client = match &self.target {
            Target::Standalone(client, _) => Some(client.clone()),
            Target::Cluster(..) => None,
        };
        Ok(PerRuntime::new(shared, client, command_timeout))
    }

    /// Clients for the pub/sub subscriber, tried in turn when one fails.
    pub(super) fn subscriber_clients(&self) -> Vec<Client> {
        match &self.target {
            Target::Standalone(_, client) => vec![client.clone()],
            Target::Cluster(_, clients) => clients.clone(),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

pub(super) async fn ping(commands: &Commands, timeout: Duration) -> Result<(), StoreError> {
    let reply: String = commands.query(&::redis::cmd("PING"), timeout).await?;
    if reply == "PONG" {
        Ok(())
    } else {
        Err(super::unexpected_reply("PING"))
    }
}

/// A standalone command connection that connects on its first command, on the runtime that
/// sends it, and reconnects in the background after a failure.
pub(super) fn manager(
    client: &Client,
    command_timeout: Duration,
) -> Result<::redis::aio::ConnectionManager, ::redis::RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connection_timeout(command_timeout)))
        .set_response_timeout(Some(command_timeout))
        // Reconnect attempts back off up to one second, so a restarted Redis is back in use
        // within about a second of accepting connections.
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_secs(1));
    ::redis::aio::ConnectionManager::new_lazy_with_config(client.clone(), config)
}

/// Connecting may take longer than one command (TCP and TLS handshakes, AUTH), but a caller
/// never waits for it longer than its command timeout: the attempt goes on in the background.
pub(super) fn connection_timeout(command_timeout: Duration) -> Duration {
    command_timeout.max(Duration::from_secs(1))
}

/// How long a caller waits for the first answer on a connection that is still to be made:
/// connecting, then one command (start-up's `PING`, the hand-over's subscription).
pub(super) fn first_answer_timeout(command_timeout: Duration) -> Duration {
    connection_timeout(command_timeout) + command_timeout
}

/// `TCP_NODELAY`, because every command is one small write waiting for its answer; keepalive
/// and (on Linux) `TCP_USER_TIMEOUT`, so a connection into a network black hole is dropped
/// and re-established instead of timing out every command forever.
fn tcp_settings() -> TcpSettings {
    let keepalive = TcpKeepalive::new().with_time(Duration::from_secs(10));
    #[cfg(target_os = "linux")]
    let keepalive = keepalive.with_interval(Duration::from_secs(5));
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(Duration::from_secs(10));
    settings
}

/// Command connections speak RESP3 (Redis 6+; PXAT and GETDEL need 6.2 anyway): a RESP3
/// connection reads from the socket even while idle, so the client notices a restarted Redis
/// and reconnects before the next command, instead of failing that command on a dead socket.
fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.set_redis_settings(settings)
}

fn connection_info(url: &str) -> Result<ConnectionInfo, StoreError> {
    url.into_connection_info()
        .map(|info| info.set_tcp_settings(tcp_settings()))
        .map_err(invalid_url)
}

/// The parse error only: redis-rs does not echo the URL, which may hold a password.
fn invalid_url(error: ::redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("invalid redis url: {error}"))
}

fn redact(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    let db = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}{db}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}{db}"),
        ConnectionAddr::Unix(path) => format!("unix://{}{db}", path.display()),
        _ => "redis://(unknown address)".to_owned(),
    }
}

/// rustls needs a process-wide crypto provider. Only ring is compiled in by this crate, but
/// if another crate also enables aws-lc-rs, rustls can no longer pick one by itself and would
/// panic on the first handshake; installing ring first (unless someone already installed a
/// provider) keeps `rediss://` working either way.
#[cfg(feature = "redis-tls")]
fn ensure_crypto_provider(nodes: &[ConnectionInfo]) {
    let tls = nodes
        .iter()
        .any(|node| matches!(node.addr(), ConnectionAddr::TcpTls { .. }));
    if tls && rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: some provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(not(feature = "redis-tls"))]
fn ensure_crypto_provider(_nodes: &[ConnectionInfo]) {}

/// `redis-cluster://[user:pass@]host:port[,host:port…][?node=host:port&node=…]`.
///
/// The `?node=` form is the one fred documents; the comma list is shorter on a command line.
/// Both may be mixed. There is no database path: Cluster only has database 0.
struct ClusterUrl {
    tls: bool,
    userinfo: Option<String>,
    hosts: Vec<String>,
}

impl ClusterUrl {
    /// `None` when `url` is not a Cluster URL at all.
    fn parse(url: &str) -> Option<Result<Self, StoreError>> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis-cluster://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss-cluster://") {
            (true, rest)
        } else {
            return None;
        };
        Some(Self::parse_rest(tls, rest))
    }

    fn parse_rest(tls: bool, rest: &str) -> Result<Self, StoreError> {
        let invalid = |why: &str| StoreError::Unavailable(format!("invalid redis url: {why}"));
        if rest.contains('#') {
            return Err(invalid("cluster urls take no fragment"));
        }
        let (authority_and_path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = authority_and_path
            .split_once('/')
            .unwrap_or((authority_and_path, ""));
        if !path.is_empty() {
            return Err(invalid("cluster urls take no database path"));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo.to_owned()), hosts),
            None => (None, authority),
        };
        let mut nodes: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("node", node)) => nodes.push(node.to_owned()),
                _ => return Err(invalid("the only cluster url parameter is node=host:port")),
            }
        }
        if nodes
            .iter()
            .any(|node| node.is_empty() || node.contains(['@', '/']))
        {
            return Err(invalid("empty or malformed cluster node"));
        }
        Ok(Self {
            tls,
            userinfo,
            hosts: nodes,
        })
    }

    fn node_urls(&self) -> impl Iterator<Item = String> + '_ {
        let scheme = if self.tls { "rediss" } else { "redis" };
        self.hosts.iter().map(move |host| match &self.userinfo {
            Some(userinfo) => format!("{scheme}://{userinfo}@{host}"),
            None => format!("{scheme}://{host}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(url: &str) -> Result<ClusterUrl, StoreError> {
        ClusterUrl::parse(url).expect("a cluster url")
    }

    #[test]
    fn cluster_urls_list_nodes_by_comma_or_node_parameter() {
        let url = cluster("redis-cluster://a:7000,b:7001?node=c:7002&node=d:7003")
            .expect("valid cluster url");
        assert!(!url.tls);
        assert_eq!(url.hosts, ["a:7000", "b:7001", "c:7002", "d:7003"]);
        assert_eq!(
            url.node_urls().collect::<Vec<_>>(),
            [
                "redis://a:7000",
                "redis://b:7001",
                "redis://c:7002",
                "redis://d:7003"
            ]
        );
    }

    #[test]
    fn cluster_credentials_apply_to_every_node() {
        let url = cluster("rediss-cluster://user:p%40ss@a:7000,b:7001").expect("valid");
        assert!(url.tls);
        assert_eq!(
            url.node_urls().collect::<Vec<_>>(),
            ["rediss://user:p%40ss@a:7000", "rediss://user:p%40ss@b:7001"]
        );
    }

    #[test]
    fn malformed_cluster_urls_are_refused() {
        for url in [
            "redis-cluster://",
            "redis-cluster://a:1,,b:2",
            "redis-cluster://a:1/0",
            "redis-cluster://a:1?db=1",
            "redis-cluster://a:1#insecure",
            "redis-cluster://a:1?node=x@y:2",
        ] {
            assert!(cluster(url).is_err(), "{url}");
        }
    }

    #[test]
    fn other_schemes_are_not_cluster_urls() {
        assert!(ClusterUrl::parse("redis://a:1").is_none());
        assert!(ClusterUrl::parse("rediss://a:1").is_none());
    }

    #[test]
    fn display_leaves_out_credentials() {
        let timeout = Duration::from_millis(100);
        let standalone =
            Endpoint::parse("redis://user:hunter2@127.0.0.1:6380/2", timeout).expect("valid");
        assert_eq!(standalone.to_string(), "redis://127.0.0.1:6380/2");
        let cluster = Endpoint::parse(
            "redis-cluster://:hunter2@127.0.0.1:7000,127.0.0.1:7001",
            timeout,
        )
        .expect("valid");
        assert_eq!(
            format!("{cluster:?}"),
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001"
        );
        assert!(cluster.is_cluster());
    }

    #[test]
    fn invalid_urls_are_refused_without_echoing_them() {
        let Err(StoreError::Unavailable(message)) =
            Endpoint::parse("http://user:hunter2@host", Duration::from_millis(100))
        else {
            panic!("an http url is not a redis url");
        };
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[cfg(not(feature = "redis-tls"))]
    #[test]
    fn tls_urls_need_the_tls_feature() {
        assert!(Endpoint::parse("rediss://127.0.0.1:6380", Duration::from_millis(100)).is_err());
    }
}
