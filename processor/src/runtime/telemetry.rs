//! What the processor reports about itself: health flags for the probes and the metrics
//! behind `/metrics` (served by [`super::http`]) and exported over OTLP
//! ([`super::observability`]).
//!
//! Health flags are atomics; each metric records into a `prometheus-client` handle and an
//! OpenTelemetry instrument ([`super::instruments`]), never across an await, so a scrape or
//! an export can never stall the processor.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::metrics::Meter;
use prometheus_client::registry::Registry;

pub use super::instruments::MetricDescriptor;
use super::instruments::{
    Counter, Gauge, Labels, PlainGauge, PlainSeconds, PlainSecondsGauge, Registrar, Seconds, SecondsGauge, UpDown,
};
use super::store::StateReads;
use crate::core::partitioning::PartitionId;
use crate::core::task::Tallies;

/// The content type of `prometheus-client`'s text encoder (OpenMetrics 1.0), which Prometheus
/// negotiates and parses natively.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the processor reports about itself: health flags for the probes and the metric
/// handles behind `/metrics`. Shared as an `Arc` between the processor and the server.
pub struct Telemetry {
    /// The broker's state as one word, so a success and an outage notice cannot interleave:
    /// the low bit is set while the broker is away, the rest counts outage notices. Starts
    /// reachable: readiness must not fail before the first broker contact.
    broker: AtomicU64,
    /// Starts false: not ready until the assigned partitions' state is restored.
    ready: AtomicBool,
    /// The input record the loop waits to read (its schema unreadable), for readiness.
    waiting_record: std::sync::Mutex<Option<String>>,
    /// Set once; the first reason wins and the process stays unhealthy until restarted.
    fatal: OnceLock<String>,
    /// When the processing loop last turned, in milliseconds since `started`.
    last_turn_ms: AtomicU64,
    /// Waits on the broker under way: a loop held up by the broker is not stuck.
    broker_waits: AtomicUsize,
    /// Microseconds the loop has spent waiting on the broker, in all: the rest of a batch's
    /// time is Sluice's own.
    broker_waited_us: AtomicU64,
    /// How long the loop may go without turning, outside broker waits, before liveness fails.
    stuck_after_ms: AtomicU64,
    started: tokio::time::Instant,
    registry: Registry,
    descriptors: Vec<MetricDescriptor>,
    broker_reachable: PlainGauge,
    ready_gauge: PlainGauge,
    forwarded: Counter,
    forwarded_duplicates: Counter,
    records_in: Counter,
    records_out: Counter,
    events: Counter,
    sla_breaches: Counter,
    dead_letters: Counter,
    batch_seconds: PlainSeconds,
    record_seconds: PlainSeconds,
    record_busy_seconds: PlainSeconds,
    commit_seconds: PlainSeconds,
    consumer_lag: Gauge,
    timers_pending: PlainGauge,
    timer_lateness: PlainSeconds,
    effects_in_flight: UpDown,
    effects: Counter,
    trigger_seconds: Seconds,
    circuit_open: Gauge,
    restore_records: Gauge,
    restore_remaining: Gauge,
    restore_seconds: SecondsGauge,
    peer_clock_ahead: SecondsGauge,
    clock_steps: Counter,
    clock_behind_inputs: PlainSecondsGauge,
    expiries_held: PlainGauge,
    state_bytes: Gauge,
    state_reads: Counter,
    partitions_owned: PlainGauge,
    rebalances: Counter,
}

impl Telemetry {
    /// A fresh registry with every Sluice metric registered (so each appears in `/metrics`
    /// from the first scrape, at zero), healthy and not yet ready. Long as a list is long: one
    /// registration per metric, clearest all in one place.
    pub fn new() -> Arc<Telemetry> {
        Telemetry::with_meter(opentelemetry::global::meter("sluice"))
    }

