//! Pinned tool risks shared between replicas, so a tool's risk never depends on which replica
//! answered. Risks are small ordinals (higher is riskier) and only ever rise: a replica that
//! pins a tool raises the shared value and adopts whatever is higher.

use std::fmt::Debug;

use futures_util::future::BoxFuture;

use crate::StoreError;

/// One tool's pinned risk, as an ordinal where higher is riskier.
pub type SharedPin = (String, u8);

pub trait PinShare: Send + Sync + Debug {
    /// Raises the shared risk of each tool of `upstream` to at least the given one, and returns
    /// every tool's shared risk after the update (which may be higher than what was sent).
    fn raise<'a>(
        &'a self,
        upstream: &'a str,
        pins: &'a [SharedPin],
    ) -> BoxFuture<'a, Result<Vec<SharedPin>, StoreError>>;
}

/// One replica alone: nothing to share, the local pins are the shared ones.
#[derive(Debug, Default)]
pub struct LocalPins;

impl PinShare for LocalPins {
    fn raise<'a>(
        &'a self,
        _upstream: &'a str,
        pins: &'a [SharedPin],
    ) -> BoxFuture<'a, Result<Vec<SharedPin>, StoreError>> {
        Box::pin(async move { Ok(pins.to_vec()) })
    }
}
