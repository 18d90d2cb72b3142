//! Open-loop, constant-rate HTTP/1.1 load generator: the part of wrk2 that `bench/run.sh` needs.
//!
//! Debian ships wrk (closed loop: each connection sends its next request only when the previous
//! answer arrived, so a slow server is offered less load and its stalls vanish from the
//! percentiles, "coordinated omission") but not wrk2. This tool sends one fixed request at a
//! constant rate over a fixed pool of keep-alive connections, the way wrk2 does:
//!
//! * request `i` is due at `t0 + i / rate`; connection `k` owns requests `k, k + N, k + 2N, …`;
//! * when the connection is still busy with an earlier request at a request's due time, that
//!   request's latency counts from the due time, so a server stall is charged to every request it
//!   delays (wrk2's correction for coordinated omission);
//! * when the connection was idle, latency counts from the moment the request is written. The
//!   gap between due time and write time is then the generator's own scheduling delay, not the
//!   server's doing; it is reported separately as `lag`.
//!
//! Due times are kept by a pacing thread that sleeps with nanosecond timers and hands each due
//! request to its connection's task, so arrivals are evenly spread. (wrk2 and tokio timers have a
//! 1 ms tick: every request due within the same millisecond would leave in one burst, which
//! penalises a slower server's queueing more than real, evenly or randomly spread arrivals do.)
//!
//! Output: one JSON object on stdout. Exit status 1 when any request failed or was not a 200.
//!
//! Usage: loadgen --url http://127.0.0.1:8080/mcp --rate 5000 --duration 10 [--warmup 2]
//!                [--connections 32] [--header 'name: value']... [--body-file FILE]
//!                [--bodies-file FILE] [--timeline FILE]   (worst latency per 100 ms, tab-separated)
//!
//! `--bodies-file` gives one body per line, and request `i` sends line `i`, each once: for
//! requests that may not repeat, such as redeeming single-use confirmation tokens. Running out
//! of lines counts as errors.

use std::io;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug)]
struct Options {
    host_port: String,
    path: String,
    rate: f64,
    duration: Duration,
    warmup: Duration,
    connections: usize,
    headers: Vec<String>,
    body: Vec<u8>,
    /// One body per request, in order (`--bodies-file`); empty: every request sends `body`.
    bodies: Vec<Vec<u8>>,
    timeline: Option<String>,
}

fn usage(message: &str) -> ! {
    eprintln!("loadgen: {message}");
    eprintln!(
        "usage: loadgen --url http://HOST:PORT/PATH --rate N --duration SECS [--warmup SECS] \
         [--connections N] [--header 'name: value']... [--body-file FILE] [--bodies-file FILE] \
         [--timeline FILE]"
    );
    std::process::exit(2)
}

