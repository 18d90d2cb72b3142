//! The requests of one relayed POST stream still waiting for their response, so that a stream
//! the gateway has to cut (an oversized event, a failed upstream body) still ends with an answer
//! to every one of them instead of a silent end the client waits on until its timeout.

use countersign_jsonrpc::message::{RequestId, answer_id, error_response};
use countersign_jsonrpc::sse::SseEvent;
use smallvec::SmallVec;

use crate::error::ProxyError;

/// Ids of the forwarded requests whose responses have not passed yet.
#[derive(Debug, Default)]
pub struct PendingAnswers {
    /// Inline for the usual one request: every forwarded POST makes one of these, and a `Vec`
    /// was an allocation per call.
    ids: SmallVec<[RequestId; 1]>,
}

impl PendingAnswers {
    pub fn new(ids: impl IntoIterator<Item = RequestId>) -> Self {
        Self {
            ids: ids.into_iter().collect(),
        }
    }

    /// Notes one relayed message: a response to a pending request settles it.
    pub fn saw(&mut self, data: &str) {
        // Cheap filter first: only responses settle anything, and most events on a call's
        // stream before its answer are notifications.
        if self.ids.is_empty() || !(data.contains("\"result\"") || data.contains("\"error\"")) {
            return;
        }
        // The id alone, without parsing (and copying) what may be a 16 MiB result.
        self.settle(answer_id(data).as_ref());
    }

    /// Notes the answer to `id`, when a relayed message was one.
    pub fn settle(&mut self, id: Option<&RequestId>) {
        if let Some(id) = id {
            self.ids.retain(|pending| pending != id);
        }
    }

    /// One `event: message` per unanswered request carrying `error` as its JSON-RPC error, for
    /// the end of a stream that is cut; empty when nothing is pending.
    pub fn answer_all(&mut self, error: &ProxyError) -> Vec<u8> {
        let mut out = Vec::new();
        for id in self.ids.drain(..) {
            let body = error_response(Some(&id), error.jsonrpc_code(), error.to_string(), None);
            let json = String::from_utf8(body).expect("the gateway's JSON is UTF-8");
            SseEvent::message(&json).encode(&mut out);
        }
        out
    }
}
