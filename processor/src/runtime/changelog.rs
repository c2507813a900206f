//! The changelog: every write to a partition's store, mirrored to a compacted topic with the
//! same partition number, so that a new owner (another instance, or this one with its state
//! directory gone) can rebuild the store before processing.
//!
//! Which writes count is decided by [`crate::core::changelog`]: an owner opening a partition
//! writes a fence (its offset is the owner's epoch), reads the changelog up to the fence,
//! writes which batches of the previous epoch it restored (the acceptance), and then tags
//! every batch it writes with its epoch and a sequence number. A zombie's writes after a
//! newer fence, and batches never marked complete, never count; the new owner writes the
//! keys they touched again with the values its store holds (the repair), so that compaction
//! never leaves them as a key's only record.
//!
//! A store remembers the changelog offset it is current with (its checkpoint) and the epoch
//! and batch it last wrote or restored (its lineage). At assignment it reads from its
//! checkpoint to its new fence, checking the lineage on the way; a store with no checkpoint,
//! one whose checkpoint is behind what the changelog kept, or one that wrote after a newer
//! owner took over is cleared and read in full. One whose checkpoint is beyond the end (the
//! topic was recreated) stops the processor ([`StateAhead`]).
//!
//! Records on the topic:
//! - a store write: the store key and value, with a [`BATCH_HEADER`] (epoch, seq);
//! - a batch end marker: `b/<epoch>` → seq and the batch's first offset (`b/` alone, from
//!   before epochs, closes every earlier write);
//! - a fence: `n/<instance>/<nanos>` (a key of its own, never compacted away);
//! - an acceptance: `a/<epoch>` → the last batch of that epoch that counts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use rdkafka::consumer::Consumer;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use super::clock::Clock;
use super::error::{Error, Fatal};
use super::kafka::{self, Connection};
use super::store::{PartitionStore, StoreBatch};
use crate::core::changelog::{Diverged, Entry, Lineage, Restore, FENCE_PREFIX};
use crate::core::partitioning::PartitionId;

/// Records applied per RocksDB write while restoring.
const RESTORE_CHUNK: usize = 5_000;
/// How often a long restore logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// A restore that receives nothing for this long while records remain fails (and is retried
/// by the caller), rather than hanging on a broker that went away.
const STALLED_AFTER: Duration = Duration::from_secs(60);

pub use crate::core::changelog::{acceptance, batch_header, entry, marker, BATCH_HEADER};

/// A fence of `instance`: a key no other record has.
pub fn fence(instance: &str, now: DateTime<Utc>) -> (Vec<u8>, Vec<u8>) {
    // Two fences of one process at one time (a clock that stands still) still differ.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = now.timestamp_nanos_opt().unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!("{instance}/{}/{nanos}/{n}", std::process::id());
    ([FENCE_PREFIX, name.as_bytes()].concat(), b"fence".to_vec())
}

/// The [`BATCH_HEADER`] of a record, if it has one.
pub fn batch_of(message: &impl Message) -> Option<&[u8]> {
    let headers = message.headers()?;
    headers.iter().find(|h| h.key == BATCH_HEADER).and_then(|h| h.value)
}

/// A reader of changelog partitions it is assigned (no group membership, no commits).
fn reader(kafka: &Connection) -> Result<kafka::Reader> {
    // A checkpoint beyond the end means the changelog was recreated: say so, do not skip
    // (the start out of range is an error).
    kafka::Reader::create(
        kafka::restore_reader(kafka)
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "100"),
        kafka,
    )
    .context("creating the changelog reader")
}

/// The records of changelog partition `partition` from offset `from` to its end now, and
/// that end.
pub fn read_since(kafka: &Connection, topic: &str, partition: PartitionId, from: i64) -> Result<(Vec<Entry>, i64)> {
    let reader = reader(kafka)?;
    let (_, end) = reader
        .range(topic, partition)
        .context("reading the changelog partition's end")?;
    let entries = match from < end {
        true => read_ranges_on(&reader, topic, partition, std::slice::from_ref(&(from..end)))?,
        false => Vec::new(),
    };
    Ok((entries, end))
}

/// The records of changelog partition `partition` in `ranges`, as the restore rules see
/// them: what another writer put between this owner's records.
pub fn read_ranges(
    kafka: &Connection,
    topic: &str,
    partition: PartitionId,
    ranges: &[std::ops::Range<i64>],
) -> Result<Vec<Entry>> {
    read_ranges_on(&reader(kafka)?, topic, partition, ranges)
}

