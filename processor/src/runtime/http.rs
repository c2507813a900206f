//! Operational HTTP endpoints beside the processor: `/healthz` (liveness), `/readyz`
//! (readiness) and `/metrics` (Prometheus, OpenMetrics text).
//!
//! The processor never talks to this server; it updates a shared [`Telemetry`] and the server
//! only reads it. Health flags are atomics and metric handles are the lock-free (or briefly
//! locked, never across an await) handles of `prometheus-client`, so recording on the hot
//! path costs an atomic add and a scrape can never stall the processor.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry, Unit};
use serde_json::json;

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
    fn add(&mut self, name: &str, help: &str, unit: Option<Unit>, metric: impl Metric) {
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
            Some(unit) => self.registry.register_with_unit(name, help, unit, metric),
            None => self.registry.register(name, help, metric),
        }
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
    /// from the first scrape, at zero), healthy and not yet ready.
    pub fn new() -> Arc<Telemetry> {
        let mut r = Registrar::default();
        let records_in = Family::<TopicLabel, Counter>::default();
        r.add("records_in", "Records consumed, by topic", None, records_in.clone());
        let records_out = Family::<TopicLabel, Counter>::default();
        r.add("records_out", "Records produced, by topic", None, records_out.clone());
        let dead_letters = Counter::default();
        r.add(
            "dead_letters",
            "Records that could not be processed and went to the dead-letter topic",
            None,
            dead_letters.clone(),
        );
        // 1 ms .. ~16 s: a batch is normally milliseconds; the tail shows broker stalls.
        let batch_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        r.add(
            "batch",
            "Time to process one batch of records or due timers",
            Some(Unit::Seconds),
            batch_seconds.clone(),
        );
        let commit_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        r.add("commit", "Time from producing a batch's outputs to their acknowledgement (under exactly-once, to the transaction's commit)", Some(Unit::Seconds), commit_seconds.clone());
        let consumer_lag = Family::<TopicPartitionLabel, Gauge>::default();
        r.add(
            "consumer_lag",
            "Input records not yet consumed, by topic and owned partition (from the client's statistics)",
            None,
            consumer_lag.clone(),
        );
        let timers_pending = Gauge::default();
        r.add(
            "timers_pending",
            "Durable timers scheduled in the owned partitions",
            None,
            timers_pending.clone(),
        );
        let effects_in_flight = Gauge::default();
        r.add(
            "effects_in_flight",
            "Side effects (job triggers, HTTP calls) currently running",
            None,
            effects_in_flight.clone(),
        );
        let effects = Family::<OutcomeLabel, Counter>::default();
        r.add("effects", "Side effects completed, by outcome", None, effects.clone());
        let restore_records = Family::<PartitionLabel, Gauge>::default();
        r.add(
            "restore_records",
            "Changelog records replayed by the latest state restore, by partition",
            None,
            restore_records.clone(),
        );
        let restore_seconds = Family::<PartitionLabel, Gauge<f64, AtomicU64>>::default();
        r.add(
            "restore",
            "Time spent by the latest state restore, by partition",
            Some(Unit::Seconds),
            restore_seconds.clone(),
        );
        let partitions_owned = Gauge::default();
        r.add(
            "partitions_owned",
            "Input partitions assigned to this instance",
            None,
            partitions_owned.clone(),
        );
        Arc::new(Telemetry {
            registry: r.registry,
            descriptors: r.descriptors,
            broker_ok: AtomicBool::new(true),
            ready: AtomicBool::new(false),
            fatal: OnceLock::new(),
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

    /// False while the broker is unreachable or producing fails; liveness and readiness fail.
    pub fn set_broker_ok(&self, ok: bool) {
        self.broker_ok.store(ok, Ordering::Relaxed);
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

    /// Liveness: `Err(reason)` when restarting the process could help.
    fn liveness(&self) -> Result<(), String> {
        if let Some(reason) = self.fatal.get() {
            return Err(reason.clone());
        }
        if !self.broker_ok.load(Ordering::Relaxed) {
            return Err("broker unreachable".into());
        }
        Ok(())
    }

    /// Readiness: live, and the owned partitions' state is restored.
    fn readiness(&self) -> Result<(), String> {
        self.liveness()?;
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
    fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &self.registry)?;
        Ok(body)
    }
}

fn topic_label(topic: &str) -> TopicLabel {
    TopicLabel {
        topic: topic.to_owned(),
    }
}

/// The probes, open to every caller (orchestrators have no token).
pub fn probes(telemetry: Arc<Telemetry>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(telemetry)
}

/// `/metrics`, which `sluice run` serves behind the API's access rule, beside the pipeline
/// API ([`super::api::routes`]).
pub fn metrics_route(telemetry: Arc<Telemetry>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(telemetry)
}

/// Serves `app` on `listener` until `shutdown` completes, then finishes the requests in flight
/// and returns. The caller binds the listener, so a bad address fails at startup and tests can
/// bind port 0.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving the operational endpoints")
}

async fn healthz(State(telemetry): State<Arc<Telemetry>>) -> Response {
    probe(telemetry.liveness(), "unhealthy")
}

async fn readyz(State(telemetry): State<Arc<Telemetry>>) -> Response {
    probe(telemetry.readiness(), "not ready")
}

/// 200 `{"status":"ok"}`, or 503 with the status and the reason, as JSON.
fn probe(result: Result<(), String>, failed: &str) -> Response {
    let (status, body) = match result {
        Ok(()) => (StatusCode::OK, json!({"status": "ok"})),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": failed, "reason": reason}),
        ),
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn metrics(State(telemetry): State<Arc<Telemetry>>) -> Response {
    match telemetry.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    /// A server on a real loopback port; it accepts as soon as the listener is bound.
    struct Server {
        telemetry: Arc<Telemetry>,
        base: String,
        client: reqwest::Client,
        stop: oneshot::Sender<()>,
        task: JoinHandle<Result<()>>,
    }

    async fn start() -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let telemetry = Telemetry::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let app = probes(telemetry.clone()).merge(metrics_route(telemetry.clone()));
        let task = tokio::spawn(serve(listener, app, async {
            let _ = stopped.await;
        }));
        // No proxy: an http_proxy in the environment must not intercept loopback requests.
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        Server {
            telemetry,
            base,
            client,
            stop,
            task,
        }
    }

    impl Server {
        async fn get(&self, path: &str) -> (u16, Option<String>, String) {
            let response = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned());
            (status, content_type, response.text().await.unwrap())
        }

        async fn get_json(&self, path: &str) -> (u16, Value) {
            let (status, content_type, body) = self.get(path).await;
            assert_eq!(content_type.as_deref(), Some("application/json"));
            (status, serde_json::from_str(&body).unwrap())
        }

        async fn stop(self) {
            self.stop.send(()).unwrap();
            self.task.await.unwrap().unwrap();
        }
    }

    /// The sample line for `name` (with its labels), e.g. `sluice_dead_letters_total`.
    fn sample<'a>(exposition: &'a str, series: &str) -> Option<&'a str> {
        exposition
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
    }

    #[tokio::test]
    async fn healthz_follows_broker_and_fatal() {
        let server = start().await;
        assert_eq!(server.get_json("/healthz").await, (200, json!({"status": "ok"})));

        server.telemetry.set_broker_ok(false);
        assert_eq!(
            server.get_json("/healthz").await,
            (503, json!({"status": "unhealthy", "reason": "broker unreachable"}))
        );

        server.telemetry.set_broker_ok(true);
        assert_eq!(server.get_json("/healthz").await.0, 200);

        server.telemetry.set_fatal("state store corrupt");
        server.telemetry.set_fatal("a later reason");
        assert_eq!(
            server.get_json("/healthz").await,
            (503, json!({"status": "unhealthy", "reason": "state store corrupt"}))
        );
        // Fatal is forever: a healthy broker does not bring it back.
        server.telemetry.set_broker_ok(true);
        assert_eq!(server.get_json("/healthz").await.0, 503);
        server.stop().await;
    }

    #[tokio::test]
    async fn readyz_needs_restored_state_and_health() {
        let server = start().await;
        assert_eq!(
            server.get_json("/readyz").await,
            (503, json!({"status": "not ready", "reason": "restoring state"}))
        );

        server.telemetry.set_ready(true);
        assert_eq!(server.get_json("/readyz").await, (200, json!({"status": "ok"})));

        server.telemetry.set_broker_ok(false);
        assert_eq!(
            server.get_json("/readyz").await,
            (503, json!({"status": "not ready", "reason": "broker unreachable"}))
        );

        server.telemetry.set_broker_ok(true);
        server.telemetry.set_fatal("changelog topic missing");
        assert_eq!(
            server.get_json("/readyz").await,
            (503, json!({"status": "not ready", "reason": "changelog topic missing"}))
        );
        server.stop().await;
    }

    #[tokio::test]
    async fn metrics_expose_recorded_values() {
        let server = start().await;
        let t = &server.telemetry;
        t.record_in("sluice.sensors");
        t.record_in("sluice.sensors");
        t.record_in("sluice.jobs");
        t.record_out("sluice.events", 5);
        t.record_out("sluice.events", 2);
        t.dead_letter();
        t.batch_latency(0.003);
        t.commit_latency(0.02);
        t.consumer_lag("sluice.sensors", 2, 130);
        t.consumer_lag("sluice.sensors", 2, 120);
        t.timers_pending(42);
        for _ in 0..4 {
            t.effect_started();
        }
        t.effect_finished();
        t.effect_outcome("succeeded");
        t.effect_outcome("succeeded");
        t.restore_progress(7, 1500, 2.5);
        t.partitions_owned(4);

        let (status, content_type, body) = server.get("/metrics").await;
        assert_eq!(status, 200);
        assert_eq!(content_type.as_deref(), Some(METRICS_CONTENT_TYPE));
        let expect = [
            (r#"sluice_records_in_total{topic="sluice.sensors"}"#, "2"),
            (r#"sluice_records_in_total{topic="sluice.jobs"}"#, "1"),
            (r#"sluice_records_out_total{topic="sluice.events"}"#, "7"),
            ("sluice_dead_letters_total", "1"),
            ("sluice_batch_seconds_count", "1"),
            (r#"sluice_batch_seconds_bucket{le="0.004"}"#, "1"),
            (r#"sluice_batch_seconds_bucket{le="0.002"}"#, "0"),
            (r#"sluice_commit_seconds_bucket{le="0.032"}"#, "1"),
            (r#"sluice_commit_seconds_bucket{le="0.016"}"#, "0"),
            (r#"sluice_consumer_lag{topic="sluice.sensors",partition="2"}"#, "120"),
            ("sluice_timers_pending", "42"),
            ("sluice_effects_in_flight", "3"),
            (r#"sluice_effects_total{outcome="succeeded"}"#, "2"),
            (r#"sluice_restore_records{partition="7"}"#, "1500"),
            (r#"sluice_restore_seconds{partition="7"}"#, "2.5"),
            ("sluice_partitions_owned", "4"),
        ];
        for (series, value) in expect {
            assert_eq!(sample(&body, series), Some(value), "{series} in:\n{body}");
        }
        assert!(body.ends_with("# EOF\n"), "{body}");

        // A counter moved after a scrape shows its new value on the next one.
        t.dead_letter();
        let (_, _, body) = server.get("/metrics").await;
        assert_eq!(sample(&body, "sluice_dead_letters_total"), Some("2"));
        server.stop().await;
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_are_rejected() {
        let server = start().await;
        assert_eq!(server.get("/nope").await.0, 404);
        let response = server
            .client
            .post(format!("{}/healthz", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 405);
        server.stop().await;
    }

    #[tokio::test]
    async fn serve_returns_after_shutdown() {
        let server = start().await;
        assert_eq!(server.get("/healthz").await.0, 200);
        // Returns Ok even with the client's keep-alive connection still open.
        server.stop().await;
    }
}