fn parse_options() -> Options {
    let mut url = None;
    let mut rate = None;
    let mut duration = Duration::from_secs(10);
    let mut warmup = Duration::from_secs(2);
    let mut connections = 32;
    let mut headers = Vec::new();
    let mut body = Vec::new();
    let mut bodies = Vec::new();
    let mut timeline = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let seconds = |v: String| {
            Duration::from_secs_f64(
                v.parse::<f64>()
                    .unwrap_or_else(|_| usage(&format!("bad number of seconds `{v}`"))),
            )
        };
        match flag.as_str() {
            "--url" => url = Some(value()),
            "--rate" => {
                let v = value();
                rate = Some(
                    v.parse::<f64>()
                        .ok()
                        .filter(|r| *r > 0.0)
                        .unwrap_or_else(|| usage(&format!("bad rate `{v}`"))),
                );
            }
            "--duration" => duration = seconds(value()),
            "--warmup" => warmup = seconds(value()),
            "--connections" => {
                let v = value();
                connections = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .unwrap_or_else(|| usage(&format!("bad connection count `{v}`")));
            }
            "--header" => headers.push(value()),
            "--timeline" => timeline = Some(value()),
            "--body-file" => {
                let path = value();
                body = std::fs::read(&path)
                    .unwrap_or_else(|e| usage(&format!("cannot read {path}: {e}")));
                while body.last().is_some_and(u8::is_ascii_whitespace) {
                    body.pop();
                }
            }
            "--bodies-file" => {
                let path = value();
                let text = std::fs::read(&path)
                    .unwrap_or_else(|e| usage(&format!("cannot read {path}: {e}")));
                bodies = text
                    .split(|b| *b == b'\n')
                    .filter(|line| !line.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect();
                if bodies.is_empty() {
                    usage(&format!("{path} has no bodies"));
                }
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    let url = url.unwrap_or_else(|| usage("--url is required"));
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| usage("only http:// URLs are supported"));
    let (host_port, path) = match rest.find('/') {
        Some(slash) => (rest[..slash].to_owned(), rest[slash..].to_owned()),
        None => (rest.to_owned(), "/".to_owned()),
    };
    Options {
        host_port,
        path,
        rate: rate.unwrap_or_else(|| usage("--rate is required")),
        duration,
        warmup,
        connections,
        headers,
        body,
        bodies,
        timeline,
    }
}

/// Every request to send: one, sent over and over, or one per line of `--bodies-file`.
fn requests(options: &Options) -> Vec<Vec<u8>> {
    if options.bodies.is_empty() {
        return vec![request_bytes(options, &options.body)];
    }
    options
        .bodies
        .iter()
        .map(|body| request_bytes(options, body))
        .collect()
}

fn request_bytes(options: &Options, body: &[u8]) -> Vec<u8> {
    let method = if body.is_empty() { "GET" } else { "POST" };
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\n",
        options.path, options.host_port
    );
    for header in &options.headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// What one connection measured.
#[derive(Debug, Default)]
struct Tally {
    /// Latencies of the measured (post-warm-up) requests, in microseconds.
    latencies_us: Vec<u32>,
    /// Timer slack of requests sent on an idle connection, in microseconds.
    lag_us: Vec<u32>,
    errors: u64,
    non_200: u64,
    /// Measured requests whose latency counted from the due time (connection was busy).
    late_starts: u64,
    reconnects: u64,
    /// Worst latency (µs) and request count per 100 ms of due time, measured requests only.
    timeline: Vec<(u32, u32)>,
}

/// One HTTP/1.1 keep-alive connection with its read buffer.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(host_port: &str) -> io::Result<Self> {
        let stream = TcpStream::connect(host_port).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buffer: Vec::with_capacity(64 * 1024),
        })
    }

    /// Reads more bytes into the buffer; end of stream is an error mid-response.
    async fn fill(&mut self) -> io::Result<()> {
        if self.buffer.capacity() - self.buffer.len() < 16 * 1024 {
            self.buffer.reserve(64 * 1024);
        }
        let n = self.stream.read_buf(&mut self.buffer).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed mid-response",
            ));
        }
        Ok(())
    }

    /// Sends `request` and reads one whole response; returns the status and whether the server
    /// asked to close the connection.
    async fn exchange(&mut self, request: &[u8]) -> io::Result<(u16, bool)> {
        self.stream.write_all(request).await?;
        let head_end = loop {
            if let Some(at) = find(&self.buffer, b"\r\n\r\n") {
                break at + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buffer[..head_end])
            .map_err(|_| bad("non-UTF-8 response head"))?;
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| bad("malformed status line"))?;
        let mut content_length = None;
        let mut chunked = false;
        let mut close = false;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                content_length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| bad("bad content-length"))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            }
        }
        let consumed = if chunked {
            self.read_chunked(head_end).await?
        } else if let Some(length) = content_length {
            while self.buffer.len() < head_end + length {
                self.fill().await?;
            }
            head_end + length
        } else {
            return Err(bad("response without content-length or chunked framing"));
        };
        self.buffer.drain(..consumed);
        Ok((status, close))
    }

    /// Walks a chunked body starting at `at`; returns the offset just past it.
    async fn read_chunked(&mut self, mut at: usize) -> io::Result<usize> {
        loop {
            let line_end = loop {
                if let Some(end) = find(&self.buffer[at..], b"\r\n") {
                    break at + end;
                }
                self.fill().await?;
            };
            let size_text = std::str::from_utf8(&self.buffer[at..line_end])
                .map_err(|_| bad("bad chunk size"))?;
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size =
                usize::from_str_radix(size_text, 16).map_err(|_| bad("bad chunk size"))?;
            at = line_end + 2;
            if size == 0 {
                // Trailers (none expected) end with an empty line.
                loop {
                    if let Some(end) = find(&self.buffer[at..], b"\r\n") {
                        let empty = end == 0;
                        at += end + 2;
                        if empty {
                            return Ok(at);
                        }
                    } else {
                        self.fill().await?;
                    }
                }
            }
            while self.buffer.len() < at + size + 2 {
                self.fill().await?;
            }
            at += size + 2;
        }
    }
}

