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

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::ValueEnum;
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::OwnedMessage;
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
use super::forwarding::{Ends, Misrouted, Warned};
use super::input::read_input;
use super::kafka::{self, Connection, RenewableProducer};
use super::opening::{Opened, Openings};
use super::outputs::{Encoder, Output};
use super::recent::{RecentEvents, TailReader};
use super::store::PartitionStore;
use super::summaries::Summaries;
use super::telemetry::Telemetry;
use super::topics::{InputTopic, Topics};
use crate::core::admission::Admission;
use crate::core::batch::{Action, Flush};
use crate::core::changelog::{Checked, Entry};
use crate::core::lifecycle::{Input, Settings as DeciderSettings};
use crate::core::ownership::{self, OnOpened, OnRevoked};
use crate::core::records::{rejected_pipeline, Rejection};
use crate::core::task::{
    self, omit_value, origin_of, Learned, Opening, Record, ReleaseKeys, Routed, Staged, Tallies, Task,
};

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

pub struct Processor {
    settings: Settings,
    consumer: StreamConsumer<RebalanceContext>,
    producer: RenewableProducer,
    ownership: UnboundedReceiver<Ownership>,
    /// The owned partitions and every rule of what is done with them (see core::task).
    task: Task<PartitionStore>,
    executor: Executor,
    telemetry: Arc<Telemetry>,
    /// The decider's time.
    time: Monotonic,
    /// API questions answered since input or timers last had a turn (see [`QUERY_SHARE`]).
    answered: u32,
    /// Where the partitions that forwarded copies name end, to check their marks against.
    ends: Ends,
    last_commit: Option<TopicPartitionList>,
    /// When the processor started (monotonic), to read the clock against.
    started: Instant,
    /// Partitions assigned and being opened in the background.
    openings: Openings,
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
        let task = Task::new(
            task::Settings {
                decider: settings.decider,
                partitions,
                batch_size: settings.batch_size,
                forward_misrouted: settings.misrouted == Misrouted::Forward,
                changelog: settings.topics.changelog.clone(),
                dlq: settings.topics.dlq.clone(),
                sensors: settings.topics.sensors.clone(),
                exactly_once: settings.guarantee == Guarantee::ExactlyOnce,
            },
            Box::new(Encoder {
                codec: settings.codec.clone(),
                topics: settings.topics.clone(),
                limits: settings.decider.limits,
            }),
            Box::new(OsKeys),
        );
        Ok(Processor {
            settings,
            consumer,
            producer,
            ownership,
            task,
            executor,
            telemetry,
            time,
            answered: 0,
            ends: Ends::default(),
            last_commit: None,
            started: Instant::now(),
            openings,
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
            let next_due = self.task.next_due();
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
                    if self.task.is_open(p) {
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
                _ = resume.tick(), if self.task.triggers_waiting() => self.resume_triggers().await?,
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
                _ = watch.tick(), if !self.task.owned().is_empty() => self.watch_changelogs().await?,
                () = std::future::ready(()), if self.answered >= QUERY_SHARE => self.answered = 0,
                _ = heartbeat.tick() => {
                    for (p, store) in self.task.stores() {
                        self.telemetry.state_size(p, store.estimated_bytes());
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
                    self.task.assigned(p)?;
                    self.open(p);
                }
                self.telemetry.set_ready(self.openings.is_empty());
            }
            Ownership::Revoked { partitions, lost } => {
                self.telemetry.rebalanced("revoked");
                // A held partition lost to a newer owner's fence makes this instance a zombie,
                // which stops (`ownership::on_revoked`). Only a lost one is worth the read.
                let fenced: Vec<i32> = (partitions.iter().copied())
                    .filter(|p| self.task.is_open(*p))
                    .filter(|p| {
                        let fenced = lost.then(|| self.fenced_since_last_write(*p)).flatten();
                        ownership::on_revoked(lost, fenced) == OnRevoked::Zombie
                    })
                    .collect();
                if !fenced.is_empty() {
                    return Err(self.task.give_up(fenced).into());
                }
                for p in partitions {
                    let paused: Vec<_> = self.openings.cancel(p).into_iter().map(|t| (t, None)).collect();
                    self.resume_input(p, &paused)?;
                    self.telemetry.partition_revoked(p, &self.settings.topics.inputs());
                    if self.task.revoked(p).is_some() {
                        info!(partition = p, "partition revoked: state closed");
                    }
                }
            }
        }
        self.owned_changed();
        Ok(())
    }

    /// Says what the task owns now (telemetry, the instance directory), and lets the read
    /// models forget the partitions it no longer does.
    fn owned_changed(&mut self) {
        let owned = self.task.owned();
        let before = self.owned.send_replace(owned.clone());
        let partitions = self.task.settings().partitions;
        for p in before.into_iter().filter(|p| !owned.contains(p)) {
            self.summaries.forget(p);
            self.recent.retain(|id| api::partition_of(id, partitions) != p);
        }
        self.telemetry.partitions_owned(owned.len() as i64);
        self.telemetry.timers_pending(self.task.timers_pending() as i64);
    }

    /// Starts opening assigned partition `p` in the background. Its input is not paused
    /// here (that races librdkafka's start of the fetcher: see [`super::opening`]); what
    /// of it is delivered meanwhile is skipped, its topic-partition paused, and read again
    /// once `p` is open.
    fn open(&mut self, p: i32) {
        if !self.task.is_open(p) && !self.openings.contains(p) {
            self.openings.start(p);
        }
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
                stores: self.task.stores().collect(),
                openings: &self.openings,
                summaries: &mut self.summaries,
                recent: &self.recent,
                partitions: self.task.settings().partitions,
                instance: &self.settings.instance,
            },
        )
    }

    /// Installs a partition opened in the background (see [`super::opening`]): its store,
    /// timers and journaled triggers; then reads again what of its input was delivered
    /// meanwhile.
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
            // Left to the new owner, not read here; but assigned here again, it must be.
            let paused: Vec<_> = (self.openings.take_skipped(p).into_iter())
                .map(|(t, _)| (t, None))
                .collect();
            self.resume_input(p, &paused)?;
            self.task.not_installed(p, store, outcome == OnOpened::Zombie)?;
            warn!(
                partition = p,
                "partition opened after it was revoked or the assignment was lost: left to its new owner"
            );
            return Ok(());
        }
        let (epoch, path) = (writer.epoch(), store.path().display().to_string());
        let timers: Vec<_> = timers.into_iter().map(|t| (t.pipeline, t.kind, t.at)).collect();
        let timers_found = timers.len();
        let opening = Opening {
            store,
            writer,
            journaled: journaled.into_iter().map(|(_, effect)| effect).collect(),
            jobs_end,
            timers,
        };
        let left = self.task.install(p, opening, self.time.now());
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
            timers = timers_found,
            restored_records = restored.records,
            restore_seconds = format!("{:.3}", restored.seconds),
            full_restore = restored.full,
            epoch,
            path,
            "partition assigned: state opened"
        );
        if let Some(tail) = &self.tail {
            tail.read(p);
        }
        // Input delivered while the partition was being opened was skipped: read it again.
        let skipped: Vec<_> = (self.openings.take_skipped(p).into_iter())
            .map(|(t, o)| (t, Some(o)))
            .collect();
        self.resume_input(p, &skipped)?;
        self.telemetry.set_ready(self.openings.is_empty());
        self.owned_changed();
        self.repair_now().await?;
        self.resume_triggers().await
    }

    /// Reads what others wrote to each owned changelog partition since this owner's last
    /// record (see [`crate::core::changelog::Writer::watched`]): their keys are written
    /// again at once, and a newer owner's fence gives the partition up. A partition whose
    /// changelog cannot be read now is read at the next turn.
    async fn watch_changelogs(&mut self) -> Result<()> {
        let topic = &self.settings.topics.changelog;
        for p in self.task.owned() {
            let Some(from) = self.task.changelog_next(p) else {
                continue;
            };
            let read = tokio::task::block_in_place(|| changelog::read_since(&self.settings.kafka, topic, p, from));
            let (others, end) = match read {
                Ok(read) => read,
                Err(e) => {
                    warn!(partition = p, error = %format!("{e:#}"), "could not read the changelog to look for other writers; trying again later");
                    continue;
                }
            };
            let stale = self.task.watched(p, &others, end)?;
            if stale > 0 {
                warn!(partition = p, keys = stale, "another writer (a zombie, or a crashed batch) wrote to this partition's changelog since this owner's last write: those keys are written again");
            }
        }
        self.repair_now().await
    }

    /// Writes the keys a restore named stale, or another writer wrote over, at once (a batch
    /// of repairs alone) rather than with the next input: until then compaction could remove
    /// the value such a write shadows (the changelog keeps records for `min.compaction.lag.ms`
    /// only). Found by the simulator (`sim`).
    async fn repair_now(&mut self) -> Result<()> {
        if self.task.has_repairs() {
            self.flush(Staged::default()).await?;
        }
        Ok(())
    }

    /// Settles the journaled triggers that wait for nothing more (see
    /// [`Task::settle_triggers`]), answering what they wait on first: where the jobs topic
    /// ends, and whether a newer owner fenced their partitions.
    async fn resume_triggers(&mut self) -> Result<()> {
        if !self.task.triggers_waiting() {
            return Ok(());
        }
        let now = self.time.now();
        let jobs = self.settings.topics.jobs.clone();
        let positions: BTreeMap<i32, i64> = (self.consumer.position().ok())
            .map(|list| {
                (list.elements_for_topic(&jobs).iter())
                    .filter_map(|e| Some((e.partition(), e.offset().to_raw()?)))
                    .collect()
            })
            .unwrap_or_default();
        let poll = self.task.poll_triggers(now, &jobs, &positions);
        for (p, run_id) in &poll.measure {
            match tokio::task::block_in_place(|| self.consumer.fetch_watermarks(&jobs, *p, kafka::METADATA_TIMEOUT)) {
                Ok((_, end)) => self.task.jobs_end_measured(*p, run_id, end, now),
                Err(e) => {
                    warn!(partition = p, error = %e, "could not read where the jobs topic ends: the journaled trigger waits")
                }
            }
        }
        if poll.due.is_empty() {
            return Ok(());
        }
        // Nothing is started for a partition this instance may have lost: a process paused
        // while it opened one wakes with journaled triggers its new owner requests already.
        let assigned: BTreeSet<i32> = match self.consumer.assignment_lost() {
            true => BTreeSet::new(),
            false => (self.consumer.assignment().ok())
                .map(|a| a.elements_for_topic(&jobs).iter().map(|e| e.partition()).collect())
                .unwrap_or_default(),
        };
        let fences: BTreeMap<i32, Option<bool>> = (poll.fence_reads(&assigned).into_iter())
            .map(|p| (p, self.fenced_since_last_write(p)))
            .collect();
        let again = self.task.settle_triggers(poll.due, now, &assigned, &fences)?;
        if !again.is_empty() {
            self.flush(again).await?;
        }
        Ok(())
    }

    /// Whether a newer owner has fenced partition `p` after this owner's last changelog
    /// record. Asked before anything is started for `p` outside a batch (a journaled
    /// trigger, a revocation): a batch sees a fence among its own writes, but nothing else
    /// would. `None`: the changelog could not be read.
    fn fenced_since_last_write(&self, p: i32) -> Option<bool> {
        let Some(from) = self.task.changelog_next(p) else {
            return Some(false);
        };
        let topic = &self.settings.topics.changelog;
        match tokio::task::block_in_place(|| changelog::read_since(&self.settings.kafka, topic, p, from)) {
            Ok((entries, _)) => Some(self.task.fenced_by(p, &entries)),
            Err(e) => {
                warn!(partition = p, error = %format!("{e:#}"), "could not read the changelog to check for a newer owner: journaled triggers wait");
                None
            }
        }
    }

    async fn process_records(&mut self, batch: Vec<OwnedMessage>) -> Result<()> {
        let started = Instant::now();
        let (records, waited) = (batch.len(), self.telemetry.broker_waited());
        let now = self.time.now();
        // A rebalance reported while this batch was gathered comes first: records of a
        // partition revoked since they were fetched belong to its new owner now.
        while let Ok(change) = self.ownership.try_recv() {
            self.on_ownership(change).await?;
        }
        if let Some(judged) = self.task.judge_clock(batch.iter().map(|m| m as &dyn Record), now) {
            let behind = judged.behind.map_or(0.0, |b| b.as_seconds_f64());
            self.telemetry.clock_behind_inputs(behind);
        }
        let mut staged = Staged::default();
        self.task.stage_due_timers(&mut staged, now)?;
        let owned = self.consumer.assignment().context("reading the assignment")?;
        for message in &batch {
            let (topic, p, offset) = (message.topic(), message.partition(), message.offset());
            let assigned = owned.find_partition(topic, p).is_some();
            match self.task.admit(&mut staged, topic, p, offset, assigned)? {
                Admission::Apply => {}
                Admission::ReadAgainWhenOpen => {
                    self.open(p);
                    // Its fetcher has started (it delivered): pausing it now is safe.
                    if self.openings.skip(topic, p, offset) {
                        let mut list = TopicPartitionList::new();
                        list.add_partition(topic, p);
                        (self.consumer.pause(&list))
                            .with_context(|| format!("pausing {topic} partition {p} while it is opened"))?;
                    }
                    continue;
                }
                _ => continue,
            }
            let Some(kind) = self.settings.topics.input_kind(topic) else {
                continue;
            };
            let role = kind.role();
            let routed = match self.task.route(&mut staged, message, role, now)? {
                Routed::CheckMark(mark) => {
                    let (quirks, partitions) = (self.settings.kafka.quirks(), self.task.settings().partitions);
                    let checked = self
                        .ends
                        .check(&self.consumer, quirks, partitions, topic, p, mark)
                        .await;
                    self.task.route_marked(&mut staged, message, role, checked, now)?
                }
                routed => routed,
            };
            match routed {
                Routed::Here => {}
                Routed::Forwarded { owner } => {
                    if let Some(key) = message.key() {
                        self.warned.misrouted(topic, key, p, owner);
                    }
                    continue;
                }
                Routed::Elsewhere | Routed::CheckMark(_) => continue,
            }
            let (pipeline, input) = self.read(kind, message).await;
            let origin = origin_of(role, p, offset, &input);
            self.task
                .decide(&mut staged, p, &pipeline, &input, &origin, now, Some(message))?;
        }
        self.flush(staged).await?;
        let took = started.elapsed();
        self.telemetry
            .records_done(records, took, self.telemetry.broker_waited() - waited);
        self.repair_now().await?;
        self.resume_triggers().await?;
        self.telemetry.batch_latency(started.elapsed().as_secs_f64());
        Ok(())
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
            match read_input(
                codec,
                kind,
                message,
                self.task.settings().partitions,
                &self.settings.decider.limits,
            )
            .await
            {
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
        // A rebalance reported meanwhile comes first: a revoked partition's timers are its
        // new owner's to fire.
        while let Ok(change) = self.ownership.try_recv() {
            self.on_ownership(change).await?;
        }
        let mut staged = Staged::default();
        self.task.stage_due_timers(&mut staged, self.time.now())?;
        self.flush(staged).await?;
        self.repair_now().await?;
        self.telemetry.batch_latency(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Reads the clock against the monotonic one: a step is said (and, forward, holds
    /// retention expiry: see [`Task::stage_due_timers`]).
    fn watch_clock(&mut self) {
        if let Some(step) = self.task.watch_clock(self.settings.clock.now(), self.started.elapsed()) {
            self.telemetry.clock_stepped(step.by.as_seconds_f64());
        }
    }

    /// Counts what a batch counted.
    fn tell(&self, tallies: &Tallies) {
        for (topic, n) in &tallies.records_in {
            self.telemetry.records_in(topic, *n);
        }
        for (topic, n) in &tallies.forwarded {
            self.telemetry.forwarded(topic, *n);
        }
        for (topic, n) in &tallies.forwarded_duplicates {
            self.telemetry.forwarded_duplicates(topic, *n);
        }
        for (topic, kind) in &tallies.dead_letters {
            self.telemetry.dead_letter(topic, kind);
        }
        for late in &tallies.timers_late {
            self.telemetry.timer_late(*late);
        }
        if let Some(held) = tallies.expiries_held {
            self.telemetry.expiries_held(held);
        }
    }

    /// Tells the read models what a durable batch changed.
    fn learn(&mut self, learned: Learned) {
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
    }

    /// Writes a batch out in the order its [`Flush`] gives (see core::batch): outputs, end
    /// markers, state, offsets, effects; stopping when the assignment is lost or a newer
    /// owner's fence shows.
    async fn flush(&mut self, staged: Staged) -> Result<()> {
        let mut sealed = self.task.seal(staged)?;
        self.tell(&sealed.tallies);
        let mut offsets = self.input_offsets(&sealed.commits)?;
        let committing = Instant::now();
        // Held up by the broker (acknowledgements, retries, a transaction), not stuck.
        let telemetry = self.telemetry.clone();
        let mut waiting = Some(telemetry.awaiting_broker());
        let first = sealed.first_changelog;
        loop {
            match sealed.flush.poll() {
                // A zombie that already knows writes nothing.
                Action::Produce if self.lost_partitions("its outputs") => sealed.flush.on_lost(),
                Action::Produce => {
                    let delivered = self.produce_all(&mut sealed.outputs).await?;
                    let lost = self.lost_partitions("its end markers");
                    (sealed.flush).on_produced(&delivered[first..], lost, &mut self.task.writers());
                }
                Action::ReadChangelog { partition, ranges } => {
                    let entries = self.read_changelog(partition, &ranges).await;
                    if let Some(Checked::Owner { stale: 1.. }) =
                        sealed.flush.on_read(entries.as_deref(), &mut self.task.writers())
                    {
                        warn!(partition, ?ranges, "another writer wrote to this partition's changelog: its writes do not count, and are written over with the next batch");
                    }
                }
                Action::ProduceMarkers(markers) => {
                    let mut outputs = self.task.marker_outputs(&markers);
                    let landed = self.produce_all(&mut outputs).await?;
                    let lost = self.lost_partitions("its state");
                    sealed.flush.on_markers(&landed, lost, &mut self.task.writers());
                }
                Action::ReadFenceOffsets => {
                    offsets = self.fence_offsets();
                    sealed.flush.on_fence_offsets();
                }
                Action::Transact => {
                    let landed = self
                        .produce_in_transaction(&sealed.outputs, first, &sealed.flush, offsets.as_ref())
                        .await?;
                    let lost = self.lost_partitions("its state");
                    sealed.flush.on_transacted(&landed, lost);
                }
                Action::WriteStores(counted) => {
                    waiting = None;
                    self.telemetry.commit_latency(committing.elapsed().as_secs_f64());
                    let learned = self
                        .task
                        .write_stores(&mut sealed, &counted, self.settings.clock.now())?;
                    self.learn(learned);
                    let lost = self.lost_partitions("its effects");
                    sealed.flush.on_stored(lost, &mut self.task.writers());
                }
                Action::CommitOffsets => {
                    if let Some(list) = offsets.take() {
                        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
                            warn!(error = %e, "offset commit failed; the applied-offset watermark prevents double application");
                        }
                        self.last_commit = Some(list);
                    }
                    sealed.flush.on_committed();
                }
                Action::StartEffects => {
                    self.executor.end(&std::mem::take(&mut sealed.ended_runs));
                    for (p, effect) in std::mem::take(&mut sealed.effects) {
                        self.executor.spawn(effect, p);
                    }
                    sealed.flush.on_started();
                }
                Action::GiveUp(fenced) => return Err(self.task.give_up(fenced.into_iter().collect()).into()),
                Action::Abandon => return Ok(()),
                Action::ChangelogWentBack { partition } => return Err(self.task.changelog_went_back(partition).into()),
                Action::Done => break,
            }
        }
        drop(waiting);
        self.telemetry.timers_pending(self.task.timers_pending() as i64);
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
                        let size = omit_value(&mut outputs[i]);
                        warn!(size, "dead letter too large for the broker: sent without its value");
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
                let markers = self.task.marker_outputs(&flush.markers(&delivered[first_changelog..]));
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

/// Release keys drawn from the operating system's random source (see
/// `TriggerRequest::release_key`).
struct OsKeys;

impl ReleaseKeys for OsKeys {
    fn next_key(&mut self) -> Option<String> {
        let mut bytes = [0u8; 16];
        // Without a random source the key is left out: the release then needs only the
        // deadline, as before keys were (and says so).
        match getrandom::fill(&mut bytes) {
            Ok(()) => Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
            Err(e) => {
                warn!(error = %e, "no random source for a trigger's release key");
                None
            }
        }
    }
}

/// How long reading the group's committed offsets (a fence for a batch of timers) may take.
const FENCE_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The dead letter of a record (the alerts forwarder's too).
pub(crate) use crate::core::task::dead_letter;

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
