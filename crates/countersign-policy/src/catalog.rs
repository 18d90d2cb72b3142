//! The pinned tool catalog: what each upstream's tools looked like when the gateway first
//! trusted them, and how far they have drifted since.
//!
//! Pure data: the proxy fetches `tools/list` (all pages), feeds the complete listing to
//! [`Catalog::observe`] and keeps the catalog behind an `RwLock` or swaps cloned snapshots.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use countersign_jsonrpc::write_json_string;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::model::{Risk, is_valid_tool_name};

/// The fields of a tool that make up its pinned definition. `_meta`, `icons` and other
/// presentation or transport details are left out so they can change without a re-review.
const DEFINITION_FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// A tool's behaviour hints as received. `None` means absent or not a boolean; the spec
/// defaults apply then (`readOnlyHint` false, `destructiveHint` true, `idempotentHint`
/// false, `openWorldHint` true).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
}

impl ToolAnnotations {
    /// Reads the hints from a tool's `annotations` value. A hint of the wrong type (say
    /// `"true"`) counts as absent, so it falls back to the risky spec default.
    pub fn from_value(annotations: Option<&Value>) -> ToolAnnotations {
        let hint = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        ToolAnnotations {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
            open_world: hint("openWorldHint"),
        }
    }

    /// The risk these hints claim: `readOnlyHint: true` → read; else `destructiveHint`
    /// (default true) → destructive; else write. Missing annotations are destructive.
    pub fn risk(&self) -> Risk {
        if self.read_only == Some(true) {
            Risk::Read
        } else if self.destructive.unwrap_or(true) {
            Risk::Destructive
        } else {
            Risk::Write
        }
    }
}

/// Where a pinned tool stands relative to the upstream's latest complete listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PinStatus {
    /// Listed, and the definition is the one that was pinned.
    Pinned,
    /// Listed, but the definition differs from the pinned one; awaiting an operator re-pin.
    /// Its risk may have risen, never fallen.
    Changed,
    /// Missing from the latest listing. Calls to it are classified `unknown`.
    Removed,
    /// Listed under an invalid name, more than once, or under a name that differs from
    /// another listed tool's only by case. Pinned at `unknown` until an operator re-pins
    /// once the listing is clean.
    Suspicious,
}

/// One tool as the gateway pinned it.
#[derive(Clone, Debug, PartialEq)]
pub struct PinnedTool {
    /// The exact tool name.
    pub name: String,
    /// The latest listed definition: `name`, `title`, `description`, `inputSchema`,
    /// `outputSchema`, `annotations`, as received (the ones present).
    ///
    /// Shared, because the gateway hands a pin to every call that names the tool: a clone costs
    /// a reference count, not a copy of the schemas.
    pub definition: Arc<Value>,
    /// [`definition_hash`] of `definition`.
    pub definition_hash: String,
    /// The hash of the definition an operator accepted (first sight or last re-pin).
    pub pinned_hash: String,
    /// Hints parsed from `definition`.
    pub annotations: ToolAnnotations,
    /// The risk `definition` alone implies ([`ToolAnnotations::risk`], or unknown while
    /// suspicious).
    pub computed_risk: Risk,
    /// The risk calls are classified at: never below what was pinned, raised at once when
    /// the definition claims more.
    pub pinned_risk: Risk,
    /// See [`PinStatus`].
    pub status: PinStatus,
}

impl PinnedTool {
    /// The risk classification should start from: `unknown` for a removed tool (the
    /// upstream no longer vouches for it), else the pinned risk.
    pub fn effective_risk(&self) -> Risk {
        match self.status {
            PinStatus::Removed => Risk::Unknown,
            PinStatus::Pinned | PinStatus::Changed | PinStatus::Suspicious => self.pinned_risk,
        }
    }

    /// The raw `annotations` object of the definition, if any.
    pub fn annotations_value(&self) -> Option<&Value> {
        self.definition.get("annotations")
    }
}

