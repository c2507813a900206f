//! The simulator of the real partition task: several instances, each running the processor's
//! own [`Task`] (the decider, the hand-over and changelog rules, the batch order) over
//! in-memory stores, share the partitions of an in-memory [`Log`]. A group coordinator
//! assigns partitions, bumps generations and expires the sessions of paused instances; a
//! seeded fault schedule crashes, pauses (zombies), cuts instances off the broker while they
//! live, rebalances, redelivers input, loses acknowledgements, compacts the changelog, skews
//! and steps each instance's clock, and writes forged records to the jobs topic, between any
//! two steps of any instance. A simulated job system counts the jobs started where they
//! land; after the run the invariants are checked ([`Breach`]).
//!
//! What the simulator adds of its own is the world (log, coordinator, job system, faults)
//! and the runtime's I/O answered from it: the executor's calls, the opening of a partition
//! (fence, restore, acceptance) and the consumer's fetches. Every decision is the task's.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use super::log::Log;
use super::store::{Disk, MemoryStore};
use crate::core::batch::Action;
use crate::core::changelog::{self, Checked, Restore, Writer};
use crate::core::execution::{ExecutionId, RunId};
use crate::core::ids::PipelineId;
use crate::core::lifecycle::{Effect, Settings as DeciderSettings, TriggerRequest};
use crate::core::output::Output;
use crate::core::ownership::{self, OnOpened, OnRevoked};
use crate::core::partitioning::{partition_for, PartitionId};
use crate::core::records::{JobRecord, JobStatus};
use crate::core::task::{self, origin_of, Opening, Record, ReleaseKeys, Sealed, Staged, Take, Task};
use crate::runtime::codec::Codec;
use crate::runtime::input::read_input;
use crate::runtime::jobs::Outcome;
use crate::runtime::outputs::Encoder;
use crate::runtime::topics::Topics;

const PARTITIONS: i32 = 2;
const INSTANCES: usize = 3;
const PIPELINES: usize = 4;
const DATES: usize = 3;
const STEP: TimeDelta = TimeDelta::seconds(1);
/// Steps a paused member keeps its session.
const SESSION: u64 = 10;
const FAULT_STEPS: u64 = 600;
const SETTLE_STEPS: u64 = 4_000;
/// How often an idle owner reads its changelog for others' writes.
const WATCH_STEPS: u64 = 60;
/// The changelog's `min.compaction.lag.ms`, in simulated time.
const COMPACTION_LAG: TimeDelta = TimeDelta::minutes(10);
/// How long a job runs at the target before its runner reports.
const JOB_TAKES: TimeDelta = TimeDelta::seconds(40);
/// Steps a call takes to reach the target.
const CALL_TAKES: i64 = 2;
/// Largest skew of an instance's clock from true time within the hand-over's allowance.
const SKEW_SECONDS: i64 = 2;
/// Steps a member may take to rejoin after a rebalance (`max.poll.interval.ms`, scaled).
const MAX_POLL_STEPS: u64 = 30;

/// Faults of the past, put back in the world's answers to the task (never in the task) to
/// show the simulator catches them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Historic {
    /// A new owner requests journaled triggers again at once, without waiting for the old
    /// owner's report, release or the call's deadline (the rebalance re-request): the
    /// journal is read as a version without deadlines wrote it.
    pub rerequest_at_once: bool,
    /// An owner never reads the records between its own changelog writes, so never sees a
    /// newer fence (the unfenced changelog writer).
    pub unfenced: bool,
    /// Records at or below the applied offset are applied again (the stale watermark).
    pub stale_watermark: bool,
    /// The changelog compacts records however young.
    pub compaction_without_lag: bool,
    /// An idle owner never reads what others wrote to its changelog since its last record.
    pub unwatched_idle_owner: bool,
    /// The keys a store kept to repair are forgotten when it is reopened.
    pub repairs_forgotten_on_reopening: bool,
}

/// What a run breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Breach {
    /// A run was called while another call of it, by a caller that had not let it go, could
    /// still be under way: at a target that ignores idempotency keys, two jobs.
    CalledTwice { run: String, why: String },
    /// A second job of one execution started at the target though the first succeeded, or
    /// under another run id for the same attempt.
    StartedTwice { execution: String, why: String },
    /// Two attempts of one execution ran at once.
    Overlapped { execution: String },
    /// An execution whose trigger reading was applied never started a job.
    NeverStarted { execution: String },
    /// The owner's store differs from a from-scratch restore of the compacted changelog.
    Restore { partition: PartitionId, key: String },
    /// Two events under one id differ.
    Events(String),
    /// The system did not settle once the faults stopped.
    Stuck(String),
    /// An instance stopped on an error that is not a zombie's.
    Failed(String),
    /// A record that does not decode never reached the dead-letter topic.
    Vanished {
        topic: String,
        partition: PartitionId,
        offset: i64,
    },
}

/// What a run went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes {
    pub steps: u64,
    /// Steps of runs under exactly-once.
    pub exactly_once_steps: u64,
    pub faults: BTreeMap<&'static str, u64>,
    /// Calls that reached the target, and jobs started there (a call of a run already
    /// started is answered with that job: the target honours the idempotency key).
    pub calls: u64,
    pub starts: u64,
    pub rebalances: u64,
    /// Instances that stopped as zombies (a newer owner's fence found).
    pub zombies: u64,
    pub breaches: Vec<Breach>,
    pub trace: Vec<String>,
}

impl Outcomes {
    pub fn add(&mut self, other: &Outcomes) {
        self.steps += other.steps;
        self.exactly_once_steps += other.exactly_once_steps;
        self.calls += other.calls;
        self.starts += other.starts;
        self.rebalances += other.rebalances;
        self.zombies += other.zombies;
        for (fault, n) in &other.faults {
            *self.faults.entry(fault).or_default() += n;
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} steps ({} of them exactly-once), {} instances, {} partitions, {} rebalances, {} calls, {} jobs started, {} zombies stopped, faults {:?}",
            self.steps, self.exactly_once_steps, INSTANCES, PARTITIONS, self.rebalances, self.calls, self.starts, self.zombies, self.faults
        )
    }
}

/// Runs one seed of the real task's world, with `historic` put back.
pub fn run(seed: u64, historic: Historic) -> Outcomes {
    World::new(seed, historic, false).simulate()
}

/// [`run`], with a trace of what happened.
pub fn run_traced(seed: u64, historic: Historic) -> Outcomes {
    World::new(seed, historic, true).simulate()
}

/// A record fetched from the log, as the task reads it.
struct Fetched {
    topic: String,
    partition: PartitionId,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Record for Fetched {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn partition(&self) -> PartitionId {
        self.partition
    }
    fn offset(&self) -> i64 {
        self.offset
    }
    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }
    fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }
    fn headers(&self) -> Vec<(&str, &[u8])> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect()
    }
    fn timestamp(&self) -> Option<DateTime<Utc>> {
        None
    }
}

/// Release keys from the seed.
struct SeededKeys(fastrand::Rng);

impl ReleaseKeys for SeededKeys {
    fn next_key(&mut self) -> Option<String> {
        Some(format!("{:032x}", self.0.u128(..)))
    }
}

