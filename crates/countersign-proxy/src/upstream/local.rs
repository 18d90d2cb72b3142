//! Upstreams that are not Streamable HTTP servers themselves — stdio programs and legacy
//! HTTP+SSE servers — served to the rest of the gateway as if they were.
//!
//! The split: a [`Connector`] opens one [`Channel`] of JSON-RPC messages to one server instance
//! (a process, a legacy SSE connection); a [`LocalUpstream`] turns Streamable HTTP requests into
//! messages on channels and messages back into responses (sessions, streams, id routing).

use std::fmt;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Request, Response};
use http_body_util::Full;
use tokio::sync::mpsc;

use crate::body::ResponseBody;
use crate::error::ProxyError;

/// Serves Streamable HTTP requests in process, as an HTTP upstream would over the network.
pub trait LocalUpstream: Send + Sync + fmt::Debug {
    /// Answers one request (POST, GET or DELETE on the upstream's endpoint). Errors are the
    /// gateway's to answer the client with (cannot start, cannot reach, closed…).
    fn serve(
        &self,
        request: Request<Full<Bytes>>,
    ) -> BoxFuture<'static, Result<Response<ResponseBody>, ProxyError>>;

    /// What `/readyz` reports for this upstream.
    fn state(&self) -> UpstreamState;

    /// Ends every instance (processes, connections) and waits until they are gone.
    fn shutdown(&self) -> BoxFuture<'static, ()>;

    /// Checks that an instance can be started and answers, for the start-up log and
    /// `/readyz`: starts one, sends it an `initialize` (any answer will do) and stops it.
    fn probe(&self) -> BoxFuture<'static, Result<(), ProxyError>>;
}

/// Opens channels to new instances of one server.
pub trait Connector: Send + Sync + fmt::Debug + 'static {
    /// Opens one instance. `request` holds the headers of the client request that needs it
    /// (the session's `initialize`, the first request a shared instance serves; empty for the
    /// start-up probe): a connector that forwards credentials (`auth: forward`) takes them from
    /// there, a stdio one ignores them.
    fn open(&self, request: &http::HeaderMap) -> BoxFuture<'static, Result<Channel, ProxyError>>;
}

/// A duplex stream of JSON-RPC messages with one server instance. Dropping `instance` ends the
/// instance (kills the process group, closes the connection).
pub struct Channel {
    /// One serialized JSON-RPC message per item (compact: no line breaks), without a trailing
    /// newline.
    pub to_server: mpsc::Sender<Bytes>,
    /// One JSON-RPC message per item; ends when the instance is gone. A connector bounds each
    /// item by the upstream's `max_response_bytes`: an instance that sends more is ended.
    pub from_server: mpsc::Receiver<Bytes>,
    /// Keeps the instance alive; its `Drop` ends it.
    pub instance: Box<dyn Send + Sync>,
    /// For logs: the process id, or the connection's URL.
    pub describe: String,
    /// Resolves once the instance is gone — on its own, or after `instance` was dropped — to how
    /// it ended (`exit status: 1`), which the errors of the requests it left unanswered name.
    pub ended: BoxFuture<'static, String>,
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// An upstream's state as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamState {
    /// Taking requests.
    Ready,
    /// Not yet able to take requests: the first instance is starting.
    Starting,
    /// The last attempt failed, with why; requests get an error naming it until one succeeds.
    Failed(String),
}
