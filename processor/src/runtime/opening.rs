//! Opening an assigned partition in the background: its store, its fence, its restore from
//! the changelog and its acceptance (see [`crate::core::changelog`]). One partition whose
//! store is locked or whose restore keeps failing must not hold up the others, nor the
//! batches, timers and questions of the partitions already open: each opening is a task of
//! its own, retrying what can be retried, and the processing loop installs its result
//! when it arrives. Whatever of the partition's input is delivered meanwhile is skipped,
//! and read again once the partition is open; a topic-partition that delivers a record is
//! paused until then. Only then: pausing a partition as it is assigned races librdkafka's
//! start of its fetcher, whose start is then dropped as outdated, and the partition is
//! never read (librdkafka issues 2190 and 5591; seen here as one input partition of a
//! fresh instance never read). A partition that has delivered a record has started.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tracing::warn;

use super::changelog::{self, Restored};
use super::error::{Error, Fatal, Result};
use super::kafka;
use super::processor::{Guarantee, Settings};
use super::store::{PartitionStore, StoreBatch, StoredTimer};
use super::telemetry::Telemetry;
use crate::core::changelog::{Checked, Writer};
use crate::core::lifecycle::Effect;
use crate::core::partitioning::PartitionId;
use crate::runtime::backoff::Backoff;

/// Restores running at once: each holds a consumer with its fetch buffers.
const CONCURRENT_RESTORES: usize = 4;

/// A partition opened and ready to be installed.
pub struct Opened {
    pub store: PartitionStore,
    pub restored: Restored,
    /// This owner's side of the changelog (its epoch from its fence, no batch written yet),
    /// with the keys its first batch writes again.
    pub writer: Writer,
    /// The journaled triggers found, and where the jobs topic ended once the state was
    /// restored: their reports, if any, lie below it.
    pub journaled: Vec<(String, Effect)>,
    pub jobs_end: i64,
    /// The timers its states hold, for the index.
    pub timers: Vec<StoredTimer>,
    /// A newer owner fenced the partition while it was being opened: it is not installed.
    pub fenced: bool,
}

/// The state of an input partition is ahead of the partition itself: the input topic was
/// recreated, and every new record up to the old watermark would be skipped as applied.
#[derive(Debug, thiserror::Error)]
#[error("partition {partition} of {topic} ends at offset {end}, but its state says it applied up to offset {applied}: the topic was recreated (or lost records), and its new records would be skipped as already applied. Stop every instance, then rebuild the state with `sluice reset --from-scratch`, or delete the state directories and the changelog too if the old state is not wanted")]
pub struct InputAhead {
    pub topic: String,
    pub partition: PartitionId,
    pub applied: i64,
    pub end: i64,
}

/// The revocation of a partition stopped its opening.
#[derive(Debug, thiserror::Error)]
#[error("partition {0} was revoked while it was being opened")]
pub struct Cancelled(pub PartitionId);

struct Task {
    cancelled: Arc<AtomicBool>,
    /// Assigned again after the cancel: opened anew once the cancelled task has let go of
    /// the store (its fence is older than whatever the partition saw meanwhile).
    again: bool,
}

/// The partitions being opened, and their results as they arrive.
pub struct Openings {
    settings: Arc<Settings>,
    control: kafka::RenewableProducer,
    telemetry: Arc<Telemetry>,
    restores: Arc<Semaphore>,
    tasks: BTreeMap<PartitionId, Task>,
    /// Per (input topic, partition) being opened, the first offset delivered and skipped.
    skipped: BTreeMap<(String, PartitionId), i64>,
    results: UnboundedReceiver<(PartitionId, Result<Opened>)>,
    sender: UnboundedSender<(PartitionId, Result<Opened>)>,
}