/// Something an operator should hear about, produced by [`Catalog::observe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogEvent {
    /// A tool seen for the first time, pinned at `risk`.
    Added {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
        /// The pinned risk.
        risk: Risk,
    },
    /// A pinned tool's definition hash changed.
    Changed {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
        /// Whether the pinned risk went up because of the change.
        risk_raised: bool,
        /// The pinned risk after the change.
        risk: Risk,
    },
    /// A pinned tool was missing from a complete listing.
    Removed {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
    },
    /// A removed tool is listed again with the definition it had.
    Restored {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
    },
    /// A listing entry that looks like an impersonation or a broken server; the tool (when
    /// it has a name) is pinned at `unknown`.
    Suspicious {
        /// Upstream name.
        upstream: String,
        /// Tool name as listed (empty when the entry had no string `name`).
        tool: String,
        /// Why.
        reason: String,
    },
}

/// Why [`Catalog::repin`] refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RepinError {
    /// No listing of that upstream ever named the tool.
    #[error("tool `{tool}` of upstream `{upstream}` is not in the catalog")]
    NotFound {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
    },
    /// The tool is missing from the latest listing, so there is no definition to accept.
    #[error("tool `{tool}` of upstream `{upstream}` is missing from its latest listing")]
    Removed {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
    },
    /// The latest listing still makes the tool suspicious.
    #[error("tool `{tool}` of upstream `{upstream}` is still suspicious in its latest listing")]
    Suspicious {
        /// Upstream name.
        upstream: String,
        /// Tool name.
        tool: String,
    },
}

/// Pinned tools per upstream.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    upstreams: FoldMap<String, FoldMap<String, PinnedTool>>,
}

