//! `countersign check`: validate a configuration (and its policy) and show, for every tool of
//! an upstream, what the gateway would do with a call to it.

use std::path::PathBuf;

use anyhow::Context;
use countersign_app::RawConfig;
use serde_json::Value;

use crate::Failure;

#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// Configuration file to validate.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Policy file, overriding the configuration's.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// A `tools/list` snapshot: a result object with `tools`, or an array of tools.
    #[arg(long, value_name = "FILE", conflicts_with = "live")]
    tools: Option<PathBuf>,
    /// List the tools from the running upstreams instead of a snapshot.
    #[arg(long)]
    live: bool,
    /// Which upstream the snapshot belongs to. Default: the first.
    #[arg(long, value_name = "NAME")]
    upstream: Option<String>,
}

pub(crate) async fn run(args: CheckArgs) -> Result<(), Failure> {
    let mut raw = RawConfig::load(&args.config).map_err(Failure::Config)?;
    if args.policy.is_some() {
        raw.policy = args.policy.clone();
    }
    raw.audit.path = Some("off".into());
    let config = raw.validate().map_err(Failure::Config)?;
    println!("configuration is valid: {}", args.config.display());
    match &config.approval.policy_path {
        Some(path) => println!("policy is valid: {}", path.display()),
        None => println!("policy: built-in defaults"),
    }
    let policy = &config.approval.policy;

    let mut listings: Vec<(String, Vec<Value>)> = Vec::new();
    if let Some(path) = &args.tools {
        let upstream = match &args.upstream {
            Some(name) => name.clone(),
            None => config.proxy.routes[0].upstream.name.clone(),
        };
        listings.push((upstream, read_snapshot(path).map_err(Failure::Config)?));
    } else if args.live {
        for route in &config.proxy.routes {
            if args
                .upstream
                .as_ref()
                .is_some_and(|name| *name != route.upstream.name)
            {
                continue;
            }
            let tools = countersign_app::live::live_tools(&route.upstream)
                .await
                .with_context(|| {
                    format!(
                        "listing the tools of upstream `{}` at {}",
                        route.upstream.name, route.upstream.url
                    )
                })
                .map_err(Failure::Runtime)?;
            listings.push((route.upstream.name.clone(), tools));
        }
    }

    for (upstream, tools) in listings {
        println!("\nupstream `{upstream}`: {} tools", tools.len());
        println!(
            "{:<32} {:<12} {:<8} {:<8} {:<24} notes",
            "TOOL", "RISK", "ACTION", "APPROVAL", "RULE"
        );
        for explanation in policy.explain(&upstream, &tools) {
            let mut notes = Vec::new();
            if let Some(status) = explanation.status
                && !matches!(status, countersign_policy::PinStatus::Pinned)
            {
                notes.push(format!("{status:?}").to_lowercase());
            }
            if !explanation.conditional_rules.is_empty() {
                notes.push(format!(
                    "may be decided by: {}",
                    explanation.conditional_rules.join(", ")
                ));
            }
            let approval = if explanation.action == countersign_policy::Action::Confirm {
                explanation.approval.as_str()
            } else {
                "-"
            };
            println!(
                "{:<32} {:<12} {:<8} {:<8} {:<24} {}",
                explanation.tool,
                explanation.risk.as_str(),
                explanation.action.as_str(),
                approval,
                explanation.rule,
                notes.join("; ")
            );
        }
    }
    Ok(())
}

fn read_snapshot(path: &PathBuf) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let tools = match &value {
        Value::Array(tools) => tools.clone(),
        Value::Object(map) => match map
            .get("tools")
            .or_else(|| map.get("result").and_then(|r| r.get("tools")))
        {
            Some(Value::Array(tools)) => tools.clone(),
            _ => anyhow::bail!(
                "{}: expected a tools/list result with a `tools` array",
                path.display()
            ),
        },
        _ => anyhow::bail!(
            "{}: expected a tools/list result or an array of tools",
            path.display()
        ),
    };
    Ok(tools)
}
