//! End-to-end tests: a real server on 127.0.0.1:0, spoken to with hyper's client.

#![allow(
    clippy::unwrap_used,
    reason = "in a test, a failed unwrap is the failure report"
)]

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::{DemoStore, OrderStatus, serve};

const META: &str = "io.modelcontextprotocol/protocolVersion";

/// A running demo server; it stops when this is dropped (the shutdown sender goes away).
struct Demo {
    url: String,
    store: DemoStore,
    client: Client<HttpConnector, Full<Bytes>>,
    _stop: oneshot::Sender<()>,
}

/// One HTTP answer; `body` is `Null` when the body is empty.
struct Answer {
    status: StatusCode,
    session: Option<String>,
    content_type: Option<String>,
    body: Value,
}

impl Demo {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let store = DemoStore::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        tokio::spawn(serve(listener, store.clone(), shutdown));
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self {
            url,
            store,
            client,
            _stop: stop,
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let url = self.url.replace("/mcp", path);
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let header = |name: &str| {
            let value = response.headers().get(name);
            value.map(|v| v.to_str().unwrap().to_owned())
        };
        let (status, session) = (response.status(), header("mcp-session-id"));
        let content_type = header("content-type");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Answer {
            status,
            session,
            content_type,
            body,
        }
    }

    async fn post(&self, headers: &[(&str, &str)], message: Value) -> Answer {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.send(Method::POST, "/mcp", &all, &message.to_string())
            .await
    }

    async fn initialize(&self, version: &str) -> (Answer, String) {
        let params = json!({"protocolVersion": version, "capabilities": {},
                            "clientInfo": {"name": "test", "version": "0"}});
        let answer = self.post(&[], request(1, "initialize", params)).await;
        let session = answer
            .session
            .clone()
            .expect("initialize assigns a session");
        (answer, session)
    }

    /// A request inside a fresh 2025-11-25 session; returns the JSON-RPC body.
    async fn legacy(&self, method: &str, params: Value) -> Value {
        let (_, session) = self.initialize("2025-11-25").await;
        let headers = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        let answer = self.post(&headers, request(2, method, params)).await;
        assert_eq!(answer.status, StatusCode::OK);
        answer.body
    }

    async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        let body = self
            .legacy("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        body["result"].clone()
    }