/// [`read_ranges`] with a reader the caller has already.
fn read_ranges_on(
    consumer: &kafka::Reader,
    topic: &str,
    partition: PartitionId,
    ranges: &[std::ops::Range<i64>],
) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for range in ranges {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition.number(), Offset::Offset(range.start))?;
        consumer.assign(&list).context("assigning the changelog partition")?;
        let started = Instant::now();
        let mut next = range.start;
        while next < range.end {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => {
                    next = message.offset() + 1;
                    if message.offset() >= range.end {
                        break;
                    }
                    if let Some(e) = message
                        .key()
                        .and_then(|k| entry(message.offset(), k, message.payload(), batch_of(&message)))
                    {
                        entries.push(e);
                    }
                }
                Some(Err(e))
                    if started.elapsed() > STALLED_AFTER
                        || e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) =>
                {
                    bail!("reading {topic}/{partition}: {e}")
                }
                _ if started.elapsed() > STALLED_AFTER => {
                    bail!("reading {topic}/{partition}: nothing at offset {next} for {STALLED_AFTER:?}")
                }
                _ => {}
            }
        }
    }
    Ok(entries)
}

/// A store current with a changelog offset beyond the partition's end: the changelog topic
/// was recreated (or lost records), and the store belongs to the old one. Restoring it
/// from the new topic would silently clear the state; the processor stops instead.
#[derive(Debug, thiserror::Error)]
#[error("the state in {path} is current with {topic} partition {partition} up to offset {checkpoint}, beyond the partition's end ({end}): the changelog topic was recreated or lost records. Stop every instance; if the inputs were recreated too, delete the state directories; otherwise restore the topic, or rebuild the state with `sluice reset --from-scratch`")]
pub struct StateAhead {
    pub path: String,
    pub topic: String,
    pub partition: PartitionId,
    pub checkpoint: i64,
    pub end: i64,
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq)]
pub struct Restored {
    pub records: u64,
    pub seconds: f64,
    /// Whether the store was cleared first (missing, behind, ahead, or diverged).
    pub full: bool,
    /// Keys whose last writes do not count (a zombie's, or a batch never marked complete):
    /// the new owner must write them again with its store's values.
    pub stale: Vec<Vec<u8>>,
    /// The newest epoch that wrote batches and its last batch that counts: the acceptance
    /// the new owner writes.
    pub lineage: Lineage,
}

/// Where to start reading, given the store's checkpoint and the changelog's first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Read what the store misses, from this offset on (nothing, when it is current).
    From(i64),
    /// Clear the store and read everything from the low watermark.
    Full(i64),
}

/// `away`: how long ago the store last wrote its checkpoint (`None`: not known). Past
/// [`TOMBSTONES_KEPT`], compaction may have removed a deletion the store never saw (a
/// deleted pipeline would come back), whatever the offsets say.
pub fn plan(checkpoint: Option<i64>, low: i64, away: Option<chrono::Duration>) -> Plan {
    let recent = away.is_some_and(|away| away < TOMBSTONES_KEPT);
    match checkpoint {
        Some(c) if c + 1 >= low && recent => Plan::From(c + 1),
        // Never written with a changelog, behind what retention has kept, or away too long.
        _ => Plan::Full(low),
    }
}

/// How long the changelog keeps a tombstone after compaction reached it: its
/// `delete.retention.ms`, which `sluice topics apply` sets (and `check` verifies) to this.
pub const TOMBSTONES_KEPT: chrono::Duration = chrono::Duration::days(1);

/// How long the changelog keeps a record before compaction may remove it for a newer one of
/// its key: its `min.compaction.lag.ms`. A write that does not count (a crashed batch's, a
/// zombie's) must not compact away the value it shadows before an owner writes that key
/// again; owners do so as soon as they see it (see `Processor::repair_now`).
pub const SHADOWED_KEPT: chrono::Duration = chrono::Duration::days(1);

