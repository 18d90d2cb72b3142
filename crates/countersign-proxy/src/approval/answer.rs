//! The gateway's own answers to requests it does not forward.

use bytes::Bytes;
use countersign_jsonrpc::message::{
    Message, RequestId, Response as JsonRpcResponse, compact_result_response, error_response,
};
use countersign_jsonrpc::{ObjectWriter, RawJson};
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
    /// A JSON-RPC result (an `input_required`, an upstream's preview failure), as text that
    /// may carry the client's own arguments spliced in.
    Result(RawJson),
    /// A held or refused `CallToolResult` the gateway writes itself (`results.rs`): compact,
    /// and without `resultType`.
    ToolResult(ObjectWriter),
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
            Answer::ToolResult(mut result) => {
                if asked.stateless {
                    // Known absent: appended without a walk of the result to look for it.
                    result.push("resultType", &RawJson::string("complete"));
                }
                let body = compact_result_response(asked.id.as_ref(), &result.finish());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::refusal::RefusalCode;
    use crate::approval::results::{Refusal, refused};
    use crate::testing::body_bytes;

    fn refusal() -> ObjectWriter {
        refused(
            &Refusal {
                code: RefusalCode::Replayed,
                tool: "wipe",
                upstream: "store",
                message: "already \"used\"\n".into(),
                rule: Some("default"),
            },
            false,
        )
    }

    #[tokio::test]
    async fn the_gateways_own_result_is_answered_as_any_result_would_be() {
        for stateless in [true, false] {
            let asked = Asked {
                method: "tools/call",
                id: Some(RequestId::from("call-1")),
                stateless,
            };
            let metrics = ProxyMetrics::unregistered();
            let written = Answer::ToolResult(refusal()).into_response(&asked, &metrics, "store");
            let general =
                Answer::Result(refusal().finish()).into_response(&asked, &metrics, "store");
            assert_eq!(written.status(), StatusCode::OK);
            assert_eq!(
                written.headers().get(header::CONTENT_TYPE),
                general.headers().get(header::CONTENT_TYPE)
            );
            let body = body_bytes(written).await;
            assert_eq!(body, body_bytes(general).await);
            let value: Value = serde_json::from_slice(&body).expect("json");
            let expected = stateless.then_some("complete");
            assert_eq!(value["result"]["resultType"].as_str(), expected, "{value}");
            assert_eq!(value["id"], "call-1");
        }
    }
}
