//! The forwarding loop of every `sluice alerts` command: one consumer per target, so a target
//! that is down or refusing holds up only its own alerts. Each target reads the events topic
//! in its own consumer group, delivers in partition order (a pipeline's events are in one
//! partition, so they arrive in order) and commits an event only once it is delivered or
//! dead-lettered. An event the target refuses (a 400), or keeps failing past
//! `--give-up-after`, goes to the dead-letter topic with the reason and the rest go on.
//!
//! `--http` serves `/healthz`, `/readyz` (every target running) and `/metrics`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message};
use rocksdb::DB;
use tokio::sync::watch;
use tracing::{info, warn};

use super::routes::Owners;
use super::{deliver, Delivery, Settings, Sink, Start};
use crate::core::events::Event;
use crate::core::partitioning::PartitionId;
use crate::core::task::dead_letter;
use crate::runtime::backoff::Backoff;
use crate::runtime::codec::{Codec, Family};
use crate::runtime::instruments::{Counter, Gauge, Registrar};
use crate::runtime::kafka::{self, Connection, Producer};
use crate::runtime::processor::shutdown_signal;
use crate::runtime::telemetry::METRICS_CONTENT_TYPE;
use crate::runtime::topics::Topics;

/// A dead letter must fit the broker's default record size.
const DEAD_LETTER_LIMIT: usize = 1_000_000;
/// How often each target's lag (events not yet delivered) is measured.
const LAG_EVERY: Duration = Duration::from_secs(15);
/// How often the pipelines' owners are read again from the config topic.
const OWNERS_EVERY: Duration = Duration::from_secs(30);

/// Decides whether a target gets an event.
pub type Wants = Box<dyn Fn(&Event) -> bool + Send + Sync>;

/// One place events go.
pub struct Target {
    pub name: String,
    pub sink: Sink,
    pub wants: Wants,
    pub group: String,
    pub state_dir: PathBuf,
}

/// The forwarder's metrics, labelled by target.
struct Metrics {
    registrar: Registrar,
    delivered: Counter,
    failed: Counter,
    dead_lettered: Counter,
    lag: Gauge,
    up: Gauge,
    /// Why each stopped target stopped (readiness names them).
    stopped: Mutex<HashMap<String, String>>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registrar::new(opentelemetry::global::meter("sluice-alerts"));
        Metrics {
            delivered: r.counter("alerts_delivered", "Events the target took, by target"),
            failed: r.counter(
                "alerts_failed_attempts",
                "Deliveries the target failed or refused (each attempt), by target",
            ),
            dead_lettered: r.counter(
                "alerts_dead_lettered",
                "Events written to the dead-letter topic instead of the target, by target and reason (refused, gave_up)",
            ),
            lag: r.gauge(
                "alerts_lag",
                "Events in the events topic the target's consumer group has not yet handled",
            ),
            up: r.gauge(
                "alerts_target_up",
                "1 while the target's forwarder runs, 0 once it stopped on an error that needs a person",
            ),
            stopped: Mutex::default(),
            registrar: r,
        }
    }

    fn target(name: &str) -> Vec<(&'static str, String)> {
        vec![("target", name.to_string())]
    }

    fn readiness(&self) -> Result<(), String> {
        let stopped = self.stopped.lock().expect("not poisoned");
        if stopped.is_empty() {
            return Ok(());
        }
        let mut why: Vec<String> = stopped.iter().map(|(t, e)| format!("{t}: {e}")).collect();
        why.sort();
        Err(format!("targets stopped: {}", why.join("; ")))
    }
}