/// What is wrong with a changelog topic's configs (`actual`, as the broker describes them)
/// for the restores Sluice relies on, one sentence each: compaction (never deletion by age,
/// which would drop a pipeline's state once it is older than the retention), and the
/// tombstone and compaction lags that [`plan`] and the repair of others' writes assume.
pub fn config_faults(actual: &std::collections::HashMap<String, Option<String>>) -> Vec<String> {
    let value = |name: &str| actual.get(name).cloned().flatten();
    let millis = |name: &str| value(name).and_then(|v| v.trim().parse::<i64>().ok());
    let mut faults = Vec::new();
    let policy = value("cleanup.policy").unwrap_or_default();
    let policies: Vec<&str> = policy.split(',').map(str::trim).collect();
    if !policies.contains(&"compact") {
        faults.push(format!(
            "cleanup.policy is {policy:?}, not compact: the latest value of every key must be kept"
        ));
    }
    if policies.contains(&"delete") && millis("retention.ms").is_some_and(|ms| ms >= 0) {
        faults.push(format!(
            "cleanup.policy includes delete with retention.ms {}: state older than that would be lost",
            value("retention.ms").unwrap_or_default()
        ));
    }
    for (name, at_least) in [
        ("min.compaction.lag.ms", SHADOWED_KEPT),
        ("delete.retention.ms", TOMBSTONES_KEPT),
    ] {
        let want = at_least.num_milliseconds();
        match millis(name) {
            Some(have) if have >= want => {}
            have => faults.push(format!(
                "{name} is {}, under {want}: {}",
                have.map_or("unset".to_string(), |h| h.to_string()),
                match name {
                    "min.compaction.lag.ms" => "a write that does not count (a zombie's, a crashed batch's) could compact away the value it shadows before it is repaired",
                    _ => "a deletion could be compacted away before a store that was away sees it, and the deleted pipeline come back",
                }
            )),
        }
    }
    faults
}

/// The longest time between an idle owner's reads of what others wrote to its changelog
/// partitions since its own last record (`--changelog-watch`, see `Writer::watched`): a
/// quarter of [`SHADOWED_KEPT`], so that an owner that writes nothing for a day still
/// repairs a zombie's write well before compaction may keep it as its key's last record.
pub const WATCH_AT_MOST: std::time::Duration = std::time::Duration::from_secs(6 * 3600);
const _: () = assert!(WATCH_AT_MOST.as_secs() * 4 <= SHADOWED_KEPT.num_seconds() as u64);

/// Brings `store` up to the new owner's fence at `fence` on `topic`'s partition `partition`
/// (the fence itself is the last record read), reporting progress to `progress` (records
/// so far, offsets left to the fence, seconds so far).
///
/// `contiguous`: the changelog holds no transaction markers (effectively-once), so a hole
/// in its offsets after a reused store's checkpoint is compaction, which may have removed a
/// tombstone the store never saw (a deleted pipeline would come back): such a store is
/// restored in full instead. Kafka never compacts the active segment, so a store that was
/// away briefly reads on.
#[allow(clippy::too_many_arguments)]
pub fn restore(
    kafka: &Connection,
    topic: &str,
    partition: PartitionId,
    fence: i64,
    contiguous: bool,
    store: &mut PartitionStore,
    cancelled: &AtomicBool,
    clock: &Clock,
    progress: impl FnMut(u64, u64, f64),
) -> Result<Restored, Error> {
    let started = Instant::now();
    let source = Source {
        consumer: reader(kafka)?,
        topic,
        partition,
        fence,
    };
    Restoring {
        source,
        store,
        cancelled,
        clock,
        progress,
        started,
    }
    .run(contiguous)
}

/// How reading a changelog range ended.
enum Read {
    Done {
        records: u64,
        rules: Restore,
    },
    /// The start is out of the partition's range (behind what it keeps).
    OutOfRange,
    /// The start is beyond the partition's end, the new owner's fence.
    BeyondEnd,
    /// The reused store holds writes that do not count.
    Diverged(String),
}

/// One restore in progress: the changelog partition it reads, the store it fills, and
/// whom it tells how far it got.
struct Restoring<'a, P> {
    source: Source<'a>,
    store: &'a mut PartitionStore,
    cancelled: &'a AtomicBool,
    /// The processor's: how long the store was away, and when it is current again.
    clock: &'a Clock,
    /// Told the records so far, the offsets left to the fence (an upper bound of the records
    /// left: compaction leaves holes) and the seconds so far.
    progress: P,
    started: Instant,
}

