//! The decider: `decide(state, input, now) -> Decision`, one pipeline at a time.
//!
//! Contract: the caller hands in the pipeline's current state, one input and the current
//! time, which never goes backwards; it then persists [`Decision::state`], publishes the
//! events, schedules the timers and carries out the effects. A timer that fires late or
//! twice is harmless. The same state, input, time and origin always give the same decision,
//! event ids included.
//!
//! The decider is split by concept, and each file starts with the events it produces:
//! [`config`](self::config), [`sensor`], [`schedule`] (cron, expected starts, exclusions),
//! [`evaluation`] (rules and the trigger), [`evaluators`] (sensors Sluice asks for itself),
//! [`job`] (outcomes, retries, poll window, stale runs), [`sla`], [`forecast`] (the SLA
//! forecast from past runs), [`deadlines`] (the earlier AWS variant's), [`anomalies`],
//! [`post_run`], [`command`] (rerun, cancel) and [`dependencies`].

mod anomalies;
mod command;
mod config;
mod deadlines;
mod dependencies;
mod evaluation;
mod evaluators;
mod executions;
mod forecast;
mod held;
mod job;
mod needs;
mod post_run;
mod readings;
mod retention;
mod schedule;
mod sensor;
mod sla;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::config::{JobConfig, JobKind, PipelineConfig, RetryPolicy, Unusable, SCHEDULE_IDS};
use super::events::detail::{Rejected, WouldReport};
use super::events::{clip, event_id, Category, Detail, Event, EventType, REASON_LIMIT};
use super::execution::{fields, ExecutionDate, ExecutionId, RunId};
use super::hints;
use super::history::RunHistory;
use super::limits::Limits;
use super::records::{Command, ConfigRecord, FailureCategory, JobReport, Rejection, SensorReading};
use super::rules::{Moment, Verdict};
pub use super::shared::{Shared, SharedMap};
use super::timers::{TimerKind, TimerOp};
use crate::core::ids::PipelineId;
pub use anomalies::Flip;
pub use evaluators::evaluator_run_id;
pub use executions::{noting_unloaded, Executions};
pub use forecast::ForecastMarks;
pub use held::{HeldExecution, SensorData};
pub use needs::{Needs, Span, Spans};
pub use readings::{Readings, ReadingsSummary};

// For the read model (a pipeline's run history as the page charts it).
pub(crate) use forecast::date_start;
pub(crate) use sla::deadline_of;

/// Everything Sluice holds about one pipeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineState {
    /// The config in force: the last valid one received. Shared, so a decision that needs
    /// the config while it changes the state takes a reference count, not a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Arc<PipelineConfig>>,
    /// The latest reading of each sensor key, per date when scoped (kept even before a
    /// config arrives).
    #[serde(default)]
    pub sensors: Readings,
    /// Executions by [`ExecutionId`] (stored by its text form).
    #[serde(default)]
    pub executions: Executions,
    /// Every timer this pipeline has pending, by kind (one of each), so a config change or a
    /// delete can cancel exactly what was armed. Stored as a list of timers.
    #[serde(default, skip_serializing_if = "SharedMap::is_empty", with = "timer_list")]
    pub timers: SharedMap<TimerKind, Shared<PendingTimer>>,
    /// Pipelines that declared `dependsOn` this one, with the sensor key they expect.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dependents: BTreeMap<PipelineId, String>,
    /// The recent successful runs, which SLA forecasts are made from.
    #[serde(default, skip_serializing_if = "RunHistory::is_empty")]
    pub history: RunHistory,
    /// The forecast alerts of recent executions (which may not have started).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub forecasts: BTreeMap<ExecutionId, ForecastMarks>,
    /// Sensor keys nothing reads, with the day UNKNOWN_SENSOR last said so.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_sensors: BTreeMap<String, NaiveDate>,
    /// Only in a stored head: its live executions ([`PipelineState::live`]), which a read in
    /// part loads. `None` in memory, and in a head written before reads in part (such a
    /// state is read whole until its head is written again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Vec<ExecutionId>>,
    /// Only in a stored head: what it says of its readings ([`ReadingsSummary`]), which a
    /// read in part needs. `None` in memory, and in a head written before readings were read
    /// in part (its readings are read whole until its head is written again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readings: Option<ReadingsSummary>,
}

impl PipelineState {
    /// When timer `kind` is due, if it is pending.
    pub fn due(&self, kind: &TimerKind) -> Option<DateTime<Utc>> {
        self.timers.get(kind).map(|t| t.at)
    }

    /// The executions a read in part loads whatever the decision (see [`Executions`]): the
    /// open ones, and those holding a timer other than their expiry (an SLA still owed, a
    /// post-run check). The others are quiet: their part and their expiry wait for a
    /// decision about their day.
    pub fn live(&self) -> BTreeSet<&ExecutionId> {
        let mut live: BTreeSet<&ExecutionId> = self.executions.open().map(|(id, _)| id).collect();
        for timer in self.timers.keys() {
            let id = timer.execution().filter(|_| !matches!(timer, TimerKind::Expire { .. }));
            if let Some((id, _)) = id.and_then(|id| self.executions.loaded().get_key_value(id)) {
                live.insert(id);
            }
        }
        live
    }

