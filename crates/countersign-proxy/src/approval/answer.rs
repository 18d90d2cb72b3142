//! The gateway's own answers to requests it does not forward.

use bytes::Bytes;
use countersign_jsonrpc::RawJson;
use countersign_jsonrpc::message::{
    Message, RequestId, Response as JsonRpcResponse, error_response,
};
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::Value;

use crate::body::{ResponseBody, empty, full};
use crate::error::ProxyError;
use crate::metrics::ProxyMetrics;
use crate::parse::InspectedPost;

/// What the client asked for, kept for the answer after the payload has moved on.
#[derive(Debug, Clone)]
pub(super) struct Asked {
    pub(super) method: &'static str,
    pub(super) id: Option<RequestId>,
    /// MCP 2026-07-28: results say whether they are complete.
    pub(super) stateless: bool,
}

impl Asked {
    pub(super) fn of(post: &InspectedPost) -> Self {
        Self {
            method: post.method_label(),
            id: post.request_id().cloned(),
            stateless: post.stateless(),
        }
    }
}

/// An answer the approval layer gives itself.
#[derive(Debug)]
pub(super) enum Answer {
    /// A JSON-RPC result (a held or refused `CallToolResult`, an `input_required`), as text
    /// that may carry the client's own arguments spliced in.
    Result(RawJson),
    /// A JSON-RPC error, with its HTTP status.
    Error {
        status: StatusCode,
        code: i64,
        message: String,
        data: Value,
    },
    /// An answer to one of the gateway's questions was handed to its waiting stream (202).
    Accepted,
    /// Refused at the HTTP level.
    Refuse(ProxyError),
}

impl Answer {
    pub(super) fn into_response(
        self,
        asked: &Asked,
        metrics: &ProxyMetrics,
        label: &'static str,
    ) -> Response<ResponseBody> {
        let (status, body) = match self {
            Answer::Refuse(error) => {
                return error.answer(asked.id.as_ref(), metrics, label, asked.method);
            }
            Answer::Accepted => {
                metrics.record_request(label, asked.method, "answer_taken");
                let mut response = Response::new(empty());
                *response.status_mut() = StatusCode::ACCEPTED;
                return response;
            }
            Answer::Result(mut result) => {
                if asked.stateless {
                    result =
                        result.with_member_if_absent("resultType", &RawJson::string("complete"));
                }
                let body = Message::Response(JsonRpcResponse {
                    id: asked.id.clone(),
                    outcome: Ok(result),
                })
                .to_vec();
                (StatusCode::OK, Bytes::from(body))
            }
            Answer::Error {
                status,
                code,
                message,
                data,
            } => (
                status,
                Bytes::from(error_response(asked.id.as_ref(), code, message, Some(data))),
            ),
        };
        metrics.record_request(label, asked.method, "answered");
        let mut response = Response::new(full(body));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}
