//! The audit writer: a thread that writes the lines requests append to a shared buffer, in
//! batches.
//!
//! A channel of one line per record woke the writer thread once per record, two per call: on a
//! busy gateway that was two context switches per request, most of the audit trail's cost. Here
//! a request appends its line under a mutex and wakes the writer only when the buffer was empty.
//! The writer then waits a few milliseconds for more lines (or until the batch is large), and
//! writes the whole batch with one `write_all` and one flush. So a busy gateway pays about one
//! wake and one system call every [`BATCH_WINDOW`], whatever its rate. An idle gateway pays
//! nothing.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tracing::warn;

/// How long the writer collects lines before it writes them. This is at most how stale the
/// audit trail is, and how many lines a crash could lose.
const BATCH_WINDOW: Duration = Duration::from_millis(5);

/// A batch this large is written at once, without waiting out the window.
const BATCH_BYTES: usize = 64 * 1024;

/// Bytes waiting to be written. Past this, requests wait for the writer instead of dropping audit
/// records or letting a stalled disk or pipe grow the gateway's memory.
const BACKLOG_BYTES: usize = 4 * 1024 * 1024;

/// The producers' side. Dropping the last one lets the writer write what is left and stop.
pub(super) struct Lines {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<Pending>,
    /// The writer waits on it for lines, a full batch or the end.
    ready: Condvar,
    /// Producers wait on it for room, and `flush` for the writer to catch up.
    written: Condvar,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Bytes ever appended, and bytes the writer has written (or failed to), so `flush` can wait
    /// for exactly what was appended before it was called.
    appended: u64,
    done: u64,
    /// `flush` is waiting: write without waiting out the window.
    urgent: bool,
    closed: bool,
}

impl Lines {
    /// Starts the writer thread, or says why it could not.
    pub(super) fn start(writer: Box<dyn Write + Send>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(Pending::default()),
            ready: Condvar::new(),
            written: Condvar::new(),
        });
        std::thread::Builder::new()
            .name("countersign-audit".into())
            .spawn({
                let shared = shared.clone();
                move || write_batches(writer, &shared)
            })?;
        Ok(Self { shared })
    }

    /// Appends one line, built by `write` straight into the buffer. If `write` fails, nothing
    /// of the line is kept. Waits while the backlog is full.
    pub(super) fn append(
        &self,
        write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut state = lock(&self.shared.state);
        while state.bytes.len() >= BACKLOG_BYTES && !state.closed {
            state = self
                .shared
                .written
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let before = state.bytes.len();
        if let Err(error) = write(&mut state.bytes) {
            state.bytes.truncate(before);
            return Err(error);
        }
        state.bytes.push(b'\n');
        let after = state.bytes.len();
        state.appended += (after - before) as u64;
        drop(state);
        // Only the first line of a batch, or the one that fills it, needs the writer awake.
        if before == 0 || (before < BATCH_BYTES && after >= BATCH_BYTES) {
            self.shared.ready.notify_one();
        }
        Ok(())
    }

    /// Waits until every line appended before this call has been written, or `timeout` has
    /// passed (a stalled pipe must not hold a stopping gateway forever). True if written.
    pub(super) fn flush(&self, timeout: Duration) -> bool {
        let mut state = lock(&self.shared.state);
        let target = state.appended;
        state.urgent = true;
        self.shared.ready.notify_one();
        let (state, _) = self
            .shared
            .written
            .wait_timeout_while(state, timeout, |pending| pending.done < target)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.done >= target
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        // The writer writes what is left, then stops and drops its writer.
        lock(&self.shared.state).closed = true;
        self.shared.ready.notify_one();
        self.shared.written.notify_all();
    }
}

