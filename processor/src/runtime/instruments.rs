//! Metric instruments that record each value twice, once for each way metrics leave the
//! process: a `prometheus-client` handle behind `/metrics`, and an OpenTelemetry instrument
//! exported over OTLP (a no-op unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set, see
//! [`super::observability`]). Both are real instruments: an OTLP histogram keeps its
//! buckets, a counter its labels; nothing is re-parsed from the Prometheus text.
//!
//! Labels are a list of (name, value) pairs, so one value serves both sides.

use std::sync::atomic::AtomicU64;

use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter as PromCounter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge as PromGauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram as PromHistogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry, Unit};

/// A metric's labels: (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;

fn attributes(labels: &Labels) -> Vec<KeyValue> {
    labels.iter().map(|(k, v)| KeyValue::new(*k, v.clone())).collect()
}

/// Bucket bounds of every duration histogram, in seconds: 1 ms doubling to about 16 s (a
/// batch or a timer is normally milliseconds late; the tail shows stalls).
pub fn seconds_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 15).collect()
}

fn seconds_histogram() -> PromHistogram {
    PromHistogram::new(seconds_buckets())
}

/// One registered metric: its exposed name (unit included, without the `_total` of
/// counters), type and help.
#[derive(Debug, Clone)]
pub struct MetricDescriptor {
    pub name: String,
    pub kind: MetricType,
    pub help: String,
}

/// Registers each metric on both sides and remembers what it registered.
pub struct Registrar {
    pub registry: Registry,
    pub descriptors: Vec<MetricDescriptor>,
    meter: Meter,
}

impl Registrar {
    pub fn new(meter: Meter) -> Registrar {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        Registrar {
            registry,
            descriptors: Vec::new(),
            meter,
        }
    }

    /// Registers `metric` as `sluice_<name>[_<unit>]`; returns the exposed name.
    fn register<M: Metric + Clone>(&mut self, name: &str, help: &str, unit: Option<Unit>, metric: &M) -> String {
        let exposed = match &unit {
            Some(unit) => format!("sluice_{name}_{}", unit.as_str()),
            None => format!("sluice_{name}"),
        };
        self.descriptors.push(MetricDescriptor {
            name: exposed.clone(),
            kind: metric.metric_type(),
            help: help.to_string(),
        });
        let base = format!("sluice_{name}");
        match unit {
            Some(unit) => self.registry.register_with_unit(base, help, unit, metric.clone()),
            None => self.registry.register(base, help, metric.clone()),
        }
        exposed
    }

    /// Registers `prom` and makes its OpenTelemetry twin with `otel` (given the meter, the
    /// exposed name and the help).
    fn dual<P: Metric + Clone, O>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        prom: P,
        otel: impl FnOnce(&Meter, String, String) -> O,
    ) -> Dual<P, O> {
        let exposed = self.register(name, help, unit, &prom);
        Dual {
            otel: otel(&self.meter, exposed, help.to_string()),
            prom,
        }
    }

    pub fn counter(&mut self, name: &str, help: &str) -> Counter {
        self.dual(name, help, None, Family::default(), |m, n, h| {
            m.u64_counter(n).with_description(h).build()
        })
    }

    pub fn gauge(&mut self, name: &str, help: &str) -> Gauge {
        self.dual(name, help, None, Family::default(), |m, n, h| {
            m.i64_gauge(n).with_description(h).build()
        })
    }

    /// A gauge without labels.
    pub fn plain_gauge(&mut self, name: &str, help: &str) -> PlainGauge {
        self.dual(name, help, None, PromGauge::default(), |m, n, h| {
            m.i64_gauge(n).with_description(h).build()
        })
    }

    /// A histogram of durations without labels.
    pub fn plain_seconds(&mut self, name: &str, help: &str) -> PlainSeconds {
        self.dual(name, help, Some(Unit::Seconds), seconds_histogram(), seconds_otel)
    }

    /// A gauge in seconds (`sluice_<name>_seconds`).
    pub fn seconds_gauge(&mut self, name: &str, help: &str) -> SecondsGauge {
        self.dual(name, help, Some(Unit::Seconds), Family::default(), |m, n, h| {
            m.f64_gauge(n).with_unit("s").with_description(h).build()
        })
    }

    /// A gauge in seconds without labels (`sluice_<name>_seconds`).
    pub fn plain_seconds_gauge(&mut self, name: &str, help: &str) -> PlainSecondsGauge {
        self.dual(name, help, Some(Unit::Seconds), PromGauge::default(), |m, n, h| {
            m.f64_gauge(n).with_unit("s").with_description(h).build()
        })
    }

    /// A histogram of durations (`sluice_<name>_seconds`, [`seconds_buckets`] on both sides).
    pub fn seconds(&mut self, name: &str, help: &str) -> Seconds {
        let prom = Family::new_with_constructor(seconds_histogram as fn() -> PromHistogram);
        self.dual(name, help, Some(Unit::Seconds), prom, seconds_otel)
    }

    /// A count that goes up and down (things under way).
    pub fn up_down(&mut self, name: &str, help: &str) -> UpDown {
        self.dual(name, help, None, PromGauge::default(), |m, n, h| {
            m.i64_up_down_counter(n).with_description(h).build()
        })
    }

    /// The process's own figures over OTLP (Prometheus reads them from [`ProcessCollector`]).
    pub fn process_observers(&self) {
        self.meter
            .u64_observable_gauge("process_resident_memory_bytes")
            .with_unit("By")
            .with_description("Resident memory of the process")
            .with_callback(|o| {
                if let Some(stats) = process_stats() {
                    o.observe(stats.resident_bytes, &[]);
                }
            })
            .build();
        self.meter
            .f64_observable_counter("process_cpu_seconds")
            .with_unit("s")
            .with_description("CPU time the process has used (user and system)")
            .with_callback(|o| {
                if let Some(stats) = process_stats() {
                    o.observe(stats.cpu_seconds, &[]);
                }
            })
            .build();
    }
}

