//! `countersign apikey`: makes API keys for the `api_keys` identity method. The gateway stores
//! only their hashes; the key itself is printed once, for the client.

use std::io::Read as _;

use countersign_proxy::identity::{hash_key, new_key};

use crate::Failure;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ApiKeyCommand {
    /// Print a new random key, and the entry of the keys file that accepts it.
    New {
        /// Who the key names (the principal policies see).
        #[arg(long)]
        principal: String,
        /// A group of the principal; repeat for more.
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// Print the `sha256:` hash of a key read from standard input (one line).
    Hash,
}

pub(crate) fn run(command: ApiKeyCommand) -> Result<(), Failure> {
    match command {
        ApiKeyCommand::New { principal, groups } => {
            let key = new_key();
            println!("# the key, for the client (shown only now):");
            println!("# {key}");
            println!("# the entry for the keys file:");
            println!(
                "- {}",
                serde_json::json!({"sha256": hash_key(&key), "principal": principal, "groups": groups})
            );
            Ok(())
        }
        ApiKeyCommand::Hash => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .map_err(|e| Failure::Runtime(e.into()))?;
            let key = input.trim();
            if key.is_empty() {
                return Err(Failure::Config(anyhow::anyhow!("no key on standard input")));
            }
            println!("{}", hash_key(key));
            Ok(())
        }
    }
}
