//! Input records as they arrive on `sluice.sensors`, `sluice.jobs` and `sluice.commands`.
//!
//! Decoding checks everything a record must satisfy before it may touch state; a record that
//! fails is rejected with the reason (dead-letter topic plus INPUT_REJECTED), never dropped.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

use super::events::clip;
use super::execution::{ExecutionDate, ExecutionId, ParseError, RunId};
use super::partitioning::PartitionId;
use super::rules::as_timestamp;
use crate::core::ids::PipelineId;

/// Why an input record cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InputError {
    #[error("record has no value")]
    Empty,
    #[error("value is not valid JSON: {0}")]
    NotJson(String),
    #[error("value does not match the schema: {0}")]
    Schema(String),
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("record key {key:?} differs from pipelineId {pipeline_id:?}; keys must be the pipeline id so one task owns the pipeline")]
    KeyMismatch { key: String, pipeline_id: PipelineId },
    #[error("{field} is {len} bytes, over the limit of {limit} bytes")]
    TooLong {
        field: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("record keyed {key:?} is on partition {partition} but its pipeline lives on partition {owner}: produce with the murmur2 partitioner (the Java client's default; librdkafka: partitioner=murmur2_random)")]
    WrongPartition {
        key: String,
        partition: PartitionId,
        owner: PartitionId,
    },
}

/// Why a record went to the dead-letter topic, in a few kinds an operator can alert on
/// (`sluice_dead_letters_total{reason}`); the event and the dead letter carry the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Over a record limit (or the state it would grow over the state limit).
    TooLarge,
    /// Not readable: no value, not JSON, not the schema, an unknown Avro schema.
    Unreadable,
    /// Readable, with a field that does not hold (a missing key, a date that is none).
    Invalid,
    /// On another partition than its key's (see `run --misrouted`).
    Misrouted,
    /// A pipeline config with problems.
    Config,
    /// Valid, but nothing it could apply to (a report of no execution, a cancel of nothing).
    Refused,
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::TooLarge => "too_large",
            Rejection::Unreadable => "unreadable",
            Rejection::Invalid => "invalid",
            Rejection::Misrouted => "misrouted",
            Rejection::Config => "config",
            Rejection::Refused => "refused",
        }
    }
}

impl InputError {
    /// The kind of rejection this error makes.
    pub fn rejection(&self) -> Rejection {
        match self {
            InputError::Empty | InputError::NotJson(_) | InputError::Schema(_) => Rejection::Unreadable,
            InputError::Invalid { .. } | InputError::KeyMismatch { .. } => Rejection::Invalid,
            InputError::WrongPartition { .. } => Rejection::Misrouted,
            InputError::TooLong { .. } => Rejection::TooLarge,
        }
    }
}

/// A keyed record must sit on the partition its key hashes to, where its pipeline's state is.
pub fn check_partition(key: Option<&[u8]>, partition: PartitionId, partitions: i32) -> Result<(), InputError> {
    let Some(key) = key else { return Ok(()) };
    let owner = super::partitioning::partition_for(key, partitions);
    if owner == partition {
        return Ok(());
    }
    Err(InputError::WrongPartition {
        key: String::from_utf8_lossy(key).into_owned(),
        partition,
        owner,
    })
}

impl InputError {
    fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        InputError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}

/// A sensor reading: something a producer observed about upstream data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SensorRecord {
    pub pipeline_id: PipelineId,
    pub key: String,
    #[serde(default)]
    pub data: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hour: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    /// Who wrote it: absent for a producer, `evaluator` when Sluice asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Set when the sensor could not be read (an evaluator failed or timed out): rules on
    /// its key fail with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How the reading meets the one stored for its key and date: `replace` (the default)
    /// or `add` (see [`Merge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<String>,
}

/// How a reading meets the one already stored for its key and date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Merge {
    /// The reading is the sensor's whole state.
    #[default]
    Replace,
    /// As DynamoDB's `UpdateItem` with `ADD` (numbers, sets) and `SET` (the rest), which
    /// producers of the earlier design used to count, and to collect (the hours of a day
    /// that finished), from many writers: each number is added to the stored one, a list is
    /// joined to the stored list as a set (members it lacks appended, in order), other fields
    /// are set, and fields the reading leaves out are kept.
    Add,
}

impl Merge {
    /// `data` as it stands once `reading` has met `stored` (the slot's data, if any); why
    /// not, when a set would grow past [`MAX_SET_MEMBERS`].
    pub fn apply(
        self,
        stored: Option<&Map<String, Value>>,
        reading: &Map<String, Value>,
    ) -> Result<Map<String, Value>, SetTooLarge> {
        let (Merge::Add, Some(stored)) = (self, stored) else {
            return Ok(reading.clone());
        };
        let mut merged = stored.clone();
        for (name, value) in reading {
            let sum = match (merged.get(name), value) {
                (Some(Value::Number(a)), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
                    (Some(a), Some(b)) => a.checked_add(b).map(Value::from),
                    _ => a
                        .as_f64()
                        .zip(b.as_f64())
                        .and_then(|(a, b)| serde_json::Number::from_f64(a + b))
                        .map(Value::Number),
                },
                (Some(Value::Array(stored)), Value::Array(added)) => {
                    let mut union = stored.clone();
                    for member in added {
                        if !union.contains(member) {
                            union.push(member.clone());
                        }
                    }
                    if union.len() > MAX_SET_MEMBERS {
                        return Err(SetTooLarge {
                            field: name.clone(),
                            members: union.len(),
                        });
                    }
                    Some(Value::Array(union))
                }
                _ => None,
            };
            merged.insert(name.clone(), sum.unwrap_or_else(|| value.clone()));
        }
        Ok(merged)
    }
}

