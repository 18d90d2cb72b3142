//! Logging and traces. `RUST_LOG` picks log levels (default `info`); `--log-format json`
//! switches to one JSON object per line for log pipelines. With an OTLP endpoint
//! (`telemetry.otlp_endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) the request spans of `countersign_proxy::trace` are
//! exported over OTLP/HTTP (protobuf) in batches; without one no exporter exists and the spans
//! are never created.

mod otlp;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, TelemetryConfig};

pub use otlp::Traces;

/// Installs the global subscriber once (later calls, in tests, are ignored), and the trace
/// exporter when one is configured. Keep the returned [`Traces`] until shutdown, then call
/// [`Traces::shutdown`] so the last spans are sent.
pub fn init(format: LogFormat, config: &TelemetryConfig) -> anyhow::Result<Traces> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .boxed(),
    }
    // The request spans are for the exporter only: logs stay as they were.
    .with_filter(filter);
    let traces = Traces::from_config(config)?;
    let installed = tracing_subscriber::registry()
        .with(logs)
        .with(traces.layer())
        .try_init();
    if installed.is_ok() && traces.is_exporting() {
        countersign_proxy::trace::enable();
    }
    Ok(traces)
}
