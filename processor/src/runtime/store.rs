//! Per-partition state in RocksDB: pipeline states, durable timers and the applied-offset
//! watermark of each input topic, written together in one atomic batch.
//!
//! Keys: `p/<pipeline>` → state (JSON); `t/<due ms, big-endian u64><pipeline>\0<kind>` →
//! timer (so timers sort by due time, then pipeline, then kind, on disk as in memory);
//! `o/<topic>` → highest applied offset.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use chrono::{DateTime, Utc};
use rocksdb::{Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use crate::core::timers::TimerKind;
use crate::core::PipelineState;

pub struct PartitionStore {
    db: DB,
    path: PathBuf,
    /// The applied-offset watermark per input topic, read once at open and kept in step with
    /// every write: it is consulted for every record, so it must not cost a RocksDB read.
    applied: HashMap<String, i64>,
}

/// A timer as stored: due time, pipeline, kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTimer {
    pub at: DateTime<Utc>,
    pub pipeline: String,
    pub kind: TimerKind,
}

fn pipeline_key(pipeline: &str) -> Vec<u8> {
    [b"p/".as_slice(), pipeline.as_bytes()].concat()
}

fn offset_key(topic: &str) -> Vec<u8> {
    [b"o/".as_slice(), topic.as_bytes()].concat()
}

fn timer_key(at: DateTime<Utc>, pipeline: &str, kind: &TimerKind) -> Vec<u8> {
    let due = at.timestamp_millis().max(0) as u64;
    let mut key = b"t/".to_vec();
    key.extend_from_slice(&due.to_be_bytes());
    key.extend_from_slice(pipeline.as_bytes());
    key.push(0);
    key.extend_from_slice(kind.encode().as_bytes());
    key
}

fn parse_timer_key(key: &[u8]) -> Option<StoredTimer> {
    let rest = key.strip_prefix(b"t/")?;
    let due = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let rest = &rest[8..];
    let split = rest.iter().position(|b| *b == 0)?;
    let pipeline = String::from_utf8(rest[..split].to_vec()).ok()?;
    let kind = TimerKind::decode(std::str::from_utf8(&rest[split + 1..]).ok()?)?;
    Some(StoredTimer {
        at: DateTime::from_timestamp_millis(due as i64)?,
        pipeline,
        kind,
    })
}

/// Writes that must land together.
#[derive(Default)]
pub struct StoreBatch {
    batch: WriteBatch,
    applied: Vec<(String, i64)>,
}

impl StoreBatch {
    pub fn put_pipeline(&mut self, pipeline: &str, state: &PipelineState) -> Result<()> {
        let bytes = serde_json::to_vec(state).context("encoding pipeline state")?;
        self.batch.put(pipeline_key(pipeline), bytes);
        Ok(())
    }

    pub fn delete_pipeline(&mut self, pipeline: &str) {
        self.batch.delete(pipeline_key(pipeline));
    }

    pub fn put_timer(&mut self, at: DateTime<Utc>, pipeline: &str, kind: &TimerKind) {
        self.batch.put(timer_key(at, pipeline, kind), b"");
    }

    pub fn delete_timer(&mut self, at: DateTime<Utc>, pipeline: &str, kind: &TimerKind) {
        self.batch.delete(timer_key(at, pipeline, kind));
    }