/// A `merge: add` that would grow a list past [`MAX_SET_MEMBERS`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("merge add: {field} would hold {members} members, more than the {MAX_SET_MEMBERS} a set may")]
pub struct SetTooLarge {
    pub field: String,
    pub members: usize,
}

/// Why a producer's reading is not published ([`producer_reading`]).
#[derive(Debug, Error)]
pub enum NotAReading {
    #[error("not a sensor record: {0}")]
    Shape(serde_json::Error),
    /// What the processor would reject it for.
    #[error(transparent)]
    Refused(#[from] InputError),
}

/// The most members a list built with `merge: add` may hold (the hours of a day, the
/// partitions of a table): a producer adding new members forever is refused, not stored.
pub const MAX_SET_MEMBERS: usize = 10_000;

/// What [`SensorRecord::source`] says of the readings Sluice's evaluators write.
pub const EVALUATOR_SOURCE: &str = "evaluator";

/// A sensor record after validation: the execution it scopes is explicit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SensorReading {
    pub pipeline_id: PipelineId,
    pub key: String,
    pub data: Map<String, Value>,
    /// The execution date the producer named (record field, else `data.date`).
    pub date: Option<NaiveDate>,
    /// The execution hour (record field, else `data.hour`): makes the execution hourly.
    pub hour: Option<u32>,
    pub timestamp: Option<DateTime<Utc>>,
    pub source: Option<String>,
    pub error: Option<String>,
    pub merge: Merge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Running,
    Succeeded,
    Failed,
    Timeout,
    /// Not a run's state: an executor that lost the run's partition stopped making or
    /// retrying its trigger, which the run's next owner may now request again.
    Released,
    /// Not a run's state: Sluice's executor could not ask the job system how a running job
    /// is doing (its status API down, throttling, or refusing the question). The job may
    /// still be running, so this never ends it: JOB_STATUS_UNKNOWN, and the checks go on.
    Unknown,
    /// Not a run's state: Sluice's executor is about to make the first try of a trigger's
    /// call (`metadata.deadline` names the call). Written, and acknowledged, before the
    /// try: a new owner that finds a journaled call without it, once the call's time to
    /// begin (`startBy`) has passed, knows the call never began and never will, and makes
    /// it at once instead of waiting for its deadline.
    Calling,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Timeout => "timeout",
            JobStatus::Released => "released",
            JobStatus::Unknown => "unknown",
            JobStatus::Calling => "calling",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum FailureCategory {
    Permanent,
    Transient,
    Timeout,
    /// The target could not be reached or asked (retries spent): INFRA_FAILURE, and the run
    /// ends without spending the job's own retries.
    Infra,
}

/// A report about a job run: from Sluice's own trigger executor or from the job's runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub pipeline_id: PipelineId,
    pub schedule_id: String,
    pub date: String,
    pub run_id: RunId,
    pub status: JobStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_category: Option<FailureCategory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub timestamp: DateTime<Utc>,
}

/// A job report as decoded ([`decode_job`]): its fields bounded, the execution it names
/// parsed. What the decider and the hand-over read; [`JobRecord`] is what is written.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReport {
    pub pipeline_id: PipelineId,
    pub execution: ExecutionId,
    pub run_id: RunId,
    pub status: JobStatus,
    pub failure_category: Option<FailureCategory>,
    pub message: Option<String>,
    pub metadata: Option<Value>,
    pub timestamp: DateTime<Utc>,
}

impl JobRecord {
    /// Checks the record's fields and parses the execution it names (a date in any form
    /// [`ExecutionDate`] reads, made canonical).
    pub fn parse(self) -> Result<JobReport, InputError> {
        bounded("scheduleId", &self.schedule_id, bounds::ID_BYTES)?;
        bounded("runId", &self.run_id, bounds::RUN_ID_BYTES)?;
        bounded("date", &self.date, bounds::ID_BYTES)?;
        bounded_opt("message", self.message.as_deref(), bounds::TEXT_BYTES)?;
        if let Some(metadata) = &self.metadata {
            bounded("metadata", &metadata.to_string(), bounds::METADATA_BYTES)?;
        }
        if self.run_id.trim().is_empty() {
            return Err(InputError::invalid("runId", "must not be empty"));
        }
        let date: ExecutionDate =
            (self.date.parse()).map_err(|e: ParseError| InputError::invalid("date", e.to_string()))?;
        Ok(JobReport {
            pipeline_id: self.pipeline_id,
            execution: ExecutionId::new(&self.schedule_id, date),
            run_id: self.run_id,
            status: self.status,
            failure_category: self.failure_category,
            message: self.message,
            metadata: self.metadata,
            timestamp: self.timestamp,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandKind {
    Rerun,
    Cancel,
    /// Sent by Sluice itself: `subscriber` declared `dependsOn` this pipeline.
    Subscribe,
    /// Sent by Sluice itself: `subscriber` no longer depends on this pipeline.
    Unsubscribe,
}

impl CommandKind {
    pub fn name(self) -> &'static str {
        match self {
            CommandKind::Rerun => "rerun",
            CommandKind::Cancel => "cancel",
            CommandKind::Subscribe => "subscribe",
            CommandKind::Unsubscribe => "unsubscribe",
        }
    }
}

/// An operator's request about one execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandRecord {
    pub pipeline_id: PipelineId,
    pub command: CommandKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<String>,
    /// The execution date (`rerun`, `cancel`); empty for subscriptions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub date: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// `subscribe`/`unsubscribe`: the downstream pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscriber: Option<String>,
    /// `subscribe`: the sensor key the downstream expects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `rerun`: run a completed date again although none of its inputs changed ("fixed the
    /// code, rerun yesterday"); still within `maxManualReruns`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// `rerun`: a backfill, which may start a date older than the execution retention (one
    /// Sluice no longer knows whether it ran): deliberately, with run ids of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backfill: bool,
}

/// A command as decoded ([`decode_command`]): its fields bounded, and each kind holding
/// the fields it needs, its date parsed. What the decider reads; [`CommandRecord`] is what
/// is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub pipeline_id: PipelineId,
    pub requested_by: Option<String>,
    pub kind: CommandOf,
}

/// What a [`Command`] asks, with what each kind carries.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOf {
    Rerun(Rerun),
    Cancel(Cancel),
    /// `subscriber` declared `dependsOn` this pipeline, expecting sensor `key`.
    Subscribe {
        subscriber: PipelineId,
        key: String,
    },
    /// `subscriber` no longer depends on this pipeline.
    Unsubscribe {
        subscriber: PipelineId,
    },
}

