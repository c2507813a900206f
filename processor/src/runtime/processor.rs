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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::ValueEnum;
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use tokio::sync::mpsc::{self, unbounded_channel, UnboundedReceiver};
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::api::Query;
use super::clock::{wake_in, Clock, Monotonic};
use super::codec::Codec;
use super::collector::Collector;
use super::effects::{Executor, InFlight, OsKeys, Settings as EffectSettings};
use super::error::{self as runtime_error, FatalClient};
use super::forwarding::{Ends, Misrouted, Warned};
use super::input::{read_patiently, Patience};
use super::kafka::{self, Connection};
use super::opening::{Opened, Openings};
use super::outputs::Encoder;
use super::read_models::ReadModels;
use super::rebalance::{Ownership, RebalanceContext};
use super::recent::TailReader;
pub use super::shutdown::shutdown_signal;
use super::shutdown::{finish, Finished};
use super::tasks::TaskManager;
use super::telemetry::Telemetry;
use super::topics::Topics;
use crate::core::batch::Action;
use crate::core::changelog::Checked;
use crate::core::lifecycle::Settings as DeciderSettings;
use crate::core::partitioning::PartitionId;
use crate::core::task::{self, origin_of, Record, Staged, Take, Task};

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

/// API questions answered in a row before input and due timers get their turn: a flood of
/// questions cannot hold processing back, and questions still get answers under load.
const QUERY_SHARE: u32 = 16;

