//! Memory under hostile bodies (issue 9), measured on the real binary from outside:
//!
//! - amplification: one body just under the default `limits.max_body_bytes`, of each hostile
//!   shape and for each outcome (forwarded, held, refused), must not grow the gateway's peak
//!   resident memory by more than ten times its size;
//! - survival: under a 256 MiB address-space limit, sixteen such bodies at once each get an
//!   answer, the gateway stays up and then serves a normal read;
//! - return: after a burst, resident memory comes back close to where it was.
//!
//! Every test prints its figures (`cargo test -p countersign-e2e --test memory -- --nocapture`,
//! or `bash bench/memory.sh` for the table alone) and checks that each request got the outcome
//! it was meant to get, by the answer and by what the upstream recorded.

use std::net::SocketAddr;
use std::time::Duration;

use countersign_e2e::memory::{MemoryStatus, Shape, memory_status, mib, reset_peak};
use countersign_e2e::{Process, start_gateway_under};
use countersign_testkit::mcp::{ScriptedServer, confirmation, tool_call};
use countersign_testkit::{RawResponse, RecordingUpstream, TempFile, raw_post, try_raw_request};
use futures_util::future::join_all;
use serde_json::{Value, json};

/// The default `limits.max_body_bytes` (crates/countersign-app/src/config.rs).
const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;
/// Hostile bodies are this long at most: just under the limit, so every one is read and parsed.
const HOSTILE_BODY_BYTES: usize = DEFAULT_MAX_BODY_BYTES - 1024;
/// How much a request may grow the gateway's peak resident memory, in multiples of its body.
const MAX_GROWTH_FACTOR: u64 = 10;
/// The address-space limit (`RLIMIT_AS`) of the survival test: what a small container allows.
const ADDRESS_SPACE_LIMIT: u64 = 256 << 20;
/// Hostile bodies sent at once in the survival test.
const CONCURRENT_HOSTILE_BODIES: usize = 16;
/// How far above its warm baseline the gateway's resident memory may stay after a burst. The
/// burst's bodies are gone once answered, so what stays is allocator slack: freed pages kept
/// for reuse, a few body-sized buffers per worker thread. mimalloc kept 1 to 13 MiB after the
/// bursts measured (glibc malloc kept all of them, up to 2.8 GiB; BENCHMARKS.md), so 32 MiB leaves room for
/// run-to-run noise while staying under one request's allowed peak growth (40 MiB): a leak of
/// one body's parse still fails.
const RETURN_SLACK: u64 = 32 << 20;
/// How long one hostile request may take: today's code spends seconds on 2 GiB of copies in a
/// debug build on a loaded machine.
const REQUEST_WAIT: Duration = Duration::from_secs(120);

/// A fixed keyring, so the gateway does not warn about a random one in every test's output.
const SIGNING_KEYS: &str = "memory-tests:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

const POLICY: &str = "\
version: 1
defaults: { read: allow, write: confirm, destructive: confirm, unknown: confirm }
approval: token
token_ttl: 5m
rules:
  - id: no-purge
    tools: [purge]
    action: deny
    reason: Purging is done by the operations team.
";

/// What the gateway does with a call, and the tool whose calls get that outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// `lookup` (read-only) runs on the upstream.
    Forwarded,
    /// `update` (a write) is held with a confirmation token.
    Held,
    /// `purge` is denied by the policy.
    Refused,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Forwarded, Outcome::Held, Outcome::Refused];

    fn tool(self) -> &'static str {
        match self {
            Outcome::Forwarded => "lookup",
            Outcome::Held => "update",
            Outcome::Refused => "purge",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Held => "held",
            Outcome::Refused => "refused",
        }
    }

    /// Whether `answer` (a 200 JSON body) is this outcome's result.
    fn is_answered_by(self, answer: &Value) -> bool {
        let verdict = confirmation(answer);
        match self {
            Outcome::Forwarded => {
                verdict.is_null() && answer["result"]["content"][0]["text"] == "ran lookup"
            }
            Outcome::Held => verdict["status"] == "requires_confirmation",
            Outcome::Refused => verdict["status"] == "denied" && verdict["code"] == "policy_denied",
        }
    }
}