/// A trigger's call in the executor.
#[derive(Debug, Clone)]
struct Call {
    partition: PartitionId,
    request: TriggerRequest,
    phase: CallPhase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallPhase {
    /// Its start mark is to be written (and acknowledged by the time to begin).
    Marking,
    /// Marked; lands at the target at this step.
    Calling(u64),
    /// Landed; its `running` report is still to be written.
    Landed,
}

/// A partition being opened: fenced and restored, the acceptance next.
struct Restored {
    fence: i64,
    disk: Disk,
    lineage: changelog::Lineage,
    stale: Vec<Vec<u8>>,
}

/// What a running process holds in memory: lost in a crash.
struct Running {
    task: Task<MemoryStore>,
    /// The generation it believes it owns its partitions in.
    generation: u64,
    /// The partitions it believes it owns, and those of them open.
    assigned: BTreeSet<PartitionId>,
    opening: BTreeMap<PartitionId, Option<Restored>>,
    /// Consumer positions by (topic, partition).
    positions: BTreeMap<(String, PartitionId), i64>,
    batch: Option<Sealed>,
    calls: Vec<Call>,
    /// The acknowledgement of its next produce round is lost: the round is sent again.
    lose_ack: Option<Resend>,
}

/// How a produce round whose acknowledgement was lost is sent again.
#[derive(Debug, Clone, Copy)]
enum Resend {
    /// As new records: they land a second time, after the first.
    Again,
    /// By the idempotent producer: the broker finds them duplicates and librdkafka
    /// acknowledges them without a place, each partition's counted from the broker's base
    /// offset -1 (seen on tansu after a cut connection).
    Duplicate,
}

struct Instance {
    disks: BTreeMap<PartitionId, Rc<RefCell<Disk>>>,
    running: Option<Running>,
    paused_until: Option<u64>,
    /// Cut off from the broker until this step (alive: its calls go on).
    cut_until: Option<u64>,
    /// Its clock's offset from true time.
    skew: TimeDelta,
    /// Steps it takes, awake again, to notice that its session expired meanwhile (a zombie
    /// until then), and the step it notices at.
    notice_delay: u64,
    notices_at: Option<u64>,
    life: u64,
}

/// A job at the target.
#[derive(Debug, Clone)]
struct Job {
    run_id: RunId,
    attempt: u32,
    ends: DateTime<Utc>,
    succeeds: bool,
    reported: bool,
}

struct World {
    rng: fastrand::Rng,
    historic: Historic,
    /// Every instance runs `--guarantee exactly-once` (one transaction per batch).
    exactly_once: bool,
    traced: bool,
    step: u64,
    /// True time.
    now: DateTime<Utc>,
    log: Log,
    topics: Topics,
    /// Inputs still to arrive: (at step, output).
    arrivals: Vec<(u64, Output)>,
    /// The coordinator: who owns each partition, the generation, committed offsets.
    owners: BTreeMap<PartitionId, usize>,
    generation: u64,
    /// The step the generation began.
    generation_since: u64,
    committed: BTreeMap<(String, PartitionId), i64>,
    members: BTreeSet<usize>,
    /// Paused members' sessions expire at these steps.
    expires: BTreeMap<usize, u64>,
    instances: Vec<Instance>,
    /// Jobs by execution (pipeline, execution id), in start order.
    jobs: BTreeMap<(PipelineId, String), Vec<Job>>,
    /// Executions whose trigger reading was produced.
    triggered: BTreeSet<(PipelineId, String)>,
    /// Where records that do not decode were written: each must be dead-lettered.
    forged: Vec<(String, PartitionId, i64)>,
    out: Outcomes,
}

fn pipeline(i: usize) -> String {
    format!("sim-{i}")
}

fn date(d: usize) -> String {
    format!("2026-11-{:02}", 20 + d)
}

/// A pipeline that starts a job when its `upstream` reading says ready, whose runner
/// reports by itself, retried once after a failure.
fn config(id: &str) -> serde_json::Value {
    json!({
        "pipeline": {"id": id, "owner": "sim"},
        "schedule": {
            "timezone": "UTC",
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            "evaluation": {"window": "2h", "interval": "1m"}
        },
        "validation": {"trigger": "ALL", "rules": [
            {"key": "upstream", "check": "equals", "field": "status", "value": "ready"}
        ]},
        "job": {"type": "http", "config": {"url": "http://target/run", "awaitReport": true}, "maxRetries": 1}
    })
}

impl World {
    fn new(seed: u64, historic: Historic, traced: bool) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let topics = Topics::new("sim.");
        let mut arrivals = Vec::new();
        let mut triggered = BTreeSet::new();
        for i in 0..PIPELINES {
            let id = pipeline(i);
            arrivals.push((0, input(&topics.config, &id, &config(&id))));
            for d in 0..DATES {
                // After the configs are in (a reading of a pipeline Sluice does not know yet
                // waits for nothing, as in the earlier design).
                let at = rng.u64(20..FAULT_STEPS);
                let reading =
                    json!({"pipelineId": id, "key": "upstream", "data": {"status": "ready"}, "date": date(d)});
                arrivals.push((at, input(&topics.sensors, &id, &reading)));
                // Sent twice, sometimes: a second reading must not start the date again.
                if rng.u8(0..4) == 0 {
                    arrivals.push((at + rng.u64(1..200), input(&topics.sensors, &id, &reading)));
                }
                triggered.insert((PipelineId::from(&id), date(d)));
            }
        }
        arrivals.sort_by_key(|(at, _)| *at);
        let instances = (0..INSTANCES)
            .map(|_| Instance {
                disks: (0..PARTITIONS).map(|p| (PartitionId::new(p), Rc::default())).collect(),
                running: None,
                paused_until: None,
                cut_until: None,
                skew: TimeDelta::seconds(rng.i64(-SKEW_SECONDS..=SKEW_SECONDS)),
                notice_delay: 0,
                notices_at: None,
                life: 0,
            })
            .collect();
        let exactly_once = rng.bool();
        World {
            rng,
            historic,
            exactly_once,
            traced,
            step: 0,
            now: DateTime::parse_from_rfc3339("2026-11-25T08:00:00Z")
                .expect("a time")
                .to_utc(),
            log: Log::new(PARTITIONS),
            topics,
            arrivals,
            owners: BTreeMap::new(),
            generation: 0,
            generation_since: 0,
            committed: BTreeMap::new(),
            members: BTreeSet::new(),
            expires: BTreeMap::new(),
            instances,
            jobs: BTreeMap::new(),
            triggered,
            forged: Vec::new(),
            out: Outcomes::default(),
        }
    }

    fn simulate(mut self) -> Outcomes {
        for i in 0..INSTANCES {
            self.start(i);
        }
        while self.step < FAULT_STEPS {
            self.inject();
            self.tick();
        }
        self.settle();
        self.check();
        if self.exactly_once {
            self.out.exactly_once_steps = self.out.steps;
        }
        self.out
    }

    fn trace(&mut self, what: impl FnOnce() -> String) {
        if self.traced {
            let line = format!("{:>5} {} {}", self.step, self.now.format("%H:%M:%S"), what());
            self.out.trace.push(line);
        }
    }

    fn fault(&mut self, name: &'static str, i: usize) {
        *self.out.faults.entry(name).or_default() += 1;
        self.trace(|| format!("fault: {name} (instance {i})"));
    }

    /// Instance `i`'s clock.
    fn clock(&self, i: usize) -> DateTime<Utc> {
        self.now + self.instances[i].skew
    }

    // ---- the process ----

    /// Starts (or restarts) instance `i`: a new process joins the group.
    fn start(&mut self, i: usize) {
        let decider = DeciderSettings::default();
        let encoder = Encoder {
            codec: Codec::json(),
            topics: self.topics.clone(),
            limits: decider.limits,
        };
        let settings = task::Settings {
            decider,
            partitions: PARTITIONS,
            batch_size: 50,
            forward_misrouted: true,
            changelog: self.topics.changelog.clone(),
            dlq: self.topics.dlq.clone(),
            sensors: self.topics.sensors.clone(),
            exactly_once: self.exactly_once,
        };
        let keys = SeededKeys(fastrand::Rng::with_seed(self.rng.u64(..)));
        let inst = &mut self.instances[i];
        inst.life += 1;
        inst.running = Some(Running {
            task: Task::new(settings, Box::new(encoder), Box::new(keys)),
            generation: 0,
            assigned: BTreeSet::new(),
            opening: BTreeMap::new(),
            positions: BTreeMap::new(),
            batch: None,
            calls: Vec::new(),
            lose_ack: None,
        });
        self.members.insert(i);
        self.rebalance();
    }

