//! A real `redis-server` for tests that share state between gateways: its own free port, empty,
//! killed on drop (no fixed ports, no shared server).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

use crate::free_port;

/// A running `redis-server` (binary from `REDIS_SERVER`, else `PATH`;
/// `scripts/install-test-tools.sh` installs it).
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    pub async fn start() -> Self {
        let mut last_error = String::new();
        // A free port can be taken between the probe and redis-server's bind; try another.
        for _ in 0..5 {
            let mut server = Self {
                port: free_port(),
                child: None,
            };
            match server.spawn().await {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server and waits until it is gone; clients see connection errors.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let binary = std::env::var_os("REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        let mut child = Command::new(&binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction"])
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