pub struct Processor {
    settings: Settings,
    consumer: StreamConsumer<RebalanceContext>,
    /// Produces the batches' outputs (and transactions).
    collector: Collector,
    ownership: UnboundedReceiver<Ownership>,
    /// The partition task, its ownership and opening.
    tasks: TaskManager,
    /// The API's read models.
    read_models: ReadModels,
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
    /// Keys logged as misrouted (once each).
    warned: Warned,
    /// API questions, answered between batches (see [`api`]).
    queries: mpsc::Receiver<Query>,
    query_sender: mpsc::Sender<Query>,
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
        let collector = Collector::start(&settings, &telemetry)?;
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
        let tasks = TaskManager::new(
            task,
            openings,
            settings.kafka.clone(),
            settings.topics.clone(),
            telemetry.clone(),
        );
        let read_models = ReadModels::new(tail, telemetry.clone());
        Ok(Processor {
            settings,
            consumer,
            collector,
            ownership,
            tasks,
            read_models,
            executor,
            telemetry,
            time,
            answered: 0,
            ends: Ends::default(),
            last_commit: None,
            started: Instant::now(),
            warned: Warned::default(),
            queries,
            query_sender,
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
    pub fn owned_partitions(&self) -> watch::Receiver<Vec<PartitionId>> {
        self.read_models.owned_partitions()
    }

    /// Runs until `shutdown` resolves or a fatal error, then closes cleanly either way.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        let result = self.process(shutdown).await;
        if let Err(e) = &result {
            match runtime_error::Stop::of(e) {
                Some(stop) => warn!(stop = stop.name(), "stopping: {e:#}"),
                None => error!("fatal: {e:#}"),
            }
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
            let next_due = self.tasks.task.next_due();
            let wait = next_due.map(|at| wake_in(self.settings.clock.now(), at));
            let timer_armed = wait.is_some();
            let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
            tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(()),
                Some(change) = self.ownership.recv() => self.on_ownership(change)?,
                (p, result) = self.tasks.openings.next() => self.opened(p, result).await?,
                // API questions get a bounded share of the loop: after QUERY_SHARE answers in
                // a row, input and timers go first (the branch at the end lets questions in
                // again when neither has anything).
                Some(query) = self.queries.recv(), if self.answered < QUERY_SHARE => {
                    self.answered += 1;
                    let instance = &self.settings.instance;
                    self.read_models.answer(query, &self.tasks.task, &self.tasks.openings, instance)?
                }
                Some((p, events)) = self.read_models.tail_loaded() => {
                    // A partition revoked meanwhile is someone else's to show.
                    if self.tasks.task.is_open(p) {
                        self.read_models.backfill(events);
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
                _ = resume.tick(), if self.tasks.task.triggers_waiting() => self.resume_triggers().await?,
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
                _ = watch.tick(), if !self.tasks.task.owned().is_empty() => {
                    self.tasks.watch_changelogs()?;
                    self.repair_now().await?
                }
                () = std::future::ready(()), if self.answered >= QUERY_SHARE => self.answered = 0,
                _ = heartbeat.tick() => {
                    for (p, store) in self.tasks.task.stores() {
                        self.telemetry.state_size(p, store.estimated_bytes());
                        self.telemetry.state_reads(store.take_state_reads());
                    }
                }
            }
        }
    }

    /// Ends the run on a client's fatal error: no retry mends one. A consumer whose static
    /// membership a newer process with the same `--instance` took (FENCED_INSTANCE_ID), or a
    /// fenced producer, would otherwise log and go on as a zombie.
    fn check_fatal(&self, e: &KafkaError) -> Result<()> {
        let fatal = (self.consumer.client().fatal_error())
            .or_else(|| self.collector.producer().current().client().fatal_error());
        let fenced = e.rdkafka_error_code() == Some(RDKafkaErrorCode::FencedInstanceId);
        match (fatal, fenced) {
            (Some((code, reason)), _) => Err(FatalClient(format!("a Kafka client hit a fatal error ({code:?}: {reason}); another process may have taken this instance's identity (--instance)")).into()),
            (None, true) => Err(FatalClient(format!("the group fenced this instance ({e}): another process joined with the same --instance")).into()),
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
            collector,
            mut tasks,
            ..
        } = self;
        tasks.openings.cancel_all();
        let producer = collector.into_producer();
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

    /// Partitions assigned or revoked (see [`TaskManager::on_ownership`]).
    fn on_ownership(&mut self, change: Ownership) -> Result<()> {
        let changed = self.tasks.on_ownership(&self.consumer, change);
        self.read_models.owned_changed(&self.tasks.task);
        changed
    }

    /// Installs a partition opened in the background (see [`TaskManager::opened`]), then
    /// writes its repairs and settles its journaled triggers.
    async fn opened(&mut self, p: PartitionId, result: Result<Opened, runtime_error::Error>) -> Result<()> {
        if self.tasks.opened(&self.consumer, p, result, self.time.now())? {
            self.read_models.opened(p);
        }
        self.read_models.owned_changed(&self.tasks.task);
        self.repair_now().await?;
        self.resume_triggers().await
    }

    /// Writes the keys a restore named stale, or another writer wrote over, at once (a batch
    /// of repairs alone) rather than with the next input: until then compaction could remove
    /// the value such a write shadows (the changelog keeps records for `min.compaction.lag.ms`
    /// only). Found by the simulator (`sim`).
    async fn repair_now(&mut self) -> Result<()> {
        if self.tasks.task.has_repairs() {
            self.flush(Staged::default()).await?;
        }
        Ok(())
    }

    /// Requests again the journaled triggers that wait for nothing more (see
    /// [`TaskManager::triggers_due`]).
    async fn resume_triggers(&mut self) -> Result<()> {
        let again = self.tasks.triggers_due(&self.consumer, self.time.now())?;
        if !again.is_empty() {
            self.flush(again).await?;
        }
        Ok(())
    }

    async fn process_records(&mut self, batch: Vec<OwnedMessage>) -> Result<()> {
        let started = Instant::now();
        let (records, waited) = (batch.len(), self.telemetry.broker_waited());
        let now = self.time.now();
        // A rebalance reported while this batch was gathered comes first: records of a
        // partition revoked since they were fetched belong to its new owner now.
        while let Ok(change) = self.ownership.try_recv() {
            self.on_ownership(change)?;
        }
        if let Some(judged) = self.tasks.task.judge_clock(batch.iter().map(|m| m as &dyn Record), now) {
            let behind = judged.behind.map_or(0.0, |b| b.as_seconds_f64());
            self.telemetry.clock_behind_inputs(behind);
        }
        let mut staged = Staged::default();
        self.tasks.task.stage_due_timers(&mut staged, now)?;
        let owned = self.consumer.assignment().context("reading the assignment")?;
        for message in &batch {
            let (topic, p, offset) = (message.topic(), message.partition(), message.offset());
            let Some(kind) = self.settings.topics.input_kind(topic) else {
                continue;
            };
            let (role, assigned) = (kind.role(), owned.find_partition(topic, p.number()).is_some());
            let task = &mut self.tasks.task;
            let take = match task.take(&mut staged, message, role, assigned, now)? {
                Take::CheckMark(mark) => {
                    let (quirks, partitions) = (self.settings.kafka.quirks(), task.settings().partitions);
                    let checked = (self.ends)
                        .check(&self.consumer, quirks, partitions, topic, p, mark)
                        .await;
                    task.take_marked(&mut staged, message, role, checked, now)?
                }
                take => take,
            };
            match take {
                Take::Decode => {}
                Take::ReadAgainWhenOpen => {
                    self.tasks.skip(&self.consumer, topic, p, offset)?;
                    continue;
                }
                Take::Forwarded { owner } => {
                    if let Some(key) = message.key() {
                        self.warned.misrouted(topic, key, p, owner);
                    }
                    continue;
                }
                Take::Done | Take::CheckMark(_) => continue,
            }
            let patience = Patience {
                codec: &self.settings.codec,
                partitions: self.tasks.task.settings().partitions,
                limits: self.settings.decider.limits,
                record_patience: self.settings.record_patience,
            };
            let (pipeline, input) = read_patiently(kind, message, patience, &self.telemetry).await;
            let origin = origin_of(role, p, offset, &input);
            (self.tasks.task).decide(&mut staged, p, &pipeline, &input, &origin, now, Some(message))?;
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

    async fn fire_due_timers(&mut self) -> Result<()> {
        let started = Instant::now();
        // A rebalance reported meanwhile comes first: a revoked partition's timers are its
        // new owner's to fire.
        while let Ok(change) = self.ownership.try_recv() {
            self.on_ownership(change)?;
        }
        let mut staged = Staged::default();
        self.tasks.task.stage_due_timers(&mut staged, self.time.now())?;
        self.flush(staged).await?;
        self.repair_now().await?;
        self.telemetry.batch_latency(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Reads the clock against the monotonic one: a step is said (and, forward, holds
    /// retention expiry: see [`Task::stage_due_timers`]).
    fn watch_clock(&mut self) {
        if let Some(step) = self
            .tasks
            .task
            .watch_clock(self.settings.clock.now(), self.started.elapsed())
        {
            self.telemetry.clock_stepped(step.by.as_seconds_f64());
        }
    }

    /// Writes a batch out in the order its [`Flush`] gives (see core::batch): outputs, end
    /// markers, state, offsets, effects; stopping when the assignment is lost or a newer
    /// owner's fence shows.
    async fn flush(&mut self, staged: Staged) -> Result<()> {
        let mut sealed = self.tasks.task.seal(staged)?;
        self.telemetry.tallied(&sealed.tallies);
        let mut offsets = Collector::input_offsets(&sealed.commits)?;
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
                    let delivered = self.collector.produce_all(&mut sealed.outputs).await?;
                    let lost = self.lost_partitions("its end markers");
                    (sealed.flush).on_produced(&delivered[first..], lost, &mut self.tasks.task.writers());
                }
                Action::ReadChangelog { partition, ranges } => {
                    let entries = self.tasks.read_changelog(&self.consumer, partition, &ranges).await;
                    if let Some(Checked::Owner { stale: 1.. }) =
                        sealed.flush.on_read(entries.as_deref(), &mut self.tasks.task.writers())
                    {
                        warn!(partition = partition.number(), ?ranges, "another writer wrote to this partition's changelog: its writes do not count, and are written over with the next batch");
                    }
                }
                Action::ReadEnd { partition } => {
                    let end = self.tasks.changelog_end(&self.consumer, partition).await;
                    sealed.flush.on_end(end, &mut self.tasks.task.writers());
                }
                Action::ProduceMarkers(markers) => {
                    let mut outputs = self.tasks.task.marker_outputs(&markers);
                    let landed = self.collector.produce_all(&mut outputs).await?;
                    let lost = self.lost_partitions("its state");
                    sealed.flush.on_markers(&landed, lost, &mut self.tasks.task.writers());
                }
                Action::ReadFenceOffsets => {
                    offsets = self.collector.fence_offsets(&self.consumer);
                    sealed.flush.on_fence_offsets();
                }
                Action::Transact => {
                    let (consumer, task) = (&self.consumer, &self.tasks.task);
                    let transacted = (self.collector)
                        .produce_in_transaction(consumer, task, &sealed, offsets.as_ref())
                        .await?;
                    match transacted {
                        Some(landed) => {
                            let lost = self.lost_partitions("its state");
                            sealed.flush.on_transacted(&landed, lost);
                        }
                        None => sealed.flush.on_transacted(&[], true),
                    }
                }
                Action::WriteStores(counted) => {
                    waiting = None;
                    self.telemetry.commit_latency(committing.elapsed().as_secs_f64());
                    let learned = (self.tasks.task).write_stores(&mut sealed, &counted, self.settings.clock.now())?;
                    self.read_models.learn(learned);
                    let lost = self.lost_partitions("its effects");
                    sealed.flush.on_stored(lost, &mut self.tasks.task.writers());
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
                Action::GiveUp(fenced) => return Err(self.tasks.task.give_up(fenced.into_iter().collect()).into()),
                Action::Abandon => return Ok(()),
                Action::ChangelogWentBack { partition } => {
                    return Err(self.tasks.task.changelog_went_back(partition).into())
                }
                Action::Done => break,
            }
        }
        drop(waiting);
        self.telemetry.timers_pending(self.tasks.task.timers_pending() as i64);
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
}