    pub fn set_applied_offset(&mut self, topic: &str, offset: i64) {
        self.batch.put(offset_key(topic), offset.to_be_bytes());
        self.applied.push((topic.to_string(), offset));
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

impl PartitionStore {
    pub fn open(state_dir: &Path, partition: i32) -> Result<Self> {
        let path = state_dir.join(format!("partition-{partition}"));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        let db = DB::open(&options, &path).with_context(|| format!("opening RocksDB at {}", path.display()))?;
        let mut applied = HashMap::new();
        for item in db.iterator(IteratorMode::From(b"o/", Direction::Forward)) {
            let (key, value) = item?;
            let Some(topic) = key.strip_prefix(b"o/") else { break };
            let raw: [u8; 8] = value
                .as_ref()
                .try_into()
                .map_err(|_| anyhow!("corrupt applied offset in {}", path.display()))?;
            applied.insert(String::from_utf8_lossy(topic).into_owned(), i64::from_be_bytes(raw));
        }
        Ok(PartitionStore { db, path, applied })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn pipeline(&self, pipeline: &str) -> Result<Option<PipelineState>> {
        match self.db.get(pipeline_key(pipeline))? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| {
                format!(
                    "decoding stored state of pipeline {pipeline} in {}",
                    self.path.display()
                )
            }),
        }
    }

    pub fn applied_offset(&self, topic: &str) -> Option<i64> {
        self.applied.get(topic).copied()
    }

    /// Every stored timer, earliest first.
    pub fn timers(&self) -> Result<Vec<StoredTimer>> {
        let mut timers = Vec::new();
        for item in self.db.iterator(IteratorMode::From(b"t/", Direction::Forward)) {
            let (key, _) = item?;
            if !key.starts_with(b"t/") {
                break;
            }
            let timer = parse_timer_key(&key).ok_or_else(|| anyhow!("corrupt timer key in {}", self.path.display()))?;
            timers.push(timer);
        }
        Ok(timers)
    }

    /// Every pipeline id with stored state.
    pub fn pipelines(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for item in self.db.iterator(IteratorMode::From(b"p/", Direction::Forward)) {
            let (key, _) = item?;
            let Some(id) = key.strip_prefix(b"p/") else { break };
            ids.push(String::from_utf8_lossy(id).into_owned());
        }
        Ok(ids)
    }

    /// Applies a batch atomically. The WAL is not fsynced per batch: a process crash loses
    /// nothing, and machine loss is what the changelog is for.
    pub fn write(&mut self, batch: StoreBatch) -> Result<()> {
        let mut options = WriteOptions::default();
        options.set_sync(false);
        self.db
            .write_opt(batch.batch, &options)
            .context("writing state batch to RocksDB")?;
        self.applied.extend(batch.applied);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_timers_and_offsets_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let kind = |date: &str| TimerKind::Evaluate {
            schedule_id: "stream".into(),
            date: date.into(),
        };
        let t1 = DateTime::from_timestamp(2_000_000_000, 0).unwrap();
        let t0 = DateTime::from_timestamp(1_000_000_000, 0).unwrap();
        {
            let mut store = PartitionStore::open(dir.path(), 2).unwrap();
            let mut batch = StoreBatch::default();
            batch.put_pipeline("p1", &PipelineState::default()).unwrap();
            batch.put_timer(t1, "p1", &kind("2026-01-02"));
            batch.put_timer(t0, "p2", &kind("2026-01-01"));
            batch.put_timer(t0, "p3", &kind("2026-01-03"));
            batch.set_applied_offset("sluice.sensors", 41);
            store.write(batch).unwrap();
            assert_eq!(
                store.applied_offset("sluice.sensors"),
                Some(41),
                "known without reopening"
            );
            let mut batch = StoreBatch::default();
            batch.delete_timer(t0, "p3", &kind("2026-01-03"));
            store.write(batch).unwrap();
        }
        let store = PartitionStore::open(dir.path(), 2).unwrap();
        assert_eq!(store.pipeline("p1").unwrap(), Some(PipelineState::default()));
        assert_eq!(store.pipeline("nope").unwrap(), None);
        assert_eq!(store.applied_offset("sluice.sensors"), Some(41));
        assert_eq!(store.applied_offset("sluice.jobs"), None);
        let timers = store.timers().unwrap();
        assert_eq!(timers.len(), 2);
        assert_eq!(
            (timers[0].at, timers[0].pipeline.as_str()),
            (t0, "p2"),
            "earliest first"
        );
        assert_eq!(timers[1].kind, kind("2026-01-02"));
        assert_eq!(store.pipelines().unwrap(), ["p1"]);
    }
}
