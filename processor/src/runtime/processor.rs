//! `sluice run`: the processing loop.
//!
//! Per batch of input records (or of due timers): decode → decide → then, in this order,
//! produce events, dead letters and the batch's changelog records and wait for their acks
//! (in one transaction with the input offsets under `--guarantee exactly-once`), write the
//! RocksDB batch (state, timers, journaled effects, the applied offset of every input
//! partition and the changelog checkpoint) atomically, commit consumer offsets, tell the read
//! models (the API's recent events and summaries, the stores' config caches), and only then
//! start the effects. After a crash, records at or below the applied offset are skipped, so
//! no input is applied twice; re-sent events carry the same id.
//!
//! A decision is applied to the batch by [`Processor::apply`], one step per part of it
//! (events, state, timers, outbound records, effects); time comes from the runtime's
//! [`Clock`].
//!
//! Errors are of two kinds ([`super::error`]). Transient ones (broker unreachable, produce
//! failing) are retried with backoff for as long as they last, with `/healthz` reporting
//! them. Fatal ones (corrupt state, a fenced producer, a broker without the transactions
//! asked for) end `run` with an error after the clients are closed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use chrono::{DateTime, Utc};
use clap::ValueEnum;
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc::{self, unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use super::api::{self, Query};
use super::backoff::Backoff;
use super::changelog;
use super::clock::{wake_in, Clock, Monotonic};
use super::codec::Codec;
use super::effects::{Executor, InFlight, Settings as EffectSettings};
use super::error as runtime_error;
use super::forwarding::{copy_headers, copy_mark, Ends, Misrouted, Warned};
use super::input::{origin_of, read_input};
use super::kafka::{self, Connection, RenewableProducer};
use super::opening::{Opened, Openings};
use super::outputs::{Before, Encoded, Encoder, Output};
use super::recent::{RecentEvents, TailReader};
use super::store::{self, PartitionStore, StoreBatch};
use super::summaries::Summaries;
use super::telemetry::Telemetry;
use super::topics::{InputTopic, Topics};
use crate::core::admission::{self, Admission};
use crate::core::apply::{self, Unfit};
use crate::core::batch::{Action, Flush, Marker};
use crate::core::changelog::{Checked, Entry, Lineage, Writer};
use crate::core::clock_watch::ClockWatch;
use crate::core::config::PipelineConfig;
use crate::core::duration::format_duration;
use crate::core::events::Event;
use crate::core::forwarding::{ForwardWindow, Forwarded};
use crate::core::handover::{self, Journaled, Reported, Settled, Step};
use crate::core::lifecycle::{Context, Decision, Effect, Input, Settings as DeciderSettings, StateChange};
use crate::core::ownership::{self, OnOpened, OnRevoked};
use crate::core::partitioning::partition_for;
use crate::core::records::{rejected_pipeline, Rejection};
use crate::core::timers::{timer_origin, TimerIndex};
use crate::core::PipelineState;

/// What a crash may cost, and what the broker must support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Guarantee {
    /// Works with any broker: state is never applied twice (the applied-offset watermark);
    /// after a crash, events of the last batch may be sent again, with the same `eventId`.
    EffectivelyOnce,
    /// One Kafka transaction per batch (events, changelog, input offsets): no event is sent
    /// twice for read_committed consumers. Needs a broker with full transaction support.
    ExactlyOnce,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub kafka: Connection,
    pub group: String,
    /// This instance's stable name: the transactional id under `exactly-once`.
    pub instance: String,
    pub guarantee: Guarantee,
    /// Static group membership (`group.instance.id`): a restarted instance takes its
    /// partitions back at once instead of waiting for the group to notice the old one died.
    pub static_member: Option<String>,
    pub topics: Topics,
    pub state_dir: PathBuf,
    /// Bytes of decoded states each partition's store keeps (`--state-cache-mb`).
    pub state_cache_bytes: usize,
    pub batch_size: usize,
    pub effects: EffectSettings,
    pub shutdown_grace: Duration,
    /// How often an idle owner reads its changelog partitions (see [`changelog::WATCH_AT_MOST`]).
    pub changelog_watch: Duration,
    pub decider: DeciderSettings,
    /// How events and outbound records are written, and input records read.
    pub codec: Codec,
    /// The decider's time and the timers' (see [`Clock`]).
    pub clock: Clock,
    /// What happens to a record on another partition than its key's.
    pub misrouted: Misrouted,
    /// How long a record waits for the schema registry before, if the registry answers
    /// otherwise, it is dead-lettered (`--record-patience`).
    pub record_patience: Duration,
}

/// Partition ownership changes, reported by librdkafka during polls.
enum Ownership {
    Assigned(Vec<i32>),
    /// `lost`: taken away, not handed over (the session expired: the process was paused or
    /// cut off for longer than `session.timeout.ms`).
    Revoked {
        partitions: Vec<i32>,
        lost: bool,
    },
}

struct RebalanceContext {
    tx: UnboundedSender<Ownership>,
    telemetry: Arc<Telemetry>,
    /// Triggers in flight: a revoked partition is let go once theirs have reported.
    in_flight: Arc<InFlight>,
    /// How long a revocation waits for them.
    grace: Duration,
    tokens: kafka::Tokens,
}

impl ClientContext for RebalanceContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _: Option<&str>) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.generate()
    }

    /// librdkafka's statistics (every `statistics.interval.ms`): the consumer lag it
    /// measures per partition, from the high watermark its fetches see.
    fn stats(&self, statistics: rdkafka::Statistics) {
        for (topic, t) in &statistics.topics {
            for p in t.partitions.values() {
                // -1: not measured (a partition not owned, or not yet fetched from).
                if p.partition >= 0 && p.consumer_lag >= 0 {
                    self.telemetry.consumer_lag(topic, p.partition, p.consumer_lag);
                }
            }
        }
    }
}

fn partitions_of(list: &TopicPartitionList) -> Vec<i32> {
    let mut ps: Vec<i32> = list.elements().iter().map(|e| e.partition()).collect();
    ps.sort_unstable();
    ps.dedup();
    ps
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let partitions = partitions_of(list);
            let lost = consumer.assignment_lost();
            // The partitions stay ours until this returns: let their in-flight triggers
            // report first, so that the next owner finds the reports on the jobs topic
            // instead of calling the targets again (a slow target delays the rebalance, for
            // at most the shutdown grace).
            let in_flight = self.in_flight.count(&partitions);
            if in_flight > 0 {
                info!(
                    in_flight,
                    ?partitions,
                    "partitions revoked: waiting for their in-flight triggers to report"
                );
                let left = tokio::task::block_in_place(|| self.in_flight.wait_for(&partitions, self.grace));
                if left > 0 {
                    // They stop retrying and say so; their next owner calls again only then,
                    // on an answer, or at the calls' deadlines.
                    let released = self.in_flight.release(&partitions);
                    warn!(left, released, ?partitions, grace = ?self.grace, "partitions let go with triggers still in flight: released");
                }
            }
            let _ = self.tx.send(Ownership::Revoked { partitions, lost });
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                let _ = self.tx.send(Ownership::Assigned(partitions_of(list)));
            }
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
            Rebalance::Revoke(_) => {}
        }
    }
}

/// What one batch has decided, not yet written anywhere.
#[derive(Default)]
struct Pending {
    /// Latest state per (partition, pipeline); `None` = deleted.
    states: HashMap<(i32, String), Option<Arc<PipelineState>>>,
    outputs: Vec<Output>,
    stores: BTreeMap<i32, StoreBatch>,
    commits: BTreeMap<(String, i32), i64>,
    /// Effects with the input partition of their pipeline.
    effects: Vec<(i32, Effect)>,
    /// Runs that ended in the batch: their calls still in flight stop trying again.
    ended_runs: Vec<String>,
    /// What the read models learn once the batch is durable (never before: a batch that
    /// fails or loses its partitions must not show in the API).
    learned: Learned,
    /// Forwarded copies applied, by (partition, topic, partition they came from), as the
    /// batch leaves them.
    windows: HashMap<(i32, String, i32), ForwardWindow>,
}

/// Where an input record is decided.
enum Route {
    /// Here: it is this partition's (or is rejected here, as bad input).
    Here,
    /// It was forwarded to its key's partition, is a copy already applied, or was rejected
    /// for a mark Sluice cannot have written: nothing more to do with it.
    Elsewhere,
}

/// Read-model updates of one batch: the API's recent events, its summaries and the stores'
/// config caches.
#[derive(Default)]
struct Learned {
    events: Vec<Event>,
    /// The owner (`pipeline.owner`, empty if none) of each event's pipeline, by pipeline.
    owners: HashMap<String, String>,
    /// Pipelines whose state changed (their summaries are stale).
    changed: HashSet<(i32, String)>,
    /// Configs the batch writes, by partition and pipeline.
    configs: HashMap<(i32, String), Arc<PipelineConfig>>,
}

/// This instance found a newer owner's fence on partitions it still held: it lost them
/// without being told (paused past its session, or replaced by a process with the same
/// `--instance`). Nothing of the batch under way was written or started; the process stops
/// rather than go on with timers, triggers and a group membership it can no longer trust,
/// and a restart restores what it owns afresh.
#[derive(Debug, thiserror::Error)]
#[error("a newer owner fenced partitions {0:?}: this instance lost them without being told (a paused process, or another process with the same --instance); it stops before anything of the batch counts")]
pub struct Zombie(pub Vec<i32>);

/// See [`Writer::went_back`].
#[derive(Debug, thiserror::Error)]
#[error("partition {0} of the changelog {1} went back below this owner's own records: the topic was recreated (or truncated) while the processor ran, and the state it held is gone from it. Stop every instance, then rebuild the state with `sluice reset --from-scratch`")]
pub struct ChangelogWentBack(pub i32, pub String);