/// Every gated call looks up its tool here: foldhash, seeded per map like std's SipHash, hashes
/// a name in a few instructions where SipHash took about 200. The names are the
/// configuration's and the upstreams' listings (bounded by `max_tools_per_upstream`), not a
/// client's.
type FoldMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// The pinned tool, including removed and suspicious ones (classification needs to
    /// know they exist); `None` when no listing ever named it.
    pub fn get(&self, upstream: &str, tool: &str) -> Option<&PinnedTool> {
        self.upstreams.get(upstream)?.get(tool)
    }

    /// Whether a listing of `upstream` has been observed at all, so the proxy knows to
    /// fetch one before deciding that a tool is unknown.
    pub fn has_upstream(&self, upstream: &str) -> bool {
        self.upstreams.contains_key(upstream)
    }

    /// Every pinned tool of `upstream`, in no particular order.
    pub fn tools(&self, upstream: &str) -> impl Iterator<Item = &PinnedTool> {
        self.upstreams
            .get(upstream)
            .into_iter()
            .flat_map(FoldMap::values)
    }

    /// Ingests one complete `tools/list` result of `upstream` (all pages concatenated).
    ///
    /// New tools are pinned at the risk their definition implies (trust on first use);
    /// a changed definition records the new hash and raises the pinned risk to the new
    /// computed risk if that is higher, never lowers it; tools missing from the listing are
    /// kept but marked removed; invalid, duplicate or case-colliding names are pinned at
    /// `unknown`. Events come in listing order, removals last.
    pub fn observe(&mut self, upstream: &str, tools: &[Value]) -> Vec<CatalogEvent> {
        let mut events = Vec::new();
        let suspicious = |tool: &str, reason: String| CatalogEvent::Suspicious {
            upstream: upstream.to_owned(),
            tool: tool.to_owned(),
            reason,
        };

        // Group by exact name first: the spec requires names to be unique per server, so a
        // repeat is either a bug or an attempt to show different clients different tools.
        let mut listed: Vec<(&str, &Value)> = Vec::with_capacity(tools.len());
        let mut count: HashMap<&str, usize> = HashMap::new();
        for tool in tools {
            match tool.get("name").and_then(Value::as_str) {
                Some(name) => {
                    *count.entry(name).or_default() += 1;
                    listed.push((name, tool));
                }
                None => events.push(suspicious("", "listed tool has no string `name`".into())),
            }
        }
        // Names equal after case folding are one name to any case-insensitive component
        // between the gateway and the tool; both are treated as impersonation attempts.
        let mut folded: HashMap<String, Vec<&str>> = HashMap::new();
        for name in count.keys() {
            folded.entry(name.to_lowercase()).or_default().push(name);
        }

        let pins = self.upstreams.entry(upstream.to_owned()).or_default();
        let mut seen: HashSet<&str> = HashSet::new();
        for (name, tool) in listed {
            if !seen.insert(name) {
                continue;
            }
            let mut reasons = Vec::new();
            if !is_valid_tool_name(name) {
                reasons.push("name is outside [A-Za-z0-9_.-]{1,128}".to_owned());
            }
            if count.get(name).copied().unwrap_or(0) > 1 {
                reasons.push("name is listed more than once".to_owned());
            }
            if let Some(others) = folded.get(&name.to_lowercase()) {
                let mut others: Vec<&str> = others.iter().copied().filter(|o| *o != name).collect();
                others.sort_unstable();
                if !others.is_empty() {
                    reasons.push(format!(
                        "name differs only by case from `{}`",
                        others.join("`, `")
                    ));
                }
            }
            let is_suspicious = !reasons.is_empty();

            let computed_risk = |annotations: ToolAnnotations| {
                if is_suspicious {
                    Risk::Unknown
                } else {
                    annotations.risk()
                }
            };

            let Some(pin) = pins.get_mut(name) else {
                let listed = Definition::of(tool);
                let risk = computed_risk(listed.annotations);
                pins.insert(
                    name.to_owned(),
                    PinnedTool {
                        name: name.to_owned(),
                        definition: listed.value,
                        definition_hash: listed.hash.clone(),
                        pinned_hash: listed.hash,
                        annotations: listed.annotations,
                        computed_risk: risk,
                        pinned_risk: risk,
                        status: if is_suspicious {
                            PinStatus::Suspicious
                        } else {
                            PinStatus::Pinned
                        },
                    },
                );
                if is_suspicious {
                    events.push(suspicious(name, reasons.join("; ")));
                } else {
                    events.push(CatalogEvent::Added {
                        upstream: upstream.to_owned(),
                        tool: name.to_owned(),
                        risk,
                    });
                }
                continue;
            };

            let was = pin.status;
            let old_risk = pin.pinned_risk;
            // A tool listed as it was pinned keeps its definition, hash and hints: every client's
            // `tools/list` repeats the same listing, and copying and hashing each definition
            // again was most of what pinning it cost.
            let changed = !is_listed_as(tool, &pin.definition) && {
                let listed = Definition::of(tool);
                let changed = listed.hash != pin.definition_hash;
                if changed {
                    pin.definition = listed.value;
                    pin.definition_hash = listed.hash;
                    pin.annotations = listed.annotations;
                }
                changed
            };
            let risk = computed_risk(pin.annotations);
            pin.pinned_risk = pin.pinned_risk.max(risk);
            pin.computed_risk = risk;
            pin.status = if is_suspicious {
                PinStatus::Suspicious
            } else if pin.definition_hash != pin.pinned_hash {
                PinStatus::Changed
            } else {
                PinStatus::Pinned
            };
            if is_suspicious && was != PinStatus::Suspicious {
                events.push(suspicious(name, reasons.join("; ")));
            }
            if changed {
                events.push(CatalogEvent::Changed {
                    upstream: upstream.to_owned(),
                    tool: name.to_owned(),
                    risk_raised: pin.pinned_risk > old_risk,
                    risk: pin.pinned_risk,
                });
            } else if was == PinStatus::Removed {
                events.push(CatalogEvent::Restored {
                    upstream: upstream.to_owned(),
                    tool: name.to_owned(),
                });
            }
        }

        let mut removed: Vec<&mut PinnedTool> = pins
            .values_mut()
            .filter(|pin| pin.status != PinStatus::Removed && !seen.contains(pin.name.as_str()))
            .collect();
        removed.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for pin in removed {
            pin.status = PinStatus::Removed;
            events.push(CatalogEvent::Removed {
                upstream: upstream.to_owned(),
                tool: pin.name.clone(),
            });
        }
        events
    }

    /// Raises a tool's pinned risk to `risk` if that is higher — how a replica adopts what
    /// another replica pinned, so a tool's risk never depends on which replica answered.
    /// Returns whether it rose. Unknown tools are left alone: they are already `unknown`.
    pub fn raise(&mut self, upstream: &str, tool: &str, risk: Risk) -> bool {
        let Some(pin) = self
            .upstreams
            .get_mut(upstream)
            .and_then(|t| t.get_mut(tool))
        else {
            return false;
        };
        if risk > pin.pinned_risk {
            pin.pinned_risk = risk;
            true
        } else {
            false
        }
    }

    /// Every pinned tool of `upstream` with its pinned risk, for sharing with other replicas.
    pub fn pinned_risks(&self, upstream: &str) -> Vec<(String, Risk)> {
        self.upstreams
            .get(upstream)
            .map(|tools| {
                tools
                    .values()
                    .map(|p| (p.name.clone(), p.pinned_risk))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An operator accepts the tool's current definition: its pinned risk becomes the
    /// risk that definition implies (possibly lower) and it stops counting as changed.
    /// Returns the new pinned risk.
    pub fn repin(&mut self, upstream: &str, tool: &str) -> Result<Risk, RepinError> {
        let names = || (upstream.to_owned(), tool.to_owned());
        let Some(pin) = self
            .upstreams
            .get_mut(upstream)
            .and_then(|t| t.get_mut(tool))
        else {
            let (upstream, tool) = names();
            return Err(RepinError::NotFound { upstream, tool });
        };
        match pin.status {
            PinStatus::Removed => {
                let (upstream, tool) = names();
                Err(RepinError::Removed { upstream, tool })
            }
            PinStatus::Suspicious => {
                let (upstream, tool) = names();
                Err(RepinError::Suspicious { upstream, tool })
            }
            PinStatus::Pinned | PinStatus::Changed => {
                pin.pinned_risk = pin.computed_risk;
                pin.pinned_hash = pin.definition_hash.clone();
                pin.status = PinStatus::Pinned;
                Ok(pin.pinned_risk)
            }
        }
    }
}

/// A listed tool's definition as the catalog pins it: the definition fields, their hash and
/// the hints read from them.
struct Definition {
    value: Arc<Value>,
    hash: String,
    annotations: ToolAnnotations,
}

impl Definition {
    fn of(tool: &Value) -> Self {
        let value = extract_definition(tool);
        Definition {
            hash: definition_hash(&value),
            annotations: ToolAnnotations::from_value(value.get("annotations")),
            value: Arc::new(value),
        }
    }
}

/// Whether `tool`, as listed, has exactly `definition` ([`extract_definition`] of it would be
/// equal). Equal values write the same sorted text, so an equal definition has the pinned hash;
/// an unequal one is hashed again (and may still hash the same: key order is not compared by
/// the hash, nor by this).
fn is_listed_as(tool: &Value, definition: &Value) -> bool {
    DEFINITION_FIELDS
        .iter()
        .all(|field| match (tool.get(field), definition.get(field)) {
            (Some(listed), Some(pinned)) => same_value(listed, pinned),
            (listed, pinned) => listed.is_none() && pinned.is_none(),
        })
}

/// `a == b`, faster for the usual case of objects whose keys come in the same order (an upstream
/// lists its tools the same way each time): their members are compared in step instead of each
/// key being looked up in the other object.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) if a.len() == b.len() => {
            if a.keys().eq(b.keys()) {
                // The same keys in the same order: equal exactly when every value is.
                a.values().zip(b.values()).all(|(a, b)| same_value(a, b))
            } else {
                a == b
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_value(a, b))
        }
        _ => a == b,
    }
}

