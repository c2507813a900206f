//! Logs, traces and metrics leaving the process: the `tracing` subscriber (readable text or
//! JSON lines), and — only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set — OpenTelemetry export
//! over OTLP/HTTP of the spans and of every metric (the instruments of
//! [`super::instruments`], recorded beside `/metrics`).
//!
//! Pipeline, execution and run ids travel in spans: the processor enters a `pipeline` span
//! while it decides and stages one input, the executor runs each effect in an `effect` span,
//! so every line logged inside carries them (in JSON, under `span` and `spans`).

use anyhow::{Context, Result};
use clap::ValueEnum;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The standard switch: set, Sluice exports over OTLP; unset, nothing is exported.
pub const OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Readable lines (coloured on a terminal).
    Pretty,
    /// One JSON object per line, with the current span's fields and the span list.
    Json,
}

/// Keeps the exporters alive; dropping it flushes what is buffered.
#[derive(Default)]
pub struct Exporters {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

impl Drop for Exporters {
    fn drop(&mut self) {
        if let Some(t) = self.traces.take() {
            let _ = t.shutdown();
        }
        if let Some(m) = self.metrics.take() {
            let _ = m.shutdown();
        }
    }
}

/// The service is `sluice` unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) names it: several deployments can then tell theirs apart.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").ok().filter(|n| !n.trim().is_empty());
    let in_attributes = std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    match (named, in_attributes) {
        (None, true) => Resource::builder().build(),
        (named, _) => resource_with(named.as_deref()),
    }
}

fn resource_with(named: Option<&str>) -> Resource {
    Resource::builder()
        .with_service_name(named.unwrap_or("sluice").to_string())
        .build()
}

fn otlp_enabled() -> bool {
    std::env::var(OTLP_ENDPOINT).is_ok_and(|v| !v.trim().is_empty())
}

/// Installs the global subscriber: `filter` (EnvFilter syntax) over `format` lines on
/// stderr, plus span export over OTLP when the endpoint is set.
pub fn init(filter: &str, format: LogFormat) -> Result<Exporters> {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_new(filter).with_context(|| format!("--log {filter:?} is not a valid filter"))?;
    let lines = match format {
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let mut exporters = Exporters::default();
    let spans = if otlp_enabled() {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .context("building the OTLP span exporter")?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("sluice"));
        exporters.traces = Some(provider);
        Some(layer)
    } else {
        None
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .with(spans)
        .try_init()
        .context("installing the log subscriber")?;
    Ok(exporters)
}

/// Installs the global meter provider that exports over OTLP when the endpoint is set
/// (interval: `OTEL_METRIC_EXPORT_INTERVAL`, default 60 s); call it before
/// [`Telemetry::new`](super::telemetry::Telemetry::new), whose instruments come from it.
/// Unset, the global provider stays the no-op one and nothing is exported.
pub fn export_metrics() -> Result<Exporters> {
    if !otlp_enabled() {
        return Ok(Exporters::default());
    }
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .build()
        .context("building the OTLP metric exporter")?;
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource())
        .build();
    opentelemetry::global::set_meter_provider(provider.clone());
    Ok(Exporters {
        traces: None,
        metrics: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

    use super::super::instruments::seconds_buckets;
    use super::super::telemetry::Telemetry;
    use super::*;

    /// What the OTLP exporter is handed: real instruments, histograms with their buckets.
    #[test]
    fn otlp_gets_counters_with_labels_and_histograms_with_buckets() {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .with_resource(resource_with(None))
            .build();
        let t = Telemetry::with_meter(provider.meter("sluice"));
        t.records_in("sluice.sensors", 1);
        t.records_in("sluice.sensors", 1);
        t.batch_latency(0.003);
        t.batch_latency(5.0);
        t.timers_pending(7);
        provider.force_flush().unwrap();
        let exported = exporter.get_finished_metrics().unwrap();
        let metrics: Vec<_> = exported
            .iter()
            .flat_map(|rm| rm.scope_metrics())
            .flat_map(|sm| sm.metrics())
            .collect();
        let names: Vec<&str> = metrics.iter().map(|m| m.name()).collect();
        let find = |name: &str| {
            metrics
                .iter()
                .find(|m| m.name() == name)
                .unwrap_or_else(|| panic!("no {name} in {names:?}"))
        };
        let AggregatedMetrics::U64(MetricData::Sum(records)) = find("sluice_records_in").data() else {
            panic!("records_in is not a u64 sum");
        };
        let point = records.data_points().next().unwrap();
        assert_eq!(point.value(), 2);
        let labels: Vec<(String, String)> = point
            .attributes()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        assert_eq!(labels, [("topic".to_string(), "sluice.sensors".to_string())]);
        let AggregatedMetrics::F64(MetricData::Histogram(batch)) = find("sluice_batch_seconds").data() else {
            panic!("batch_seconds is not an f64 histogram");
        };
        let point = batch.data_points().next().unwrap();
        assert_eq!(point.bounds().collect::<Vec<_>>(), seconds_buckets());
        assert_eq!(point.count(), 2);
        // 3 ms falls in the (2 ms, 4 ms] bucket, 5 s in (4.096 s, 8.192 s].
        let counts: Vec<u64> = point.bucket_counts().collect();
        assert_eq!((counts[2], counts[13], counts.iter().sum::<u64>()), (1, 1, 2));
        assert!(names.contains(&"sluice_timers_pending"), "{names:?}");
        assert!(names.contains(&"process_resident_memory_bytes"), "{names:?}");
    }

    #[test]
    fn the_service_name_is_sluice_unless_the_environment_names_one() {
        let name = |r: &Resource| r.get(&opentelemetry::Key::new("service.name")).map(|v| v.to_string());
        assert_eq!(name(&resource_with(None)), Some("sluice".to_string()));
        assert_eq!(
            name(&resource_with(Some("orders-sluice"))),
            Some("orders-sluice".to_string())
        );
    }
}
