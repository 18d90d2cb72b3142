//! The audit sink: one JSON line per decision and one per outcome, so an operator can answer
//! "who asked for what, what did the gateway decide, and what ran" from the log alone.
//!
//! Arguments are left out unless `include_arguments` is set: they may hold personal data, and
//! the arguments hash already ties a record to the exact call.

use std::cell::Cell;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use countersign_jsonrpc::RawJson;
use serde::Serialize;
use tracing::warn;

use super::writer::Lines;

/// Where audit lines go. Records are serialized on the request path into a shared buffer that a
/// dedicated thread writes in batches (`writer.rs`), so a slow disk or pipe costs a request no
/// system call, and a busy gateway one write per batch rather than one per record.
#[derive(Clone)]
pub struct AuditSink {
    lines: Option<Arc<Lines>>,
    include_arguments: bool,
}

impl std::fmt::Debug for AuditSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditSink")
            .field("enabled", &self.lines.is_some())
            .field("include_arguments", &self.include_arguments)
            .finish()
    }
}

impl AuditSink {
    /// Writes each record as one line to `writer`.
    pub fn new(writer: Box<dyn Write + Send>, include_arguments: bool) -> Self {
        match Lines::start(writer) {
            Ok(lines) => Self {
                lines: Some(Arc::new(lines)),
                include_arguments,
            },
            Err(error) => {
                // Without the thread there is nowhere to write; say so loudly instead of
                // pretending to audit.
                tracing::error!(%error, "could not start the audit writer; audit lines are lost");
                Self {
                    lines: None,
                    include_arguments,
                }
            }
        }
    }

    /// Records nothing.
    pub fn disabled() -> Self {
        Self {
            lines: None,
            include_arguments: false,
        }
    }

    pub fn include_arguments(&self) -> bool {
        self.include_arguments
    }

    pub fn record(&self, record: &AuditRecord<'_>) {
        crate::trace::record_decision(record);
        let Some(lines) = &self.lines else { return };
        let appended = lines.append(|buffer| record.write_json(buffer));
        if let Err(error) = appended {
            warn!(%error, "audit record could not be serialized");
        }
    }

    /// Records a person's decision on the approval page. Rare (one per decision), so serde
    /// writes it; the per-call records above have their own encoder.
    pub fn record_page_decision(&self, record: &PageDecisionRecord<'_>) {
        let Some(lines) = &self.lines else { return };
        let appended = lines
            .append(|buffer| serde_json::to_writer(buffer, record).map_err(std::io::Error::other));
        if let Err(error) = appended {
            warn!(%error, "audit record could not be serialized");
        }
    }

    /// Waits until every record made so far is written, at most `timeout`: for a gateway that
    /// stops. False if the writer did not catch up in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        self.lines.as_ref().is_none_or(|lines| lines.flush(timeout))
    }
}

/// One audit line. `event` is `decision` (what the gateway decided) or `outcome` (what happened).
///
/// Lines are written by `line.rs`'s hand encoder; the derived `Serialize` is the reference it is
/// tested against, field for field.
#[derive(Debug, Serialize)]
pub struct AuditRecord<'a> {
    pub ts: Timestamp,
    pub event: &'static str,
    pub principal: &'a str,
    pub upstream: &'a str,
    /// This field and `risk` and `action` are names of the gateway's own: see `line.rs`'s
    /// `name`.
    pub method: &'static str,
    pub tool: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jti: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_hash: Option<&'a str>,
    /// `forwarded`, `held`, `denied`, `rejected:<code>`, `upstream_error`.
    pub outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// The OpenTelemetry trace and span of the request, when traces are exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Minified: a record is one line.
    pub arguments: Option<&'a RawJson>,
}

/// One audit line per decision taken on the approval page (`event: page_decision`): who
/// decided which held call, how, when, and from where.
#[derive(Debug, Serialize)]
pub struct PageDecisionRecord<'a> {
    pub ts: Timestamp,
    pub event: &'static str,
    /// The approval request's id.
    pub approval: &'a str,
    /// The principal whose call it was.
    pub principal: &'a str,
    pub upstream: &'a str,
    pub tool: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<&'a str>,
    pub risk: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<&'a str>,
    /// `approved` or `denied`.
    pub decision: &'static str,
    /// Who decided, as the page authenticated them.
    pub approver: &'a str,
    /// The client address the decision came from.
    pub client_ip: &'a str,
}

/// An RFC 3339 UTC timestamp with milliseconds, `2026-11-30T12:21:36.789Z`: written into a
/// fixed buffer, since every call's audit lines carry one (`format!` was a few thousand
/// instructions of each request).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Timestamp([u8; 24]);

impl Timestamp {
    /// The text's bytes, for writers that need no `str` (and so no UTF-8 check).
    pub fn as_bytes(&self) -> &[u8; 24] {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII digits and separators are ever written.
        std::str::from_utf8(&self.0).unwrap_or("0000-00-00T00:00:00.000Z")
    }
}