/// A `rerun` command.
#[derive(Debug, Clone, PartialEq)]
pub struct Rerun {
    pub execution: NamedExecution,
    pub reason: Option<String>,
    /// See [`CommandRecord::force`].
    pub force: bool,
    /// See [`CommandRecord::backfill`].
    pub backfill: bool,
}

/// A `cancel` command.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancel {
    pub execution: NamedExecution,
    pub reason: Option<String>,
}

/// The execution a rerun or a cancel names. Not yet an [`ExecutionId`]: without a
/// `schedule_id` it is the pipeline's own schedule's, which only the pipeline's config
/// knows (and a command may come before the config, or after it changed), so the decider
/// makes the id.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedExecution {
    /// The schedule the command named; `None` for the pipeline's own.
    pub schedule_id: Option<String>,
    pub date: ExecutionDate,
}

impl CommandRecord {
    /// Checks the record's fields (bounds, then what its kind requires) and parses the date
    /// a rerun or a cancel names (in any form [`ExecutionDate`] reads, made canonical).
    pub fn parse(self) -> Result<Command, InputError> {
        bounded_opt("scheduleId", self.schedule_id.as_deref(), bounds::ID_BYTES)?;
        bounded("date", &self.date, bounds::ID_BYTES)?;
        bounded_opt("reason", self.reason.as_deref(), bounds::TEXT_BYTES)?;
        bounded_opt("requestedBy", self.requested_by.as_deref(), bounds::REQUESTED_BY_BYTES)?;
        bounded_opt("subscriber", self.subscriber.as_deref(), bounds::ID_BYTES)?;
        bounded_opt("key", self.key.as_deref(), bounds::SENSOR_KEY_BYTES)?;
        let named = |schedule_id, date: &str| -> Result<NamedExecution, InputError> {
            let date = (date.parse()).map_err(|e: ParseError| InputError::invalid("date", e.to_string()))?;
            Ok(NamedExecution { schedule_id, date })
        };
        let subscriber = |subscriber: Option<String>| {
            (subscriber.filter(|s| !s.is_empty()))
                .map(PipelineId::from)
                .ok_or_else(|| InputError::invalid("subscriber", "is required for subscriptions"))
        };
        let kind = match self.command {
            CommandKind::Rerun => CommandOf::Rerun(Rerun {
                execution: named(self.schedule_id, &self.date)?,
                reason: self.reason,
                force: self.force,
                backfill: self.backfill,
            }),
            CommandKind::Cancel => CommandOf::Cancel(Cancel {
                execution: named(self.schedule_id, &self.date)?,
                reason: self.reason,
            }),
            CommandKind::Subscribe => CommandOf::Subscribe {
                subscriber: subscriber(self.subscriber)?,
                key: (self.key.filter(|k| !k.is_empty()))
                    .ok_or_else(|| InputError::invalid("key", "is required for subscribe"))?,
            },
            CommandKind::Unsubscribe => CommandOf::Unsubscribe {
                subscriber: subscriber(self.subscriber)?,
            },
        };
        Ok(Command {
            pipeline_id: self.pipeline_id,
            requested_by: self.requested_by,
            kind,
        })
    }
}

fn decode_json<T: DeserializeOwned>(value: Option<&[u8]>) -> Result<T, InputError> {
    let bytes = value.ok_or(InputError::Empty)?;
    let json: Value = serde_json::from_slice(bytes).map_err(|e| InputError::NotJson(e.to_string()))?;
    // The path names the field at fault ("key: invalid type: integer `42`, expected a string").
    serde_path_to_error::deserialize(json).map_err(|e| InputError::Schema(e.to_string()))
}

/// The most bytes each field may hold that becomes part of a stored key, a changelog key or
/// an event. Bounded at decode: a record near the broker's size limit would otherwise make a
/// changelog key, or an event that quotes the field, larger than any broker accepts, and
/// every restart and every new owner would fail on the same record.
pub mod bounds {
    /// A pipeline id (the record key), a schedule id, a subscriber.
    pub const ID_BYTES: usize = 256;
    /// A sensor key, with its period suffix (`rows#2026-11-23T05`).
    pub const SENSOR_KEY_BYTES: usize = 512;
    /// A job report's run id (a job system's own id may be long: an ARN, a URL).
    pub const RUN_ID_BYTES: usize = 1_024;
    /// Who asked for a command.
    pub const REQUESTED_BY_BYTES: usize = 256;
    /// A command's reason, or a job report's message.
    pub const TEXT_BYTES: usize = 16 << 10;
    /// A job report's metadata, as JSON.
    pub const METADATA_BYTES: usize = 64 << 10;
}