pub struct Processor {
    settings: Settings,
    consumer: StreamConsumer<RebalanceContext>,
    producer: RenewableProducer,
    ownership: UnboundedReceiver<Ownership>,
    stores: BTreeMap<i32, PartitionStore>,
    timers: TimerIndex,
    executor: Executor,
    telemetry: Arc<Telemetry>,
    /// The decider's time.
    time: Monotonic,
    /// API questions answered since input or timers last had a turn (see [`QUERY_SHARE`]).
    answered: u32,
    /// Where the partitions that forwarded copies name end, to check their marks against.
    ends: Ends,
    last_commit: Option<TopicPartitionList>,
    /// Partition count of every input topic (checked equal at start).
    partitions: i32,
    /// Journaled triggers of opened partitions, until each is requested again or forgotten
    /// (see core::handover::Journaled).
    journaled: Journaled,
    /// What this processor has seen of its clock: steps, and its producers' stamps (see
    /// core::clock_watch), read against `started` (monotonic).
    clock_watch: ClockWatch,
    started: Instant,
    /// The allowance for readings stamped in the future, as the clock watch last judged it.
    future_allowance: chrono::TimeDelta,
    /// Retention expiries held since the clock's last forward step.
    expiries_held: i64,
    /// Per owned partition, this owner's side of the changelog: its epoch, its last batch,
    /// where its next record lands and the keys to write again (see core::changelog::Writer).
    writers: BTreeMap<i32, Writer>,
    /// Partitions assigned and being opened in the background.
    openings: Openings,
    /// Partitions given up on finding a newer owner's fence: their records are left alone
    /// until the group says who owns them.
    abandoned: BTreeSet<i32>,
    /// The highest offset of each input partition delivered since it was opened: offsets
    /// that go back mean a topic recreated under the processor (see core::admission).
    delivered: HashMap<(String, i32), i64>,
    /// Keys logged as misrouted (once each).
    warned: Warned,
    /// API questions, answered between batches (see [`api`]).
    queries: mpsc::Receiver<Query>,
    query_sender: mpsc::Sender<Query>,
    /// The owned partitions, for the instance directory.
    owned: watch::Sender<Vec<i32>>,
    /// The owned pipelines' latest events, for the API and the page.
    recent: RecentEvents,
    /// The owned pipelines' summaries, for the API's list.
    summaries: Summaries,
    /// Fills `recent` from the events topic for each opened partition; none when the events
    /// topic is not partitioned like the inputs.
    tail: Option<TailReader>,
}

/// The input topics have more partitions than when the processor started: pipelines'
/// records now land in other partitions than their state, which Sluice cannot move.
#[derive(Debug, thiserror::Error)]
#[error("partition {assigned} was assigned, but the input topics had {partitions} partitions at start: partitions were added at run time, so pipelines' records now land in other partitions than their state. Sluice does not move state between partitions: remove the added partitions (recreate the topics with {partitions}), or move to the new count as a new deployment (new topics, or `sluice reset --from-scratch` after growing the changelog and events topics alike) — see the README's \"Partitions\"")]
pub struct PartitionsAdded {
    pub partitions: i32,
    pub assigned: i32,
}

/// Checks that the input topics and the changelog have one partition count; returns it, and
/// whether the events topic has it too.
fn check_topics(consumer: &StreamConsumer<RebalanceContext>, topics: &Topics) -> Result<(i32, bool)> {
    let counts = kafka::partition_counts(consumer.client(), &topics.inputs())?;
    let partitions = kafka::check_copartitioned(&counts)?;
    let outputs = kafka::partition_counts(consumer.client(), &[&topics.events, &topics.dlq])?;
    let changelog = kafka::partition_counts(consumer.client(), &[&topics.changelog])?;
    if changelog[0].1 != partitions {
        bail!(
            "the changelog topic {} has {} partitions but the inputs have {partitions}: each input partition's state is mirrored to the changelog partition of the same number; recreate it with `sluice topics apply`",
            topics.changelog,
            changelog[0].1
        );
    }
    Ok((partitions as i32, outputs[0].1 == partitions))
}

/// The producer of the batches' outputs: idempotent, or transactional under exactly-once
/// (its transactions initialised, which fails on a broker without them).
/// An outage its client sees turns readiness off at once, though a produce round then waiting
/// ends only when the broker is back or `message.timeout.ms` runs out.
fn batch_producer(settings: &Settings, telemetry: &Arc<Telemetry>) -> Result<RenewableProducer> {
    let telemetry = telemetry.clone();
    let watch = kafka::Watch::on_brokers_down(move || telemetry.broker_down());
    match settings.guarantee {
        Guarantee::EffectivelyOnce => RenewableProducer::watched(&settings.kafka, watch),
        Guarantee::ExactlyOnce => {
            let id = format!("{}-{}", settings.group, settings.instance);
            let producer = kafka::transactional_producer(&settings.kafka, &id, &watch)?;
            tokio::task::block_in_place(|| producer.init_transactions(TRANSACTION_TIMEOUT))
                .with_context(|| format!("initialising transactions for transactional id {id} (does the broker support transactions? use --guarantee effectively-once if not)"))?;
            Ok(RenewableProducer::fixed(producer))
        }
    }
}

/// API questions answered in a row before input and due timers get their turn: a flood of
/// questions cannot hold processing back, and questions still get answers under load.
const QUERY_SHARE: u32 = 16;

/// How long a transactional call may take before it counts as failed.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

impl Processor {
    /// Connects, checks the topics and subscribes (long only for the literal of the
    /// processor's fields).
    pub fn start(settings: Settings, telemetry: Arc<Telemetry>) -> Result<Self> {
        let (tx, ownership) = unbounded_channel();
        let in_flight = Arc::new(InFlight::default());
        let (query_sender, queries) = mpsc::channel(64);
        let mut config = kafka::input_consumer_config(&settings.kafka, &settings.group);
        if let Some(id) = &settings.static_member {
            config.set("group.instance.id", id);
        }
        let consumer: StreamConsumer<RebalanceContext> = config
            .set("statistics.interval.ms", "5000")
            .create_with_context(RebalanceContext {
                tx,
                telemetry: telemetry.clone(),
                in_flight: in_flight.clone(),
                grace: settings.shutdown_grace,
                tokens: settings.kafka.tokens(),
            })
            .context("creating Kafka consumer")?;
        settings.kafka.tokens().sign_in(consumer.client());
        let (partitions, events_copartitioned) = check_topics(&consumer, &settings.topics)?;
        // Recent events can be read back per partition only when the events topic is
        // partitioned like the inputs.
        let tail = events_copartitioned.then(|| {
            TailReader::start(
                settings.kafka.clone(),
                settings.topics.events.clone(),
                settings.codec.clone(),
            )
        });
        let inputs = settings.topics.inputs();
        consumer.subscribe(&inputs).context("subscribing to input topics")?;
        info!(partitions, group = %settings.group, brokers = %settings.kafka, guarantee = ?settings.guarantee, "subscribed to {}", inputs.join(", "));
        let producer = batch_producer(&settings, &telemetry)?;
        // Job reports, fences and acceptances are written outside the batches, so never
        // through the transactional producer: one producer (one client) for all of them.
        let control = kafka::report_producer(&settings.kafka)?;
        let executor = Executor::new(
            control.clone(),
            settings.topics.jobs.clone(),
            settings.topics.sensors.clone(),
            settings.effects.clone(),
            settings.codec.clone(),
            telemetry.clone(),
            in_flight,
            settings.clock.clone(),
        )?;
        std::fs::create_dir_all(&settings.state_dir)
            .with_context(|| format!("creating state dir {}", settings.state_dir.display()))?;
        let openings = Openings::new(settings.clone(), control, telemetry.clone());
        let time = Monotonic::new(settings.clock.clone());
        let settings_skew = settings.decider.max_clock_skew;
        Ok(Processor {
            settings,
            consumer,
            producer,
            ownership,
            stores: BTreeMap::new(),
            timers: TimerIndex::default(),
            executor,
            telemetry,
            time,
            answered: 0,
            ends: Ends::default(),
            last_commit: None,
            partitions,
            journaled: Journaled::default(),
            clock_watch: ClockWatch::default(),
            started: Instant::now(),
            future_allowance: settings_skew,
            expiries_held: 0,
            writers: BTreeMap::new(),
            openings,
            abandoned: BTreeSet::new(),
            delivered: HashMap::new(),
            warned: Warned::default(),
            queries,
            query_sender,
            owned: watch::channel(Vec::new()).0,
            recent: RecentEvents::default(),
            summaries: Summaries::default(),
            tail,
        })
    }

    /// Where the API asks its questions.
    pub fn queries(&self) -> mpsc::Sender<Query> {
        self.query_sender.clone()
    }

    /// The processor's clock (its timers', its decisions'), for the instance directory.
    pub fn clock(&self) -> Clock {
        self.settings.clock.clone()
    }

    /// The owned partitions, as they change.
    pub fn owned_partitions(&self) -> watch::Receiver<Vec<i32>> {
        self.owned.subscribe()
    }

