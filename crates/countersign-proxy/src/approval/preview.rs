//! A dry run the policy asked for (`preview: {arguments: {dry_run: true}}`): the tool is called
//! with those extra arguments first and its text shown with the question. A preview that fails
//! is answered as it is, without asking: there is nothing sound to approve.

use countersign_jsonrpc::mcp::encode_header_value;
use countersign_jsonrpc::message::{Message, Request, RequestId};
use countersign_jsonrpc::{ObjectWriter, RawJson};
use countersign_policy::Method;
use http::{HeaderValue, StatusCode};
use serde_json::Value;

use super::answer::Answer;
use super::context::Gated;
use crate::catalog::stateless_meta;
use crate::upstream::{call as call_upstream, upstream_request};
use crate::wire::REQUEST_ID_PREFIX;
use crate::wire::{MCP_METHOD, MCP_NAME};

/// The preview's text, `None` when the rule asks for none, or the answer to give instead.
pub(super) async fn run(
    gated: &Gated,
    call: &Request,
    arguments: &RawJson,
) -> Result<Option<String>, Answer> {
    let Some(extra) = gated
        .judged
        .decision
        .preview
        .as_ref()
        .and_then(|p| p.get("arguments"))
        .and_then(Value::as_object)
    else {
        return Ok(None);
    };
    if gated.method() != Method::ToolsCall {
        return Ok(None);
    }
    // The call's arguments, the policy's extra ones overriding: spliced as text, in order.
    let mut preview_arguments = ObjectWriter::with_capacity(arguments.len());
    for (key, value) in arguments.members().into_iter().flatten() {
        if !extra.contains_key(key.as_ref()) {
            preview_arguments.push(&key, &value);
        }
    }
    for (key, value) in extra {
        preview_arguments.push(key, &value.into());
    }
    let id = RequestId::String(format!(
        "{REQUEST_ID_PREFIX}preview-{}",
        uuid::Uuid::new_v4()
    ));
    let mut params = ObjectWriter::new();
    params.push("name", &RawJson::string(gated.target()));
    params.push("arguments", &preview_arguments.finish());
    let mut mirrored = Vec::new();
    if let Some(meta) = stateless_meta(call.params.as_ref()) {
        params.push("_meta", &meta);
        mirrored.push((MCP_METHOD, HeaderValue::from_static("tools/call")));
        if let Ok(name) = HeaderValue::try_from(encode_header_value(gated.target()).as_ref()) {
            mirrored.push((MCP_NAME, name));
        }
    }
    let body = Message::Request(Request {
        id: id.clone(),
        method: "tools/call".into(),
        params: Some(params.finish().into()),
    })
    .to_vec();
    let route = &gated.route;
    let request = upstream_request(
        &route.upstream,
        http::Method::POST,
        &gated.parts.headers,
        bytes::Bytes::from(body),
        &mirrored,
    );
    let max_event_bytes = gated.approvals.settings.max_event_bytes;
    match call_upstream(
        &route.upstream,
        &route.client,
        request,
        &id,
        max_event_bytes,
    )
    .await
    {
        Ok(Ok(result)) if result.get("isError") != Some(&Value::Bool(true)) => {
            let text: Vec<&str> = result
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect();
            gated.audit("decision", "previewed", None, None, None);
            Ok(Some(text.join("\n")))
        }
        Ok(Ok(failed)) => {
            gated.audit("outcome", "preview_failed", None, None, None);
            Err(Answer::Result(Value::Object(failed).into()))
        }
        Ok(Err(error)) => {
            gated.audit("outcome", "preview_failed", None, None, None);
            Err(Answer::Error {
                status: StatusCode::OK,
                code: error.code,
                message: error.message,
                data: error.data.map_or(Value::Null, |data| data.to_value()),
            })
        }
        Err(error) => Err(Answer::Refuse(error)),
    }
}
