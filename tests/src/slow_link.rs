//! A TCP relay that delays every chunk it passes on, in both directions: a dependency (Redis)
//! reached over a slow network, so that a test can see what a replica does while its writes
//! are still in flight.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Listens on a free loopback port and relays each connection to `target`, each chunk
/// arriving `delay` after it was sent; stops relaying when dropped.
#[derive(Debug)]
pub struct SlowLink {
    port: u16,
    acceptor: JoinHandle<()>,
}

impl SlowLink {
    pub async fn start(target_port: u16, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the slow link");
        let port = listener.local_addr().expect("local address").port();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(relay(client_read, server_write, delay));
                tokio::spawn(relay(server_read, client_write, delay));
            }
        });
        Self { port, acceptor }
    }

    /// The Redis URL that reaches the target through this link.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read. Chunks read in the
/// meantime are delayed from their own arrival, not queued behind each other's delay, as on
/// a link with latency but bandwidth to spare.
async fn relay(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (chunks, mut delayed) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = delayed.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buffer = vec![0; 64 * 1024];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let due = tokio::time::Instant::now() + delay;
        if chunks.send((due, buffer[..read].to_vec())).is_err() {
            break;
        }
    }
    drop(chunks);
    let _ = writer.await;
}
