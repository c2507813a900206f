//! `sluice run`: the processing loop.
//!
//! Per batch of input records (or of due timers): decode → decide → then, in this order,
//! produce events and dead letters and wait for their acks, write the RocksDB batch (state,
//! timers and the applied offset of every input partition) atomically, commit consumer
//! offsets, and only then start the effects. After a crash, records at or below the applied
//! offset are skipped, so no input is applied twice; re-sent events carry the same id.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use chrono::{DateTime, Utc};
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tracing::{debug, error, info, warn};

use super::effects::Executor;
use super::kafka;
use super::store::{PartitionStore, StoreBatch};
use super::timers::TimerIndex;
use super::topics::{InputTopic, Topics};
use crate::core::lifecycle::{
    decide, Context, Decision, Effect, Input, OutboundTopic, Settings as DeciderSettings, StateChange,
};
use crate::core::records;
use crate::core::timers::TimerOp;
use crate::core::PipelineState;

#[derive(Debug, Clone)]
pub struct Settings {
    pub brokers: String,
    pub group: String,
    pub topics: Topics,
    pub state_dir: PathBuf,
    pub batch_size: usize,
    pub max_concurrent_triggers: usize,
    pub shutdown_grace: Duration,
    pub decider: DeciderSettings,
}

/// Partition ownership changes, reported by librdkafka during polls.
enum Ownership {
    Assigned(Vec<i32>),
    Revoked(Vec<i32>),
}

struct RebalanceContext {
    tx: UnboundedSender<Ownership>,
}

impl ClientContext for RebalanceContext {}

