//! The changelog: every write to a partition's store, mirrored to a compacted topic with the
//! same partition number, so that a new owner (another instance, or this one with its state
//! directory gone) can rebuild the store before processing.
//!
//! A store remembers the changelog offset it is current with (its checkpoint). At
//! assignment it reads from there to the end: nothing when it is current, the rest when it
//! is behind; a store with no checkpoint, or one beyond the end of the changelog (the topic
//! was recreated), is cleared and read in full.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use super::kafka;
use super::store::{PartitionStore, StoreBatch, BATCH_MARKER};

/// Records applied per RocksDB write while restoring.
const RESTORE_CHUNK: usize = 5_000;
/// How often a long restore logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// A restore that receives nothing for this long while records remain fails (and is retried
/// by the caller), rather than hanging on a broker that went away.
const STALLED_AFTER: Duration = Duration::from_secs(60);

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Restored {
    pub records: u64,
    pub seconds: f64,
    /// Whether the store was cleared first (missing, or not from this changelog).
    pub full: bool,
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
    brokers: &str,
    topic: &str,
    partition: i32,
    store: &mut PartitionStore,
    mut progress: impl FnMut(u64, f64),
) -> Result<Restored> {
    let started = Instant::now();
    let consumer: BaseConsumer = kafka::base_config(brokers)
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
            Some(records) => {
                let seconds = started.elapsed().as_secs_f64();
                progress(records, seconds);
                if records > 0 || full {
                    info!(partition, records, seconds, full, "restored state from {topic}");
                }
                return Ok(Restored { records, seconds, full });
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

/// Reads from `start` to the end into `store`; `None` if `start` is beyond the end.
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
) -> Result<Option<u64>> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(start))?;
    consumer.assign(&list).context("assigning the changelog partition")?;
    let mut records = 0u64;
    let mut batch = StoreBatch::default();
    // Writes read since the last batch marker, with their offsets: applied when a marker
    // vouches for them, dropped if none does (the batch of a crashed owner).
    let mut unmarked: Vec<(i64, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
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
                match message.key() {
                    Some(BATCH_MARKER) => {
                        let first = message
                            .payload()
                            .and_then(|v| <[u8; 8]>::try_from(v).ok())
                            .map_or(i64::MAX, i64::from_be_bytes);
                        for (at, key, value) in unmarked.drain(..) {
                            if at >= first {
                                batch.mirror(&key, value.as_deref());
                                records += 1;
                            }
                        }
                        last_marker = Some(offset);
                        if batch.len() >= RESTORE_CHUNK {
                            batch.set_checkpoint(offset);
                            store.write(std::mem::take(&mut batch))?;
                        }
                    }
                    Some(key) => unmarked.push((offset, key.to_vec(), message.payload().map(<[u8]>::to_vec))),
                    None => {}
                }
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    info!(partition, records, offset = next, "restoring…");
                    progress(records, started.elapsed().as_secs_f64());
                }
            }
        }
    }
    if !unmarked.is_empty() {
        info!(
            partition,
            records = unmarked.len(),
            "changelog ends with a batch that was never marked complete (its owner crashed): not applied"
        );
    }
    if let Some(offset) = last_marker {
        batch.set_checkpoint(offset);
    }
    store.write(batch)?;
    Ok(Some(records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_the_checkpoint() {
        assert_eq!(plan(Some(9), 0), Plan::From(10), "current or behind: read the rest");
        assert_eq!(plan(None, 0), Plan::Full(0), "state dir gone");
        assert_eq!(plan(None, 7), Plan::Full(7));
        assert_eq!(plan(Some(2), 5), Plan::Full(5), "what it misses is gone");
        assert_eq!(plan(Some(4), 5), Plan::From(5), "just enough is left");
    }
}
