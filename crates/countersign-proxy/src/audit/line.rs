//! Writes an [`AuditRecord`] as its JSON line, by hand.
//!
//! Every call writes one or two records, so their encoding is on the hot path: through serde's
//! derived `Serialize`, a record cost about 3,700 instructions (a map entry, a key escape and a
//! value escape per field), most of it for strings that need no escaping at all. Here the keys
//! are literals, the gateway's own names are copied as they are, and other strings go through the
//! JSON crate's run-copying string writer. The output
//! is byte-for-byte what `serde_json` writes for the same record (same field order, same
//! escapes, same skipped `None`s); the tests hold it to that.

use countersign_jsonrpc::write_json_string as string;

use super::sink::AuditRecord;

/// `,"name":`, the separator and key in front of a field's value, as one literal: keys are this
/// module's own and need no escaping, and one copy per field is cheaper than three.
macro_rules! key {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

impl AuditRecord<'_> {
    /// Appends the record's JSON (without the newline) to `out`.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) -> std::io::Result<()> {
        out.extend_from_slice(b"{\"ts\":\"");
        out.extend_from_slice(self.ts.as_bytes());
        out.push(b'"');
        name(out, key!("event"), self.event);
        field(out, key!("principal"), self.principal);
        field(out, key!("upstream"), self.upstream);
        name(out, key!("method"), self.method);
        field(out, key!("tool"), self.tool);
        optional(out, key!("session"), self.session);
        if let Some(risk) = self.risk {
            name(out, key!("risk"), risk);
        }
        optional(out, key!("rule"), self.rule);
        if let Some(action) = self.action {
            name(out, key!("action"), action);
        }
        optional(out, key!("channel"), self.channel);
        optional(out, key!("jti"), self.jti);
        optional(out, key!("args_hash"), self.args_hash);
        field(out, key!("outcome"), self.outcome);
        if let Some(latency) = self.latency_ms {
            out.extend_from_slice(b",\"latency_ms\":");
            serde_json::to_writer(&mut *out, &latency).map_err(std::io::Error::other)?;
        }
        optional(out, key!("trace_id"), self.trace_id);
        optional(out, key!("span_id"), self.span_id);
        if let Some(arguments) = self.arguments {
            out.extend_from_slice(b",\"arguments\":");
            serde_json::to_writer(&mut *out, arguments).map_err(std::io::Error::other)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// `,"key":"value"`, `key` written by [`key!`].
fn field(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    string(out, value);
}

/// `,"key":"value"` for one of the gateway's own names (an event, a method, a risk, an action):
/// identifiers with nothing to escape, so copied without the string writer's scan, which cost
/// more than the copy on a name this short. `names_need_no_escaping` holds every name to that.
fn name(out: &mut Vec<u8>, key: &str, value: &'static str) {
    debug_assert!(is_plain(value), "{value:?} needs escaping");
    out.extend_from_slice(key.as_bytes());
    out.push(b'"');
    out.extend_from_slice(value.as_bytes());
    out.push(b'"');
}

/// Whether the string writer writes `name` as it is, between quotes: nothing in it to escape.
fn is_plain(name: &str) -> bool {
    let mut written = Vec::with_capacity(name.len() + 2);
    string(&mut written, name);
    written.len() == name.len() + 2
}

fn optional(out: &mut Vec<u8>, key: &str, value: Option<&str>) {
    if let Some(value) = value {
        field(out, key, value);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use countersign_jsonrpc::RawJson;
    use proptest::prelude::*;

    use super::*;
    use crate::audit::timestamp;

    fn encoded(record: &AuditRecord<'_>) -> String {
        let mut out = Vec::new();
        record.write_json(&mut out).expect("encode");
        String::from_utf8(out).expect("utf-8")
    }

    fn record<'a>(text: &'a str, present: bool, arguments: Option<&'a RawJson>) -> AuditRecord<'a> {
        let some = |s: &'a str| present.then_some(s);
        AuditRecord {
            ts: timestamp(UNIX_EPOCH + Duration::from_millis(1_796_041_296_789)),
            event: "outcome",
            principal: text,
            upstream: "store",
            method: "tools/call",
            tool: text,
            session: some(text),
            risk: present.then_some("write"),
            rule: some(text),
            action: present.then_some("confirm"),
            channel: some("token"),
            jti: some(text),
            args_hash: some("5f2b"),
            outcome: text,
            latency_ms: present.then_some(1.0 / 3.0),
            trace_id: some("4bf92f3577b34da6a3ce929d0e0e4736"),
            span_id: some("00f067aa0ba902b7"),
            arguments,
        }
    }

    #[test]
    fn a_record_is_what_serde_writes_for_it() {
        let arguments = RawJson::parse_slice(br#"{"to":"ada","n":[1.50,2e3],"s":"\u0007"}"#)
            .expect("json")
            .minified();
        for present in [false, true] {
            for arguments in [None, Some(&arguments)] {
                let r = record(
                    "ada \"the\" \\ \u{7f} é 😀 \n\t\r\u{1}\u{1f}",
                    present,
                    arguments,
                );
                assert_eq!(encoded(&r), serde_json::to_string(&r).expect("serde"));
            }
        }
    }

    #[test]
    fn names_need_no_escaping() {
        use countersign_policy::{Action, Method, Risk};
        let methods = [Method::ToolsCall, Method::PromptsGet, Method::ResourcesRead];
        let actions = [Action::Allow, Action::Confirm, Action::Deny];
        let names = ["decision", "outcome"]
            .into_iter()
            .chain(methods.map(Method::as_str))
            .chain(Risk::ALL.map(Risk::as_str))
            .chain(actions.map(Action::as_str));
        for name in names {
            assert!(is_plain(name), "{name:?}");
            assert_eq!(
                serde_json::to_string(name).expect("serde"),
                format!("\"{name}\"")
            );
        }
    }

    proptest! {
        #[test]
        fn any_text_is_escaped_as_serde_escapes_it(
            text in prop_oneof![any::<String>(), "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é😀]{0,40}"]
        ) {
            let r = record(&text, true, None);
            let line = encoded(&r);
            prop_assert_eq!(&line, &serde_json::to_string(&r).expect("serde"));
            let parsed: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
            prop_assert_eq!(parsed["principal"].as_str(), Some(text.as_str()));
        }
    }
}