/// Forwards to every target until a shutdown signal; fails only when every target stopped.
pub async fn run(
    kafka: &Connection,
    topics: &Topics,
    codec: &Codec,
    targets: Vec<Target>,
    settings: &Settings,
    owners: Option<Arc<OwnersBook>>,
) -> Result<()> {
    let metrics = Arc::new(Metrics::new());
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    if let Some(address) = settings.http {
        serve(address, metrics.clone()).await?;
    }
    if let Some(owners) = &owners {
        follow_owners(kafka, &topics.config, owners.clone(), stop.clone()).await?;
    }
    let producer = kafka::producer(kafka)?;
    let mut tasks = tokio::task::JoinSet::new();
    let count = targets.len();
    for target in targets {
        let forwarder = Forwarder {
            consumer: consumer(kafka, topics, &target.group, settings.from)?,
            state: open_state(&target.state_dir)?,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .context("building the HTTP client")?,
            codec: codec.clone(),
            producer: producer.clone(),
            dlq: topics.dlq.clone(),
            events: topics.events.clone(),
            metrics: metrics.clone(),
            give_up_after: settings.give_up_after,
            target,
        };
        metrics.up.set(Metrics::target(&forwarder.target.name), 1);
        info!(topic = %topics.events, target = %forwarder.target.name, group = %forwarder.target.group, "sending alerts");
        let stop = stop.clone();
        tasks.spawn(async move { forwarder.run(stop).await });
    }
    let mut failures = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.context("an alert forwarder panicked")? {
            failures.push(e);
        }
    }
    match failures.len() {
        0 => Ok(()),
        // One target's lone error is the command's error (a single-sink command exits on it).
        1 if count == 1 => Err(failures.remove(0)),
        _ => Err(anyhow::anyhow!(
            "every target stopped: {}",
            failures.iter().map(|e| format!("{e:#}")).collect::<Vec<_>>().join("; ")
        )),
    }
}

fn consumer(kafka: &Connection, topics: &Topics, group: &str, from: Start) -> Result<StreamConsumer<kafka::Plain>> {
    let consumer: StreamConsumer<kafka::Plain> = kafka
        .consumer(
            kafka
                .config(kafka::Role::Consumer)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .set(
                    "auto.offset.reset",
                    match from {
                        Start::Beginning => "earliest",
                        Start::End => "latest",
                    },
                ),
        )
        .context("creating the events consumer")?;
    kafka::partition_counts(consumer.client(), &[topics.events.as_str()])?;
    consumer
        .subscribe(&[topics.events.as_str()])
        .context("subscribing to the events topic")?;
    Ok(consumer)
}

fn open_state(dir: &PathBuf) -> Result<DB> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating the alert state folder {}", dir.display()))?;
    DB::open_default(dir).with_context(|| format!("opening the alert state in {}", dir.display()))
}

struct Forwarder {
    target: Target,
    consumer: StreamConsumer<kafka::Plain>,
    state: DB,
    client: reqwest::Client,
    codec: Codec,
    producer: Producer,
    dlq: String,
    events: String,
    metrics: Arc<Metrics>,
    give_up_after: Duration,
}

impl Forwarder {
    async fn run(self, mut stop: watch::Receiver<bool>) -> Result<()> {
        let name = self.target.name.clone();
        let result = self.forward(&mut stop).await;
        if let Err(e) = &result {
            warn!(target = %name, error = format!("{e:#}"), "the target's forwarder stopped");
            self.metrics.up.set(Metrics::target(&name), 0);
            let mut stopped = self.metrics.stopped.lock().expect("not poisoned");
            stopped.insert(name, format!("{e:#}"));
        }
        // Leave with the offsets of what was delivered committed, and leave the group at
        // once (on drop) so a restart takes the partitions back without a wait.
        let _ = self.consumer.commit_consumer_state(CommitMode::Sync);
        result
    }

