//! A real `redis-server` per test, on a free port, killed on drop (no fixed ports,
//! tests that need Redis start their own).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use countersign_testkit::free_port;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

pub(crate) struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    pub(crate) async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts with extra `redis-server` arguments, such as `["--cluster-enabled", "yes"]`.
    pub(crate) async fn start_with(extra: &[&str]) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut last_error = String::new();
        // A free port can still be taken between the probe and redis-server's bind; try another.
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "countersign-store-redis-{}-{port}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).expect("create the server's directory");
            let mut server = Self {
                port,
                dir,
                extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
                child: None,
            };
            match server.spawn().await {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server and waits until it is gone.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts a fresh, empty server on the same port.
    pub(crate) async fn restart(&mut self) {
        self.stop().await;
        self.spawn()
            .await
            .expect("redis-server restarts on its port");
    }

    /// A plain connection for test set-up and fault injection.
    pub(crate) async fn admin(&self) -> ::redis::aio::MultiplexedConnection {
        ::redis::Client::open(self.url())
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin connection")
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let binary = std::env::var_os("REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        let mut child = Command::new(&binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run {binary:?}: {error}; run scripts/install-test-tools.sh or set \
                     REDIS_SERVER to a redis-server binary"
                )
            });
        for _ in 0..400 {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "redis-server on port {} exited: {status}",
                    self.port
                ));
            }
            if answers_ping(self.port).await {
                self.child = Some(child);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(format!("redis-server on port {} never answered", self.port))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn answers_ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0_u8; 7];
        stream.read_exact(&mut reply).await.ok()?;
        (&reply == b"+PONG\r\n").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(()))
    )
}