    /// [`Telemetry::new`] recording its OpenTelemetry side with `meter`.
    pub fn with_meter(meter: Meter) -> Arc<Telemetry> {
        let mut r = Registrar::new(meter);
        let records_in = r.counter("records_in", "Records consumed, by topic");
        let records_out = r.counter("records_out", "Records produced, by topic");
        let events = r.counter("events", "Lifecycle events published, by type");
        let sla_breaches = r.counter(
            "sla_breaches",
            "SLA breaches published, by type, pipeline and its owner (one series per pipeline that breached: for alert routing by owner)",
        );
        let dead_letters = r.counter(
            "dead_letters",
            "Records that could not be processed and went to the dead-letter topic, by input topic and reason",
        );
        let batch_seconds = r.plain_seconds("batch", "Time to process one batch of records or due timers");
        let record_seconds = r.plain_seconds(
            "record",
            "Per input record: from its delivery to the loop until its batch's outputs were acknowledged and its state written",
        );
        let record_busy_seconds = r.plain_seconds(
            "record_busy",
            "Per input record: the time Sluice itself spent on it (its batch's time outside waits on the broker, shared among the batch's records)",
        );
        let commit_seconds = r.plain_seconds(
            "commit",
            "Time from producing a batch's outputs to their acknowledgement (under exactly-once, to the transaction's commit)",
        );
        let consumer_lag = r.gauge(
            "consumer_lag",
            "Input records not yet consumed, by topic and owned partition (from the client's statistics)",
        );
        let timers_pending = r.plain_gauge("timers_pending", "Durable timers scheduled in the owned partitions");
        let timer_lateness = r.plain_seconds(
            "timer_lateness",
            "How long after its due time a timer fired (a restore or a busy loop makes it late)",
        );
        let effects_in_flight = r.up_down(
            "effects_in_flight",
            "Side effects (job triggers, HTTP calls) currently running",
        );
        let effects = r.counter("effects", "Side effects completed, by job type and outcome");
        let trigger_seconds = r.seconds(
            "trigger",
            "Time from a side effect's start to its outcome (retries included), by job type",
        );
        let circuit_open = r.gauge(
            "circuit_open",
            "1 while calls to a target are refused after failures in a row, 0 once it answers again, by target",
        );
        let restore_records = r.gauge(
            "restore_records",
            "Changelog records replayed by the latest state restore, by partition",
        );
        let restore_remaining = r.gauge(
            "restore_records_remaining",
            "Changelog records the state restore under way has still to replay, by partition (0 when done)",
        );
        let restore_seconds = r.seconds_gauge("restore", "Time spent by the latest state restore, by partition");
        let peer_clock_ahead = r.seconds_gauge(
            "peer_clock_ahead",
            "How far another instance's clock is at least ahead of this one's (its latest directory record's time, less this clock's when it was read; 0 if not ahead), by the other instance (peer)",
        );
        let clock_steps = r.counter(
            "clock_steps",
            "Steps of this processor's clock of more than 2 minutes (against a monotonic clock), by direction (forward, back): a forward step holds retention expiry for an hour",
        );
        let clock_behind_inputs = r.plain_seconds_gauge(
            "clock_behind_inputs",
            "How far this processor's clock runs behind the times its producers stamp sensor records with (the median of the recent ones), when more than the allowed skew; 0 otherwise. Readings stamped that far in the future are accepted meanwhile (at most 1 h more)",
        );
        let expiries_held = r.plain_gauge(
            "expiries_held",
            "Retention expiries due but held after a forward step of the clock (they fire an hour after it)",
        );
        let state_bytes = r.gauge(
            "state_bytes",
            "Estimated live size of an owned partition's state store on disk, by partition",
        );
        let state_reads = r.counter(
            "state_reads",
            "Pipeline states read for a decision, by how: served from the store's cache of decoded states (cache), or decoded from their parts in RocksDB at a cost that follows the pipeline's history (decoded; raise --state-cache-mb when these are many)",
        );
        let partitions_owned = r.plain_gauge("partitions_owned", "Input partitions assigned to this instance");
        let rebalances = r.counter(
            "rebalances",
            "Partition assignments and revocations this instance went through, by kind",
        );
        let broker_reachable = r.plain_gauge(
            "broker_reachable",
            "1 while the brokers answer and take the processor's records, 0 while they do not (readiness fails meanwhile; liveness does not)",
        );
        broker_reachable.set(1);
        let ready_gauge = r.plain_gauge(
            "ready",
            "1 while the owned partitions are restored, the brokers reachable and no fatal error has happened (what /readyz answers 200 to, but for a stuck loop, which /healthz reports), else 0",
        );
        let forwarded = r.counter(
            "forwarded_records",
            "Records read on another partition than their key's and forwarded to it, by topic (their producers partition with another hash than murmur2)",
        );
        let forwarded_duplicates = r.counter(
            "forwarded_duplicates",
            "Forwarded copies that arrived again (forwarded anew after a crash) and changed nothing, by topic",
        );
        let build_info = r.gauge("build_info", "Always 1; the labels say which build runs");
        build_info.set(vec![("version", env!("CARGO_PKG_VERSION").to_string())], 1);
        r.process_observers();
        Arc::new(Telemetry {
            broker: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            waiting_record: std::sync::Mutex::new(None),
            fatal: OnceLock::new(),
            last_turn_ms: AtomicU64::new(0),
            broker_waits: AtomicUsize::new(0),
            broker_waited_us: AtomicU64::new(0),
            stuck_after_ms: AtomicU64::new(DEFAULT_STUCK_AFTER.as_millis() as u64),
            started: tokio::time::Instant::now(),
            registry: r.registry,
            descriptors: r.descriptors,
            broker_reachable,
            ready_gauge,
            forwarded,
            forwarded_duplicates,
            records_in,
            records_out,
            events,
            sla_breaches,
            dead_letters,
            batch_seconds,
            record_seconds,
            record_busy_seconds,
            commit_seconds,
            consumer_lag,
            timers_pending,
            timer_lateness,
            effects_in_flight,
            effects,
            trigger_seconds,
            circuit_open,
            restore_records,
            restore_remaining,
            restore_seconds,
            peer_clock_ahead,
            clock_steps,
            clock_behind_inputs,
            expiries_held,
            state_bytes,
            state_reads,
            partitions_owned,
            rebalances,
        })
    }