impl Openings {
    pub fn new(settings: Settings, control: kafka::RenewableProducer, telemetry: Arc<Telemetry>) -> Self {
        let (sender, results) = unbounded_channel();
        Openings {
            settings: Arc::new(settings),
            control,
            telemetry,
            restores: Arc::new(Semaphore::new(CONCURRENT_RESTORES)),
            tasks: BTreeMap::new(),
            skipped: BTreeMap::new(),
            results,
            sender,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Whether `p` is being opened for this owner (not merely finishing a cancelled task).
    pub fn contains(&self, p: PartitionId) -> bool {
        self.tasks.get(&p).is_some_and(|t| !t.cancelled.load(Ordering::Relaxed))
    }

    /// Starts opening `p`, unless it already is.
    pub fn start(&mut self, p: PartitionId) {
        match self.tasks.get_mut(&p) {
            Some(task) if task.cancelled.load(Ordering::Relaxed) => task.again = true,
            Some(_) => {}
            None => self.spawn(p),
        }
    }

    fn spawn(&mut self, p: PartitionId) {
        let cancelled = Arc::new(AtomicBool::new(false));
        let opening = Opening {
            settings: self.settings.clone(),
            control: self.control.clone(),
            telemetry: self.telemetry.clone(),
            partition: p,
            cancelled: cancelled.clone(),
        };
        let (restores, sender) = (self.restores.clone(), self.sender.clone());
        tokio::spawn(async move {
            let result = async {
                let _turn = restores.acquire().await.context("restores closed")?;
                opening.run().await
            }
            .await;
            let _ = sender.send((p, result));
        });
        self.tasks.insert(
            p,
            Task {
                cancelled,
                again: false,
            },
        );
    }

    /// Stops opening `p` (revoked): its result, when it comes, is dropped. Returns the
    /// input topics whose partition `p` was paused meanwhile: librdkafka keeps a pause
    /// across a revocation, so the caller resumes them (assigned here again, they must be
    /// read).
    pub fn cancel(&mut self, p: PartitionId) -> Vec<String> {
        if let Some(task) = self.tasks.get_mut(&p) {
            task.cancelled.store(true, Ordering::Relaxed);
            task.again = false;
        }
        self.take_skipped(p).into_iter().map(|(topic, _)| topic).collect()
    }

    /// Stops every opening (the processor is stopping).
    pub fn cancel_all(&mut self) {
        let ps: Vec<PartitionId> = self.tasks.keys().copied().collect();
        for p in ps {
            self.cancel(p);
        }
    }

    /// Notes that an input record of `p` was delivered while `p` is being opened: it is
    /// read again from there once `p` is open. True for the first of its topic-partition:
    /// the caller pauses that topic-partition until then (see the module's comment).
    pub fn skip(&mut self, topic: &str, p: PartitionId, offset: i64) -> bool {
        match self.skipped.get_mut(&(topic.to_string(), p)) {
            Some(first) => {
                *first = (*first).min(offset);
                false
            }
            None => {
                self.skipped.insert((topic.to_string(), p), offset);
                true
            }
        }
    }

    /// The next opening to finish for this owner: a cancelled one's result is dropped here
    /// (its store closed), and its partition opened anew if it was assigned again.
    pub async fn next(&mut self) -> (PartitionId, Result<Opened>) {
        loop {
            let (p, result) = self.results.recv().await.expect("the sender lives in self");
            let Some(task) = self.tasks.remove(&p) else { continue };
            if !task.cancelled.load(Ordering::Relaxed) {
                return (p, result);
            }
            drop(result);
            if task.again {
                self.spawn(p);
            }
        }
    }

    /// The first offsets of `p`'s input delivered while it was being opened: the
    /// topic-partitions paused since, to resume and read again from there.
    pub fn take_skipped(&mut self, p: PartitionId) -> Vec<(String, i64)> {
        let taken: Vec<(String, i64)> = self
            .skipped
            .iter()
            .filter(|((_, q), _)| *q == p)
            .map(|((topic, _), offset)| (topic.clone(), *offset))
            .collect();
        self.skipped.retain(|(_, q), _| *q != p);
        taken
    }
}

/// How long reading the tail of an input partition may take when its end looks to lie
/// before what the state applied.
const CONFIRM_WITHIN: Duration = Duration::from_secs(10);

/// A reader that reports reaching a partition's end, for [`holds`].
fn tail_reader(kafka: &kafka::Connection) -> anyhow::Result<kafka::Reader> {
    kafka::Reader::create(
        kafka::restore_reader(kafka)
            .set("enable.partition.eof", "true")
            // The end is told by a fetch that comes back empty, which the broker holds this
            // long: librdkafka's default (500 ms) for each input topic was half of a restore of
            // 100,000 pipelines (2.5 s between the changelog read and the partition opened).
            .set("fetch.wait.max.ms", "10"),
        kafka,
    )
    .context("creating the input tail reader")
}

/// Whether `topic`'s partition `p` holds a record at `offset` or after, read from its last
/// record (`end` - 1, or `low`) on: `false` once the reader reaches the partition's end
/// without one; an error (retried) when the broker does not answer. Reading, not the
/// watermark alone, decides: tansu 0.6 reports the end of a multi-record batch short.
fn holds(
    reader: &kafka::Reader,
    topic: &str,
    p: PartitionId,
    (low, end): (i64, i64),
    offset: i64,
) -> anyhow::Result<bool> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, p.number(), Offset::Offset((end - 1).max(low)))?;
    reader.assign(&list).context("assigning the input partition")?;
    let deadline = std::time::Instant::now() + CONFIRM_WITHIN;
    while std::time::Instant::now() < deadline {
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.offset() >= offset => return Ok(true),
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(false),
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) => return Ok(false),
            _ => {}
        }
    }
    bail!("{topic} partition {p}: its end not reached in {CONFIRM_WITHIN:?}, to tell whether the state (applied up to offset {offset}) is ahead of the topic")
}