    /// The process dies: its memory and calls in flight are gone, its disk stays.
    fn crash(&mut self, i: usize) {
        let inst = &mut self.instances[i];
        inst.running = None;
        inst.paused_until = None;
        inst.cut_until = None;
        inst.notices_at = None;
        self.expires.remove(&i);
        if self.members.remove(&i) {
            self.rebalance();
        }
    }

    /// A zombie that found a newer owner's fence stops (the task gave the partition up).
    fn zombie(&mut self, i: usize, why: &str) {
        self.out.zombies += 1;
        self.trace(|| format!("{i} is a zombie ({why}): stops"));
        self.crash(i);
    }

    /// The coordinator hands the partitions out again among the members, in a new
    /// generation.
    fn rebalance(&mut self) {
        self.generation += 1;
        self.generation_since = self.step;
        self.out.rebalances += 1;
        let members: Vec<usize> = self.members.iter().copied().collect();
        self.owners.clear();
        if members.is_empty() {
            return;
        }
        let shift = self.rng.usize(0..members.len());
        for p in (0..PARTITIONS).map(PartitionId::new) {
            self.owners
                .insert(p, members[(p.number() as usize + shift) % members.len()]);
        }
        let (generation, owners) = (self.generation, self.owners.clone());
        self.trace(|| format!("generation {generation}: {owners:?}"));
    }

    fn inject(&mut self) {
        let i = self.rng.usize(0..INSTANCES);
        let running = self.instances[i].running.is_some();
        let awake = running && self.instances[i].paused_until.is_none();
        match self.rng.u32(0..200) {
            0..=2 if running => {
                self.fault("crash", i);
                self.crash(i);
            }
            3..=5 if !running => {
                self.fault("restart", i);
                self.start(i);
            }
            6..=8 if awake => {
                self.fault("pause", i);
                let until = self.step + self.rng.u64(1..SESSION * 3);
                self.instances[i].paused_until = Some(until);
                self.instances[i].notice_delay = self.rng.u64(0..4);
                self.expires.insert(i, self.step + SESSION);
            }
            9..=10 if awake && self.instances[i].cut_until.is_none() => {
                // Cut off from the broker, alive: its session lapses; its calls go on.
                self.fault("network cut", i);
                self.instances[i].cut_until = Some(self.step + self.rng.u64(1..SESSION * 3));
                self.expires.insert(i, self.step + SESSION);
            }
            11 => {
                self.fault("rebalance", i);
                self.rebalance();
            }
            12..=13 => {
                self.fault("compaction", i);
                self.compact();
            }
            14 => {
                self.fault("clock skew", i);
                self.instances[i].skew = TimeDelta::seconds(self.rng.i64(-SKEW_SECONDS..=SKEW_SECONDS));
            }
            17 if awake => {
                self.fault("lost acknowledgement", i);
                let resend = if self.rng.bool() {
                    Resend::Again
                } else {
                    Resend::Duplicate
                };
                self.instances[i].running.as_mut().expect("running").lose_ack = Some(resend);
            }
            18 if !running
                && self.instances[i]
                    .disks
                    .values()
                    .any(|d| d.borrow().checkpoint.is_some()) =>
            {
                self.fault("state directory lost", i);
                self.instances[i].disks = (0..PARTITIONS).map(|p| (PartitionId::new(p), Rc::default())).collect();
            }
            19..=20 => self.forge(i),
            _ => {}
        }
    }

    /// A stranger writes to a topic Sluice reads: on the jobs topic a release of a real run
    /// without its key, or a start mark; on the others records that do not decode, or
    /// a config that is not valid; or a real reading on another partition than its key's.
    fn forge(&mut self, i: usize) {
        let id = pipeline(self.rng.usize(0..PIPELINES));
        let day = date(self.rng.usize(0..DATES));
        let run_id = format!("{id}.stream.{day}.1");
        let deadline = self.now + TimeDelta::minutes(5);
        let topics = &self.topics;
        let (name, output) = match self.rng.u8(0..5) {
            0 | 1 => {
                let (name, outcome) = match self.rng.bool() {
                    true => ("forged release", Outcome::released(Some(deadline), None)),
                    false => ("forged start mark", Outcome::calling(deadline)),
                };
                let record = job_record(&id, &run_id, outcome.status, outcome.metadata, self.now);
                (
                    name,
                    input(&topics.jobs, &id, &serde_json::to_value(&record).expect("a record")),
                )
            }
            2 => {
                let topic = [&topics.sensors, &topics.jobs, &topics.commands][self.rng.usize(0..3)];
                let mut output = input(topic, &id, &json!({}));
                output.value = Some(b"{not json".to_vec());
                ("undecodable record", output)
            }
            3 => {
                let config = json!({"pipeline": {"id": id}, "job": {"type": "nonsense"}});
                ("invalid config", input(&topics.config, &id, &config))
            }
            _ => {
                let reading = json!({"pipelineId": id, "key": "upstream", "data": {"status": "ready"}, "date": day});
                let mut output = input(&topics.sensors, &id, &reading);
                output.partition = output
                    .partition
                    .map(|p| PartitionId::new((p.number() + 1) % PARTITIONS));
                // A reading of a date already triggered (or soon to be): no new execution.
                if !self.triggered.contains(&(id.as_str().into(), day.clone())) {
                    return;
                }
                ("misrouted reading", output)
            }
        };
        self.fault(name, i);
        let (p, offset) = self.log.append(&output);
        if name == "undecodable record" {
            self.forged.push((output.topic, p, offset));
        }
    }

    fn compact(&mut self) {
        let lag = match self.historic.compaction_without_lag {
            true => TimeDelta::zero(),
            false => COMPACTION_LAG,
        };
        for p in (0..PARTITIONS).map(PartitionId::new) {
            self.log.compact(&self.topics.changelog.clone(), p, lag);
        }
    }

    fn tick(&mut self) {
        self.step += 1;
        self.out.steps += 1;
        self.now += STEP;
        self.log.now = self.now;
        while self.arrivals.first().is_some_and(|(at, _)| *at <= self.step) {
            let (_, output) = self.arrivals.remove(0);
            let (p, offset) = self.log.append(&output);
            self.trace(|| {
                format!(
                    "arrives {}/{p}@{offset} {}",
                    output.topic,
                    String::from_utf8_lossy(output.value.as_deref().unwrap_or_default())
                )
            });
        }
        let expired: Vec<usize> = (self.expires.iter())
            .filter(|(_, at)| **at <= self.step)
            .map(|(i, _)| *i)
            .collect();
        for i in expired {
            self.expires.remove(&i);
            if self.members.remove(&i) {
                self.trace(|| format!("{i}'s session expired"));
                self.rebalance();
            }
        }
        self.drop_stalled_members();
        self.report_jobs();
        for i in 0..INSTANCES {
            self.run_instance(i);
        }
    }

    /// A member that has not rejoined within [`MAX_POLL_STEPS`] of a rebalance (a batch
    /// whose transaction the group refuses never ends) is dropped from the group, and knows
    /// it at once (`max.poll.interval.ms` is its own client's timer).
    fn drop_stalled_members(&mut self) {
        let generation = self.generation;
        let since = self.generation_since;
        let stalled: Vec<usize> = (self.members.iter().copied())
            .filter(|i| {
                let r = self.instances[*i].running.as_ref();
                r.is_some_and(|r| r.generation != generation) && self.step > since + MAX_POLL_STEPS
            })
            .collect();
        for i in stalled {
            self.trace(|| format!("{i} did not rejoin in time: dropped from the group"));
            self.members.remove(&i);
            self.instances[i].notices_at = Some(self.step);
            self.rebalance();
        }
    }

