//! The upstream's `WWW-Authenticate` challenges, pointed at the gateway: the value of every
//! `resource_metadata` parameter (RFC 9728 §5.1) becomes the gateway's well-known URL of the
//! route. The upstream's own URL is usually internal, and a document fetched from it would
//! name the upstream, not the gateway, as the resource. Every other parameter (`error`,
//! `scope`, `realm`, …) and every other challenge is relayed as the upstream wrote it.

use http::HeaderMap;
use http::header::{self, HeaderValue};

const PARAMETER: &str = "resource_metadata";

/// Points every `resource_metadata` of `headers`' challenges at `url`.
pub(super) fn point_at(headers: &mut HeaderMap, url: &str) {
    if !headers.contains_key(header::WWW_AUTHENTICATE) {
        return;
    }
    let values: Vec<HeaderValue> = headers
        .get_all(header::WWW_AUTHENTICATE)
        .iter()
        .map(|value| {
            value
                .to_str()
                .ok()
                .and_then(|text| rewritten(text, url))
                .and_then(|text| HeaderValue::try_from(text).ok())
                .unwrap_or_else(|| value.clone())
        })
        .collect();
    headers.remove(header::WWW_AUTHENTICATE);
    for value in values {
        headers.append(header::WWW_AUTHENTICATE, value);
    }
}

/// `value` with each `resource_metadata` parameter's value replaced by `"url"`; `None` when it
/// has none. The name is matched case-insensitively (auth-param names are, RFC 9110 §11.2),
/// only where a parameter can start and never inside a quoted string; the old value is a
/// quoted string (escapes included) or a token.
fn rewritten(value: &str, url: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let name = PARAMETER.as_bytes();
    let mut out = String::with_capacity(value.len() + url.len());
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'"' {
            at = end_of_value(bytes, at);
            continue;
        }
        let at_boundary = at == 0 || matches!(bytes[at - 1], b' ' | b'\t' | b',');
        let is_name = bytes
            .get(at..at + name.len())
            .is_some_and(|candidate| candidate.eq_ignore_ascii_case(name));
        if !(at_boundary && is_name) {
            at += 1;
            continue;
        }
        let equals = skip_spaces(bytes, at + name.len());
        if bytes.get(equals) != Some(&b'=') {
            at += name.len();
            continue;
        }
        let value_start = skip_spaces(bytes, equals + 1);
        let value_end = end_of_value(bytes, value_start);
        out.push_str(&value[copied..value_start]);
        out.push('"');
        out.push_str(url);
        out.push('"');
        copied = value_end;
        at = value_end;
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&value[copied..]);
    Some(out)
}

fn skip_spaces(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    at
}

/// Where the parameter value starting at `start` ends: after the closing quote of a quoted
/// string, or at the first comma or space of a token.
fn end_of_value(bytes: &[u8], start: usize) -> usize {
    if bytes.get(start) != Some(&b'"') {
        let mut at = start;
        while at < bytes.len() && !matches!(bytes[at], b',' | b' ' | b'\t') {
            at += 1;
        }
        return at;
    }
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";

    #[test]
    fn the_metadata_url_is_replaced_and_every_other_parameter_kept() {
        let cases = [
            (
                r#"Bearer resource_metadata="http://10.0.0.7:8080/.well-known/oauth-protected-resource/mcp""#,
                format!(r#"Bearer resource_metadata="{URL}""#),
            ),
            (
                r#"Bearer error="invalid_token", error_description="expired", resource_metadata="http://notes.internal/x""#,
                format!(
                    r#"Bearer error="invalid_token", error_description="expired", resource_metadata="{URL}""#
                ),
            ),
            (
                r#"Bearer Resource_Metadata = "http://a/\"b\"", scope="files:write""#,
                format!(r#"Bearer Resource_Metadata = "{URL}", scope="files:write""#),
            ),
            (
                "Bearer resource_metadata=http://a/b,error=insufficient_scope",
                format!(r#"Bearer resource_metadata="{URL}",error=insufficient_scope"#),
            ),
        ];
        for (upstream, expected) in cases {
            assert_eq!(
                rewritten(upstream, URL).as_deref(),
                Some(&*expected),
                "{upstream}"
            );
        }
    }

    #[test]
    fn challenges_without_the_parameter_are_left_alone() {
        for value in [
            r#"Bearer realm="notes""#,
            r#"Basic realm="x_resource_metadata=1""#,
            r#"Bearer error_description="see resource_metadata""#,
            r#"Bearer error_description="not resource_metadata=x, really""#,
        ] {
            assert_eq!(rewritten(value, URL), None, "{value}");
        }
    }

    #[test]
    fn every_challenge_header_is_rewritten_in_order() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Basic realm="notes""#),
        );
        headers.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Bearer resource_metadata="http://internal/x""#),
        );
        point_at(&mut headers, URL);
        let values: Vec<&str> = headers
            .get_all(header::WWW_AUTHENTICATE)
            .iter()
            .map(|v| v.to_str().expect("text"))
            .collect();
        assert_eq!(
            values,
            [
                r#"Basic realm="notes""#.to_owned(),
                format!(r#"Bearer resource_metadata="{URL}""#)
            ]
        );
    }
}