    /// A stateless 2026-07-28 request with consistent headers.
    async fn modern(&self, method: &str, mut params: Value) -> Answer {
        params["_meta"] =
            json!({META: "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
        let name = params["name"].as_str().unwrap_or_default().to_owned();
        let mut headers = vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ];
        if !name.is_empty() {
            headers.push(("mcp-name", &name));
        }
        self.post(&headers, request(7, method, params)).await
    }
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn text_of(result: &Value) -> Value {
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn initialize_echoes_a_supported_version_and_assigns_a_session() {
    let demo = Demo::start().await;
    let (answer, session) = demo.initialize("2025-06-18").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    assert!(uuid::Uuid::parse_str(&session).is_ok());
    let result = &answer.body["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(
        result["capabilities"],
        json!({"tools": {"listChanged": false}})
    );
    assert!(
        result["instructions"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );

    let (answer, other) = demo.initialize("1999-01-01").await;
    assert_eq!(answer.body["result"]["protocolVersion"], "2025-11-25");
    assert_ne!(session, other);
}

#[tokio::test]
async fn tools_list_shows_annotations_and_output_schema() {
    let demo = Demo::start().await;
    let body = demo.legacy("tools/list", json!({})).await;
    let tools = body["result"]["tools"].as_array().unwrap();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    assert_eq!(tools.len(), 6);
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        );
        assert!(tool["title"].is_string() && tool["description"].is_string());
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["inputSchema"]["additionalProperties"], false);
        assert!(tool["inputSchema"]["required"].is_array());
    }
    assert_eq!(tool("list_products")["annotations"]["readOnlyHint"], true);
    assert_eq!(tool("get_order")["annotations"]["readOnlyHint"], true);
    assert_eq!(tool("get_order")["outputSchema"]["type"], "object");
    let create = &tool("create_order")["annotations"];
    assert_eq!(
        (&create["readOnlyHint"], &create["destructiveHint"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(tool("adjust_stock")["annotations"]["destructiveHint"], true);
    assert_eq!(tool("cancel_order")["annotations"]["destructiveHint"], true);
    assert!(tool("restock_all").get("annotations").is_none());
    assert!(tool("list_products").get("outputSchema").is_none());
}

#[tokio::test]
async fn create_order_takes_items_out_of_stock() {
    let demo = Demo::start().await;
    let before = demo.store.snapshot();
    let items = json!([{"sku": "TOY-003", "quantity": 2}, {"sku": "TOY-001", "quantity": 1}]);
    let result = demo
        .call_tool("create_order", json!({"customer": "Grace", "items": items}))
        .await;
    assert_eq!(result.get("isError"), None);
    let order = text_of(&result);
    assert_eq!(order["id"], "ord-1002");
    assert_eq!(order["total_cents"], 2 * 2250 + 3499);

    let after = demo.store.snapshot();
    assert_eq!(
        after.products["TOY-003"].stock,
        before.products["TOY-003"].stock - 2
    );
    assert_eq!(
        after.products["TOY-001"].stock,
        before.products["TOY-001"].stock - 1
    );
    assert_eq!(after.orders["ord-1002"].status, OrderStatus::Placed);
}

#[tokio::test]
async fn get_order_returns_structured_content_matching_its_text() {
    let demo = Demo::start().await;
    let result = demo
        .call_tool("get_order", json!({"order_id": "ord-1001"}))
        .await;
    assert_eq!(result["structuredContent"], text_of(&result));
    assert_eq!(result["structuredContent"]["customer"], "Ada Lovelace");
    assert_eq!(result["structuredContent"]["status"], "placed");
}

#[tokio::test]
async fn invalid_arguments_give_a_tool_error_and_change_nothing() {
    let demo = Demo::start().await;
    let before = demo.store.snapshot();
    let cases = [
        (
            "create_order",
            json!({"customer": "Eve", "items": [{"sku": "TOY-003", "quantity": 99}]}),
            "not enough stock",
        ),
        (
            "create_order",
            json!({"customer": "Eve", "items": [{"sku": "NOPE", "quantity": 1}]}),
            "unknown sku",
        ),
        (
            "create_order",
            json!({"customer": "Eve"}),
            "missing field `items`",
        ),
        (
            "adjust_stock",
            json!({"sku": "TOY-001", "delta": "lots"}),
            "invalid type",
        ),
        (
            "adjust_stock",
            json!({"sku": "TOY-001", "delta": -13}),
            "outside",
        ),
        (
            "get_order",
            json!({"order_id": "ord-1001", "extra": 1}),
            "unknown field `extra`",
        ),
        ("restock_all", json!([]), "must be a JSON object"),
    ];
    for (tool, arguments, expected) in cases {
        let result = demo.call_tool(tool, arguments).await;
        assert_eq!(result["isError"], true, "{tool}: {result}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(expected), "{tool}: {text}");
    }
    assert_eq!(demo.store.snapshot(), before);
}

#[tokio::test]
async fn cancel_order_returns_stock_once() {
    let demo = Demo::start().await;
    let result = demo
        .call_tool("cancel_order", json!({"order_id": "ord-1001"}))
        .await;
    assert_eq!(text_of(&result)["status"], "cancelled");
    assert_eq!(demo.store.snapshot().products["TOY-002"].stock, 32);
    let again = demo
        .call_tool("cancel_order", json!({"order_id": "ord-1001"}))
        .await;
    assert_eq!(again["isError"], true);
    assert_eq!(demo.store.snapshot().products["TOY-002"].stock, 32);
}

#[tokio::test]
async fn unknown_tool_is_a_json_rpc_invalid_params_error() {
    let demo = Demo::start().await;
    let body = demo
        .legacy("tools/call", json!({"name": "drop_tables"}))
        .await;
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(body["id"], 2);
}

#[tokio::test]
async fn unknown_method_is_method_not_found() {
    let demo = Demo::start().await;
    let body = demo.legacy("resources/list", json!({})).await;
    assert_eq!(body["error"]["code"], -32601);
    let answer = demo.modern("resources/list", json!({})).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.body["error"]["code"], -32601);
}

#[tokio::test]
async fn stateless_2026_requests_work_without_a_session() {
    let demo = Demo::start().await;
    let discover = demo.modern("server/discover", json!({})).await;
    assert_eq!(discover.status, StatusCode::OK);
    assert_eq!(discover.session, None);
    let result = &discover.body["result"];
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["capabilities"]["tools"]["listChanged"], false);

    let call = demo
        .modern("tools/call", json!({"name": "list_products"}))
        .await;
    assert_eq!(call.status, StatusCode::OK);
    assert_eq!(call.body["result"]["resultType"], "complete");
    assert_eq!(
        text_of(&call.body["result"])["products"][0]["sku"],
        "TOY-001"
    );
}

#[tokio::test]
async fn mismatched_2026_headers_are_refused_with_header_mismatch() {
    let demo = Demo::start().await;
    let params = json!({"name": "restock_all", "_meta": {META: "2026-07-28"}});
    let message = request(3, "tools/call", params);
    let cases: [&[(&str, &str)]; 3] = [
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "restock_all"),
        ],
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "list_products"),
        ],
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
            ("mcp-name", "restock_all"),
        ],
    ];
    let before = demo.store.snapshot();
    for headers in cases {
        let answer = demo.post(headers, message.clone()).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(answer.body["error"]["code"], -32020);
        assert_eq!(answer.body["id"], 3);
    }
    assert_eq!(demo.store.snapshot(), before);
}

