//! The connection pool of plain `http://` upstreams: HTTP/1.1 connections spoken by the
//! gateway itself (`http1_wire.rs`, `http1_conn.rs`), each held by the request that uses it
//! until its response body has ended exactly, then handed back.
//!
//! hyper-util's pooled client did more per request than this gateway needs: a pool lookup keyed
//! by scheme and authority, hashed with SipHash, under a lock; a connector call; a timer of its
//! own; and, whenever a connection was not ready again the moment its response head arrived, a
//! spawned task to wait for it. Here the pool knows its one upstream, and a connection goes back
//! when the body that used it ends, which is when HTTP/1.1 can send on it again.
//!
//! Idle connections are kept per connection worker (`crate::workers`): a connection's I/O task
//! runs on the worker that opened it, and a request reusing it from another worker would wake
//! that task across threads on every request and answer.
//!
//! A connection that was idle can have been closed by the upstream just as a request is sent.
//! One found closed before the request is written, or whose write fails before a byte of it
//! went out, is replaced and the request sent on another; a request that was written is never
//! resent, since a `tools/call` is not idempotent.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::failure::HeadOverdue;
use super::http1_conn::{Connection, WireBody, WriteFailure};
use super::http1_wire::{Head, encode_request};
use crate::body::BoxError;
use crate::config::Upstream;
use crate::workers;

/// Idle connections kept per worker; beyond this, a connection whose response ended is closed.
const MAX_IDLE: usize = 256;
/// Idle lists per pool: one per worker up to this many workers. Past it, workers share lists and
/// may take a connection another worker opened: slower (its readiness is reported by the worker
/// that opened it), never wrong.
const IDLE_LISTS: usize = 64;

/// An idle connection older than this is closed rather than used: a middlebox may have dropped
/// it silently, and a request sent on it would wait out the response timeout.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Room for a request's line and headers, reserved with its body's length so the whole request
/// is one buffer, one write.
pub(super) const WIRE_HEAD_ROOM: usize = 512;

/// The pool of one plain upstream.
#[derive(Debug, Clone)]
pub(super) struct Http1Pool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// `host:port`, what a connection is opened to.
    address: String,
    connect_timeout: Duration,
    /// Per worker, most recently used last: the next request takes the warmest connection
    /// driven by its own worker. A lock per list, each on cache lines of its own: with one lock
    /// for all of them, every worker wrote the same line twice a request (checkout and give
    /// back), and the line moved between cores at each.
    idle: Box<[IdleList]>,
}

/// One worker's idle connections.
#[derive(Debug, Default)]
#[repr(align(128))]
struct IdleList(Mutex<Vec<Idle>>);

#[derive(Debug)]
struct Idle {
    connection: Connection,
    since: Instant,
}

/// A connection lent to one response; it goes back to the pool once that response's body has
/// ended ([`Lent::give_back`]), and is closed if the body is dropped before that.
#[derive(Debug)]
pub(super) struct Lent {
    pool: Arc<Shared>,
    connection: Connection,
    /// The worker whose thread reads and writes the connection.
    worker: usize,
}

impl Lent {
    pub(super) fn connection(&mut self) -> &mut Connection {
        &mut self.connection
    }

    /// Bytes read from the connection and not handed on yet.
    pub(super) fn buffered(&self) -> usize {
        self.connection.buffered()
    }

    /// The response body ended: the connection can carry the next request.
    pub(super) fn give_back(self) {
        let Lent {
            pool,
            connection,
            worker,
        } = self;
        // Whether the upstream closed it meanwhile is checked when it is next taken.
        if connection.has_unasked_bytes() {
            return;
        }
        let now = now();
        let mut idle = pool.idle_of(worker);
        expire(&mut idle, now);
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                connection,
                since: now,
            });
        }
    }
}

/// A connection could not be opened: the text says to where, the source says why.
#[derive(Debug, thiserror::Error)]
#[error("tcp connect error to {address}")]
struct ConnectError {
    address: String,
    #[source]
    source: std::io::Error,
}

impl Http1Pool {
    pub(super) fn new(upstream: &Upstream) -> Self {
        let url = &upstream.url;
        let host = url.host().unwrap_or_default();
        let port = url.port_u16().unwrap_or(80);
        // `Uri::host` keeps an IPv6 literal's brackets, which is what `host:port` needs.
        let address = format!("{host}:{port}");
        Self {
            shared: Arc::new(Shared {
                address,
                connect_timeout: upstream.connect_timeout,
                idle: (0..IDLE_LISTS).map(|_| IdleList::default()).collect(),
            }),
        }
    }

