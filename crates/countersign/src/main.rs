//! The `countersign` command: a gateway in front of MCP servers that makes a human countersign
//! every risky tool call.
//!
//! Exit codes: 0 success; 1 runtime failure (a listener could not bind, the gateway failed);
//! 2 usage or configuration error (bad flags, invalid config file).

#![forbid(unsafe_code)]

mod apikey;
mod check;
mod demo;
mod token;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use countersign_app::{Overrides, RawConfig, RunningGateway, shutdown_signal, telemetry};

// The allocator decides whether memory comes back after a burst of large request bodies and
// how much of an address-space limit is left for requests (issue 9; figures in BENCHMARKS.md,
// "Memory under hostile bodies", `bash bench/memory.sh --allocators`):
// - glibc malloc keeps what a burst took: up to 2.8 GiB resident before the JSON representation
//   change, whatever MALLOC_ARENA_MAX or fixed mmap and trim thresholds; only `malloc_trim`
//   would hand the freed heap back, and calling it (or `mallopt`) takes unsafe code. Its
//   per-thread arenas also reserve 64 MiB of address space each, 233 of 256 MiB after warm-up.
// - jemalloc returns memory on a 10 s decay and died in every 256 MiB burst.
// - mimalloc (v3) came back to 1 to 13 MiB above its warm baseline within a second or two of
//   traffic and survived every burst after the representation change; when its 1 GiB arena
//   reservation does not fit an address-space limit it takes 128 MiB arenas. `override` makes it
//   the C library's malloc too, so glibc's own allocations (thread-local destructors, name
//   lookups) no longer create those 64 MiB arenas. Its cost: pages freed during a request stay
//   resident for its 1 s purge delay, so a request's peak counts its transient buffers.
// `--no-default-features` builds with the system allocator, `--no-default-features --features
// jemalloc` with jemalloc, to compare them.
// It is reached through `countersign-alloc`, which asks mimalloc for word-aligned blocks with its
// plain calls rather than its aligned ones (that crate says why).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: countersign_alloc::Mimalloc = countersign_alloc::Mimalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit code for usage and configuration errors.
const EXIT_CONFIG: u8 = 2;
/// Exit code for failures while running.
const EXIT_RUNTIME: u8 = 1;

#[derive(Debug, Parser)]
#[command(
    name = "countersign",
    version,
    about = "A gateway in front of MCP servers that makes a human countersign every risky tool call.",
    after_help = "Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway in front of one or more MCP servers.
    Serve(ServeArgs),
    /// Start a demo store MCP server with the gateway in front of it, and print how to try it.
    Demo(DemoArgs),
    /// Validate a configuration and its policy, and explain the decision for every tool.
    Check(check::CheckArgs),
    /// Print a new signing key entry (`kid:key`) for COUNTERSIGN_SIGNING_KEYS or a key file.
    Keygen,
    /// Make API keys for the `api_keys` identity method.
    Apikey {
        #[command(subcommand)]
        command: apikey::ApiKeyCommand,
    },
    /// Work with confirmation tokens.
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The upstream MCP server: http(s)://host:port/mcp (Streamable HTTP),
    /// sse+http(s)://host:port/sse (legacy HTTP+SSE), or 'stdio:COMMAND ARGS…' (a stdio server
    /// the gateway starts). Replaces the config file's upstreams.
    #[arg(long, value_name = "URL|stdio:CMD")]
    upstream: Option<String>,
    /// Gateway path for --upstream. Default: the upstream URL's path (/mcp for stdio).
    #[arg(long, value_name = "PATH")]
    path: Option<String>,
    /// MCP listener address. Default 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Admin listener address (/healthz, /readyz, /metrics), or `off`. Default 127.0.0.1:9090.
    #[arg(long, value_name = "ADDR|off")]
    admin: Option<String>,
    /// YAML configuration file; flags override its values.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Policy file. Default: the built-in defaults (reads pass, everything else is held).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Audit trail: `-` for stdout, a file to append to, or `off`. Default stdout.
    #[arg(long, value_name = "PATH|-|off")]
    audit: Option<String>,
    /// Redis shared by all replicas (`redis://`, `rediss://`, `redis-cluster://h1,h2`): spent
    /// confirmations, elicitation answers and pinned risks. Replaces the file's `redis.url`.
    #[arg(
        long,
        value_name = "URL",
        env = "COUNTERSIGN_REDIS_URL",
        hide_env_values = true
    )]
    redis: Option<String>,
    /// Log format: text or json.
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Gateway listener address for the demo.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Admin listener address, or `off`.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:9090")]
    admin: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Single-threaded: this thread is connection worker 0, and `connections.workers` adds the
    // others, each a runtime of its own (see `countersign_proxy::workers`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("countersign: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Demo(args) => demo::run(&args.listen, &args.admin).await,
            Command::Check(args) => check::run(args).await,
            Command::Keygen => {
                println!("{}", countersign_token::keygen_entry());
                Ok(())
            }
            Command::Apikey { command } => apikey::run(command),
            Command::Token { command } => token::run(command),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(error)) => {
            eprintln!("countersign: {error:#}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(Failure::Runtime(error)) => {
            eprintln!("countersign: {error:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// Splits failures by exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    Config(anyhow::Error),
    Runtime(anyhow::Error),
}

async fn serve(args: ServeArgs) -> Result<(), Failure> {
    let mut raw = match &args.config {
        Some(path) => RawConfig::load(path).map_err(Failure::Config)?,
        None => RawConfig::default(),
    };
    raw.apply(Overrides {
        upstream: args.upstream,
        policy: args.policy,
        audit: args.audit,
        redis: args.redis,
        path: args.path,
        listen: args.listen,
        admin: args.admin,
        log_format: args.log_format,
    });
    let config = raw.validate().map_err(Failure::Config)?;
    let traces = telemetry::init(config.log_format, &config.telemetry).map_err(Failure::Config)?;
    let gateway = RunningGateway::start(config)
        .await
        .map_err(Failure::Runtime)?;
    let stopped = gateway
        .run_until(shutdown_signal())
        .await
        .map_err(Failure::Runtime);
    // After the drain: the spans of the last requests are in the batch still.
    let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    stopped
}
