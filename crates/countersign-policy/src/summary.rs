//! The tiny `summary:` template language: `{{args.customer}}`, `{{args.items | length}}`,
//! `{{args.meta | json}}`, `{{tool}}`, `{{upstream}}`.
//!
//! Deliberately not a general template engine: no loops, no conditionals, no expressions,
//! so a policy author cannot write a template that is slow or that reads anything but the
//! call it describes.

use countersign_jsonrpc::{Kind, RawJson};
use serde_json::Value;

/// Longest rendering of one placeholder, in characters. A summary is a one-line headline;
/// the full arguments are shown next to it, so cutting a long value hides nothing.
const MAX_VALUE_CHARS: usize = 200;

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Placeholder { source: Source, filter: Filter },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// `args` followed by zero or more keys (array indices are decimal keys).
    Args(Vec<String>),
    Tool,
    Upstream,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filter {
    None,
    Length,
    Json,
}

/// What a template may read.
pub(crate) struct Scope<'a> {
    pub(crate) args: &'a RawJson,
    pub(crate) tool: &'a str,
    pub(crate) upstream: &'a str,
}

impl Template {
    /// Parses `text`, refusing anything that is not a well-formed placeholder so typos are
    /// found when the policy loads rather than rendering silently wrong.
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| {
                format!(
                    "`{{{{` at byte {} is never closed",
                    text.len() - rest.len() + open
                )
            })?;
            parts.push(parse_placeholder(&after[..close])?);
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Template { parts })
    }

    /// Renders against one call. Missing paths render as nothing; values are truncated and
    /// have control, bidi and zero-width characters escaped, because they come from the
    /// model and end up in front of a person deciding whether to approve.
    pub(crate) fn render(&self, scope: &Scope<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Placeholder { source, filter } => {
                    let value = match source {
                        Source::Args(path) => lookup(scope.args, path).map(|v| apply(&v, *filter)),
                        Source::Tool => Some(apply_str(scope.tool, *filter)),
                        Source::Upstream => Some(apply_str(scope.upstream, *filter)),
                    };
                    if let Some(value) = value {
                        push_sanitized(&mut out, &value);
                    }
                }
            }
        }
        out
    }
}

fn parse_placeholder(inner: &str) -> Result<Part, String> {
    let mut pieces = inner.split('|');
    let path = pieces.next().unwrap_or_default().trim();
    let filter = match pieces.next().map(str::trim) {
        None => Filter::None,
        Some("length") => Filter::Length,
        Some("json") => Filter::Json,
        Some(other) => {
            return Err(format!(
                "unknown filter `{other}` in `{{{{{inner}}}}}` (known: length, json)"
            ));
        }
    };
    if pieces.next().is_some() {
        return Err(format!("only one filter is allowed in `{{{{{inner}}}}}`"));
    }
    let mut segments = path.split('.');
    let source = match segments.next() {
        Some("args") => {
            let keys: Vec<String> = segments.map(str::to_owned).collect();
            if let Some(bad) = keys.iter().find(|k| !is_key(k)) {
                return Err(format!(
                    "invalid key `{bad}` in `{{{{{inner}}}}}` (keys are [A-Za-z0-9_-]+)"
                ));
            }
            Source::Args(keys)
        }
        Some("tool") if segments.next().is_none() => Source::Tool,
        Some("upstream") if segments.next().is_none() => Source::Upstream,
        _ => {
            return Err(format!(
                "unknown placeholder `{{{{{inner}}}}}` (use args.<key>…, tool or upstream)"
            ));
        }
    };
    Ok(Part::Placeholder { source, filter })
}