fn bad(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

async fn drive(
    mut due_times: tokio::sync::mpsc::UnboundedReceiver<(Instant, u64)>,
    measure_from: Instant,
    host_port: String,
    requests: std::rc::Rc<Vec<Vec<u8>>>,
) -> Tally {
    let mut tally = Tally::default();
    let mut connection = match Connection::open(&host_port).await {
        Ok(c) => Some(c),
        Err(error) => {
            eprintln!("loadgen: connect {host_port}: {error}");
            tally.errors += 1;
            None
        }
    };
    let mut free_at = Instant::now();
    while let Some((due, sequence)) = due_times.recv().await {
        let request = match requests.len() {
            1 => &requests[0],
            n => match requests.get(sequence as usize) {
                Some(request) => request,
                None => {
                    if tally.errors < 3 {
                        eprintln!("loadgen: request {sequence} due, but only {n} bodies given");
                    }
                    tally.errors += 1;
                    continue;
                }
            },
        };
        let sent = Instant::now();
        let measured = due >= measure_from;
        let start = if free_at > due {
            if measured {
                tally.late_starts += 1;
            }
            due
        } else {
            if measured {
                tally.lag_us.push(micros(sent - due));
            }
            sent
        };
        let conn = match connection.as_mut() {
            Some(conn) => conn,
            None => match Connection::open(&host_port).await {
                Ok(c) => {
                    tally.reconnects += 1;
                    connection.insert(c)
                }
                Err(error) => {
                    if tally.errors < 3 {
                        eprintln!("loadgen: connect {host_port}: {error}");
                    }
                    tally.errors += 1;
                    free_at = Instant::now();
                    continue;
                }
            },
        };
        let outcome = conn.exchange(request).await;
        let done = Instant::now();
        free_at = done;
        match outcome {
            Ok((status, close)) => {
                if measured {
                    let latency = micros(done - start);
                    tally.latencies_us.push(latency);
                    let bucket = ((due - measure_from).as_millis() / 100) as usize;
                    if tally.timeline.len() <= bucket {
                        tally.timeline.resize(bucket + 1, (0, 0));
                    }
                    let slot = &mut tally.timeline[bucket];
                    *slot = (slot.0.max(latency), slot.1 + 1);
                    if status != 200 {
                        tally.non_200 += 1;
                    }
                }
                if close {
                    connection = None;
                }
            }
            Err(error) => {
                if tally.errors < 3 {
                    eprintln!("loadgen: request: {error}");
                }
                tally.errors += 1;
                connection = None;
            }
        }
    }
    tally
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let options = parse_options();
    let requests = std::rc::Rc::new(requests(&options));
    // One I/O thread (plus the pacer): the generator is pinned to its own core by bench/run.sh
    // and must not spill onto the core of the system under test.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| usage(&format!("cannot start runtime: {e}")));
    let local = tokio::task::LocalSet::new();
    // Leave time for every connection to open before the first request is due.
    let t0 = Instant::now() + Duration::from_millis(200);
    let measure_from = t0 + options.warmup;
    let end = measure_from + options.duration;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..options.connections)
        .map(|_| tokio::sync::mpsc::unbounded_channel::<(Instant, u64)>())
        .unzip();
    let rate = options.rate;
    // Request i is due at t0 + i / rate and goes to connection i mod N (wrk2's assignment).
    let pacer = std::thread::spawn(move || {
        let mut sequence: u64 = 0;
        loop {
            let due = t0 + Duration::from_secs_f64(sequence as f64 / rate);
            if due >= end {
                break;
            }
            let now = Instant::now();
            if now < due {
                std::thread::sleep(due - now);
            }
            let connection = (sequence % senders.len() as u64) as usize;
            if senders[connection].send((due, sequence)).is_err() {
                break;
            }
            sequence += 1;
        }
        // Dropping the senders ends every connection task once its queue is drained.
    });
    let tallies = local.block_on(&runtime, async {
        let tasks: Vec<_> = receivers
            .into_iter()
            .map(|due_times| {
                tokio::task::spawn_local(drive(
                    due_times,
                    measure_from,
                    options.host_port.clone(),
                    requests.clone(),
                ))
            })
            .collect();
        let mut tallies = Vec::with_capacity(tasks.len());
        for task in tasks {
            tallies.push(task.await.unwrap_or_default());
        }
        tallies
    });
    let _ = pacer.join();

    let mut latencies: Vec<u32> = Vec::new();
    let mut lag: Vec<u32> = Vec::new();
    let (mut errors, mut non_200, mut late, mut reconnects) = (0, 0, 0, 0);
    let mut timeline: Vec<(u32, u32)> = Vec::new();
    for tally in tallies {
        if timeline.len() < tally.timeline.len() {
            timeline.resize(tally.timeline.len(), (0, 0));
        }
        for (merged, (worst, count)) in timeline.iter_mut().zip(tally.timeline) {
            *merged = (merged.0.max(worst), merged.1 + count);
        }
        latencies.extend(tally.latencies_us);
        lag.extend(tally.lag_us);
        errors += tally.errors;
        non_200 += tally.non_200;
        late += tally.late_starts;
        reconnects += tally.reconnects;
    }
    latencies.sort_unstable();
    lag.sort_unstable();
    if let Some(path) = &options.timeline {
        let mut text = String::from("offset_ms\trequests\tmax_us\n");
        for (i, (worst, count)) in timeline.iter().enumerate() {
            text.push_str(&format!("{}\t{count}\t{worst}\n", i * 100));
        }
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("loadgen: cannot write {path}: {e}");
        }
    }
    let seconds = options.duration.as_secs_f64();
    println!(
        "{{\"target_rate\":{:.1},\"achieved_rate\":{:.1},\"requests\":{},\"errors\":{},\
         \"non_200\":{},\"late_starts\":{},\"reconnects\":{},\"p50_us\":{},\"p90_us\":{},\
         \"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"lag_p50_us\":{},\"lag_p99_us\":{},\
         \"lag_max_us\":{}}}",
        options.rate,
        latencies.len() as f64 / seconds,
        latencies.len(),
        errors,
        non_200,
        late,
        reconnects,
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 99.9),
        latencies.last().copied().unwrap_or(0),
        percentile(&lag, 50.0),
        percentile(&lag, 99.0),
        lag.last().copied().unwrap_or(0),
    );
    if errors > 0 || non_200 > 0 {
        std::process::exit(1);
    }
}
