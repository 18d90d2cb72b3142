//! The four measurements; each returns its JSON line.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::Options;
use crate::session::{Endpoint, Error, Session, post_plain};
use crate::stats::{PeakRss, fnv1a, percentile, rss_kib};

/// Sessions being opened at once: enough to open 10,000 in seconds, few enough that the
/// listen backlogs never overflow.
const OPENING_AT_ONCE: usize = 64;

#[derive(Default)]
struct StreamCounts {
    opened: AtomicU64,
    failed: AtomicU64,
    delivered: AtomicU64,
}

/// Opens one session's GET stream and reads it until it ends, counting pushed notifications.
async fn hold_stream(endpoint: Rc<Endpoint>, counts: Arc<StreamCounts>, opening: Rc<Semaphore>) {
    let permit = opening.acquire().await.expect("never closed");
    let opened = match Session::open(&endpoint).await {
        Ok(session) => session.open_stream().await,
        Err(error) => Err(error),
    };
    drop(permit);
    let mut body = match opened {
        Ok(body) => body,
        Err(error) => {
            if counts.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                eprintln!("growth-client: stream: {error}");
            }
            return;
        }
    };
    counts.opened.fetch_add(1, Ordering::Relaxed);
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            let pushes = data.windows(11).filter(|w| w == b"growth push").count();
            counts.delivered.fetch_add(pushes as u64, Ordering::Relaxed);
        }
    }
}

pub async fn streams(options: &Options) -> Result<String, Error> {
    let endpoint = Rc::new(Endpoint::parse(&options.text("url"))?);
    let checkpoints: Vec<u64> = options
        .text("checkpoints")
        .split(',')
        .map(|n| n.parse().map_err(|_| "bad --checkpoints"))
        .collect::<Result<_, _>>()?;
    let settle = options.seconds("settle", 3.0);
    let pid = options.pid();
    // The upstream's resident size beside the gateway's: what the same streams cost a server
    // that holds nothing but its own end of each.
    let upstream_pid: Option<u32> = options
        .text_or("upstream-pid")
        .map(|v| v.parse())
        .transpose()?;
    let sizes = |open: u64| {
        json!({"streams": open, "rss_kib": pid.map_or(0, rss_kib),
               "upstream_rss_kib": upstream_pid.map_or(0, rss_kib)})
    };
    let counts = Arc::new(StreamCounts::default());
    let opening = Rc::new(Semaphore::new(OPENING_AT_ONCE));
    let mut rss = vec![sizes(0)];
    let started = Instant::now();
    let mut spawned = 0;
    for &target in &checkpoints {
        while spawned < target {
            tokio::task::spawn_local(hold_stream(
                endpoint.clone(),
                counts.clone(),
                opening.clone(),
            ));
            spawned += 1;
        }
        while counts.opened.load(Ordering::Relaxed) + counts.failed.load(Ordering::Relaxed) < target
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Let allocations made while opening settle before reading the resident size.
        tokio::time::sleep(settle).await;
        rss.push(sizes(counts.opened.load(Ordering::Relaxed)));
    }
    let open_secs = started.elapsed().as_secs_f64();
    let reached: u64 = String::from_utf8_lossy(&post_plain(&options.text("push"), "").await?)
        .trim()
        .parse()?;
    let opened = counts.opened.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts.delivered.load(Ordering::Relaxed) < opened && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(json!({
        "checkpoints": rss,
        "opened": opened,
        "failed": counts.failed.load(Ordering::Relaxed),
        "open_secs": open_secs,
        "pushed_upstream": reached,
        "delivered": counts.delivered.load(Ordering::Relaxed),
    })
    .to_string())
}

/// What the call loops measured.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    bytes: u64,
    errors: u64,
    first_body: Option<(usize, u64)>,
    mismatched: u64,
}