    async fn forward(&self, stop: &mut watch::Receiver<bool>) -> Result<()> {
        // Measured after the first event, then every LAG_EVERY.
        let mut lag_at = Instant::now().checked_sub(LAG_EVERY).unwrap_or_else(Instant::now);
        loop {
            let message = tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ok(()),
                m = self.consumer.recv() => m.context("reading events")?,
            };
            let Some(event) = self.decode(&message, stop).await else {
                return Ok(());
            };
            if let Some(event) = event.filter(|e| (self.target.wants)(e)) {
                let give_up_at = Instant::now() + self.give_up_after;
                match deliver(&self.client, &self.target.sink, &self.state, &event, give_up_at, stop).await? {
                    Delivery::Delivered => self.metrics.delivered.add(Metrics::target(&self.target.name), 1),
                    Delivery::Suppressed => {}
                    Delivery::Stopped => return Ok(()),
                    Delivery::Refused { reason, failures } => {
                        self.metrics.failed.add(Metrics::target(&self.target.name), failures);
                        if !self.dead_letter(&message, &reason, "refused", stop).await {
                            return Ok(());
                        }
                    }
                    Delivery::GaveUp { reason, failures } => {
                        self.metrics.failed.add(Metrics::target(&self.target.name), failures);
                        if !self.dead_letter(&message, &reason, "gave_up", stop).await {
                            return Ok(());
                        }
                    }
                }
            }
            self.consumer
                .commit_message(&message, CommitMode::Async)
                .with_context(|| format!("committing {}", at(&message)))?;
            if lag_at.elapsed() >= LAG_EVERY {
                lag_at = Instant::now();
                self.measure_lag();
            }
        }
    }

    /// The event of `message`; `Some(None)` for one to pass over (no payload, not an event),
    /// `None` when stopped while the schema registry was away.
    async fn decode(&self, message: &BorrowedMessage<'_>, stop: &mut watch::Receiver<bool>) -> Option<Option<Event>> {
        let payload = message.payload()?;
        let mut backoff = Backoff::outage();
        loop {
            match self.codec.decode(Family::Events, payload).await {
                Ok(json) => return Some(serde_json::from_slice::<Event>(&json).ok()),
                // Not the event's fault (the schema registry is down or refuses the
                // credentials): wait for it rather than lose an alert.
                Err(e) if !e.blames_record() => {
                    warn!(at = %at(message), error = %e, "the schema registry cannot answer for an event; retrying");
                    tokio::select! {
                        // Uncommitted: the event is read again on restart.
                        _ = stop.wait_for(|s| *s) => return None,
                        _ = backoff.wait() => {}
                    }
                }
                Err(e) => {
                    warn!(at = %at(message), error = %e, "skipping an undecodable event");
                    return Some(None);
                }
            }
        }
    }

    /// The event, as it was, to the dead-letter topic with why the target did not take it,
    /// retried while the broker is away; false when stopped first (the event then stays
    /// uncommitted, and is handled again on restart). `kind` labels the metric: `refused` or
    /// `gave_up`.
    async fn dead_letter(
        &self,
        message: &BorrowedMessage<'_>,
        reason: &str,
        kind: &str,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let name = &self.target.name;
        let reason = format!("alert target {name}: {reason}");
        let mut letter = dead_letter(&self.dlq, &message.detach(), &reason, DEAD_LETTER_LIMIT);
        letter.headers.push(("alert.target".into(), name.as_bytes().to_vec()));
        let headers: Vec<(&str, &[u8])> = letter.headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
        let mut backoff = Backoff::outage();
        loop {
            let send = kafka::send(
                &self.producer,
                &letter.topic,
                letter.key.as_deref(),
                letter.value.as_deref(),
                &headers,
            );
            let sent = tokio::select! {
                _ = stop.wait_for(|s| *s) => return false,
                sent = send => sent,
            };
            match sent {
                Ok(_) => break,
                Err(e) => {
                    warn!(target = %name, error = %e, "writing an alert's dead letter failed; retrying");
                    tokio::select! {
                        _ = stop.wait_for(|s| *s) => return false,
                        _ = backoff.wait() => {}
                    }
                }
            }
        }
        let mut labels = Metrics::target(name);
        labels.push(("reason", kind.to_string()));
        self.metrics.dead_lettered.add(labels, 1);
        warn!(target = %name, %reason, at = %at(message), "not delivered: dead-lettered");
        true
    }

    /// Events of the assigned partitions not yet handled: the high watermark less the
    /// position. Blocking broker calls, a few a minute.
    fn measure_lag(&self) {
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        let mut lag = 0i64;
        for element in assignment.elements() {
            let partition = element.partition();
            let high = tokio::task::block_in_place(|| {
                self.consumer
                    .fetch_watermarks(&self.events, partition, Duration::from_secs(5))
                    .map(|(_, high)| high)
            });
            let position = positions
                .find_partition(&self.events, partition)
                .and_then(|p| p.offset().to_raw())
                .filter(|o| *o >= 0);
            if let (Ok(high), Some(position)) = (high, position) {
                lag += (high - position).max(0);
            }
        }
        self.metrics.lag.set(Metrics::target(&self.target.name), lag);
    }
}

fn at(message: &BorrowedMessage<'_>) -> String {
    format!("{}/{}@{}", message.topic(), message.partition(), message.offset())
}

