//! The tiny `summary:` template language: `{{args.customer}}`, `{{args.items | length}}`,
//! `{{args.meta | json}}`, `{{tool}}`, `{{upstream}}`.
//!
//! Deliberately not a general template engine: no loops, no conditionals, no expressions,
//! so a policy author cannot write a template that is slow or that reads anything but the
//! call it describes.

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
    pub(crate) args: &'a Value,
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
                        Source::Args(path) => lookup(scope.args, path).map(|v| apply(v, *filter)),
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

fn lookup<'v>(mut value: &'v Value, path: &[String]) -> Option<&'v Value> {
    for key in path {
        value = match value {
            Value::Object(map) => map.get(key)?,
            Value::Array(items) => items.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

fn apply(value: &Value, filter: Filter) -> String {
    match filter {
        Filter::None => match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        Filter::Length => match value {
            Value::Array(items) => items.len().to_string(),
            Value::Object(map) => map.len().to_string(),
            Value::String(s) => s.chars().count().to_string(),
            _ => String::new(),
        },
        Filter::Json => value.to_string(),
    }
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

    fn render(template: &str, args: Value) -> String {
        Template::parse(template)
            .expect("valid template")
            .render(&Scope {
                args: &args,
                tool: "create_order",
                upstream: "store",
            })
    }

    #[test]
    fn placeholders_render_args_tool_and_upstream() {
        let args: Value = serde_json::from_str(
            r#"{"customer": "Ada", "items": [{"sku": "A"}, {"sku": "B"}], "n": 1.50}"#,
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
