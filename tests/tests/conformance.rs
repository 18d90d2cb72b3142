//! The official MCP conformance suite (server mode, active scenarios) run through the real
//! gateway binary in front of the project's conformance upstream.

use std::time::Duration;

use countersign_e2e::{
    policy, run_to_completion, start_conformance_upstream, start_gateway, tool_env,
};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn every_active_conformance_scenario_passes_through_the_gateway() {
    let (_upstream, upstream_url) = start_conformance_upstream().await;
    let (_gateway, gateway_url) =
        start_gateway(&upstream_url, &["--policy", &policy("allow-all.yaml")], &[]).await;

    let results =
        std::env::temp_dir().join(format!("countersign-conformance-{}", std::process::id()));
    let cli = format!(
        "{}/@modelcontextprotocol/conformance/dist/index.js",
        tool_env("COUNTERSIGN_NODE_MODULES")
    );
    let mut command = Command::new(tool_env("COUNTERSIGN_NODE"));
    command
        .arg(&cli)
        .args(["server", "--url", &gateway_url, "-o"])
        .arg(&results);
    let (success, stdout, stderr) =
        run_to_completion("conformance suite", command, Duration::from_secs(600)).await;

    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with('✓') || l.starts_with('✗') || l.starts_with("Total"))
        .collect();
    println!("{}", summary.join("\n"));
    assert!(success, "conformance suite failed:\n{stdout}\n{stderr}");
    let total = summary
        .iter()
        .find(|l| l.starts_with("Total"))
        .expect("the suite prints a total");
    assert!(total.ends_with(" 0 failed"), "{total}");
    assert!(
        summary
            .iter()
            .any(|l| l.starts_with("✓ dns-rebinding-protection")),
        "the DNS-rebinding scenario must run and pass through the gateway"
    );
    assert!(
        summary.iter().filter(|l| l.starts_with('✓')).count() >= 30,
        "fewer scenarios than the active suite has:\n{}",
        summary.join("\n")
    );
}
