//! The partition task: every rule of what an instance does with the partitions it owns,
//! sans-I/O, in quinn-proto's shape. Records (with their offsets), due timers, journaled
//! triggers, assignments, fences and the clock go in through its methods; what to produce,
//! store, commit and start comes out as a [`Sealed`] batch whose [`Flush`] the runtime
//! carries out step by step. What needs the network (a forwarded copy's mark checked
//! against where its partition ends, the jobs topic's end, another writer's changelog
//! records, decoding through a schema registry) is asked of the runtime as a step and
//! answered, never done here.
//!
//! The processor (`runtime::processor`), the simulator (`sim`) and the steady bench drive
//! this same code; each lends it a [`Store`] (RocksDB or memory) and an [`Encode`] (the
//! codec).
//!
//! Order per input record: [`Task::admit`] (which records a batch applies), [`Task::route`]
//! (forwarded, or a copy applied before), then the runtime reads the record and
//! [`Task::decide`] adds its decision to the batch. [`Task::stage_due_timers`] adds the
//! timers due; [`Task::seal`] closes the batch; [`Task::write_stores`] writes it once its
//! outputs are safe.

mod flush;
mod input;
mod record;
mod staged;
mod store;
mod triggers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tracing::{info, warn};

pub use self::record::{copy_headers, copy_mark, dead_letter, omit_value, origin_of, source_of, Record};
pub use self::staged::{Learned, Sealed, Staged, Tallies};
pub use self::store::{Store, Stored};
use super::admission::{self, Admission};
use super::apply::{self, Unfit};
use super::batch::{Flush, Marker, Writers};
use super::changelog::{self, Checked, Entry, Lineage, Writer};
use super::clock_watch::{ClockWatch, Step as ClockStep};
use super::duration::format_duration;
use super::events::Event;
use super::execution::RunId;
use super::forwarding::{Forwarded, Implausible};
use super::handover::{self, Found, Journaled, Reported, Settled, Step};
use super::lifecycle::{Context, Decision, Effect, Input, Needs, Settings as DeciderSettings, StateChange};
use super::limits::OverLimit;
use super::output::{Before, Encode, Encoded, HostError, Output};
use super::partitioning::{partition_for, PartitionId};
use super::records::{rejected_pipeline, Rejection};
use super::state::{EncodeError, StoreBatch, Write};
use super::timers::TimerKind;
use super::timers::{timer_origin, TimerIndex};
use super::PipelineState;
use crate::core::ids::PipelineId;

/// What the task needs to know of its deployment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub decider: DeciderSettings,
    /// Partition count of every input topic (checked equal at start).
    pub partitions: i32,
    /// Timers fired at most per batch.
    pub batch_size: usize,
    /// A record on another partition than its key's is forwarded there (`--misrouted
    /// forward`), else rejected here.
    pub forward_misrouted: bool,
    pub changelog: String,
    pub dlq: String,
    pub sensors: String,
    pub exactly_once: bool,
}

/// Where release keys come from: a random source the runtime lends (the operating
/// system's), or a seeded one in the simulator. `None`: no source; the release then needs
/// only the deadline (and the runtime says so).
pub trait ReleaseKeys: Send {
    fn next_key(&mut self) -> Option<String>;
}