fn is_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn lookup(value: &RawJson, path: &[String]) -> Option<RawJson> {
    let mut value = value.clone();
    for key in path {
        value = match value.kind() {
            Kind::Object => value.get(key)?,
            Kind::Array => value.items()?.nth(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

fn apply(value: &RawJson, filter: Filter) -> String {
    match filter {
        Filter::None => match value.as_str() {
            Some(s) => s.into_owned(),
            None => compact_json(value),
        },
        Filter::Length => match value.kind() {
            Kind::Array => value.items().map_or(0, Iterator::count).to_string(),
            Kind::Object => value.members().map_or(0, Iterator::count).to_string(),
            Kind::String => value
                .as_str()
                .unwrap_or_default()
                .chars()
                .count()
                .to_string(),
            _ => String::new(),
        },
        Filter::Json => compact_json(value),
    }
}

/// serde_json's compact text of `value` (what `Value::to_string` printed before arguments
/// were kept raw: no whitespace between tokens, strings re-escaped from their contents,
/// numbers as written), cut once it is sure to be longer than [`push_sanitized`] shows, so a
/// placeholder never copies more of the arguments than it can show.
fn compact_json(value: &RawJson) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}

/// Appends the compact text of `value` to `out`; `false` once `out` is long enough to be cut
/// (more than `MAX_VALUE_CHARS` characters: a character is at most four bytes).
fn write_compact(value: &RawJson, out: &mut String) -> bool {
    match value.kind() {
        Kind::String => push_json_string(out, &value.as_str().unwrap_or_default()),
        Kind::Array => {
            out.push('[');
            for (i, item) in value.items().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !write_compact(&item, out) {
                    return false;
                }
            }
            out.push(']');
        }
        Kind::Object => {
            out.push('{');
            for (i, (key, item)) in value.members().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(out, &key);
                out.push(':');
                if !write_compact(&item, out) {
                    return false;
                }
            }
            out.push('}');
        }
        Kind::Number => push_json_number(out, value.as_text()),
        Kind::Null | Kind::Bool => out.push_str(value.as_text()),
    }
    out.len() <= 4 * MAX_VALUE_CHARS
}

/// A number as serde_json (`arbitrary_precision`) writes it: as the client wrote it, except
/// that the exponent marker is `e` and always has a sign (`1E5` and `1e5` print `1e+5`).
fn push_json_number(out: &mut String, text: &str) {
    match text.split_once(['e', 'E']) {
        None => out.push_str(text),
        Some((mantissa, exponent)) => {
            out.push_str(mantissa);
            out.push('e');
            if !exponent.starts_with(['+', '-']) {
                out.push('+');
            }
            out.push_str(exponent);
        }
    }
}

fn push_json_string(out: &mut String, text: &str) {
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

fn apply_str(text: &str, filter: Filter) -> String {
    match filter {
        Filter::None => text.to_owned(),
        Filter::Length => text.chars().count().to_string(),
        Filter::Json => Value::from(text).to_string(),
    }
}

fn push_sanitized(out: &mut String, value: &str) {
    for (i, c) in value.chars().enumerate() {
        if i == MAX_VALUE_CHARS {
            out.push('…');
            return;
        }
        if is_deceptive(c) {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
}

/// Characters that can hide or reorder what a person reads.
fn is_deceptive(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, args: impl Into<RawJson>) -> String {
        Template::parse(template)
            .expect("valid template")
            .render(&Scope {
                args: &args.into(),
                tool: "create_order",
                upstream: "store",
            })
    }

    #[test]
    fn placeholders_render_args_tool_and_upstream() {
        // As the client sent it: spaces between tokens, and `1.50` kept as written.
        let args = RawJson::parse_slice(
            br#"{"customer": "Ada", "items": [{"sku": "A"}, {"sku": "B"}], "n": 1.50}"#,
        )
        .expect("json");
        assert_eq!(
            render(
                "Create order for {{args.customer}} with {{args.items | length}} lines",
                args.clone()
            ),
            "Create order for Ada with 2 lines"
        );
        assert_eq!(
            render("{{tool}}@{{ upstream }}", args.clone()),
            "create_order@store"
        );
        assert_eq!(
            render("{{args.items.1.sku}} {{args.n}}", args.clone()),
            "B 1.50"
        );
        assert_eq!(
            render("{{args.items.0 | json}}", args.clone()),
            r#"{"sku":"A"}"#
        );
        assert_eq!(
            render("{{args.customer|json}} {{args.customer|length}}", args),
            r#""Ada" 3"#
        );
    }

    #[test]
    fn json_and_non_string_values_render_as_serde_json_compact_text() {
        // Whitespace between tokens and string escapes as a client may write them.
        let text = br#"{ "m" : { "a" : [ 1 , 1.50 , -0 , 1e5 , 2E-3 , 3e+1 , true , null ] ,
            "s" : "\u0041\/\u00e9\n" , "o" : { } } , "e" : [ ] }"#;
        let args = RawJson::parse_slice(text).expect("json");
        let tree: Value = serde_json::from_slice(text).expect("json");
        let expected = r#"{"a":[1,1.50,-0,1e+5,2e-3,3e+1,true,null],"s":"A/é\n","o":{}}"#;
        assert_eq!(tree["m"].to_string(), expected);
        assert_eq!(render("{{args.m | json}}", args.clone()), expected);
        assert_eq!(render("{{args.m}}", args.clone()), expected);
        assert_eq!(
            render("{{args.m.a}} {{args.e}} {{args.e | json}}", args.clone()),
            "[1,1.50,-0,1e+5,2e-3,3e+1,true,null] [] []"
        );
        assert_eq!(render("{{args.m.s}}", args.clone()), "A/é\\u{000a}");
        assert_eq!(render("{{args.m.s | json}}", args), r#""A/é\n""#);
    }

    #[test]
    fn a_huge_value_renders_cut_like_its_serde_json_text() {
        let items: Vec<Value> = (0..200_000).map(|i| json!({"n": i})).collect();
        let args = json!({"items": items});
        let full = args["items"].to_string();
        let out = render("{{args.items | json}}", &args);
        assert_eq!(out.chars().count(), MAX_VALUE_CHARS + 1);
        assert_eq!(out.strip_suffix('…'), Some(&full[..MAX_VALUE_CHARS]));
        assert_eq!(render("{{args.items}}", &args), out);
    }

    #[test]
    fn missing_paths_render_as_empty() {
        assert_eq!(
            render(
                "[{{args.nope}}][{{args.customer.x}}][{{args.items.9}}]",
                json!({"customer": "Ada", "items": []})
            ),
            "[][][]"
        );
        assert_eq!(render("[{{args.x}}]", Value::Null), "[]");
    }

    #[test]
    fn rendered_values_escape_deceptive_characters_and_are_truncated() {
        let out = render(
            "{{args.s}}",
            json!({"s": "a\u{202e}b\nc\u{200b}d\u{1b}[31m"}),
        );
        assert_eq!(out, "a\\u{202e}b\\u{000a}c\\u{200b}d\\u{001b}[31m");
        let out = render("{{args.s}}", json!({"s": "x".repeat(500)}));
        assert_eq!(out.chars().count(), MAX_VALUE_CHARS + 1);
        assert!(out.ends_with('…'));
    }

    #[test]
    fn malformed_placeholders_are_refused() {
        for (bad, needle) in [
            ("{{args.customer", "never closed"),
            ("{{ principal.id }}", "unknown placeholder"),
            ("{{}}", "unknown placeholder"),
            ("{{args..x}}", "invalid key"),
            ("{{args.a b}}", "invalid key"),
            ("{{args.items | count}}", "unknown filter `count`"),
            ("{{args.items | length | json}}", "only one filter"),
            ("{{tool.name}}", "unknown placeholder"),
        ] {
            let err = Template::parse(bad).expect_err(bad);
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn text_without_placeholders_is_kept_verbatim() {
        assert_eq!(render("plain } text {", json!({})), "plain } text {");
    }
}
