//! The OTLP trace exporter: a batch span processor sending OTLP/HTTP protobuf through the
//! gateway's own hyper client, the W3C trace-context propagator, and a `tracing` layer that takes
//! the request spans (target `countersign::trace`) and nothing else.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use crate::config::TelemetryConfig;

/// How long one export may take; a receiver that hangs costs spans, never requests.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// A receiver's answer is a few bytes; more is not read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The trace pipeline, when an endpoint is configured.
#[derive(Debug, Default)]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    pub(super) fn from_config(config: &TelemetryConfig) -> anyhow::Result<Self> {
        let from_env = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|v| !v.is_empty()));
        if config.otlp_traces_url.is_none() && !from_env {
            return Ok(Self::default());
        }
        if let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
            && protocol != "http/protobuf"
        {
            anyhow::bail!(
                "OTEL_EXPORTER_OTLP_PROTOCOL is `{protocol}`: countersign exports traces over \
                 OTLP/HTTP only (`http/protobuf`, port 4318 on a collector)"
            );
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(HyperClient::new()?)
            .with_timeout(EXPORT_TIMEOUT);
        if let Some(url) = &config.otlp_traces_url {
            exporter = exporter.with_endpoint(url.clone());
        }
        let exporter = exporter
            .build()
            .context("setting up the OTLP trace exporter")?;
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "countersign".to_owned());
        let resource = Resource::builder()
            .with_service_name(service)
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        // The sampler comes from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (parent-based,
        // always on by default), read by the SDK itself.
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Self {
            provider: Some(provider),
        })
    }

    pub(super) fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// The `tracing` layer exporting the request spans; a layer that does nothing without an
    /// endpoint.
    pub(super) fn layer<S>(&self) -> Option<impl Layer<S> + Send + Sync + 'static>
    where
        S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
    {
        let provider = self.provider.as_ref()?;
        let tracer = provider.tracer("countersign");
        let only_requests =
            Targets::new().with_target(countersign_proxy::trace::TARGET, tracing::Level::TRACE);
        Some(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                // Source locations, threads, busy/idle times and the tracing target say nothing
                // about a request; the attributes are the MCP conventions' and the gateway's.
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
                .with_target(false)
                .with_filter(only_requests),
        )
    }

    /// Sends the spans still in the batch and stops the exporter; blocks up to its timeout.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "the last trace spans could not be exported");
        }
    }
}

/// OTLP/HTTP through hyper. The batch processor exports from a thread of its own, outside the
/// tokio runtime, so each export is spawned on the runtime that set the exporter up.
#[derive(Debug, Clone)]
struct HyperClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl HyperClient {
    fn new() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current()
            .context("the trace exporter is set up inside the gateway's runtime")?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(EXPORT_TIMEOUT));
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for HyperClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exchange = async move {
            let response = client.request(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        self.runtime
            .spawn(async move {
                tokio::time::timeout(EXPORT_TIMEOUT, exchange)
                    .await
                    .map_err(|_| HttpError::from("the OTLP receiver did not answer in time"))?
            })
            .await?
    }
}
