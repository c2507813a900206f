//! An in-memory log: topics of partitions of records at offsets, as a broker keeps them,
//! for the broker-free drivers of the partition task ([`super::driver`], the simulator).

use std::collections::BTreeMap;
use std::ops::Range;

use chrono::{DateTime, TimeDelta, Utc};

use crate::core::changelog::{self, Entry};
use crate::core::output::Output;
use crate::core::partitioning::{partition_for, PartitionId};

/// A record as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub offset: i64,
    /// When it was appended (the log's time then).
    pub at: DateTime<Utc>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Topics of `partitions` partitions each, created as they are first written.
#[derive(Debug, Clone, Default)]
pub struct Log {
    partitions: i32,
    /// The time records appended now are stamped with (the world's clock sets it).
    pub now: DateTime<Utc>,
    /// Per (topic, partition), the records kept and the offset the next one gets.
    topics: BTreeMap<(String, PartitionId), (Vec<Logged>, i64)>,
}

impl Log {
    pub fn new(partitions: i32) -> Self {
        Log {
            partitions,
            now: DateTime::UNIX_EPOCH,
            topics: BTreeMap::new(),
        }
    }

    /// Appends `output` where a producer sends it (its partition, else its key's, else 0);
    /// returns where it landed.
    pub fn append(&mut self, output: &Output) -> (PartitionId, i64) {
        let p = (output.partition)
            .or_else(|| output.key.as_deref().map(|k| partition_for(k, self.partitions)))
            .unwrap_or(PartitionId::new(0));
        let (records, next) = self.topics.entry((output.topic.clone(), p)).or_default();
        let offset = *next;
        records.push(Logged {
            offset,
            at: self.now,
            key: output.key.clone(),
            value: output.value.clone(),
            headers: output.headers.clone(),
        });
        *next += 1;
        (p, offset)
    }

    /// Where partition `p` of `topic` ends (its next offset).
    pub fn end(&self, topic: &str, p: PartitionId) -> i64 {
        self.topics.get(&(topic.to_string(), p)).map_or(0, |(_, next)| *next)
    }

    /// The records of partition `p` of `topic` kept in `range`.
    pub fn read(&self, topic: &str, p: PartitionId, range: Range<i64>) -> impl Iterator<Item = &Logged> {
        let records = self
            .topics
            .get(&(topic.to_string(), p))
            .map_or(&[][..], |(r, _)| r.as_slice());
        records.iter().filter(move |r| range.contains(&r.offset))
    }

    /// The changelog records of partition `p` of `topic` in `range`, as the restore rules
    /// see them.
    pub fn entries(&self, topic: &str, p: PartitionId, range: Range<i64>) -> Vec<Entry> {
        (self.read(topic, p, range))
            .filter_map(|r| {
                let batch = (r.headers.iter())
                    .find(|(k, _)| k == changelog::BATCH_HEADER)
                    .map(|(_, v)| v.as_slice());
                changelog::entry(r.offset, r.key.as_deref()?, r.value.as_deref(), batch)
            })
            .collect()
    }

    /// Drops every record kept, keeping where each partition ends (a bench that only
    /// needs the offsets).
    pub fn trim(&mut self) {
        for (records, _) in self.topics.values_mut() {
            records.clear();
        }
    }

    /// Compaction: removes each record of partition `p` of `topic` that a later record of
    /// its key shadows, if it is at least `lag` old (`min.compaction.lag.ms`).
    pub fn compact(&mut self, topic: &str, p: PartitionId, lag: TimeDelta) {
        let now = self.now;
        let Some((records, _)) = self.topics.get_mut(&(topic.to_string(), p)) else {
            return;
        };
        let mut last: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for r in records.iter() {
            if let Some(key) = &r.key {
                last.insert(key.clone(), r.offset);
            }
        }
        records.retain(|r| now - r.at < lag || r.key.as_ref().is_none_or(|k| last.get(k) == Some(&r.offset)));
    }
}