    /// Jobs that ended report on the jobs topic (their runner does, not Sluice).
    fn report_jobs(&mut self) {
        let now = self.now;
        let mut reports = Vec::new();
        for ((pipeline, _), jobs) in &mut self.jobs {
            for job in jobs.iter_mut().filter(|j| !j.reported && j.ends <= now) {
                job.reported = true;
                let status = if job.succeeds {
                    JobStatus::Succeeded
                } else {
                    JobStatus::Failed
                };
                reports.push(job_record(pipeline, &job.run_id, status, None, now));
            }
        }
        for record in reports {
            let output = input(
                &self.topics.jobs,
                &record.pipeline_id.clone(),
                &serde_json::to_value(&record).expect("a record"),
            );
            self.log.append(&output);
        }
    }

    fn run_instance(&mut self, i: usize) {
        let inst = &mut self.instances[i];
        if inst.running.is_none() {
            return;
        }
        if let Some(until) = inst.paused_until {
            if self.step < until {
                return;
            }
            inst.paused_until = None;
            if self.expires.remove(&i).is_none() && !self.members.contains(&i) && inst.notices_at.is_none() {
                // Its session expired meanwhile: it notices after a while (and, once it
                // has, knows until it rejoins, as librdkafka's lost assignment stays lost).
                inst.notices_at = Some(self.step + inst.notice_delay);
            }
        }
        let cut = inst.cut_until.is_some_and(|until| self.step < until);
        if !cut && inst.cut_until.is_some() {
            inst.cut_until = None;
            self.expires.remove(&i);
        }
        self.progress_calls(i, cut);
        if self.instances[i].running.is_none() || cut {
            return;
        }
        if let Err(why) = self.follow_group(i) {
            return self.zombie(i, &why);
        }
        let r = self.instances[i].running.as_ref().expect("running");
        let result = if r.batch.is_some() {
            self.flush_step(i)
        } else if let Some(p) = r.opening.keys().next().copied() {
            self.open_step(i, p);
            Ok(())
        } else {
            self.work(i)
        };
        match result {
            Ok(()) => {}
            Err(task::TaskError::Zombie(_)) => self.zombie(i, "its task gave a partition up"),
            Err(e) => {
                let message = format!("instance {i}: {e}");
                self.out.breaches.push(Breach::Failed(message));
                self.crash(i);
            }
        }
    }

    /// The instance learns what the group decided: a member that was dropped (its session
    /// expired) finds its assignment lost, and gives up partitions a newer owner fenced
    /// (`Err`: a zombie); a current member takes its assignment.
    fn follow_group(&mut self, i: usize) -> Result<(), String> {
        let generation = self.generation;
        let member = self.members.contains(&i);
        if !member && !self.lost(i) {
            // A zombie that has not noticed yet.
            return Ok(());
        }
        let owned: BTreeSet<PartitionId> = match member {
            true => (self.owners.iter())
                .filter(|(_, o)| **o == i)
                .map(|(p, _)| *p)
                .collect(),
            false => BTreeSet::new(),
        };
        let r = self.instances[i].running.as_ref().expect("running");
        if r.generation == generation && r.assigned == owned {
            return Ok(());
        }
        if r.batch.is_some() {
            // A batch under way finishes first (a revocation waits for it), or, the
            // assignment lost, stops at its next step.
            return Ok(());
        }
        // Eager rebalancing: every partition is revoked, then the new assignment opened.
        let lost = !member;
        let revoked: Vec<PartitionId> = r.assigned.iter().copied().collect();
        self.instances[i].notices_at = None;
        for p in &revoked {
            let open = self.instances[i].running.as_ref().expect("running").task.is_open(*p);
            let fenced = (lost && open).then(|| self.fenced_since_last_write(i, *p)).flatten();
            if open && ownership::on_revoked(lost, fenced) == OnRevoked::Zombie {
                return Err(format!("partition {p} fenced while it was lost"));
            }
        }
        for p in revoked {
            self.let_calls_go(i, p);
            let r = self.instances[i].running.as_mut().expect("running");
            r.task.revoked(p);
            r.opening.remove(&p);
            r.positions.retain(|(_, q), _| *q != p);
        }
        let r = self.instances[i].running.as_mut().expect("running");
        r.assigned.clear();
        if lost {
            // Rejoins the group.
            r.generation = 0;
            self.members.insert(i);
            self.rebalance();
            return Ok(());
        }
        for p in &owned {
            r.task.assigned(*p).map_err(|e| e.to_string())?;
            r.opening.insert(*p, None);
        }
        r.assigned = owned;
        r.generation = generation;
        Ok(())
    }

    /// A revoked partition's calls in flight: one that reached its target reports (the
    /// revocation waits for it), the others are released, each with a `released` report
    /// naming its deadline and release key.
    fn let_calls_go(&mut self, i: usize, p: PartitionId) {
        let r = self.instances[i].running.as_mut().expect("running");
        let (going, kept): (Vec<Call>, Vec<Call>) = r.calls.drain(..).partition(|c| c.partition == p);
        r.calls = kept;
        for call in going {
            let request = &call.request;
            let outcome = match call.phase {
                CallPhase::Landed => Outcome::running(json!({"runId": request.run_id})),
                _ => Outcome::released(request.deadline, request.release_key.as_deref()),
            };
            let id = request.pipeline_id.clone();
            let record = job_record(&id, &request.run_id, outcome.status, outcome.metadata, self.now);
            let output = input(
                &self.topics.jobs,
                &id,
                &serde_json::to_value(&record).expect("a record"),
            );
            self.log.append(&output);
        }
    }

    /// Whether instance `i` would find its assignment lost now (the batch stops).
    fn lost(&self, i: usize) -> bool {
        !self.members.contains(&i) && self.instances[i].notices_at.is_none_or(|at| self.step >= at)
    }

    fn fenced_since_last_write(&self, i: usize, p: PartitionId) -> Option<bool> {
        if self.historic.unfenced {
            return Some(false);
        }
        let task = &self.instances[i].running.as_ref()?.task;
        let from = task.changelog_next(p)?;
        let entries = self
            .log
            .entries(&self.topics.changelog, p, from..self.log.end(&self.topics.changelog, p));
        Some(task.fenced_by(p, &entries))
    }

    // ---- opening ----

