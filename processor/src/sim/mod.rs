//! Deterministic simulators. [`world`] runs the processor's own partition task
//! (`core::task`) for several instances and partitions; [`driver`] drives the task over an
//! in-memory [`log`] with no faults (the steady bench, fast tests). What follows in this file
//! is the older simulator of the runtime's rules alone, kept until [`world`] catches every
//! fault it does (an idle owner that never watches its changelog):
//!
//! a deterministic simulator of the partition runtime's rules, in the spirit of
//! FoundationDB's and TigerBeetle's (VOPR): several instances share one input partition over
//! a simulated log, a group coordinator hands the partition over, and a seeded fault schedule
//! crashes, pauses (zombies), resumes and restarts instances, rebalances, redelivers input,
//! compacts the changelog and steps the clock between any two steps of any instance. After a
//! run it checks the invariants ([`Violation`]).
//!
//! What runs is the processor's own rules from `core`: which records a batch applies
//! ([`admission`]), the order a batch is written out in ([`batch::Flush`]), an owner's
//! changelog epochs, holes and fences ([`changelog::Writer`]), what a restore applies
//! ([`changelog::Restore`]) and when a journaled trigger is requested again ([`handover`]).
//! The glue between them (this file) stands in for `runtime::processor`, and the decider for
//! the lifecycle's: each record adds its value to its pipeline's total, and some ask for a
//! trigger. Same seed, same run: a failing seed replays exactly (`SLUICE_SIM_SEED`).

pub mod driver;
pub mod log;
pub mod store;
pub mod world;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};

use crate::core::admission::{self, Admission};
use crate::core::batch::{Action, Flush};
use crate::core::changelog::{Checked, Entry, Lineage, Restore, Writer};
use crate::core::config::{JobConfig, JobKind};
use crate::core::handover::{Journaled, Reported, Settled, Step};
use crate::core::lifecycle::{Effect, TriggerRequest};
use crate::core::ownership::{self, OnOpened, OnRevoked};
use crate::core::records::{JobRecord, JobStatus};

/// Faults of the past, put back to show a simulator catches them (one set for both).
pub use world::Historic;

/// What a run breaks; empty when the runtime's rules hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A run was called again at the target while its first call was neither cut (its caller
    /// crashed or paused before reporting) nor answered by a release, or after its report was
    /// on the jobs topic.
    CalledTwice { run: String, why: String },
    /// A trigger the input asked for was never called.
    NeverCalled { run: String },
    /// The owner's totals are not the input's: a record was lost or applied twice.
    State { pipeline: String, owner: i64, input: i64 },
    /// The owner's store differs from a from-scratch restore of the changelog.
    Restore {
        key: String,
        store: Option<String>,
        restored: Option<String>,
    },
    /// Two different events share an id, or an applied record has none.
    Events(String),
    /// The system did not settle once the faults stopped.
    Stuck(String),
}

/// What a run went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub steps: u64,
    pub faults: BTreeMap<&'static str, u64>,
    pub calls: u64,
    /// Calls repeated with the same idempotency key after the first was cut.
    pub repeated_after_a_cut: u64,
    pub takeovers: u64,
    /// Partitions given up by the ownership rules (`core::ownership`), by where.
    pub given_up: BTreeMap<&'static str, u64>,
    pub violations: Vec<Violation>,
    /// What happened, step by step, when asked for ([`run_traced`]).
    pub trace: Vec<String>,
}

impl Report {
    /// Adds `other`'s counts to these (its violations and trace are the caller's).
    pub fn add(&mut self, other: &Report) {
        self.steps += other.steps;
        self.calls += other.calls;
        self.repeated_after_a_cut += other.repeated_after_a_cut;
        self.takeovers += other.takeovers;
        for (fault, n) in &other.faults {
            *self.faults.entry(fault).or_default() += n;
        }
        for (why, n) in &other.given_up {
            *self.given_up.entry(why).or_default() += n;
        }
    }

    /// The counts in one line.
    pub fn summary(&self) -> String {
        format!(
            "{} steps, {} take-overs, {} calls ({} repeated after a cut), faults {:?}, partitions given up {:?}",
            self.steps, self.takeovers, self.calls, self.repeated_after_a_cut, self.faults, self.given_up
        )
    }
}

/// Where an instance found a newer fence and gave its partition up (see [`Report::given_up`]).
pub const ZOMBIE_TOLD: &str = "when told its assignment was lost";
pub const ZOMBIE_OPENING: &str = "while opening";
pub const ZOMBIE_WATCHING: &str = "watching its changelog";
pub const ZOMBIE_BATCH: &str = "in a batch";
/// Revoked while it opened, with no newer fence: left to the new owner.
pub const LEFT_WHILE_OPENING: &str = "left to the new owner while opening";

const INSTANCES: usize = 3;
const INPUTS: usize = 40;
const PIPELINES: u8 = 4;
/// Steps a paused owner keeps its session.
const SESSION: u64 = 6;
/// How long a trigger's call may take: after it, the caller gives up and a new owner may call.
const CALL_BUDGET: TimeDelta = TimeDelta::seconds(20);
const STEP: TimeDelta = TimeDelta::seconds(1);
/// Steps a cleanly revoked owner waits for its calls to report before it releases them.
const GRACE: u64 = 3;
const FAULT_STEPS: u64 = 400;
/// The changelog's `min.compaction.lag.ms`, in simulated time (a day in production).
const COMPACTION_LAG: TimeDelta = TimeDelta::minutes(10);
const SETTLE_STEPS: u64 = 2_000;
/// Steps between two inputs' arrival: they keep coming through the faults, so that an owner
/// is often idle between them while a zombie writes.
const ARRIVAL_STEPS: u64 = FAULT_STEPS / INPUTS as u64;
/// How often an owner reads what others wrote to its changelog since its last record (a
/// quarter of an hour in production, against a day of compaction lag).
const WATCH_STEPS: u64 = 60;

