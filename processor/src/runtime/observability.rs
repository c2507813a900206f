//! Logs, traces and metrics leaving the process: the `tracing` subscriber (readable text or
//! JSON lines), and — only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set — OpenTelemetry export
//! over OTLP/HTTP of the spans and of every metric `/metrics` shows.
//!
//! Pipeline, execution and run ids travel in spans: the processor enters a `pipeline` span
//! while it decides and stages one input, the executor runs each effect in an `effect` span,
//! so every line logged inside carries them (in JSON, under `span` and `spans`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::ValueEnum;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use prometheus_client::metrics::MetricType;

use super::telemetry::{MetricDescriptor, Telemetry};

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

fn resource() -> Resource {
    Resource::builder().with_service_name("sluice").build()
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

/// Exports every metric of `telemetry` over OTLP when the endpoint is set (interval:
/// `OTEL_METRIC_EXPORT_INTERVAL`, default 60 s). Counters and gauges keep their names and
/// labels; a histogram is exported as its `_count` and `_sum`.
pub fn export_metrics(telemetry: Arc<Telemetry>) -> Result<Exporters> {
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
    let meter = provider.meter("sluice");
    let snapshot = Arc::new(Snapshot::new(telemetry));
    for family in snapshot.families() {
        let (name, kind) = (family.name.clone(), family.kind);
        let source = snapshot.clone();
        let observe = move |sink: &dyn Fn(f64, &[KeyValue])| {
            for sample in source.samples().iter().filter(|s| s.family == name) {
                sink(sample.value, &sample.labels);
            }
        };
        match kind {
            Kind::Counter => {
                meter
                    .f64_observable_counter(family.name.clone())
                    .with_description(family.help.clone())
                    .with_callback(move |o| observe(&|v, l| o.observe(v, l)))
                    .build();
            }
            Kind::Gauge => {
                meter
                    .f64_observable_gauge(family.name.clone())
                    .with_description(family.help.clone())
                    .with_callback(move |o| observe(&|v, l| o.observe(v, l)))
                    .build();
            }
        }
    }
    Ok(Exporters {
        traces: None,
        metrics: Some(provider),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

#[derive(Debug, Clone, PartialEq)]
struct Family {
    name: String,
    kind: Kind,
    help: String,
}

#[derive(Debug, Clone, PartialEq)]
struct Sample {
    family: String,
    labels: Vec<KeyValue>,
    value: f64,
}

/// The registry read once per export, whichever instrument's callback asks first.
struct Snapshot {
    telemetry: Arc<Telemetry>,
    cached: Mutex<Option<(Instant, Arc<Vec<Sample>>)>>,
}

impl Snapshot {
    fn new(telemetry: Arc<Telemetry>) -> Snapshot {
        Snapshot {
            telemetry,
            cached: Mutex::new(None),
        }
    }

    fn families(&self) -> Vec<Family> {
        families(self.telemetry.descriptors())
    }

    fn samples(&self) -> Arc<Vec<Sample>> {
        let mut cached = self.cached.lock().expect("snapshot lock");
        match &*cached {
            Some((at, samples)) if at.elapsed() < Duration::from_secs(1) => samples.clone(),
            _ => {
                let samples = Arc::new(samples(&self.telemetry.encode_text(), &self.families()));
                *cached = Some((Instant::now(), samples.clone()));
                samples
            }
        }
    }
}

/// The OTLP instruments for the registered metrics: counters (`_total`) and histograms'
/// `_count` and `_sum` as counters, gauges as gauges (histogram buckets are left out).
fn families(descriptors: &[MetricDescriptor]) -> Vec<Family> {
    let mut families = Vec::new();
    for d in descriptors {
        let family = |suffix: &str, kind: Kind, what: &str| Family {
            name: format!("{}{suffix}", d.name),
            kind,
            help: format!("{}{what}", d.help),
        };
        match d.kind {
            MetricType::Counter => families.push(family("_total", Kind::Counter, "")),
            MetricType::Gauge => families.push(family("", Kind::Gauge, "")),
            MetricType::Histogram => {
                families.push(family("_count", Kind::Counter, " (observations)"));
                families.push(family("_sum", Kind::Counter, " (sum)"));
            }
            _ => {}
        }
    }
    families
}

/// The samples of OpenMetrics `text` that belong to `families`.
fn samples(text: &str, families: &[Family]) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, parse_labels(labels.trim_end_matches('}'))),
            None => (series, Vec::new()),
        };
        if families.iter().any(|f| f.name == name) {
            samples.push(Sample {
                family: name.to_string(),
                labels,
                value,
            });
        }
    }
    samples
}

/// `a="x",b="y"` (values with `\"` and `\\` escapes).
fn parse_labels(text: &str) -> Vec<KeyValue> {
    let mut labels = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.push(KeyValue::new(key.trim_start_matches(',').to_string(), value));
        rest = &after[end..];
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_text_becomes_counters_and_gauges_with_labels() {
        let t = Telemetry::new();
        // Every registered metric gets an instrument, with samples or not.
        let all = families(t.descriptors());
        assert!(all.iter().any(|f| f.name == "sluice_effects_total"), "{all:?}");
        assert!(all.iter().any(|f| f.name == "sluice_restore_seconds"), "{all:?}");
        t.record_in("sluice.sensors");
        t.record_in("sluice.sensors");
        t.timers_pending(7);
        t.batch_latency(0.5);
        t.consumer_lag("a \"quoted\" topic", 1, 9);
        let families = families(t.descriptors());
        let samples = samples(&t.encode_text(), &families);
        let family = |n: &str| families.iter().find(|f| f.name == n).map(|f| f.kind);
        assert_eq!(family("sluice_records_in_total"), Some(Kind::Counter));
        assert_eq!(family("sluice_timers_pending"), Some(Kind::Gauge));
        assert_eq!(family("sluice_batch_seconds_count"), Some(Kind::Counter));
        assert_eq!(family("sluice_batch_seconds_bucket"), None);
        let value = |n: &str| {
            samples
                .iter()
                .find(|s| s.family == n)
                .map(|s| (s.value, s.labels.clone()))
        };
        assert_eq!(
            value("sluice_records_in_total"),
            Some((2.0, vec![KeyValue::new("topic", "sluice.sensors")]))
        );
        assert_eq!(value("sluice_timers_pending"), Some((7.0, vec![])));
        assert_eq!(value("sluice_batch_seconds_sum"), Some((0.5, vec![])));
        assert_eq!(
            value("sluice_consumer_lag"),
            Some((
                9.0,
                vec![
                    KeyValue::new("topic", "a \"quoted\" topic"),
                    KeyValue::new("partition", "1")
                ]
            ))
        );
    }
}
