//! `countersign demo` works for a newcomer: the walkthrough it prints, run as printed with
//! bash and curl, shows a read passing, a write held, approved once, a replay refused, a
//! denial, and a hostile request refused — against the demo store's real state.

use std::process::Stdio;
use std::time::Duration;

use countersign_e2e::{countersign_binary, run_to_completion};
use countersign_testkit::free_port;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn the_printed_walkthrough_works_as_printed() {
    let port = free_port();
    let mut demo = Command::new(countersign_binary())
        .args([
            "demo",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            "off",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start countersign demo");
    let mut lines = BufReader::new(demo.stdout.take().expect("stdout")).lines();
    let mut script = String::from("set -u\n");
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("mcp") || line.starts_with("TOKEN=") || line.starts_with("curl ") {
                script.push_str(&line);
                script.push('\n');
            }
            if line.starts_with("Press Ctrl-C") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(read, Ok(true)),
        "the demo did not print its walkthrough"
    );
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let mut bash = Command::new("bash");
    bash.args(["-c", &script]);
    let (success, stdout, stderr) =
        run_to_completion("walkthrough", bash, Duration::from_secs(60)).await;
    assert!(success, "{stderr}\n{stdout}");
    let outputs: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let step = |needle: &str| {
        outputs
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no output contains {needle}:\n{stdout}"))
    };

    assert!(
        outputs[0].contains(r#"\"sku\":\"TOY-001\""#) && outputs[0].contains(r#"\"stock\":12"#),
        "{}",
        outputs[0]
    );
    let held = step("Nothing was executed");
    let stock_after = step(r#"\"stock\":11"#);
    let replayed = step("code: replayed");
    let denied = step("policy_denied");
    let hostile = step("duplicate object key");
    assert!(
        held < stock_after && stock_after < replayed && replayed < denied && denied < hostile,
        "steps out of order:\n{stdout}"
    );
    assert!(
        stdout.contains(r#"\"status\":\"placed\""#),
        "the approved order was created:\n{stdout}"
    );
    drop(demo);
}
