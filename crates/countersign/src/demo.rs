//! `countersign demo`: the built-in demo store behind the gateway, one command, nothing to
//! install. The store listens on a free loopback port; the gateway is the only advertised URL.

use anyhow::Context;
use countersign_app::{RawConfig, RunningGateway, shutdown_signal, telemetry};
use countersign_demo::{DemoStore, serve};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::Failure;

pub(crate) async fn run(listen: &str, admin: &str) -> Result<(), Failure> {
    let store_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo store on a loopback port")
        .map_err(Failure::Runtime)?;
    let store_addr = store_listener
        .local_addr()
        .context("reading the demo store address")
        .map_err(Failure::Runtime)?;
    let (stop_store, store_stopped) = oneshot::channel::<()>();
    let store = tokio::spawn(serve(store_listener, DemoStore::new(), async {
        let _ = store_stopped.await;
    }));

    let yaml = format!(
        "listen: {listen}\nadmin: '{admin}'\nupstreams:\n  - name: store\n    url: http://{store_addr}/mcp\n"
    );
    let config = RawConfig::from_yaml(&yaml)
        .and_then(RawConfig::validate)
        .map_err(Failure::Config)?;
    telemetry::init(config.log_format);
    let gateway = RunningGateway::start(config)
        .await
        .map_err(Failure::Runtime)?;
    println!("{}", walkthrough(&format!("http://{}/mcp", gateway.addr)));

    let result = gateway
        .run_until(shutdown_signal())
        .await
        .map_err(Failure::Runtime);
    let _ = stop_store.send(());
    let _ = store.await;
    result
}

fn walkthrough(url: &str) -> String {
    format!(
        r#"
countersign demo — a toy store MCP server with the gateway in front of it.

  MCP endpoint (point any MCP client here):  {url}
  Tools: list_products, get_order (read) · create_order (write) ·
         adjust_stock, cancel_order (destructive) · restock_all (no annotations)

Try it with curl (2026-07-28, stateless — no session needed):

  curl -s {url} -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: list_products' \
    -d '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"list_products","arguments":{{}},
         "_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}'

  curl -s {url} -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: create_order' \
    -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"create_order",
         "arguments":{{"customer":"ada","items":[{{"sku":"TOY-001","quantity":1}}]}},
         "_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}'

The gateway checks every request strictly before the store sees it; try a hostile one:

  curl -si {url} -H 'content-type: application/json' \
    -d '{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"list_products","name":"restock_all"}}}}'

Or add it to an MCP client (Streamable HTTP):  {{ "url": "{url}" }}

Press Ctrl-C to stop.
"#
    )
}