    /// Leaves out the quiet executions but for those of `spans` and of the live executions'
    /// dates, with their timers, and the readings scoped to other dates but each key's
    /// latest, as a read in part of those spans has the state (see [`Executions`],
    /// [`Readings`], `state::parts::read`). Returns how many executions and readings were
    /// left out.
    pub fn read_in_part(&mut self, spans: &[Span]) -> usize {
        let live: BTreeSet<ExecutionId> = self.live().into_iter().cloned().collect();
        let spans = spans_kept(spans, live.iter());
        let out: BTreeSet<ExecutionId> = (self.executions.read_in_part(&spans, |id, _| live.contains(id)))
            .into_iter()
            .collect();
        if !out.is_empty() {
            self.timers
                .retain(|kind, _| kind.execution().is_none_or(|id| !out.contains(id)));
        }
        self.know_timers_alone();
        out.len() + self.sensors.read_in_part(&spans)
    }

    /// In a state read in part, notes that the executions of the timers it holds that are
    /// not loaded are not stored: a stored execution holds its timers in its part, and any
    /// but its expiry make it live (loaded).
    pub(crate) fn know_timers_alone(&mut self) {
        let PipelineState { executions, timers, .. } = self;
        executions.know_absent(timers.keys().filter_map(TimerKind::execution));
    }

    /// Adds what `whole` (the same state read whole) has that this state, read in part, left
    /// out: executions and their timers, and readings. Those removed since the read stay
    /// removed. Returns whether the head it was read with said otherwise of its readings
    /// than `whole` does (see [`Readings::fill`]).
    pub fn fill(&mut self, whole: &PipelineState) -> bool {
        let added: BTreeSet<ExecutionId> = self.executions.fill(&whole.executions).into_iter().collect();
        for (kind, timer) in whole.timers.iter() {
            if kind.execution().is_some_and(|id| added.contains(id)) {
                self.timers.insert(kind.clone(), timer.clone());
            }
        }
        self.sensors.fill(&whole.sensors)
    }

    /// Whether the state was read in part: its executions, or its readings too.
    pub fn is_partial(&self) -> bool {
        self.executions.is_partial() || self.sensors.is_partial()
    }

    /// Whether the state holds every execution and reading of `spans`.
    pub fn holds(&self, spans: &[Span]) -> bool {
        self.executions.holds(spans) && self.sensors.holds(spans)
    }

    /// Whether [`Self::leave_out_quiet`] would leave something out.
    pub fn has_quiet_to_leave_out(&self) -> bool {
        let live = self.live();
        let spans = spans_kept(&self.executions.spans_read().unwrap_or_default(), live.iter().copied());
        let held: Spans = spans.iter().copied().collect();
        (self.executions.loaded().keys()).any(|id| !held.covers(id.date()) && !live.contains(id))
            || self.sensors.has_quiet(&spans)
    }

    /// Leaves out the quiet executions but those of the spans this state read (a whole
    /// state: every quiet one), as a cache keeps a state: the size of what decisions read,
    /// not of the history. Returns how many were left out.
    pub fn leave_out_quiet(&mut self) -> usize {
        let spans = self.executions.spans_read().unwrap_or_default();
        self.read_in_part(&spans)
    }

    /// Whether `after`, a decision's state from this one (read in part), set, moved or
    /// cancelled a timer of an execution this state cannot say it has: that execution's part
    /// holds its timers, and is not written without it.
    pub fn moves_timers_not_read(&self, after: &PipelineState) -> bool {
        self.executions.is_partial()
            && (self.timers.changes(&after.timers).iter())
                .any(|(kind, _, _)| kind.execution().is_some_and(|id| !self.executions.is_known(id)))
    }

    /// Arms `timer`, replacing the one of its kind.
    pub fn arm(&mut self, timer: PendingTimer) {
        self.timers.insert(timer.timer.clone(), timer.into());
    }

    /// The readings of sensor `key`, by slot (see [`Readings::of_key`]).
    pub fn readings_of<'s>(&'s self, key: &'s str) -> impl Iterator<Item = (&'s str, &'s StoredSensor)> + 's {
        self.sensors.of_key(key)
    }

    /// Whether run `run_id` was requested and no report of its trigger has come back: after
    /// a crash, such a trigger is requested again (with the same idempotency key).
    pub fn awaits_trigger(&self, run_id: &str) -> bool {
        (self.executions.open()).any(|(_, e)| matches!(e.phase(), Phase::AwaitingTrigger { run_id: r } if r == run_id))
    }
}

/// How many dates of one day a read takes one by one: with more, it reads the whole day (a
/// range a schedule costs less than a point a date and schedule, and answers more). An
/// hourly pipeline whose completed hours wait for a daily SLA deadline keeps most of its
/// day live.
const DATES_BEFORE_DAY: usize = 4;