    /// One step of opening partition `p`: the fence and the restore, then the acceptance
    /// and the install (as `runtime::opening` and the task manager do).
    fn open_step(&mut self, i: usize, p: PartitionId) {
        let topic = self.topics.changelog.clone();
        let restored = self.instances[i]
            .running
            .as_mut()
            .expect("running")
            .opening
            .get_mut(&p)
            .and_then(Option::take);
        let Some(restored) = restored else {
            let fence = self.log.append(&Output {
                topic: topic.clone(),
                partition: Some(p),
                key: Some(format!("n/{i}/{}", self.step).into_bytes()),
                value: Some(b"fence".to_vec()),
                headers: Vec::new(),
            });
            let disk = self.instances[i].disks[&p].borrow().clone();
            let reused = disk.checkpoint.and_then(|(at, lineage)| {
                let mut restore = Restore::reusing(lineage);
                let mut kv = disk.clone();
                for entry in self.log.entries(&topic, p, at + 1..fence.1) {
                    for (k, v) in restore.push(entry).ok()? {
                        kv.apply(k, v);
                    }
                }
                let mut stale = restore.stale_keys();
                if !self.historic.repairs_forgotten_on_reopening {
                    stale.extend(disk.repairs.iter().cloned());
                }
                Some((kv, restore.lineage(), stale))
            });
            let (mut disk, lineage, stale) = reused.unwrap_or_else(|| {
                let mut restore = Restore::full();
                let mut kv = Disk::default();
                for entry in self.log.entries(&topic, p, 0..fence.1) {
                    for (k, v) in restore.push(entry).expect("a full restore never diverges") {
                        kv.apply(k, v);
                    }
                }
                (kv, restore.lineage(), restore.stale_keys())
            });
            disk.checkpoint = None;
            let restored = Restored {
                fence: fence.1,
                disk,
                lineage,
                stale,
            };
            let r = self.instances[i].running.as_mut().expect("running");
            r.opening.insert(p, Some(restored));
            self.trace(|| format!("{i} fenced partition {p} at {}", fence.1));
            return;
        };
        let (key, value) = changelog::acceptance(restored.lineage);
        let accepted = self.log.append(&Output {
            topic: topic.clone(),
            partition: Some(p),
            key: Some(key),
            value: Some(value),
            headers: Vec::new(),
        });
        let mut writer = Writer::fenced_at(restored.fence);
        let between = writer.landed(&[accepted.1]);
        let entries: Vec<_> = between
            .into_iter()
            .flat_map(|r| self.log.entries(&topic, p, r))
            .collect();
        let fenced = writer.check(&entries) == Checked::Fenced;
        let assigned = !self.lost(i);
        let r = self.instances[i].running.as_mut().expect("running");
        r.opening.remove(&p);
        let store = MemoryStore::new(self.instances[i].disks[&p].clone());
        let store = match self.historic.stale_watermark {
            true => store.forgetting_applied_offsets(),
            false => store,
        };
        match ownership::on_opened(assigned, fenced) {
            OnOpened::Install => {}
            OnOpened::Zombie => {
                let r = self.instances[i].running.as_mut().expect("running");
                let _ = r.task.not_installed(p, store, true);
                return self.zombie(i, "fenced while opening");
            }
            OnOpened::LeaveToNewOwner => {
                let r = self.instances[i].running.as_mut().expect("running");
                let _ = r.task.not_installed(p, store, false);
                return;
            }
        }
        writer.repair(restored.stale);
        let mut disk = restored.disk;
        disk.checkpoint = Some((accepted.1, writer.lineage()));
        disk.repairs = writer.repairs_to_keep().unwrap_or_default();
        let timers = disk.timers();
        let mut journaled = disk.effects();
        if self.historic.rerequest_at_once {
            for effect in &mut journaled {
                if let Effect::TriggerJob(request) = effect {
                    (request.deadline, request.start_by) = (None, None);
                }
            }
        }
        *self.instances[i].disks[&p].borrow_mut() = disk;
        let jobs_end = self.log.end(&self.topics.jobs, p);
        let now = self.clock(i);
        let r = self.instances[i].running.as_mut().expect("running");
        let opening = Opening {
            store,
            writer,
            journaled,
            jobs_end,
            timers,
        };
        r.task.install(p, opening, now);
        for topic in self.topics.inputs() {
            let at = self.committed.get(&(topic.to_string(), p)).copied().unwrap_or(0);
            r.positions.insert((topic.to_string(), p), at);
        }
        self.trace(|| format!("{i} opened partition {p}"));
    }

    // ---- work ----

    /// What an idle instance does in a step: watch its changelog now and then, settle
    /// journaled triggers, then a batch of input and due timers.
    fn work(&mut self, i: usize) -> Result<(), task::TaskError> {
        let now = self.clock(i);
        let topic = self.topics.changelog.clone();
        if self.step.is_multiple_of(WATCH_STEPS) && !self.historic.unwatched_idle_owner {
            for p in self.instances[i].running.as_ref().expect("running").task.owned() {
                let task = &self.instances[i].running.as_ref().expect("running").task;
                let Some(from) = task.changelog_next(p) else { continue };
                let end = self.log.end(&topic, p);
                let others = self.log.entries(&topic, p, from..end);
                self.instances[i]
                    .running
                    .as_mut()
                    .expect("running")
                    .task
                    .watched(p, &others, end)?;
            }
        }
        let again = self.triggers_due(i, now)?;
        if !again.is_empty() {
            return self.seal(i, again);
        }
        let mut staged = Staged::default();
        let r = self.instances[i].running.as_mut().expect("running");
        r.task.stage_due_timers(&mut staged, now)?;
        let fetched = self.fetch(i);
        let r = self.instances[i].running.as_mut().expect("running");
        for record in &fetched {
            let (topic, p, offset) = (record.topic.clone(), record.partition, record.offset);
            r.positions.insert((topic.clone(), p), offset + 1);
            let Some(kind) = self.topics.input_kind(&topic) else {
                continue;
            };
            let role = kind.role();
            // A partition still opening is read again from its committed offset once open.
            let take = match r.task.take(&mut staged, record, role, r.assigned.contains(&p), now)? {
                Take::CheckMark(mark) => {
                    let end = self.log.end(&topic, mark.partition);
                    let checked = mark
                        .check(p, PARTITIONS)
                        .and_then(|()| mark.check_end(end))
                        .map(|()| mark);
                    r.task.take_marked(&mut staged, record, role, checked, now)?
                }
                take => take,
            };
            if !matches!(take, Take::Decode) {
                continue;
            }
            let limits = DeciderSettings::default().limits;
            let read = futures::executor::block_on(read_input(&Codec::json(), kind, record, PARTITIONS, &limits));
            let (pipeline, input) = read.expect("the JSON codec reads without a registry");
            let origin = origin_of(role, p, offset, &input);
            r.task
                .decide(&mut staged, p, &pipeline, &input, &origin, now, Some(record))?;
        }
        if staged.is_empty() && !r.task.has_repairs() {
            return Ok(());
        }
        self.seal(i, staged)
    }

    /// Up to a few records of each owned input partition, from the positions.
    fn fetch(&self, i: usize) -> Vec<Fetched> {
        let r = self.instances[i].running.as_ref().expect("running");
        let mut fetched = Vec::new();
        for ((topic, p), at) in &r.positions {
            let end = self.log.end(topic, *p);
            for logged in self.log.read(topic, *p, *at..(*at + 3).min(end)) {
                fetched.push(Fetched {
                    topic: topic.clone(),
                    partition: *p,
                    offset: logged.offset,
                    key: logged.key.clone(),
                    value: logged.value.clone(),
                    headers: logged.headers.clone(),
                });
            }
        }
        fetched
    }

    /// The journaled triggers due, their questions answered from the log (as the task
    /// manager answers them from the broker).
    fn triggers_due(&mut self, i: usize, now: DateTime<Utc>) -> Result<Staged, task::TaskError> {
        let jobs = self.topics.jobs.clone();
        let r = self.instances[i].running.as_mut().expect("running");
        if !r.task.triggers_waiting() {
            return Ok(Staged::default());
        }
        let positions: BTreeMap<PartitionId, i64> = (r.positions.iter())
            .filter(|((t, _), _)| *t == jobs)
            .map(|((_, p), at)| (*p, *at))
            .collect();
        let poll = r.task.poll_triggers(now, &jobs, &positions);
        for (p, run_id) in &poll.measure {
            let end = self.log.end(&jobs, *p);
            let r = self.instances[i].running.as_mut().expect("running");
            r.task.jobs_end_measured(*p, run_id, end, now);
        }
        let assigned = match self.lost(i) {
            true => BTreeSet::new(),
            false => self.instances[i].running.as_ref().expect("running").assigned.clone(),
        };
        let fences: BTreeMap<PartitionId, Option<bool>> = (poll.fence_reads(&assigned).into_iter())
            .map(|p| (p, self.fenced_since_last_write(i, p)))
            .collect();
        if self.traced && !poll.due.is_empty() {
            let due: Vec<_> = poll.due.iter().map(|d| d.request().run_id.clone()).collect();
            let line = format!(
                "{:>5} {i} triggers due {due:?} (assigned {assigned:?}, fences {fences:?})",
                self.step
            );
            self.out.trace.push(line);
        }
        let r = self.instances[i].running.as_mut().expect("running");
        r.task.settle_triggers(poll.due, now, &assigned, &fences)
    }