fn partitions_of(list: &TopicPartitionList) -> Vec<i32> {
    let mut ps: Vec<i32> = list.elements().iter().map(|e| e.partition()).collect();
    ps.sort_unstable();
    ps.dedup();
    ps
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let _ = self.tx.send(Ownership::Revoked(partitions_of(list)));
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

/// A record to produce: an event or a dead letter.
struct Output {
    topic: String,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

/// What one batch has decided, not yet written anywhere.
#[derive(Default)]
struct Pending {
    /// Latest state per (partition, pipeline); `None` = deleted.
    states: HashMap<(i32, String), Option<PipelineState>>,
    outputs: Vec<Output>,
    stores: BTreeMap<i32, StoreBatch>,
    commits: BTreeMap<(String, i32), i64>,
    effects: Vec<Effect>,
}

/// Time for the decider: the wall clock, never allowed to go backwards.
struct Clock {
    last: DateTime<Utc>,
}

impl Clock {
    fn now(&mut self) -> DateTime<Utc> {
        self.last = self.last.max(Utc::now());
        self.last
    }
}

pub struct Processor {
    settings: Settings,
    consumer: StreamConsumer<RebalanceContext>,
    producer: FutureProducer,
    ownership: UnboundedReceiver<Ownership>,
    stores: BTreeMap<i32, PartitionStore>,
    timers: TimerIndex,
    executor: Executor,
    clock: Clock,
    last_commit: Option<TopicPartitionList>,
    /// Partition count of every input topic (checked equal at start).
    partitions: i32,
}

impl Processor {
    /// Connects, checks the topics and subscribes.
    pub fn start(settings: Settings) -> Result<Self> {
        let (tx, ownership) = unbounded_channel();
        let consumer: StreamConsumer<RebalanceContext> = kafka::base_config(&settings.brokers)
            .set("group.id", &settings.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            // Range assignment gives partition N of every input to the same member: the
            // co-partitioning that lets one task own a pipeline. Sticky/cooperative
            // assignors do not promise that.
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", "10000")
            // The broker may hold a fetch this long when there is nothing new; it bounds how
            // long a record (a job report, say) waits before the processor sees it.
            .set("fetch.wait.max.ms", "50")
            .create_with_context(RebalanceContext { tx })
            .context("creating Kafka consumer")?;
        let inputs = settings.topics.inputs();
        let counts = kafka::partition_counts(consumer.client(), &inputs)?;
        let partitions = kafka::check_copartitioned(&counts)?;
        kafka::partition_counts(consumer.client(), &[&settings.topics.events, &settings.topics.dlq])?;
        consumer.subscribe(&inputs).context("subscribing to input topics")?;
        info!(partitions, group = %settings.group, brokers = %settings.brokers, "subscribed to {}", inputs.join(", "));
        let producer = kafka::producer(&settings.brokers)?;
        let executor = Executor::new(
            producer.clone(),
            settings.topics.jobs.clone(),
            settings.max_concurrent_triggers,
        )?;
        std::fs::create_dir_all(&settings.state_dir)
            .with_context(|| format!("creating state dir {}", settings.state_dir.display()))?;
        Ok(Processor {
            settings,
            consumer,
            producer,
            ownership,
            stores: BTreeMap::new(),
            timers: TimerIndex::default(),
            executor,
            clock: Clock {
                last: DateTime::<Utc>::MIN_UTC,
            },
            last_commit: None,
            partitions: partitions as i32,
        })
    }

    /// Runs until `shutdown` resolves, then finishes the batch at hand and closes cleanly.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        loop {
            let wait = self
                .timers
                .next_due()
                .map(|at| (at - Utc::now()).to_std().unwrap_or(Duration::ZERO));
            let timer_armed = wait.is_some();
            let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                Some(change) = self.ownership.recv() => self.on_ownership(change)?,
                message = self.consumer.recv() => match message {
                    Ok(m) => {
                        let mut batch = vec![m.detach()];
                        while batch.len() < self.settings.batch_size {
                            match self.consumer.recv().now_or_never() {
                                Some(Ok(m)) => batch.push(m.detach()),
                                Some(Err(e)) => { warn!(error = %e, "consumer error"); break }
                                None => break,
                            }
                        }
                        self.process_records(batch).await?;
                    }
                    Err(e) => {
                        warn!(error = %e, "consumer error; librdkafka retries");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                },
                _ = sleep, if timer_armed => self.fire_due_timers().await?,
            }
        }
        info!("shutting down: waiting for in-flight triggers");
        self.executor.drain(self.settings.shutdown_grace).await;
        self.close().await;
        info!("stopped cleanly");
        Ok(())
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
        let Processor { consumer, producer, .. } = self;
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            use rdkafka::producer::Producer;
            let _ = producer.flush(STEP);
            consumer.unsubscribe();
            drop(consumer);
            let _ = done_tx.send(());
        });
        if tokio::time::timeout(STEP * 2, done_rx).await.is_err() {
            warn!("the Kafka clients did not close in time (is the broker down?); exiting anyway");
        }
    }

    fn on_ownership(&mut self, change: Ownership) -> Result<()> {
        match change {
            Ownership::Assigned(ps) => {
                for p in ps {
                    self.open_partition(p)?;
                }
            }
            Ownership::Revoked(ps) => {
                for p in ps {
                    if self.stores.remove(&p).is_some() {
                        self.timers.drop_partition(p);
                        info!(partition = p, "partition revoked: state closed");
                    }
                }
            }
        }
        Ok(())
    }

    fn open_partition(&mut self, p: i32) -> Result<()> {
        if self.stores.contains_key(&p) {
            return Ok(());
        }
        let store = PartitionStore::open(&self.settings.state_dir, p)?;
        let timers = store.timers()?;
        for t in &timers {
            self.timers.set(p, &t.pipeline, &t.kind, t.at);
        }
        info!(partition = p, timers = timers.len(), path = %store.path().display(), "partition assigned: state opened");
        self.stores.insert(p, store);
        Ok(())
    }

    /// Loads a pipeline's state: from this batch if it touched it, else from the store.
    fn state(&self, pending: &Pending, p: i32, pipeline: &str) -> Result<PipelineState> {
        if let Some(state) = pending.states.get(&(p, pipeline.to_string())) {
            return Ok(state.clone().unwrap_or_default());
        }
        Ok(self.stores[&p].pipeline(pipeline)?.unwrap_or_default())
    }

    async fn process_records(&mut self, batch: Vec<OwnedMessage>) -> Result<()> {
        let now = self.clock.now();
        let mut pending = Pending::default();
        for message in &batch {
            let (topic, p, offset) = (message.topic().to_string(), message.partition(), message.offset());
            self.open_partition(p)?;
            pending.commits.insert((topic.clone(), p), offset);
            if self.stores[&p]
                .applied_offset(&topic)
                .is_some_and(|applied| offset <= applied)
            {
                debug!(%topic, p, offset, "already applied: skipped");
                continue;
            }
            pending.stores.entry(p).or_default().set_applied_offset(&topic, offset);
            let Some(kind) = self.settings.topics.input_kind(&topic) else {
                continue;
            };
            let origin = format!("{topic}/{p}@{offset}");
            let (pipeline, input) = decode(kind, message, &origin, self.partitions);
            let state = self.state(&pending, p, &pipeline)?;
            let decision = decide(
                &state,
                &pipeline,
                &input,
                Context {
                    now,
                    origin: &origin,
                    settings: self.settings.decider,
                },
            );
            self.stage(&mut pending, p, &pipeline, decision, Some(message))?;
        }
        self.flush(pending).await
    }

    async fn fire_due_timers(&mut self) -> Result<()> {
        let now = self.clock.now();
        let mut pending = Pending::default();
        for timer in self.timers.pop_due(now, self.settings.batch_size) {
            let (p, pipeline) = (timer.partition, timer.pipeline.clone());
            pending
                .stores
                .entry(p)
                .or_default()
                .delete_timer(timer.at, &pipeline, &timer.kind);
            let origin = format!(
                "timer/{pipeline}/{}@{}",
                timer.kind.encode(),
                timer.at.timestamp_millis()
            );
            let state = self.state(&pending, p, &pipeline)?;
            let decision = decide(
                &state,
                &pipeline,
                &Input::TimerFired(timer.kind),
                Context {
                    now,
                    origin: &origin,
                    settings: self.settings.decider,
                },
            );
            self.stage(&mut pending, p, &pipeline, decision, None)?;
        }
        self.flush(pending).await
    }

    /// Adds one decision to the batch: outputs, state, timers and effects.
    fn stage(
        &mut self,
        pending: &mut Pending,
        p: i32,
        pipeline: &str,
        decision: Decision,
        source: Option<&OwnedMessage>,
    ) -> Result<()> {
        for note in &decision.notes {
            debug!(pipeline, "{note}");
        }
        for event in &decision.events {
            info!(
                pipeline,
                event = event.kind.name(),
                date = event.date.as_deref().unwrap_or(""),
                "{}",
                event.message
            );
            pending.outputs.push(Output {
                topic: self.settings.topics.events.clone(),
                key: Some(pipeline.as_bytes().to_vec()),
                value: Some(serde_json::to_vec(event)?),
                headers: vec![("type".into(), event.kind.name().as_bytes().to_vec())],
            });
        }
        if let (Some(reason), Some(message)) = (&decision.dead_letter, source) {
            pending
                .outputs
                .push(dead_letter(&self.settings.topics.dlq, message, reason));
        }
        let batch = pending.stores.entry(p).or_default();
        match decision.state {
            StateChange::Unchanged => {}
            StateChange::Put(state) => {
                batch.put_pipeline(pipeline, &state)?;
                pending.states.insert((p, pipeline.to_string()), Some(*state));
            }
            StateChange::Delete => {
                batch.delete_pipeline(pipeline);
                pending.states.insert((p, pipeline.to_string()), None);
            }
        }
        for op in decision.timers {
            match op {
                TimerOp::Set { kind, at } => {
                    if let Some(old) = self.timers.set(p, pipeline, &kind, at) {
                        batch.delete_timer(old, pipeline, &kind);
                    }
                    batch.put_timer(at, pipeline, &kind);
                }
                TimerOp::Cancel { kind } => {
                    if let Some(old) = self.timers.cancel(p, pipeline, &kind) {
                        batch.delete_timer(old, pipeline, &kind);
                    }
                }
            }
        }
        for record in &decision.records {
            let topic = match record.topic {
                OutboundTopic::Sensors => &self.settings.topics.sensors,
                OutboundTopic::Commands => &self.settings.topics.commands,
            };
            pending.outputs.push(Output {
                topic: topic.clone(),
                key: Some(record.key.as_bytes().to_vec()),
                value: Some(serde_json::to_vec(&record.value)?),
                headers: Vec::new(),
            });
        }
        pending.effects.extend(decision.effects);
        Ok(())
    }

    /// Events and dead letters acknowledged → state written → offsets committed → effects.
    async fn flush(&mut self, pending: Pending) -> Result<()> {
        self.produce_all(&pending.outputs).await;
        for (p, batch) in pending.stores {
            if batch.is_empty() {
                continue;
            }
            // The partition may have been revoked mid-batch; its new owner redoes the work.
            match self.stores.get_mut(&p) {
                Some(store) => store.write(batch)?,
                None => warn!(partition = p, "partition revoked before its batch was written"),
            }
        }
        if !pending.commits.is_empty() {
            let mut list = TopicPartitionList::new();
            for ((topic, p), offset) in &pending.commits {
                list.add_partition_offset(topic, *p, Offset::Offset(offset + 1))?;
            }
            if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
                warn!(error = %e, "offset commit failed; the applied-offset watermark prevents double application");
            }
            self.last_commit = Some(list);
        }
        for effect in pending.effects {
            self.executor.spawn(effect);
        }
        Ok(())
    }

    /// Produces every output and waits until all are acknowledged, retrying failures: the
    /// batch's state is not written before its events are safe.
    async fn produce_all(&self, outputs: &[Output]) {
        let mut todo: Vec<&Output> = outputs.iter().collect();
        let mut backoff = Duration::from_millis(200);
        while !todo.is_empty() {
            let sends =
                todo.iter().map(|o| {
                    let headers: Vec<(&str, &[u8])> =
                        o.headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
                    async move {
                        kafka::send(&self.producer, &o.topic, o.key.as_deref(), o.value.as_deref(), &headers).await
                    }
                });
            let results = futures::future::join_all(sends).await;
            let mut failed = Vec::new();
            for (output, result) in todo.into_iter().zip(results) {
                if let Err(e) = result {
                    error!(topic = %output.topic, error = %e, "produce failed; retrying");
                    failed.push(output);
                }
            }
            todo = failed;
            if !todo.is_empty() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Decodes an input record into the decider's input; a bad record becomes a rejection.
fn decode(kind: InputTopic, message: &OwnedMessage, origin: &str, partitions: i32) -> (String, Input) {
    let key = message.key();
    let value = message.payload();
    let decoded = records::check_partition(key, message.partition(), partitions).and_then(|()| match kind {
        InputTopic::Config => {
            records::decode_config(key, value).map(|r| (r.pipeline_id().to_string(), Input::ConfigPublished(r)))
        }
        InputTopic::Sensors => {
            records::decode_sensor(key, value).map(|r| (r.pipeline_id.clone(), Input::SensorReceived(r)))
        }
        InputTopic::Jobs => records::decode_job(key, value).map(|r| (r.pipeline_id.clone(), Input::JobReported(r))),
        InputTopic::Commands => {
            records::decode_command(key, value).map(|r| (r.pipeline_id.clone(), Input::CommandReceived(r)))
        }
    });
    decoded.unwrap_or_else(|e| {
        let pipeline = key.map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default();
        (
            pipeline,
            Input::Rejected {
                source: origin.to_string(),
                reason: e.to_string(),
            },
        )
    })
}

fn dead_letter(topic: &str, message: &OwnedMessage, reason: &str) -> Output {
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
    Output {
        topic: topic.to_string(),
        key: message.key().map(<[u8]>::to_vec),
        value: message.payload().map(<[u8]>::to_vec),
        headers,
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