/// What [`scan`] reads: the store back, its journaled triggers and its pending timers.
type Scanned = Result<(PartitionStore, Vec<(String, Effect)>, Vec<StoredTimer>)>;

/// Reads the journaled triggers and the pending timers of a restored store, off the
/// runtime's threads: with 100,000 pipelines, half a second of each partition's opening,
/// which the inputs' check and the acceptance wait on the broker beside.
fn scan(store: PartitionStore) -> tokio::task::JoinHandle<Scanned> {
    tokio::task::spawn_blocking(move || {
        let journaled = store.effects()?;
        let timers = store.timers()?;
        Ok((store, journaled, timers))
    })
}

/// One partition's opening, run as a task.
struct Opening {
    settings: Arc<Settings>,
    control: kafka::RenewableProducer,
    telemetry: Arc<Telemetry>,
    partition: PartitionId,
    cancelled: Arc<AtomicBool>,
}

impl Opening {
    /// Opens the store, fences the changelog, restores from it, checks the inputs against
    /// the state and accepts the previous owner's batches.
    async fn run(self) -> Result<Opened> {
        let store = self.open_store().await?;
        // The fence first: everything before it is restored, and this owner's writes are
        // told from any earlier owner's by its epoch (see core::changelog).
        let (key, value) = changelog::fence(&self.settings.instance, self.settings.clock.now());
        let fence = self.write_control(&key, &value).await?;
        // The input tail reader connects while the changelog is read (the restore waits on
        // the broker): a client's start was a third of a second after each restore.
        let warming = self.warm_tail_reader();
        let (store, mut restored) = self.restore(store, fence).await?;
        let warm = std::sync::Mutex::new(warming.await.ok().and_then(|r| r.ok()));
        let applied: Vec<(String, i64)> = (self.settings.topics.inputs().iter())
            .filter_map(|t| Some((t.to_string(), store.applied_offset(t)?)))
            .collect();
        // The journaled triggers and timers are read meanwhile (nothing below writes them).
        let scanning = scan(store);
        let jobs_end = self
            .retrying("checking the inputs against the state", || {
                let reader = warm.lock().expect("not poisoned").take();
                self.check_inputs(&applied, reader)
            })
            .await?;
        // Which of the previous epoch's batches count, before any batch of this one.
        let (key, value) = changelog::acceptance(restored.lineage);
        let accepted = self.write_control(&key, &value).await?;
        let (mut store, journaled, timers) = scanning.await.context("reading the journaled triggers and timers")??;
        let mut writer = Writer::fenced_at(fence);
        // Another owner may have opened the partition after this one's fence (this process
        // was paused meanwhile): its fence, between this one's and the acceptance, is seen
        // here, before anything of the partition is installed. Others' writes there (an
        // earlier owner's last batch) never count, and are written over by the first batch.
        let between = writer.landed(&[accepted]);
        let entries = match between.is_empty() {
            false => {
                let (kafka, topic, p) = (&self.settings.kafka, &self.settings.topics.changelog, self.partition);
                self.retrying("reading the changelog between the fence and the acceptance", || async {
                    tokio::task::block_in_place(|| changelog::read_ranges(kafka, topic, p, &between))
                        .map_err(Error::Transient)
                })
                .await?
            }
            true => Vec::new(),
        };
        let fenced = writer.check(&entries) == Checked::Fenced;
        writer.repair(std::mem::take(&mut restored.stale));
        // What an earlier opening or batch of this store found to repair and had not written
        // before it lost the partition: the restore, from the checkpoint on, cannot see it.
        writer.repair(store.repairs()?);
        let mut start = StoreBatch::default();
        // Timer keys of an earlier version: deleted here, and on the changelog by this
        // owner's first batch (a repair writes what the store holds for them: nothing).
        let legacy = store.legacy_timer_keys()?;
        for key in &legacy {
            start.delete_key(key);
        }
        writer.repair(legacy);
        start.set_lineage(writer.lineage());
        if let Some(keys) = writer.repairs_to_keep() {
            start.set_repairs(keys);
        }
        store.write(start)?;
        Ok(Opened {
            store,
            restored,
            writer,
            journaled,
            jobs_end,
            timers,
            fenced,
        })
    }

    /// Opens the partition's store, retrying while a process letting go of it still holds it.
    async fn open_store(&self) -> Result<PartitionStore> {
        let p = self.partition;
        self.retrying("opening the local state", || {
            let (dir, cache) = (self.settings.state_dir.clone(), self.settings.state_cache_bytes);
            async move {
                let opened = tokio::task::spawn_blocking(move || {
                    PartitionStore::open(&dir, p).map(|store| store.with_state_cache(cache))
                })
                .await
                .context("opening the store")?;
                Ok(opened?)
            }
        })
        .await
    }