/// The spans a read in part for `spans` holds whole: those, and the dates of the live
/// executions (of the schedules a config can name, the ones a span reads); a day with more
/// than [`DATES_BEFORE_DAY`] of those dates is read whole. The store's read and a state
/// trimmed in memory both take their spans from here.
pub(crate) fn spans_kept<'a>(spans: &[Span], live: impl Iterator<Item = &'a ExecutionId>) -> Vec<Span> {
    let named = live.filter(|id| SCHEDULE_IDS.contains(&id.schedule()));
    let all: Spans = spans
        .iter()
        .copied()
        .chain(named.map(|id| Span::Date(id.date())))
        .collect();
    let mut dates_of: BTreeMap<NaiveDate, usize> = BTreeMap::new();
    for span in all.iter() {
        if let Span::Date(date) = span {
            *dates_of.entry(date.day).or_default() += 1;
        }
    }
    let whole = |day: &NaiveDate| dates_of.get(day).is_some_and(|n| *n > DATES_BEFORE_DAY);
    let kept: Spans = (all.iter())
        .map(|span| match span {
            Span::Date(date) if whole(&date.day) => Span::Day(date.day),
            other => *other,
        })
        .collect();
    kept.to_vec()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingTimer {
    pub timer: TimerKind,
    pub at: DateTime<Utc>,
}

/// [`PipelineState::timers`] as a whole state is written: a list of timers by when they are
/// due, as versions that kept a list wrote it; read back, the last of a kind wins.
mod timer_list {
    use super::{PendingTimer, Shared, SharedMap, TimerKind};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        timers: &SharedMap<TimerKind, Shared<PendingTimer>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut list: Vec<&PendingTimer> = timers.values().map(|t| &**t).collect();
        list.sort_by(|a, b| (a.at, &a.timer).cmp(&(b.at, &b.timer)));
        s.collect_seq(list)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<SharedMap<TimerKind, Shared<PendingTimer>>, D::Error> {
        let list = Vec::<PendingTimer>::deserialize(d)?;
        Ok(list.into_iter().map(|t| (t.timer.clone(), t.into())).collect())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSensor {
    pub data: SensorData,
    pub received_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<NaiveDate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hour: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
    /// Milliseconds between this key's last arrivals, newest last: its cadence, which tells
    /// when it is stale (STALE_SENSOR_WARNING).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub intervals: VecDeque<i64>,
    /// Who wrote it (`evaluator` for an evaluator's answer); absent for a producer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why the sensor could not be read: rules on its key fail with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Failed readings in a row at this slot: an evaluator's next call is a retry while the
    /// trigger retry policy lasts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl StoredSensor {
    /// The execution date this reading is scoped to, if the producer named one.
    pub fn scope(&self) -> Option<ExecutionDate> {
        Some(ExecutionDate {
            day: self.date?,
            hour: self.hour,
        })
    }

    /// The sensor key and the scope of the reading kept at `slot` (see [`Self::slot`]; a
    /// scope never contains `@`, so the last one separates them).
    pub fn split_slot<'s>(&self, slot: &'s str) -> (&'s str, Option<&'s str>) {
        match self.date.and_then(|_| slot.rsplit_once('@')) {
            Some((key, scope)) => (key, Some(scope)),
            None => (slot, None),
        }
    }

    /// The sensor key of the reading kept at `slot`.
    pub fn key_in<'s>(&self, slot: &'s str) -> &'s str {
        self.split_slot(slot).0
    }

    /// Where the reading is kept in [`PipelineState::sensors`]: per key, and per date when scoped.
    pub fn slot(&self, key: &str) -> String {
        match self.scope() {
            Some(scope) => format!("{key}@{scope}"),
            None => key.to_string(),
        }
    }
}

/// One execution: a pipeline's run for (schedule, date[, hour]). Its identity is what makes
/// a second trigger for the same execution impossible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// Which execution; stored as `scheduleId` and `date` (`YYYY-MM-DD`, or `YYYY-MM-DDTHH`
    /// for hourly executions).
    #[serde(flatten, with = "fields")]
    pub id: ExecutionId,
    pub started_at: DateTime<Utc>,
    pub window_closes_at: DateTime<Utc>,
    /// The current job attempt, 0 before the first trigger.
    pub attempt: u32,
    /// Retries spent from `maxRetries` (transient, timeout and unclassified failures).
    pub retries_used: u32,
    /// Retries spent from `maxCodeRetries` (PERMANENT failures).
    pub code_retries_used: u32,
    pub phase: Phase,
    /// When the current phase began (the watchdog measures from here).
    #[serde(default = "epoch")]
    pub phase_since: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verdict: Option<Verdict>,
    /// When the first sensor of this execution arrived (relative SLA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sensor_at: Option<DateTime<Utc>>,
    /// When its job first started (the SLA forecast and the run history measure from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_triggered_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub sla: SlaMarks,
    #[serde(default)]
    pub manual_reruns_used: u32,
    #[serde(default)]
    pub drift_reruns_used: u32,
    /// Runs this execution lost to INFRA_FAILURE (the target unreachable, retries spent).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub infra_failures: u32,
    /// Ended by an outage, or by a trigger that kept failing, and its date not closed: the
    /// next trigger sensor that holds starts it again (see [`MAX_INFRA_RESTARTS`],
    /// [`MAX_TRIGGER_RELEASES`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_on_trigger: bool,
    /// Times a trigger that kept failing released this date for the next trigger sensor.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trigger_releases: u32,
    /// LATE_DATA_ARRIVAL was told for the last completion (once per completion).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late_data_told: bool,
    /// The run that ended without its job's own outcome (its poll window closed): a report
    /// of it that comes later is told (JOB_REPORT_AFTER_END), once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreported_run: Option<String>,
    /// A digest of the sensor data the last completed run saw: reruns and late data compare
    /// against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_inputs: Option<String>,
    /// Rule results that changed while it validated, within `anomalies.flapping.window`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flips: Vec<Flip>,
    /// Sensor keys reported flapping (SENSOR_FLAPPING), each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flapping: Vec<String>,
    /// Sensor keys reported stale (STALE_SENSOR_WARNING), each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<String>,
    /// Post-run sensor values captured when the job succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Map<String, Value>>,
    /// Whether a post-run sensor arrived since the last success.
    #[serde(default)]
    pub post_run_seen: bool,
    /// What the current run's trigger answered that its status checks need (a DAG run id,
    /// a Databricks run id, an ARN); none for jobs that report by themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_handle: Option<Value>,
    /// Status checks of the current run in a row that could not ask its job system; an
    /// answer resets it. The next check backs off by it (`job::status_check_backoff`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unanswered_checks: u32,
    /// What JOB_STATUS_UNKNOWN last told about the current run: told once per run, and
    /// again only when the target refuses the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_told: Option<FailureCategory>,
    /// A backfill of a date older than the retention: when it was accepted (milliseconds
    /// since the epoch). It marks every run id of the execution, so none repeats one the
    /// job system saw for the date before Sluice forgot it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<i64>,
}