/// Why the task stops the processor (or refuses a step).
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("partition {partition}'s store: {source}")]
    Store {
        partition: PartitionId,
        #[source]
        source: HostError,
    },
    #[error("encoding pipeline {pipeline}'s records: {source}")]
    Encode {
        pipeline: PipelineId,
        #[source]
        source: HostError,
    },
    #[error(transparent)]
    EncodeState(#[from] EncodeError),
    #[error("pipeline {pipeline}: even its rejection is over a limit: {reason}")]
    EvenItsRejection { pipeline: PipelineId, reason: OverLimit },
    #[error(transparent)]
    Zombie(#[from] Zombie),
    #[error(transparent)]
    PartitionsAdded(#[from] PartitionsAdded),
    #[error("partition {partition} of {topic} went back from offset {from} to {offset} while it was read: the topic was recreated (or lost records) under the running processor, and its new records up to offset {applied} would be skipped as already applied. Stop every instance, then rebuild the state with `sluice reset --from-scratch`, or delete the state directories and the changelog too if the old state is not wanted")]
    InputWentBack {
        partition: PartitionId,
        topic: String,
        from: i64,
        offset: i64,
        applied: i64,
    },
    #[error("partition {0} of the changelog {1} went back below this owner's own records: the topic was recreated (or truncated) while the processor ran, and the state it held is gone from it. Stop every instance, then rebuild the state with `sluice reset --from-scratch`")]
    ChangelogWentBack(PartitionId, String),
}

/// This instance found a newer owner's fence on partitions it still held: it lost them
/// without being told (paused past its session, or replaced by a process with the same
/// `--instance`). Nothing of the batch under way was written or started; the process stops
/// rather than go on with timers, triggers and a group membership it can no longer trust,
/// and a restart restores what it owns afresh.
#[derive(Debug, thiserror::Error)]
#[error("a newer owner fenced partitions {0:?}: this instance lost them without being told (a paused process, or another process with the same --instance); it stops before anything of the batch counts")]
pub struct Zombie(pub Vec<PartitionId>);

/// The input topics have more partitions than when the processor started: pipelines'
/// records now land in other partitions than their state, which Sluice cannot move.
#[derive(Debug, thiserror::Error)]
#[error("partition {assigned} was assigned, but the input topics had {partitions} partitions at start: partitions were added at run time, so pipelines' records now land in other partitions than their state. Sluice does not move state between partitions: remove the added partitions (recreate the topics with {partitions}), or move to the new count as a new deployment (new topics, or `sluice reset --from-scratch` after growing the changelog and events topics alike) — see the README's \"Partitions\"")]
pub struct PartitionsAdded {
    pub partitions: i32,
    pub assigned: PartitionId,
}

type Result<T, E = TaskError> = std::result::Result<T, E>;

/// An owned partition: its store, its side of the changelog, and the input offsets
/// delivered since it was opened.
pub struct Partition<S> {
    pub store: S,
    /// This owner's side of the changelog: its epoch, its last batch, where its next record
    /// lands and the keys to write again (see [`Writer`]).
    writer: Writer,
    /// The highest offset of each input topic delivered since the partition was opened:
    /// offsets that go back mean a topic recreated under the processor (see
    /// [`admission`]).
    delivered: HashMap<String, i64>,
}

/// A partition opened by the runtime (its store restored from the changelog), to install.
pub struct Opening<S> {
    pub store: S,
    pub writer: Writer,
    /// The journaled triggers found in the store.
    pub journaled: Vec<Effect>,
    /// Where the jobs topic's partition ended at the opening.
    pub jobs_end: i64,
    /// The timers found in the store: (pipeline, kind, due).
    pub timers: Vec<(PipelineId, TimerKind, DateTime<Utc>)>,
}

/// What a host does next with a record it fetched ([`Task::take`]).
#[derive(Debug)]
pub enum Take {
    /// It is this partition's: decode it with the host's codec, then [`Task::decide`].
    Decode,
    /// Nothing more: applied before, not this instance's, a copy applied before, or
    /// rejected here.
    Done,
    /// Its partition is still opening: read it again (seek back) once open.
    ReadAgainWhenOpen,
    /// Forwarded to partition `owner`, its key's.
    Forwarded { owner: PartitionId },
    /// A forwarded copy whose mark is to be checked against where its partition ends (the
    /// runtime asks the broker), then [`Task::take_marked`].
    CheckMark(Forwarded),
}

/// What the journaled triggers wait on now (see [`Task::poll_triggers`]).
#[derive(Default)]
pub struct TriggerPoll {
    /// Where the jobs topic ends must be measured for these (partition, run id):
    /// [`Task::jobs_end_measured`].
    pub measure: Vec<(PartitionId, RunId)>,
    /// Triggers that wait on nothing more: [`Task::settle_triggers`], after the runtime read
    /// each of [`TriggerPoll::fence_reads`] for a newer owner's fence.
    pub due: Vec<Found>,
}

impl TriggerPoll {
    /// The partitions whose changelog must be read since this owner's last record before
    /// anything is started for them, among those `assigned`.
    pub fn fence_reads(&self, assigned: &BTreeSet<PartitionId>) -> BTreeSet<PartitionId> {
        (self.due.iter().map(Found::partition))
            .filter(|p| assigned.contains(p))
            .collect()
    }
}

/// The clock as last judged against the producers' stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockJudgement {
    /// How far behind most producers' stamps the clock runs, if beyond the allowance.
    pub behind: Option<TimeDelta>,
    /// The allowance for readings stamped in the future now.
    pub allowance: TimeDelta,
    /// Whether the allowance changed with this judgement.
    pub changed: bool,
}

pub struct Task<S> {
    settings: Settings,
    encoder: Box<dyn Encode + Send + Sync>,
    keys: Box<dyn ReleaseKeys>,
    partitions: BTreeMap<PartitionId, Partition<S>>,
    /// Partitions given up on finding a newer owner's fence: their records are left alone
    /// until the group says who owns them.
    abandoned: BTreeSet<PartitionId>,
    timers: TimerIndex,
    /// Journaled triggers of opened partitions, until each is requested again or forgotten
    /// (see [`Journaled`]).
    journaled: Journaled,
    /// What this instance has seen of its clock: steps, and its producers' stamps.
    clock_watch: ClockWatch,
    /// The allowance for readings stamped in the future, as the clock watch last judged it.
    future_allowance: TimeDelta,
    /// Retention expiries held since the clock's last forward step.
    expiries_held: i64,
    /// Decisions made again from the whole state: they asked for more than the state was
    /// read in part with (see [`Needs`]).
    redecided: u64,
}

/// The owned partitions' changelog writers, for [`Flush`].
struct PartitionWriters<'a, S>(&'a mut BTreeMap<PartitionId, Partition<S>>);