async fn serve(address: SocketAddr, metrics: Arc<Metrics>) -> Result<()> {
    let app = Router::new()
        .route(
            "/healthz",
            get(|| async { crate::runtime::http::probe(Ok(()), "unhealthy") }),
        )
        .route(
            "/readyz",
            get(|State(m): State<Arc<Metrics>>| async move { crate::runtime::http::probe(m.readiness(), "not ready") }),
        )
        .route("/metrics", get(encode))
        .with_state(metrics);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on --http {address}"))?;
    info!(%address, "serving /healthz, /readyz and /metrics");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "the alerts' HTTP endpoints stopped");
        }
    });
    Ok(())
}

async fn encode(State(metrics): State<Arc<Metrics>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &metrics.registrar.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The pipelines' owners, read from the config topic: before the first event is routed,
/// then every [`OWNERS_EVERY`], and at once (at most every [`OWNERS_AT_ONCE_EVERY`]) when an
/// event names a pipeline whose config was not read yet. A pipeline applied while the
/// forwarder runs is then routed by its owner from its first event, not sent to `unmatched`
/// until the next periodic read.
#[derive(Default)]
pub struct OwnersBook {
    known: RwLock<Known>,
    follower: std::sync::Mutex<Option<Follower>>,
}

/// What the config topic said so far: each pipeline's owner, and every pipeline it named
/// (with an owner or not, or deleted), whose events need no read at once.
#[derive(Default)]
struct Known {
    owners: Owners,
    seen: std::collections::HashSet<String>,
}

/// Reads the config records since the last read: (pipeline, its owner if it has one).
type ReadMore = Box<dyn FnMut() -> Result<Vec<(String, Option<String>)>> + Send>;

struct Follower {
    read_more: ReadMore,
    last: Option<std::time::Instant>,
}

/// The least time between two reads made at once for unknown pipelines: events of a
/// pipeline that never had a config (deleted before its events were routed) cost one read
/// of the config topic's tail per this, not one per event.
const OWNERS_AT_ONCE_EVERY: Duration = Duration::from_secs(2);

impl OwnersBook {
    /// The owners read so far.
    pub fn owners(&self) -> std::sync::RwLockReadGuard<'_, impl std::ops::Deref<Target = Owners>> {
        self.known.read().expect("not poisoned")
    }

    /// Before `pipeline`'s event is routed at `now`: reads the config topic at once if it
    /// never named the pipeline (and is followed, and was not read at once just now).
    pub fn look_up(&self, pipeline: &str, now: std::time::Instant) {
        if self.known.read().expect("not poisoned").seen.contains(pipeline) {
            return;
        }
        let mut follower = self.follower.lock().expect("not poisoned");
        let Some(f) = follower.as_mut() else { return };
        if f.last.is_some_and(|at| now.duration_since(at) < OWNERS_AT_ONCE_EVERY) {
            return;
        }
        f.last = Some(now);
        if let Err(e) = self.read_with(f) {
            warn!(
                error = format!("{e:#}"),
                pipeline, "reading the owner of a new pipeline failed; routing by what was read before"
            );
        }
    }

    /// Follows the config topic with `read_more`, reading once now.
    fn follow(&self, read_more: ReadMore) -> Result<()> {
        let mut follower = self.follower.lock().expect("not poisoned");
        let f = follower.insert(Follower { read_more, last: None });
        self.read_with(f)
    }

    /// Reads what the config topic holds since the last read.
    fn read_more(&self) -> Result<()> {
        match self.follower.lock().expect("not poisoned").as_mut() {
            Some(f) => self.read_with(f),
            None => Ok(()),
        }
    }

    fn read_with(&self, f: &mut Follower) -> Result<()> {
        let records = (f.read_more)()?;
        let mut known = self.known.write().expect("not poisoned");
        for (id, owner) in records {
            match owner {
                Some(owner) => known.owners.insert(id.clone(), owner),
                None => known.owners.remove(&id),
            };
            known.seen.insert(id);
        }
        Ok(())
    }
}

impl std::ops::Deref for Known {
    type Target = Owners;
    fn deref(&self) -> &Owners {
        &self.owners
    }
}