/// A fresh gateway process (default limits, audit to its stdout, [`POLICY`]) in front of a
/// scripted upstream listing [`catalog`].
struct Gateway {
    process: Process,
    addr: SocketAddr,
    upstream: RecordingUpstream,
    _policy: TempFile,
}

impl Gateway {
    /// Started by `launcher` (see [`start_gateway_under`]); none for an empty one.
    async fn start(launcher: &[&str]) -> Self {
        let upstream = ScriptedServer::new(countersign_e2e::lookup_update_purge_catalog())
            .start()
            .await;
        let policy = TempFile::new("policy.yaml", POLICY);
        let (process, url) = start_gateway_under(
            launcher,
            &upstream.url(),
            &["--policy", policy.path_str()],
            &[("COUNTERSIGN_SIGNING_KEYS", SIGNING_KEYS)],
        )
        .await;
        let port = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|uri| uri.port_u16())
            .expect("the gateway URL has a port");
        Self {
            process,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            upstream,
            _policy: policy,
        }
    }

    fn pid(&self) -> u32 {
        self.process.id().expect("the gateway is running")
    }

    /// POSTs `body`; `None` when the connection was refused, or closed (or reset) without an
    /// answer.
    async fn send(&self, body: &str) -> Option<RawResponse> {
        let request = raw_post(self.addr, body.as_bytes(), "");
        try_raw_request(self.addr, &request, REQUEST_WAIT)
            .await
            .ok()
            .flatten()
    }

    /// POSTs `body` and fails the test unless it gets `outcome`'s result.
    async fn expect(&self, outcome: Outcome, body: &str) {
        let response = self.send(body).await.unwrap_or_else(|| {
            panic!(
                "the gateway closed the connection of a {} call",
                outcome.name()
            )
        });
        assert_eq!(response.status, 200, "{}", response.body_text());
        let answer = response.json();
        assert!(
            outcome.is_answered_by(&answer),
            "expected a {} result: {}",
            outcome.name(),
            truncated(&response.body_text())
        );
    }

    /// The arguments of every `tools/call` of `tool` the upstream received, in order.
    fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.upstream
            .tool_calls_by_name("/arguments")
            .into_iter()
            .filter(|(name, _)| name == tool)
            .map(|(_, arguments)| arguments)
            .collect()
    }
}

/// The first kilobyte of a response, for failure messages.
fn truncated(text: &str) -> &str {
    let end = (0..=text.len().min(1024))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..end]
}

fn arguments_of(body: &str) -> Value {
    let call: Value = serde_json::from_str(body).expect("the test's body is JSON");
    call["params"]["arguments"].clone()
}

/// One measured request: how much its body grew the gateway's peak resident memory.
#[derive(Debug)]
struct Amplification {
    shape: Shape,
    outcome: Outcome,
    body_bytes: usize,
    growth: u64,
}

impl Amplification {
    fn factor(&self) -> f64 {
        self.growth as f64 / self.body_bytes as f64
    }

    fn within_bound(&self) -> bool {
        self.growth <= MAX_GROWTH_FACTOR * self.body_bytes as u64
    }

    /// A markdown table row; `bash bench/memory.sh` collects these.
    fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {:.1}x |",
            self.shape.name(),
            self.outcome.name(),
            mib(self.body_bytes as u64),
            mib(self.growth),
            self.factor()
        )
    }
}

/// Starts a fresh gateway, warms it up with one small call of `outcome`'s tool and `shape`,
/// then measures how much one hostile body of that kind grows its peak resident memory, and
/// checks the body got its outcome and reached the upstream exactly when it was forwarded.
async fn measure(shape: Shape, outcome: Outcome) -> Amplification {
    let gateway = Gateway::start(&[]).await;
    let tool = outcome.tool();
    let warm_up = shape.call_body(1, tool, 4096);
    gateway.expect(outcome, &warm_up).await;

    let body = shape.call_body(2, tool, HOSTILE_BODY_BYTES);
    let before: MemoryStatus = reset_peak(gateway.pid());
    gateway.expect(outcome, &body).await;
    let after = memory_status(gateway.pid());

    let recorded = gateway.calls_of(tool);
    match outcome {
        Outcome::Forwarded => {
            assert_eq!(recorded.len(), 2, "the warm-up and the hostile call ran");
            assert!(
                recorded[1] == arguments_of(&body),
                "the upstream received the hostile call's arguments unchanged"
            );
        }
        Outcome::Held | Outcome::Refused => {
            assert!(recorded.is_empty(), "a {} call ran", outcome.name());
        }
    }
    let measured = Amplification {
        shape,
        outcome,
        body_bytes: body.len(),
        growth: after.peak.saturating_sub(before.peak),
    };
    eprintln!("{}", measured.row());
    measured
}

