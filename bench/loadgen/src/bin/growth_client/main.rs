//! The client side of `bench/growth.sh`: 2025-11-25 MCP sessions against a gateway or the
//! upstream directly, one JSON line of figures on stdout per run.
//!
//! growth-client streams  --url U --checkpoints 1000,5000,9900 --push URL [--rss-pid PID]
//!     opens that many sessions' GET streams, left idle, reading the RSS of PID (and of
//!     --upstream-pid) at 0 and at each checkpoint; then has the upstream push one notification to every stream and
//!     counts how many arrive.
//! growth-client sessions --url U --sessions N --duration S [--warmup S] [--rss-pid PID]
//!     N sessions each calling the read-only `list_products` in a loop (closed loop).
//! growth-client fetch    --url U --bytes N --format json|sse --connections C --duration S
//!     sessions calling `get_blob` for an answer of N bytes, in a loop.
//! growth-client list     --url U [--repeat K]
//!     one session: its first `tools/call` (which makes a fresh gateway list the tools
//!     itself), a second one, then `tools/list` K times.

mod modes;
mod session;
mod stats;

use std::collections::HashMap;
use std::time::Duration;

pub struct Options(HashMap<String, String>);

impl Options {
    fn parse(args: impl Iterator<Item = String>) -> Self {
        let mut map = HashMap::new();
        let mut args = args.peekable();
        while let Some(flag) = args.next() {
            let name = flag
                .strip_prefix("--")
                .unwrap_or_else(|| usage(&format!("unexpected `{flag}`")));
            let value = args
                .next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
            map.insert(name.to_owned(), value);
        }
        Self(map)
    }

    pub fn text(&self, name: &str) -> String {
        self.0
            .get(name)
            .cloned()
            .unwrap_or_else(|| usage(&format!("--{name} is required")))
    }

    pub fn text_or(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    pub fn number(&self, name: &str, default: u64) -> u64 {
        self.0.get(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("bad --{name}")))
        })
    }

    pub fn seconds(&self, name: &str, default: f64) -> Duration {
        let value = self.0.get(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("bad --{name}")))
        });
        Duration::from_secs_f64(value)
    }

    pub fn pid(&self) -> Option<u32> {
        self.0
            .get("rss-pid")
            .map(|v| v.parse().unwrap_or_else(|_| usage("bad --rss-pid")))
    }
}

fn usage(message: &str) -> ! {
    eprintln!("growth-client: {message}");
    eprintln!(
        "usage: growth-client streams|sessions|fetch|list --url http://HOST:PORT/PATH [options]; see the source's header"
    );
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| usage("a mode is required"));
    let options = Options::parse(args);
    // One I/O thread: bench/growth.sh pins the client to its own core.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    let outcome = local.block_on(&runtime, async {
        match mode.as_str() {
            "streams" => modes::streams(&options).await,
            "sessions" => modes::sessions(&options).await,
            "fetch" => modes::fetch(&options).await,
            "list" => modes::list(&options).await,
            other => usage(&format!("unknown mode `{other}`")),
        }
    });
    match outcome {
        Ok(line) => println!("{line}"),
        Err(error) => {
            eprintln!("growth-client {mode}: {error}");
            std::process::exit(1);
        }
    }
}
