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

mod record;
mod staged;
mod store;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tracing::{debug, info, warn};

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
use super::forwarding::{Forwarded, Implausible};
use super::handover::{self, Found, Journaled, Reported, Settled, Step};
use super::lifecycle::{Context, Decision, Effect, Input, Settings as DeciderSettings, StateChange};
use super::output::{Before, Encode, Encoded, HostError, Output};
use super::partitioning::partition_for;
use super::records::{rejected_pipeline, Rejection};
use super::state::{EncodeError, StoreBatch, Write};
use super::timers::TimerKind;
use super::timers::{timer_origin, TimerIndex};
use super::PipelineState;

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
        partition: i32,
        #[source]
        source: HostError,
    },
    #[error("encoding pipeline {pipeline}'s records: {source}")]
    Encode {
        pipeline: String,
        #[source]
        source: HostError,
    },
    #[error(transparent)]
    EncodeState(#[from] EncodeError),
    #[error("pipeline {pipeline}: even its rejection is over a limit: {reason}")]
    EvenItsRejection { pipeline: String, reason: String },
    #[error(transparent)]
    Zombie(#[from] Zombie),
    #[error(transparent)]
    PartitionsAdded(#[from] PartitionsAdded),
    #[error("partition {partition} of {topic} went back from offset {from} to {offset} while it was read: the topic was recreated (or lost records) under the running processor, and its new records up to offset {applied} would be skipped as already applied. Stop every instance, then rebuild the state with `sluice reset --from-scratch`, or delete the state directories and the changelog too if the old state is not wanted")]
    InputWentBack {
        partition: i32,
        topic: String,
        from: i64,
        offset: i64,
        applied: i64,
    },
    #[error("partition {0} of the changelog {1} went back below this owner's own records: the topic was recreated (or truncated) while the processor ran, and the state it held is gone from it. Stop every instance, then rebuild the state with `sluice reset --from-scratch`")]
    ChangelogWentBack(i32, String),
}

/// This instance found a newer owner's fence on partitions it still held: it lost them
/// without being told (paused past its session, or replaced by a process with the same
/// `--instance`). Nothing of the batch under way was written or started; the process stops
/// rather than go on with timers, triggers and a group membership it can no longer trust,
/// and a restart restores what it owns afresh.
#[derive(Debug, thiserror::Error)]
#[error("a newer owner fenced partitions {0:?}: this instance lost them without being told (a paused process, or another process with the same --instance); it stops before anything of the batch counts")]
pub struct Zombie(pub Vec<i32>);

/// The input topics have more partitions than when the processor started: pipelines'
/// records now land in other partitions than their state, which Sluice cannot move.
#[derive(Debug, thiserror::Error)]
#[error("partition {assigned} was assigned, but the input topics had {partitions} partitions at start: partitions were added at run time, so pipelines' records now land in other partitions than their state. Sluice does not move state between partitions: remove the added partitions (recreate the topics with {partitions}), or move to the new count as a new deployment (new topics, or `sluice reset --from-scratch` after growing the changelog and events topics alike) — see the README's \"Partitions\"")]
pub struct PartitionsAdded {
    pub partitions: i32,
    pub assigned: i32,
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
    pub timers: Vec<(String, TimerKind, DateTime<Utc>)>,
}

/// Where an input record is decided.
#[derive(Debug)]
pub enum Routed {
    /// Here: it is this partition's (or is rejected here, as bad input).
    Here,
    /// Forwarded to partition `owner`, its key's.
    Forwarded { owner: i32 },
    /// A forwarded copy: its mark must be checked against where its partition ends (the
    /// runtime asks the broker), then [`Task::route_marked`].
    CheckMark(Forwarded),
    /// Nothing more to do with it: a copy applied before, or one rejected.
    Elsewhere,
}

/// What the journaled triggers wait on now (see [`Task::poll_triggers`]).
#[derive(Default)]
pub struct TriggerPoll {
    /// Where the jobs topic ends must be measured for these (partition, run id):
    /// [`Task::jobs_end_measured`].
    pub measure: Vec<(i32, String)>,
    /// Triggers that wait on nothing more: [`Task::settle_triggers`], after the runtime read
    /// each of [`TriggerPoll::fence_reads`] for a newer owner's fence.
    pub due: Vec<Found>,
}

impl TriggerPoll {
    /// The partitions whose changelog must be read since this owner's last record before
    /// anything is started for them, among those `assigned`.
    pub fn fence_reads(&self, assigned: &BTreeSet<i32>) -> BTreeSet<i32> {
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
    partitions: BTreeMap<i32, Partition<S>>,
    /// Partitions given up on finding a newer owner's fence: their records are left alone
    /// until the group says who owns them.
    abandoned: BTreeSet<i32>,
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
}

/// The owned partitions' changelog writers, for [`Flush`].
struct PartitionWriters<'a, S>(&'a mut BTreeMap<i32, Partition<S>>);

impl<S> Writers for PartitionWriters<'_, S> {
    fn writer(&mut self, partition: i32) -> Option<&mut Writer> {
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
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    // ---- ownership ----

    /// Partition `p` was assigned: it is no longer given up, and must exist at start.
    pub fn assigned(&mut self, p: i32) -> Result<(), PartitionsAdded> {
        if p >= self.settings.partitions {
            return Err(PartitionsAdded {
                partitions: self.settings.partitions,
                assigned: p,
            });
        }
        self.abandoned.remove(&p);
        Ok(())
    }

    pub fn is_open(&self, p: i32) -> bool {
        self.partitions.contains_key(&p)
    }

    pub fn store(&self, p: i32) -> Option<&S> {
        self.partitions.get(&p).map(|o| &o.store)
    }

    /// The owned partitions' stores.
    pub fn stores(&self) -> impl Iterator<Item = (i32, &S)> {
        self.partitions.iter().map(|(p, o)| (*p, &o.store))
    }

    /// The owned partitions.
    pub fn owned(&self) -> Vec<i32> {
        self.partitions.keys().copied().collect()
    }

    /// Installs a partition opened in the background: its store, timers and journaled
    /// triggers. Returns the triggers left to the previous owner, each until when.
    pub fn install(&mut self, p: i32, opening: Opening<S>, now: DateTime<Utc>) -> Vec<(String, DateTime<Utc>)> {
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
    pub fn not_installed(&mut self, p: i32, mut store: S, zombie: bool) -> Result<()> {
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
    pub fn revoked(&mut self, p: i32) -> Option<S> {
        self.abandoned.remove(&p);
        self.close(p)
    }

    /// Forgets an owned partition: its store (returned), timers and pending work.
    pub fn close(&mut self, p: i32) -> Option<S> {
        let owned = self.partitions.remove(&p)?;
        self.timers.drop_partition(p);
        self.journaled.closed(p);
        Some(owned.store)
    }

    /// Gives up a partition a newer owner has fenced: this instance lost it without being
    /// told (a paused process, a network partition). Its store may hold writes that do not
    /// count, so it forgets its checkpoint and is restored in full if it comes back here.
    pub fn abandon(&mut self, p: i32) -> Result<()> {
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
    pub fn give_up(&mut self, fenced: Vec<i32>) -> TaskError {
        for p in &fenced {
            if let Err(e) = self.abandon(*p) {
                return e;
            }
        }
        Zombie(fenced).into()
    }

    /// Where this owner's next changelog record of partition `p` lands: what others wrote
    /// since is read from there ([`Task::fenced_by`], [`Task::watched`]).
    pub fn changelog_next(&self, p: i32) -> Option<i64> {
        self.partitions.get(&p).map(|o| o.writer.next_offset())
    }

    /// Whether `entries` (others' records since this owner's last, see
    /// [`Task::changelog_next`]) hold a newer owner's fence of `p`.
    pub fn fenced_by(&self, p: i32, entries: &[Entry]) -> bool {
        self.partitions.get(&p).is_some_and(|o| o.writer.fenced_by(entries))
    }

    /// What others wrote to partition `p`'s changelog since this owner's last record, up to
    /// `end`: their keys are written again with the next batch ([`Task::has_repairs`]); a
    /// newer owner's fence gives the partition up. Returns how many keys are stale.
    pub fn watched(&mut self, p: i32, others: &[Entry], end: i64) -> Result<usize> {
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

    // ---- input ----

    /// Which of a batch's records are applied ([`admission`]): one of a partition not
    /// assigned, given up, not open yet or applied before is passed over. `assigned`: the
    /// consumer's assignment holds the record's topic-partition.
    pub fn admit(
        &mut self,
        staged: &mut Staged,
        topic: &str,
        p: i32,
        offset: i64,
        assigned: bool,
    ) -> Result<Admission> {
        let key = (topic.to_string(), p);
        let owned = self.partitions.get_mut(&p);
        let partition = admission::Partition {
            assigned,
            abandoned: self.abandoned.contains(&p),
            open: owned.is_some(),
            applied: owned.as_ref().and_then(|o| o.store.applied_offset(topic)),
            seen_in_batch: staged.commits.get(&key).copied(),
            delivered: owned.as_ref().and_then(|o| o.delivered.get(topic).copied()),
        };
        let admitted = admission::admit(&partition, offset);
        if let Some(owned) = owned.filter(|_| !matches!(admitted, Admission::WentBack { .. })) {
            match owned.delivered.get_mut(topic) {
                Some(delivered) => *delivered = offset,
                None => {
                    owned.delivered.insert(topic.to_string(), offset);
                }
            }
        }
        if admitted.commits() {
            *staged.tallies.records_in.entry(key.0.clone()).or_default() += 1;
            staged.commits.insert(key, offset);
        }
        match admitted {
            Admission::NotAssigned => debug!(%topic, p, offset, "partition no longer assigned: left to its new owner"),
            Admission::GivenUp => debug!(%topic, p, offset, "partition given up to a newer owner: left to it"),
            Admission::AlreadyApplied => debug!(%topic, p, offset, "already applied: skipped"),
            // Nothing of the batch counts: its records are not committed, and on restart the
            // opening's check (InputAhead) stops it again until the state is rebuilt.
            Admission::WentBack { from } => {
                return Err(TaskError::InputWentBack {
                    partition: p,
                    topic: topic.to_string(),
                    from,
                    offset,
                    applied: partition.applied.unwrap_or(from),
                })
            }
            Admission::Apply => staged.store(p).set_applied_offset(topic, offset),
            Admission::ReadAgainWhenOpen => {}
        }
        Ok(admitted)
    }

    /// Forwards a record on another partition than its key's (under `--misrouted forward`;
    /// a copy that is still misrouted is rejected, as under `reject`); a forwarded copy's
    /// mark is checked next ([`Routed::CheckMark`]).
    /// `role`: the input's role (see [`origin_of`]).
    pub fn route(
        &mut self,
        staged: &mut Staged,
        record: &dyn Record,
        role: &str,
        now: DateTime<Utc>,
    ) -> Result<Routed> {
        let (topic, p, offset) = (record.topic(), record.partition(), record.offset());
        let mark = copy_mark(record);
        if let Some(key) = record.key() {
            let owner = partition_for(key, self.settings.partitions);
            if owner != p {
                if mark.is_some() || !self.settings.forward_misrouted {
                    return Ok(Routed::Here);
                }
                let durable = self.store(p).and_then(|s| s.applied_offset(topic)).unwrap_or(-1);
                let mark = Forwarded {
                    partition: p,
                    offset,
                    durable,
                };
                let copy = Output {
                    topic: topic.to_string(),
                    partition: Some(owner),
                    key: Some(key.to_vec()),
                    value: record.value().map(<[u8]>::to_vec),
                    headers: copy_headers(record, &mark),
                };
                // A copy the broker would refuse is not forwarded: the record is rejected
                // here as misrouted, to the dead-letter topic.
                let limits = self.settings.decider.limits;
                if let Err(reason) = limits.check_message("a forwarded copy", copy.size()) {
                    warn!(%topic, p, offset, "{reason}");
                    return Ok(Routed::Here);
                }
                staged.outputs.push(copy);
                *staged.tallies.forwarded.entry(topic.to_string()).or_default() += 1;
                return Ok(Routed::Forwarded { owner });
            }
        }
        match mark {
            None => Ok(Routed::Here),
            Some(Ok(mark)) => Ok(Routed::CheckMark(mark)),
            Some(Err(implausible)) => self.rejected_copy(staged, record, role, implausible, now),
        }
    }

    /// A copy's mark, checked by the runtime: a copy applied before is passed over; one
    /// whose mark Sluice cannot have written is rejected before it moves a window.
    pub fn route_marked(
        &mut self,
        staged: &mut Staged,
        record: &dyn Record,
        role: &str,
        checked: Result<Forwarded, Implausible>,
        now: DateTime<Utc>,
    ) -> Result<Routed> {
        let mark = match checked {
            Ok(mark) => mark,
            Err(implausible) => return self.rejected_copy(staged, record, role, implausible, now),
        };
        let (topic, p) = (record.topic(), record.partition());
        let Some(store) = self.store(p) else {
            return Ok(Routed::Elsewhere);
        };
        let slot = (p, topic.to_string(), mark.partition);
        let window = match staged.windows.entry(slot) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(
                (store.forward_window(topic, mark.partition))
                    .map_err(|source| TaskError::Store { partition: p, source })?,
            ),
        };
        let advances = window.advances(&mark);
        let new = window.admit(&mark);
        // A duplicate that teaches the window nothing writes nothing.
        if new || advances {
            let window = window.clone();
            staged.store(p).set_forward_window(topic, mark.partition, &window);
        }
        if new {
            return Ok(Routed::Here);
        }
        debug!(%topic, p, offset = record.offset(), from = mark.partition, at = mark.offset, "forwarded copy applied before: skipped");
        *staged
            .tallies
            .forwarded_duplicates
            .entry(topic.to_string())
            .or_default() += 1;
        Ok(Routed::Elsewhere)
    }

    /// A copy whose mark Sluice cannot have written: rejected here, to the dead-letter topic.
    fn rejected_copy(
        &mut self,
        staged: &mut Staged,
        record: &dyn Record,
        role: &str,
        implausible: Implausible,
        now: DateTime<Utc>,
    ) -> Result<Routed> {
        let rejected = Input::Rejected {
            source: source_of(record),
            reason: implausible.to_string(),
            kind: Rejection::Invalid,
        };
        let origin = origin_of(role, record.partition(), record.offset(), &rejected);
        let pipeline = rejected_pipeline(record.key());
        self.decide(
            staged,
            record.partition(),
            &pipeline,
            &rejected,
            &origin,
            now,
            Some(record),
        )?;
        Ok(Routed::Elsewhere)
    }

    /// Decides what `input` means for `pipeline` and adds the decision to the batch. A
    /// decision whose state would not fit one changelog record is not applied: the input is
    /// rejected instead (INPUT_REJECTED, and the record to the dead-letter topic), naming the
    /// limit, so that no changelog write is ever left out of a batch marked complete.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &mut self,
        staged: &mut Staged,
        p: i32,
        pipeline: &str,
        input: &Input,
        origin: &str,
        now: DateTime<Utc>,
        source: Option<&dyn Record>,
    ) -> Result<()> {
        if let Input::JobReported(report) = input {
            self.reported(staged, p, report)?;
        }
        let (state, in_parts) = self.state(staged, p, pipeline)?;
        let ctx = Context {
            now,
            origin,
            settings: DeciderSettings {
                max_clock_skew: self.future_allowance,
                ..self.settings.decider
            },
        };
        let before = Before {
            state: &state,
            in_parts,
        };
        let source_name = || source.map_or_else(|| origin.to_string(), source_of);
        let encoder = &self.encoder;
        let fit = |decision: &Decision| encoder.encode(pipeline, before, decision);
        match apply::decide_within(&state, pipeline, input, ctx, source_name, fit) {
            Ok((decision, encoded)) => self.apply(staged, p, pipeline, before, decision, encoded, source),
            Err(Unfit::Failed(source)) => Err(TaskError::Encode {
                pipeline: pipeline.to_string(),
                source,
            }),
            Err(Unfit::EvenItsRejection { reason }) => Err(TaskError::EvenItsRejection {
                pipeline: pipeline.to_string(),
                reason,
            }),
        }
    }

    /// What a job report means for the journaled trigger of its run.
    fn reported(&mut self, staged: &mut Staged, p: i32, report: &super::records::JobRecord) -> Result<()> {
        let store_err = |source| TaskError::Store { partition: p, source };
        match self.journaled.reported(p, report) {
            Reported::Released { found: true } => {
                info!(partition = p, run_id = %report.run_id, "the previous owner let a journaled trigger go")
            }
            Reported::Released { found: false } => {
                // This owner's executor could not begin the call in time: it asks again.
                let journaled = match (self.store(p), handover::never_began(report)) {
                    (Some(store), true) => store.effect(&report.run_id).map_err(store_err)?,
                    _ => None,
                };
                match journaled.filter(|e| handover::releases(report, e.request())) {
                    Some(effect) => {
                        info!(partition = p, run_id = %report.run_id, "a trigger's call could not begin by its time to begin: requesting it again");
                        self.journaled.let_go_unbegun(p, effect);
                    }
                    None => {
                        debug!(partition = p, run_id = %report.run_id, "a release of no call awaited here (an older call's, or of a run that moved on)")
                    }
                }
            }
            Reported::Marked { found } => {
                if found {
                    info!(partition = p, run_id = %report.run_id, "a journaled trigger's start mark: its call began at the previous owner, and is left to it until its release, a report, or its deadline");
                }
                // Kept in the journal with the mark's offset: an owner that opens the
                // partition later never reads the mark again.
                let journaled = match self.store(p) {
                    Some(store) => store.effect(&report.run_id).map_err(store_err)?,
                    None => None,
                };
                if let Some(marked) = journaled.and_then(|e| handover::journal_marked(report, e)) {
                    staged.store(p).put_effect(&report.run_id, &marked)?;
                }
            }
            // The trigger's outcome is known: it leaves the journal, never requested again.
            Reported::Answered => staged.store(p).delete_effect(&report.run_id),
        }
        Ok(())
    }

    /// A pipeline's state: from this batch if it touched it, else from the store; and
    /// whether the store (with the batch) holds it in parts, which a write then only updates
    /// (a state not stored at all is written whole: its head too).
    fn state(&self, staged: &Staged, p: i32, pipeline: &str) -> Result<(Arc<PipelineState>, bool)> {
        if let Some(state) = staged.states.get(&(p, pipeline.to_string())) {
            return Ok(match state {
                Some(state) => (state.clone(), true),
                None => (Arc::default(), false),
            });
        }
        let Some(store) = self.store(p) else {
            return Ok((Arc::default(), false));
        };
        Ok(
            match store
                .stored(pipeline)
                .map_err(|source| TaskError::Store { partition: p, source })?
            {
                Some(stored) => (stored.state, stored.in_parts),
                None => (Arc::default(), false),
            },
        )
    }

    /// Adds one decision that fits (see [`apply::decide_within`]) to the batch, in the order
    /// its parts are written: events and dead letter, state, timers, outbound records,
    /// effects.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        staged: &mut Staged,
        p: i32,
        pipeline: &str,
        before: Before<'_>,
        decision: Decision,
        encoded: Encoded,
        source: Option<&dyn Record>,
    ) -> Result<()> {
        let Encoded {
            writes,
            events,
            records,
        } = encoded;
        // Every line logged while applying carries the pipeline (and, on events, the execution
        // and run), in text and JSON logs and in exported traces.
        let _span = tracing::info_span!("pipeline", pipeline).entered();
        for note in &decision.notes {
            debug!("{note}");
        }
        log_events(&decision.events);
        staged.outputs.extend(events);
        if decision.events.iter().any(|e| e.kind.is_sla_breach()) {
            // A breach never changes the config: the one in force before it names the owner.
            let owner = before.state.config.as_ref().and_then(|c| c.owner.clone());
            (staged.learned.owners).insert(pipeline.to_string(), owner.unwrap_or_default());
        }
        staged.learned.events.extend(decision.events);
        if let (Some(reason), Some(record)) = (&decision.dead_letter, source) {
            let kind = decision.rejection.map_or("unknown", Rejection::as_str);
            staged.tallies.dead_letters.push((record.topic().to_string(), kind));
            let largest = self.settings.decider.limits.message_bytes;
            let letter = dead_letter(&self.settings.dlq, record, reason, largest);
            if letter.value.is_none() && record.value().is_some() {
                warn!(
                    size = record.value().map_or(0, <[u8]>::len),
                    "dead letter too large for the broker: sent without its value"
                );
            }
            staged.outputs.push(letter);
        }
        self.apply_state(staged, p, pipeline, decision.state, writes, before.state);
        // The store needs no write of its own: the timers are parts of the state written.
        self.timers.apply(p, pipeline, &decision.timers);
        staged.outputs.extend(records);
        for effect in decision.effects {
            // Triggers are journaled; status checks are not (their timer asks again).
            let effect = self.with_release_key(effect);
            if let Effect::TriggerJob(request) = &effect {
                staged.store(p).put_effect(&request.run_id, &effect)?;
            }
            staged.effects.push((p, effect));
        }
        staged.ended_runs.extend(decision.ended_runs);
        Ok(())
    }

    /// Adds a state change to the partition's store batch.
    fn apply_state(
        &self,
        staged: &mut Staged,
        p: i32,
        pipeline: &str,
        change: StateChange,
        writes: Vec<Write>,
        before: &PipelineState,
    ) {
        let key = (p, pipeline.to_string());
        let state = match change {
            StateChange::Unchanged => return,
            StateChange::Put(state) => {
                // The config is written only when it is not the one stored (or being stored)
                // already.
                let held = |config| match staged.configs.get(&key) {
                    Some(staged) => Arc::ptr_eq(staged, config),
                    None => self.store(p).is_some_and(|s| s.holds_config(pipeline, config)),
                };
                let new_config = match &state.config {
                    Some(config) if !held(config) => {
                        staged.configs.insert(key.clone(), config.clone());
                        Some((pipeline, config.as_ref()))
                    }
                    _ => None,
                };
                staged.stores.entry(p).or_default().put_state(writes, new_config);
                Some(Arc::from(state))
            }
            StateChange::Delete => {
                staged.store(p).delete_pipeline(pipeline, before);
                staged.configs.remove(&key);
                None
            }
        };
        staged.learned.changed.insert(key.clone());
        staged.states.insert(key, state);
    }

    /// A trigger with a release key of its own (see `TriggerRequest::release_key`); other
    /// effects as they are.
    fn with_release_key(&mut self, effect: Effect) -> Effect {
        match effect {
            Effect::TriggerJob(mut request) => {
                request.release_key = self.keys.next_key();
                Effect::TriggerJob(request)
            }
            other => other,
        }
    }

    // ---- journaled triggers ----

    pub fn triggers_waiting(&self) -> bool {
        !self.journaled.is_empty()
    }

    /// The journaled triggers that wait on nothing more, and those that wait on where the
    /// jobs topic ends. `jobs_positions`: the consumer's position on each partition of the
    /// jobs topic. Partition `p`'s jobs topic is read up to `end` when its last record below
    /// `end` was applied (here or, before the hand-over, by the previous owner), or the
    /// consumer's position is past it.
    pub fn poll_triggers(
        &mut self,
        now: DateTime<Utc>,
        jobs: &str,
        jobs_positions: &BTreeMap<i32, i64>,
    ) -> TriggerPoll {
        let partitions = &self.partitions;
        let read_to = |p: i32, end: i64| {
            let applied = partitions.get(&p).and_then(|o| o.store.applied_offset(jobs));
            let position = jobs_positions.get(&p);
            end <= 0 || applied.is_some_and(|a| a + 1 >= end) || position.is_some_and(|at| *at >= end)
        };
        let mut poll = TriggerPoll::default();
        for step in self.journaled.poll(now, read_to) {
            match step {
                Step::Due(due) => poll.due.push(due),
                Step::MeasureJobsEnd { partition, run_id } => poll.measure.push((partition, run_id)),
            }
        }
        poll
    }

    /// Where the jobs topic ended, measured for a journaled trigger past its deadline.
    pub fn jobs_end_measured(&mut self, p: i32, run_id: &str, end: i64, now: DateTime<Utc>) {
        info!(partition = p, run_id, jobs_end = end,
            "a journaled trigger's call is past its deadline (or, with no start mark, its time to begin): reading the jobs topic up to its end before requesting it again");
        self.journaled.measured(p, run_id, end, now);
    }

    /// Settles the journaled triggers that wait for nothing more (see [`Journaled`]):
    /// requested again (same idempotency key, a new deadline journaled first) if their run
    /// still awaits a report, forgotten otherwise. `assigned`: the partitions the consumer
    /// holds; `fences`: for each partition of [`TriggerPoll::fence_reads`], whether a newer
    /// owner's fence shows since this owner's last record (`None`: it could not be read,
    /// and its triggers wait). Nothing is started for a partition this instance may have
    /// lost. Returns the batch that journals and starts those requested again.
    pub fn settle_triggers(
        &mut self,
        due: Vec<Found>,
        now: DateTime<Utc>,
        assigned: &BTreeSet<i32>,
        fences: &BTreeMap<i32, Option<bool>>,
    ) -> Result<Staged> {
        let mut again = Staged::default();
        for due in due {
            let p = due.partition();
            let run_id = due.request().run_id.clone();
            let is_assigned = assigned.contains(&p) && self.is_open(p);
            let fenced = fences.get(&p).copied().flatten();
            let awaited = |request: &super::lifecycle::TriggerRequest| -> Result<bool, HostError> {
                let Some(store) = self.partitions.get(&p).map(|o| &o.store) else {
                    return Ok(false);
                };
                let state = store.stored(&request.pipeline_id)?;
                Ok(state.is_some_and(|s| s.state.awaits_trigger(&request.run_id)))
            };
            let awaited = match (is_assigned, fenced) {
                (true, Some(false)) => {
                    Some(awaited(due.request()).map_err(|source| TaskError::Store { partition: p, source })?)
                }
                _ => None,
            };
            match self.journaled.settle(
                due,
                now,
                is_assigned,
                || fenced,
                |_| Ok::<_, TaskError>(awaited == Some(true)),
            )? {
                Settled::LeftToNewOwner => debug!(
                    partition = p,
                    run_id, "a journaled trigger of a partition no longer assigned: left to its new owner"
                ),
                // The changelog could not be read: asked again in a second, never started blind.
                Settled::Waits => {}
                Settled::Fenced => return Err(self.give_up(vec![p])),
                Settled::Again(effect) => {
                    info!(partition = p, run_id, "a trigger requested before a restart or rebalance has no report on the jobs topic: requesting it again with the same idempotency key");
                    // Journaled with its new deadline before the call: a later owner leaves it
                    // to this one until then.
                    let effect = self.with_release_key(*effect);
                    again.store(p).put_effect(&run_id, &effect)?;
                    again.effects.push((p, effect));
                }
                Settled::Forgotten => debug!(
                    partition = p,
                    run_id,
                    "a journaled trigger is no longer awaited (its report came, or its run moved on): forgotten"
                ),
            }
        }
        Ok(again)
    }

    // ---- writing a batch out ----

    /// Closes a batch: adds what opening partitions and other writers left for it (keys to
    /// write again, stale journal entries), mirrors its store writes to the changelog, and
    /// returns it with the [`Flush`] that writes it out.
    pub fn seal(&mut self, mut staged: Staged) -> Result<Sealed> {
        self.add_repairs(&mut staged)?;
        let first_changelog = staged.outputs.len();
        let sequenced = self.mirror_to_changelog(&mut staged);
        let mut flush = Flush::new(sequenced, self.settings.exactly_once);
        if staged.commits.is_empty() {
            flush = flush.without_inputs();
        }
        Ok(Sealed {
            flush,
            outputs: staged.outputs,
            first_changelog,
            commits: staged.commits,
            effects: staged.effects,
            ended_runs: staged.ended_runs,
            tallies: staged.tallies,
            stores: staged.stores,
            states: staged.states,
            configs: staged.configs,
            learned: staged.learned,
        })
    }

    /// Adds the keys to supersede (with the values the store holds now, under what the
    /// batch itself writes), and stale journal entries to delete.
    fn add_repairs(&mut self, staged: &mut Staged) -> Result<()> {
        for (p, owned) in &mut self.partitions {
            let keys = owned.writer.take_repairs();
            if keys.is_empty() {
                continue;
            }
            let mut repair = StoreBatch::default();
            for key in keys {
                let value = owned
                    .store
                    .raw(&key)
                    .map_err(|source| TaskError::Store { partition: *p, source })?;
                repair.mirror(&key, value.as_deref());
            }
            staged.store(*p).underlay(repair);
        }
        for (p, run_ids) in self.journaled.take_stale() {
            let batch = staged.store(p);
            for run_id in run_ids {
                batch.delete_effect(&run_id);
            }
        }
        Ok(())
    }

    /// Mirrors every store write, in order, to the changelog partition of the same number, as
    /// the next batch of this owner's epoch there; returns each partition's new lineage. A
    /// partition revoked meanwhile is left to its new owner, which redoes the work.
    fn mirror_to_changelog(&self, staged: &mut Staged) -> BTreeMap<i32, Lineage> {
        let mut sequenced = BTreeMap::new();
        for (p, batch) in &staged.stores {
            let Some(owned) = self.partitions.get(p).filter(|_| !batch.changes().is_empty()) else {
                continue;
            };
            let this = owned.writer.next_batch();
            sequenced.insert(*p, this);
            let header = changelog::batch_header(this.epoch, this.through);
            for (key, value) in batch.changes() {
                staged.outputs.push(Output {
                    topic: self.settings.changelog.clone(),
                    partition: Some(*p),
                    key: Some(key.clone()),
                    value: value.clone(),
                    headers: vec![(changelog::BATCH_HEADER.to_string(), header.clone())],
                });
            }
        }
        sequenced
    }

    /// The changelog writers, for the [`Flush`] of a sealed batch.
    pub fn writers(&mut self) -> impl Writers + '_ {
        PartitionWriters(&mut self.partitions)
    }

    /// The end markers as changelog records.
    pub fn marker_outputs(&self, markers: &[Marker]) -> Vec<Output> {
        (markers.iter())
            .map(|m| {
                let (key, value) = changelog::marker(m.batch.epoch, m.batch.through, m.first);
                Output {
                    topic: self.settings.changelog.clone(),
                    partition: Some(m.partition),
                    key: Some(key),
                    value: Some(value),
                    headers: Vec::new(),
                }
            })
            .collect()
    }

    /// Writes each partition's batch, those in `counted` with their changelog checkpoint
    /// and lineage, and lets the stores keep what they now hold decoded. Returns what the
    /// read models learn.
    pub fn write_stores(
        &mut self,
        sealed: &mut Sealed,
        counted: &BTreeMap<i32, (i64, Lineage)>,
        now: DateTime<Utc>,
    ) -> Result<Learned> {
        for (p, mut batch) in std::mem::take(&mut sealed.stores) {
            let Some(owned) = self.partitions.get_mut(&p) else {
                // Revoked mid-batch; its new owner redoes the work.
                if !batch.is_empty() {
                    warn!(partition = p, "partition revoked before its batch was written");
                }
                continue;
            };
            if let Some((checkpoint, this)) = counted.get(&p) {
                batch.set_checkpoint(*checkpoint, now);
                batch.set_lineage(*this);
                // Found by this batch (others' records between its own), written by the next:
                // kept with the checkpoint that moves past those records.
                if let Some(keys) = owned.writer.repairs_to_keep() {
                    batch.set_repairs(keys);
                }
            }
            if batch.is_empty() {
                continue;
            }
            (owned.store.write(batch)).map_err(|source| TaskError::Store { partition: p, source })?;
        }
        // The stores hold these states now: their next reads need not decode them.
        for ((p, pipeline), state) in std::mem::take(&mut sealed.states) {
            if let (Some(store), Some(state)) = (self.store(p), state) {
                store.remember(&pipeline, state);
            }
        }
        for ((p, pipeline), config) in std::mem::take(&mut sealed.configs) {
            if let Some(store) = self.store(p) {
                store.config_written(&pipeline, &config);
            }
        }
        Ok(std::mem::take(&mut sealed.learned))
    }

    /// The changelog went back under partition `p` (see [`Writer::went_back`]).
    pub fn changelog_went_back(&self, p: i32) -> TaskError {
        TaskError::ChangelogWentBack(p, self.settings.changelog.clone())
    }
}

fn error_fenced(p: i32) {
    tracing::error!(partition = p, "a newer owner fenced this partition: this instance lost it without being told (a paused process?); the batch stops before its state and triggers, and the partition is left to its owner");
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
