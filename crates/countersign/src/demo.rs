//! `countersign demo`: the built-in demo store behind the gateway, one command.

use crate::Failure;

pub(crate) async fn run(_listen: &str, _admin: &str) -> Result<(), Failure> {
    Err(Failure::Runtime(anyhow::anyhow!(
        "the demo store is not built yet"
    )))
}