fn lock(state: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    // A panic while holding the lock leaves whole lines behind (a failed write is truncated),
    // so the buffer is still usable.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_batches(mut writer: Box<dyn Write + Send>, shared: &Shared) {
    let mut batch = Vec::new();
    loop {
        let mut state = lock(&shared.state);
        while state.bytes.is_empty() && !state.closed {
            state = shared
                .ready
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.bytes.is_empty() {
            break;
        }
        // Let the batch fill for a moment: this is what makes one write carry many lines.
        state = shared
            .ready
            .wait_timeout_while(state, BATCH_WINDOW, |pending| {
                !pending.closed && !pending.urgent && pending.bytes.len() < BATCH_BYTES
            })
            .map(|(state, _)| state)
            .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        state.urgent = false;
        std::mem::swap(&mut batch, &mut state.bytes);
        let target = state.appended;
        drop(state);
        shared.written.notify_all();

        if let Err(error) = writer.write_all(&batch).and_then(|()| writer.flush()) {
            warn!(%error, "audit records could not be written");
        }
        batch.clear();
        // A burst may have grown the batch far beyond a normal one; do not keep that memory.
        if batch.capacity() > 4 * BATCH_BYTES {
            batch.shrink_to(BATCH_BYTES);
        }
        lock(&shared.state).done = target;
        shared.written.notify_all();
    }
    let _ = writer.flush();
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// Records every `write` call; the first one waits until the test opens the gate.
    struct GatedWriter {
        writes: Writes,
        gate: Option<mpsc::Receiver<()>>,
    }

    impl Write for GatedWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Some(gate) = self.gate.take() {
                let _ = gate.recv();
            }
            self.writes.lock().unwrap().push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    type Writes = Arc<Mutex<Vec<Vec<u8>>>>;

    fn gated() -> (Lines, Writes, mpsc::Sender<()>) {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = mpsc::channel();
        let lines = Lines::start(Box::new(GatedWriter {
            writes: writes.clone(),
            gate: Some(gate),
        }))
        .unwrap();
        (lines, writes, open)
    }

    fn line(text: &str) -> impl FnOnce(&mut Vec<u8>) -> std::io::Result<()> + '_ {
        move |buffer| {
            buffer.extend_from_slice(text.as_bytes());
            Ok(())
        }
    }

    #[test]
    fn lines_that_arrive_while_the_writer_is_busy_go_out_in_one_write() {
        let (lines, writes, open) = gated();
        lines.append(line("first")).unwrap();
        // The writer takes "first" and blocks in its write; everything after it waits in the
        // buffer for the next batch.
        while !lock(&lines.shared.state).bytes.is_empty() {
            std::thread::yield_now();
        }
        for n in 0..100 {
            lines.append(line(&format!("line {n}"))).unwrap();
        }
        open.send(()).unwrap();
        assert!(lines.flush(Duration::from_secs(30)));

        let writes = writes.lock().unwrap();
        assert_eq!(
            writes.len(),
            2,
            "one write for the first line, one for the other 100"
        );
        assert_eq!(writes[0], b"first\n");
        let text = String::from_utf8(writes[1].clone()).unwrap();
        let expected: String = (0..100).map(|n| format!("line {n}\n")).collect();
        assert_eq!(text, expected);
    }

    #[test]
    fn flush_returns_once_every_line_before_it_is_written() {
        let (lines, writes, open) = gated();
        open.send(()).unwrap();
        for n in 0..10 {
            lines.append(line(&format!("{n}"))).unwrap();
        }
        assert!(lines.flush(Duration::from_secs(30)));
        let written: Vec<u8> = writes.lock().unwrap().concat();
        assert_eq!(written, b"0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    }

    #[test]
    fn flush_gives_up_on_a_stalled_writer() {
        let (lines, _writes, open) = gated();
        lines.append(line("stuck")).unwrap();
        assert!(!lines.flush(Duration::from_millis(50)));
        drop(open);
    }

    #[test]
    fn a_line_that_fails_to_serialize_leaves_nothing_behind() {
        let (lines, writes, open) = gated();
        open.send(()).unwrap();
        let failed = lines.append(|buffer| {
            buffer.extend_from_slice(b"{\"half\":");
            Err(std::io::Error::other("cannot serialize"))
        });
        assert!(failed.is_err());
        lines.append(line("whole")).unwrap();
        assert!(lines.flush(Duration::from_secs(30)));
        assert_eq!(writes.lock().unwrap().concat(), b"whole\n");
    }
}