impl<S> Writers for PartitionWriters<'_, S> {
    fn writer(&mut self, partition: PartitionId) -> Option<&mut Writer> {
        self.0.get_mut(&partition).map(|p| &mut p.writer)
    }
}

impl<S: Store> Task<S> {
    pub fn new(settings: Settings, encoder: Box<dyn Encode + Send + Sync>, keys: Box<dyn ReleaseKeys>) -> Self {
        let future_allowance = settings.decider.max_clock_skew;
        Task {
            settings,
            encoder,
            keys,
            partitions: BTreeMap::new(),
            abandoned: BTreeSet::new(),
            timers: TimerIndex::default(),
            journaled: Journaled::default(),
            clock_watch: ClockWatch::default(),
            future_allowance,
            expiries_held: 0,
            redecided: 0,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// How many decisions were made again from the whole state since the task began.
    pub fn redecided(&self) -> u64 {
        self.redecided
    }

    // ---- ownership ----

    /// Partition `p` was assigned: it is no longer given up, and must exist at start.
    pub fn assigned(&mut self, p: PartitionId) -> Result<(), PartitionsAdded> {
        if p.number() >= self.settings.partitions {
            return Err(PartitionsAdded {
                partitions: self.settings.partitions,
                assigned: p,
            });
        }
        self.abandoned.remove(&p);
        Ok(())
    }

    pub fn is_open(&self, p: PartitionId) -> bool {
        self.partitions.contains_key(&p)
    }

    pub fn store(&self, p: PartitionId) -> Option<&S> {
        self.partitions.get(&p).map(|o| &o.store)
    }

    /// The owned partitions' stores.
    pub fn stores(&self) -> impl Iterator<Item = (PartitionId, &S)> {
        self.partitions.iter().map(|(p, o)| (*p, &o.store))
    }

    /// The owned partitions.
    pub fn owned(&self) -> Vec<PartitionId> {
        self.partitions.keys().copied().collect()
    }

    /// Installs a partition opened in the background: its store, timers and journaled
    /// triggers. Returns the triggers left to the previous owner, each until when.
    pub fn install(&mut self, p: PartitionId, opening: Opening<S>, now: DateTime<Utc>) -> Vec<(RunId, DateTime<Utc>)> {
        let Opening {
            store,
            writer,
            journaled,
            jobs_end,
            timers,
        } = opening;
        for (pipeline, kind, at) in &timers {
            self.timers.set(p, pipeline, kind, *at);
        }
        let left = self.journaled.found(p, journaled, jobs_end, now);
        self.partitions.insert(
            p,
            Partition {
                store,
                writer,
                delivered: HashMap::new(),
            },
        );
        left
    }

    /// A partition opened after it was revoked or its assignment lost: its store may hold
    /// writes that do not count; it is left to its new owner. `zombie`: a newer owner's
    /// fence was found, so this instance is one.
    pub fn not_installed(&mut self, p: PartitionId, mut store: S, zombie: bool) -> Result<()> {
        store
            .disown()
            .map_err(|source| TaskError::Store { partition: p, source })?;
        self.abandoned.insert(p);
        if zombie {
            return Err(Zombie(vec![p]).into());
        }
        Ok(())
    }

    /// Partition `p` was revoked: it is no longer given up either, and its store closes.
    pub fn revoked(&mut self, p: PartitionId) -> Option<S> {
        self.abandoned.remove(&p);
        self.close(p)
    }

    /// Forgets an owned partition: its store (returned), timers and pending work.
    pub fn close(&mut self, p: PartitionId) -> Option<S> {
        let owned = self.partitions.remove(&p)?;
        self.timers.drop_partition(p);
        self.journaled.closed(p);
        Some(owned.store)
    }

    /// Gives up a partition a newer owner has fenced: this instance lost it without being
    /// told (a paused process, a network partition). Its store may hold writes that do not
    /// count, so it forgets its checkpoint and is restored in full if it comes back here.
    pub fn abandon(&mut self, p: PartitionId) -> Result<()> {
        error_fenced(p);
        if let Some(mut store) = self.close(p) {
            store
                .disown()
                .map_err(|source| TaskError::Store { partition: p, source })?;
        }
        self.abandoned.insert(p);
        Ok(())
    }

    /// Gives up `fenced` and says this instance is a zombie.
    pub fn give_up(&mut self, fenced: Vec<PartitionId>) -> TaskError {
        for p in &fenced {
            if let Err(e) = self.abandon(*p) {
                return e;
            }
        }
        Zombie(fenced).into()
    }

    /// Where this owner's next changelog record of partition `p` lands: what others wrote
    /// since is read from there ([`Task::fenced_by`], [`Task::watched`]).
    pub fn changelog_next(&self, p: PartitionId) -> Option<i64> {
        self.partitions.get(&p).map(|o| o.writer.next_offset())
    }

    /// Whether `entries` (others' records since this owner's last, see
    /// [`Task::changelog_next`]) hold a newer owner's fence of `p`.
    pub fn fenced_by(&self, p: PartitionId, entries: &[Entry]) -> bool {
        self.partitions.get(&p).is_some_and(|o| o.writer.fenced_by(entries))
    }

    /// What others wrote to partition `p`'s changelog since this owner's last record, up to
    /// `end`: their keys are written again with the next batch ([`Task::has_repairs`]); a
    /// newer owner's fence gives the partition up. Returns how many keys are stale.
    pub fn watched(&mut self, p: PartitionId, others: &[Entry], end: i64) -> Result<usize> {
        let Some(owned) = self.partitions.get_mut(&p) else {
            return Ok(0);
        };
        match owned.writer.watched(others, end) {
            Checked::Owner { stale } => Ok(stale),
            Checked::Fenced => Err(self.give_up(vec![p])),
        }
    }

    /// Keys to write again (a restore named them stale, or another writer wrote over
    /// them): a batch of repairs alone writes them at once rather than with the next input,
    /// as compaction could otherwise remove the value such a write shadows.
    pub fn has_repairs(&self) -> bool {
        self.partitions.values().any(|o| o.writer.has_repairs())
    }

    // ---- timers and the clock ----

    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.timers.next_due()
    }

    pub fn timers_pending(&self) -> usize {
        self.timers.len()
    }

    /// Reads the clock (`now`) against a monotonic one (`elapsed` since start): a step is
    /// returned for the runtime to say (and, forward, holds retention expiry).
    pub fn watch_clock(&mut self, now: DateTime<Utc>, elapsed: Duration) -> Option<ClockStep> {
        let step = self.clock_watch.read(now, elapsed)?;
        let by = format_duration(step.by.abs());
        match step.by > TimeDelta::zero() {
            true => warn!(
                by,
                "the clock stepped forward by {by}: retention expiry is held for an hour (check NTP on this node)"
            ),
            false => warn!(
                by,
                "the clock stepped back by {by}: timers wait until it reaches them again (check NTP on this node)"
            ),
        }
        Some(step)
    }

    /// Judges the clock against the stamps of a batch's sensor records (their producers'
    /// clocks): behind most of them, readings stamped in the future are allowed as much
    /// more. `None`: nothing new to judge by.
    pub fn judge_clock<'r>(
        &mut self,
        records: impl IntoIterator<Item = &'r dyn Record>,
        now: DateTime<Utc>,
    ) -> Option<ClockJudgement> {
        let mut stamped = 0;
        for record in records.into_iter().filter(|r| r.topic() == self.settings.sensors) {
            if let Some(at) = record.timestamp() {
                self.clock_watch.stamped(at, now);
                stamped += 1;
            }
        }
        if stamped == 0 {
            return None;
        }
        let (behind, allowance) = self.clock_watch.judge(self.settings.decider.max_clock_skew);
        let changed = allowance != self.future_allowance;
        if changed {
            match behind {
                Some(behind) => warn!(behind = %format_duration(behind), allowance = %format_duration(allowance),
                    "this processor's clock runs behind the times its producers stamp sensor records with: readings stamped in the future are allowed as much more meanwhile (check NTP on this node)"),
                None => info!("this processor's clock no longer runs behind its producers' stamps"),
            }
            self.future_allowance = allowance;
        }
        Some(ClockJudgement {
            behind,
            allowance,
            changed,
        })
    }