#[tokio::test]
async fn unsupported_2026_era_version_is_refused_with_its_code() {
    let demo = Demo::start().await;
    let message = request(4, "ping", json!({"_meta": {META: "2099-01-01"}}));
    let headers = [
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "ping"),
    ];
    let answer = demo.post(&headers, message).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.body["error"]["code"], -32022);
    assert_eq!(answer.body["error"]["data"]["requested"], "2099-01-01");
}

#[tokio::test]
async fn request_without_session_is_refused_with_400() {
    let demo = Demo::start().await;
    let answer = demo.post(&[], request(1, "tools/list", json!({}))).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn deleted_session_is_404_on_reuse() {
    let demo = Demo::start().await;
    let (_, session) = demo.initialize("2025-11-25").await;
    let headers = [("mcp-session-id", session.as_str())];
    let deleted = demo.send(Method::DELETE, "/mcp", &headers, "").await;
    assert_eq!(deleted.status, StatusCode::OK);
    let reused = demo.post(&headers, request(2, "ping", json!({}))).await;
    assert_eq!(reused.status, StatusCode::NOT_FOUND);
    let again = demo.send(Method::DELETE, "/mcp", &headers, "").await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn notifications_are_accepted_with_an_empty_202() {
    let demo = Demo::start().await;
    let (_, session) = demo.initialize("2025-11-25").await;
    let headers = [("mcp-session-id", session.as_str())];
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = demo.post(&headers, note).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::ACCEPTED, Value::Null)
    );
}

#[tokio::test]
async fn batches_are_answered_only_in_2025_03_26_sessions() {
    let demo = Demo::start().await;
    let batch = json!([request(1, "ping", json!({})), request(2, "nope", json!({})),
                       {"jsonrpc": "2.0", "method": "notifications/initialized"}]);
    let (_, old) = demo.initialize("2025-03-26").await;
    let answer = demo.post(&[("mcp-session-id", &old)], batch.clone()).await;
    assert_eq!(answer.body[0]["result"], json!({}));
    assert_eq!(answer.body[1]["error"]["code"], -32601);
    assert_eq!(answer.body.as_array().map(Vec::len), Some(2));

    let (_, new) = demo.initialize("2025-11-25").await;
    let refused = demo.post(&[("mcp-session-id", &new)], batch).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn only_post_and_delete_on_mcp_are_served() {
    let demo = Demo::start().await;
    let get = demo
        .send(Method::GET, "/mcp", &[("accept", "text/event-stream")], "")
        .await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
    let elsewhere = demo.send(Method::POST, "/other", &[], "{}").await;
    assert_eq!(elsewhere.status, StatusCode::NOT_FOUND);
    let text = demo
        .send(
            Method::POST,
            "/mcp",
            &[("content-type", "text/plain")],
            "{}",
        )
        .await;
    assert_eq!(text.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let foreign = [("origin", "http://evil.example")];
    let answer = demo
        .post(&foreign, request(1, "initialize", json!({})))
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn shutdown_returns_promptly_despite_an_idle_keep_alive_connection() {
    let mut demo = Demo::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    demo.url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, DemoStore::new(), async move {
        let _ = stopped.await;
    }));
    // Leaves a pooled, idle HTTP/1.1 connection open to the server.
    demo.initialize("2025-11-25").await;
    stop.send(()).unwrap();
    let finished = tokio::time::timeout(std::time::Duration::from_secs(2), server).await;
    finished
        .expect("drain ends well before its deadline")
        .unwrap()
        .unwrap();
}