    /// The broker is unreachable or producing fails: readiness fails (and
    /// `sluice_broker_reachable` is 0), liveness does not — restarting every pod would not
    /// bring a broker back, and a crash loop would outlast the incident. Said from any thread
    /// (librdkafka's own, on `AllBrokersDown`).
    pub fn broker_down(&self) {
        let before = self
            .broker
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| Some(((v >> 1) + 1) << 1 | 1))
            .expect("the update always answers");
        if before & 1 == 0 {
            self.broker_changed(false);
        }
    }

    /// Where the broker's state stands before an exchange with it: an exchange that then
    /// succeeds says the broker is back only if no outage was noticed meanwhile
    /// ([`Self::broker_ok_since`]). A produce round that was acknowledged just before a cut
    /// must not undo the cut's notice.
    pub fn broker_mark(&self) -> BrokerMark {
        BrokerMark(self.broker.load(Ordering::Acquire))
    }

    /// An exchange begun at `mark` succeeded: the broker is reachable, unless an outage was
    /// noticed since the mark (the exchange then says nothing).
    pub fn broker_ok_since(&self, mark: BrokerMark) {
        let BrokerMark(at) = mark;
        if at & 1 == 1
            && self
                .broker
                .compare_exchange(at, at & !1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.broker_changed(true);
        }
    }

    fn broker_changed(&self, ok: bool) {
        self.broker_reachable.set(i64::from(ok));
        self.show_readiness();
    }

    /// `sluice_ready` after a change of what readiness depends on.
    fn show_readiness(&self) {
        self.ready_gauge.set(i64::from(self.readiness().is_ok()));
    }

    /// How long the processing loop may go without turning before liveness fails.
    pub fn set_stuck_after(&self, after: Duration) {
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
        BrokerWait(self, tokio::time::Instant::now())
    }

    /// How long the loop has waited on the broker since it started (see [`BrokerWait`]).
    pub fn broker_waited(&self) -> Duration {
        Duration::from_micros(self.broker_waited_us.load(Ordering::Relaxed))
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
    }

    /// False from an outage notice until an exchange begun after it succeeds.
    pub fn broker_ok(&self) -> bool {
        self.broker.load(Ordering::Acquire) & 1 == 0
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        self.show_readiness();
    }

    /// Unhealthy for the rest of the process's life: the processor cannot go on, so the
    /// orchestrator should restart it. Only the first reason is kept.
    pub fn set_fatal(&self, reason: &str) {
        let _ = self.fatal.set(reason.to_owned());
        self.show_readiness();
    }

    /// Counts what a batch counted.
    pub fn tallied(&self, tallies: &Tallies) {
        for (topic, n) in &tallies.records_in {
            self.records_in(topic, *n);
        }
        for (topic, n) in &tallies.forwarded {
            self.forwarded(topic, *n);
        }
        for (topic, n) in &tallies.forwarded_duplicates {
            self.forwarded_duplicates(topic, *n);
        }
        for (topic, kind) in &tallies.dead_letters {
            self.dead_letter(topic, kind);
        }
        for late in &tallies.timers_late {
            self.timer_late(*late);
        }
        if let Some(held) = tallies.expiries_held {
            self.expiries_held(held);
        }
    }

    pub fn records_in(&self, topic: &str, n: u64) {
        self.records_in.add(topic_label(topic), n);
    }

    pub fn record_out(&self, topic: &str, n: u64) {
        self.records_out.add(topic_label(topic), n);
    }

    pub fn event(&self, kind: &str) {
        self.events.add(vec![("type", kind.to_string())], 1);
    }

    /// An SLA breach of `pipeline`, whose config names `owner` (empty: none).
    pub fn sla_breach(&self, kind: &str, pipeline: &str, owner: &str) {
        let labels = vec![
            ("type", kind.to_string()),
            ("pipeline", pipeline.to_string()),
            ("owner", owner.to_string()),
        ];
        self.sla_breaches.add(labels, 1);
    }

    pub fn forwarded(&self, topic: &str, n: u64) {
        self.forwarded.add(topic_label(topic), n);
    }

    pub fn forwarded_duplicates(&self, topic: &str, n: u64) {
        self.forwarded_duplicates.add(topic_label(topic), n);
    }

    /// A record sent to the dead-letter topic: where it came from, and the kind of reason.
    pub fn dead_letter(&self, topic: &str, reason: &str) {
        let labels = vec![("topic", topic.to_string()), ("reason", reason.to_string())];
        self.dead_letters.add(labels, 1);
    }

    pub fn batch_latency(&self, seconds: f64) {
        self.batch_seconds.observe(seconds);
    }

    /// A batch of `records` input records done: it `took` this long, `waited` of it on the
    /// broker. Observed once per record, so that a window's sum ÷ count is per record.
    pub fn records_done(&self, records: usize, took: Duration, waited: Duration) {
        let busy = took.saturating_sub(waited).as_secs_f64() / records.max(1) as f64;
        for _ in 0..records {
            self.record_seconds.observe(took.as_secs_f64());
            self.record_busy_seconds.observe(busy);
        }
    }

    pub fn commit_latency(&self, seconds: f64) {
        self.commit_seconds.observe(seconds);
    }

    /// The consumer's lag on one partition, as its client last measured it.
    pub fn consumer_lag(&self, topic: &str, partition: PartitionId, lag: i64) {
        let labels = vec![("topic", topic.to_string()), ("partition", partition.to_string())];
        self.consumer_lag.set(labels, lag);
    }

    pub fn timers_pending(&self, n: i64) {
        self.timers_pending.set(n);
    }

    /// A timer fired this long after it was due.
    pub fn timer_late(&self, seconds: f64) {
        self.timer_lateness.observe(seconds.max(0.0));
    }

    /// A trigger began (counted in `sluice_effects_in_flight` until [`Self::effect_finished`]).
    pub fn effect_started(&self) {
        self.effects_in_flight.add(1);
    }

    pub fn effect_finished(&self) {
        self.effects_in_flight.add(-1);
    }

    /// A side effect of a `job_type` job ended with `outcome` after `seconds`.
    pub fn effect_outcome(&self, job_type: &str, outcome: &str, seconds: f64) {
        let job = ("job_type", job_type.to_string());
        self.effects.add(vec![job.clone(), ("outcome", outcome.to_string())], 1);
        self.trigger_seconds.observe(vec![job], seconds);
    }

    /// Whether calls to `target` are refused (its circuit is open).
    pub fn circuit(&self, target: &str, open: bool) {
        self.circuit_open
            .set(vec![("target", target.to_string())], i64::from(open));
    }

    /// Progress of the partition's state restore so far (records replayed, records still to
    /// replay, seconds spent); called repeatedly while restoring, the last call leaves the
    /// totals.
    pub fn restore_progress(&self, partition: PartitionId, records: u64, remaining: u64, seconds: f64) {
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.restore_records.set(partition_label(partition), as_i64(records));
        self.restore_remaining
            .set(partition_label(partition), as_i64(remaining));
        self.restore_seconds.set(partition_label(partition), seconds);
    }

    /// This processor's clock stepped by `seconds` (forward > 0).
    pub fn clock_stepped(&self, seconds: f64) {
        let direction = if seconds > 0.0 { "forward" } else { "back" };
        self.clock_steps.add(vec![("direction", direction.to_string())], 1);
    }

    /// How far this processor's clock runs behind its inputs' stamps (0: not behind).
    pub fn clock_behind_inputs(&self, seconds: f64) {
        self.clock_behind_inputs.set(seconds.max(0.0));
    }

    /// Retention expiries held after a forward step of the clock.
    pub fn expiries_held(&self, n: i64) {
        self.expiries_held.set(n);
    }

    /// Another instance's clock is at least `seconds` ahead of this one's.
    pub fn peer_clock_ahead(&self, peer: &str, seconds: f64) {
        self.peer_clock_ahead
            .set(vec![("peer", peer.to_string())], seconds.max(0.0));
    }

    /// State reads since the last call: from the cache of decoded states, read in part
    /// from their parts, or read whole.
    pub fn state_reads(&self, reads: StateReads) {
        let StateReads { cached, decoded, whole } = reads;
        for (served, n) in [("cache", cached), ("decoded", decoded), ("whole", whole)] {
            if n > 0 {
                self.state_reads.add(vec![("served", served.to_string())], n);
            }
        }
    }

    pub fn state_size(&self, partition: PartitionId, bytes: u64) {
        self.state_bytes
            .set(partition_label(partition), i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A partition let go: its series (lag per input topic, restore, state size) go too,
    /// so that dashboards and alerts do not read a former owner's last values.
    pub fn partition_revoked(&self, partition: PartitionId, topics: &[&str]) {
        for topic in topics {
            let labels = vec![("topic", topic.to_string()), ("partition", partition.to_string())];
            self.consumer_lag.forget(labels);
        }
        self.restore_records.forget(partition_label(partition));
        self.restore_remaining.forget(partition_label(partition));
        self.state_bytes.forget(partition_label(partition));
    }

    pub fn partitions_owned(&self, n: i64) {
        self.partitions_owned.set(n);
    }

    /// Partitions assigned (`kind` "assigned") or revoked ("revoked").
    pub fn rebalanced(&self, kind: &str) {
        self.rebalances.add(vec![("kind", kind.to_string())], 1);
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
        if !self.broker_ok() {
            return Err("broker unreachable".into());
        }
        if !self.ready.load(Ordering::Relaxed) {
            return Err("restoring state".into());
        }
        if let Some(record) = self.waiting_record.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Err(format!("every partition waits to read {record}"));
        }
        Ok(())
    }

    /// Names the input record the loop waits to read until the guard is dropped: readiness
    /// says which, and why, meanwhile.
    pub fn waiting_on_record(&self, record: String) -> RecordWait<'_> {
        *self.waiting_record.lock().unwrap_or_else(|e| e.into_inner()) = Some(record);
        RecordWait(self)
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

/// A record waited on ([`Telemetry::waiting_on_record`]); dropped, readiness forgets it.
pub struct RecordWait<'a>(&'a Telemetry);