impl<P: FnMut(u64, u64, f64)> Restoring<'_, P> {
    /// Reads what the store misses, or everything into a cleared store when its checkpoint
    /// is too old or reading on from it fails; see [`restore`].
    fn run(&mut self, contiguous: bool) -> Result<Restored, Error> {
        let Source { topic, partition, .. } = self.source;
        let (low, _) = self
            .source
            .consumer
            .range(topic, partition)
            .with_context(|| format!("reading the offsets of {topic} partition {partition}"))?;
        let checkpoint = self.store.checkpoint()?;
        let away = self.store.checkpointed_at()?.map(|at| self.clock.now() - at);
        let mut plan = plan(checkpoint, low, away);
        if checkpoint.is_some() && matches!(plan, Plan::Full(_)) {
            info!(partition = partition.number(), ?checkpoint, ?away, "the local state is too old to be brought up to date from {topic} (compaction may have removed deletions it never saw): restoring it in full");
        }
        loop {
            let (start, full, rules) = match plan {
                Plan::From(offset) => (
                    offset,
                    false,
                    Restore::reusing(self.store.lineage()?.unwrap_or_default()),
                ),
                Plan::Full(offset) => {
                    self.store.clear()?;
                    (offset, true, Restore::full())
                }
            };
            debug!(
                partition = partition.number(),
                from = start,
                fence = self.source.fence,
                ?checkpoint,
                full,
                "reading {topic}"
            );
            // Reading on from the checkpoint may fail in ways a full restore mends.
            let why = match self.read(start, contiguous && !full, rules)? {
                Read::Done { records, rules } => return Ok(self.restored(records, full, rules)),
                Read::Diverged(why) if !full => {
                    format!("the local state cannot be brought up to date from {topic} ({why})")
                }
                Read::Diverged(why) => return Err(anyhow!("{topic} partition {partition}: {why}").into()),
                Read::BeyondEnd => return Err(Fatal::from(self.state_ahead(start - 1)).into()),
                Read::OutOfRange if !full => format!("what the local state misses is no longer in {topic}"),
                Read::OutOfRange => {
                    return Err(anyhow!("{topic} partition {partition}: offset {start} is out of range").into())
                }
            };
            warn!(
                partition = partition.number(),
                ?checkpoint,
                "{why}: restoring it in full"
            );
            plan = Plan::Full(low);
        }
    }

    /// Reads from `start` through the fence into the store, applying the writes that count.
    /// With `holes_diverge`, a hole in the offsets read means the store cannot be brought up
    /// to date (see [`restore`]'s `contiguous`).
    fn read(&mut self, start: i64, holes_diverge: bool, rules: Restore) -> Result<Read, Error> {
        let Source { partition, fence, .. } = self.source;
        if start > fence {
            // The checkpoint lies beyond the new fence, the partition's end.
            return Ok(Read::BeyondEnd);
        }
        self.source.assign(start)?;
        let mut applied = Applied {
            rules,
            batch: StoreBatch::default(),
            records: 0,
        };
        let mut last_progress = Instant::now();
        let mut last_record = Instant::now();
        let mut next = start;
        while next <= fence {
            if self.cancelled.load(Ordering::Relaxed) {
                return Err(Fatal::from(super::opening::Cancelled(partition)).into());
            }
            let message = match self.source.poll(&mut next, last_record)? {
                Polled::Record(message) => message,
                Polled::Nothing => continue,
                Polled::OutOfRange => return Ok(Read::OutOfRange),
            };
            last_record = Instant::now();
            let offset = message.offset();
            if holes_diverge && offset > next {
                return Ok(Read::Diverged(format!(
                    "offsets {next}..{offset} after its checkpoint were compacted away, and a deletion among them may be gone"
                )));
            }
            next = offset + 1;
            let Some(key) = message.key() else { continue };
            let Some(entry) = self::entry(offset, key, message.payload(), batch_of(&message)) else {
                warn!(
                    partition = partition.number(),
                    offset, "a changelog record of no known kind: skipped"
                );
                continue;
            };
            if let Err(why) = applied.push(entry) {
                return Ok(Read::Diverged(why.to_string()));
            }
            if applied.batch.len() >= RESTORE_CHUNK {
                self.store.write(std::mem::take(&mut applied.batch))?;
            }
            if last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                info!(
                    partition = partition.number(),
                    records = applied.records,
                    offset = next,
                    "restoring…"
                );
                let left = u64::try_from(fence + 1 - next).unwrap_or(0);
                (self.progress)(applied.records, left, self.started.elapsed().as_secs_f64());
            }
        }
        applied.finish(partition, fence, self.store, self.clock.now())
    }

    /// The outcome of a read that reached the fence, with its last progress report.
    fn restored(&mut self, records: u64, full: bool, rules: Restore) -> Restored {
        let Source { topic, partition, .. } = self.source;
        let seconds = self.started.elapsed().as_secs_f64();
        (self.progress)(records, 0, seconds);
        if records > 0 || full {
            info!(
                partition = partition.number(),
                records, seconds, full, "restored state from {topic}"
            );
        }
        if rules.unaccounted() > 0 {
            // Only a writer that is not Sluice's could have written them: say so loudly.
            warn!(
                partition = partition.number(),
                records = rules.unaccounted(),
                "changelog records of an epoch no fence accounts for were ignored: something other than Sluice writes {topic} (restrict who may write it)"
            );
        }
        Restored {
            records,
            seconds,
            full,
            stale: rules.stale_keys(),
            lineage: rules.lineage(),
        }
    }

    /// The store is current with `checkpoint`, beyond the fence that ends the partition.
    fn state_ahead(&self, checkpoint: i64) -> StateAhead {
        StateAhead {
            path: self.store.path().display().to_string(),
            topic: self.source.topic.to_string(),
            partition: self.source.partition,
            checkpoint,
            end: self.source.fence,
        }
    }
}