fn epoch() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

/// Which SLA alerts an execution has had, so none repeats and none contradicts another.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlaMarks {
    #[serde(default)]
    pub warned: bool,
    #[serde(default)]
    pub breached: bool,
    #[serde(default)]
    pub met: bool,
    #[serde(default)]
    pub relative_warned: bool,
    #[serde(default)]
    pub relative_breached: bool,
    #[serde(default)]
    pub evaluation_warned: bool,
    #[serde(default)]
    pub evaluation_breached: bool,
}

/// What an execution is waiting for, or how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum Phase {
    /// Rules are evaluated on every sensor and every interval until the window closes.
    AwaitingRules,
    /// A trigger was requested; waiting for its outcome on `sluice.jobs`.
    #[serde(rename_all = "camelCase")]
    AwaitingTrigger {
        run_id: RunId,
    },
    /// The job was started; waiting for it to finish.
    #[serde(rename_all = "camelCase")]
    AwaitingJob {
        run_id: RunId,
    },
    Succeeded {
        at: DateTime<Utc>,
    },
    Failed {
        at: DateTime<Utc>,
        reason: String,
    },
    ValidationExhausted {
        at: DateTime<Utc>,
    },
    /// Dry run: the job would have been triggered.
    WouldHaveTriggered {
        at: DateTime<Utc>,
    },
    /// Stopped by a `cancel` command.
    Cancelled {
        at: DateTime<Utc>,
    },
    /// Closed by the watchdog: nothing could move it on.
    Stale {
        at: DateTime<Utc>,
        reason: String,
    },
    /// The day is excluded (PIPELINE_EXCLUDED) or its trigger window closed before anything
    /// started (SENSOR_DEADLINE_EXPIRED): nothing runs for this date.
    Skipped {
        at: DateTime<Utc>,
        reason: String,
    },
}

impl Phase {
    pub fn run_id(&self) -> Option<&RunId> {
        match self {
            Phase::AwaitingTrigger { run_id } | Phase::AwaitingJob { run_id } => Some(run_id),
            _ => None,
        }
    }

    /// Still moving: waiting for rules, a trigger outcome or the job.
    pub fn is_open(&self) -> bool {
        matches!(
            self,
            Phase::AwaitingRules | Phase::AwaitingTrigger { .. } | Phase::AwaitingJob { .. }
        )
    }

    /// A job attempt is in flight.
    pub fn is_running(&self) -> bool {
        matches!(self, Phase::AwaitingTrigger { .. } | Phase::AwaitingJob { .. })
    }

    /// The job ran to success (or, in a dry run, would have been triggered).
    pub fn is_completed(&self) -> bool {
        matches!(self, Phase::Succeeded { .. } | Phase::WouldHaveTriggered { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Phase::AwaitingRules => "awaitingRules",
            Phase::AwaitingTrigger { .. } => "awaitingTrigger",
            Phase::AwaitingJob { .. } => "awaitingJob",
            Phase::Succeeded { .. } => "succeeded",
            Phase::Failed { .. } => "failed",
            Phase::ValidationExhausted { .. } => "validationExhausted",
            Phase::WouldHaveTriggered { .. } => "wouldHaveTriggered",
            Phase::Cancelled { .. } => "cancelled",
            Phase::Stale { .. } => "stale",
            Phase::Skipped { .. } => "skipped",
        }
    }
}

/// How many times an outage (INFRA_FAILURE) may end an execution and the next trigger
/// sensor start it again; after that, the date stays closed until a rerun.
pub const MAX_INFRA_RESTARTS: u32 = 3;

/// How many times a trigger that kept failing (its retries and `maxRetries` spent) may
/// release its date for the next trigger sensor, as Interlock released its trigger lock;
/// after that, the date stays closed until a rerun.
pub const MAX_TRIGGER_RELEASES: u32 = 3;

impl Execution {
    pub fn new(id: ExecutionId, now: DateTime<Utc>, window: TimeDelta) -> Self {
        Execution {
            id,
            started_at: now,
            window_closes_at: now + window,
            attempt: 0,
            retries_used: 0,
            code_retries_used: 0,
            phase: Phase::AwaitingRules,
            phase_since: now,
            last_verdict: None,
            first_sensor_at: None,
            first_triggered_at: None,
            sla: SlaMarks::default(),
            manual_reruns_used: 0,
            drift_reruns_used: 0,
            infra_failures: 0,
            restart_on_trigger: false,
            trigger_releases: 0,
            late_data_told: false,
            unreported_run: None,
            completed_inputs: None,
            baseline: None,
            flips: Vec::new(),
            flapping: Vec::new(),
            stale: Vec::new(),
            post_run_seen: false,
            job_handle: None,
            unanswered_checks: 0,
            unknown_told: None,
            backfill: None,
        }
    }