    fn seal(&mut self, i: usize, staged: Staged) -> Result<(), task::TaskError> {
        let r = self.instances[i].running.as_mut().expect("running");
        r.batch = Some(r.task.seal(staged)?);
        Ok(())
    }

    /// One step of the batch in flight (see `runtime::processor`'s flush).
    fn flush_step(&mut self, i: usize) -> Result<(), task::TaskError> {
        let lost = self.lost(i);
        let lost_after = lost;
        let now = self.clock(i);
        let topic = self.topics.changelog.clone();
        let r = self.instances[i].running.as_mut().expect("running");
        let mut sealed = r.batch.take().expect("a batch");
        let action = sealed.flush.poll();
        if self.traced {
            let line = format!(
                "{:>5} {i} batch step {action:?} (lost {lost}, commits {:?})",
                self.step, sealed.commits
            );
            self.out.trace.push(line);
        }
        match action {
            Action::Produce if lost => sealed.flush.on_lost(),
            Action::Produce => {
                let resend = r.lose_ack.take();
                if let Some(Resend::Again) = resend {
                    // Landed, unacknowledged: sent again, it lands again after.
                    for output in &sealed.outputs {
                        self.log.append(output);
                    }
                }
                let mut landed: Vec<_> = sealed.outputs.iter().map(|o| self.log.append(o)).collect();
                if let Some(Resend::Duplicate) = resend {
                    let mut counted: BTreeMap<PartitionId, i64> = BTreeMap::new();
                    for (p, offset) in &mut landed {
                        let next = counted.entry(*p).or_insert(-1);
                        (*offset, *next) = (*next, *next + 1);
                    }
                }
                let first = sealed.first_changelog;
                sealed
                    .flush
                    .on_produced(&landed[first..], lost_after, &mut r.task.writers());
            }
            Action::ReadChangelog { partition, ranges } => {
                let entries: Vec<_> = (ranges.into_iter())
                    .filter(|_| !self.historic.unfenced)
                    .flat_map(|range| self.log.entries(&topic, partition, range))
                    .collect();
                sealed.flush.on_read(Some(&entries), &mut r.task.writers());
            }
            Action::ReadEnd { partition } => {
                let end = self.log.end(&topic, partition);
                sealed.flush.on_end(Some(end), &mut r.task.writers());
            }
            Action::ProduceMarkers(markers) => {
                let landed: Vec<_> = (r.task.marker_outputs(&markers).iter())
                    .map(|o| self.log.append(o))
                    .collect();
                sealed.flush.on_markers(&landed, lost, &mut r.task.writers());
            }
            Action::ReadFenceOffsets => sealed.flush.on_fence_offsets(),
            Action::Transact => {
                if !self.members.contains(&i) || r.generation != self.generation {
                    // The group refuses the transaction's offsets under an old generation
                    // (or from a member it dropped). Once the member knows it was dropped,
                    // the batch stops (its new owners redo it); until then it retries, and a
                    // member that does not rejoin in time is dropped (`max.poll.interval.ms`).
                    if lost {
                        sealed.flush.on_transacted(&[], true);
                    }
                } else {
                    // One transaction: the outputs, their end markers and the input offsets.
                    let landed: Vec<_> = sealed.outputs.iter().map(|o| self.log.append(o)).collect();
                    let markers = r
                        .task
                        .marker_outputs(&sealed.flush.markers(&landed[sealed.first_changelog..]));
                    let landed: Vec<_> = markers.iter().map(|o| self.log.append(o)).collect();
                    if r.generation == self.generation {
                        for ((topic, p), offset) in &sealed.commits {
                            let at = self.committed.entry((topic.clone(), *p)).or_default();
                            *at = (*at).max(offset + 1);
                        }
                    }
                    sealed.flush.on_transacted(&landed, false);
                }
            }
            Action::WriteStores(counted) => {
                let learned = r.task.write_stores(&mut sealed, &counted, now)?;
                drop(learned);
                sealed.flush.on_stored(lost, &mut r.task.writers());
            }
            Action::CommitOffsets => {
                // The group refuses a commit of an old generation.
                if !lost && r.generation == self.generation {
                    for ((topic, p), offset) in &sealed.commits {
                        let at = self.committed.entry((topic.clone(), *p)).or_default();
                        *at = (*at).max(offset + 1);
                    }
                }
                sealed.flush.on_committed();
            }
            Action::StartEffects => {
                let ended: BTreeSet<RunId> = sealed.ended_runs.drain(..).collect();
                r.calls.retain(|c| !ended.contains(&c.request.run_id));
                for (p, effect) in sealed.effects.drain(..) {
                    if let Effect::TriggerJob(request) = effect {
                        if self.traced {
                            let line = format!(
                                "{:>5} {i} calls {} (deadline {:?}, start by {:?})",
                                self.step, request.run_id, request.deadline, request.start_by
                            );
                            self.out.trace.push(line);
                        }
                        r.calls.push(Call {
                            partition: p,
                            request,
                            phase: CallPhase::Marking,
                        });
                    }
                }
                sealed.flush.on_started();
            }
            Action::GiveUp(fenced) => return Err(r.task.give_up(fenced.into_iter().collect())),
            Action::ChangelogWentBack { partition } => return Err(r.task.changelog_went_back(partition)),
            Action::Abandon | Action::Done => return Ok(()),
        }
        r.batch = Some(sealed);
        Ok(())
    }

    // ---- the executor and the job system ----

    /// The executor's calls: a start mark first (acknowledged by the time to begin, or the
    /// call is let go), then the call reaches the target, then its `running` report. A cut
    /// off instance writes nothing; its calls already begun still reach the target until
    /// their deadline.
    fn progress_calls(&mut self, i: usize, cut: bool) {
        let now = self.clock(i);
        let step = self.step;
        let Some(r) = self.instances[i].running.as_mut() else {
            return;
        };
        let mut calls = std::mem::take(&mut r.calls);
        let mut writes = Vec::new();
        let mut landed = Vec::new();
        let mut dropped = Vec::new();
        calls.retain_mut(|call| {
            let deadline = call.request.deadline.unwrap_or(DateTime::<Utc>::MAX_UTC);
            if now > deadline {
                // Given up at its deadline.
                dropped.push((call.request.run_id.clone(), "its deadline passed"));
                return false;
            }
            match call.phase {
                CallPhase::Marking if cut => {
                    if call.request.start_by.is_some_and(|by| now > by) {
                        // Not begun by its time to begin, and nothing can be said: dropped.
                        dropped.push((call.request.run_id.clone(), "cut off before it began"));
                        return false;
                    }
                    true
                }
                CallPhase::Marking => {
                    if call.request.start_by.is_some_and(|by| now > by) {
                        let outcome = Outcome::not_begun(call.request.deadline, call.request.release_key.as_deref());
                        writes.push((call.request.clone(), outcome));
                        dropped.push((call.request.run_id.clone(), "let go: not begun in time"));
                        return false;
                    }
                    if let Some(deadline) = call.request.deadline {
                        writes.push((call.request.clone(), Outcome::calling(deadline)));
                    }
                    call.phase = CallPhase::Calling(step + CALL_TAKES as u64);
                    true
                }
                CallPhase::Calling(at) if step >= at => {
                    landed.push(call.request.clone());
                    call.phase = CallPhase::Landed;
                    true
                }
                CallPhase::Calling(_) => true,
                CallPhase::Landed if cut => true,
                CallPhase::Landed => {
                    let outcome = Outcome::running(json!({"runId": call.request.run_id}));
                    writes.push((call.request.clone(), outcome));
                    false
                }
            }
        });
        r.calls = calls;
        for (run, why) in dropped {
            self.trace(|| format!("{i} stops calling {run}: {why}"));
        }
        for request in landed {
            self.land(i, &request);
        }
        for (request, outcome) in writes {
            let id = request.pipeline_id.clone();
            let record = job_record(&id, &request.run_id, outcome.status, outcome.metadata, self.now);
            let output = input(
                &self.topics.jobs,
                &id,
                &serde_json::to_value(&record).expect("a record"),
            );
            self.log.append(&output);
        }
    }