/// The pipeline a record that cannot be read is about, for its rejection's event: its key,
/// cut to [`bounds::ID_BYTES`] when it is longer (the event must fit the broker, and a
/// rejection writes no state under it).
pub fn rejected_pipeline(key: Option<&[u8]>) -> PipelineId {
    let key = key.map(String::from_utf8_lossy).unwrap_or_default();
    super::events::clip(&key, bounds::ID_BYTES).into()
}

/// `Err` naming the field when `value` is over `limit` bytes.
fn bounded(field: &'static str, value: &str, limit: usize) -> Result<(), InputError> {
    match value.len() > limit {
        true => Err(InputError::TooLong {
            field,
            len: value.len(),
            limit,
        }),
        false => Ok(()),
    }
}

fn bounded_opt(field: &'static str, value: Option<&str>, limit: usize) -> Result<(), InputError> {
    value.map_or(Ok(()), |v| bounded(field, v, limit))
}

fn check_key(key: Option<&[u8]>, pipeline_id: &str) -> Result<(), InputError> {
    // Before anything quotes it: a mismatch error names both.
    bounded("pipelineId", pipeline_id, bounds::ID_BYTES)?;
    if let Some(key) = key.filter(|k| k.len() > bounds::ID_BYTES) {
        return Err(InputError::TooLong {
            field: "key",
            len: key.len(),
            limit: bounds::ID_BYTES,
        });
    }
    if pipeline_id.trim().is_empty() {
        return Err(InputError::invalid("pipelineId", "must not be empty"));
    }
    // The store keys a pipeline's parts after a `\0` (see runtime::store::parts).
    if pipeline_id.chars().any(char::is_control) {
        return Err(InputError::invalid("pipelineId", "must not contain control characters"));
    }
    match key {
        // A keyless record lands on an arbitrary partition, away from its pipeline's state.
        None => Err(InputError::invalid("key", "records must be keyed by their pipeline id")),
        Some(k) if k != pipeline_id.as_bytes() => Err(InputError::KeyMismatch {
            key: String::from_utf8_lossy(k).into_owned(),
            pipeline_id: pipeline_id.into(),
        }),
        Some(_) => Ok(()),
    }
}

/// A per-period sensor key, as producers written for the earlier design name them:
/// `rows#2026-11-23`, `rows#20261123`, `rows#2026-11-23T05` or `rows#20261123T05` is key
/// `rows` for that date (and hour). The earlier design matched such keys to a run's date
/// when it evaluated (interlock `internal/lambda/sensor.go`, RemapPerPeriodSensors); here
/// the period becomes the reading's scope, so it counts for that date and no other. A `#`
/// suffix that is not a period leaves the key as it is.
pub fn period_of_key(key: &str) -> Option<(&str, NaiveDate, Option<u32>)> {
    let (base, period) = key.rsplit_once('#')?;
    if base.is_empty() {
        return None;
    }
    // Only the spellings above count: the day as YYYY-MM-DD (ten characters, dashed) or
    // YYYYMMDD (eight digits), the hour as two digits.
    let (day, hour) = match period.split_once('T') {
        Some((day, hour)) => (day, Some(hour)),
        None => (period, None),
    };
    let day_spelled = match day.len() {
        10 => day.matches('-').count() >= 2,
        8 => day.bytes().all(|b| b.is_ascii_digit()),
        _ => false,
    };
    let hour_spelled = hour.is_none_or(|h| h.len() == 2 && h.bytes().all(|b| b.is_ascii_digit()));
    if !(day_spelled && hour_spelled) {
        return None;
    }
    let date: ExecutionDate = period.parse().ok()?;
    Some((base, date.day, date.hour))
}

fn parse_hour(v: &Value) -> Option<u32> {
    let hour = match v {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => s.trim().parse::<u64>().ok()?,
        _ => return None,
    };
    (hour < 24).then_some(hour as u32)
}

/// A reading from a producer that does not write the sensors topic itself (`sluice sensor
/// put -`, `POST /api/sensors`): `value` as a sensor record, checked as the processor checks
/// one ([`decode_sensor`]), stamped `now` when it carries no `timestamp`. `Err` says why the
/// processor would refuse it, so that nothing is published that it would dead-letter.
pub fn producer_reading(value: Value, now: DateTime<Utc>) -> Result<SensorRecord, NotAReading> {
    let mut record: SensorRecord = serde_json::from_value(value).map_err(NotAReading::Shape)?;
    if record.timestamp.is_none() {
        record.timestamp = Some(Value::String(now.to_rfc3339()));
    }
    let json = serde_json::to_vec(&record).map_err(NotAReading::Shape)?;
    decode_sensor(Some(record.pipeline_id.as_bytes()), Some(&json))?;
    Ok(record)
}

