//! Canonical numbers for a value kept as raw text: what the gateway forwards for an approved
//! call, so the upstream runs exactly the numbers that were hashed and shown.

use countersign_jsonrpc::{Kind, RawJson};

use super::{CanonicalError, canonical_number, check_depth, is_small_integer};

/// [`normalize_numbers`] of a value kept as raw text: the same value with every number written
/// canonically, members and items in their order. When every number already is canonical, the
/// value itself comes back (no copy).
pub fn normalize_numbers_raw(value: &RawJson) -> Result<RawJson, CanonicalError> {
    if numbers_are_canonical(value, 0)? {
        return Ok(value.clone());
    }
    let mut out = Vec::with_capacity(value.len());
    write_normalized(&mut out, value, 0)?;
    Ok(RawJson::parse_slice(&out).expect("normalized json is strictly valid"))
}

fn numbers_are_canonical(value: &RawJson, depth: usize) -> Result<bool, CanonicalError> {
    Ok(match value.kind() {
        Kind::Null | Kind::Bool | Kind::String => true,
        Kind::Number => {
            let text = value.as_text();
            is_small_integer(text) || canonical_number(text)? == text
        }
        Kind::Array => {
            check_depth(depth)?;
            for item in value.items().into_iter().flatten() {
                if !numbers_are_canonical(&item, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
        Kind::Object => {
            check_depth(depth)?;
            for (_, item) in value.members().into_iter().flatten() {
                if !numbers_are_canonical(&item, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
    })
}

fn write_normalized(
    out: &mut Vec<u8>,
    value: &RawJson,
    depth: usize,
) -> Result<(), CanonicalError> {
    match value.kind() {
        Kind::Number => out.extend_from_slice(canonical_number(value.as_text())?.as_bytes()),
        Kind::Array => {
            check_depth(depth)?;
            out.push(b'[');
            for (index, item) in value.items().into_iter().flatten().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_normalized(out, &item, depth + 1)?;
            }
            out.push(b']');
        }
        Kind::Object => {
            check_depth(depth)?;
            out.push(b'{');
            for (index, (key, item)) in value.members().into_iter().flatten().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, &*key).expect("a key always serializes");
                out.push(b':');
                write_normalized(out, &item, depth + 1)?;
            }
            out.push(b'}');
        }
        Kind::Null | Kind::Bool | Kind::String => out.extend_from_slice(value.as_bytes()),
    }
    Ok(())
}