/// Follows the config topic into `book`: read before the first event is routed, then again
/// every [`OWNERS_EVERY`] from where it stopped (records since then only).
async fn follow_owners(
    kafka: &Connection,
    topic: &str,
    book: Arc<OwnersBook>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let reader = kafka::reader(kafka, "sluice-alerts-owners")?;
    let topic = topic.to_string();
    let partitions = tokio::task::block_in_place(|| kafka::partition_counts((*reader).client(), &[topic.as_str()]))?;
    let mut next: Vec<kafka::Start> = (0..partitions[0].1 as i32)
        .map(|partition| kafka::Start {
            topic: topic.clone(),
            partition: PartitionId::new(partition),
            offset: 0,
        })
        .collect();
    let read_more: ReadMore = Box::new(move || {
        let records = tokio::task::block_in_place(|| kafka::read_span(&reader, &next))?;
        let mut read = Vec::with_capacity(records.len());
        for m in &records {
            if let Some(start) = next.iter_mut().find(|s| s.partition == PartitionId::new(m.partition())) {
                start.offset = start.offset.max(m.offset() + 1);
            }
            let Some(id) = m.key().and_then(|k| std::str::from_utf8(k).ok()) else {
                continue;
            };
            let owner = m
                .payload()
                .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
                .and_then(|v| v["pipeline"]["owner"].as_str().map(str::to_string));
            read.push((id.to_string(), owner));
        }
        Ok(read)
    });
    book.follow(read_more).context("reading the pipelines' owners")?;
    info!(pipelines = book.owners().len(), "read the pipelines' owners");
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(OWNERS_EVERY) => {}
            }
            if let Err(e) = book.read_more() {
                warn!(
                    error = format!("{e:#}"),
                    "reading the pipelines' owners again failed; routing by what was read before"
                );
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Instant;

    type Records = Arc<Mutex<Vec<(String, Option<String>)>>>;

    /// A book following a config topic whose new records are `topic`'s; how many reads it made.
    fn followed(topic: &Records) -> (OwnersBook, Arc<AtomicUsize>) {
        let (book, reads) = (OwnersBook::default(), Arc::new(AtomicUsize::new(0)));
        let (pending, counted) = (topic.clone(), reads.clone());
        book.follow(Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(pending.lock().unwrap().drain(..).collect())
        }))
        .unwrap();
        (book, reads)
    }

    fn record(topic: &Records, id: &str, owner: Option<&str>) {
        topic.lock().unwrap().push((id.into(), owner.map(Into::into)));
    }

    #[test]
    fn a_new_pipelines_first_event_reads_its_owner_at_once_and_unknown_ones_cost_a_read_per_interval() {
        let topic: Records = Arc::default();
        record(&topic, "gold", Some("analytics"));
        let (book, reads) = followed(&topic);
        let owner = |id: &str| book.owners().get(id).cloned();
        assert_eq!(
            (owner("gold").as_deref(), reads.load(Ordering::SeqCst)),
            (Some("analytics"), 1)
        );
        let t0 = Instant::now();
        book.look_up("gold", t0);
        assert_eq!(reads.load(Ordering::SeqCst), 1, "a known pipeline needs no read");
        // Applied after the first read: its first event reads it.
        record(&topic, "late", Some("finance"));
        book.look_up("late", t0);
        assert_eq!(
            (owner("late").as_deref(), reads.load(Ordering::SeqCst)),
            (Some("finance"), 2)
        );
        // A pipeline the topic never names: one read per interval, not one per event.
        book.look_up("ghost", t0 + Duration::from_secs(1));
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        book.look_up("ghost", t0 + OWNERS_AT_ONCE_EVERY + Duration::from_millis(1));
        assert_eq!(reads.load(Ordering::SeqCst), 3);
        // A pipeline without an owner, or deleted, is known: no read for its events.
        record(&topic, "plain", None);
        record(&topic, "late", None);
        book.read_more().unwrap();
        book.look_up("plain", t0 + Duration::from_secs(60));
        book.look_up("late", t0 + Duration::from_secs(60));
        assert_eq!(reads.load(Ordering::SeqCst), 4);
        assert_eq!((owner("plain"), owner("late")), (None, None));
    }

    #[test]
    fn a_book_that_follows_nothing_never_reads() {
        let book = OwnersBook::default();
        book.look_up("gold", Instant::now());
        book.read_more().unwrap();
        assert!(book.owners().is_empty());
    }
}
