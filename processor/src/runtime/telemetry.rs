//! What the processor reports about itself: health flags for the probes and the metrics
//! behind `/metrics` (served by [`super::http`]) and exported over OTLP
//! ([`super::observability`]).
//!
//! Health flags are atomics and metric handles are the lock-free (or briefly locked, never
//! across an await) handles of `prometheus-client`, so recording on the hot path costs an
//! atomic add and a scrape can never stall the processor.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry, Unit};

/// The content type of `prometheus-client`'s text encoder (OpenMetrics 1.0), which Prometheus
/// negotiates and parses natively.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabel {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabel {
    partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicPartitionLabel {
    topic: String,
    partition: i32,
}

/// One registered metric: its exposed name (prefix and unit included, without the
/// `_total` of counters), type and help, whether or not it has samples yet.
#[derive(Debug, Clone)]
pub struct MetricDescriptor {
    pub name: String,
    pub kind: MetricType,
    pub help: String,
}

/// Registers metrics under the `sluice` prefix and remembers what it registered.
struct Registrar {
    registry: Registry,
    descriptors: Vec<MetricDescriptor>,
}

impl Default for Registrar {
    fn default() -> Registrar {
        Registrar {
            registry: Registry::with_prefix("sluice"),
            descriptors: Vec::new(),
        }
    }
}

impl Registrar {
    /// Registers `metric` and hands it back, to be kept as the handle that records it.
    fn add<M: Metric + Clone>(&mut self, name: &str, help: &str, unit: Option<Unit>, metric: M) -> M {
        let exposed = match &unit {
            Some(unit) => format!("sluice_{name}_{}", unit.as_str()),
            None => format!("sluice_{name}"),
        };
        self.descriptors.push(MetricDescriptor {
            name: exposed,
            kind: metric.metric_type(),
            help: help.to_string(),
        });
        match unit {
            Some(unit) => self.registry.register_with_unit(name, help, unit, metric.clone()),
            None => self.registry.register(name, help, metric.clone()),
        }
        metric
    }
}

/// What the processor reports about itself: health flags for the probes and the metric
/// handles behind `/metrics`. Shared as an `Arc` between the processor and the server.
pub struct Telemetry {
    registry: Registry,
    descriptors: Vec<MetricDescriptor>,
    /// Starts true: liveness must not fail before the first broker contact, or an orchestrator
    /// would restart a process that is merely starting up.
    broker_ok: AtomicBool,
    /// Starts false: not ready until the assigned partitions' state is restored.
    ready: AtomicBool,
    /// Set once; the first reason wins and the process stays unhealthy until restarted.
    fatal: OnceLock<String>,
    /// When the processing loop last turned, in milliseconds since `started`.
    last_turn_ms: AtomicU64,
    /// Waits on the broker under way: a loop held up by the broker is not stuck.
    broker_waits: AtomicUsize,
    /// How long the loop may go without turning, outside broker waits, before liveness fails.
    stuck_after_ms: AtomicU64,
    started: tokio::time::Instant,
    broker_reachable: Gauge,
    forwarded: Family<TopicLabel, Counter>,
    forwarded_duplicates: Family<TopicLabel, Counter>,
    records_in: Family<TopicLabel, Counter>,
    records_out: Family<TopicLabel, Counter>,
    dead_letters: Counter,
    batch_seconds: Histogram,
    commit_seconds: Histogram,
    consumer_lag: Family<TopicPartitionLabel, Gauge>,
    timers_pending: Gauge,
    effects_in_flight: Gauge,
    effects: Family<OutcomeLabel, Counter>,
    restore_records: Family<PartitionLabel, Gauge>,
    restore_seconds: Family<PartitionLabel, Gauge<f64, AtomicU64>>,
    partitions_owned: Gauge,
}

