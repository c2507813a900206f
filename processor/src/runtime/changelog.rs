//! The changelog: every write to a partition's store, mirrored to a compacted topic with the
//! same partition number, so that a new owner (another instance, or this one with its state
//! directory gone) can rebuild the store before processing.
//!
//! A store remembers the changelog offset it is current with (its checkpoint). At
//! assignment it reads from there to the end: nothing when it is current, the rest when it
//! is behind; a store with no checkpoint, or one beyond the end of the changelog (the topic
//! was recreated), is cleared and read in full.
//!
//! Records count once a batch end marker follows them ([`Batches`]). Those after the last
//! marker are a batch whose owner crashed before its outputs were all acknowledged: they
//! are skipped, and the next owner writes the keys they touched again with the values its
//! store holds (the repair), so that a later restore, or compaction, never lets them win.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use super::kafka::{self, Connection};
use super::store::{PartitionStore, StoreBatch, BATCH_MARKER};

/// Records applied per RocksDB write while restoring.
const RESTORE_CHUNK: usize = 5_000;
/// How often a long restore logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// A restore that receives nothing for this long while records remain fails (and is retried
/// by the caller), rather than hanging on a broker that went away.
const STALLED_AFTER: Duration = Duration::from_secs(60);

/// What a restore did.
#[derive(Debug, Clone, PartialEq)]
pub struct Restored {
    pub records: u64,
    pub seconds: f64,
    /// Whether the store was cleared first (missing, or not from this changelog).
    pub full: bool,
    /// Keys written by a batch that was never marked complete: the new owner must write them
    /// again with its store's values.
    pub unmarked: Vec<Vec<u8>>,
}

/// One changelog write: key, and value (`None` deletes the key).
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// Groups changelog records into the batches their end markers close: a batch is every
/// record since the previous marker. A record is not tied to its own batch's marker, which
/// compaction removes once a later marker exists (they share a key): the next marker that
/// survives closes it, and applying records in log order gives each key its last value.
#[derive(Debug, Default)]
pub struct Batches {
    open: Vec<Write>,
}

impl Batches {
    /// Takes the next record; a marker returns the batch it closes.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) -> Option<Vec<Write>> {
        if key == BATCH_MARKER {
            return Some(std::mem::take(&mut self.open));
        }
        self.open.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        None
    }

    /// The keys of the records no marker has closed (yet), each once.
    pub fn unmarked_keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.open.iter().map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// Where to start reading, given the store's checkpoint and the changelog's first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Read what the store misses, from this offset on (nothing, when it is current).
    From(i64),
    /// Clear the store and read everything from the low watermark.
    Full(i64),
}

pub fn plan(checkpoint: Option<i64>, low: i64) -> Plan {
    match checkpoint {
        Some(c) if c + 1 >= low => Plan::From(c + 1),
        // Never written with a changelog, or behind what retention has kept.
        _ => Plan::Full(low),
    }
}

/// Brings `store` up to the end of `topic`'s partition `partition`, reporting progress to
/// `progress` (records so far, seconds so far).
///
/// The end is where reading finds no more records, not the broker's high watermark alone:
/// tansu 0.6 reports a high watermark short of the end after multi-record batches, and
/// trusting it would lose the last records.
pub fn restore(
    kafka: &Connection,
    topic: &str,
    partition: i32,
    store: &mut PartitionStore,
    mut progress: impl FnMut(u64, f64),
) -> Result<Restored> {
    let started = Instant::now();
    let consumer: BaseConsumer = kafka
        .config()
        .set("group.id", "sluice-restore")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        // A checkpoint beyond the end means the changelog was recreated: say so, do not skip.
        .set("auto.offset.reset", "error")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "100")
        .create()
        .context("creating the changelog reader")?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, kafka::METADATA_TIMEOUT)
        .with_context(|| format!("reading the offsets of {topic} partition {partition}"))?;
    let checkpoint = store.checkpoint()?;
    let mut plan = plan(checkpoint, low);
    loop {
        let (start, full) = match plan {
            Plan::From(offset) => (offset, false),
            Plan::Full(offset) => {
                store.clear()?;
                (offset, true)
            }
        };
        debug!(partition, from = start, high, ?checkpoint, full, "reading {topic}");
        match read(&consumer, topic, partition, start, high, store, &mut progress, started)? {
            Some((records, unmarked)) => {
                let seconds = started.elapsed().as_secs_f64();
                progress(records, seconds);
                if records > 0 || full {
                    info!(partition, records, seconds, full, "restored state from {topic}");
                }
                return Ok(Restored {
                    records,
                    seconds,
                    full,
                    unmarked,
                });
            }
            None if !full => {
                warn!(
                    partition,
                    ?checkpoint,
                    "the local state is ahead of {topic} (was the topic recreated?): restoring it in full"
                );
                plan = Plan::Full(low);
            }
            None => bail!("{topic} partition {partition}: offset {start} is out of range"),
        }
    }
}