    /// The run id of this execution's current attempt (see [`run_id`]).
    pub fn run_id(&self, pipeline_id: &str) -> RunId {
        run_id(pipeline_id, &self.id, self.attempt, self.backfill)
    }

    /// A date on which nothing runs, kept so the same date is not reported twice.
    pub fn skipped(id: ExecutionId, now: DateTime<Utc>, reason: String) -> Self {
        let mut e = Execution::new(id, now, TimeDelta::zero());
        e.phase = Phase::Skipped { at: now, reason };
        e
    }

    fn enter(&mut self, phase: Phase, now: DateTime<Utc>) {
        self.phase = phase;
        self.phase_since = now;
    }
}

/// The run id of one attempt: unique per attempt, stable across re-deliveries, and usable
/// as an idempotency key by job targets. A backfilled execution's carry `b<millis>` (when
/// the backfill was accepted) before the attempt: the date may have run before Sluice
/// forgot it, under the same attempt numbers.
pub fn run_id(pipeline_id: &str, execution: &ExecutionId, attempt: u32, backfill: Option<i64>) -> RunId {
    let (schedule, date) = (execution.schedule(), execution.date_text());
    RunId::from(match backfill {
        None => format!("{pipeline_id}.{schedule}.{date}.{attempt}"),
        Some(at) => format!("{pipeline_id}.{schedule}.{date}.b{at}.{attempt}"),
    })
}

/// Something that happened, handed to the decider.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    ConfigPublished(ConfigRecord),
    SensorReceived(SensorReading),
    JobReported(JobReport),
    CommandReceived(Command),
    TimerFired(TimerKind),
    /// A record that could not be decoded; `source` locates it (topic/partition@offset).
    Rejected {
        source: String,
        reason: String,
        kind: Rejection,
    },
}

/// A record the decider publishes to one of Sluice's own input topics (a dependency's
/// sensor, a subscription): produced with the events, before the state is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Outbound {
    pub topic: OutboundTopic,
    /// The pipeline id the record is keyed (and partitioned) by.
    pub key: String,
    pub value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundTopic {
    Sensors,
    Commands,
}

/// Something the runtime must do outside the decider. Its outcome comes back as a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "camelCase")]
pub enum Effect {
    #[serde(rename_all = "camelCase")]
    TriggerJob(TriggerRequest),
    /// One status check of a running job, asked by its `JobStatusCheck` timer. Not
    /// journaled: the timer is, and it asks again.
    #[serde(rename_all = "camelCase")]
    CheckJob(StatusCheck),
    /// One call of a rule's evaluator, asked by its `EvaluatorDue` timer; the answer comes
    /// back as a sensor reading. Not journaled: the timer is, and it asks again.
    #[serde(rename_all = "camelCase")]
    Evaluate(EvaluatorCall),
}

impl Effect {
    /// The run the effect is about.
    pub fn request(&self) -> &TriggerRequest {
        match self {
            Effect::TriggerJob(request) => request,
            Effect::CheckJob(check) => &check.request,
            Effect::Evaluate(call) => &call.request,
        }
    }
}

/// Ask a rule's evaluator for sensor `key`: `request` carries the execution's identity and
/// the evaluator's settings (an `http` or `command` job's), rendered like a trigger's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluatorCall {
    pub request: TriggerRequest,
    pub key: String,
}

/// Ask how a running job is doing. `handle` is what its trigger answered (a run id, an ARN).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusCheck {
    pub request: TriggerRequest,
    pub handle: Value,
}

/// Start one attempt of a job. `config` has run variables expanded; `${env:...}` secrets
/// are left for the runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TriggerRequestJson", into = "TriggerRequestJson")]
pub struct TriggerRequest {
    pub pipeline_id: PipelineId,
    pub execution: ExecutionId,
    pub run_id: RunId,
    pub attempt: u32,
    pub config: JobConfig,
    /// How the executor retries a trigger the target could not take (5xx, throttling,
    /// connection errors); spent, the run ends with INFRA_FAILURE.
    pub retry: RetryPolicy,
    /// How the executor retries a status check that failed the same way; it never spends
    /// the job's own retries.
    pub status_retry: RetryPolicy,
    /// When whoever makes this trigger's call gives up on it: no try starts later and none
    /// runs past it. Until then, a new owner of the partition leaves the call to the old one
    /// (unless that one reports, or says it let go); after it, the call may be made again.
    /// `None`: journaled before deadlines were, or not a trigger.
    pub deadline: Option<DateTime<Utc>>,
    /// A secret the runtime draws when it journals the request (kept only in its state and
    /// changelog): the executor's `released` report carries it, so a report forged from
    /// public data (the run id, a deadline worked out from an event's time) releases
    /// nothing. `None`: journaled before releases carried one.
    pub release_key: Option<String>,
    /// When the call's first try must have begun by, its start mark (a `calling` report)
    /// acknowledged on the jobs topic before it: the executor makes no call whose mark is
    /// not by then (it lets the call go, and its owner requests it again), so a new owner
    /// that finds no mark once this has passed knows the call never began, and makes it
    /// at once instead of waiting for the deadline. `None`: journaled before marks were.
    pub start_by: Option<DateTime<Utc>>,
}