impl Telemetry {
    /// A fresh registry with every Sluice metric registered (so each appears in `/metrics`
    /// from the first scrape, at zero), healthy and not yet ready. Long as a list is long: one
    /// registration per metric, clearest all in one place.
    pub fn new() -> Arc<Telemetry> {
        let mut r = Registrar::default();
        let records_in = r.add("records_in", "Records consumed, by topic", None, Family::default());
        let records_out = r.add("records_out", "Records produced, by topic", None, Family::default());
        let dead_letters = r.add(
            "dead_letters",
            "Records that could not be processed and went to the dead-letter topic",
            None,
            Counter::default(),
        );
        // 1 ms .. ~16 s: a batch is normally milliseconds; the tail shows broker stalls.
        let batch_seconds = r.add(
            "batch",
            "Time to process one batch of records or due timers",
            Some(Unit::Seconds),
            Histogram::new(exponential_buckets(0.001, 2.0, 15)),
        );
        let commit_seconds = r.add(
            "commit",
            "Time from producing a batch's outputs to their acknowledgement (under exactly-once, to the transaction's commit)",
            Some(Unit::Seconds),
            Histogram::new(exponential_buckets(0.001, 2.0, 15)),
        );
        let consumer_lag = r.add(
            "consumer_lag",
            "Input records not yet consumed, by topic and owned partition (from the client's statistics)",
            None,
            Family::default(),
        );
        let timers_pending = r.add(
            "timers_pending",
            "Durable timers scheduled in the owned partitions",
            None,
            Gauge::default(),
        );
        let effects_in_flight = r.add(
            "effects_in_flight",
            "Side effects (job triggers, HTTP calls) currently running",
            None,
            Gauge::default(),
        );
        let effects = r.add("effects", "Side effects completed, by outcome", None, Family::default());
        let restore_records = r.add(
            "restore_records",
            "Changelog records replayed by the latest state restore, by partition",
            None,
            Family::default(),
        );
        let restore_seconds = r.add(
            "restore",
            "Time spent by the latest state restore, by partition",
            Some(Unit::Seconds),
            Family::default(),
        );
        let partitions_owned = r.add(
            "partitions_owned",
            "Input partitions assigned to this instance",
            None,
            Gauge::default(),
        );
        let broker_reachable = r.add(
            "broker_reachable",
            "1 while the brokers answer and take the processor's records, 0 while they do not (readiness fails meanwhile; liveness does not)",
            None,
            Gauge::default(),
        );
        broker_reachable.set(1);
        let forwarded = r.add(
            "forwarded_records",
            "Records read on another partition than their key's and forwarded to it, by topic (their producers partition with another hash than murmur2)",
            None,
            Family::default(),
        );
        let forwarded_duplicates = r.add(
            "forwarded_duplicates",
            "Forwarded copies that arrived again (forwarded anew after a crash) and changed nothing, by topic",
            None,
            Family::default(),
        );
        Arc::new(Telemetry {
            registry: r.registry,
            descriptors: r.descriptors,
            broker_ok: AtomicBool::new(true),
            ready: AtomicBool::new(false),
            fatal: OnceLock::new(),
            last_turn_ms: AtomicU64::new(0),
            broker_waits: AtomicUsize::new(0),
            stuck_after_ms: AtomicU64::new(DEFAULT_STUCK_AFTER.as_millis() as u64),
            started: tokio::time::Instant::now(),
            broker_reachable,
            forwarded,
            forwarded_duplicates,
            records_in,
            records_out,
            dead_letters,
            batch_seconds,
            commit_seconds,
            consumer_lag,
            timers_pending,
            effects_in_flight,
            effects,
            restore_records,
            restore_seconds,
            partitions_owned,
        })
    }

    /// False while the broker is unreachable or producing fails: readiness fails (and
    /// `sluice_broker_reachable` is 0), liveness does not — restarting every pod would not
    /// bring a broker back, and a crash loop would outlast the incident.
    pub fn set_broker_ok(&self, ok: bool) {
        self.broker_ok.store(ok, Ordering::Relaxed);
        self.broker_reachable.set(i64::from(ok));
    }