    /// Runs until `shutdown` resolves or a fatal error, then closes cleanly either way.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        let result = self.process(shutdown).await;
        if let Err(e) = &result {
            error!("fatal: {e:#}");
            self.telemetry.set_fatal(&format!("{e:#}"));
            // Its calls stop, and say so where they can: their runs' next owner calls again
            // without waiting for their deadlines.
            self.executor.let_go().await;
        } else {
            info!("shutting down: waiting for in-flight triggers");
            self.executor.drain(self.settings.shutdown_grace).await;
        }
        self.close().await;
        info!("stopped");
        result
    }

    /// The loop: one `select!` over every source of work (shutdown, rebalances, opened
    /// partitions, API questions, input, due timers, journaled triggers, the broker probe),
    /// long because its priorities read best in one place.
    async fn process(&mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        // While the broker is flagged unreachable and nothing flows to say otherwise (an idle
        // processor receives no records), ask it for metadata now and then.
        let mut probe = tokio::time::interval(Duration::from_secs(2));
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // An idle loop turns now and then too, so that liveness tells idle from stuck.
        let mut heartbeat = tokio::time::interval(Duration::from_secs(5));
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Journaled triggers wait on facts (the jobs topic read up to its end, a release, a
        // deadline), which an idle partition reaches without a batch: look again every
        // second. An interval, not a sleep made anew each turn: the timers' wait (at most a
        // second too, and polled first) would win every turn.
        let mut resume = tokio::time::interval(Duration::from_secs(1));
        resume.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // What others wrote to the changelog since this owner's last record: a batch reads it
        // when it writes, an idle owner here (`--changelog-watch`).
        let every = self.settings.changelog_watch;
        let mut watch = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.telemetry.turned();
            self.watch_clock();
            let next_due = self.timers.next_due();
            let wait = next_due.map(|at| wake_in(self.settings.clock.now(), at));
            let timer_armed = wait.is_some();
            let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
            tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(()),
                Some(change) = self.ownership.recv() => self.on_ownership(change).await?,
                (p, result) = self.openings.next() => self.opened(p, result).await?,
                // API questions get a bounded share of the loop: after QUERY_SHARE answers in
                // a row, input and timers go first (the branch at the end lets questions in
                // again when neither has anything).
                Some(query) = self.queries.recv(), if self.answered < QUERY_SHARE => {
                    self.answered += 1;
                    self.answer(query)?
                }
                Some((p, events)) = async { self.tail.as_mut()?.loaded.recv().await } => {
                    // A partition revoked meanwhile is someone else's to show.
                    if self.stores.contains_key(&p) {
                        self.recent.backfill(events);
                    }
                }
                message = self.consumer.recv() => match message {
                    Ok(m) => {
                        // No sign the broker is back: records fetched before it went away
                        // still come from the local queue. A probe or an acknowledged batch is.
                        self.answered = 0;
                        let mut batch = vec![m.detach()];
                        while batch.len() < self.settings.batch_size {
                            match self.consumer.recv().now_or_never() {
                                Some(Ok(m)) => batch.push(m.detach()),
                                Some(Err(e)) => { self.check_fatal(&e)?; warn!(error = %e, "consumer error"); break }
                                None => break,
                            }
                        }
                        let grace = self.settings.shutdown_grace;
                        if finish(self.process_records(batch), shutdown.as_mut(), grace, "a batch").await? == Finished::Stopping {
                            return Ok(());
                        }
                    }
                    Err(e) => {
                        self.check_fatal(&e)?;
                        warn!(error = %e, "consumer error; librdkafka retries");
                        self.telemetry.broker_down();
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                },
                // Input comes first, but every input batch also fires the timers due by then
                // (see process_records): steady input cannot hold a timer back, and it costs
                // no flush of its own. This branch serves idle partitions.
                _ = sleep, if timer_armed => {
                    self.answered = 0;
                    // The wait is cut short to follow the clock: nothing may be due yet.
                    if next_due.is_some_and(|at| at > self.time.now()) {
                        continue;
                    }
                    let grace = self.settings.shutdown_grace;
                    if finish(self.fire_due_timers(), shutdown.as_mut(), grace, "due timers").await? == Finished::Stopping {
                        return Ok(());
                    }
                }
                _ = resume.tick(), if !self.journaled.is_empty() => self.resume_triggers().await?,
                _ = probe.tick(), if !self.telemetry.broker_ok() => {
                    let mark = self.telemetry.broker_mark();
                    let reachable = tokio::task::block_in_place(|| {
                        self.consumer
                            .client()
                            .fetch_metadata(Some(&self.settings.topics.events), Duration::from_secs(2))
                            .is_ok()
                    });
                    if reachable {
                        self.telemetry.broker_ok_since(mark);
                    }
                }
                _ = watch.tick(), if !self.writers.is_empty() => self.watch_changelogs().await?,
                () = std::future::ready(()), if self.answered >= QUERY_SHARE => self.answered = 0,
                _ = heartbeat.tick() => {
                    for (p, store) in &self.stores {
                        self.telemetry.state_size(*p, store.estimated_bytes());
                        let reads = store.take_state_reads();
                        self.telemetry.state_reads(reads.cached, reads.decoded);
                    }
                }
            }
        }
    }

    /// Ends the run on a client's fatal error: no retry mends one. A consumer whose static
    /// membership a newer process with the same `--instance` took (FENCED_INSTANCE_ID), or a
    /// fenced producer, would otherwise log and go on as a zombie.
    fn check_fatal(&self, e: &KafkaError) -> Result<()> {
        let fatal = (self.consumer.client().fatal_error()).or_else(|| self.producer.current().client().fatal_error());
        let fenced = e.rdkafka_error_code() == Some(RDKafkaErrorCode::FencedInstanceId);
        match (fatal, fenced) {
            (Some((code, reason)), _) => bail!("a Kafka client hit a fatal error ({code:?}: {reason}); another process may have taken this instance's identity (--instance)"),
            (None, true) => bail!("the group fenced this instance ({e}): another process joined with the same --instance"),
            (None, false) => Ok(()),
        }
    }

    /// Leaves the group and flushes, each step bounded in time: a broker that is down must
    /// not keep the process from exiting. Offsets need no final synchronous commit: a record
    /// committed late is skipped by the applied-offset watermark when it is read again.
    async fn close(self) {
        const STEP: Duration = Duration::from_secs(10);
        if let Some(list) = &self.last_commit {
            if let Err(e) = self.consumer.commit(list, CommitMode::Async) {
                warn!(error = %e, "final offset commit failed; the applied-offset watermark prevents double application");
            }
        }
        let Processor {
            consumer,
            producer,
            mut openings,
            ..
        } = self;
        openings.cancel_all();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = producer.current().flush(STEP);
            consumer.unsubscribe();
            drop(consumer);
            let _ = done_tx.send(());
        });
        if tokio::time::timeout(STEP * 2, done_rx).await.is_err() {
            warn!("the Kafka clients did not close in time (is the broker down?); exiting anyway");
        }
    }

    async fn on_ownership(&mut self, change: Ownership) -> Result<()> {
        match change {
            Ownership::Assigned(ps) => {
                self.telemetry.rebalanced("assigned");
                for p in ps {
                    self.abandoned.remove(&p);
                    self.open(p)?;
                }
                self.telemetry.set_ready(self.openings.is_empty());
            }
            Ownership::Revoked { partitions, lost } => {
                self.telemetry.rebalanced("revoked");
                // A held partition lost to a newer owner's fence makes this instance a zombie,
                // which stops (`ownership::on_revoked`). Only a lost one is worth the read.
                let fenced_since_last_write = |p: i32| lost.then(|| self.fenced_since_last_write(p)).flatten();
                let fenced: Vec<i32> = (partitions.iter().copied())
                    .filter(|p| self.stores.contains_key(p))
                    .filter(|p| ownership::on_revoked(lost, fenced_since_last_write(*p)) == OnRevoked::Zombie)
                    .collect();
                if !fenced.is_empty() {
                    for p in &fenced {
                        self.abandon(*p)?;
                    }
                    return Err(Zombie(fenced).into());
                }
                for p in partitions {
                    self.abandoned.remove(&p);
                    let paused: Vec<_> = self.openings.cancel(p).into_iter().map(|t| (t, None)).collect();
                    self.resume_input(p, &paused)?;
                    self.telemetry.partition_revoked(p, &self.settings.topics.inputs());
                    if self.close_partition(p).is_some() {
                        info!(partition = p, "partition revoked: state closed");
                    }
                }
            }
        }
        self.telemetry.partitions_owned(self.stores.len() as i64);
        self.telemetry.timers_pending(self.timers.len() as i64);
        self.owned.send_replace(self.stores.keys().copied().collect());
        Ok(())
    }

    /// Starts opening assigned partition `p` in the background. Its input is not paused
    /// here (that races librdkafka's start of the fetcher: see [`super::opening`]); what
    /// of it is delivered meanwhile is skipped, its topic-partition paused, and read again
    /// once `p` is open.
    fn open(&mut self, p: i32) -> Result<()> {
        if p >= self.partitions {
            return Err(PartitionsAdded {
                partitions: self.partitions,
                assigned: p,
            }
            .into());
        }
        if self.stores.contains_key(&p) || self.openings.contains(p) {
            return Ok(());
        }
        self.openings.start(p);
        Ok(())
    }

    /// Resumes the input topics of partition `p` paused while it was being opened, each
    /// read again from its offset when one is given.
    fn resume_input(&self, p: i32, paused: &[(String, Option<i64>)]) -> Result<()> {
        if paused.is_empty() {
            return Ok(());
        }
        let mut list = TopicPartitionList::new();
        for (topic, _) in paused {
            list.add_partition(topic, p);
        }
        tokio::task::block_in_place(|| -> Result<()> {
            self.consumer
                .resume(&list)
                .with_context(|| format!("resuming the input of partition {p}"))?;
            for (topic, offset) in paused {
                let Some(offset) = offset else { continue };
                self.consumer
                    .seek(topic, p, Offset::Offset(*offset), kafka::METADATA_TIMEOUT)
                    .with_context(|| format!("reading {topic} partition {p} again from offset {offset}"))?;
            }
            Ok(())
        })
    }

    /// Forgets an owned partition: its store (returned), timers, pending work and views.
    fn close_partition(&mut self, p: i32) -> Option<PartitionStore> {
        let store = self.stores.remove(&p)?;
        self.delivered.retain(|(_, partition), _| *partition != p);
        self.timers.drop_partition(p);
        self.writers.remove(&p);
        self.summaries.forget(p);
        self.journaled.closed(p);
        let partitions = self.partitions;
        self.recent.retain(|id| api::partition_of(id, partitions) != p);
        Some(store)
    }

    /// Gives up a partition a newer owner has fenced: this instance lost it without being
    /// told (a paused process, a network partition). Its store may hold writes that do not
    /// count, so it forgets its checkpoint and is restored in full if it comes back here.
    fn abandon(&mut self, p: i32) -> Result<()> {
        error!(partition = p, "a newer owner fenced this partition: this instance lost it without being told (a paused process?); the batch stops before its state and triggers, and the partition is left to its owner");
        if let Some(mut store) = self.close_partition(p) {
            store.disown()?;
        }
        self.abandoned.insert(p);
        self.telemetry.partitions_owned(self.stores.len() as i64);
        self.owned.send_replace(self.stores.keys().copied().collect());
        Ok(())
    }

    /// Reads what others wrote between this owner's changelog records of partition `p`, in
    /// `ranges`. Fails closed: until the records are read, nobody can tell whether they hold a
    /// newer owner's fence, so the batch waits (nothing of it is written or started). `None`:
    /// the assignment was lost meanwhile (an outage, or a pause).
    async fn read_changelog(&self, p: i32, ranges: &[std::ops::Range<i64>]) -> Option<Vec<Entry>> {
        let topic = &self.settings.topics.changelog;
        let mut backoff = Backoff::outage();
        loop {
            let read = tokio::task::block_in_place(|| changelog::read_ranges(&self.settings.kafka, topic, p, ranges));
            match read {
                Ok(entries) => return Some(entries),
                Err(_) if self.consumer.assignment_lost() => return None,
                Err(e) => {
                    warn!(partition = p, error = %format!("{e:#}"), ?ranges, "could not read another writer's changelog records: the batch waits until they are read");
                    backoff.wait().await;
                }
            }
        }
    }

    /// Answers an API question from the stores (between batches, so never half a batch).
    fn answer(&mut self, query: Query) -> Result<()> {
        api::answer(
            query,
            api::Served {
                stores: &self.stores,
                openings: &self.openings,
                summaries: &mut self.summaries,
                recent: &self.recent,
                partitions: self.partitions,
                instance: &self.settings.instance,
            },
        )
    }

    /// Installs a partition opened in the background (see [`opening`]): its store, timers
    /// and journaled triggers; then reads again what of its input was delivered meanwhile.
    async fn opened(&mut self, p: i32, result: Result<Opened, runtime_error::Error>) -> Result<()> {
        let Opened {
            store,
            restored,
            writer,
            journaled,
            jobs_end,
            timers,
            fenced,
        } = result.map_err(|e| anyhow::Error::new(e).context(format!("opening partition {p}")))?;
        let assigned = !self.consumer.assignment_lost()
            && (self.consumer.assignment().ok())
                .is_some_and(|a| a.find_partition(&self.settings.topics.jobs, p).is_some());
        let outcome = ownership::on_opened(assigned, fenced);
        if outcome != OnOpened::Install {
            let mut store = store;
            store.disown()?;
            self.abandoned.insert(p);
            // Left to the new owner, not read here; but assigned here again, it must be.
            let paused: Vec<_> = (self.openings.take_skipped(p).into_iter())
                .map(|(t, _)| (t, None))
                .collect();
            self.resume_input(p, &paused)?;
            if outcome == OnOpened::Zombie {
                return Err(Zombie(vec![p]).into());
            }
            warn!(
                partition = p,
                "partition opened after it was revoked or the assignment was lost: left to its new owner"
            );
            return Ok(());
        }
        let epoch = writer.epoch();
        self.writers.insert(p, writer);
        for t in &timers {
            self.timers.set(p, &t.pipeline, &t.kind, t.at);
        }
        let found = journaled.into_iter().map(|(_, effect)| effect);
        let left = self.journaled.found(p, found, jobs_end, self.time.now());
        for (run_id, until) in &left {
            debug!(partition = p, run_id, until = %until,
                "a journaled trigger's call may still be under way at the previous owner: it is left to it until its release, a report, or its deadline");
        }
        // One line, not one per trigger: a crash in a busy hour leaves tens of thousands.
        if let Some(latest) = left.iter().map(|(_, until)| until).max() {
            info!(partition = p, triggers = left.len(), latest = %latest,
                "journaled triggers whose calls may still be under way at the previous owner: each is left to it until its release, a report, or its deadline");
        }
        info!(
            partition = p,
            timers = timers.len(),
            restored_records = restored.records,
            restore_seconds = format!("{:.3}", restored.seconds),
            full_restore = restored.full,
            epoch,
            path = %store.path().display(),
            "partition assigned: state opened"
        );
        self.stores.insert(p, store);
        // Read afresh from the committed offsets: what comes first may be redelivered.
        self.delivered.retain(|(_, partition), _| *partition != p);
        if let Some(tail) = &self.tail {
            tail.read(p);
        }
        // Input delivered while the partition was being opened was skipped: read it again.
        let skipped: Vec<_> = (self.openings.take_skipped(p).into_iter())
            .map(|(t, o)| (t, Some(o)))
            .collect();
        self.resume_input(p, &skipped)?;
        self.telemetry.set_ready(self.openings.is_empty());
        self.telemetry.partitions_owned(self.stores.len() as i64);
        self.telemetry.timers_pending(self.timers.len() as i64);
        self.owned.send_replace(self.stores.keys().copied().collect());
        self.repair_now().await?;
        self.resume_triggers().await
    }

    /// Reads what others wrote to each owned changelog partition since this owner's last
    /// record (see [`Writer::watched`]): their keys are written again at once, and a newer
    /// owner's fence gives the partition up. A partition whose changelog cannot be read now
    /// is read at the next turn.
    async fn watch_changelogs(&mut self) -> Result<()> {
        let topic = &self.settings.topics.changelog;
        for (p, writer) in &mut self.writers {
            let from = writer.next_offset();
            let read = tokio::task::block_in_place(|| changelog::read_since(&self.settings.kafka, topic, *p, from));
            let (others, end) = match read {
                Ok(read) => read,
                Err(e) => {
                    warn!(partition = p, error = %format!("{e:#}"), "could not read the changelog to look for other writers; trying again later");
                    continue;
                }
            };
            match writer.watched(&others, end) {
                Checked::Owner { stale: 0 } => {}
                Checked::Owner { stale } => {
                    warn!(partition = p, keys = stale, "another writer (a zombie, or a crashed batch) wrote to this partition's changelog since this owner's last write: those keys are written again")
                }
                Checked::Fenced => {
                    let p = *p;
                    self.abandon(p)?;
                    return Err(Zombie(vec![p]).into());
                }
            }
        }
        self.repair_now().await
    }

    /// Writes the keys a restore named stale, or another writer wrote over, at once (a batch
    /// of repairs alone) rather than with the next input: until then compaction could remove
    /// the value such a write shadows (the changelog keeps records for `min.compaction.lag.ms`
    /// only). Found by the simulator (`sim`).
    async fn repair_now(&mut self) -> Result<()> {
        if self.writers.values().any(Writer::has_repairs) {
            self.flush(Pending::default()).await?;
        }
        Ok(())
    }

    /// Settles the journaled triggers that wait for nothing more (see
    /// [`crate::core::handover::Journaled`]): requested again (same idempotency key, a new
    /// deadline journaled first) if their run still awaits a report, forgotten otherwise. A
    /// report read meanwhile has already removed its trigger (see [`Self::decide_and_apply`]).
    async fn resume_triggers(&mut self) -> Result<()> {
        if self.journaled.is_empty() {
            return Ok(());
        }
        let now = self.time.now();
        let positions = self.consumer.position().ok();
        let (stores, jobs) = (&self.stores, &self.settings.topics.jobs);
        // Partition `p`'s jobs topic is read up to `end` when its last record below `end` was
        // applied (here or, before the hand-over, by the previous owner), or the consumer's
        // position is past it.
        let read_to = |p: i32, end: i64| {
            let applied = stores.get(&p).and_then(|s| s.applied_offset(jobs));
            let position = (positions.as_ref()).and_then(|list| list.find_partition(jobs, p)?.offset().to_raw());
            end <= 0 || applied.is_some_and(|a| a + 1 >= end) || position.is_some_and(|at| at >= end)
        };
        let steps = self.journaled.poll(now, read_to);
        // Nothing is started for a partition this instance may have lost: a process paused
        // while it opened one wakes with journaled triggers its new owner requests already.
        let lost = self.consumer.assignment_lost();
        let assignment = self.consumer.assignment().ok();
        let mut checked: BTreeMap<i32, Option<bool>> = BTreeMap::new();
        let mut again = Pending::default();
        for step in steps {
            let due = match step {
                Step::Due(due) => due,
                Step::MeasureJobsEnd { partition: p, run_id } => {
                    let topic = &self.settings.topics.jobs;
                    match tokio::task::block_in_place(|| {
                        self.consumer.fetch_watermarks(topic, p, kafka::METADATA_TIMEOUT)
                    }) {
                        Ok((_, end)) => {
                            info!(partition = p, run_id, jobs_end = end,
                                "a journaled trigger's call is past its deadline (or, with no start mark, its time to begin): reading the jobs topic up to its end before requesting it again");
                            self.journaled.measured(p, &run_id, end, now);
                        }
                        Err(e) => {
                            warn!(partition = p, error = %e, "could not read where the jobs topic ends: the journaled trigger waits")
                        }
                    }
                    continue;
                }
            };
            let p = due.partition();
            let run_id = due.request().run_id.clone();
            let (store, writers, settings) = (self.stores.get(&p), &self.writers, &self.settings);
            let assigned = !lost
                && store.is_some()
                && (assignment.as_ref()).is_some_and(|a| a.find_partition(&self.settings.topics.jobs, p).is_some());
            let settled = self.journaled.settle(
                due,
                now,
                assigned,
                || {
                    *checked
                        .entry(p)
                        .or_insert_with(|| fenced_since_last_write(writers, settings, p))
                },
                |request| -> Result<bool> {
                    let Some(store) = store else { return Ok(false) };
                    let state = store.pipeline(&request.pipeline_id)?;
                    Ok(state.is_some_and(|s| s.awaits_trigger(&request.run_id)))
                },
            )?;
            match settled {
                Settled::LeftToNewOwner => debug!(
                    partition = p,
                    run_id, "a journaled trigger of a partition no longer assigned: left to its new owner"
                ),
                // The changelog could not be read: asked again in a second, never started blind.
                Settled::Waits => {}
                Settled::Fenced => {
                    self.abandon(p)?;
                    return Err(Zombie(vec![p]).into());
                }
                Settled::Again(effect) => {
                    info!(partition = p, run_id, "a trigger requested before a restart or rebalance has no report on the jobs topic: requesting it again with the same idempotency key");
                    // Journaled with its new deadline before the call: a later owner leaves it
                    // to this one until then.
                    let effect = Box::new(with_release_key(*effect));
                    again.stores.entry(p).or_default().put_effect(&run_id, &effect)?;
                    again.effects.push((p, *effect));
                }
                Settled::Forgotten => debug!(
                    partition = p,
                    run_id,
                    "a journaled trigger is no longer awaited (its report came, or its run moved on): forgotten"
                ),
            }
        }
        if !again.effects.is_empty() {
            self.flush(again).await?;
        }
        Ok(())
    }

    /// Whether a newer owner has fenced partition `p` after this owner's last changelog
    /// record. Asked before anything is started for `p` outside a batch (a journaled
    /// trigger): a batch sees a fence among its own writes, but nothing else would.
    /// `None`: the changelog could not be read.
    fn fenced_since_last_write(&self, p: i32) -> Option<bool> {
        fenced_since_last_write(&self.writers, &self.settings, p)
    }

    /// Loads a pipeline's state: from this batch if it touched it, else from the store; and
    /// whether the store (with the batch) holds it in parts, which a write then only updates
    /// (a state not stored at all is written whole: its head too).
    fn state(&self, pending: &Pending, p: i32, pipeline: &str) -> Result<(Arc<PipelineState>, bool)> {
        if let Some(state) = pending.states.get(&(p, pipeline.to_string())) {
            return Ok(match state {
                Some(state) => (state.clone(), true),
                None => (Arc::default(), false),
            });
        }
        Ok(match self.stores[&p].stored(pipeline)? {
            Some(stored) => (stored.state, stored.in_parts),
            None => (Arc::default(), false),
        })
    }

    async fn process_records(&mut self, batch: Vec<OwnedMessage>) -> Result<()> {
        let started = Instant::now();
        let (records, waited) = (batch.len(), self.telemetry.broker_waited());
        let now = self.time.now();
        let mut pending = Pending::default();
        // A rebalance reported while this batch was gathered comes first: records of a
        // partition revoked since they were fetched belong to its new owner now.
        while let Ok(change) = self.ownership.try_recv() {
            self.on_ownership(change).await?;
        }
        self.judge_clock(&batch, now);
        self.stage_due_timers(&mut pending, now)?;
        let owned = self.consumer.assignment().context("reading the assignment")?;
        for message in &batch {
            let (topic, p, offset) = (message.topic().to_string(), message.partition(), message.offset());
            // One key per record, for the batch's commits and the offsets delivered.
            let key = (topic.clone(), p);
            let partition = admission::Partition {
                assigned: owned.find_partition(&topic, p).is_some(),
                abandoned: self.abandoned.contains(&p),
                open: self.stores.contains_key(&p),
                applied: self.stores.get(&p).and_then(|s| s.applied_offset(&topic)),
                seen_in_batch: pending.commits.get(&key).copied(),
                delivered: self.delivered.get(&key).copied(),
            };
            let admitted = admission::admit(&partition, offset);
            if partition.open && !matches!(admitted, Admission::WentBack { .. }) {
                match self.delivered.get_mut(&key) {
                    Some(delivered) => *delivered = offset,
                    None => {
                        self.delivered.insert(key.clone(), offset);
                    }
                }
            }
            if admitted.commits() {
                self.telemetry.record_in(&topic);
                pending.commits.insert(key, offset);
            }
            match admitted {
                Admission::NotAssigned => {
                    debug!(%topic, p, offset, "partition no longer assigned: left to its new owner");
                    continue;
                }
                Admission::GivenUp => {
                    debug!(%topic, p, offset, "partition given up to a newer owner: left to it");
                    continue;
                }
                Admission::ReadAgainWhenOpen => {
                    self.open(p)?;
                    // Its fetcher has started (it delivered): pausing it now is safe.
                    if self.openings.skip(&topic, p, offset) {
                        let mut list = TopicPartitionList::new();
                        list.add_partition(&topic, p);
                        (self.consumer.pause(&list))
                            .with_context(|| format!("pausing {topic} partition {p} while it is opened"))?;
                    }
                    continue;
                }
                Admission::AlreadyApplied => {
                    debug!(%topic, p, offset, "already applied: skipped");
                    continue;
                }
                // Nothing of the batch counts: its records are not committed, and on restart
                // the opening's check (InputAhead) stops it again until the state is rebuilt.
                Admission::WentBack { from } => {
                    let applied = partition.applied.unwrap_or(from);
                    bail!(
                        "partition {p} of {topic} went back from offset {from} to {offset} while it was read: the topic was recreated (or lost records) under the running processor, and its new records up to offset {applied} would be skipped as already applied. Stop every instance, then rebuild the state with `sluice reset --from-scratch`, or delete the state directories and the changelog too if the old state is not wanted"
                    );
                }
                Admission::Apply => {}
            }
            pending.stores.entry(p).or_default().set_applied_offset(&topic, offset);
            let Some(kind) = self.settings.topics.input_kind(&topic) else {
                continue;
            };
            if let Route::Elsewhere = self.route(&mut pending, kind, message, now).await? {
                continue;
            }
            let (pipeline, input) = self.read(kind, message).await;
            let origin = origin_of(kind, p, offset, &input);
            self.decide_and_apply(&mut pending, p, &pipeline, &input, &origin, now, Some(message))?;
        }
        self.flush(pending).await?;
        let took = started.elapsed();
        self.telemetry
            .records_done(records, took, self.telemetry.broker_waited() - waited);
        self.repair_now().await?;
        self.resume_triggers().await?;
        self.telemetry.batch_latency(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Forwards a record on another partition than its key's (under `--misrouted forward`;
    /// a copy that is still misrouted is rejected, as under `reject`), and passes over a
    /// forwarded copy applied before (see [`crate::core::forwarding`]). A copy whose mark
    /// Sluice cannot have written is rejected before its mark moves a window.
    async fn route(
        &mut self,
        pending: &mut Pending,
        kind: InputTopic,
        message: &OwnedMessage,
        now: DateTime<Utc>,
    ) -> Result<Route> {
        let (topic, p, offset) = (message.topic(), message.partition(), message.offset());
        let mark = copy_mark(message);
        if let Some(key) = message.key() {
            let owner = partition_for(key, self.partitions);
            if owner != p {
                if mark.is_some() || self.settings.misrouted == Misrouted::Reject {
                    return Ok(Route::Here);
                }
                let durable = self.stores[&p].applied_offset(topic).unwrap_or(-1);
                let mark = Forwarded {
                    partition: p,
                    offset,
                    durable,
                };
                let copy = Output {
                    topic: topic.to_string(),
                    partition: Some(owner),
                    key: Some(key.to_vec()),
                    value: message.payload().map(<[u8]>::to_vec),
                    headers: copy_headers(message, &mark),
                };
                // A copy the broker would refuse is not forwarded: the record is rejected
                // here as misrouted, to the dead-letter topic.
                if let Err(reason) = self
                    .settings
                    .decider
                    .limits
                    .check_message("a forwarded copy", copy.size())
                {
                    warn!(%topic, p, offset, "{reason}");
                    return Ok(Route::Here);
                }
                pending.outputs.push(copy);
                self.telemetry.forwarded(topic);
                self.warned.misrouted(topic, key, p, owner);
                return Ok(Route::Elsewhere);
            }
        }
        let Some(mark) = mark else {
            return Ok(Route::Here);
        };
        let quirks = self.settings.kafka.quirks();
        let checked = self.ends.check(&self.consumer, quirks, self.partitions, message, mark);
        let mark = match checked.await {
            Ok(mark) => mark,
            Err(implausible) => {
                let rejected = Input::Rejected {
                    source: format!("{topic}/{p}@{offset}"),
                    reason: implausible.to_string(),
                    kind: Rejection::Invalid,
                };
                let origin = origin_of(kind, p, offset, &rejected);
                let pipeline = rejected_pipeline(message.key());
                self.decide_and_apply(pending, p, &pipeline, &rejected, &origin, now, Some(message))?;
                return Ok(Route::Elsewhere);
            }
        };
        let slot = (p, topic.to_string(), mark.partition);
        let window = match pending.windows.entry(slot) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(self.stores[&p].forward_window(topic, mark.partition)?)
            }
        };
        let advances = window.advances(&mark);
        let new = window.admit(&mark);
        // A duplicate that teaches the window nothing writes nothing.
        if new || advances {
            pending
                .stores
                .entry(p)
                .or_default()
                .set_forward_window(topic, mark.partition, window);
        }
        if new {
            return Ok(Route::Here);
        }
        debug!(%topic, p, offset, from = mark.partition, at = mark.offset, "forwarded copy applied before: skipped");
        self.telemetry.forwarded_duplicate(topic);
        Ok(Route::Elsewhere)
    }

    /// Reads an input record, waiting out a schema registry that cannot answer for it (down,
    /// timing out, answering 5xx, refusing the credentials): the record is not at fault, so
    /// it is neither rejected nor skipped. The batch waits with it, nothing of it applied,
    /// retried with backoff, the loop held up rather than stuck (liveness holds: a restart
    /// would not bring the registry back); a stop meanwhile leaves the batch to be redone on
    /// restart. The wait is bounded for one record: past `--record-patience`, if the
    /// registry answers otherwise and the refusal is not a passing one (403 for its id, a
    /// bare 404; not a 5xx), the record is dead-lettered with the reason, so one record never holds
    /// every partition of the instance (issue 60, item 2). A registry that answers nothing
    /// is an outage: the batch waits on, and readiness says so.
    async fn read(&self, kind: InputTopic, message: &OwnedMessage) -> (String, Input) {
        let telemetry = self.telemetry.clone();
        let mut waiting = None;
        let mut backoff = Backoff::outage();
        let since = Instant::now();
        let mut next_probe = self.settings.record_patience;
        loop {
            let codec = &self.settings.codec;
            match read_input(codec, kind, message, self.partitions, &self.settings.decider.limits).await {
                Ok(read) => return read,
                Err(e) if !e.is_transient() && since.elapsed() >= next_probe && codec.registry_answers().await => {
                    let waited = since.elapsed().as_secs();
                    warn!(
                        topic = message.topic(),
                        partition = message.partition(),
                        offset = message.offset(),
                        error = %e,
                        "the schema registry answers, but not for this record: dead-lettered after {waited}s"
                    );
                    let origin = format!("{}/{}@{}", message.topic(), message.partition(), message.offset());
                    let reason = format!(
                        "the schema registry answers, but not for this record ({e}) after {waited}s: dead-lettered so that it holds nothing else up; produce it again once the registry serves its schema"
                    );
                    let rejected = Input::Rejected {
                        source: origin,
                        reason,
                        kind: Rejection::Unreadable,
                    };
                    return (rejected_pipeline(message.key()), rejected);
                }
                Err(e) => {
                    if since.elapsed() >= next_probe {
                        // An outage: ask again after as long once more.
                        next_probe = since.elapsed() + self.settings.record_patience;
                    }
                    waiting.get_or_insert_with(|| {
                        let record = format!(
                            "{}/{}@{} (the schema registry cannot answer for it: {e}; it is dead-lettered after --record-patience, {}s, if the registry answers otherwise)",
                            message.topic(),
                            message.partition(),
                            message.offset(),
                            self.settings.record_patience.as_secs()
                        );
                        (telemetry.awaiting_broker(), telemetry.waiting_on_record(record))
                    });
                    warn!(
                        topic = message.topic(),
                        partition = message.partition(),
                        offset = message.offset(),
                        error = %e,
                        "the record cannot be read until the schema registry answers; the batch waits"
                    );
                    backoff.wait().await;
                }
            }
        }
    }

    async fn fire_due_timers(&mut self) -> Result<()> {
        let started = Instant::now();
        let mut pending = Pending::default();
        // A rebalance reported meanwhile comes first: a revoked partition's timers are its
        // new owner's to fire.
        while let Ok(change) = self.ownership.try_recv() {
            self.on_ownership(change).await?;
        }
        let now = self.time.now();
        self.stage_due_timers(&mut pending, now)?;
        self.flush(pending).await?;
        self.repair_now().await?;
        self.telemetry.batch_latency(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Reads the clock against the monotonic one: a step is said (and, forward, holds
    /// retention expiry: see [`Self::stage_due_timers`]).
    fn watch_clock(&mut self) {
        let now = self.settings.clock.now();
        let Some(step) = self.clock_watch.read(now, self.started.elapsed()) else {
            return;
        };
        self.telemetry.clock_stepped(step.by.as_seconds_f64());
        let by = format_duration(step.by.abs());
        match step.by > chrono::TimeDelta::zero() {
            true => warn!(
                by,
                "the clock stepped forward by {by}: retention expiry is held for an hour (check NTP on this node)"
            ),
            false => warn!(
                by,
                "the clock stepped back by {by}: timers wait until it reaches them again (check NTP on this node)"
            ),
        }
    }

    /// Judges the clock against the stamps of the batch's sensor records (their producers'
    /// clocks): behind most of them, readings stamped in the future are allowed as much more.
    fn judge_clock(&mut self, batch: &[OwnedMessage], now: DateTime<Utc>) {
        let sensors = &self.settings.topics.sensors;
        let mut stamped = 0;
        for message in batch.iter().filter(|m| m.topic() == sensors) {
            if let Some(at) = (message.timestamp().to_millis()).and_then(DateTime::from_timestamp_millis) {
                self.clock_watch.stamped(at, now);
                stamped += 1;
            }
        }
        // Nothing new to judge by (a batch without sensor records).
        if stamped == 0 {
            return;
        }
        let (behind, allowance) = self.clock_watch.judge(self.settings.decider.max_clock_skew);
        if allowance != self.future_allowance {
            match behind {
                Some(behind) => warn!(behind = %format_duration(behind), allowance = %format_duration(allowance),
                    "this processor's clock runs behind the times its producers stamp sensor records with: readings stamped in the future are allowed as much more meanwhile (check NTP on this node)"),
                None => info!("this processor's clock no longer runs behind its producers' stamps"),
            }
            self.future_allowance = allowance;
        }
        self.telemetry
            .clock_behind_inputs(behind.map_or(0.0, |b| b.as_seconds_f64()));
    }

    /// Adds the timers due at `now` (at most a batch of them) to the batch. After a forward
    /// step of the clock, retention expiries are held (re-armed at the hold's end), so that
    /// a clock set days ahead does not end every execution at once.
    fn stage_due_timers(&mut self, pending: &mut Pending, now: DateTime<Utc>) -> Result<()> {
        let held_until = self.clock_watch.expiry_held_until(now);
        let mut held = 0;
        for timer in self.timers.pop_due(now, self.settings.batch_size) {
            if let Some(until) = self.clock_watch.held_until(&timer.kind, now) {
                self.timers.set(timer.partition, &timer.pipeline, &timer.kind, until);
                held += 1;
                continue;
            }
            self.telemetry.timer_late((now - timer.at).as_seconds_f64());
            let (p, pipeline) = (timer.partition, timer.pipeline.clone());
            let origin = timer_origin(&pipeline, &timer.kind, timer.at);
            self.decide_and_apply(
                pending,
                p,
                &pipeline,
                &Input::TimerFired(timer.kind),
                &origin,
                now,
                None,
            )?;
        }
        if held > 0 {
            warn!(held, until = %held_until.unwrap_or(now), "retention expiries held after a forward step of the clock");
        }
        self.expiries_held = match held_until {
            Some(_) => self.expiries_held + held,
            None => 0,
        };
        self.telemetry.expiries_held(self.expiries_held);
        Ok(())
    }

    /// Decides what `input` means for `pipeline` and adds the decision to the batch. A
    /// decision whose state would not fit one changelog record is not applied: the input is
    /// rejected instead (INPUT_REJECTED, and the record to the dead-letter topic), naming the
    /// limit, so that no changelog write is ever left out of a batch marked complete.
    #[allow(clippy::too_many_arguments)]
    fn decide_and_apply(
        &mut self,
        pending: &mut Pending,
        p: i32,
        pipeline: &str,
        input: &Input,
        origin: &str,
        now: DateTime<Utc>,
        source: Option<&OwnedMessage>,
    ) -> Result<()> {
        if let Input::JobReported(report) = input {
            match self.journaled.reported(p, report) {
                Reported::Released { found: true } => {
                    info!(partition = p, run_id = %report.run_id, "the previous owner let a journaled trigger go")
                }
                Reported::Released { found: false } => {
                    // This owner's executor could not begin the call in time: it asks again.
                    let journaled = match (self.stores.get(&p), handover::never_began(report)) {
                        (Some(store), true) => store.effect(&report.run_id)?,
                        _ => None,
                    };
                    match journaled.filter(|e| handover::releases(report, e.request())) {
                        Some(effect) => {
                            info!(partition = p, run_id = %report.run_id, "a trigger's call could not begin by its time to begin: requesting it again");
                            self.journaled.let_go_unbegun(p, effect);
                        }
                        None => {
                            debug!(partition = p, run_id = %report.run_id, "a release of no call awaited here (an older call's, or of a run that moved on)")
                        }
                    }
                }
                Reported::Marked { found } => {
                    if found {
                        info!(partition = p, run_id = %report.run_id, "a journaled trigger's start mark: its call began at the previous owner, and is left to it until its release, a report, or its deadline");
                    }
                    // Kept in the journal with the mark's offset: an owner that opens the
                    // partition later never reads the mark again.
                    let journaled = match self.stores.get(&p) {
                        Some(store) => store.effect(&report.run_id)?,
                        None => None,
                    };
                    if let Some(marked) = journaled.and_then(|e| handover::journal_marked(report, e)) {
                        pending
                            .stores
                            .entry(p)
                            .or_default()
                            .put_effect(&report.run_id, &marked)?;
                    }
                }
                // The trigger's outcome is known: it leaves the journal, never requested again.
                Reported::Answered => pending.stores.entry(p).or_default().delete_effect(&report.run_id),
            }
        }
        let (state, in_parts) = self.state(pending, p, pipeline)?;
        let ctx = Context {
            now,
            origin,
            settings: DeciderSettings {
                max_clock_skew: self.future_allowance,
                ..self.settings.decider
            },
        };
        let before = Before {
            state: &state,
            in_parts,
        };
        let source_name = || {
            source.map_or_else(
                || origin.to_string(),
                |m| format!("{}/{}@{}", m.topic(), m.partition(), m.offset()),
            )
        };
        let encoder = self.encoder();
        let fit = |decision: &Decision| encoder.encode(pipeline, before, decision);
        match apply::decide_within(&state, pipeline, input, ctx, source_name, fit) {
            Ok((decision, encoded)) => self.apply(pending, p, pipeline, before, decision, encoded, source),
            Err(Unfit::Failed(e)) => Err(e),
            Err(Unfit::EvenItsRejection { reason }) => {
                bail!("pipeline {pipeline}: even its rejection is over a limit: {reason}")
            }
        }
    }

    /// How this processor encodes decisions' records.
    fn encoder(&self) -> Encoder<'_> {
        Encoder {
            codec: &self.settings.codec,
            topics: &self.settings.topics,
            limits: self.settings.decider.limits,
        }
    }

    /// Adds one decision that fits (see [`apply::decide_within`]) to the batch, in the order
    /// its parts are written: events and dead letter, state, timers, outbound records,
    /// effects.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        pending: &mut Pending,
        p: i32,
        pipeline: &str,
        before: Before<'_>,
        decision: Decision,
        encoded: Encoded,
        source: Option<&OwnedMessage>,
    ) -> Result<()> {
        let limits = self.settings.decider.limits;
        let Encoded {
            writes,
            events,
            records,
        } = encoded;
        // Every line logged while applying carries the pipeline (and, on events, the execution
        // and run), in text and JSON logs and in exported traces.
        let _span = tracing::info_span!("pipeline", pipeline).entered();
        for note in &decision.notes {
            debug!("{note}");
        }
        self.log_events(&decision.events);
        pending.outputs.extend(events);
        if decision.events.iter().any(|e| e.kind.is_sla_breach()) {
            // A breach never changes the config: the one in force before it names the owner.
            let owner = before.state.config.as_ref().and_then(|c| c.owner.clone());
            pending
                .learned
                .owners
                .insert(pipeline.to_string(), owner.unwrap_or_default());
        }
        pending.learned.events.extend(decision.events);
        if let (Some(reason), Some(message)) = (&decision.dead_letter, source) {
            let kind = decision.rejection.map_or("unknown", Rejection::as_str);
            self.telemetry.dead_letter(message.topic(), kind);
            pending.outputs.push(dead_letter(
                &self.settings.topics.dlq,
                message,
                reason,
                limits.message_bytes,
            ));
        }
        self.apply_state(pending, p, pipeline, decision.state, writes, before.state)?;
        // The store needs no write of its own: the timers are parts of the state written.
        self.timers.apply(p, pipeline, &decision.timers);
        pending.outputs.extend(records);
        for effect in decision.effects {
            // Triggers are journaled; status checks are not (their timer asks again).
            let effect = with_release_key(effect);
            if let Effect::TriggerJob(request) = &effect {
                pending
                    .stores
                    .entry(p)
                    .or_default()
                    .put_effect(&request.run_id, &effect)?;
            }
            pending.effects.push((p, effect));
        }
        pending.ended_runs.extend(decision.ended_runs);
        Ok(())
    }

    fn log_events(&self, events: &[Event]) {
        for event in events {
            info!(
                event = event.kind.name(),
                schedule = event.schedule_id.as_deref(),
                date = event.date.as_deref(),
                run_id = event.run_id.as_deref(),
                "{}",
                event.message
            );
        }
    }

    /// Adds a state change to the partition's store batch (`encoded`: the put state's bytes).
    fn apply_state(
        &self,
        pending: &mut Pending,
        p: i32,
        pipeline: &str,
        change: StateChange,
        writes: Vec<store::Write>,
        before: &PipelineState,
    ) -> Result<()> {
        let key = (p, pipeline.to_string());
        let state = match change {
            StateChange::Unchanged => return Ok(()),
            StateChange::Put(state) => {
                // The config is written only when it is not the one stored (or being stored)
                // already.
                let new_config = match &state.config {
                    Some(config) if !self.holds_config(pending, p, pipeline, config) => {
                        pending.learned.configs.insert(key.clone(), config.clone());
                        Some((pipeline, config.as_ref()))
                    }
                    _ => None,
                };
                pending.stores.entry(p).or_default().put_state(writes, new_config)?;
                Some(Arc::from(state))
            }
            StateChange::Delete => {
                pending.stores.entry(p).or_default().delete_pipeline(pipeline, before);
                pending.learned.configs.remove(&key);
                None
            }
        };
        pending.learned.changed.insert(key.clone());
        pending.states.insert(key, state);
        Ok(())
    }

    /// Whether `config` is the one `pipeline` has stored, or is storing in this batch.
    fn holds_config(&self, pending: &Pending, p: i32, pipeline: &str, config: &Arc<PipelineConfig>) -> bool {
        match pending.learned.configs.get(&(p, pipeline.to_string())) {
            Some(staged) => Arc::ptr_eq(staged, config),
            None => self.stores[&p].holds_config(pipeline, config),
        }
    }

    /// Tells the read models (and the stores' caches of decoded states) what a durable batch
    /// changed.
    fn learn(&mut self, learned: Learned, states: HashMap<(i32, String), Option<Arc<PipelineState>>>) -> Result<()> {
        // The stores hold these states now: their next reads need not decode them.
        for ((p, pipeline), state) in states {
            if let (Some(store), Some(state)) = (self.stores.get(&p), state) {
                store.remember(&pipeline, state);
            }
        }
        for event in learned.events {
            self.telemetry.event(event.kind.name());
            if event.kind.is_sla_breach() {
                let owner = learned.owners.get(&event.pipeline_id).map_or("", String::as_str);
                self.telemetry.sla_breach(event.kind.name(), &event.pipeline_id, owner);
            }
            self.recent.push(event);
        }
        for (p, pipeline) in learned.changed {
            self.summaries.changed(p, &pipeline);
        }
        for ((p, pipeline), config) in learned.configs {
            if let Some(store) = self.stores.get(&p) {
                store.config_written(&pipeline, &config);
            }
        }
        Ok(())
    }

    /// Writes the batch out in the order [`Flush`] gives (see core::batch): outputs, end
    /// markers, state, offsets, effects; stopping when the assignment is lost or a newer
    /// owner's fence shows.
    async fn flush(&mut self, mut pending: Pending) -> Result<()> {
        self.add_repairs(&mut pending)?;
        let first_changelog = pending.outputs.len();
        let sequenced = self.mirror_to_changelog(&mut pending);
        let mut offsets = self.input_offsets(&pending.commits)?;
        let committing = Instant::now();
        let mut flush = Flush::new(sequenced, self.settings.guarantee == Guarantee::ExactlyOnce);
        if offsets.is_none() {
            flush = flush.without_inputs();
        }
        // Held up by the broker (acknowledgements, retries, a transaction), not stuck.
        let telemetry = self.telemetry.clone();
        let mut waiting = Some(telemetry.awaiting_broker());
        loop {
            match flush.poll() {
                // A zombie that already knows writes nothing.
                Action::Produce if self.lost_partitions("its outputs") => flush.on_lost(),
                Action::Produce => {
                    let delivered = self.produce_all(&mut pending.outputs).await?;
                    let lost = self.lost_partitions("its end markers");
                    flush.on_produced(&delivered[first_changelog..], lost, &mut self.writers);
                }
                Action::ReadChangelog { partition, ranges } => {
                    let entries = self.read_changelog(partition, &ranges).await;
                    if let Some(Checked::Owner { stale: 1.. }) = flush.on_read(entries.as_deref(), &mut self.writers) {
                        warn!(partition, ?ranges, "another writer wrote to this partition's changelog: its writes do not count, and are written over with the next batch");
                    }
                }
                Action::ProduceMarkers(markers) => {
                    let mut outputs = self.marker_outputs(&markers);
                    let landed = self.produce_all(&mut outputs).await?;
                    let lost = self.lost_partitions("its state");
                    flush.on_markers(&landed, lost, &mut self.writers);
                }
                Action::ReadFenceOffsets => {
                    offsets = self.fence_offsets();
                    flush.on_fence_offsets();
                }
                Action::Transact => {
                    let landed = self
                        .produce_in_transaction(&pending.outputs, first_changelog, &flush, offsets.as_ref())
                        .await?;
                    let lost = self.lost_partitions("its state");
                    flush.on_transacted(&landed, lost);
                }
                Action::WriteStores(counted) => {
                    waiting = None;
                    self.telemetry.commit_latency(committing.elapsed().as_secs_f64());
                    self.write_stores(std::mem::take(&mut pending.stores), &counted)?;
                    self.learn(
                        std::mem::take(&mut pending.learned),
                        std::mem::take(&mut pending.states),
                    )?;
                    let lost = self.lost_partitions("its effects");
                    flush.on_stored(lost, &mut self.writers);
                }
                Action::CommitOffsets => {
                    if let Some(list) = offsets.take() {
                        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
                            warn!(error = %e, "offset commit failed; the applied-offset watermark prevents double application");
                        }
                        self.last_commit = Some(list);
                    }
                    flush.on_committed();
                }
                Action::StartEffects => {
                    self.executor.end(&std::mem::take(&mut pending.ended_runs));
                    for (p, effect) in std::mem::take(&mut pending.effects) {
                        self.executor.spawn(effect, p);
                    }
                    flush.on_started();
                }
                Action::GiveUp(fenced) => {
                    for p in &fenced {
                        self.abandon(*p)?;
                    }
                    return Err(Zombie(fenced.into_iter().collect()).into());
                }
                Action::Abandon => return Ok(()),
                Action::ChangelogWentBack { partition } => {
                    return Err(ChangelogWentBack(partition, self.settings.topics.changelog.clone()).into())
                }
                Action::Done => break,
            }
        }
        drop(waiting);
        self.telemetry.timers_pending(self.timers.len() as i64);
        Ok(())
    }

    /// Adds what opening partitions and other writers left for the next batch: changelog
    /// keys to supersede (with the values the store holds now, under what the batch itself
    /// writes), and stale journal entries to delete.
    fn add_repairs(&mut self, pending: &mut Pending) -> Result<()> {
        for (p, writer) in &mut self.writers {
            let keys = writer.take_repairs();
            let Some(store) = self.stores.get(p).filter(|_| !keys.is_empty()) else {
                continue;
            };
            let mut repair = StoreBatch::default();
            for key in keys {
                repair.mirror(&key, store.raw(&key)?.as_deref());
            }
            pending.stores.entry(*p).or_default().underlay(repair);
        }
        for (p, run_ids) in self.journaled.take_stale() {
            let batch = pending.stores.entry(p).or_default();
            for run_id in run_ids {
                batch.delete_effect(&run_id);
            }
        }
        Ok(())
    }

    /// Mirrors every store write, in order, to the changelog partition of the same number, as
    /// the next batch of this owner's epoch there; returns each partition's new lineage. A
    /// partition revoked meanwhile is left to its new owner, which redoes the work.
    fn mirror_to_changelog(&self, pending: &mut Pending) -> BTreeMap<i32, Lineage> {
        let mut sequenced = BTreeMap::new();
        for (p, batch) in &pending.stores {
            let Some(writer) = self.writers.get(p).filter(|_| !batch.changes().is_empty()) else {
                continue;
            };
            let this = writer.next_batch();
            sequenced.insert(*p, this);
            let header = changelog::batch_header(this.epoch, this.through);
            for (key, value) in batch.changes() {
                pending.outputs.push(Output {
                    topic: self.settings.topics.changelog.clone(),
                    partition: Some(*p),
                    key: Some(key.clone()),
                    value: value.clone(),
                    headers: vec![(changelog::BATCH_HEADER.to_string(), header.clone())],
                });
            }
        }
        sequenced
    }

    /// Writes each partition's batch, those in `counted` with their changelog checkpoint and
    /// lineage.
    fn write_stores(
        &mut self,
        stores: BTreeMap<i32, StoreBatch>,
        counted: &BTreeMap<i32, (i64, Lineage)>,
    ) -> Result<()> {
        for (p, mut batch) in stores {
            if let Some((checkpoint, this)) = counted.get(&p) {
                batch.set_checkpoint(*checkpoint, self.settings.clock.now());
                batch.set_lineage(*this);
                // Found by this batch (others' records between its own), written by the next:
                // kept with the checkpoint that moves past those records.
                if let Some(keys) = self.writers.get_mut(&p).and_then(Writer::repairs_to_keep) {
                    batch.set_repairs(keys);
                }
            }
            if batch.is_empty() {
                continue;
            }
            // The partition may have been revoked mid-batch; its new owner redoes the work.
            match self.stores.get_mut(&p) {
                Some(store) => store.write(batch)?,
                None => warn!(partition = p, "partition revoked before its batch was written"),
            }
        }
        Ok(())
    }

    /// Whether librdkafka found this instance's assignment lost (its session expired, or the
    /// group moved on without it: a paused process wakes up a zombie). The batch then stops
    /// before `what`: its changelog writes stay unmarked and never count, and the partitions'
    /// new owners redo its inputs.
    fn lost_partitions(&self, what: &str) -> bool {
        let lost = self.consumer.assignment_lost();
        if lost {
            warn!(
                "this instance lost its partitions mid-batch: the batch stops before {what}; their new owners redo it"
            );
        }
        lost
    }

    /// The end markers as changelog records.
    fn marker_outputs(&self, markers: &[Marker]) -> Vec<Output> {
        (markers.iter())
            .map(|m| {
                let (key, value) = changelog::marker(m.batch.epoch, m.batch.through, m.first);
                Output {
                    topic: self.settings.topics.changelog.clone(),
                    partition: Some(m.partition),
                    key: Some(key),
                    value: Some(value),
                    headers: Vec::new(),
                }
            })
            .collect()
    }

    /// The consumer offsets to commit for this batch: the next record of each partition.
    /// The group's committed offsets of the assigned partitions, sent with the transaction
    /// of a batch that has none of its own (see core::batch): they move nothing, and the
    /// broker refuses them, and so the transaction, under an old group generation. `None`
    /// when the group has none (then the transaction goes unfenced, as a first batch must).
    fn fence_offsets(&self) -> Option<TopicPartitionList> {
        let read = self.consumer.assignment().and_then(|assigned| {
            tokio::task::block_in_place(|| self.consumer.committed_offsets(assigned, FENCE_READ_TIMEOUT))
        });
        let committed = match read {
            Ok(committed) => committed,
            Err(e) => {
                warn!(error = %e, "could not read the committed offsets to fence a batch of timers with; its transaction goes unfenced");
                return None;
            }
        };
        let mut list = TopicPartitionList::new();
        for e in committed.elements() {
            if let Offset::Offset(at) = e.offset() {
                let _ = list.add_partition_offset(e.topic(), e.partition(), Offset::Offset(at));
            }
        }
        if list.count() == 0 {
            warn!("no committed offsets to fence a batch of timers with (a group that never committed); its transaction goes unfenced");
            return None;
        }
        Some(list)
    }

    fn input_offsets(&self, commits: &BTreeMap<(String, i32), i64>) -> Result<Option<TopicPartitionList>> {
        if commits.is_empty() {
            return Ok(None);
        }
        let mut list = TopicPartitionList::new();
        for ((topic, p), offset) in commits {
            list.add_partition_offset(topic, *p, Offset::Offset(offset + 1))?;
        }
        Ok(Some(list))
    }

    /// Produces every output and waits until all are acknowledged, retrying failures for as
    /// long as they last: the batch's state is not written before its outputs are safe.
    /// Returns where each output landed. A dead letter too large for the broker goes without
    /// its value (its headers say where the record is); any other output too large ends the
    /// run, the batch unapplied (`--max-state-bytes` or `--max-message-bytes` is over the
    /// broker's limit: a misconfiguration).
    async fn produce_all(&mut self, outputs: &mut [Output]) -> Result<Vec<(i32, i64)>> {
        let mut delivered = vec![(0, 0); outputs.len()];
        let mut todo: Vec<usize> = (0..outputs.len()).collect();
        let mut backoff = Backoff::outage();
        while !todo.is_empty() {
            let mark = self.telemetry.broker_mark();
            let results = futures::future::join_all(todo.iter().map(|i| self.send(&outputs[*i]))).await;
            let mut failed = Vec::new();
            let mut transient = false;
            for (i, result) in todo.into_iter().zip(results) {
                match result {
                    Ok(at) => delivered[i] = at,
                    Err(e)
                        if e.too_large()
                            && outputs[i].topic == self.settings.topics.dlq
                            && outputs[i].value.is_some() =>
                    {
                        omit_value(&mut outputs[i]);
                        failed.push(i);
                    }
                    // A changelog write left out would leave the state and its changelog apart:
                    // stop before the batch is marked or written (it is redone on restart).
                    Err(e) if e.too_large() && outputs[i].topic == self.settings.topics.changelog => {
                        bail!("a changelog record of {} bytes is too large for the broker ({e:#}): lower --max-state-bytes under the changelog topic's max.message.bytes, or raise that; the batch was not applied and is redone on restart", outputs[i].value.as_ref().map_or(0, Vec::len));
                    }
                    // Every output was sized under --max-message-bytes before it was decided
                    // on: the broker's limit is lower. Never leave it out of a batch that
                    // counts as done; stop before the batch is marked (it is redone).
                    Err(e) if e.too_large() => {
                        bail!("a record of {} bytes for {} is too large for the broker ({e:#}): lower --max-message-bytes to the broker's and the topic's max.message.bytes, or raise those; the batch was not applied and is redone on restart", outputs[i].size(), outputs[i].topic);
                    }
                    // A producer that can never send again (fenced, or fatal and not
                    // replaceable): stop, the batch unapplied, and let liveness say so.
                    Err(e) if e.fatal.is_some() => return Err(runtime_error::Error::from(e).into()),
                    Err(e) => {
                        error!(topic = %outputs[i].topic, error = %format!("{e:#}"), "produce failed; retrying");
                        transient = true;
                        failed.push(i);
                    }
                }
            }
            todo = failed;
            if transient {
                self.telemetry.broker_down();
                backoff.wait().await;
            } else {
                self.telemetry.broker_ok_since(mark);
            }
        }
        // One metric update per topic, not per record.
        let mut per_topic: BTreeMap<&str, u64> = BTreeMap::new();
        for o in outputs.iter() {
            *per_topic.entry(o.topic.as_str()).or_default() += 1;
        }
        per_topic
            .into_iter()
            .for_each(|(topic, n)| self.telemetry.record_out(topic, n));
        Ok(delivered)
    }

    async fn send(&self, o: &Output) -> Result<(i32, i64), kafka::ProduceError> {
        let headers: Vec<(&str, &[u8])> = o.headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
        self.producer
            .send_to(&o.topic, o.partition, o.key.as_deref(), o.value.as_deref(), &headers)
            .await
    }

    /// `exactly-once`: the outputs and the input offsets in one transaction. A transaction
    /// that fails is aborted and the batch produced again in a new one (nothing was written
    /// locally yet); errors that no retry can mend end the run.
    async fn produce_in_transaction(
        &self,
        outputs: &[Output],
        first_changelog: usize,
        flush: &Flush,
        offsets: Option<&TopicPartitionList>,
    ) -> Result<Vec<(i32, i64)>> {
        let mut backoff = Backoff::outage();
        loop {
            let transactional = |r: KafkaResult<()>| r.map_err(runtime_error::Error::of_transaction);
            let producer = self.producer.current();
            let mark = self.telemetry.broker_mark();
            let attempt = async {
                transactional(tokio::task::block_in_place(|| producer.begin_transaction()))?;
                let sends = futures::future::join_all(outputs.iter().map(|o| self.send(o))).await;
                let delivered = sends.into_iter().collect::<Result<Vec<_>, _>>()?;
                let markers = self.marker_outputs(&flush.markers(&delivered[first_changelog..]));
                let sends = futures::future::join_all(markers.iter().map(|o| self.send(o))).await;
                let delivered = sends.into_iter().collect::<Result<Vec<_>, _>>()?;
                tokio::task::block_in_place(|| -> Result<(), runtime_error::Error> {
                    if let Some(list) = offsets {
                        let group =
                            (self.consumer.group_metadata()).ok_or_else(|| anyhow!("no consumer group metadata"))?;
                        transactional(producer.send_offsets_to_transaction(list, &group, TRANSACTION_TIMEOUT))?;
                    }
                    transactional(producer.commit_transaction(TRANSACTION_TIMEOUT))
                })?;
                Ok::<_, runtime_error::Error>(delivered)
            }
            .await;
            match attempt {
                Ok(delivered) => {
                    self.telemetry.broker_ok_since(mark);
                    return Ok(delivered);
                }
                Err(runtime_error::Error::Fatal(fatal)) => return Err(fatal.into()),
                // A fenced transactional producer is in a fatal state: no abort and no new
                // transaction of it can succeed, and another instance holds its id.
                Err(runtime_error::Error::Transient(e)) if kafka::fatal_error(&producer).is_some() => {
                    let fatal = kafka::fatal_error(&producer).unwrap_or_default();
                    bail!("the transactional producer is in a fatal state ({fatal}) after: {e:#}; another instance took over with the same --instance, or the broker fenced it: stopping before anything of the batch counts");
                }
                Err(runtime_error::Error::Transient(e)) => {
                    error!(error = %format!("{e:#}"), "transaction failed; aborting and retrying the batch");
                    self.telemetry.broker_down();
                    let _ = tokio::task::block_in_place(|| producer.abort_transaction(TRANSACTION_TIMEOUT));
                    backoff.wait().await;
                }
            }
        }
    }
}

