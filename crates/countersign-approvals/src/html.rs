//! The page's HTML: one stylesheet inlined and allowed by its hash, no script, no external
//! asset, and every piece of text from a request escaped twice — first by
//! [`countersign_proxy::display::escape`], which makes bidi, zero-width and control characters
//! visible as `\u{…}`, then for HTML.

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest as _, Sha256};

/// Readable on a phone: one column, large buttons, long lines wrapped rather than scrolled off.
const STYLE: &str = "\
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f4f4f5;color:#18181b;line-height:1.45}\
main{max-width:48rem;margin:0 auto;padding:1rem}\
h1{font-size:1.35rem;margin:.5rem 0 1rem}\
h2{font-size:1.05rem;margin:0 0 .25rem}\
.card>p:first-child{margin-top:0}.card>p:last-child{margin-bottom:0}\
.card{background:#fff;border:1px solid #d4d4d8;border-radius:.5rem;padding:1rem;margin-bottom:1rem}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.35rem 1rem;margin:0}\
dt{font-weight:600;color:#52525b}dd{margin:0;overflow-wrap:anywhere}\
pre{background:#18181b;color:#fafafa;padding:.75rem;border-radius:.375rem;white-space:pre-wrap;overflow-wrap:anywhere;font-size:.9rem;margin:.5rem 0 0}\
.risk{font-weight:700;color:#b91c1c}\
.actions{display:flex;gap:.75rem;flex-wrap:wrap}\
button{font-size:1.1rem;padding:.75rem 1.5rem;border-radius:.375rem;border:0;cursor:pointer;flex:1 1 10rem}\
.approve{background:#15803d;color:#fff}.deny{background:#b91c1c;color:#fff}\
.note{color:#52525b;font-size:.95rem}\
.ok{border-left:.4rem solid #15803d}.bad{border-left:.4rem solid #b91c1c}.info{border-left:.4rem solid #71717a}\
@media (max-width:30rem){dl{grid-template-columns:1fr}dt{margin-top:.4rem}}";

static STYLE_HASH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "'sha256-{}'",
        STANDARD.encode(Sha256::digest(STYLE.as_bytes()))
    )
});

/// The `Content-Security-Policy` of every page: nothing may load, run or frame it; the one
/// stylesheet is allowed by its hash; forms post only back to the page.
pub(crate) fn content_security_policy() -> String {
    format!(
        "default-src 'none'; style-src {}; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        *STYLE_HASH
    )
}

/// `text` made safe as HTML text or a double-quoted attribute value.
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text from a request, as a person must see it: invisible characters made visible, then
/// escaped for HTML.
pub(crate) fn shown(text: &str) -> String {
    escape_html(&countersign_proxy::display::escape(text))
}

/// A whole document around `body` (already HTML).
pub(crate) fn document(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{title} · countersign</title><style>{STYLE}</style></head>\
         <body><main>{body}</main></body></html>\n",
        title = escape_html(title),
    )
}

/// A page that only says something: `kind` is `ok`, `bad` or `info`; `message` is HTML.
pub(crate) fn message_page(title: &str, kind: &str, message: &str) -> String {
    document(
        title,
        &format!(
            "<h1>{}</h1><div class=\"card {kind}\">{message}</div>",
            escape_html(title)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_invisible_characters_cannot_pass() {
        assert_eq!(
            shown("<script>alert(\"x\")</script>&'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        // RIGHT-TO-LEFT OVERRIDE and ZERO WIDTH SPACE become visible text.
        assert_eq!(
            shown("ada\u{202e}lanif\u{200b}"),
            "ada\\u{202e}lanif\\u{200b}"
        );
    }

    #[test]
    fn policy_allows_exactly_the_inlined_stylesheet() {
        let csp = content_security_policy();
        assert!(csp.starts_with("default-src 'none'; style-src 'sha256-"));
        for directive in [
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{directive} in {csp}");
        }
        assert!(!csp.contains("unsafe"), "no unsafe-inline or unsafe-eval");
        let expected = STANDARD.encode(Sha256::digest(STYLE.as_bytes()));
        assert!(csp.contains(&expected), "the hash is the stylesheet's");
        assert!(document("t", "").contains(&format!("<style>{STYLE}</style>")));
    }
}