/// A changelog partition as a restore reads it, up to the new owner's fence.
struct Source<'a> {
    consumer: kafka::Reader,
    topic: &'a str,
    partition: PartitionId,
    fence: i64,
}

/// What one poll of a [`Source`] brought.
enum Polled<'c> {
    Record(BorrowedMessage<'c>),
    /// No record this time.
    Nothing,
    /// The start is out of the partition's range.
    OutOfRange,
}

impl Source<'_> {
    fn assign(&self, start: i64) -> Result<()> {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(self.topic, self.partition.number(), Offset::Offset(start))?;
        self.consumer.assign(&list).context("assigning the changelog partition")
    }

    /// Polls once, moving `next` past offsets without a record; fails when nothing has
    /// come for [`STALLED_AFTER`] since `last_record`.
    fn poll(&self, next: &mut i64, last_record: Instant) -> Result<Polled<'_>> {
        let (topic, partition, fence) = (self.topic, self.partition, self.fence);
        match self.consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => Ok(Polled::Record(message)),
            None => {
                // Offsets without a record (transaction markers, compacted records) count as
                // read: the position says where reading stands.
                let position = self
                    .consumer
                    .position()?
                    .find_partition(topic, partition.number())
                    .and_then(|e| e.offset().to_raw())
                    .unwrap_or(*next);
                *next = (*next).max(position);
                if last_record.elapsed() > STALLED_AFTER {
                    bail!("restoring {topic} partition {partition}: nothing received for {STALLED_AFTER:?} at offset {next} (fence at {fence})");
                }
                Ok(Polled::Nothing)
            }
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) => Ok(Polled::OutOfRange),
            Some(Err(e)) if last_record.elapsed() > STALLED_AFTER => {
                bail!("restoring {topic} partition {partition}: {e}")
            }
            Some(Err(_)) => Ok(Polled::Nothing),
        }
    }
}

/// What a read has applied so far: the restore rules, and the writes they let count that
/// are not in the store yet.
struct Applied {
    rules: Restore,
    batch: StoreBatch,
    records: u64,
}

impl Applied {
    /// Hands one record to the rules and stages the writes of the batches it closes.
    fn push(&mut self, entry: Entry) -> Result<(), Diverged> {
        for (key, value) in self.rules.push(entry)? {
            self.batch.mirror(&key, value.as_deref());
            self.records += 1;
        }
        Ok(())
    }