/// A trigger with a release key of its own, drawn from the operating system's random source
/// as it is journaled (see `TriggerRequest::release_key`); other effects as they are.
fn with_release_key(effect: Effect) -> Effect {
    match effect {
        Effect::TriggerJob(mut request) => {
            let mut bytes = [0u8; 16];
            // Without a random source the key is left out: the release then needs only the
            // deadline, as before keys were (and says so).
            match getrandom::fill(&mut bytes) {
                Ok(()) => request.release_key = Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
                Err(e) => warn!(error = %e, "no random source for a trigger's release key"),
            }
            Effect::TriggerJob(request)
        }
        other => other,
    }
}

/// How long reading the group's committed offsets (a fence for a batch of timers) may take.
const FENCE_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// See [`Processor::fenced_since_last_write`] (a function of its own, for closures that
/// borrow other parts of the processor).
fn fenced_since_last_write(writers: &BTreeMap<i32, Writer>, settings: &Settings, p: i32) -> Option<bool> {
    let Some(writer) = writers.get(&p) else {
        return Some(false);
    };
    let topic = &settings.topics.changelog;
    let from = writer.next_offset();
    match tokio::task::block_in_place(|| changelog::read_since(&settings.kafka, topic, p, from)) {
        Ok((entries, _)) => Some(writer.fenced_by(&entries)),
        Err(e) => {
            warn!(partition = p, error = %format!("{e:#}"), "could not read the changelog to check for a newer owner: journaled triggers wait");
            None
        }
    }
}