fn extract_definition(tool: &Value) -> Value {
    let mut definition = Map::new();
    for field in DEFINITION_FIELDS {
        if let Some(value) = tool.get(field) {
            definition.insert(field.to_owned(), value.clone());
        }
    }
    Value::Object(definition)
}

/// Base64url (unpadded) SHA-256 over `definition` serialized compactly with object keys
/// sorted recursively (by UTF-8 bytes) and numbers as their exact received text.
///
/// This is a stable fingerprint for detecting drift, not RFC 8785: confirmation tokens bind
/// the definition through countersign-token's own JCS hash, which keeps this crate free of
/// that dependency.
pub fn definition_hash(definition: &Value) -> String {
    let mut text = Vec::with_capacity(1024);
    write_sorted(&mut text, definition);
    URL_SAFE_NO_PAD.encode(Sha256::digest(&text))
}

fn write_sorted(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Byte for byte serde_json's escaping, which the hashes pinned so far were made
                // with, without building a `Value` and formatting it for every string.
                write_json_string(out, key);
                out.push(b':');
                write_sorted(out, value);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_sorted(out, item);
            }
            out.push(b']');
        }
        Value::String(s) => write_json_string(out, s),
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // The exact received text under arbitrary_precision.
        Value::Number(number) => {
            let _ = write!(out, "{number}");
        }
    }
}

#[cfg(test)]
mod tests;