/// One metric as both instruments (see the module's notes).
pub struct Dual<P, O> {
    prom: P,
    otel: O,
}

pub type Counter = Dual<Family<Labels, PromCounter>, opentelemetry::metrics::Counter<u64>>;
pub type Gauge = Dual<Family<Labels, PromGauge>, opentelemetry::metrics::Gauge<i64>>;
pub type PlainGauge = Dual<PromGauge, opentelemetry::metrics::Gauge<i64>>;
pub type SecondsGauge = Dual<Family<Labels, PromGauge<f64, AtomicU64>>, opentelemetry::metrics::Gauge<f64>>;
pub type PlainSecondsGauge = Dual<PromGauge<f64, AtomicU64>, opentelemetry::metrics::Gauge<f64>>;
pub type Seconds = Dual<Family<Labels, PromHistogram, fn() -> PromHistogram>, opentelemetry::metrics::Histogram<f64>>;
pub type PlainSeconds = Dual<PromHistogram, opentelemetry::metrics::Histogram<f64>>;
pub type UpDown = Dual<PromGauge, opentelemetry::metrics::UpDownCounter<i64>>;

/// The OpenTelemetry histogram of a duration, with the same buckets as Prometheus's.
fn seconds_otel(meter: &Meter, name: String, help: String) -> opentelemetry::metrics::Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit("s")
        .with_boundaries(seconds_buckets())
        .with_description(help)
        .build()
}

impl Counter {
    pub fn add(&self, labels: Labels, n: u64) {
        self.otel.add(n, &attributes(&labels));
        self.prom.get_or_create(&labels).inc_by(n);
    }
}

impl Gauge {
    pub fn set(&self, labels: Labels, value: i64) {
        self.otel.record(value, &attributes(&labels));
        self.prom.get_or_create(&labels).set(value);
    }

    /// Drops a series that no longer means anything (a partition this instance let go):
    /// Prometheus stops showing it; OpenTelemetry, which cannot drop one, reads 0.
    pub fn forget(&self, labels: Labels) {
        self.otel.record(0, &attributes(&labels));
        self.prom.remove(&labels);
    }
}

impl PlainGauge {
    pub fn set(&self, value: i64) {
        self.otel.record(value, &[]);
        self.prom.set(value);
    }
}

impl SecondsGauge {
    pub fn set(&self, labels: Labels, seconds: f64) {
        self.otel.record(seconds, &attributes(&labels));
        self.prom.get_or_create(&labels).set(seconds);
    }
}

impl PlainSecondsGauge {
    pub fn set(&self, seconds: f64) {
        self.otel.record(seconds, &[]);
        self.prom.set(seconds);
    }
}

impl Seconds {
    pub fn observe(&self, labels: Labels, seconds: f64) {
        self.otel.record(seconds, &attributes(&labels));
        self.prom.get_or_create(&labels).observe(seconds);
    }
}

impl PlainSeconds {
    pub fn observe(&self, seconds: f64) {
        self.otel.record(seconds, &[]);
        self.prom.observe(seconds);
    }
}

impl UpDown {
    pub fn add(&self, n: i64) {
        self.otel.add(n, &[]);
        self.prom.inc_by(n);
    }
}

/// What the kernel says of this process.
struct ProcessStats {
    resident_bytes: u64,
    cpu_seconds: f64,
}

/// From `/proc/self` (Linux; elsewhere `None`, and the figures are left out).
fn process_stats() -> Option<ProcessStats> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let (page, ticks) = unsafe { (libc::sysconf(libc::_SC_PAGESIZE), libc::sysconf(libc::_SC_CLK_TCK)) };
    if page <= 0 || ticks <= 0 {
        return None;
    }
    Some(ProcessStats {
        resident_bytes: resident_pages * page as u64,
        cpu_seconds: (utime + stime) as f64 / ticks as f64,
    })
}

/// `process_resident_memory_bytes` and `process_cpu_seconds_total`, the names Prometheus's
/// own clients use, read at each scrape.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(stats) = process_stats() else {
            return Ok(());
        };
        let rss = ConstGauge::new(stats.resident_bytes as i64);
        let metric = encoder.encode_descriptor(
            "process_resident_memory",
            "Resident memory of the process",
            Some(&Unit::Bytes),
            rss.metric_type(),
        )?;
        rss.encode(metric)?;
        let cpu = ConstCounter::new(stats.cpu_seconds);
        let metric = encoder.encode_descriptor(
            "process_cpu",
            "CPU time the process has used (user and system)",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?;
        cpu.encode(metric)
    }
}
