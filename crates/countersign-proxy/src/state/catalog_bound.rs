//! The bound on how many tools one upstream can make the gateway pin.
//!
//! A pinned tool is never forgotten: its risk may only rise, and forgetting it would let it be
//! pinned afresh from a milder definition. So a full catalog refuses to pin *new* tools rather
//! than evicting old ones. A tool left unpinned is classified `unknown`, stricter than any
//! annotation could make it, so refusing can never lower a risk.
//!
//! The bound is applied to a listing before the catalog sees it, by leaving the refused tools
//! out. Leaving a tool out must not hide what it says about the others: a refused name that
//! equals a kept one after case folding would have made the kept one suspicious, so the kept
//! one is listed twice instead, which the catalog pins as suspicious (`unknown`) too.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// A listing cut to what the catalog may pin.
#[derive(Debug)]
pub(super) struct BoundedListing<'a> {
    /// What the catalog observes.
    pub(super) tools: Cow<'a, [Value]>,
    /// Names of new tools left unpinned, in listing order.
    pub(super) refused: Vec<String>,
    /// Kept tools marked suspicious for a refused name that equals theirs after case folding.
    pub(super) collisions: Vec<String>,
}

/// Keeps every tool already pinned (`is_pinned`) and admits new names, in listing order, while
/// the upstream has fewer than `max` pinned (`pinned` now).
pub(super) fn bound_listing<'a>(
    tools: &'a [Value],
    is_pinned: impl Fn(&str) -> bool,
    pinned: usize,
    max: usize,
) -> BoundedListing<'a> {
    let mut room = max.saturating_sub(pinned);
    let mut admitted: HashSet<&str> = HashSet::new();
    let mut refused: Vec<&str> = Vec::new();
    let mut keep: Vec<bool> = Vec::with_capacity(tools.len());
    for tool in tools {
        // An entry without a string name pins nothing; the catalog reports it as suspicious.
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            keep.push(true);
            continue;
        };
        let kept = if is_pinned(name) || admitted.contains(name) {
            true
        } else if room > 0 {
            room -= 1;
            admitted.insert(name);
            true
        } else {
            if !refused.contains(&name) {
                refused.push(name);
            }
            false
        };
        keep.push(kept);
    }
    if refused.is_empty() {
        return BoundedListing {
            tools: Cow::Borrowed(tools),
            refused: Vec::new(),
            collisions: Vec::new(),
        };
    }

    // First kept entry of each case-folded name.
    let mut kept_by_fold: HashMap<String, (&str, &Value)> = HashMap::new();
    for (tool, kept) in tools.iter().zip(&keep) {
        if let (true, Some(name)) = (*kept, tool.get("name").and_then(Value::as_str)) {
            kept_by_fold
                .entry(name.to_lowercase())
                .or_insert((name, tool));
        }
    }
    let mut collisions: Vec<&str> = Vec::new();
    let mut doubled: Vec<Value> = Vec::new();
    for name in &refused {
        if let Some((kept, tool)) = kept_by_fold.get(&name.to_lowercase())
            && !collisions.contains(kept)
        {
            collisions.push(kept);
            doubled.push((*tool).clone());
        }
    }
    let listing: Vec<Value> = tools
        .iter()
        .zip(&keep)
        .filter(|(_, kept)| **kept)
        .map(|(tool, _)| tool.clone())
        .chain(doubled)
        .collect();
    BoundedListing {
        tools: Cow::Owned(listing),
        refused: refused.into_iter().map(str::to_owned).collect(),
        collisions: collisions.into_iter().map(str::to_owned).collect(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}})
    }

    fn names(listing: &BoundedListing<'_>) -> Vec<String> {
        listing
            .tools
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn a_listing_within_the_bound_is_passed_on_untouched() {
        let tools = [tool("a"), tool("b")];
        let listing = bound_listing(&tools, |_| false, 0, 2);
        assert!(matches!(listing.tools, Cow::Borrowed(_)));
        assert!(listing.refused.is_empty());
    }

    #[test]
    fn pinned_tools_stay_and_new_ones_are_admitted_in_order_until_full() {
        let tools = [tool("new1"), tool("old"), tool("new2"), tool("new3")];
        let listing = bound_listing(&tools, |name| name == "old", 1, 3);
        assert_eq!(names(&listing), ["new1", "old", "new2"]);
        assert_eq!(listing.refused, ["new3"]);
        assert!(listing.collisions.is_empty());
    }

    #[test]
    fn a_full_catalog_still_sees_its_pinned_tools_and_their_repeats() {
        let tools = [tool("old"), tool("new"), tool("old")];
        let listing = bound_listing(&tools, |name| name == "old", 5, 5);
        assert_eq!(
            names(&listing),
            ["old", "old"],
            "a repeated pinned name still reaches the catalog, which marks it suspicious"
        );
        assert_eq!(listing.refused, ["new"]);
    }

    #[test]
    fn a_refused_name_colliding_with_a_kept_one_still_makes_it_suspicious() {
        let tools = [tool("get_order"), tool("GET_ORDER"), tool("Get_Order")];
        let listing = bound_listing(&tools, |name| name == "get_order", 1, 1);
        assert_eq!(listing.refused, ["GET_ORDER", "Get_Order"]);
        assert_eq!(listing.collisions, ["get_order"]);
        assert_eq!(
            names(&listing),
            ["get_order", "get_order"],
            "listed twice, so the catalog pins it suspicious"
        );
    }

    #[test]
    fn entries_without_a_name_pass_to_the_catalog_which_reports_them() {
        let tools = [json!({"description": "no name"}), tool("a"), tool("b")];
        let listing = bound_listing(&tools, |_| false, 0, 1);
        assert_eq!(listing.tools.len(), 2);
        assert_eq!(listing.refused, ["b"]);
    }
}
