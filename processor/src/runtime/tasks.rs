//! The task manager: the partition task's ownership and opening, as Kafka Streams' task
//! manager handles assignments. It opens assigned partitions in the background, installs
//! them, closes revoked ones, reads what the task asks of the broker before it starts
//! anything outside a batch (a newer owner's fence, where the jobs topic ends), and pauses
//! and resumes the input of partitions being opened.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use chrono::{DateTime, Utc};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::changelog;
use super::error as runtime_error;
use super::kafka::{self, Connection};
use super::opening::{Opened, Openings};
use super::rebalance::{Ownership, RebalanceContext};
use super::store::PartitionStore;
use super::telemetry::Telemetry;
use super::topics::Topics;
use crate::core::changelog::Entry;
use crate::core::ownership::{self, OnOpened, OnRevoked};
use crate::core::partitioning::PartitionId;
use crate::core::task::{Opening, Staged, Task};

type Consumed = StreamConsumer<RebalanceContext>;

pub struct TaskManager {
    /// The owned partitions and every rule of what is done with them (see core::task).
    pub task: Task<PartitionStore>,
    /// Partitions assigned and being opened in the background.
    pub openings: Openings,
    kafka: Connection,
    topics: Topics,
    telemetry: Arc<Telemetry>,
}

impl TaskManager {
    pub fn new(
        task: Task<PartitionStore>,
        openings: Openings,
        kafka: Connection,
        topics: Topics,
        telemetry: Arc<Telemetry>,
    ) -> Self {
        TaskManager {
            task,
            openings,
            kafka,
            topics,
            telemetry,
        }
    }