impl std::fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Timestamp {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The audit timestamp of `now`, without pulling in a date crate. Years past 9999 are written as
/// 9999 (four digits is what RFC 3339 allows).
///
/// Every call writes two lines, nearly always within the same second as the thread's previous
/// line: the date and time of day are kept per thread and only the milliseconds rewritten.
pub fn timestamp(now: SystemTime) -> Timestamp {
    thread_local! {
        static LAST_SECOND: Cell<Option<(u64, Timestamp)>> = const { Cell::new(None) };
    }
    let since = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let Timestamp(mut out) = LAST_SECOND.with(|last| match last.get() {
        Some((second, stamp)) if second == secs => stamp,
        _ => {
            let stamp = whole_second(secs);
            last.set(Some((secs, stamp)));
            stamp
        }
    });
    put_digits(&mut out, 20, 3, u64::from(since.subsec_millis()));
    Timestamp(out)
}

/// The timestamp of the start of second `secs` since the epoch.
fn whole_second(secs: u64) -> Timestamp {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let mut out = *b"0000-00-00T00:00:00.000Z";
    put_digits(&mut out, 0, 4, year.clamp(0, 9999) as u64);
    put_digits(&mut out, 5, 2, u64::from(month));
    put_digits(&mut out, 8, 2, u64::from(day));
    put_digits(&mut out, 11, 2, rem / 3600);
    put_digits(&mut out, 14, 2, rem % 3600 / 60);
    put_digits(&mut out, 17, 2, rem % 60);
    Timestamp(out)
}

/// Writes the last `width` decimal digits of `value` at `out[at..at + width]`.
fn put_digits(out: &mut [u8; 24], at: usize, width: usize, mut value: u64) {
    for i in (at..at + width).rev() {
        out[i] = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Days since 1970-01-01 to (year, month, day) — Howard Hinnant's civil-from-days algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_041_296_789);
        assert_eq!(timestamp(t), "2026-11-30T12:21:36.789Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(timestamp(leap), "2000-02-29T00:00:00.000Z");
        let last = UNIX_EPOCH + Duration::from_millis(1_798_761_599_999);
        assert_eq!(timestamp(last), "2026-12-31T23:59:59.999Z");
    }

    #[test]
    fn timestamps_within_a_second_keep_its_date_and_change_only_the_milliseconds() {
        let second = UNIX_EPOCH + Duration::from_secs(1_796_041_296);
        let at = |millis| timestamp(second + Duration::from_millis(millis));
        assert_eq!(at(0), "2026-11-30T12:21:36.000Z");
        assert_eq!(at(789), "2026-11-30T12:21:36.789Z");
        assert_eq!(at(1_001), "2026-11-30T12:21:37.001Z");
        assert_eq!(at(999), "2026-11-30T12:21:36.999Z");
        assert_eq!(at(86_400_000), "2026-12-01T12:21:36.000Z");
        assert_eq!(at(5), "2026-11-30T12:21:36.005Z");
    }

    #[test]
    fn timestamps_match_the_formatted_fields_across_centuries() {
        // Every 7 777 777 s (about 90 days, each time of day in turn) from 1970 to 2200.
        let mut secs = 0u64;
        while secs < 7_258_118_400 {
            let t = UNIX_EPOCH + Duration::from_millis(secs * 1000 + secs % 1000);
            let (year, month, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            let expected = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
                rem / 3600,
                rem % 3600 / 60,
                rem % 60,
                secs % 1000
            );
            assert_eq!(timestamp(t).as_str(), expected);
            secs += 7_777_777;
        }
    }

    use std::sync::{Arc, Mutex};

    #[test]
    fn records_are_one_json_line_each() {
        #[derive(Clone, Default)]
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lock").extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Shared::default();
        let sink = AuditSink::new(Box::new(buffer.clone()), false);
        // Arguments as a client may write them, over several lines; the record carries them
        // minified, as the approval layer hands them over.
        let spaced = RawJson::parse_slice(b"{ \"to\" :\n  \"ada\" ,\n  \"n\" : [ 1.50 ,\n 2 ] }")
            .expect("json")
            .minified();
        for (outcome, arguments) in [("held", None), ("forwarded", Some(&spaced))] {
            sink.record(&AuditRecord {
                ts: timestamp(UNIX_EPOCH),
                event: "outcome",
                principal: "ada",
                upstream: "store",
                method: "tools/call",
                tool: "create_order",
                session: None,
                risk: Some("write"),
                rule: Some("default"),
                action: Some("confirm"),
                channel: Some("token"),
                jti: None,
                args_hash: Some("abc"),
                outcome,
                latency_ms: None,
                trace_id: None,
                span_id: None,
                arguments,
            });
        }
        drop(sink);
        // The writer thread owns the buffer's other handle; wait for it to catch up.
        let mut text = String::new();
        for _ in 0..500 {
            text = String::from_utf8(buffer.0.lock().expect("lock").clone()).expect("utf-8");
            if text.lines().count() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["outcome"], "forwarded");
        assert!(lines[0].get("arguments").is_none());
        let sent: Value = serde_json::from_str(r#"{"to": "ada", "n": [1.50, 2]}"#).expect("json");
        assert_eq!(lines[1]["arguments"], sent);
        assert!(
            text.lines()
                .nth(1)
                .is_some_and(|l| l.contains(r#""arguments":{"to":"ada","n":[1.50,2]}"#)),
            "{text}"
        );
    }
}