    /// Restores `store` from the changelog up to `fence`, retrying until it succeeds. The
    /// store moves into each blocking attempt and back out of it.
    async fn restore(&self, mut store: PartitionStore, fence: i64) -> Result<(PartitionStore, Restored)> {
        let p = self.partition;
        let mut backoff = backoff();
        loop {
            self.check_cancelled()?;
            let settings = self.settings.clone();
            let (telemetry, cancelled) = (self.telemetry.clone(), self.cancelled.clone());
            let (back, result) = tokio::task::spawn_blocking(move || {
                // Under exactly-once, transaction markers leave holes in the changelog's
                // offsets that are not compaction.
                let contiguous = settings.guarantee == Guarantee::EffectivelyOnce;
                let result = changelog::restore(
                    &settings.kafka,
                    &settings.topics.changelog,
                    p,
                    fence,
                    contiguous,
                    &mut store,
                    &cancelled,
                    &settings.clock,
                    |records, left, seconds| telemetry.restore_progress(p, records, left, seconds),
                );
                (store, result)
            })
            .await
            .context("restoring")?;
            store = back;
            match result {
                Ok(restored) => return Ok((store, restored)),
                Err(e) => {
                    self.failed(e, "restoring the state from the changelog", &mut backoff)
                        .await?
                }
            }
        }
    }

    /// A tail reader connected to the broker (the jobs topic's end asked once), for
    /// [`Self::check_inputs`]; `Err` leaves the check to make its own.
    fn warm_tail_reader(&self) -> tokio::task::JoinHandle<anyhow::Result<kafka::Reader>> {
        let (settings, p) = (self.settings.clone(), self.partition);
        tokio::task::spawn_blocking(move || {
            let reader = tail_reader(&settings.kafka)?;
            reader.range(&settings.topics.jobs, p)?;
            Ok(reader)
        })
    }

    /// Checks that no input partition ends before what the store applied of it (see
    /// [`InputAhead`]); returns where the jobs topic's partition ends now. Reads with
    /// `reader` if given, else with a new one.
    async fn check_inputs(&self, applied: &[(String, i64)], reader: Option<kafka::Reader>) -> Result<i64> {
        let (settings, applied, p) = (self.settings.clone(), applied.to_vec(), self.partition);
        tokio::task::spawn_blocking(move || {
            let reader = match reader {
                Some(reader) => reader,
                None => tail_reader(&settings.kafka)?,
            };
            let mut jobs_end = 0;
            for topic in settings.topics.inputs() {
                let (low, end) = reader
                    .range(topic, p)
                    .with_context(|| format!("reading the end of {topic} partition {p}"))?;
                if topic == settings.topics.jobs {
                    jobs_end = end;
                }
                let Some(applied) = applied.iter().find(|(t, _)| t == topic).map(|(_, a)| *a) else {
                    continue;
                };
                if applied >= end && !holds(&reader, topic, p, (low, end), applied)? {
                    let ahead = InputAhead {
                        topic: topic.to_string(),
                        partition: p,
                        applied,
                        end,
                    };
                    return Err(Fatal::from(ahead).into());
                }
            }
            Ok(jobs_end)
        })
        .await
        .context("checking the inputs")?
    }

    /// Writes a fence or an acceptance to the partition's changelog; returns its offset.
    async fn write_control(&self, key: &[u8], value: &[u8]) -> Result<i64> {
        let topic = &self.settings.topics.changelog;
        let p = self.partition;
        self.retrying(&format!("writing to {topic}"), || async move {
            let (_, offset) = self
                .control
                .send_to(topic, Some(p), Some(key), Some(value), &[])
                .await?;
            Ok(offset)
        })
        .await
    }

    /// Runs `attempt` until it succeeds, with backoff, while the partition is still wanted.
    async fn retrying<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut backoff = backoff();
        loop {
            self.check_cancelled()?;
            match attempt().await {
                Ok(done) => return Ok(done),
                Err(e) => self.failed(e, what, &mut backoff).await?,
            }
        }
    }

    fn check_cancelled(&self) -> Result<()> {
        if self.cancelled.load(Ordering::Relaxed) {
            return Err(Fatal::from(Cancelled(self.partition)).into());
        }
        Ok(())
    }

    /// After a failed attempt: the error back when no retry mends it, else a wait.
    async fn failed(&self, e: Error, what: &str, backoff: &mut Backoff) -> Result<()> {
        let Error::Transient(e) = e else {
            return Err(e);
        };
        warn!(partition = self.partition.number(), error = %format!("{e:#}"), "{what} failed; retrying (the other partitions go on meanwhile)");
        backoff.wait().await;
        Ok(())
    }
}

/// Waits between attempts: bounded by half a second, doubling up to ten seconds.
fn backoff() -> Backoff {
    Backoff::new(Duration::from_millis(500), Duration::from_secs(10))
}
