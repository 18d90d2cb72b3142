//! `countersign token inspect`: decode a confirmation token for a person, and verify it when
//! keys are at hand.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use countersign_token::{Keyring, VerifyRules, inspect_unverified, verify};

use crate::Failure;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TokenCommand {
    /// Print a token's header and claims. With keys (--keys or COUNTERSIGN_SIGNING_KEYS), also
    /// verify its signature and lifetime.
    Inspect {
        /// The token (`mcp_cf_…`).
        token: String,
        /// Keyring to verify with, `kid:key[,kid:key…]`.
        #[arg(
            long,
            value_name = "KEYS",
            env = "COUNTERSIGN_SIGNING_KEYS",
            hide_env_values = true
        )]
        keys: Option<String>,
    },
}

pub(crate) fn run(command: TokenCommand) -> Result<(), Failure> {
    match command {
        TokenCommand::Inspect { token, keys } => inspect(&token, keys.as_deref()),
    }
}

fn inspect(token: &str, keys: Option<&str>) -> Result<(), Failure> {
    let (header, claims) = inspect_unverified(token).map_err(|rejection| {
        Failure::Runtime(anyhow::anyhow!("not a confirmation token: {rejection}"))
    })?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let verdict = match keys {
        None => {
            "not verified (no keys given: pass --keys or set COUNTERSIGN_SIGNING_KEYS)".to_owned()
        }
        Some(spec) => {
            let keyring = Keyring::parse(spec)
                .context("--keys")
                .map_err(Failure::Config)?;
            match verify(
                &keyring,
                token,
                now,
                &VerifyRules {
                    max_ttl_secs: 3600,
                    ..VerifyRules::default()
                },
            ) {
                Ok(_) => "valid signature, within its lifetime".to_owned(),
                Err(rejection) => format!("rejected: {} ({rejection})", rejection.code()),
            }
        }
    };
    let output = serde_json::json!({
        "header": header,
        "claims": claims,
        "expires_in_seconds": claims.exp as i64 - now as i64,
        "verification": verdict,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&output).unwrap_or_default()
    );
    Ok(())
}
