//! The `--upstream` flag: one string for every kind of upstream, so the one-line URL swap works
//! for each.
//!
//! - `http://host:port/mcp`, `https://host/mcp` — Streamable HTTP;
//! - `sse+http://host:port/sse`, `sse+https://…` — the legacy 2024-11-05 HTTP+SSE transport;
//! - `stdio:npx -y @modelcontextprotocol/server-memory` — a stdio program the gateway starts,
//!   split into words like a POSIX shell would (quotes and backslashes, no expansion).

use anyhow::{Context, bail, ensure};

use super::RawUpstream;

/// Fills `upstream`'s `url`/`transport` or `command`/`args` from the flag's `value`.
pub(super) fn apply(value: &str, upstream: &mut RawUpstream) -> anyhow::Result<()> {
    if let Some(command_line) = value.strip_prefix("stdio:") {
        let mut words = split_words(command_line)
            .with_context(|| format!("--upstream `{value}`"))?
            .into_iter();
        let program = words
            .next()
            .with_context(|| format!("--upstream `{value}`: no program after `stdio:`"))?;
        upstream.command = Some(program);
        upstream.args = words.collect();
        return Ok(());
    }
    if let Some(url) = value.strip_prefix("sse+") {
        upstream.url = Some(url.to_owned());
        upstream.transport = Some("sse".to_owned());
        return Ok(());
    }
    if !value.contains("://") && value.contains(char::is_whitespace) {
        bail!(
            "--upstream `{value}` is not a URL; to have the gateway start a stdio server, write \
             --upstream 'stdio:{value}'"
        );
    }
    upstream.url = Some(value.to_owned());
    Ok(())
}

/// Splits `line` into words: whitespace separates, `'…'` keeps everything literally, `"…"`
/// keeps everything but `\"` and `\\`, a backslash outside quotes escapes the next character.
fn split_words(line: &str) -> anyhow::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            '\'' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => current.push(c),
                        None => bail!("unterminated ' quote"),
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => current.push(c),
                            Some(c) => {
                                current.push('\\');
                                current.push(c);
                            }
                            None => bail!("unterminated \" quote"),
                        },
                        Some(c) => current.push(c),
                        None => bail!("unterminated \" quote"),
                    }
                }
            }
            '\\' => {
                let escaped = chars
                    .next()
                    .context("a trailing backslash escapes nothing")?;
                word.get_or_insert_with(String::new).push(escaped);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    ensure!(!words.is_empty() || line.trim().is_empty(), "no words");
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(value: &str) -> RawUpstream {
        let mut upstream = RawUpstream::default();
        apply(value, &mut upstream).expect("a valid flag");
        upstream
    }

    #[test]
    fn stdio_command_lines_split_like_a_shell() {
        let upstream = parsed("stdio:npx -y @modelcontextprotocol/server-memory");
        assert_eq!(upstream.command.as_deref(), Some("npx"));
        assert_eq!(upstream.args, ["-y", "@modelcontextprotocol/server-memory"]);

        let upstream = parsed(r#"stdio:python3 "my server.py" --name 'a b' c\ d "q\"x""#);
        assert_eq!(upstream.command.as_deref(), Some("python3"));
        assert_eq!(
            upstream.args,
            ["my server.py", "--name", "a b", "c d", "q\"x"]
        );
    }

    #[test]
    fn sse_prefix_selects_the_legacy_transport() {
        let upstream = parsed("sse+https://mcp.example.com/sse");
        assert_eq!(upstream.url.as_deref(), Some("https://mcp.example.com/sse"));
        assert_eq!(upstream.transport.as_deref(), Some("sse"));
    }

    #[test]
    fn a_bare_command_line_is_refused_with_the_stdio_form_suggested() {
        let mut upstream = RawUpstream::default();
        let error = apply("npx -y @modelcontextprotocol/server-memory", &mut upstream)
            .expect_err("not a URL");
        assert!(
            error
                .to_string()
                .contains("--upstream 'stdio:npx -y @modelcontextprotocol/server-memory'"),
            "{error}"
        );
    }

    #[test]
    fn broken_quoting_and_empty_commands_are_refused() {
        for bad in [
            "stdio:node 'server.js",
            "stdio:",
            "stdio:   ",
            r#"stdio:a "b"#,
        ] {
            let mut upstream = RawUpstream::default();
            assert!(apply(bad, &mut upstream).is_err(), "{bad}");
        }
    }
}