/// Measures every outcome for `shape` (all of them, so the table is complete even when one
/// fails), then asserts each stayed within [`MAX_GROWTH_FACTOR`].
async fn assert_bounded_amplification(shape: Shape) {
    let mut measured = Vec::new();
    for outcome in Outcome::ALL {
        measured.push(measure(shape, outcome).await);
    }
    let over: Vec<String> = measured
        .iter()
        .filter(|m| !m.within_bound())
        .map(|m| {
            format!(
                "{} grew by {} ({:.1}x its body)",
                m.outcome.name(),
                mib(m.growth),
                m.factor()
            )
        })
        .collect();
    assert!(
        over.is_empty(),
        "{} bodies of {} must grow the gateway's peak memory by at most {MAX_GROWTH_FACTOR}x: {}",
        shape.name(),
        mib(HOSTILE_BODY_BYTES as u64),
        over.join("; ")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_of_small_numbers_grows_memory_at_most_tenfold() {
    assert_bounded_amplification(Shape::Numbers).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deeply_nested_body_grows_memory_at_most_tenfold() {
    assert_bounded_amplification(Shape::Nesting).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_of_long_strings_grows_memory_at_most_tenfold() {
    assert_bounded_amplification(Shape::LongStrings).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_of_many_keys_grows_memory_at_most_tenfold() {
    assert_bounded_amplification(Shape::ManyKeys).await;
}

/// What a hostile request in the survival test got.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Its outcome's result.
    Result,
    /// A refusal the gateway chose: a JSON-RPC error with a 4xx or 503, or a refusal result;
    /// the HTTP status and the error or refusal code.
    Refusal(String),
    /// Anything else: no answer at all, a crash's 5xx, or a result of the wrong kind.
    Broken(String),
}

fn verdict(outcome: Outcome, response: Option<RawResponse>) -> Verdict {
    let Some(response) = response else {
        return Verdict::Broken("no answer: the connection was refused, closed or reset".into());
    };
    let body = serde_json::from_slice::<Value>(&response.body).ok();
    let refused_status = (400..500).contains(&response.status) || response.status == 503;
    match body {
        Some(answer) if response.status == 200 && outcome.is_answered_by(&answer) => {
            Verdict::Result
        }
        Some(answer) if response.status == 200 && confirmation(&answer)["code"].is_string() => {
            Verdict::Refusal(format!("200 {}", confirmation(&answer)["code"]))
        }
        Some(answer) if refused_status && answer["error"]["code"].is_i64() => {
            Verdict::Refusal(format!("{} {}", response.status, answer["error"]["code"]))
        }
        _ => Verdict::Broken(format!(
            "{}: {}",
            response.status,
            truncated(&response.body_text())
        )),
    }
}

/// A gateway under the [`ADDRESS_SPACE_LIMIT`] after one burst of hostile bodies at once.
struct Burst {
    gateway: Gateway,
    kinds: Vec<(Shape, Outcome)>,
    verdicts: Vec<Verdict>,
    alive: bool,
    /// The gateway's memory after the warm-up, before the burst.
    warm: MemoryStatus,
}

impl Burst {
    /// Starts a gateway under the limit, warms it up with one small call of each outcome (so
    /// the catalog is listed and the threads are up: the limit then meets the hostile bodies,
    /// not start-up), and sends one hostile body of each of `kinds`, all at once.
    async fn send(kinds: Vec<(Shape, Outcome)>) -> Self {
        let limit = format!("--as={ADDRESS_SPACE_LIMIT}");
        let mut gateway = Gateway::start(&["prlimit", &limit, "--"]).await;
        let started = memory_status(gateway.pid());
        for outcome in Outcome::ALL {
            let warm_up = tool_call(1, outcome.tool(), json!({"n": 1})).to_string();
            let got = verdict(outcome, gateway.send(&warm_up).await);
            // An allocator that reserves most of the limit up front fails here already; say so
            // in the same line the comparison collects.
            if got != Verdict::Result {
                panic!(
                    "survival under {} of address space: the warm-up {} call failed ({got:?}); \
                     address space {} before it",
                    mib(ADDRESS_SPACE_LIMIT),
                    outcome.name(),
                    mib(started.address_space)
                );
            }
        }
        let warm = memory_status(gateway.pid());
        let gateway_ref = &gateway;
        let verdicts = join_all(kinds.iter().enumerate().map(|(i, &(shape, outcome))| {
            let body = shape.call_body(100 + i as u64, outcome.tool(), HOSTILE_BODY_BYTES);
            async move { verdict(outcome, gateway_ref.send(&body).await) }
        }))
        .await;
        let alive = gateway.process.is_running();
        let burst = Self {
            gateway,
            kinds,
            verdicts,
            alive,
            warm,
        };
        eprintln!("{}", burst.summary());
        burst
    }

    /// One line: how many bodies got what, whether the gateway is up, its address space.
    fn summary(&self) -> String {
        let count =
            |wanted: fn(&Verdict) -> bool| self.verdicts.iter().filter(|v| wanted(v)).count();
        let address_space = if self.alive {
            let status = memory_status(self.gateway.pid());
            format!(
                "address space {} warm, {} now, {} at most",
                mib(self.warm.address_space),
                mib(status.address_space),
                mib(status.address_space_peak)
            )
        } else {
            format!(
                "address space {} warm; the gateway died",
                mib(self.warm.address_space)
            )
        };
        let mut refusals: Vec<&str> = self
            .verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Refusal(kind) => Some(kind.as_str()),
                Verdict::Result | Verdict::Broken(_) => None,
            })
            .collect();
        refusals.sort_unstable();
        format!(
            "survival under {} of address space: {} bodies at once: {} results, {} refusals \
             {refusals:?}, {} unanswered or broken; {address_space}",
            mib(ADDRESS_SPACE_LIMIT),
            self.verdicts.len(),
            count(|v| *v == Verdict::Result),
            count(|v| matches!(v, Verdict::Refusal(_))),
            count(|v| matches!(v, Verdict::Broken(_))),
        )
    }

    /// How many bodies of `outcome` got their result.
    fn results_of(&self, outcome: Outcome) -> usize {
        self.kinds
            .iter()
            .zip(&self.verdicts)
            .filter(|((_, o), v)| *o == outcome && **v == Verdict::Result)
            .count()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_survives_concurrent_hostile_bodies_in_256_mib_of_address_space() {
    let kinds = (0..CONCURRENT_HOSTILE_BODIES)
        .map(|i| {
            (
                Shape::ALL[i % Shape::ALL.len()],
                Outcome::ALL[i % Outcome::ALL.len()],
            )
        })
        .collect();
    let mut burst = Burst::send(kinds).await;
    let broken: Vec<String> = burst
        .kinds
        .iter()
        .zip(&burst.verdicts)
        .filter_map(|((shape, outcome), verdict)| match verdict {
            Verdict::Broken(why) => Some(format!("{} {}: {why}", shape.name(), outcome.name())),
            Verdict::Result | Verdict::Refusal(_) => None,
        })
        .collect();
    assert!(
        broken.is_empty() && burst.alive,
        "every hostile body gets a result or a refusal and the gateway stays up \
         (running: {}); broken answers: {broken:#?}",
        burst.alive
    );
    let gateway = &mut burst.gateway;
    assert!(gateway.process.is_running(), "the gateway is up");
    assert!(gateway.calls_of("update").is_empty(), "a held call ran");
    assert!(gateway.calls_of("purge").is_empty(), "a denied call ran");
    // The warm-up, then one call per forwarded result.
    assert_eq!(
        gateway.calls_of("lookup").len(),
        1 + burst.results_of(Outcome::Forwarded)
    );

    let read = tool_call(200, "lookup", json!({"after": "the burst"})).to_string();
    burst.gateway.expect(Outcome::Forwarded, &read).await;
    assert_eq!(
        burst.gateway.calls_of("lookup").last(),
        Some(&json!({"after": "the burst"})),
        "the upstream received the normal read"
    );
}

/// Not a requirement but a yardstick for the allocator choice (BENCHMARKS.md, "Memory under
/// hostile bodies"): the survival burst with the one shape today's representation keeps
/// within a few times its size, long strings, forwarded and refused, so that what decides
/// survival is how much address space the allocator reserves. Prints; asserts nothing.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "allocator comparison; bash bench/memory.sh --allocators runs it"]
async fn allocator_yardstick_long_strings_in_256_mib_of_address_space() {
    let kinds = (0..CONCURRENT_HOSTILE_BODIES)
        .map(|i| {
            (
                Shape::LongStrings,
                [Outcome::Forwarded, Outcome::Refused][i % 2],
            )
        })
        .collect();
    Burst::send(kinds).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resident_memory_returns_after_a_burst_of_hostile_bodies() {
    let gateway = Gateway::start(&[]).await;
    // Warm every path the burst takes, so the baseline holds what a serving gateway keeps
    // anyway (catalog, thread stacks, connection buffers, allocator pools).
    for shape in Shape::ALL {
        for outcome in Outcome::ALL {
            gateway
                .expect(outcome, &shape.call_body(1, outcome.tool(), 4096))
                .await;
        }
    }
    let baseline = settled_rss(&gateway, 0).await;

    // Every shape and every outcome, two at a time: both worker threads allocate (and free)
    // body-sized memory, and the peak stays bounded on code that does not meet the growth
    // bound yet. Six bodies, not all twelve kinds: a debug build parses a hostile body in
    // seconds.
    let kinds: Vec<(Shape, Outcome)> = (0..6)
        .map(|i| {
            (
                Shape::ALL[i % Shape::ALL.len()],
                Outcome::ALL[i % Outcome::ALL.len()],
            )
        })
        .collect();
    for pair in kinds.chunks(2) {
        let sends = pair.iter().map(|&(shape, outcome)| {
            let body = shape.call_body(2, outcome.tool(), HOSTILE_BODY_BYTES);
            let gateway = &gateway;
            async move { gateway.expect(outcome, &body).await }
        });
        join_all(sends).await;
    }
    let after_burst = memory_status(gateway.pid());
    let settled = settled_rss(&gateway, baseline + RETURN_SLACK).await;
    eprintln!(
        "memory return: baseline {}, burst peak {}, right after {}, settled {} (bound {})",
        mib(baseline),
        mib(after_burst.peak),
        mib(after_burst.rss),
        mib(settled),
        mib(baseline + RETURN_SLACK)
    );
    assert!(
        settled <= baseline + RETURN_SLACK,
        "after the burst the gateway keeps {} resident, {} above its warm baseline of {} \
         (at most {} allowed)",
        mib(settled),
        mib(settled.saturating_sub(baseline)),
        mib(baseline),
        mib(RETURN_SLACK)
    );
}

/// The gateway's resident memory once it settled. Allocators hand freed memory back lazily: a
/// thread's freed pages go back when that thread allocates again after a delay (mimalloc: 1 s).
/// So this keeps serving small reads, eight at a time as concurrent clients send them (one at a
/// time, they all land on the worker thread that accepts, and an idle worker's pages stay), and
/// reads `VmRSS` after each round, until it is at most `target` or twenty rounds went by.
/// Returns the last reading.
async fn settled_rss(gateway: &Gateway, target: u64) -> u64 {
    let mut rss = u64::MAX;
    for i in 0..20 {
        let reads = (0..8).map(|j| {
            let read = tool_call(1000 + i * 8 + j, "lookup", json!({"settle": i})).to_string();
            async move { gateway.expect(Outcome::Forwarded, &read).await }
        });
        join_all(reads).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        rss = memory_status(gateway.pid()).rss;
        if rss <= target {
            break;
        }
    }
    rss
}