    /// How long the processing loop may go without turning before liveness fails.
    pub fn set_stuck_after(&self, after: std::time::Duration) {
        self.stuck_after_ms
            .store(after.as_millis().try_into().unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The processing loop turned: it is not stuck.
    pub fn turned(&self) {
        self.last_turn_ms.store(self.elapsed_ms(), Ordering::Relaxed);
    }

    /// Marks a wait on the broker (acknowledgements, a transaction) until the guard drops:
    /// meanwhile the loop is held up, not stuck.
    pub fn awaiting_broker(&self) -> BrokerWait<'_> {
        self.broker_waits.fetch_add(1, Ordering::Relaxed);
        BrokerWait(self)
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
    }

    /// True once the assigned partitions' state is restored; false again during a rebalance.
    pub fn broker_ok(&self) -> bool {
        self.broker_ok.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Unhealthy for the rest of the process's life: the processor cannot go on, so the
    /// orchestrator should restart it. Only the first reason is kept.
    pub fn set_fatal(&self, reason: &str) {
        let _ = self.fatal.set(reason.to_owned());
    }

    pub fn record_in(&self, topic: &str) {
        self.records_in.get_or_create(&topic_label(topic)).inc();
    }

    pub fn record_out(&self, topic: &str, n: u64) {
        self.records_out.get_or_create(&topic_label(topic)).inc_by(n);
    }

    pub fn forwarded(&self, topic: &str) {
        self.forwarded.get_or_create(&topic_label(topic)).inc();
    }

    pub fn forwarded_duplicate(&self, topic: &str) {
        self.forwarded_duplicates.get_or_create(&topic_label(topic)).inc();
    }

    pub fn dead_letter(&self) {
        self.dead_letters.inc();
    }

    pub fn batch_latency(&self, seconds: f64) {
        self.batch_seconds.observe(seconds);
    }

    pub fn commit_latency(&self, seconds: f64) {
        self.commit_seconds.observe(seconds);
    }

    /// The consumer's lag on one partition, as its client last measured it.
    pub fn consumer_lag(&self, topic: &str, partition: i32, lag: i64) {
        let label = TopicPartitionLabel {
            topic: topic.to_owned(),
            partition,
        };
        self.consumer_lag.get_or_create(&label).set(lag);
    }

    pub fn timers_pending(&self, n: i64) {
        self.timers_pending.set(n);
    }

    /// A trigger began (counted in `sluice_effects_in_flight` until [`Self::effect_finished`]).
    pub fn effect_started(&self) {
        self.effects_in_flight.inc();
    }

    pub fn effect_finished(&self) {
        self.effects_in_flight.dec();
    }

    pub fn effect_outcome(&self, outcome: &str) {
        let label = OutcomeLabel {
            outcome: outcome.to_owned(),
        };
        self.effects.get_or_create(&label).inc();
    }

    /// Progress of the partition's state restore so far (records replayed, seconds spent);
    /// called repeatedly while restoring, the last call leaves the totals.
    pub fn restore_progress(&self, partition: i32, records: u64, seconds: f64) {
        let label = PartitionLabel { partition };
        let records = i64::try_from(records).unwrap_or(i64::MAX);
        self.restore_records.get_or_create(&label).set(records);
        self.restore_seconds.get_or_create(&label).set(seconds);
    }

    pub fn partitions_owned(&self, n: i64) {
        self.partitions_owned.set(n);
    }

    /// Liveness: `Err(reason)` only when restarting the process could help: a fatal error,
    /// or a loop that has not turned for longer than allowed while not waiting on the broker.
    pub(super) fn liveness(&self) -> Result<(), String> {
        if let Some(reason) = self.fatal.get() {
            return Err(reason.clone());
        }
        let still = self
            .elapsed_ms()
            .saturating_sub(self.last_turn_ms.load(Ordering::Relaxed));
        let allowed = self.stuck_after_ms.load(Ordering::Relaxed);
        if still > allowed && self.broker_waits.load(Ordering::Relaxed) == 0 {
            return Err(format!(
                "the processing loop has not turned for {} s (allowed: {} s, --stuck-after) and is not waiting on the broker: stuck",
                still / 1000,
                allowed / 1000
            ));
        }
        Ok(())
    }

    /// Readiness: live, the broker reachable, and the owned partitions' state restored.
    pub(super) fn readiness(&self) -> Result<(), String> {
        self.liveness()?;
        if !self.broker_ok.load(Ordering::Relaxed) {
            return Err("broker unreachable".into());
        }
        if !self.ready.load(Ordering::Relaxed) {
            return Err("restoring state".into());
        }
        Ok(())
    }

    /// Every registered metric.
    pub fn descriptors(&self) -> &[MetricDescriptor] {
        &self.descriptors
    }

    /// The registry in the OpenMetrics text format (also what the OTLP export reads).
    pub fn encode_text(&self) -> String {
        self.encode().unwrap_or_default()
    }

    /// The registry in the OpenMetrics text format.
    pub(super) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &self.registry)?;
        Ok(body)
    }
}

/// How long the loop may go without turning by default: far longer than any batch takes,
/// short enough that a stuck instance's partitions move within minutes.
pub const DEFAULT_STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(120);

/// A wait on the broker under way ([`Telemetry::awaiting_broker`]).
pub struct BrokerWait<'a>(&'a Telemetry);

impl Drop for BrokerWait<'_> {
    fn drop(&mut self) {
        self.0.broker_waits.fetch_sub(1, Ordering::Relaxed);
        self.0.turned();
    }
}

fn topic_label(topic: &str) -> TopicLabel {
    TopicLabel {
        topic: topic.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn liveness_fails_when_the_loop_stops_turning_but_not_while_it_waits_on_the_broker() {
        let t = Telemetry::new();
        t.set_stuck_after(Duration::from_secs(120));
        t.turned();
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(t.liveness(), Ok(()));
        tokio::time::advance(Duration::from_secs(2)).await;
        let reason = t.liveness().unwrap_err();
        assert!(
            reason.contains("not turned for 121 s") && reason.contains("stuck"),
            "{reason}"
        );

        // Turning again heals it; a long wait on the broker is not being stuck.
        t.turned();
        assert_eq!(t.liveness(), Ok(()));
        {
            let _wait = t.awaiting_broker();
            t.set_broker_ok(false);
            tokio::time::advance(Duration::from_secs(600)).await;
            assert_eq!(t.liveness(), Ok(()));
            assert_eq!(t.readiness(), Err("broker unreachable".to_string()));
            assert!(t.encode_text().contains("sluice_broker_reachable 0"));
        }
        // The wait's end counts as a turn.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(t.liveness(), Ok(()));
    }
}