/// How long after a trigger is requested its call's first try may begin (see
/// [`TriggerRequest::start_by`]): a journal write, a wait for a concurrency slot and the
/// start mark's acknowledgement fit in it; a call still queued then is let go and requested
/// again, with a new time to begin.
pub const START_BUDGET: TimeDelta = TimeDelta::seconds(30);

pub use super::config::DEFAULT_TRY_TIMEOUT;

/// A trigger's allowance, on top of its tries and backoffs, for waiting for a concurrency
/// slot or a target's circuit to close.
pub const SLOT_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(10);

impl TriggerRequest {
    /// A request for attempt `attempt` of `execution`, with the default retry policies.
    pub fn new(pipeline_id: &str, execution: &ExecutionId, attempt: u32, config: JobConfig) -> Self {
        TriggerRequest {
            pipeline_id: pipeline_id.into(),
            execution: execution.clone(),
            run_id: run_id(pipeline_id, execution, attempt, None),
            attempt,
            config,
            retry: RetryPolicy::trigger(),
            status_retry: RetryPolicy::status_check(),
            deadline: None,
            release_key: None,
            start_by: None,
        }
    }

    pub fn kind(&self) -> JobKind {
        self.config.kind()
    }

    /// The longest a trigger's call may take: every try at its timeout (what the job type
    /// can take to answer: [`JobConfig::try_timeout`]) and every backoff of the retry
    /// policy, plus [`SLOT_ALLOWANCE`]. A command is one try (it starts the process and
    /// reports it running; its own `timeout` bounds the run, not the call).
    pub fn call_budget(&self) -> std::time::Duration {
        match self.kind() {
            JobKind::Command => DEFAULT_TRY_TIMEOUT + SLOT_ALLOWANCE,
            _ => {
                let try_timeout = self.config.try_timeout();
                try_timeout * (self.retry.max_attempts + 1) + self.retry.total() + SLOT_ALLOWANCE
            }
        }
    }

    /// The request with its call to be made from `now`, until `now` + [`Self::call_budget`],
    /// its first try begun by `now` + [`START_BUDGET`].
    pub fn made_from(mut self, now: DateTime<Utc>) -> Self {
        let budget = TimeDelta::from_std(self.call_budget()).unwrap_or(TimeDelta::MAX);
        self.deadline = Some(now.checked_add_signed(budget).unwrap_or(DateTime::<Utc>::MAX_UTC));
        self.start_by = Some(now.checked_add_signed(START_BUDGET).unwrap_or(DateTime::<Utc>::MAX_UTC));
        // A new call is a new secret: the runtime draws it when it journals the request.
        self.release_key = None;
        self
    }
}

/// A trigger request as it is journaled: the job config as JSON beside its kind, the form
/// it had before job configs were typed, so a journal reads back whichever version wrote it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TriggerRequestJson {
    pipeline_id: PipelineId,
    #[serde(flatten, with = "fields")]
    execution: ExecutionId,
    run_id: RunId,
    attempt: u32,
    kind: JobKind,
    config: Value,
    #[serde(default = "RetryPolicy::trigger")]
    retry: RetryPolicy,
    #[serde(default = "RetryPolicy::status_check")]
    status_retry: RetryPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    release_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_by: Option<DateTime<Utc>>,
}

impl TryFrom<TriggerRequestJson> for TriggerRequest {
    type Error = Unusable;
    fn try_from(json: TriggerRequestJson) -> Result<Self, Unusable> {
        Ok(TriggerRequest {
            config: JobConfig::from_json(json.kind, &json.config)?,
            pipeline_id: json.pipeline_id,
            execution: json.execution,
            run_id: json.run_id,
            attempt: json.attempt,
            retry: json.retry,
            status_retry: json.status_retry,
            deadline: json.deadline,
            release_key: json.release_key,
            start_by: json.start_by,
        })
    }
}

impl From<TriggerRequest> for TriggerRequestJson {
    fn from(request: TriggerRequest) -> Self {
        TriggerRequestJson {
            kind: request.kind(),
            config: request.config.json(),
            pipeline_id: request.pipeline_id,
            execution: request.execution,
            run_id: request.run_id,
            attempt: request.attempt,
            retry: request.retry,
            status_retry: request.status_retry,
            deadline: request.deadline,
            release_key: request.release_key,
            start_by: request.start_by,
        }
    }
}

/// How the pipeline's stored state changes.
#[derive(Debug, Clone, PartialEq)]
pub enum StateChange {
    Unchanged,
    Put(Box<PipelineState>),
    Delete,
}

/// Everything one input caused.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub state: StateChange,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    pub timers: Vec<TimerOp>,
    pub records: Vec<Outbound>,
    /// Set when the input record belongs on the dead-letter topic, with the reason.
    pub dead_letter: Option<String>,
    /// The kind of that reason.
    pub rejection: Option<Rejection>,
    /// Worth a log line, not an event (e.g. a duplicate report that changes nothing).
    pub notes: Vec<String>,
    /// Runs that ended here (their job's outcome, a cancel, the poll window, a stale run,
    /// the pipeline deleted): whatever call of theirs the runtime still makes (a failing
    /// trigger or command it would try again) stops, and is never made again.
    pub ended_runs: Vec<RunId>,
}