/// Opens `count` sessions, then has each call `tool` with `arguments` in a loop: unmeasured
/// until `warmup` has passed, measured for `duration` after it.
async fn call_loops(
    endpoint: &Endpoint,
    count: usize,
    tool: &'static str,
    arguments: Value,
    warmup: Duration,
    duration: Duration,
) -> Result<Tally, Error> {
    let opening = Rc::new(Semaphore::new(OPENING_AT_ONCE));
    let mut opened = Vec::with_capacity(count);
    for _ in 0..count {
        let (endpoint, opening) = (endpoint.clone(), opening.clone());
        opened.push(tokio::task::spawn_local(async move {
            let _permit = opening.acquire().await.expect("never closed");
            Session::open(&endpoint).await
        }));
    }
    let mut sessions = Vec::with_capacity(count);
    for session in opened {
        sessions.push(session.await.map_err(|e| e.to_string())??);
    }
    // One answer to compare across targets byte for byte: the first session's first call
    // (the same request id on every target).
    let probe = match sessions.first_mut() {
        Some(session) => session.call(tool, arguments.clone()).await?,
        None => return Err("no sessions".into()),
    };
    let start = Instant::now();
    let (measure_from, end) = (start + warmup, start + warmup + duration);
    let mut loops = Vec::with_capacity(count);
    let probe_length = probe.len();
    for mut session in sessions {
        let arguments = arguments.clone();
        loops.push(tokio::task::spawn_local(async move {
            let mut tally = Tally::default();
            while Instant::now() < end {
                let sent = Instant::now();
                let answer = session.call(tool, arguments.clone()).await;
                let done = Instant::now();
                if sent < measure_from {
                    continue;
                }
                match answer {
                    Ok(body) => {
                        if body.len() != probe_length {
                            tally.mismatched += 1;
                        }
                        tally.bytes += body.len() as u64;
                        tally
                            .latencies_us
                            .push(u32::try_from((done - sent).as_micros()).unwrap_or(u32::MAX));
                    }
                    Err(error) => {
                        if tally.errors == 0 {
                            eprintln!("growth-client: call: {error}");
                        }
                        tally.errors += 1;
                        return tally;
                    }
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for task in loops {
        let tally = task.await.map_err(|e| e.to_string())?;
        total.latencies_us.extend(tally.latencies_us);
        total.bytes += tally.bytes;
        total.errors += tally.errors;
        total.mismatched += tally.mismatched;
    }
    total.first_body = Some((probe.len(), fnv1a(&probe)));
    total.latencies_us.sort_unstable();
    Ok(total)
}

fn figures(tally: &Tally, duration: Duration, peak: &PeakRss) -> Value {
    let secs = duration.as_secs_f64();
    json!({
        "requests": tally.latencies_us.len(),
        "rps": tally.latencies_us.len() as f64 / secs,
        "mib_per_s": tally.bytes as f64 / secs / f64::from(1 << 20),
        "p50_us": percentile(&tally.latencies_us, 50.0),
        "p99_us": percentile(&tally.latencies_us, 99.0),
        "errors": tally.errors,
        "mismatched": tally.mismatched,
        "body_bytes": tally.first_body.map_or(0, |b| b.0),
        "body_hash": format!("{:016x}", tally.first_body.map_or(0, |b| b.1)),
        "rss_max_kib": peak.peak(),
    })
}

pub async fn sessions(options: &Options) -> Result<String, Error> {
    let endpoint = Endpoint::parse(&options.text("url"))?;
    let count = options.number("sessions", 1000) as usize;
    let (warmup, duration) = (
        options.seconds("warmup", 2.0),
        options.seconds("duration", 10.0),
    );
    let peak = PeakRss::start(options.pid());
    let tally = call_loops(
        &endpoint,
        count,
        "list_products",
        json!({}),
        warmup,
        duration,
    )
    .await?;
    Ok(figures(&tally, duration, &peak).to_string())
}

pub async fn fetch(options: &Options) -> Result<String, Error> {
    let endpoint = Endpoint::parse(&options.text("url"))?;
    let arguments =
        json!({"bytes": options.number("bytes", 1 << 20), "format": options.text("format")});
    let count = options.number("connections", 4) as usize;
    let (warmup, duration) = (
        options.seconds("warmup", 2.0),
        options.seconds("duration", 10.0),
    );
    let peak = PeakRss::start(options.pid());
    let tally = call_loops(&endpoint, count, "get_blob", arguments, warmup, duration).await?;
    Ok(figures(&tally, duration, &peak).to_string())
}

pub async fn list(options: &Options) -> Result<String, Error> {
    let endpoint = Endpoint::parse(&options.text("url"))?;
    let repeat = options.number("repeat", 20) as usize;
    let mut session = Session::open(&endpoint).await?;
    let micros = |since: Instant| u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX);
    let sent = Instant::now();
    session.call("list_products", json!({})).await?;
    let first_call = micros(sent);
    let sent = Instant::now();
    session.call("list_products", json!({})).await?;
    let second_call = micros(sent);
    let mut lists = Vec::with_capacity(repeat);
    let mut listed = 0;
    for _ in 0..repeat {
        let sent = Instant::now();
        let body = session.request("tools/list", json!({})).await?;
        lists.push(micros(sent));
        let value: Value = serde_json::from_slice(&body)?;
        listed = value["result"]["tools"].as_array().map_or(0, Vec::len);
        if listed == 0 {
            return Err(format!(
                "tools/list listed nothing: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )
            .into());
        }
    }
    lists.sort_unstable();
    Ok(json!({
        "first_call_us": first_call,
        "second_call_us": second_call,
        "list_p50_us": percentile(&lists, 50.0),
        "list_min_us": lists.first().copied().unwrap_or(0),
        "list_max_us": lists.last().copied().unwrap_or(0),
        "tools": listed,
    })
    .to_string())
}