    /// A call reaches the target, which honours its idempotency key (the run id): a run
    /// started before is answered with its job. A new run of an execution starts a job,
    /// and is checked against the execution's others.
    fn land(&mut self, by: usize, request: &TriggerRequest) {
        self.out.calls += 1;
        for (k, inst) in self.instances.iter().enumerate().filter(|(k, _)| *k != by) {
            let Some(r) = inst.running.as_ref() else { continue };
            let clock = self.now + inst.skew;
            let under_way = (r.calls.iter()).any(|c| {
                c.request.run_id == request.run_id
                    && c.phase != CallPhase::Marking
                    && c.request.deadline.is_none_or(|d| clock <= d)
            });
            if under_way {
                self.out.breaches.push(Breach::CalledTwice {
                    run: request.run_id.to_string(),
                    why: format!("instance {by} called it while instance {k}'s call was under way"),
                });
            }
        }
        let execution = request.execution.to_string();
        let key = (request.pipeline_id.clone(), request.execution.date_text().to_string());
        let jobs = self.jobs.entry(key).or_default();
        if jobs.iter().any(|j| j.run_id == request.run_id) {
            return;
        }
        let now = self.now;
        let attempt = request.attempt;
        if jobs.iter().any(|j| !j.reported) {
            self.out.breaches.push(Breach::Overlapped {
                execution: execution.clone(),
            });
        }
        if let Some(earlier) = jobs.iter().find(|j| j.succeeds || j.attempt >= attempt) {
            let why = format!(
                "{} after {} (attempt {})",
                request.run_id, earlier.run_id, earlier.attempt
            );
            self.out.breaches.push(Breach::StartedTwice { execution, why });
        }
        // The first attempt fails now and then: its retry is the second attempt.
        let succeeds = attempt > 1 || self.rng.u8(0..4) != 0;
        jobs.push(Job {
            run_id: request.run_id.clone(),
            attempt,
            ends: now + JOB_TAKES,
            succeeds,
            reported: false,
        });
        self.out.starts += 1;
        let run = request.run_id.clone();
        self.trace(|| format!("job {run} started"));
    }

    // ---- the end ----

    /// No more faults: every instance runs, and the world goes on until every execution
    /// triggered has a job that ended and no call is in flight. An instance paused now wakes
    /// last, its session expired, once the others are idle: a zombie writing while its
    /// partitions' owner has nothing to do (a pause that outlasts the night's input), which
    /// only the owner's watch of its changelog answers.
    fn settle(&mut self) {
        let awake: Vec<usize> = (0..INSTANCES)
            .filter(|i| self.instances[*i].running.is_some() && self.instances[*i].paused_until.is_none())
            .collect();
        if !awake.is_empty() && self.rng.u32(0..3) == 0 {
            let i = awake[self.rng.usize(0..awake.len())];
            self.fault("late wake", i);
            self.instances[i].paused_until = Some(u64::MAX);
            self.instances[i].notice_delay = self.rng.u64(0..4);
        }
        let sleepers: Vec<usize> = (0..INSTANCES)
            .filter(|i| self.instances[*i].running.is_some() && self.instances[*i].paused_until.is_some())
            .collect();
        for i in 0..INSTANCES {
            self.instances[i].cut_until = None;
            if sleepers.contains(&i) {
                self.instances[i].paused_until = Some(u64::MAX);
                if self.members.remove(&i) {
                    self.trace(|| format!("{i}'s session expired"));
                    self.rebalance();
                }
                continue;
            }
            self.instances[i].paused_until = None;
            if self.instances[i].running.is_none() {
                self.start(i);
            }
        }
        self.expires.clear();
        if !self.run_until_settled() {
            return;
        }
        if !sleepers.is_empty() {
            for i in &sleepers {
                self.instances[*i].paused_until = Some(self.step);
            }
            self.trace(|| format!("{sleepers:?} wake up, the others idle"));
            if !self.run_until_settled() {
                return;
            }
        }
        self.quiet();
    }

    /// Steps until [`World::settled`]; a breach (stuck) if that takes too long.
    fn run_until_settled(&mut self) -> bool {
        let start = self.step;
        while self.step - start < SETTLE_STEPS {
            self.tick();
            if self.step - start > 600 && self.settled() {
                return true;
            }
        }
        let open: Vec<_> = (self.triggered.iter())
            .filter(|e| {
                !self
                    .jobs
                    .get(e)
                    .is_some_and(|j| j.iter().any(|j| j.succeeds && j.reported))
            })
            .cloned()
            .collect();
        self.out.breaches.push(Breach::Stuck(format!(
            "not settled in {SETTLE_STEPS} steps: executions without a successful job {open:?}"
        )));
        false
    }

    /// No input and no fault for a while: owners, idle, watch their changelogs; then the
    /// compaction lag passes and compaction runs, so that it may remove any record a later
    /// one of its key shadows.
    fn quiet(&mut self) {
        for _ in 0..3 * WATCH_STEPS {
            self.tick();
        }
        self.now += COMPACTION_LAG + STEP;
        self.log.now = self.now;
        self.compact();
        self.trace(|| "quiet: the compaction lag passed, the changelog compacted".to_string());
    }

    fn settled(&self) -> bool {
        let done = (self.triggered.iter()).all(|e| {
            self.jobs
                .get(e)
                .is_some_and(|j| j.iter().any(|j| j.succeeds && j.reported))
        });
        // A sleeper is not waited for (see [`World::settle`]).
        let quiet = (self.instances.iter())
            .filter(|inst| inst.paused_until.is_none())
            .filter_map(|inst| inst.running.as_ref())
            .all(|r| r.calls.is_empty() && r.batch.is_none() && r.opening.is_empty());
        done && quiet
    }