pub fn decode_sensor(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<SensorReading, InputError> {
    let record: SensorRecord = decode_json(value)?;
    check_key(key, &record.pipeline_id)?;
    bounded("key", &record.key, bounds::SENSOR_KEY_BYTES)?;
    bounded_opt("source", record.source.as_deref(), bounds::ID_BYTES)?;
    bounded_opt("error", record.error.as_deref(), bounds::TEXT_BYTES)?;
    if record.key.trim().is_empty() {
        return Err(InputError::invalid("key", "must not be empty"));
    }
    // A dated reading is kept at `key@date`: a key holding `@` would let an undated reading
    // take a dated one's slot (`rows@2026-11-21`) and change what a rule reads for that date.
    if record.key.contains('@') {
        return Err(InputError::invalid(
            "key",
            "must not contain '@' (a dated reading is kept at key@date)",
        ));
    }
    let date = sensor_date(&record)?;
    let hour = sensor_hour(&record)?;
    let (key, date, hour) = scope_in_key(record.key, date, hour)?;
    if hour.is_some() && date.is_none() {
        return Err(InputError::invalid("hour", "an hourly sensor must also carry its date"));
    }
    let timestamp =
        match &record.timestamp {
            None | Some(Value::Null) => None,
            Some(v) => Some(as_timestamp(v).ok_or_else(|| {
                InputError::invalid("timestamp", format!("{v} is not RFC 3339 or epoch seconds/millis"))
            })?),
        };
    Ok(SensorReading {
        pipeline_id: record.pipeline_id,
        key,
        data: record.data,
        date,
        hour,
        timestamp,
        source: record.source.filter(|s| !s.trim().is_empty()),
        error: record.error.filter(|e| !e.trim().is_empty()),
        merge: sensor_merge(record.merge.as_deref())?,
    })
}

fn sensor_merge(merge: Option<&str>) -> Result<Merge, InputError> {
    match merge.map(|m| m.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "replace") => Ok(Merge::Replace),
        Some("add") => Ok(Merge::Add),
        Some(_) => Err(InputError::invalid(
            "merge",
            format!(
                "{:?} is not a merge mode (replace, add)",
                clip(merge.unwrap_or_default(), 40)
            ),
        )),
    }
}

/// The day a sensor record names. The earlier design carried date and hour inside the
/// sensor data; both places are accepted. In the data, producers often wrote a timestamp
/// there (`2026-03-03T05:12:00Z`): it counts for its day, as written.
fn sensor_date(record: &SensorRecord) -> Result<Option<NaiveDate>, InputError> {
    let (given, in_data) = match &record.date {
        Some(date) => (Some(Value::String(date.clone())), false),
        None => (record.data.get("date").cloned(), true),
    };
    match given {
        None | Some(Value::Null) => Ok(None),
        // The hour has its own field: a date here is a day.
        Some(Value::String(s)) => match s.parse::<ExecutionDate>() {
            Ok(ExecutionDate { day, hour: None }) => Ok(Some(day)),
            _ => match in_data.then(|| day_of_timestamp(&s)).flatten() {
                Some(day) => Ok(Some(day)),
                None => Err(InputError::invalid("date", format!("{s:?} is not YYYY-MM-DD"))),
            },
        },
        // A producer of the earlier design wrote `date: 20261127` as a number, which it took
        // for no date at all (today's): the date it names is what was meant.
        Some(Value::Number(n)) if in_data => n
            .as_u64()
            .and_then(|n| NaiveDate::parse_from_str(&format!("{n:08}"), "%Y%m%d").ok())
            .map(Some)
            .ok_or_else(|| InputError::invalid("date", format!("{n} is not YYYYMMDD"))),
        Some(other) => Err(InputError::invalid("date", format!("{other} is not YYYY-MM-DD"))),
    }
}

/// The calendar day of an RFC 3339 timestamp, or of one without its offset, as written.
fn day_of_timestamp(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.date_naive())
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|t| t.date())
        })
}

/// The hour a sensor record names, in its own field or in its data (see [`sensor_date`]).
/// In the data, only two digits name an hour, as the earlier design read it (interlock
/// `ResolveExecutionDate`): its producers' `hour: 5` or `"5"` scoped a daily run, and
/// still does.
fn sensor_hour(record: &SensorRecord) -> Result<Option<u32>, InputError> {
    let (hour, in_data) = match &record.hour {
        Some(hour) => (Some(hour), false),
        None => (record.data.get("hour"), true),
    };
    match hour {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let hour = parse_hour(v).ok_or_else(|| InputError::invalid("hour", format!("{v} is not an hour 00-23")))?;
            let two_digits = matches!(v, Value::String(s) if s.len() == 2);
            Ok((two_digits || !in_data).then_some(hour))
        }
    }
}

/// The sensor key, day and hour of a reading whose key may name its period (see
/// [`period_of_key`]): the key's period is the reading's scope.
fn scope_in_key(
    key: String,
    date: Option<NaiveDate>,
    hour: Option<u32>,
) -> Result<(String, Option<NaiveDate>, Option<u32>), InputError> {
    let Some((base, day, key_hour)) = period_of_key(&key) else {
        return Ok((key, date, hour));
    };
    // A date or hour field saying otherwise is a contradiction, not something to guess
    // between.
    if date.is_some_and(|d| d != day) || (key_hour.is_some() && hour.is_some_and(|h| Some(h) != key_hour)) {
        let said = match (date, hour) {
            (Some(day), hour) => ExecutionDate { day, hour }.to_string(),
            (None, Some(h)) => format!("hour {h:02}"),
            (None, None) => String::new(),
        };
        return Err(InputError::invalid(
            "key",
            format!("{key:?} names its period in the key, but the record says {said}"),
        ));
    }
    Ok((base.to_string(), Some(day), key_hour.or(hour)))
}

