//! The `tdh` each approval binds, computed once per pinned definition instead of once per held
//! or redeemed call. Hashing a tool's canonical definition costs about 15 µs for a 1.5 KiB
//! schema (`cargo bench -p countersign-token --bench token -- definition_hash`), more than the
//! rest of a redemption's own work.
//!
//! An entry keeps the pin's definition itself (the `Arc`) with its hash, and answers only for that
//! very allocation (`Arc::ptr_eq`). A tool re-listed with a changed definition gets a new
//! allocation, so its approvals are bound to the new hash at once. Holding the `Arc` keeps its
//! address from being reused by another definition while the entry lives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

/// Entries kept before the cache starts over, so an upstream that lists ever new tools cannot
/// grow it without bound.
const MAX_ENTRIES: usize = 4096;

/// Definition hashes by upstream and tool name.
#[derive(Debug, Default)]
pub(super) struct DefinitionHashes {
    entries: Mutex<Entries>,
}

type Entries = HashMap<String, HashMap<String, Entry>>;

#[derive(Debug)]
struct Entry {
    definition: Arc<Value>,
    hash: String,
}

impl DefinitionHashes {
    /// [`countersign_token::definition_hash`] of `definition`, the pinned definition of `tool`
    /// on `upstream`.
    pub(super) fn hash(&self, upstream: &str, tool: &str, definition: &Arc<Value>) -> String {
        if let Some(entry) = self
            .lock()
            .get(upstream)
            .and_then(|tools| tools.get(tool))
            .filter(|entry| Arc::ptr_eq(&entry.definition, definition))
        {
            return entry.hash.clone();
        }
        // Computed outside the lock: other calls go on meanwhile.
        let hash = countersign_token::definition_hash(definition);
        let mut entries = self.lock();
        if count(&entries) >= MAX_ENTRIES {
            entries.clear();
        }
        let entry = Entry {
            definition: definition.clone(),
            hash: hash.clone(),
        };
        entries
            .entry(upstream.to_owned())
            .or_default()
            .insert(tool.to_owned(), entry);
        hash
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Every update leaves the map whole, so a panic elsewhere cannot leave it half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        count(&self.lock())
    }
}

/// Entries over all upstreams: one map per upstream, so a sum over a handful.
fn count(entries: &Entries) -> usize {
    entries.values().map(HashMap::len).sum()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn definition(description: &str) -> Arc<Value> {
        Arc::new(json!({"name": "create_order", "description": description,
            "inputSchema": {"type": "object"}}))
    }

    #[test]
    fn a_definition_has_the_hash_of_its_value() {
        let hashes = DefinitionHashes::default();
        let pinned = definition("Creates an order.");
        let expected = countersign_token::definition_hash(&pinned);
        assert_eq!(hashes.hash("store", "create_order", &pinned), expected);
        // From the cache, the same.
        assert_eq!(hashes.hash("store", "create_order", &pinned), expected);
        assert_eq!(hashes.len(), 1);
    }

    #[test]
    fn a_changed_definition_of_the_same_tool_gets_its_own_hash() {
        let hashes = DefinitionHashes::default();
        let before = definition("Creates an order.");
        let after = definition("Creates an order. Also emails everyone.");
        let first = hashes.hash("store", "create_order", &before);
        let second = hashes.hash("store", "create_order", &after);
        assert_ne!(first, second);
        assert_eq!(second, countersign_token::definition_hash(&after));
        // And the same tool name on another upstream is its own entry.
        assert_eq!(hashes.hash("billing", "create_order", &before), first);
        assert_eq!(hashes.len(), 2);
    }

    #[test]
    fn the_cache_stays_bounded_whatever_is_listed() {
        let hashes = DefinitionHashes::default();
        let pinned = definition("Creates an order.");
        for i in 0..MAX_ENTRIES {
            hashes.hash("store", &format!("tool_{i}"), &pinned);
        }
        assert_eq!(hashes.len(), MAX_ENTRIES);
        // Full: the next new tool starts the cache over.
        hashes.hash("store", "one_more", &pinned);
        assert_eq!(hashes.len(), 1);
    }
}
