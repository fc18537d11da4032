//! OpenTelemetry traces (SPEC §12), configured the standard way, through the environment:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns them on,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` (and `_ARG`),
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT` and `OTEL_BSP_*` are read by
//! the SDK as everywhere else; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn
//! them off. Spans go out over OTLP/HTTP with protobuf bodies (what every collector takes),
//! batched off the request path, through the same reqwest and rustls as the rest of the
//! binary. Callers' `traceparent` headers are continued (W3C Trace Context).
//!
//! Without an endpoint nothing of this is set up and a node pays nothing for it.

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;

/// Whether this process exports traces (set once, at start).
static ENABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_enabled(on: bool) {
    ENABLED.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process exports traces: the nodes then open a span per request and per
/// task created (`rota_scheduler::Config::traces`).
pub fn enabled() -> bool {
    ENABLED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the environment asks for traces.
pub fn wanted() -> bool {
    let var = |k: &str| std::env::var(k).ok().map(|v| v.trim().to_ascii_lowercase());
    let set = |k: &str| var(k).is_some_and(|v| !v.is_empty());
    let off = var("OTEL_SDK_DISABLED").as_deref() == Some("true")
        || var("OTEL_TRACES_EXPORTER").as_deref() == Some("none");
    !off && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The tracer provider the environment describes, exporting from the current tokio
/// runtime; `service` names the process when `OTEL_SERVICE_NAME` does not.
pub fn provider(service: &str) -> anyhow::Result<SdkTracerProvider> {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    if !matches!(protocol.trim(), "" | "http/protobuf") {
        anyhow::bail!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: Rota exports traces over http/protobuf \
             (a collector's port 4318); set it to http/protobuf or leave it out"
        );
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(Http(reqwest::Client::new()))
        .build()
        .context("the OTLP trace exporter (OTEL_EXPORTER_OTLP_*)")?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(service.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(provider)
}

/// What becomes a span: Rota's own (requests, tasks), not its libraries' inner workings.
pub fn filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new(
        "info,sqlx=off,wasmtime=off,cranelift=off,opentelemetry=off,h2=off,hyper=off,reqwest=off",
    )
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("rota"))
}

/// The exporter's HTTP client: the binary's reqwest (the SDK's own reqwest integration is
/// for another major version of it).
#[derive(Debug)]
struct Http(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Http {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let answer = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut response = http::Response::builder().status(answer.status());
        if let Some(headers) = response.headers_mut() {
            *headers = answer.headers().clone();
        }
        Ok(response.body(answer.bytes().await?)?)
    }
}