/// Where an input came from (`topic/partition@offset`, or the timer's identity and due
/// time): event ids derive from it.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub now: DateTime<Utc>,
    pub origin: &'a str,
    pub settings: Settings,
}

/// Processor-wide settings the decider needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How far in the future a sensor's timestamp may be before it is rejected.
    pub max_clock_skew: TimeDelta,
    /// How long an ended execution (and the sensors of its date) is kept.
    pub retention: TimeDelta,
    /// What one record, config or template may hold.
    pub limits: Limits,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_clock_skew: TimeDelta::minutes(5),
            retention: retention::RETENTION,
            limits: Limits::default(),
        }
    }
}

/// Decides what one input means for one pipeline.
pub fn decide(state: &PipelineState, pipeline_id: &PipelineId, input: &Input, ctx: Context<'_>) -> Decision {
    let mut d = Decider::new(state, pipeline_id, ctx);
    match input {
        Input::ConfigPublished(record) => d.on_config(record),
        Input::SensorReceived(reading) => d.on_sensor(reading),
        Input::JobReported(record) => d.on_job(record),
        Input::CommandReceived(record) => d.on_command(record),
        Input::TimerFired(kind) => {
            // As quinn-proto ignores a timeout that is not armed: a timer this state does not
            // have pending (fired already, cancelled, or from before a restore) or that is
            // not due yet changes nothing, so a duplicate CronTick cannot open the next
            // occurrence early and an early SLA timer cannot alert before its time.
            match d.state.due(kind) {
                Some(due) if due <= ctx.now => {
                    d.state.timers.remove(kind);
                    d.on_timer(kind, due)
                }
                Some(due) => d.notes.push(format!(
                    "timer {} fired before it is due ({due}): ignored",
                    kind.encode()
                )),
                None => d.notes.push(format!("timer {} is not pending: ignored", kind.encode())),
            }
        }
        Input::Rejected { source, reason, kind } => d.reject(source, reason, *kind),
    }
    d.finish()
}

/// Working state of one decision.
struct Decider<'a> {
    before: &'a PipelineState,
    state: PipelineState,
    pipeline_id: &'a PipelineId,
    ctx: Context<'a>,
    events: Vec<Event>,
    effects: Vec<Effect>,
    timers: Vec<TimerOp>,
    records: Vec<Outbound>,
    dead_letter: Option<String>,
    rejection: Option<Rejection>,
    notes: Vec<String>,
    ended_runs: Vec<RunId>,
    delete: bool,
}

impl<'a> Decider<'a> {
    fn new(before: &'a PipelineState, pipeline_id: &'a PipelineId, ctx: Context<'a>) -> Self {
        Decider {
            before,
            state: before.clone(),
            pipeline_id,
            ctx,
            events: Vec::new(),
            effects: Vec::new(),
            timers: Vec::new(),
            records: Vec::new(),
            dead_letter: None,
            rejection: None,
            notes: Vec::new(),
            ended_runs: Vec::new(),
            delete: false,
        }
    }