/// One input record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Input {
    pipeline: u8,
    value: i64,
    trigger: bool,
}

/// A changelog record: its entry as the restore rules see it, and its compaction key.
#[derive(Debug, Clone)]
struct Changelog {
    offset: i64,
    key: Vec<u8>,
    entry: Entry,
    at: DateTime<Utc>,
}

/// A report on the jobs topic.
#[derive(Debug, Clone, PartialEq, Eq)]
enum JobReport {
    Done { run: String },
    Released { run: String, deadline: DateTime<Utc> },
}

impl JobReport {
    /// The report as the jobs topic carries it (a release names its call's deadline).
    fn record(&self, at: DateTime<Utc>) -> JobRecord {
        let (run, status, metadata) = match self {
            JobReport::Done { run } => (run, JobStatus::Succeeded, None),
            JobReport::Released { run, deadline } => (
                run,
                JobStatus::Released,
                Some(serde_json::json!({ "deadline": deadline.to_rfc3339() })),
            ),
        };
        JobRecord {
            pipeline_id: "p".into(),
            schedule_id: "daily".into(),
            date: "2026-11-26".into(),
            run_id: run.clone(),
            status,
            failure_category: None,
            message: None,
            metadata,
            timestamp: at,
        }
    }
}

/// A call at the target, as the target saw it.
#[derive(Debug, Clone)]
struct Landed {
    run: String,
    by: usize,
    /// The caller's incarnation: a crash or a pause before it reported cuts the call.
    life: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CallPhase {
    /// Lands at the target at this time, unless its deadline passed.
    Pending(DateTime<Utc>),
    /// Landed; reported at this time.
    Landed(DateTime<Utc>),
}

#[derive(Debug, Clone)]
struct Call {
    run: String,
    /// How many reports the jobs topic held when the call was decided on.
    reports_seen: usize,
    deadline: DateTime<Utc>,
    phase: CallPhase,
}

/// What an instance keeps on disk.
#[derive(Debug, Clone, Default)]
struct Disk {
    store: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Where its changelog checkpoint stands, and the lineage there.
    checkpoint: Option<(i64, Lineage)>,
    /// Keys still to write again, kept with the checkpoint.
    repairs: Vec<Vec<u8>>,
}

impl Disk {
    /// Forgets where the store stands on the changelog (`PartitionStore::disown`): the next
    /// opening restores in full.
    fn disown(&mut self) {
        self.checkpoint = None;
        self.repairs.clear();
    }
}

/// A batch on its way out.
#[derive(Debug)]
struct InFlight {
    flush: Flush,
    events: Vec<(String, String)>,
    changes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    calls: Vec<Call>,
    commit: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// Nothing done yet: the fence is next.
    New,
    /// Fenced and restored; the acceptance is next.
    Restored {
        fence: i64,
    },
    Open,
}

/// A restore's state, lineage and stale keys, before the acceptance is written.
type Restored = (BTreeMap<Vec<u8>, Vec<u8>>, Lineage, Vec<Vec<u8>>);

/// What an instance holds in memory: lost in a crash.
#[derive(Debug)]
struct Memory {
    /// The generation it believes it owns the partition in.
    generation: u64,
    opening: Opening,
    writer: Option<Writer>,
    position: i64,
    batch: Option<InFlight>,
    calls: Vec<Call>,
    /// Journaled triggers of a previous owner, settled by the runtime's own rules.
    journaled: Journaled,
    /// How many reports on the jobs topic it has read.
    reports_read: usize,
    /// Journal entries to delete with the next batch (their reports were read).
    forget: BTreeSet<String>,
    /// Journaled triggers to request again with the next batch.
    again: BTreeSet<String>,
    /// Steps left before it releases its calls after a clean revocation.
    revoked: Option<u64>,
    /// The acknowledgement of its next changelog write is lost: the producer sends it again,
    /// and it lands twice.
    lose_ack: bool,
    /// Restored state before the acceptance is written.
    restored: Option<Restored>,
}

#[derive(Debug)]
struct Instance {
    disk: Disk,
    memory: Option<Memory>,
    /// Paused until this step (a zombie meanwhile).
    paused_until: Option<u64>,
    /// Steps after waking before it notices a lost assignment.
    notices_after: u64,
    life: u64,
}

struct World {
    traced: bool,
    rng: fastrand::Rng,
    historic: Historic,
    step: u64,
    now: DateTime<Utc>,
    inputs: Vec<Input>,
    changelog: Vec<Changelog>,
    changelog_next: i64,
    events: Vec<(String, String)>,
    jobs: Vec<JobReport>,
    landed: Vec<Landed>,
    /// Runs whose calls gave up at their deadline without reaching the target.
    failed: BTreeSet<String>,
    /// Who owns the partition, in which generation, and the committed input offset.
    owner: Option<usize>,
    generation: u64,
    committed: i64,
    /// When the owner's session expires, while it is paused.
    expires: Option<u64>,
    instances: Vec<Instance>,
    report: Report,
}

fn key_of(prefix: &str, name: &str) -> Vec<u8> {
    format!("{prefix}{name}").into_bytes()
}

fn num(bytes: &[u8]) -> i64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

const APPLIED: &[u8] = b"o/input";

/// Runs one seed; faults as the seed draws them, with `historic` put back.
pub fn run(seed: u64, historic: Historic) -> Report {
    simulate(seed, historic, false)
}

/// [`run`], with a trace of every step in the report.
pub fn run_traced(seed: u64, historic: Historic) -> Report {
    simulate(seed, historic, true)
}

fn simulate(seed: u64, historic: Historic, traced: bool) -> Report {
    let mut rng = fastrand::Rng::with_seed(seed);
    let inputs = (0..INPUTS)
        .map(|_| Input {
            pipeline: rng.u8(0..PIPELINES),
            value: rng.i64(1..10),
            trigger: rng.u8(0..5) == 0,
        })
        .collect();
    let mut w = World {
        traced,
        rng,
        historic,
        step: 0,
        now: DateTime::parse_from_rfc3339("2026-11-26T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc),
        inputs,
        changelog: Vec::new(),
        changelog_next: 0,
        events: Vec::new(),
        jobs: Vec::new(),
        landed: Vec::new(),
        failed: BTreeSet::new(),
        owner: None,
        generation: 0,
        committed: 0,
        expires: None,
        instances: (0..INSTANCES)
            .map(|_| Instance {
                disk: Disk::default(),
                memory: None,
                paused_until: None,
                notices_after: 0,
                life: 0,
            })
            .collect(),
        report: Report::default(),
    };
    while w.step < FAULT_STEPS {
        w.inject();
        w.tick();
    }
    w.settle();
    w.quiet();
    w.check();
    w.report
}

impl World {
    fn fault(&mut self, name: &'static str, i: usize) {
        *self.report.faults.entry(name).or_default() += 1;
        self.trace(|| format!("fault: {name} (instance {i})"));
    }

    fn trace(&mut self, what: impl FnOnce() -> String) {
        if self.traced {
            let line = format!("{:>4} {} {}", self.step, self.now.format("%H:%M:%S"), what());
            self.report.trace.push(line);
        }
    }

    /// Draws this step's fault, if any.
    fn inject(&mut self) {
        let i = self.rng.usize(0..INSTANCES);
        match self.rng.u32(0..100) {
            0..=2 if self.instances[i].memory.is_some() => {
                self.fault("crash", i);
                self.crash(i);
            }
            3..=4 if self.instances[i].paused_until.is_none() && self.instances[i].memory.is_some() => {
                self.fault("pause", i);
                let until = self.step + self.rng.u64(1..SESSION * 3);
                self.instances[i].paused_until = Some(until);
                self.instances[i].notices_after = self.rng.u64(0..4);
                if self.owner == Some(i) {
                    self.expires = Some(self.step + SESSION);
                }
            }
            5 => {
                self.fault("rebalance", i);
                self.revoke_cleanly();
            }
            6..=7 => {
                self.fault("compaction", i);
                self.compact();
            }
            8 => {
                self.fault("clock jump", i);
                self.now += TimeDelta::seconds(self.rng.i64(5..40));
            }
            9..=10 => {
                if let Some(m) = self.instances[i].memory.as_mut().filter(|m| m.position > 0) {
                    m.position -= 1;
                    self.fault("redelivery", i);
                }
            }
            11 if self.instances[i].disk.checkpoint.is_some() && self.instances[i].memory.is_none() => {
                self.fault("state directory lost", i);
                self.instances[i].disk = Disk::default();
            }
            12 if self.instances[i].memory.is_some() => {
                self.fault("lost acknowledgement", i);
                self.instances[i].memory.as_mut().unwrap().lose_ack = true;
            }
            13 if !self.jobs.is_empty() => {
                // The executor answered twice: a report on the jobs topic again.
                self.fault("report twice", i);
                let again = self.jobs[self.rng.usize(0..self.jobs.len())].clone();
                self.jobs.push(again);
            }
            _ => {}
        }
    }

    /// Whether a newer owner fenced the partition after instance `i`'s last changelog record
    /// (`None` while it holds no writer). The unfenced writer of old never looked.
    fn fenced_since_last_write(&self, i: usize) -> Option<bool> {
        let writer = self.instances[i].memory.as_ref()?.writer.as_ref()?;
        Some(!self.historic.unfenced && writer.fenced_by(&self.entries(writer.next_offset(), self.changelog_next)))
    }

    /// A zombie that found a newer fence (`Processor::abandon`): its store forgets its
    /// checkpoint (it may hold writes that do not count), and the process stops.
    fn abandon(&mut self, i: usize, why: &'static str) {
        *self.report.given_up.entry(why).or_default() += 1;
        self.trace(|| format!("{i} found a newer fence {why}: stops"));
        self.instances[i].disk.disown();
        self.crash(i);
    }

    /// A crashed process: its memory and calls in flight are gone, its disk stays.
    fn crash(&mut self, i: usize) {
        let inst = &mut self.instances[i];
        inst.memory = None;
        inst.paused_until = None;
        inst.life += 1;
        if self.owner == Some(i) {
            self.owner = None;
            self.expires = None;
        }
    }

    /// A clean rebalance: the owner finishes its batch and lets its calls report (or
    /// releases them) before the partition moves.
    fn revoke_cleanly(&mut self) {
        if let Some(o) = self.owner {
            if let Some(m) = self.instances[o].memory.as_mut() {
                m.revoked.get_or_insert(GRACE);
            }
        }
    }

    /// One step of time and of every instance.
    fn tick(&mut self) {
        self.step += 1;
        self.report.steps += 1;
        self.now += STEP;
        if self.expires.is_some_and(|at| self.step >= at) {
            // The paused owner's session expired: the group moves on without it.
            self.owner = None;
            self.expires = None;
        }
        if self.owner.is_none() {
            self.assign();
        }
        for i in 0..INSTANCES {
            self.run_instance(i);
        }
    }

    fn assign(&mut self) {
        let candidates: Vec<usize> = (0..INSTANCES)
            .filter(|i| self.instances[*i].paused_until.is_none())
            .collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[self.rng.usize(0..candidates.len())];
        self.generation += 1;
        self.owner = Some(i);
        self.report.takeovers += 1;
        let (generation, committed) = (self.generation, self.committed);
        self.trace(|| format!("assigned to {i} (generation {generation}, from offset {committed})"));
        let inst = &mut self.instances[i];
        // A restarted process, or one handed the partition.
        inst.memory = Some(Memory {
            generation: self.generation,
            opening: Opening::New,
            writer: None,
            position: self.committed,
            batch: None,
            calls: inst.memory.take().map(|m| m.calls).unwrap_or_default(),
            journaled: Journaled::default(),
            reports_read: 0,
            forget: BTreeSet::new(),
            again: BTreeSet::new(),
            revoked: None,
            restored: None,
            lose_ack: false,
        });
    }

    fn run_instance(&mut self, i: usize) {
        if let Some(until) = self.instances[i].paused_until {
            if self.step < until {
                return;
            }
            self.instances[i].paused_until = None;
            self.instances[i].life += 1;
            if self.owner == Some(i) {
                // Awake within its session: it heartbeats again.
                self.expires = None;
            }
        }
        if self.instances[i].memory.is_none() {
            return;
        }
        self.progress_calls(i);
        let owner = self.owner == Some(i);
        let generation = self.instances[i].memory.as_ref().map(|m| m.generation);
        let current = owner && generation == Some(self.generation);
        if !current {
            // A zombie notices its lost assignment only after a while; a batch in flight
            // then learns it at its next check.
            if self.instances[i].notices_after > 0 {
                self.instances[i].notices_after -= 1;
            } else if self.instances[i].memory.as_ref().unwrap().batch.is_none() {
                // Told its assignment was lost (`Processor::on_ownership`): fenced since its
                // last write, it is a zombie and gives the partition up.
                if ownership::on_revoked(true, self.fenced_since_last_write(i)) == OnRevoked::Zombie {
                    return self.abandon(i, ZOMBIE_TOLD);
                }
                let m = self.instances[i].memory.as_mut().unwrap();
                m.writer = None;
                m.opening = Opening::New;
                m.journaled = Journaled::default();
                m.revoked = None;
                return;
            }
        }
        let m = self.instances[i].memory.as_ref().unwrap();
        if m.batch.is_some() {
            return self.batch_step(i);
        }
        if m.revoked.is_some() {
            return self.revoking(i);
        }
        match m.opening {
            Opening::New => self.fence_and_restore(i),
            Opening::Restored { fence } => self.accept(i, fence),
            Opening::Open => {
                self.watch_changelog(i);
                if self.instances[i].memory.is_none() {
                    return; // it found a newer fence and stopped
                }
                self.resume_triggers(i);
                self.start_batch(i);
            }
        }
    }

    /// The clean revocation's grace: calls report or are released, then the partition moves.
    fn revoking(&mut self, i: usize) {
        let m = self.instances[i].memory.as_mut().unwrap();
        let left = m.revoked.unwrap();
        if left > 0 && !m.calls.is_empty() {
            m.revoked = Some(left - 1);
            return;
        }
        for call in std::mem::take(&mut m.calls) {
            self.jobs.push(JobReport::Released {
                run: call.run,
                deadline: call.deadline,
            });
        }
        let m = self.instances[i].memory.as_mut().unwrap();
        m.revoked = None;
        m.writer = None;
        m.opening = Opening::New;
        if !self.lost(i) {
            self.owner = None;
        }
    }

    /// The executor: calls land at the target, then report.
    fn progress_calls(&mut self, i: usize) {
        let now = self.now;
        let life = self.instances[i].life;
        let mut landed = Vec::new();
        let mut reports = Vec::new();
        let mut failed = Vec::new();
        let m = self.instances[i].memory.as_mut().unwrap();
        m.calls.retain_mut(|call| match call.phase {
            // Given up at its deadline, never having reached the target: reported failed.
            CallPhase::Pending(_) if now > call.deadline => {
                failed.push(call.run.clone());
                false
            }
            CallPhase::Pending(at) if now >= at => {
                landed.push((call.run.clone(), call.reports_seen));
                call.phase = CallPhase::Landed(now + TimeDelta::seconds(1));
                true
            }
            CallPhase::Landed(at) if now >= at => {
                reports.push(call.run.clone());
                false
            }
            _ => true,
        });
        for (run, seen) in landed {
            self.land(run, seen, i, life);
        }
        self.failed.extend(failed.iter().cloned());
        for run in reports.into_iter().chain(failed) {
            if let Some(m) = self.instances[i].memory.as_mut() {
                m.forget.insert(run.clone());
            }
            self.jobs.push(JobReport::Done { run });
        }
    }

    /// A call arrives at the target.
    fn land(&mut self, run: String, reports_seen: usize, by: usize, life: u64) {
        self.report.calls += 1;
        self.trace(|| format!("{by} call {run} lands at the target"));
        let earlier: Vec<&Landed> = self.landed.iter().filter(|l| l.run == run).collect();
        if !earlier.is_empty() {
            // A report its caller could have read before deciding to call.
            let reported =
                (self.jobs[..reports_seen].iter()).any(|r| matches!(r, JobReport::Done { run: r } if *r == run));
            let released = (self.jobs.iter()).any(|r| matches!(r, JobReport::Released { run: r, .. } if *r == run));
            // Cut: its caller crashed or paused (and may be paused still) before reporting.
            let cut = earlier.iter().all(|l| {
                let caller = &self.instances[l.by];
                caller.life != l.life || caller.paused_until.is_some() || released
            });
            if reported {
                self.report.violations.push(Violation::CalledTwice {
                    run: run.clone(),
                    why: "its report was on the jobs topic".into(),
                });
            } else if !cut {
                self.report.violations.push(Violation::CalledTwice {
                    run: run.clone(),
                    why: format!(
                        "the first caller (instance {}) was alive and had not released it",
                        earlier[0].by
                    ),
                });
            } else {
                self.report.repeated_after_a_cut += 1;
            }
        }
        self.landed.push(Landed { run, by, life });
    }

    fn append_changelog(&mut self, key: Vec<u8>, entry: Entry) -> i64 {
        let offset = self.changelog_next;
        self.changelog_next += 1;
        self.changelog.push(Changelog {
            offset,
            key,
            entry,
            at: self.now,
        });
        offset
    }

    /// Keeps the last record of every key; fences and acceptances have keys of their own.
    /// A record younger than the changelog's `min.compaction.lag.ms` stays.
    fn compact(&mut self) {
        let mut last: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for c in &self.changelog {
            last.insert(c.key.clone(), c.offset);
        }
        let lag = if self.historic.compaction_without_lag {
            TimeDelta::zero()
        } else {
            COMPACTION_LAG
        };
        let now = self.now;
        self.changelog.retain(|c| last[&c.key] == c.offset || now - c.at < lag);
    }

    fn entries(&self, from: i64, to: i64) -> Vec<Entry> {
        (self.changelog.iter())
            .filter(|c| c.offset >= from && c.offset < to)
            .map(|c| c.entry.clone())
            .collect()
    }

    /// Opening, first step: the fence, then the restore of everything before it (from the
    /// store's checkpoint when the log confirms the store, else from scratch).
    fn fence_and_restore(&mut self, i: usize) {
        let fence_offset = self.changelog_next;
        let epoch = crate::core::changelog::epoch_at(fence_offset);
        let fence = self.append_changelog(key_of("n/", &format!("{i}/{fence_offset}")), Entry::Fence { epoch });
        let disk = &self.instances[i].disk;
        let reused = disk.checkpoint.and_then(|(at, lineage)| {
            let mut restore = Restore::reusing(lineage);
            let mut store = disk.store.clone();
            for entry in self.entries(at + 1, fence) {
                for (k, v) in restore.push(entry).ok()? {
                    apply(&mut store, k, v);
                }
            }
            Some((store, restore))
        });
        let (store, restore) = reused.unwrap_or_else(|| {
            let mut restore = Restore::full();
            let mut store = BTreeMap::new();
            for entry in self.entries(0, fence) {
                for (k, v) in restore.push(entry).expect("a full restore never diverges") {
                    apply(&mut store, k, v);
                }
            }
            (store, restore)
        });
        let keys = store.len();
        let full = self.instances[i].disk.checkpoint.is_none();
        self.trace(|| format!("{i} fenced at {fence}, restored {keys} keys (from scratch: {full})"));
        let mut stale = restore.stale_keys();
        // A reused store's repairs found before and not written yet.
        if !full && !self.historic.repairs_forgotten_on_reopening {
            stale.extend(self.instances[i].disk.repairs.iter().cloned());
        }
        let m = self.instances[i].memory.as_mut().unwrap();
        m.restored = Some((store, restore.lineage(), stale));
        m.opening = Opening::Restored { fence };
    }

    /// Opening, second step: the acceptance, a look at what landed between, the journal.
    fn accept(&mut self, i: usize, fence: i64) {
        let (store, lineage, stale) = self.instances[i].memory.as_mut().unwrap().restored.take().unwrap();
        let accepted = self.append_changelog(
            key_of("a/", &lineage.epoch.to_string()),
            Entry::Accept {
                epoch: lineage.epoch,
                through: lineage.through,
            },
        );
        let mut writer = Writer::fenced_at(fence);
        let between = writer.landed(&[accepted]);
        let entries: Vec<Entry> = between.iter().flat_map(|r| self.entries(r.start, r.end)).collect();
        let fenced = writer.check(&entries) == Checked::Fenced;
        // As the processor installs an opened partition (`Processor::opened`).
        let assigned = !(self.lost(i) && self.instances[i].notices_after == 0);
        match ownership::on_opened(assigned, fenced) {
            OnOpened::Install => {}
            OnOpened::Zombie => return self.abandon(i, ZOMBIE_OPENING),
            OnOpened::LeaveToNewOwner => {
                *self.report.given_up.entry(LEFT_WHILE_OPENING).or_default() += 1;
                self.trace(|| format!("{i} lost its assignment while opening: left to the new owner"));
                self.instances[i].disk.disown();
                self.instances[i].memory.as_mut().unwrap().opening = Opening::New;
                return;
            }
        }
        writer.repair(stale);
        // Journaled before deadlines were (the rebalance re-request put back): due at once.
        let deadlines = !self.historic.rerequest_at_once;
        let found: Vec<Effect> = (store.iter())
            .filter_map(|(k, v)| {
                let run = std::str::from_utf8(k.strip_prefix(b"j/")?).ok()?;
                let deadline = DateTime::parse_from_rfc3339(std::str::from_utf8(v).ok()?).ok()?;
                let deadline = deadlines.then(|| deadline.with_timezone(&Utc));
                Some(Effect::TriggerJob(request(run, deadline)))
            })
            .collect();
        let jobs_end = self.jobs.len() as i64;
        let now = self.now;
        let inst = &mut self.instances[i];
        inst.disk = Disk {
            store,
            checkpoint: Some((accepted, writer.lineage())),
            repairs: writer.repairs_to_keep().unwrap_or_default(),
        };
        let m = inst.memory.as_mut().unwrap();
        m.writer = Some(writer);
        m.journaled = Journaled::default();
        m.journaled.found(0, found, jobs_end, now);
        m.reports_read = 0;
        m.opening = Opening::Open;
    }

    /// Every [`WATCH_STEPS`], what others wrote to the changelog since the owner's last
    /// record, as the processor's idle watch reads it: their keys are repaired by the next
    /// batch (one of repairs alone), a newer fence stops the process.
    fn watch_changelog(&mut self, i: usize) {
        if self.historic.unwatched_idle_owner || !self.step.is_multiple_of(WATCH_STEPS) {
            return;
        }
        let end = self.changelog_next;
        let Some(from) = (self.instances[i].memory.as_ref())
            .and_then(|m| m.writer.as_ref())
            .map(Writer::next_offset)
        else {
            return;
        };
        let others = self.entries(from, end);
        let writer = self.instances[i].memory.as_mut().and_then(|m| m.writer.as_mut());
        match writer.expect("read above").watched(&others, end) {
            Checked::Fenced => self.abandon(i, ZOMBIE_WATCHING),
            Checked::Owner { stale: 0 } => {}
            Checked::Owner { stale } => {
                self.trace(|| format!("{i} watching its changelog found {stale} keys to repair"))
            }
        }
    }

    /// No input and no fault for a while: the owner, idle, watches its changelog; then the
    /// compaction lag passes, so that compaction may remove any record a later one of its key
    /// shadows.
    fn quiet(&mut self) {
        for _ in 0..3 * WATCH_STEPS {
            self.tick();
        }
        self.now += COMPACTION_LAG + STEP;
        self.trace(|| "quiet: the compaction lag passes".to_string());
    }

    /// Journaled triggers of earlier owners, driven as the processor drives them: reports
    /// read, the jobs topic's end measured when asked (it is read to its end at once here),
    /// due ones settled (the fence is the batch's to check: a call starts only after its
    /// batch counts).
    fn resume_triggers(&mut self, i: usize) {
        let now = self.now;
        let unread: Vec<JobRecord> = {
            let m = self.instances[i].memory.as_ref().unwrap();
            self.jobs[m.reports_read..].iter().map(|r| r.record(now)).collect()
        };
        let done: BTreeSet<&str> = (self.jobs.iter())
            .filter_map(|r| match r {
                JobReport::Done { run } => Some(run.as_str()),
                JobReport::Released { .. } => None,
            })
            .collect();
        let jobs_end = self.jobs.len() as i64;
        let m = self.instances[i].memory.as_mut().unwrap();
        m.reports_read = jobs_end as usize;
        for record in &unread {
            // As the processor does: an answered trigger's entry goes with the report's batch.
            if m.journaled.reported(0, record) == Reported::Answered {
                m.forget.insert(record.run_id.clone());
            }
        }
        let mut call = Vec::new();
        for step in m.journaled.poll(now, |_, end| end <= jobs_end) {
            let due = match step {
                Step::MeasureJobsEnd { partition, run_id } => {
                    m.journaled.measured(partition, &run_id, jobs_end, now);
                    continue;
                }
                Step::Due(due) => due,
            };
            let awaited = |r: &TriggerRequest| Ok::<_, std::convert::Infallible>(!done.contains(r.run_id.as_str()));
            match m.journaled.settle(due, now, true, || Some(false), awaited) {
                Ok(Settled::Again(effect)) => call.push(effect.request().run_id.clone()),
                Ok(Settled::Forgotten) => {}
                settled => unreachable!("an owner that holds its partition, fence unread: {settled:?}"),
            }
        }
        for (_, runs) in m.journaled.take_stale() {
            m.forget.extend(runs);
        }
        for run in &call {
            self.trace(|| format!("{i} requests journaled {run} again"));
        }
        // Journaled again with its new deadline, in a batch, before the call: a later owner
        // leaves it to this one until then.
        self.instances[i].memory.as_mut().unwrap().again.extend(call);
    }

    /// Fetches up to three records and decides them: the batch is then written out one
    /// [`Flush`] step per tick.
    fn start_batch(&mut self, i: usize) {
        let end = self.arrived();
        let stale_watermark = self.historic.stale_watermark;
        let now = self.now;
        let reports_seen = self.jobs.len();
        let inst = &mut self.instances[i];
        let m = inst.memory.as_mut().unwrap();
        let repairs = m.writer.as_ref().is_some_and(Writer::has_repairs);
        if m.position >= end && m.forget.is_empty() && m.again.is_empty() && !repairs {
            return;
        }
        let mut store = inst.disk.store.clone();
        let mut changes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut events = Vec::new();
        let mut calls = Vec::new();
        let mut seen: Option<i64> = None;
        let mut commit = -1;
        let fetched: Vec<i64> = (m.position..end.min(m.position + 3)).collect();
        for offset in fetched {
            let applied = store.get(APPLIED).map(|v| num(v));
            let partition = admission::Partition {
                assigned: true,
                abandoned: false,
                open: true,
                applied: if stale_watermark { None } else { applied },
                seen_in_batch: seen,
                // The simulated log is never recreated.
                delivered: None,
            };
            let admitted = admission::admit(&partition, offset);
            if admitted.commits() {
                seen = Some(offset);
                commit = offset;
            }
            if admitted != Admission::Apply {
                continue;
            }
            let input = self.inputs[offset as usize];
            let total_key = key_of("s/", &input.pipeline.to_string());
            let total = store.get(&total_key).map(|v| num(v)).unwrap_or(0) + input.value;
            for (k, v) in [(total_key, total.to_string()), (APPLIED.to_vec(), offset.to_string())] {
                store.insert(k.clone(), v.clone().into_bytes());
                changes.insert(k, Some(v.into_bytes()));
            }
            events.push((format!("e/{offset}"), format!("{}+{}", input.pipeline, input.value)));
            if input.trigger {
                let run = format!("r{offset}");
                let deadline = now + CALL_BUDGET;
                let value = deadline.to_rfc3339().into_bytes();
                changes.insert(key_of("j/", &run), Some(value.clone()));
                store.insert(key_of("j/", &run), value);
                calls.push(Call {
                    run,
                    reports_seen,
                    deadline,
                    phase: CallPhase::Pending(now),
                });
            }
        }
        m.position = m.position.max(commit + 1);
        for run in std::mem::take(&mut m.again) {
            let deadline = now + CALL_BUDGET;
            changes.insert(key_of("j/", &run), Some(deadline.to_rfc3339().into_bytes()));
            calls.push(Call {
                run,
                reports_seen,
                deadline,
                phase: CallPhase::Pending(now),
            });
        }
        for run in std::mem::take(&mut m.forget) {
            let key = key_of("j/", &run);
            if store.contains_key(&key) {
                changes.insert(key, None);
            }
        }
        let Some(writer) = m.writer.as_mut() else { return };
        // The repairs under the batch's own writes, with the store's values.
        for key in writer.take_repairs() {
            let value = store.get(&key).cloned();
            changes.entry(key).or_insert(value);
        }
        if changes.is_empty() && events.is_empty() {
            return;
        }
        let sequenced = match changes.is_empty() {
            true => BTreeMap::new(),
            false => [(0, writer.next_batch())].into_iter().collect(),
        };
        let (from, to) = (commit, m.position);
        let n = events.len();
        self.trace(|| format!("{i} batch decided: {n} applied, through offset {from}, next {to}"));
        let m = self.instances[i].memory.as_mut().unwrap();
        m.batch = Some(InFlight {
            flush: Flush::new(sequenced, false),
            events,
            changes,
            calls,
            commit,
        });
    }

    /// Whether instance `i` would find its assignment lost now.
    fn lost(&self, i: usize) -> bool {
        let m = self.instances[i].memory.as_ref().unwrap();
        self.owner != Some(i) || m.generation != self.generation
    }

    fn batch_of(&self, i: usize) -> &InFlight {
        let m = self.instances[i].memory.as_ref().expect("a running instance");
        m.batch.as_ref().expect("a batch in flight")
    }

    /// One step of the batch in flight.
    fn batch_step(&mut self, i: usize) {
        let lost = self.lost(i) && self.instances[i].notices_after == 0;
        let unfenced = self.historic.unfenced;
        let action = self.batch_of(i).flush.poll();
        self.trace(|| format!("{i} batch: {action:?} (lost: {lost})"));
        match action {
            Action::Produce if lost => self.with_flush(i, |flush, _| flush.on_lost()),
            Action::Produce => {
                let b = self.instances[i].memory.as_mut().unwrap().batch.take().unwrap();
                self.events.extend(b.events.iter().cloned());
                let epoch_seq = self.instances[i]
                    .memory
                    .as_ref()
                    .unwrap()
                    .writer
                    .as_ref()
                    .map(|w| w.next_batch());
                let mut landed = Vec::new();
                let mut lose_ack = std::mem::take(&mut self.instances[i].memory.as_mut().unwrap().lose_ack);
                if let Some(this) = epoch_seq.filter(|_| !b.changes.is_empty()) {
                    for (key, value) in &b.changes {
                        let entry = Entry::Write {
                            key: key.clone(),
                            value: value.clone(),
                            epoch: this.epoch,
                            seq: this.through,
                        };
                        if std::mem::take(&mut lose_ack) {
                            // Landed, unacknowledged: sent again, it lands again after.
                            self.append_changelog(key.clone(), entry.clone());
                        }
                        landed.push((0, self.append_changelog(key.clone(), entry)));
                    }
                }
                let m = self.instances[i].memory.as_mut().unwrap();
                let mut writers: BTreeMap<i32, Writer> = m.writer.take().into_iter().map(|w| (0, w)).collect();
                let mut b = b;
                b.flush.on_produced(&landed, lost, &mut writers);
                m.writer = writers.remove(&0);
                m.batch = Some(b);
            }
            Action::ReadChangelog { ranges, .. } => {
                let entries: Vec<Entry> = match unfenced {
                    true => Vec::new(),
                    false => ranges.iter().flat_map(|r| self.entries(r.start, r.end)).collect(),
                };
                self.with_flush(i, |flush, writers| {
                    flush.on_read(Some(&entries), writers);
                });
            }
            Action::ProduceMarkers(markers) => {
                let landed: Vec<(i32, i64)> = (markers.iter())
                    .map(|mk| {
                        let key = key_of("b/", &mk.batch.epoch.to_string());
                        let entry = Entry::Marker {
                            epoch: mk.batch.epoch,
                            seq: mk.batch.through,
                        };
                        (mk.partition, self.append_changelog(key, entry))
                    })
                    .collect();
                self.with_flush(i, |flush, writers| flush.on_markers(&landed, lost, writers));
            }
            Action::WriteStores(counted) => {
                let inst = &mut self.instances[i];
                let m = inst.memory.as_mut().unwrap();
                let b = m.batch.as_ref().unwrap();
                for (k, v) in &b.changes {
                    apply(&mut inst.disk.store, k.clone(), v.clone());
                }
                if let Some((at, lineage)) = counted.get(&0) {
                    inst.disk.checkpoint = Some((*at, *lineage));
                    if let Some(keys) = m.writer.as_mut().and_then(Writer::repairs_to_keep) {
                        inst.disk.repairs = keys;
                    }
                }
                self.with_flush(i, |flush, writers| flush.on_stored(lost, writers));
            }
            Action::CommitOffsets => {
                let commit = self.batch_of(i).commit;
                if !self.lost(i) && commit >= 0 {
                    self.committed = self.committed.max(commit + 1);
                }
                self.with_flush(i, |flush, _| flush.on_committed());
            }
            Action::StartEffects => {
                let m = self.instances[i].memory.as_mut().unwrap();
                let b = m.batch.as_mut().unwrap();
                let calls = std::mem::take(&mut b.calls);
                b.flush.on_started();
                m.calls.extend(calls);
            }
            Action::GiveUp(_) => {
                // A zombie that found a newer fence stops; restarted, it joins again.
                self.abandon(i, ZOMBIE_BATCH);
            }
            Action::Abandon | Action::Done => {
                self.instances[i].memory.as_mut().unwrap().batch = None;
            }
            Action::Transact | Action::ReadFenceOffsets => unreachable!("the simulator runs effectively-once"),
            Action::ChangelogWentBack { partition } => {
                unreachable!("the simulated changelog never starts over (partition {partition})")
            }
        }
    }

    fn with_flush(&mut self, i: usize, f: impl FnOnce(&mut Flush, &mut BTreeMap<i32, Writer>)) {
        let m = self.instances[i].memory.as_mut().unwrap();
        let mut writers: BTreeMap<i32, Writer> = m.writer.take().into_iter().map(|w| (0, w)).collect();
        if let Some(b) = m.batch.as_mut() {
            f(&mut b.flush, &mut writers);
        }
        m.writer = writers.remove(&0);
    }

    /// No more faults: paused instances wake, crashed ones come back, and the system runs
    /// until the owner has applied everything and every call has reported.
    fn settle(&mut self) {
        for inst in &mut self.instances {
            inst.paused_until = None;
            inst.notices_after = 0;
        }
        self.expires = None;
        let start = self.step;
        while self.step - start < SETTLE_STEPS {
            self.tick();
            let Some(o) = self.owner else { continue };
            let Some(m) = self.instances[o].memory.as_ref() else {
                continue;
            };
            let idle = m.opening == Opening::Open
                && m.batch.is_none()
                && m.calls.is_empty()
                && m.journaled.is_empty()
                && m.forget.is_empty()
                && m.again.is_empty()
                && m.position >= self.inputs.len() as i64;
            let others_quiet = (0..INSTANCES)
                .filter(|i| *i != o)
                .all(|i| self.instances[i].memory.as_ref().is_none_or(|m| m.calls.is_empty()));
            if idle && others_quiet {
                return;
            }
        }
        self.report.violations.push(Violation::Stuck(format!(
            "not settled in {SETTLE_STEPS} steps: owner {:?}, committed {} of {}",
            self.owner,
            self.committed,
            self.inputs.len()
        )));
    }

    /// How many inputs have arrived by now.
    fn arrived(&self) -> i64 {
        let arrived = usize::try_from(self.step / ARRIVAL_STEPS + 1).unwrap_or(usize::MAX);
        arrived.min(self.inputs.len()) as i64
    }

    /// The invariants, after the run.
    fn check(&mut self) {
        let Some(o) = self.owner else { return };
        let store = self.instances[o].disk.store.clone();
        // Every input applied once.
        for p in 0..PIPELINES {
            let input: i64 = (self.inputs.iter()).filter(|x| x.pipeline == p).map(|x| x.value).sum();
            let owner = store.get(&key_of("s/", &p.to_string())).map(|v| num(v)).unwrap_or(0);
            if owner != input {
                self.report.violations.push(Violation::State {
                    pipeline: p.to_string(),
                    owner,
                    input,
                });
            }
        }
        // Every trigger called.
        let called: BTreeSet<&str> = self.landed.iter().map(|l| l.run.as_str()).collect();
        for (offset, input) in self.inputs.iter().enumerate() {
            let run = format!("r{offset}");
            if input.trigger && !called.contains(run.as_str()) && !self.failed.contains(&run) {
                self.report.violations.push(Violation::NeverCalled { run });
            }
        }
        // One eventId, one event; every applied record has one.
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (id, body) in &self.events {
            if let Some(other) = seen.insert(id, body).filter(|b| *b != body) {
                self.report
                    .violations
                    .push(Violation::Events(format!("{id}: {other} and {body}")));
            }
        }
        for offset in 0..self.inputs.len() {
            if !seen.contains_key(format!("e/{offset}").as_str()) {
                self.report
                    .violations
                    .push(Violation::Events(format!("no event for input {offset}")));
            }
        }
        // The store is what a restore from scratch of the compacted log gives.
        self.compact();
        let mut restore = Restore::full();
        let mut restored = BTreeMap::new();
        for c in &self.changelog {
            for (k, v) in restore.push(c.entry.clone()).expect("a full restore never diverges") {
                apply(&mut restored, k, v);
            }
        }
        let keys: BTreeSet<&Vec<u8>> = store.keys().chain(restored.keys()).collect();
        for key in keys {
            if store.get(key) != restored.get(key) {
                let text = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(v).to_string());
                self.report.violations.push(Violation::Restore {
                    key: String::from_utf8_lossy(key).to_string(),
                    store: text(store.get(key)),
                    restored: text(restored.get(key)),
                });
            }
        }
    }
}

fn apply(store: &mut BTreeMap<Vec<u8>, Vec<u8>>, key: Vec<u8>, value: Option<Vec<u8>>) {
    match value {
        Some(v) => store.insert(key, v),
        None => store.remove(&key),
    };
}

/// A journaled trigger as the handover rules read it.
fn request(run: &str, deadline: Option<DateTime<Utc>>) -> TriggerRequest {
    let config =
        JobConfig::from_json(JobKind::Http, &serde_json::json!({"url": "http://target"})).expect("a valid job config");
    TriggerRequest {
        run_id: run.to_string(),
        deadline,
        ..TriggerRequest::new("p", &"daily/2026-11-26".parse().expect("an execution id"), 1, config)
    }
}

#[cfg(test)]
mod tests;
