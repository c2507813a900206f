//! The decider: `decide(state, input, now) -> Decision`, one pipeline at a time.
//!
//! Contract: the caller hands in the pipeline's current state, one input and the current
//! time, which never goes backwards; it then persists [`Decision::state`], publishes the
//! events, schedules the timers and carries out the effects. A timer that fires late or
//! twice is harmless. The same state, input, time and origin always give the same decision,
//! event ids included.
//!
//! The decider is split by input kind: [`config`](self::config), [`sensor`], [`job`],
//! [`evaluation`] (timers and rules), [`command`].

mod command;
mod config;
mod evaluation;
mod job;
mod sensor;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::config::{JobKind, PipelineConfig};
use super::events::{event_id, Event, EventType};
use super::records::{CommandRecord, ConfigRecord, JobRecord, SensorReading};
use super::rules::Verdict;
use super::timers::{TimerKind, TimerOp};

/// Everything Sluice holds about one pipeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineState {
    /// The config in force: the last valid one received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<PipelineConfig>,
    /// The latest reading of each sensor key (kept even before a config arrives).
    #[serde(default)]
    pub sensors: BTreeMap<String, StoredSensor>,
    /// Executions by [`execution_key`].
    #[serde(default)]
    pub executions: BTreeMap<String, Execution>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSensor {
    pub data: Map<String, Value>,
    pub received_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<NaiveDate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hour: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
}

/// One execution: a pipeline's run for (schedule, date[, hour]). Its identity is what makes
/// a second trigger for the same execution impossible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    pub schedule_id: String,
    /// `YYYY-MM-DD`, or `YYYY-MM-DDTHH` for hourly executions.
    pub date: String,
    pub started_at: DateTime<Utc>,
    pub window_closes_at: DateTime<Utc>,
    /// When the next interval evaluation is due (while awaiting rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_evaluation_at: Option<DateTime<Utc>>,
    /// The current job attempt, 0 before the first trigger.
    pub attempt: u32,
    /// Retries spent from `maxRetries` (transient, timeout and unclassified failures).
    pub retries_used: u32,
    /// Retries spent from `maxCodeRetries` (PERMANENT failures).
    pub code_retries_used: u32,
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verdict: Option<Verdict>,
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
        run_id: String,
    },
    /// The job was started; waiting for it to finish.
    #[serde(rename_all = "camelCase")]
    AwaitingJob {
        run_id: String,
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
}

impl Phase {
    pub fn run_id(&self) -> Option<&str> {
        match self {
            Phase::AwaitingTrigger { run_id } | Phase::AwaitingJob { run_id } => Some(run_id),
            _ => None,
        }
    }
}

/// The key of an execution inside [`PipelineState::executions`].
pub fn execution_key(schedule_id: &str, date: &str) -> String {
    format!("{schedule_id}/{date}")
}

/// The run id of one attempt: unique per attempt, stable across re-deliveries, and usable
/// as an idempotency key by job targets.
pub fn run_id(pipeline_id: &str, schedule_id: &str, date: &str, attempt: u32) -> String {
    format!("{pipeline_id}.{schedule_id}.{date}.{attempt}")
}

/// Something that happened, handed to the decider.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    ConfigPublished(ConfigRecord),
    SensorReceived(SensorReading),
    JobReported(JobRecord),
    CommandReceived(CommandRecord),
    TimerFired(TimerKind),
    /// A record that could not be decoded; `source` locates it (topic/partition@offset).
    Rejected {
        source: String,
        reason: String,
    },
}

/// Something the runtime must do outside the decider. Its outcome comes back as a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "camelCase")]
pub enum Effect {
    #[serde(rename_all = "camelCase")]
    TriggerJob(TriggerRequest),
}

/// Start one attempt of a job. `config` has run variables expanded; `${env:...}` secrets
/// are left for the runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerRequest {
    pub pipeline_id: String,
    pub schedule_id: String,
    pub date: String,
    pub run_id: String,
    pub attempt: u32,
    pub kind: JobKind,
    pub config: Value,
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
    /// Set when the input record belongs on the dead-letter topic, with the reason.
    pub dead_letter: Option<String>,
    /// Worth a log line, not an event (e.g. a duplicate report that changes nothing).
    pub notes: Vec<String>,
}

/// Where an input came from (`topic/partition@offset`, or the timer's identity and due
/// time): event ids derive from it.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub now: DateTime<Utc>,
    pub origin: &'a str,
}

/// Decides what one input means for one pipeline.
pub fn decide(state: &PipelineState, pipeline_id: &str, input: &Input, ctx: Context<'_>) -> Decision {
    let mut d = Decider::new(state, pipeline_id, ctx);
    match input {
        Input::ConfigPublished(record) => d.on_config(record),
        Input::SensorReceived(reading) => d.on_sensor(reading),
        Input::JobReported(record) => d.on_job(record),
        Input::CommandReceived(record) => d.on_command(record),
        Input::TimerFired(kind) => d.on_timer(kind),
        Input::Rejected { source, reason } => d.reject(source, reason),
    }
    d.finish()
}

/// Working state of one decision.
struct Decider<'a> {
    before: &'a PipelineState,
    state: PipelineState,
    pipeline_id: &'a str,
    ctx: Context<'a>,
    events: Vec<Event>,
    effects: Vec<Effect>,
    timers: Vec<TimerOp>,
    dead_letter: Option<String>,
    notes: Vec<String>,
    delete: bool,
}

impl<'a> Decider<'a> {
    fn new(before: &'a PipelineState, pipeline_id: &'a str, ctx: Context<'a>) -> Self {
        Decider {
            before,
            state: before.clone(),
            pipeline_id,
            ctx,
            events: Vec::new(),
            effects: Vec::new(),
            timers: Vec::new(),
            dead_letter: None,
            notes: Vec::new(),
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
            dead_letter: self.dead_letter,
            notes: self.notes,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.ctx.now
    }

    /// Publishes an event about the pipeline, or about one execution when `exec` names it.
    fn emit(&mut self, kind: EventType, exec: Option<&str>, message: impl Into<String>, detail: Map<String, Value>) {
        let execution = exec.and_then(|key| self.state.executions.get(key));
        let event = Event {
            event_id: event_id(self.ctx.origin, self.events.len()),
            kind,
            category: kind.category(),
            pipeline_id: self.pipeline_id.to_string(),
            schedule_id: execution.map(|e| e.schedule_id.clone()),
            date: execution.map(|e| e.date.clone()),
            run_id: execution.and_then(|e| e.phase.run_id().map(str::to_string)),
            attempt: execution.map(|e| e.attempt).filter(|a| *a > 0),
            timestamp: self.now(),
            message: message.into(),
            detail,
        };
        self.events.push(event);
    }

    fn set_timer(&mut self, kind: TimerKind, at: DateTime<Utc>) {
        self.timers.push(TimerOp::Set { kind, at });
    }

    fn cancel_timer(&mut self, kind: TimerKind) {
        self.timers.push(TimerOp::Cancel { kind });
    }

    fn reject(&mut self, source: &str, reason: &str) {
        let detail = detail([("source", Value::from(source)), ("error", Value::from(reason))]);
        self.emit(
            EventType::INPUT_REJECTED,
            None,
            format!("rejected record {source}: {reason}"),
            detail,
        );
        self.dead_letter = Some(reason.to_string());
    }
}

/// Builds an event detail map from pairs.
fn detail<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
