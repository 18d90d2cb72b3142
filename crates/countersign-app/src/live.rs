//! `countersign check --live`: lists an upstream's tools the way a client would — initialize,
//! `notifications/initialized`, every `tools/list` page, then end the session.

use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use countersign_proxy::ProxyMetrics;
use countersign_proxy::clock::{Clock, SystemClock};
use countersign_proxy::config::Upstream;
use countersign_proxy::upstream::{CallerContext, UpstreamClient, list_tools, upstream_request};
use http::{HeaderMap, HeaderValue, Method, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};

const MAX_EVENT_BYTES: usize = 16 << 20;

pub async fn live_tools(upstream: &Upstream) -> anyhow::Result<Vec<Value>> {
    // A stdio upstream is started for the listing, and stopped (its process group) after it.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let label: &'static str = Box::leak(upstream.name.clone().into_boxed_str());
    let client =
        UpstreamClient::for_upstream(upstream, label, &ProxyMetrics::unregistered(), &clock);
    let tools = list(upstream, &client).await;
    client.shutdown().await;
    tools
}

async fn list(upstream: &Upstream, client: &UpstreamClient) -> anyhow::Result<Vec<Value>> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    let initialize = json!({
        "jsonrpc": "2.0", "id": "countersign-check", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "countersign-check", "version": env!("CARGO_PKG_VERSION")}}
    });
    let request = upstream_request(
        upstream,
        Method::POST,
        &headers,
        Bytes::from(initialize.to_string()),
        &[],
    );
    let response = client.send(upstream, request).await.context("initialize")?;
    anyhow::ensure!(
        response.status().is_success(),
        "initialize answered HTTP {}",
        response.status()
    );
    if let Some(session) = response.headers().get("mcp-session-id").cloned() {
        headers.insert("mcp-session-id", session);
    }
    // The answer's body is not needed; drain it so the connection can be reused.
    let _ = response.into_body().collect().await;
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );

    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let request = upstream_request(
        upstream,
        Method::POST,
        &headers,
        Bytes::from(initialized.to_string()),
        &[],
    );
    let _ = client
        .send(upstream, request)
        .await
        .context("notifications/initialized")?
        .into_body()
        .collect()
        .await;

    let caller = CallerContext {
        headers: headers.clone(),
        stateless_meta: None,
    };
    let tools = list_tools(upstream, client, &caller, MAX_EVENT_BYTES)
        .await
        .context("tools/list")?;

    if headers.contains_key("mcp-session-id") {
        let request = upstream_request(upstream, Method::DELETE, &headers, Bytes::new(), &[]);
        let _ = client.send(upstream, request).await;
    }
    Ok(tools)
}
