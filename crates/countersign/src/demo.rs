//! `countersign demo`: the built-in demo store behind the gateway, one command, nothing to
//! install. The store listens on a free loopback port; the gateway is the only advertised URL.

use anyhow::Context;
use countersign_app::{RawConfig, RunningGateway, shutdown_signal, telemetry};
use countersign_demo::{DemoStore, serve};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::Failure;

/// `policies/store.yaml`, the policy the walkthrough explains.
const DEMO_POLICY: &str = include_str!("../../../policies/store.yaml");

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
    let mut config = RawConfig::from_yaml(&yaml)
        .and_then(RawConfig::validate)
        .map_err(Failure::Config)?;
    // The demo ships its policy inside the binary, so it needs no files.
    config.approval.policy = countersign_policy::Policy::from_yaml(DEMO_POLICY)
        .context("the built-in demo policy")
        .map_err(Failure::Config)?;
    let _traces = telemetry::init(config.log_format, &config.telemetry).map_err(Failure::Config)?;
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
  Policy: policies/store.yaml (built in)
    list_products, get_order   read         -> pass at once
    create_order               write        -> held until confirmed
    adjust_stock, cancel_order destructive  -> held until confirmed
    restock_all                unannotated  -> denied by rule no-restock-all

Walk through it with curl (bash; stateless MCP 2026-07-28, so no session is needed).
First define a helper that calls one tool:

mcp() {{ curl -s {url} -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H "mcp-name: $1" -d '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"'"$1"'","arguments":'"$2"',"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}'; echo; }}

1. A read passes at once:
mcp list_products '{{}}'

2. A write is held: nothing runs, the answer says so and carries a single-use token:
mcp create_order '{{"customer":"ada","items":[{{"sku":"TOY-001","quantity":1}}]}}'

3. Approve it: the same call with the token runs exactly once (stock of TOY-001 drops by one):
TOKEN=$(mcp create_order '{{"customer":"ada","items":[{{"sku":"TOY-001","quantity":1}}]}}' | grep -o 'mcp_cf_[A-Za-z0-9_.-]*' | head -1)
mcp create_order '{{"customer":"ada","items":[{{"sku":"TOY-001","quantity":1}}],"confirmationToken":"'"$TOKEN"'"}}'
mcp list_products '{{}}'

4. The same token again is refused as replayed; other arguments are refused as a mismatch:
mcp create_order '{{"customer":"ada","items":[{{"sku":"TOY-001","quantity":1}}],"confirmationToken":"'"$TOKEN"'"}}'

5. Policy can deny outright:
mcp restock_all '{{}}'

6. The gateway checks every request strictly before the store sees it (duplicate keys):
curl -si {url} -H 'content-type: application/json' -d '{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"list_products","name":"restock_all"}}}}'

Each decision is also written to the audit trail (one JSON line per decision and outcome, below).
Or add the endpoint to an MCP client (Streamable HTTP): {{ "url": "{url}" }}

Press Ctrl-C to stop.
"#
    )
}