/// Drops a dead letter's value, too large for the broker; its headers say so, and where the
/// record is at its source.
fn omit_value(output: &mut Output) {
    let size = output.value.take().map_or(0, |v| v.len());
    warn!(size, "dead letter too large for the broker: sent without its value");
    output.headers.push((
        "value.omitted".into(),
        format!("{size} bytes: too large for the dead-letter topic; read it at its source coordinates").into_bytes(),
    ));
}

/// The dead letter of `message`: its key, value and headers as they were, with the reason
/// and where it was read. One that would be over `largest` bytes goes without its value
/// (and, if still over, without the producer's headers), saying so: it must fit the broker.
pub(crate) fn dead_letter(topic: &str, message: &OwnedMessage, reason: &str, largest: usize) -> Output {
    let mut headers = vec![
        ("error".to_string(), reason.as_bytes().to_vec()),
        ("source.topic".to_string(), message.topic().as_bytes().to_vec()),
        (
            "source.partition".to_string(),
            message.partition().to_string().into_bytes(),
        ),
        ("source.offset".to_string(), message.offset().to_string().into_bytes()),
    ];
    // Keep the producer's own headers too, so the record can be replayed as it was.
    if let Some(h) = message.headers() {
        for header in h.iter() {
            headers.push((
                format!("original.{}", header.key),
                header.value.unwrap_or_default().to_vec(),
            ));
        }
    }
    let mut output = Output {
        topic: topic.to_string(),
        partition: None,
        key: message.key().map(<[u8]>::to_vec),
        value: message.payload().map(<[u8]>::to_vec),
        headers,
    };
    if output.size() > largest {
        omit_value(&mut output);
    }
    if output.size() > largest {
        let size: usize = output
            .headers
            .iter()
            .filter(|(k, _)| k.starts_with("original."))
            .map(|(k, v)| k.len() + v.len())
            .sum();
        output.headers.retain(|(k, _)| !k.starts_with("original."));
        output.headers.push((
            "headers.omitted".into(),
            format!("{size} bytes of the record's own headers: too large for the dead-letter topic").into_bytes(),
        ));
    }
    output
}