    /// Writes what is staged, with the store now current through `fence`.
    fn finish(
        self,
        partition: PartitionId,
        fence: i64,
        store: &mut PartitionStore,
        now: DateTime<Utc>,
    ) -> Result<Read, Error> {
        let stale = self.rules.stale_keys();
        if !stale.is_empty() {
            info!(
                partition = partition.number(),
                keys = stale.len(),
                "changelog writes that do not count (a batch never marked complete, or a writer that had lost the partition): not applied, and written over with the next batch"
            );
        }
        // Current through the fence; the lineage is the new owner's from here on (see
        // `Processor::open_partition`).
        let mut batch = self.batch;
        batch.set_checkpoint(fence, now);
        store.write(batch)?;
        Ok(Read::Done {
            records: self.records,
            rules: self.rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changelog_that_would_lose_state_is_named_with_what_is_wrong() {
        let configs = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, Option<String>> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                .collect()
        };
        let day = "86400000";
        let good = configs(&[
            ("cleanup.policy", "compact"),
            ("retention.ms", "604800000"),
            ("min.compaction.lag.ms", day),
            ("delete.retention.ms", day),
        ]);
        assert!(config_faults(&good).is_empty());
        let deleting = configs(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "604800000"),
            ("min.compaction.lag.ms", day),
            ("delete.retention.ms", day),
        ]);
        let faults = config_faults(&deleting);
        assert_eq!(faults.len(), 2, "{faults:?}");
        assert!(faults[0].contains("not compact") && faults[1].contains("retention.ms 604800000"));
        // Both, with infinite retention, keep everything.
        let both = configs(&[
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "-1"),
            ("min.compaction.lag.ms", day),
            ("delete.retention.ms", day),
        ]);
        assert!(config_faults(&both).is_empty());
        // The broker's defaults: no lag at all.
        let eager = configs(&[("cleanup.policy", "compact"), ("min.compaction.lag.ms", "0")]);
        let faults = config_faults(&eager);
        assert_eq!(faults.len(), 2, "{faults:?}");
        assert!(
            faults[0].starts_with("min.compaction.lag.ms is 0, under 86400000"),
            "{faults:?}"
        );
        assert!(faults[1].starts_with("delete.retention.ms is unset"), "{faults:?}");
    }

    #[test]
    fn every_kind_of_record_reads_back_as_written() {
        let (key, value) = marker(42, 7, 1000);
        assert_eq!(
            entry(5, &key, Some(&value), None),
            Some(Entry::Marker { epoch: 42, seq: 7 })
        );
        let now = DateTime::UNIX_EPOCH;
        let (key, value) = fence("a", now);
        assert_eq!(entry(41, &key, Some(&value), None), Some(Entry::Fence { epoch: 42 }));
        assert_ne!(fence("a", now).0, fence("a", now).0, "every fence has a key of its own");
        let (key, value) = acceptance(Lineage { epoch: 42, through: 7 });
        assert_eq!(
            entry(50, &key, Some(&value), None),
            Some(Entry::Accept { epoch: 42, through: 7 })
        );
        let header = batch_header(42, 8);
        assert_eq!(
            entry(51, b"p/gold", Some(b"{}"), Some(&header)),
            Some(Entry::Write {
                key: b"p/gold".to_vec(),
                value: Some(b"{}".to_vec()),
                epoch: 42,
                seq: 8
            })
        );
        // From before epochs: a write without the header, the marker `b/` alone.
        assert_eq!(
            entry(1, b"t/x", None, None),
            Some(Entry::Write {
                key: b"t/x".to_vec(),
                value: None,
                epoch: 0,
                seq: 0
            })
        );
        assert_eq!(
            entry(2, b"b/", Some(&9i64.to_be_bytes()), None),
            Some(Entry::Marker { epoch: 0, seq: 0 })
        );
        assert_eq!(entry(3, b"p/x", None, Some(b"short")), None);
    }

    #[test]
    fn plans_follow_the_checkpoint_and_its_age() {
        let recent = Some(chrono::Duration::hours(1));
        assert_eq!(
            plan(Some(9), 0, recent),
            Plan::From(10),
            "current or behind: read the rest"
        );
        assert_eq!(plan(None, 0, recent), Plan::Full(0), "state dir gone");
        assert_eq!(plan(None, 7, None), Plan::Full(7));
        assert_eq!(plan(Some(2), 5, recent), Plan::Full(5), "what it misses is gone");
        assert_eq!(plan(Some(4), 5, recent), Plan::From(5), "just enough is left");
        let stale = Some(TOMBSTONES_KEPT + chrono::Duration::seconds(1));
        assert_eq!(
            plan(Some(9), 0, stale),
            Plan::Full(0),
            "away longer than tombstones are kept"
        );
        assert_eq!(plan(Some(9), 0, None), Plan::Full(0), "away for a time not known");
    }
}
