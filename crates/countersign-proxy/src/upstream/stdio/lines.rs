//! Newline-delimited reading with a bound on each line, so a program that writes without ever
//! ending a line cannot make the gateway buffer without limit.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// One line, without its line ending.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    Complete(Bytes),
    /// Longer than the bound: its first bytes (the bound's worth); the rest is skipped.
    TooLong(Bytes),
}

/// Reads lines of at most `max` bytes.
pub(super) struct LineReader<R> {
    reader: BufReader<R>,
    buf: BytesMut,
    max: usize,
    /// Skipping the rest of a line that was too long.
    discarding: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(super) fn new(reader: R, max: usize) -> Self {
        Self {
            reader: BufReader::new(reader),
            buf: BytesMut::new(),
            max,
            discarding: false,
        }
    }

    /// The next non-empty line; `None` at the end of the stream (a last line without a line
    /// break counts as a line).
    pub(super) async fn next(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                if self.discarding || self.buf.is_empty() {
                    return Ok(None);
                }
                let line = self.take();
                if line.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Line::Complete(line)));
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(available.len());
            if self.discarding {
                self.discarding = newline.is_none();
                let consumed = newline.map_or(take, |n| n + 1);
                self.reader.consume(consumed);
                continue;
            }
            if self.buf.len() + take > self.max {
                let room = self.max - self.buf.len();
                self.buf.extend_from_slice(&available[..room]);
                let consumed = newline.map_or(take, |n| n + 1);
                self.reader.consume(consumed);
                self.discarding = newline.is_none();
                return Ok(Some(Line::TooLong(self.buf.split().freeze())));
            }
            self.buf.extend_from_slice(&available[..take]);
            match newline {
                None => self.reader.consume(take),
                Some(n) => {
                    self.reader.consume(n + 1);
                    let line = self.take();
                    if !line.is_empty() {
                        return Ok(Some(Line::Complete(line)));
                    }
                }
            }
        }
    }

    /// The buffered line, without a trailing CR, and nothing at all if it is only whitespace.
    fn take(&mut self) -> Bytes {
        let mut line = self.buf.split().freeze();
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Bytes::new();
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &'static [u8], max: usize) -> Vec<Line> {
        let mut reader = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(line) = reader.next().await.expect("reading a slice never fails") {
            out.push(line);
        }
        out
    }

    fn complete(text: &'static str) -> Line {
        Line::Complete(Bytes::from_static(text.as_bytes()))
    }

    #[tokio::test]
    async fn splits_on_newlines_and_drops_empty_lines_and_carriage_returns() {
        assert_eq!(
            lines(b"{\"a\":1}\r\n\n  \n{\"b\":2}\nlast", 64).await,
            vec![
                complete("{\"a\":1}"),
                complete("{\"b\":2}"),
                complete("last")
            ]
        );
    }

    #[tokio::test]
    async fn a_line_over_the_bound_is_cut_and_the_next_one_read_whole() {
        assert_eq!(
            lines(b"0123456789abcdef\nok\n", 8).await,
            vec![
                Line::TooLong(Bytes::from_static(b"01234567")),
                complete("ok")
            ]
        );
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_bound_is_whole() {
        assert_eq!(lines(b"12345678\n", 8).await, vec![complete("12345678")]);
    }
}
