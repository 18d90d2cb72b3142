//! Writing a token's claims, and reading a verified token's claims.
//!
//! Every held call mints a token, and serde's derived serializer spent some 3,700 instructions
//! on its claims (a struct field at a time, strings escaped byte by byte). [`write`] writes
//! exactly what `serde_json::to_vec` writes for them, field by field with the JSON crate's
//! run-copying string writer; a property test holds the two together.
//!
//! Every redemption decodes one claims object of about 400 bytes, and serde's derived
//! deserializer spent some 9,000 instructions on it: a key lookup per field, a token-by-token
//! string scan, the field bookkeeping of `deny_unknown_fields`. A minted claims object has one
//! shape, though: `serde_json::to_vec` writes the fields in declaration order, compactly, each
//! once. [`read_minted`] reads exactly that shape in one pass and gives up on anything else, and
//! then serde reads the object as before. So the fast path decides nothing: whatever it
//! returns, serde returns too (a property test holds the two together), and every object it
//! declines is accepted or refused exactly as it always was.

use countersign_jsonrpc::write_json_string;

use super::{Claims, TokenRejection, parse_object};

/// The claims as `serde_json::to_vec` writes them: compact, the fields in declaration order,
/// the `None`s left out.
pub(super) fn write(claims: &Claims) -> Vec<u8> {
    let mut out = Vec::with_capacity(384);
    let mut integers = itoa::Buffer::new();
    out.extend_from_slice(b"{\"v\":");
    out.extend_from_slice(integers.format(claims.v).as_bytes());
    let string = |out: &mut Vec<u8>, key: &str, value: Option<&str>| {
        if let Some(value) = value {
            out.extend_from_slice(key.as_bytes());
            write_json_string(out, value);
        }
    };
    string(&mut out, ",\"iss\":", Some(&claims.iss));
    string(&mut out, ",\"sub\":", Some(&claims.sub));
    string(&mut out, ",\"sid\":", claims.sid.as_deref());
    string(&mut out, ",\"up\":", Some(&claims.up));
    string(&mut out, ",\"m\":", Some(&claims.m));
    string(&mut out, ",\"tool\":", Some(&claims.tool));
    string(&mut out, ",\"ah\":", Some(&claims.ah));
    string(&mut out, ",\"ph\":", claims.ph.as_deref());
    string(&mut out, ",\"tdh\":", Some(&claims.tdh));
    string(&mut out, ",\"rule\":", Some(&claims.rule));
    string(&mut out, ",\"ch\":", Some(&claims.ch));
    out.extend_from_slice(b",\"iat\":");
    out.extend_from_slice(integers.format(claims.iat).as_bytes());
    out.extend_from_slice(b",\"exp\":");
    out.extend_from_slice(integers.format(claims.exp).as_bytes());
    string(&mut out, ",\"jti\":", Some(&claims.jti));
    string(&mut out, ",\"st\":", claims.st.as_deref());
    string(&mut out, ",\"aid\":", claims.aid.as_deref());
    out.push(b'}');
    out
}

/// A token's claims from their decoded JSON: a minted object read in one pass, any other
/// spelling by serde, which accepts or refuses it exactly as it always did.
pub(super) fn read(json: &[u8]) -> Result<Claims, TokenRejection> {
    match read_minted(json) {
        Some(claims) => Ok(claims),
        None => parse_object(json),
    }
}

/// The claims in `json`, when `json` is exactly a compact object as `serde_json` writes a
/// [`Claims`]: the fields in declaration order, each once, strings without escapes or control
/// characters, integers in their shortest form, nothing after the closing brace. `None` for
/// any other text, valid or not.
fn read_minted(json: &[u8]) -> Option<Claims> {
    // Validated once, so each string below is a slice of it rather than its own check.
    let text = std::str::from_utf8(json).ok()?;
    let mut fields = Fields { text, at: 0 };
    fields.literal("{")?;
    let v = u32::try_from(fields.integer("\"v\":")?).ok()?;
    let iss = fields.string(",\"iss\":")?;
    let sub = fields.string(",\"sub\":")?;
    let sid = fields.optional_string(",\"sid\":")?;
    let up = fields.string(",\"up\":")?;
    let m = fields.string(",\"m\":")?;
    let tool = fields.string(",\"tool\":")?;
    let ah = fields.string(",\"ah\":")?;
    let ph = fields.optional_string(",\"ph\":")?;
    let tdh = fields.string(",\"tdh\":")?;
    let rule = fields.string(",\"rule\":")?;
    let ch = fields.string(",\"ch\":")?;
    let iat = fields.integer(",\"iat\":")?;
    let exp = fields.integer(",\"exp\":")?;
    let jti = fields.string(",\"jti\":")?;
    let st = fields.optional_string(",\"st\":")?;
    let aid = fields.optional_string(",\"aid\":")?;
    fields.literal("}")?;
    if fields.at != text.len() {
        return None;
    }
    Some(Claims {
        v,
        iss,
        sub,
        sid,
        up,
        m,
        tool,
        ah,
        ph,
        tdh,
        rule,
        ch,
        iat,
        exp,
        jti,
        st,
        aid,
    })
}

/// A cursor over the claims text. Every method returns `None` where the text leaves the
/// minted shape.
struct Fields<'a> {
    text: &'a str,
    at: usize,
}

impl Fields<'_> {
    /// Steps over `expected`, which must come next.
    fn literal(&mut self, expected: &str) -> Option<()> {
        let rest = &self.text.as_bytes()[self.at..];
        rest.starts_with(expected.as_bytes()).then(|| {
            self.at += expected.len();
        })
    }

    /// The string value after `key` (the separator, key and colon, as one literal).
    fn string(&mut self, key: &str) -> Option<String> {
        self.literal(key)?;
        self.quoted()
    }

    /// The string value after `key` if the text has that key next; `Some(None)` if not.
    fn optional_string(&mut self, key: &str) -> Option<Option<String>> {
        match self.literal(key) {
            Some(()) => self.quoted().map(Some),
            None => Some(None),
        }
    }

    /// The string that comes next, quotes included in the text, not in the value.
    fn quoted(&mut self) -> Option<String> {
        self.literal("\"")?;
        let start = self.at;
        let rest = &self.text.as_bytes()[start..];
        // A backslash or a control character is valid JSON or an error that serde must
        // report; either way the fast path does not decide it. The quote or backslash is found
        // with a vector search (the hashes and ids are most of the object's bytes), control
        // characters in one branch-free pass over what it skipped.
        let length = memchr::memchr2(b'"', b'\\', rest)?;
        let contents = &rest[..length];
        if rest[length] != b'"'
            || contents
                .iter()
                .fold(false, |control, &b| control | (b < 0x20))
        {
            return None;
        }
        self.at = start + length + 1;
        // On the quotes, which are ASCII, so on character boundaries.
        self.text.get(start..start + length).map(str::to_owned)
    }

    /// The unsigned integer after `key`, written as JSON writes it: digits, no leading zero,
    /// no fraction or exponent (serde refuses those for an integer field; the fast path leaves
    /// them to it).
    fn integer(&mut self, key: &str) -> Option<u64> {
        self.literal(key)?;
        let bytes = &self.text.as_bytes()[self.at..];
        let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && bytes[0] == b'0') {
            return None;
        }
        if matches!(bytes.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let value = bytes[..digits].iter().try_fold(0u64, |value, &digit| {
            value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })?;
        self.at += digits;
        Some(value)
    }
}

#[cfg(test)]
mod tests;