    fn finish(self) -> Decision {
        let state = if self.delete {
            StateChange::Delete
        } else if self.state == *self.before {
            StateChange::Unchanged
        } else {
            StateChange::Put(Box::new(self.state))
        };
        Decision {
            state,
            events: self.events,
            effects: self.effects,
            timers: self.timers,
            records: self.records,
            dead_letter: self.dead_letter,
            rejection: self.rejection,
            notes: self.notes,
            ended_runs: self.ended_runs,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.ctx.now
    }

    /// Publishes an event about the pipeline, or about one execution when `exec` names it
    /// (it need not exist yet: an SLA can breach with no run).
    fn emit(
        &mut self,
        kind: EventType,
        exec: Option<&ExecutionId>,
        message: impl Into<String>,
        detail: impl Into<Detail>,
    ) {
        let Some((kind, message, detail)) = self.as_dry_run(kind, message.into(), detail.into()) else {
            return;
        };
        let execution = exec.and_then(|id| self.state.executions.get(id));
        let schedule_id = exec.map(|id| id.schedule().to_string());
        let date = exec.map(|id| id.date_text().to_string());
        // Events of this type about this execution the same input produced before this one.
        let seq = self
            .events
            .iter()
            .filter(|e| e.kind == kind && e.schedule_id == schedule_id && e.date == date)
            .count();
        let event = Event {
            event_id: event_id(self.ctx.origin, kind, schedule_id.as_deref().zip(date.as_deref()), seq),
            kind,
            category: kind.category(),
            pipeline_id: self.pipeline_id.clone(),
            schedule_id,
            date,
            run_id: execution.and_then(|e| e.phase.run_id().cloned()),
            attempt: execution.map(|e| e.attempt).filter(|a| *a > 0),
            timestamp: self.now(),
            message,
            detail: detail.into_map(),
        };
        self.events.push(hints::with_action_hint(event));
    }

    /// The moment rules are evaluated at.
    fn moment(&self) -> Moment {
        Moment {
            now: self.ctx.now,
            max_skew: self.ctx.settings.max_clock_skew,
        }
    }

    fn config(&self) -> Option<&PipelineConfig> {
        self.state.config.as_deref()
    }

    /// A dry run pages no one, as Interlock's sent only DRY_RUN_* events and
    /// PIPELINE_EXCLUDED: any other event it would publish about its pipeline's runs is
    /// DRY_RUN_WOULD_REPORT, naming the real type in `detail.wouldReport` with the real
    /// message and detail. What is about the config or an input record (CONFIG_*,
    /// INPUT_REJECTED) is published as it is; VALIDATION_PASSED is not published at all
    /// (DRY_RUN_WOULD_TRIGGER, right after it, says it). One gate, so no new event type can
    /// leak.
    fn as_dry_run(&mut self, kind: EventType, message: String, detail: Detail) -> Option<(EventType, String, Detail)> {
        let passes = !self.config().is_some_and(|c| c.dry_run)
            || kind.category() == Category::DryRun
            || matches!(
                kind,
                EventType::PIPELINE_EXCLUDED
                    | EventType::CONFIG_ACCEPTED
                    | EventType::CONFIG_REJECTED
                    | EventType::INPUT_REJECTED
            );
        if passes {
            return Some((kind, message, detail));
        }
        if kind == EventType::VALIDATION_PASSED {
            self.notes.push(format!("dry run: {message}"));
            return None;
        }
        let message = format!("dry run: Sluice would report {}: {message}", kind.name());
        let detail = WouldReport {
            would_report: kind,
            detail: Box::new(detail),
        };
        Some((EventType::DRY_RUN_WOULD_REPORT, message, detail.into()))
    }

    /// The event type to publish: the real one, or its dry-run counterpart.
    fn dry_or(&self, real: EventType, dry: EventType) -> EventType {
        match self.config().is_some_and(|c| c.dry_run) {
            true => dry,
            false => real,
        }
    }

    fn set_timer(&mut self, kind: TimerKind, at: DateTime<Utc>) {
        self.state.arm(PendingTimer {
            timer: kind.clone(),
            at,
        });
        self.timers.push(TimerOp::Set { kind, at });
    }

    fn cancel_timer(&mut self, kind: TimerKind) {
        if self.state.timers.remove(&kind).is_some() {
            self.timers.push(TimerOp::Cancel { kind });
        }
    }

    /// Cancels the pending timers `which` selects.
    fn cancel_timers(&mut self, which: impl Fn(&TimerKind) -> bool) {
        let doomed: Vec<TimerKind> = (self.state.timers.keys()).filter(|kind| which(kind)).cloned().collect();
        for kind in doomed {
            self.cancel_timer(kind);
        }
    }

    /// Cancels the timers of one execution that `which` selects.
    fn cancel_execution_timers(&mut self, id: &ExecutionId, which: impl Fn(&TimerKind) -> bool) {
        self.cancel_timers(|t| which(t) && t.execution() == Some(id));
    }

    /// The execution `id`, while it awaits its rules.
    fn validating(&self, id: &ExecutionId) -> Option<&Execution> {
        (self.state.executions.get(id).map(|e| &**e)).filter(|e| e.phase == Phase::AwaitingRules)
    }

    /// The executions awaiting their rules (`only` that one, when named).
    fn awaiting_rules(&self, only: Option<&ExecutionId>) -> Vec<ExecutionId> {
        (self.state.executions.open())
            .filter(|(id, e)| *e.phase() == Phase::AwaitingRules && only.is_none_or(|o| o == *id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The sensor readings an execution's rules see: for each key, the reading scoped to the
    /// execution's date and hour, else to its day, else the undated latest reading.
    fn readings(&self, date: ExecutionDate) -> BTreeMap<String, &Map<String, Value>> {
        (self.read_slots(date).into_iter())
            .map(|(k, sensor)| (k.to_string(), &*sensor.data))
            .collect()
    }

    /// The stored readings behind [`Self::readings`], by sensor key.
    fn read_slots(&self, date: ExecutionDate) -> BTreeMap<&str, &StoredSensor> {
        let mut best: BTreeMap<&str, (u8, &StoredSensor)> = BTreeMap::new();
        for (slot, sensor) in self.state.sensors.of_date(date) {
            let rank = match sensor.scope() {
                None => 1,
                Some(scope) if scope == date => 3,
                Some(scope) if scope == date.whole_day() => 2,
                Some(_) => continue,
            };
            let key = sensor.key_in(slot);
            if best.get(key).is_none_or(|(r, _)| *r < rank) {
                best.insert(key, (rank, sensor));
            }
        }
        best.into_iter().map(|(k, (_, sensor))| (k, sensor)).collect()
    }

    /// Moves an execution into a phase; an ended one is forgotten after the retention.
    fn enter(&mut self, id: &ExecutionId, phase: Phase) {
        let now = self.now();
        if let Some(e) = self.state.executions.get_mut(id) {
            let ended = e.phase.run_id().filter(|run| phase.run_id() != Some(*run)).cloned();
            e.enter(phase, now);
            self.ended_runs.extend(ended);
        }
        self.arm_expiry(id);
    }

    fn reject(&mut self, source: &str, reason: &str, kind: Rejection) {
        let reason = clip(reason, REASON_LIMIT);
        let reason = reason.as_str();
        let detail = Rejected {
            source: source.into(),
            error: reason.into(),
        };
        self.emit(
            EventType::INPUT_REJECTED,
            None,
            format!("rejected record {source}: {reason}"),
            detail,
        );
        self.dead_letter = Some(reason.to_string());
        self.rejection = Some(kind);
    }
}