    /// Adds the timers due at `now` (at most a batch of them) to the batch. After a forward
    /// step of the clock, retention expiries are held (re-armed at the hold's end), so that
    /// a clock set days ahead does not end every execution at once.
    pub fn stage_due_timers(&mut self, staged: &mut Staged, now: DateTime<Utc>) -> Result<()> {
        let held_until = self.clock_watch.expiry_held_until(now);
        let mut held = 0;
        for timer in self.timers.pop_due(now, self.settings.batch_size) {
            if let Some(until) = self.clock_watch.held_until(&timer.kind, now) {
                self.timers.set(timer.partition, &timer.pipeline, &timer.kind, until);
                held += 1;
                continue;
            }
            staged.tallies.timers_late.push((now - timer.at).as_seconds_f64());
            let origin = timer_origin(&timer.pipeline, &timer.kind, timer.at);
            let input = Input::TimerFired(timer.kind);
            self.decide(staged, timer.partition, &timer.pipeline, &input, &origin, now, None)?;
        }
        if held > 0 {
            warn!(held, until = %held_until.unwrap_or(now), "retention expiries held after a forward step of the clock");
        }
        self.expiries_held = match held_until {
            Some(_) => self.expiries_held + held,
            None => 0,
        };
        staged.tallies.expiries_held = Some(self.expiries_held);
        Ok(())
    }
}

fn error_fenced(p: PartitionId) {
    tracing::error!(partition = p.number(), "a newer owner fenced this partition: this instance lost it without being told (a paused process?); the batch stops before its state and triggers, and the partition is left to its owner");
}

fn log_events(events: &[Event]) {
    for event in events {
        info!(
            event = event.kind.name(),
            schedule = event.schedule_id.as_deref(),
            date = event.date.as_deref(),
            run_id = event.run_id.as_deref(),
            "{}",
            event.message
        );
    }
}