pub fn decode_job(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<JobReport, InputError> {
    let record: JobRecord = decode_json(value)?;
    check_key(key, &record.pipeline_id)?;
    record.parse()
}

pub fn decode_command(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Command, InputError> {
    let record: CommandRecord = decode_json(value)?;
    check_key(key, &record.pipeline_id)?;
    record.parse()
}

/// A record on `sluice.config`: a config to parse, a tombstone that deletes it, or bytes
/// that are not JSON (still a config, so still answered with CONFIG_REJECTED).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigRecord {
    Put { pipeline_id: PipelineId, config: Value },
    Delete { pipeline_id: PipelineId },
    Unreadable { pipeline_id: PipelineId, reason: String },
}

impl ConfigRecord {
    pub fn pipeline_id(&self) -> &PipelineId {
        match self {
            ConfigRecord::Put { pipeline_id, .. }
            | ConfigRecord::Delete { pipeline_id }
            | ConfigRecord::Unreadable { pipeline_id, .. } => pipeline_id,
        }
    }
}

pub fn decode_config(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<ConfigRecord, InputError> {
    let pipeline_id = key
        .map(|k| String::from_utf8(k.to_vec()).map_err(|_| InputError::invalid("key", "is not UTF-8")))
        .transpose()?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| InputError::invalid("key", "config records must be keyed by pipeline id"))?;
    bounded("key", &pipeline_id, bounds::ID_BYTES)?;
    let pipeline_id = PipelineId::from(pipeline_id);
    match value {
        None => Ok(ConfigRecord::Delete { pipeline_id }),
        Some(bytes) => {
            let config: Value = match serde_json::from_slice(bytes) {
                Ok(config) => config,
                Err(e) => {
                    return Ok(ConfigRecord::Unreadable {
                        pipeline_id,
                        reason: format!("not valid JSON: {e}"),
                    })
                }
            };
            if config.is_null() {
                return Ok(ConfigRecord::Delete { pipeline_id });
            }
            Ok(ConfigRecord::Put { pipeline_id, config })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sensor(json: &str) -> Result<SensorReading, InputError> {
        decode_sensor(Some(b"p1"), Some(json.as_bytes()))
    }

    #[test]
    fn a_pipeline_id_with_a_control_character_is_refused() {
        // It would name another pipeline's stored parts (`p/<pipeline>\0…`).
        let e = decode_sensor(Some(b"p1\0xa"), Some(br#"{"pipelineId":"p1\u0000xa","key":"k"}"#)).unwrap_err();
        assert!(e.to_string().contains("control characters"), "{e}");
    }

    #[test]
    fn a_sensor_key_cannot_name_another_readings_slot() {
        // Undated, it would be kept where `rows` dated 2026-11-21 is, and replace it.
        let e = sensor(r#"{"pipelineId":"p1","key":"rows@2026-11-21"}"#).unwrap_err();
        assert!(e.to_string().contains("'@'"), "{e}");
        assert!(sensor(r#"{"pipelineId":"p1","key":"rows","date":"2026-11-21"}"#).is_ok());
    }

    /// A field that reaches a stored key, a changelog key or an event is bounded at decode,
    /// and the error names the field and sizes without quoting the value: a 1,040,000-byte
    /// run id once made an event and a changelog record no broker takes.
    #[test]
    fn fields_over_their_bounds_are_refused_naming_the_field_without_quoting_it() {
        let long = |n: usize| "x".repeat(n);
        let job = |run_id: &str| {
            let json = json!({"pipelineId": "p1", "scheduleId": "stream", "date": "2026-03-03",
                "runId": run_id, "status": "failed", "timestamp": "2026-03-03T05:00:00Z"});
            decode_job(Some(b"p1"), Some(json.to_string().as_bytes()))
        };
        assert!(job(&long(bounds::RUN_ID_BYTES)).is_ok());
        let e = job(&long(1_040_000)).unwrap_err();
        assert_eq!(e.rejection(), Rejection::TooLarge);
        let text = e.to_string();
        assert!(
            text.starts_with("runId is 1040000 bytes, over the limit of 1024"),
            "{text}"
        );
        assert!(text.len() < 100);

        let e = sensor(&json!({"pipelineId": "p1", "key": long(600_000)}).to_string()).unwrap_err();
        assert!(matches!(e, InputError::TooLong { field: "key", .. }), "{e}");
        let key = long(bounds::ID_BYTES + 1);
        let e = decode_sensor(
            Some(key.as_bytes()),
            Some(json!({"pipelineId": key, "key": "k"}).to_string().as_bytes()),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                InputError::TooLong {
                    field: "pipelineId",
                    ..
                }
            ),
            "{e}"
        );
        // A mismatch with a huge key would quote it: the key's size is checked first.
        let e = decode_sensor(
            Some(long(900_000).as_bytes()),
            Some(br#"{"pipelineId":"p1","key":"k"}"#),
        )
        .unwrap_err();
        assert!(matches!(e, InputError::TooLong { field: "key", .. }), "{e}");
        assert!(decode_config(Some(long(300).as_bytes()), Some(b"{}")).is_err());
        assert!(rejected_pipeline(Some(long(900_000).as_bytes())).len() < 300);

        let command = |field: &str, value: &str| {
            let mut json = json!({"pipelineId": "p1", "command": "rerun", "date": "2026-03-03"});
            json[field] = json!(value);
            decode_command(Some(b"p1"), Some(json.to_string().as_bytes()))
        };
        for (field, limit) in [
            ("scheduleId", bounds::ID_BYTES),
            ("reason", bounds::TEXT_BYTES),
            ("requestedBy", bounds::REQUESTED_BY_BYTES),
        ] {
            assert!(command(field, &long(limit)).is_ok(), "{field}");
            let e = command(field, &long(limit + 1)).unwrap_err();
            assert!(matches!(e, InputError::TooLong { field: f, .. } if f == field), "{e}");
        }
    }

    #[test]
    fn sensor_dates_come_from_the_record_or_its_data() {
        // A timestamp in the data counts for its day, as written; in the record's own field
        // it is refused (that field is a day).
        let r = sensor(r#"{"pipelineId":"p1","key":"k","data":{"date":"2026-03-03T23:30:00-05:00"}}"#).unwrap();
        assert_eq!(r.date, NaiveDate::from_ymd_opt(2026, 3, 3));
        let r = sensor(r#"{"pipelineId":"p1","key":"k","data":{"date":"2026-03-04T01:02:03.5"}}"#).unwrap();
        assert_eq!(r.date, NaiveDate::from_ymd_opt(2026, 3, 4));
        assert!(sensor(r#"{"pipelineId":"p1","key":"k","date":"2026-03-03T23:30:00Z"}"#).is_err());
        assert!(sensor(r#"{"pipelineId":"p1","key":"k","data":{"date":"yesterday"}}"#).is_err());
        let r = sensor(r#"{"pipelineId":"p1","key":"k","data":{"date":"20260303","hour":"07"}}"#).unwrap();
        assert_eq!(r.date, NaiveDate::from_ymd_opt(2026, 3, 3));
        assert_eq!(r.hour, Some(7));
    }

    /// The earlier design's producers wrote `date` and `hour` in the data, in forms it read
    /// its own way (interlock `ResolveExecutionDate`): only a two-digit string is an hour
    /// there; a number or one digit left the run daily. A numeric date names its day.
    #[test]
    fn dates_and_hours_in_the_data_read_as_the_earlier_design_read_them() {
        let day = NaiveDate::from_ymd_opt(2026, 3, 3);
        for data in [
            r#"{"date":"2026-03-03","hour":7}"#,
            r#"{"date":"2026-03-03","hour":"7"}"#,
            r#"{"date":20260303,"hour":7}"#,
        ] {
            let r = sensor(&format!(r#"{{"pipelineId":"p1","key":"k","data":{data}}}"#)).unwrap();
            assert_eq!((r.date, r.hour), (day, None), "{data}");
        }
        let r = sensor(r#"{"pipelineId":"p1","key":"k","data":{"date":20260303,"hour":"07"}}"#).unwrap();
        assert_eq!((r.date, r.hour), (day, Some(7)));
        // The record's own fields are Sluice's: a number is an hour there.
        let r = sensor(r#"{"pipelineId":"p1","key":"k","date":"2026-03-03","hour":7}"#).unwrap();
        assert_eq!((r.date, r.hour), (day, Some(7)));
        // Not a day or an hour at all: refused, not run as today's.
        for data in [
            r#"{"date":2026033}"#,
            r#"{"date":20261399}"#,
            r#"{"date":-1}"#,
            r#"{"hour":"24"}"#,
        ] {
            assert!(
                sensor(&format!(r#"{{"pipelineId":"p1","key":"k","data":{data}}}"#)).is_err(),
                "{data}"
            );
        }
        let r = sensor(r#"{"pipelineId":"p1","key":"k","date":"2026-03-04","timestamp":1772582400}"#).unwrap();
        assert_eq!(r.date, NaiveDate::from_ymd_opt(2026, 3, 4));
        assert_eq!(r.timestamp.unwrap().to_rfc3339(), "2026-03-04T00:00:00+00:00");
    }

    #[test]
    fn per_period_sensor_keys_scope_the_reading_to_their_date_and_hour() {
        let day = NaiveDate::from_ymd_opt(2026, 11, 23);
        for (key, hour) in [
            ("rows#2026-11-23", None),
            ("rows#20261123", None),
            ("rows#2026-11-23T05", Some(5)),
            ("rows#20261123T05", Some(5)),
        ] {
            let r = sensor(&format!(r#"{{"pipelineId":"p1","key":"{key}","data":{{"count":1}}}}"#)).unwrap();
            assert_eq!((r.key.as_str(), r.date, r.hour), ("rows", day, hour), "{key}");
        }
        // A date or hour field that agrees is fine; the key's hour joins a daily date field.
        let r = sensor(r#"{"pipelineId":"p1","key":"rows#20261123","date":"2026-11-23","hour":7}"#).unwrap();
        assert_eq!((r.key.as_str(), r.date, r.hour), ("rows", day, Some(7)));
        let r = sensor(r#"{"pipelineId":"p1","key":"rows#20261123T05","data":{"date":"20261123"}}"#).unwrap();
        assert_eq!((r.key.as_str(), r.hour), ("rows", Some(5)));
    }

    #[test]
    fn per_period_sensor_keys_never_count_for_another_date() {
        let err = sensor(r#"{"pipelineId":"p1","key":"rows#2026-11-23","date":"2026-11-22"}"#).unwrap_err();
        assert!(err.to_string().contains("names its period in the key"), "{err}");
        let err = sensor(r#"{"pipelineId":"p1","key":"rows#2026-11-23T05","hour":6}"#).unwrap_err();
        assert!(err.to_string().contains("2026-11-23T05"), "{err}");
    }

    #[test]
    fn sensor_keys_with_a_hash_that_is_not_a_period_stay_as_they_are() {
        for key in [
            "rows#v2",
            "rows#2026",
            "rows#2026-13-01",
            "rows#20261123T5",
            "#2026-11-23",
            "a#b#c",
        ] {
            let r = sensor(&format!(r#"{{"pipelineId":"p1","key":"{key}"}}"#)).unwrap();
            assert_eq!((r.key.as_str(), r.date), (key, None), "{key}");
        }
        let r = sensor(r#"{"pipelineId":"p1","key":"a#b#2026-11-23"}"#).unwrap();
        assert_eq!(r.key, "a#b");
    }

    #[test]
    fn malformed_sensors_say_why() {
        assert_eq!(decode_sensor(Some(b"p1"), None), Err(InputError::Empty));
        assert!(matches!(sensor("{not json"), Err(InputError::NotJson(_))));
        assert!(matches!(sensor(r#"{"pipelineId":"p1"}"#), Err(InputError::Schema(m)) if m.contains("key")));
        assert!(matches!(
            sensor(r#"{"pipelineId":"p1","key":"k","data":[1]}"#),
            Err(InputError::Schema(_))
        ));
        assert!(matches!(
            sensor(r#"{"pipelineId":"p2","key":"k"}"#),
            Err(InputError::KeyMismatch { .. })
        ));
        assert!(matches!(
            sensor(r#"{"pipelineId":"p1","key":"k","date":"03/03/2026"}"#),
            Err(InputError::Invalid { field: "date", .. })
        ));
        assert!(matches!(
            sensor(r#"{"pipelineId":"p1","key":"k","date":"2026-03-03","hour":24}"#),
            Err(InputError::Invalid { field: "hour", .. })
        ));
    }

    #[test]
    fn job_records_normalise_their_date() {
        let json = r#"{"pipelineId":"p1","scheduleId":"stream","date":"20260303T05","runId":"r","status":"failed","failureCategory":"PERMANENT","timestamp":"2026-03-03T05:00:00Z"}"#;
        let r = decode_job(Some(b"p1"), Some(json.as_bytes())).unwrap();
        assert_eq!(r.execution.date_text(), "2026-03-03T05");
        assert_eq!(r.execution.schedule(), "stream");
        assert_eq!(r.failure_category, Some(FailureCategory::Permanent));
        let bad = json.replace("failed", "exploded");
        assert!(matches!(
            decode_job(Some(b"p1"), Some(bad.as_bytes())),
            Err(InputError::Schema(_))
        ));
    }

    fn command(json: Value) -> Result<Command, InputError> {
        decode_command(Some(b"p1"), Some(json.to_string().as_bytes()))
    }

    #[test]
    fn a_rerun_carries_its_date_made_canonical() {
        let c = command(json!({"pipelineId": "p1", "command": "rerun", "date": "20260303T5",
            "reason": "fixed the join", "requestedBy": "ops", "force": true}))
        .unwrap();
        let date = ExecutionDate::hourly(NaiveDate::from_ymd_opt(2026, 3, 3).unwrap(), 5);
        assert_eq!(
            c,
            Command {
                pipeline_id: "p1".into(),
                requested_by: Some("ops".into()),
                kind: CommandOf::Rerun(Rerun {
                    execution: NamedExecution {
                        schedule_id: None,
                        date
                    },
                    reason: Some("fixed the join".into()),
                    force: true,
                    backfill: false,
                }),
            }
        );
        // Events quote it as the record's normalised text was quoted.
        assert_eq!(date.to_string(), "2026-03-03T05");
    }

    #[test]
    fn a_subscription_needs_its_subscriber_and_a_subscribe_its_key() {
        let e = command(json!({"pipelineId": "p1", "command": "subscribe"})).unwrap_err();
        assert_eq!(e.to_string(), "subscriber: is required for subscriptions");
        assert_eq!(e.rejection(), Rejection::Invalid);
        let e = command(json!({"pipelineId": "p1", "command": "unsubscribe", "subscriber": ""})).unwrap_err();
        assert_eq!(e.to_string(), "subscriber: is required for subscriptions");
        let e = command(json!({"pipelineId": "p1", "command": "subscribe", "subscriber": "p2"})).unwrap_err();
        assert_eq!(e.to_string(), "key: is required for subscribe");
        let c = command(json!({"pipelineId": "p1", "command": "unsubscribe", "subscriber": "p2"})).unwrap();
        assert_eq!(
            c.kind,
            CommandOf::Unsubscribe {
                subscriber: "p2".into()
            }
        );
    }

    #[test]
    fn a_cancel_of_no_date_is_refused_naming_the_date() {
        for date in [json!("03/03/2026"), json!("2026-03-03T24"), json!("")] {
            let e = command(json!({"pipelineId": "p1", "command": "cancel", "date": date})).unwrap_err();
            assert!(matches!(e, InputError::Invalid { field: "date", .. }), "{e}");
        }
        let e = command(json!({"pipelineId": "p1", "command": "cancel"})).unwrap_err();
        assert_eq!(e.to_string(), r#"date: "" is not YYYY-MM-DD or YYYY-MM-DDTHH"#);
    }

    #[test]
    fn records_off_their_pipelines_partition_are_refused() {
        let owner = crate::core::partitioning::partition_for(b"p1", 3);
        assert_eq!(check_partition(Some(b"p1"), owner, 3), Ok(()));
        let wrong = check_partition(Some(b"p1"), PartitionId::new((owner.number() + 1) % 3), 3);
        assert!(matches!(wrong, Err(InputError::WrongPartition { owner: o, .. }) if o == owner));
    }

    #[test]
    fn config_tombstones_delete() {
        assert_eq!(
            decode_config(Some(b"p1"), None),
            Ok(ConfigRecord::Delete {
                pipeline_id: "p1".into()
            })
        );
        assert!(decode_config(None, Some(b"{}")).is_err());
    }
}