    /// Opens one TCP connection and closes it: the probe's check, which sends nothing.
    pub(super) async fn connect_only(&self) -> Result<(), BoxError> {
        self.shared.open_stream().await.map(drop)
    }

    /// Sends `request` to this pool's upstream (the URI's scheme and authority are the
    /// caller's to check: only its path and query are sent) on an idle connection or a new one;
    /// resolves with the response head and the body that reads the rest from the connection.
    /// The response head must arrive by `by`, or the request fails with [`HeadOverdue`].
    pub(super) async fn send(
        &self,
        request: Request<Full<Bytes>>,
        by: Instant,
    ) -> Result<Response<WireBody>, BoxError> {
        let (parts, body) = request.into_parts();
        let body = body
            .collect()
            .now_or_never()
            .map(|collected| collected.map(|whole| whole.to_bytes()))
            .unwrap_or_else(|| Ok(Bytes::new()))
            .unwrap_or_else(|never| match never {});
        let mut wire = Vec::with_capacity(WIRE_HEAD_ROOM + body.len());
        encode_request(&Request::from_parts(parts, ()), &body, &mut wire);
        self.send_wire(wire, by).await
    }

    /// Sends a request already written as HTTP/1.1 (`wire`); resolves once the response head
    /// arrived, which must be by `by` (or the request fails with [`HeadOverdue`]).
    pub(super) async fn send_wire(
        &self,
        wire: Vec<u8>,
        by: Instant,
    ) -> Result<Response<WireBody>, BoxError> {
        loop {
            let worker = workers::current_index();
            let (mut connection, reused) = match self.checkout(worker) {
                Some(connection) => (connection, true),
                None => {
                    // Boxed: the rare branch, whose state would otherwise size every send's.
                    let opened =
                        Box::pin(tokio::time::timeout_at(by, self.shared.open_stream())).await;
                    (Connection::new(opened.map_err(|_| HeadOverdue)??), false)
                }
            };
            match connection.write_request(&wire, by).await {
                Ok(()) => {}
                // Closed under it before any of the request went out: another one may do.
                Err(WriteFailure {
                    unsent: true,
                    error,
                }) if reused && !error.is::<HeadOverdue>() => {
                    continue;
                }
                Err(failure) => return Err(failure.error),
            }
            let Head {
                response,
                framing,
                reusable,
            } = connection.read_head(by).await?;
            let lent = Lent {
                pool: self.shared.clone(),
                connection,
                worker,
            };
            return Ok(response.map(|()| WireBody::new(lent, framing, reusable)));
        }
    }

    /// The most recently used idle connection of `worker` that is still open and not too old.
    fn checkout(&self, worker: usize) -> Option<Connection> {
        let now = now();
        let mut idle = self.shared.idle_of(worker);
        expire(&mut idle, now);
        while let Some(Idle { connection, since }) = idle.pop() {
            if !connection.is_closed(now.saturating_duration_since(since)) {
                return Some(connection);
            }
        }
        None
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.shared
            .idle
            .iter()
            .map(|list| list.0.lock().unwrap().len())
            .sum()
    }
}

impl Shared {
    /// The idle connections of `worker`, locked.
    fn idle_of(&self, worker: usize) -> MutexGuard<'_, Vec<Idle>> {
        let list = &self.idle[worker % self.idle.len()];
        list.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn open_stream(&self) -> Result<TcpStream, BoxError> {
        let opened = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.address))
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                ))
            });
        let stream = opened.map_err(|source| ConnectError {
            address: self.address.clone(),
            source,
        })?;
        // Requests and answers are small and latency-bound.
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// Drops the idle connections older than [`IDLE_TIMEOUT`]: the front of the list, which holds
/// the least recently used.
fn expire(idle: &mut Vec<Idle>, now: Instant) {
    let fresh = idle
        .iter()
        .position(|entry| now.saturating_duration_since(entry.since) < IDLE_TIMEOUT)
        .unwrap_or(idle.len());
    idle.drain(..fresh);
}

// Pool bookkeeping, not request timing: tokio's clock, so paused-time tests move it too.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

#[cfg(test)]
#[path = "http1_pool_tests.rs"]
mod tests;