/// Whether the loop goes on after a batch, or stops (a shutdown came while it ran).
#[derive(Debug, PartialEq, Eq)]
enum Finished {
    Running,
    Stopping,
}

/// Runs one batch, `work`. A shutdown meanwhile lets it finish within `grace`: its events
/// may already be out (outputs are acknowledged before the store is written), and a clean
/// stop leaves the store current with them rather than for a restore to mend. Past the
/// grace (a broker gone) the batch is left unfinished: a crash, which the applied-offset
/// watermark and the changelog already cover.
async fn finish(
    work: impl std::future::Future<Output = Result<()>>,
    shutdown: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    grace: Duration,
    what: &str,
) -> Result<Finished> {
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => return done.map(|()| Finished::Running),
        () = shutdown => {}
    }
    match tokio::time::timeout(grace, work).await {
        Ok(done) => done.map(|()| Finished::Stopping),
        Err(_) => {
            warn!("stopping with {what} unfinished after the {grace:?} grace; it is redone on restart");
            Ok(Finished::Stopping)
        }
    }
}

/// Waits for SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
        _ = term.recv() => info!("SIGTERM received"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A batch that takes `takes` and says when it is done.
    async fn batch(takes: Duration, done: &AtomicBool) -> Result<()> {
        tokio::time::sleep(takes).await;
        done.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn run(takes: Duration, shutdown_after: Option<Duration>) -> (Finished, bool) {
        let done = AtomicBool::new(false);
        let shutdown = async {
            match shutdown_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(shutdown);
        let grace = Duration::from_secs(30);
        let finished = finish(batch(takes, &done), shutdown.as_mut(), grace, "a batch")
            .await
            .unwrap();
        (finished, done.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_without_a_shutdown_runs_on() {
        assert_eq!(run(Duration::from_secs(2), None).await, (Finished::Running, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_lets_the_batch_under_way_finish_within_the_grace() {
        // Stopping mid-batch used to drop it after its events were out and before its state
        // was written: the store of a cleanly stopped instance missed what it had published.
        let started = tokio::time::Instant::now();
        let got = run(Duration::from_secs(5), Some(Duration::from_secs(1))).await;
        assert_eq!(got, (Finished::Stopping, true));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_stuck_past_the_grace_is_left_unfinished() {
        let started = tokio::time::Instant::now();
        let got = run(Duration::from_secs(3600), Some(Duration::from_secs(1))).await;
        assert_eq!(got, (Finished::Stopping, false));
        assert_eq!(started.elapsed(), Duration::from_secs(31));
    }
}