    fn check(&mut self) {
        // Every execution triggered started a job.
        for (pipeline, date) in &self.triggered {
            if !self.jobs.contains_key(&(pipeline.clone(), date.clone())) {
                self.out.breaches.push(Breach::NeverStarted {
                    execution: format!("{pipeline} {date}"),
                });
            }
        }
        // One event id, one event.
        let mut seen: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for p in (0..PARTITIONS).map(PartitionId::new) {
            let end = self.log.end(&self.topics.events, p);
            for logged in self.log.read(&self.topics.events, p, 0..end) {
                let Some(value) = &logged.value else { continue };
                let Ok(event) = serde_json::from_slice::<serde_json::Value>(value) else {
                    continue;
                };
                if self.traced {
                    let line = format!(
                        "event {} {} {} {}",
                        event["pipelineId"], event["type"], event["date"], event["message"]
                    );
                    self.out.trace.push(line);
                }
                let id = event["eventId"].to_string().into_bytes();
                let mut body = event.clone();
                body.as_object_mut().map(|o| o.remove("timestamp"));
                let body = body.to_string().into_bytes();
                if let Some(other) = seen.insert(id.clone(), body.clone()).filter(|b| *b != body) {
                    self.out.breaches.push(Breach::Events(format!(
                        "{}: {} and {}",
                        String::from_utf8_lossy(&id),
                        String::from_utf8_lossy(&other),
                        String::from_utf8_lossy(&body)
                    )));
                }
            }
        }
        // Bad input never disappears: each record that does not decode is dead-lettered.
        let mut lettered = BTreeSet::new();
        for p in (0..PARTITIONS).map(PartitionId::new) {
            for logged in self.log.read(&self.topics.dlq, p, 0..self.log.end(&self.topics.dlq, p)) {
                let header = |name: &str| {
                    let (_, v) = logged.headers.iter().find(|(k, _)| k == name)?;
                    Some(String::from_utf8_lossy(v).into_owned())
                };
                if let (Some(t), Some(q), Some(o)) = (
                    header("source.topic"),
                    header("source.partition"),
                    header("source.offset"),
                ) {
                    lettered.insert((t, PartitionId::new(q.parse().unwrap_or(-1)), o.parse().unwrap_or(-1)));
                }
            }
        }
        for (topic, partition, offset) in self.forged.clone() {
            if !lettered.contains(&(topic.clone(), partition, offset)) {
                self.out.breaches.push(Breach::Vanished {
                    topic,
                    partition,
                    offset,
                });
            }
        }
        // Each owner's store is what a restore from scratch of the compacted changelog gives.
        let topic = self.topics.changelog.clone();
        for (p, owner) in self.owners.clone() {
            let Some(r) = self.instances[owner].running.as_ref() else {
                continue;
            };
            if !r.task.is_open(p) {
                continue;
            }
            let mut restore = Restore::full();
            let mut restored = Disk::default();
            for entry in self.log.entries(&topic, p, 0..self.log.end(&topic, p)) {
                for (k, v) in restore.push(entry).expect("a full restore never diverges") {
                    restored.apply(k, v);
                }
            }
            let store = self.instances[owner].disks[&p].borrow().kv.clone();
            let keys: BTreeSet<&Vec<u8>> = store.keys().chain(restored.kv.keys()).collect();
            for key in keys {
                if store.get(key) != restored.kv.get(key) {
                    self.out.breaches.push(Breach::Restore {
                        partition: p,
                        key: String::from_utf8_lossy(key).into_owned(),
                    });
                }
            }
        }
    }
}

/// A record for one of Sluice's input topics, keyed by pipeline.
fn input(topic: &str, pipeline: &str, value: &serde_json::Value) -> Output {
    Output {
        topic: topic.to_string(),
        partition: Some(partition_for(pipeline.as_bytes(), PARTITIONS)),
        key: Some(pipeline.as_bytes().to_vec()),
        value: Some(serde_json::to_vec(value).expect("JSON")),
        headers: Vec::new(),
    }
}

fn job_record(
    pipeline: &str,
    run_id: &str,
    status: JobStatus,
    metadata: Option<serde_json::Value>,
    at: DateTime<Utc>,
) -> JobRecord {
    let execution: Option<ExecutionId> = run_id
        .strip_prefix(&format!("{pipeline}."))
        .and_then(|rest| rest.rsplit_once('.'))
        .and_then(|(execution, _)| execution.replacen('.', "/", 1).parse().ok());
    JobRecord {
        pipeline_id: pipeline.into(),
        schedule_id: execution.as_ref().map_or("daily".into(), |e| e.schedule().to_string()),
        date: execution
            .as_ref()
            .map_or("2026-11-20".into(), |e| e.date_text().to_string()),
        run_id: run_id.into(),
        status,
        failure_category: None,
        message: None,
        metadata,
        timestamp: at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Vec<u64> {
        if let Some(seed) = std::env::var("SLUICE_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
            return vec![seed];
        }
        let n = (std::env::var("SLUICE_SIM_SEEDS").ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(40);
        (0..n).collect()
    }

    /// `SLUICE_SIM_SEED=<seed> cargo test -p sluice --lib sim::world::tests::trace -- --nocapture`
    /// prints what the seed did, step by step.
    #[test]
    fn trace() {
        if let Some(seed) = std::env::var("SLUICE_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
            let out = run_traced(seed, Historic::default());
            for line in &out.trace {
                eprintln!("{line}");
            }
            eprintln!("{:?}", out.breaches);
        }
    }

    /// The first seed (of 2,000) on which `historic` breaks an invariant; fails when none
    /// does, or when that seed breaks one without the fault too.
    fn assert_caught(name: &str, put_back: impl FnOnce(&mut Historic)) -> Vec<Breach> {
        let mut historic = Historic::default();
        put_back(&mut historic);
        let caught = (0..2_000).find_map(|seed| {
            let out = run(seed, historic);
            (!out.breaches.is_empty()).then_some((seed, out.breaches))
        });
        let (seed, breaches) = caught.unwrap_or_else(|| panic!("{name} went unnoticed"));
        eprintln!("[sim world] {name}: caught on seed {seed}: {breaches:?}");
        assert_eq!(
            run(seed, Historic::default()).breaches,
            vec![],
            "seed {seed} without {name}"
        );
        breaches
    }

    #[test]
    fn the_rebalance_re_request_is_caught() {
        let breaches = assert_caught("the rebalance re-request", |h| h.rerequest_at_once = true);
        assert!(
            breaches.iter().any(|b| matches!(b, Breach::CalledTwice { .. })),
            "{breaches:?}"
        );
    }

    #[test]
    fn the_unfenced_changelog_writer_is_caught() {
        assert_caught("the unfenced changelog writer", |h| h.unfenced = true);
    }

    #[test]
    fn the_stale_watermark_is_caught() {
        assert_caught("the stale watermark", |h| h.stale_watermark = true);
    }

    #[test]
    fn the_compaction_of_a_shadowed_value_is_caught() {
        assert_caught("compaction without a lag", |h| h.compaction_without_lag = true);
    }

    #[test]
    fn repairs_found_before_a_reopening_are_not_forgotten() {
        assert_caught("forgotten repairs", |h| h.repairs_forgotten_on_reopening = true);
    }

    #[test]
    fn the_unwatched_idle_owner_is_caught() {
        assert_caught("the unwatched idle owner", |h| h.unwatched_idle_owner = true);
    }

    #[test]
    fn a_seed_replays_exactly() {
        assert_eq!(run(7, Historic::default()), run(7, Historic::default()));
        assert_ne!(run(7, Historic::default()).faults, run(8, Historic::default()).faults);
    }

    #[test]
    fn every_seed_keeps_the_invariants() {
        let mut totals = Outcomes::default();
        let mut failed = Vec::new();
        let seeds = seeds();
        for seed in &seeds {
            let out = run(*seed, Historic::default());
            totals.add(&out);
            if !out.breaches.is_empty() {
                failed.push((*seed, out.breaches));
            }
        }
        eprintln!("[sim world] {} seeds: {}", seeds.len(), totals.summary());
        // The faults that matter happened, often enough to mean something.
        for fault in [
            "crash",
            "restart",
            "pause",
            "network cut",
            "rebalance",
            "compaction",
            "clock skew",
            "lost acknowledgement",
            "state directory lost",
            "forged release",
            "forged start mark",
            "undecodable record",
            "invalid config",
            "misrouted reading",
            "late wake",
        ] {
            assert!(
                totals.faults.get(fault).copied().unwrap_or(0) >= seeds.len() as u64 / 10,
                "{fault}: {:?}",
                totals.faults
            );
        }
        assert!(totals.zombies > 0 && totals.starts > 0, "{}", totals.summary());
        assert!(
            totals.exactly_once_steps > 0 && totals.exactly_once_steps < totals.steps,
            "{}",
            totals.summary()
        );
        assert!(
            failed.is_empty(),
            "{} seeds broke an invariant (replay one with SLUICE_SIM_SEED=<seed>): {:#?}",
            failed.len(),
            failed.iter().take(3).collect::<Vec<_>>()
        );
    }
}