/// Reads from `start` to the end into `store`; returns how many records it applied and the
/// keys of the records no marker closed, or `None` if `start` is beyond the end.
#[allow(clippy::too_many_arguments)]
fn read(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    start: i64,
    high: i64,
    store: &mut PartitionStore,
    progress: &mut impl FnMut(u64, f64),
    started: Instant,
) -> Result<Option<(u64, Vec<Vec<u8>>)>> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(start))?;
    consumer.assign(&list).context("assigning the changelog partition")?;
    let mut records = 0u64;
    let mut batch = StoreBatch::default();
    let mut batches = Batches::default();
    let mut last_marker = None;
    let mut last_progress = Instant::now();
    let mut last_record = Instant::now();
    let mut next = start;
    let mut idle = 0;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            None => {
                // Offsets without a record (transaction markers, compacted records) count as
                // read: the position says where reading stands.
                let position = consumer
                    .position()?
                    .find_partition(topic, partition)
                    .and_then(|e| e.offset().to_raw())
                    .unwrap_or(next);
                next = next.max(position);
                idle += 1;
                if next >= high && idle >= 2 {
                    break;
                }
                if last_record.elapsed() > STALLED_AFTER {
                    bail!("restoring {topic} partition {partition}: nothing received for {STALLED_AFTER:?} at offset {next} (high watermark {high})");
                }
            }
            Some(Err(e)) => {
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) {
                    return Ok(None);
                }
                if last_record.elapsed() > STALLED_AFTER {
                    bail!("restoring {topic} partition {partition}: {e}");
                }
            }
            Some(Ok(message)) => {
                idle = 0;
                last_record = Instant::now();
                let offset = message.offset();
                next = offset + 1;
                let Some(key) = message.key() else { continue };
                if let Some(closed) = batches.push(key, message.payload()) {
                    for (key, value) in closed {
                        batch.mirror(&key, value.as_deref());
                        records += 1;
                    }
                    last_marker = Some(offset);
                    if batch.len() >= RESTORE_CHUNK {
                        batch.set_checkpoint(offset);
                        store.write(std::mem::take(&mut batch))?;
                    }
                }
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    info!(partition, records, offset = next, "restoring…");
                    progress(records, started.elapsed().as_secs_f64());
                }
            }
        }
    }
    let unmarked = batches.unmarked_keys();
    if !unmarked.is_empty() {
        info!(
            partition,
            keys = unmarked.len(),
            "changelog ends with a batch that was never marked complete (its owner crashed): not applied, and written over with the next batch"
        );
    }
    if let Some(offset) = last_marker {
        batch.set_checkpoint(offset);
    }
    store.write(batch)?;
    Ok(Some((records, unmarked)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds records (a `None` key is a marker) and returns the state applying the closed
    /// batches in order gives, and the keys left unmarked.
    fn apply(records: &[(Option<&str>, Option<&str>)]) -> (std::collections::BTreeMap<String, String>, Vec<Vec<u8>>) {
        let mut batches = Batches::default();
        let mut state = std::collections::BTreeMap::new();
        for (key, value) in records {
            let key = key.map_or(BATCH_MARKER.to_vec(), |k| k.as_bytes().to_vec());
            if let Some(closed) = batches.push(&key, value.map(str::as_bytes)) {
                for (k, v) in closed {
                    let k = String::from_utf8(k).unwrap();
                    match v {
                        Some(v) => state.insert(k, String::from_utf8(v).unwrap()),
                        None => state.remove(&k),
                    };
                }
            }
        }
        (state, batches.unmarked_keys())
    }

    #[test]
    fn batches_close_at_markers_and_a_trailing_batch_is_left_unmarked() {
        assert_eq!(Batches::default().push(b"p/a", Some(b"1")), None);
        let (state, unmarked) = apply(&[
            (Some("p/a"), Some("1")),
            (Some("p/b"), Some("1")),
            (None, Some("0")),
            (Some("p/a"), None),
            (None, Some("3")),
            // The owner crashed before this batch was complete.
            (Some("p/b"), Some("crashed")),
            (Some("p/c"), Some("crashed")),
        ]);
        assert_eq!(state, [("p/b".to_string(), "1".to_string())].into());
        assert_eq!(unmarked, [b"p/b".to_vec(), b"p/c".to_vec()]);
    }

    #[test]
    fn a_compacted_changelog_restores_every_key_to_its_last_value() {
        // Written: [a=1 b=1] M [a=2] M [c=1] M [b=crashed] (crash) [b=1 repair, a=3] M.
        // Compaction keeps the last record of each key, and of the marker key only the last.
        let (state, unmarked) = apply(&[
            (Some("p/c"), Some("1")),
            (Some("p/b"), Some("1")),
            (Some("p/a"), Some("3")),
            (None, Some("9")),
        ]);
        assert!(unmarked.is_empty());
        assert_eq!(
            state,
            [("p/a", "3"), ("p/b", "1"), ("p/c", "1")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into()
        );
        // Before compaction the same log gives the same state: the repair wrote b over.
        let (uncompacted, _) = apply(&[
            (Some("p/a"), Some("1")),
            (Some("p/b"), Some("1")),
            (None, Some("0")),
            (Some("p/a"), Some("2")),
            (None, Some("3")),
            (Some("p/c"), Some("1")),
            (None, Some("5")),
            (Some("p/b"), Some("crashed")),
            (Some("p/b"), Some("1")),
            (Some("p/a"), Some("3")),
            (None, Some("8")),
        ]);
        assert_eq!(uncompacted, state);
    }

    #[test]
    fn plans_follow_the_checkpoint() {
        assert_eq!(plan(Some(9), 0), Plan::From(10), "current or behind: read the rest");
        assert_eq!(plan(None, 0), Plan::Full(0), "state dir gone");
        assert_eq!(plan(None, 7), Plan::Full(7));
        assert_eq!(plan(Some(2), 5), Plan::Full(5), "what it misses is gone");
        assert_eq!(plan(Some(4), 5), Plan::From(5), "just enough is left");
    }
}