impl Drop for RecordWait<'_> {
    fn drop(&mut self) {
        *self.0.waiting_record.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// A wait on the broker under way ([`Telemetry::awaiting_broker`]).
pub struct BrokerWait<'a>(&'a Telemetry, tokio::time::Instant);

/// The broker's state when an exchange with it began ([`Telemetry::broker_mark`]).
#[derive(Clone, Copy, Debug)]
pub struct BrokerMark(u64);

impl Drop for BrokerWait<'_> {
    fn drop(&mut self) {
        let waited = self.1.elapsed().as_micros().try_into().unwrap_or(u64::MAX);
        self.0.broker_waited_us.fetch_add(waited, Ordering::Relaxed);
        self.0.broker_waits.fetch_sub(1, Ordering::Relaxed);
        self.0.turned();
    }
}

fn topic_label(topic: &str) -> Labels {
    vec![("topic", topic.to_string())]
}

fn partition_label(partition: PartitionId) -> Labels {
    vec![("partition", partition.to_string())]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn readiness_names_the_record_every_partition_waits_to_read_until_it_is_read() {
        let t = Telemetry::new();
        t.set_ready(true);
        assert_eq!(t.readiness(), Ok(()));
        let wait = t.waiting_on_record("sluice.sensors/2@17 (refused)".into());
        assert_eq!(
            t.readiness(),
            Err("every partition waits to read sluice.sensors/2@17 (refused)".to_string())
        );
        assert_eq!(t.liveness(), Ok(()), "alive: a restart would not mend it");
        drop(wait);
        assert_eq!(t.readiness(), Ok(()));
    }

    #[test]
    fn an_exchange_begun_before_an_outage_notice_does_not_say_the_broker_is_back() {
        let t = Telemetry::new();
        t.set_ready(true);
        // A produce round is under way when librdkafka says every broker is down; its
        // acknowledgements (from before the cut) arrive after the notice.
        let round = t.broker_mark();
        t.broker_down();
        t.broker_ok_since(round);
        assert_eq!(t.readiness(), Err("broker unreachable".to_string()));
        assert!(t.encode_text().contains("sluice_broker_reachable 0"));

        // An exchange begun after the notice that succeeds brings it back; a second notice
        // while it runs would again win.
        let probe = t.broker_mark();
        t.broker_down();
        t.broker_ok_since(probe);
        assert!(!t.broker_ok());
        let probe = t.broker_mark();
        t.broker_ok_since(probe);
        assert_eq!(t.readiness(), Ok(()));
        assert!(t.encode_text().contains("sluice_broker_reachable 1"));
    }

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
            t.broker_down();
            tokio::time::advance(Duration::from_secs(600)).await;
            assert_eq!(t.liveness(), Ok(()));
            assert_eq!(t.readiness(), Err("broker unreachable".to_string()));
            assert!(t.encode_text().contains("sluice_broker_reachable 0"));
        }
        // The wait's end counts as a turn.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(t.liveness(), Ok(()));
    }

    /// The value of the sample named `name` in the exposition text.
    fn sample(text: &str, name: &str) -> f64 {
        (text.lines())
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    #[tokio::test(start_paused = true)]
    async fn sluices_own_time_per_record_leaves_out_its_waits_on_the_broker() {
        let t = Telemetry::new();
        let before = t.broker_waited();
        {
            let _acknowledgements = t.awaiting_broker();
            tokio::time::advance(Duration::from_millis(30)).await;
        }
        let waited = t.broker_waited() - before;
        assert_eq!(waited, Duration::from_millis(30));
        // A batch of 4 records that took 50 ms, 30 of them waiting on the broker.
        t.records_done(4, Duration::from_millis(50), waited);
        let text = t.encode_text();
        assert_eq!(sample(&text, "sluice_record_busy_seconds_count"), 4.0);
        assert!(
            (sample(&text, "sluice_record_busy_seconds_sum") - 0.020).abs() < 1e-9,
            "{text}"
        );
        assert_eq!(sample(&text, "sluice_record_seconds_count"), 4.0);
        assert!(
            (sample(&text, "sluice_record_seconds_sum") - 0.200).abs() < 1e-9,
            "{text}"
        );
    }
}