    /// Partitions assigned or revoked. A held partition lost to a newer owner's fence makes
    /// this instance a zombie, which stops (`ownership::on_revoked`).
    pub fn on_ownership(&mut self, consumer: &Consumed, change: Ownership) -> Result<()> {
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
                // Only a lost partition is worth the read.
                let fenced: Vec<PartitionId> = (partitions.iter().copied())
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
                    resume_input(consumer, p, &paused)?;
                    self.telemetry.partition_revoked(p, &self.topics.inputs());
                    if self.task.revoked(p).is_some() {
                        info!(partition = p.number(), "partition revoked: state closed");
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts opening assigned partition `p` in the background. Its input is not paused
    /// here (that races librdkafka's start of the fetcher: see [`super::opening`]); what
    /// of it is delivered meanwhile is skipped ([`TaskManager::skip`]).
    pub fn open(&mut self, p: PartitionId) {
        if !self.task.is_open(p) && !self.openings.contains(p) {
            self.openings.start(p);
        }
    }

    /// A record of partition `p`, still being opened, was delivered: it is skipped, and
    /// read again once `p` is open. Its fetcher has started (it delivered): pausing its
    /// topic-partition now is safe.
    pub fn skip(&mut self, consumer: &Consumed, topic: &str, p: PartitionId, offset: i64) -> Result<()> {
        self.open(p);
        if self.openings.skip(topic, p, offset) {
            let mut list = TopicPartitionList::new();
            list.add_partition(topic, p.number());
            (consumer.pause(&list)).with_context(|| format!("pausing {topic} partition {p} while it is opened"))?;
        }
        Ok(())
    }

    /// Installs a partition opened in the background (see [`super::opening`]): its store,
    /// timers and journaled triggers; then reads again what of its input was delivered
    /// meanwhile. Returns whether it was installed.
    pub fn opened(
        &mut self,
        consumer: &Consumed,
        p: PartitionId,
        result: Result<Opened, runtime_error::Error>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let Opened {
            store,
            restored,
            writer,
            journaled,
            jobs_end,
            timers,
            fenced,
        } = result.map_err(|e| anyhow::Error::new(e).context(format!("opening partition {p}")))?;
        let assigned = !consumer.assignment_lost()
            && (consumer.assignment().ok()).is_some_and(|a| a.find_partition(&self.topics.jobs, p.number()).is_some());
        let outcome = ownership::on_opened(assigned, fenced);
        if outcome != OnOpened::Install {
            // Left to the new owner, not read here; but assigned here again, it must be.
            let paused: Vec<_> = (self.openings.take_skipped(p).into_iter())
                .map(|(t, _)| (t, None))
                .collect();
            resume_input(consumer, p, &paused)?;
            self.task.not_installed(p, store, outcome == OnOpened::Zombie)?;
            warn!(
                partition = p.number(),
                "partition opened after it was revoked or the assignment was lost: left to its new owner"
            );
            return Ok(false);
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
        let left = self.task.install(p, opening, now);
        for (run_id, until) in &left {
            debug!(partition = p.number(), %run_id, until = %until,
                "a journaled trigger's call may still be under way at the previous owner: it is left to it until its release, a report, or its deadline");
        }
        // One line, not one per trigger: a crash in a busy hour leaves tens of thousands.
        if let Some(latest) = left.iter().map(|(_, until)| until).max() {
            info!(partition = p.number(), triggers = left.len(), latest = %latest,
                "journaled triggers whose calls may still be under way at the previous owner: each is left to it until its release, a report, or its deadline");
        }
        info!(
            partition = p.number(),
            timers = timers_found,
            restored_records = restored.records,
            restore_seconds = format!("{:.3}", restored.seconds),
            full_restore = restored.full,
            epoch,
            path,
            "partition assigned: state opened"
        );
        // Input delivered while the partition was being opened was skipped: read it again.
        let skipped: Vec<_> = (self.openings.take_skipped(p).into_iter())
            .map(|(t, o)| (t, Some(o)))
            .collect();
        resume_input(consumer, p, &skipped)?;
        self.telemetry.set_ready(self.openings.is_empty());
        Ok(true)
    }

    /// Reads what others wrote to each owned changelog partition since this owner's last
    /// record (see [`crate::core::changelog::Writer::watched`]): their keys are written
    /// again at once, and a newer owner's fence gives the partition up. A partition whose
    /// changelog cannot be read now is read at the next turn.
    pub fn watch_changelogs(&mut self) -> Result<()> {
        for p in self.task.owned() {
            let Some(from) = self.task.changelog_next(p) else {
                continue;
            };
            let topic = &self.topics.changelog;
            let read = tokio::task::block_in_place(|| changelog::read_since(&self.kafka, topic, p, from));
            let (others, end) = match read {
                Ok(read) => read,
                Err(e) => {
                    warn!(partition = p.number(), error = %format!("{e:#}"), "could not read the changelog to look for other writers; trying again later");
                    continue;
                }
            };
            let stale = self.task.watched(p, &others, end)?;
            if stale > 0 {
                warn!(partition = p.number(), keys = stale, "another writer (a zombie, or a crashed batch) wrote to this partition's changelog since this owner's last write: those keys are written again");
            }
        }
        Ok(())
    }

    /// Reads what others wrote between this owner's changelog records of partition `p`, in
    /// `ranges`. Fails closed: until the records are read, nobody can tell whether they hold a
    /// newer owner's fence, so the batch waits (nothing of it is written or started). `None`:
    /// the assignment was lost meanwhile (an outage, or a pause).
    pub async fn read_changelog(
        &self,
        consumer: &Consumed,
        p: PartitionId,
        ranges: &[Range<i64>],
    ) -> Option<Vec<Entry>> {
        let topic = &self.topics.changelog;
        let what = format!("another writer's changelog records in {ranges:?}");
        while_owned(consumer, p, &what, || {
            changelog::read_ranges(&self.kafka, topic, p, ranges)
        })
        .await
    }

    /// Where changelog partition `p` ends (its high watermark), asked when the batch's records
    /// there were acknowledged without an offset that places them (see
    /// `core::changelog::Writer::places`). Waits as [`TaskManager::read_changelog`] does.
    pub async fn changelog_end(&self, consumer: &Consumed, p: PartitionId) -> Option<i64> {
        let topic = &self.topics.changelog;
        let end = || Ok(consumer.fetch_watermarks(topic, p.number(), kafka::METADATA_TIMEOUT)?.1);
        while_owned(consumer, p, "where the changelog ends", end).await
    }

    /// The journaled triggers that wait for nothing more (see [`Task::settle_triggers`]),
    /// what they wait on answered first: where the jobs topic ends, and whether a newer
    /// owner fenced their partitions. Returns the batch that requests them again.
    pub fn triggers_due(&mut self, consumer: &Consumed, now: DateTime<Utc>) -> Result<Staged> {
        if !self.task.triggers_waiting() {
            return Ok(Staged::default());
        }
        let jobs = &self.topics.jobs;
        let positions: BTreeMap<PartitionId, i64> = (consumer.position().ok())
            .map(|list| {
                (list.elements_for_topic(jobs).iter())
                    .filter_map(|e| Some((PartitionId::new(e.partition()), e.offset().to_raw()?)))
                    .collect()
            })
            .unwrap_or_default();
        let poll = self.task.poll_triggers(now, jobs, &positions);
        for (p, run_id) in &poll.measure {
            match tokio::task::block_in_place(|| consumer.fetch_watermarks(jobs, p.number(), kafka::METADATA_TIMEOUT)) {
                Ok((_, end)) => self.task.jobs_end_measured(*p, run_id, end, now),
                Err(e) => {
                    warn!(partition = p.number(), error = %e, "could not read where the jobs topic ends: the journaled trigger waits")
                }
            }
        }
        if poll.due.is_empty() {
            return Ok(Staged::default());
        }
        // Nothing is started for a partition this instance may have lost: a process paused
        // while it opened one wakes with journaled triggers its new owner requests already.
        let assigned: BTreeSet<PartitionId> = match consumer.assignment_lost() {
            true => BTreeSet::new(),
            false => (consumer.assignment().ok())
                .map(|a| {
                    (a.elements_for_topic(jobs).iter())
                        .map(|e| PartitionId::new(e.partition()))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let fences: BTreeMap<PartitionId, Option<bool>> = (poll.fence_reads(&assigned).into_iter())
            .map(|p| (p, self.fenced_since_last_write(p)))
            .collect();
        Ok(self.task.settle_triggers(poll.due, now, &assigned, &fences)?)
    }

    /// Whether a newer owner has fenced partition `p` after this owner's last changelog
    /// record. Asked before anything is started for `p` outside a batch (a journaled
    /// trigger, a revocation): a batch sees a fence among its own writes, but nothing else
    /// would. `None`: the changelog could not be read.
    fn fenced_since_last_write(&self, p: PartitionId) -> Option<bool> {
        let Some(from) = self.task.changelog_next(p) else {
            return Some(false);
        };
        let topic = &self.topics.changelog;
        match tokio::task::block_in_place(|| changelog::read_since(&self.kafka, topic, p, from)) {
            Ok((entries, _)) => Some(self.task.fenced_by(p, &entries)),
            Err(e) => {
                warn!(partition = p.number(), error = %format!("{e:#}"), "could not read the changelog to check for a newer owner: journaled triggers wait");
                None
            }
        }
    }
}

/// Resumes the input topics of partition `p` paused while it was being opened, each read
/// again from its offset when one is given.
fn resume_input(consumer: &Consumed, p: PartitionId, paused: &[(String, Option<i64>)]) -> Result<()> {
    if paused.is_empty() {
        return Ok(());
    }
    let mut list = TopicPartitionList::new();
    for (topic, _) in paused {
        list.add_partition(topic, p.number());
    }
    tokio::task::block_in_place(|| -> Result<()> {
        consumer
            .resume(&list)
            .with_context(|| format!("resuming the input of partition {p}"))?;
        for (topic, offset) in paused {
            let Some(offset) = offset else { continue };
            consumer
                .seek(topic, p.number(), Offset::Offset(*offset), kafka::METADATA_TIMEOUT)
                .with_context(|| format!("reading {topic} partition {p} again from offset {offset}"))?;
        }
        Ok(())
    })
}

/// Reads with `read` until it answers, waiting out a broker that does not (the batch waits:
/// nothing of it is written or started meanwhile); `None` once the assignment is lost.
async fn while_owned<T>(
    consumer: &Consumed,
    p: PartitionId,
    what: &str,
    mut read: impl FnMut() -> Result<T>,
) -> Option<T> {
    let mut backoff = Backoff::outage();
    loop {
        match tokio::task::block_in_place(&mut read) {
            Ok(read) => return Some(read),
            Err(_) if consumer.assignment_lost() => return None,
            Err(e) => {
                warn!(partition = p.number(), error = %format!("{e:#}"), "could not read {what}: the batch waits until it is read");
                backoff.wait().await;
            }
        }
    }
}
