//! What an event says beyond its message: one shape per kind of decision, typed where the
//! decider makes it, published as the free map `Event.detail` (consumers and the Avro and
//! JSON schemas read it as one). The keys and values are the wire contract: a field that is
//! `null` today stays present, one that is left out stays absent.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::EventType;
use crate::core::config::{JobKind, Problem};
use crate::core::execution::{ExecutionDate, RunId};
use crate::core::history::Basis;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::Flip;
use crate::core::records::{FailureCategory, JobStatus};
use crate::core::rules::RuleResult;

macro_rules! details {
    ($($(#[$doc:meta])* $variant:ident($payload:ty),)*) => {
        /// The detail of an event, by shape. Serialised as its payload alone (untagged): the
        /// event's type says what it is.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum Detail {
            $($(#[$doc])* $variant($payload),)*
        }

        $(impl From<$payload> for Detail {
            fn from(payload: $payload) -> Detail {
                Detail::$variant(payload)
            }
        })*
    };
}

details! {
    /// INPUT_REJECTED.
    Rejected(Rejected),
    /// CONFIG_ACCEPTED of a config put.
    ConfigAccepted(ConfigAccepted),
    /// CONFIG_ACCEPTED of a config deleted.
    ConfigDeleted(ConfigDeleted),
    /// CONFIG_REJECTED.
    ConfigRejected(ConfigRejected),
    /// VALIDATION_PASSED / VALIDATION_WARNED / VALIDATION_EXHAUSTED, POST_RUN_PASSED /
    /// POST_RUN_WARNED / POST_RUN_FAILED.
    Results(Results),
    /// INFRA_FAILURE of a job config that does not render, PIPELINE_EXCLUDED.
    Reason(Reason),
    /// DRY_RUN_WOULD_TRIGGER.
    WouldTrigger(WouldTrigger),
    /// JOB_TRIGGERED, JOB_COMPLETED, JOB_REPORT_AFTER_END: the job's report as it came.
    Report(Report),
    /// JOB_FAILED / JOB_TIMEOUT.
    JobFailed(JobFailed),
    /// INFRA_FAILURE reported by the executor.
    JobInfraFailure(JobInfraFailure),
    /// JOB_STATUS_UNKNOWN.
    StatusUnknown(StatusUnknown),
    /// DRY_RUN_COMPLETED.
    DryRunCompleted(DryRunCompleted),
    /// DRY_RUN_WOULD_RETRY / DRY_RUN_RETRY_EXHAUSTED.
    DryRunRetry(DryRunRetry),
    /// RETRY_EXHAUSTED.
    RetryExhausted(RetryExhausted),
    /// JOB_POLL_EXHAUSTED.
    PollExhausted(PollExhausted),
    /// STALE_RUN.
    StaleRun(StaleRun),
    /// RUN_CANCELLED.
    Cancelled(Cancelled),
    /// RERUN_REJECTED / DRY_RUN_RERUN_REJECTED of a `rerun` command.
    RerunRejected(RerunRejected),
    /// RERUN_ACCEPTED / DRY_RUN_WOULD_RERUN of a `rerun` command.
    RerunAccepted(RerunAccepted),
    /// RERUN_REJECTED of a rerun on the drift budget.
    DriftRerunRejected(DriftRerunRejected),
    /// RERUN_ACCEPTED of a rerun on the drift budget.
    DriftRerunAccepted(DriftRerunAccepted),
    /// SCHEDULE_MISSED of a cron occurrence started late.
    StartedLate(StartedLate),
    /// SCHEDULE_MISSED of a cron time that a trigger sensor should have started.
    NotStarted(NotStarted),
    /// SCHEDULE_MISSED / IRREGULAR_SCHEDULE_MISSED at a date's expected start.
    StartMissed(StartMissed),
    /// SENSOR_DEADLINE_EXPIRED.
    TriggerWindowClosed(TriggerWindowClosed),
    /// TRIGGER_RECOVERED, LATE_DATA_ARRIVAL / DRY_RUN_LATE_DATA.
    Sensor(Sensor),
    /// UNKNOWN_SENSOR.
    UnknownSensor(UnknownSensor),
    /// SENSOR_FLAPPING.
    Flapping(Flapping),
    /// STALE_SENSOR_WARNING.
    StaleSensor(StaleSensor),
    /// POST_RUN_BASELINE_CAPTURED.
    Baseline(Baseline),
    /// POST_RUN_DRIFT_INFLIGHT.
    Drift(Drift),
    /// POST_RUN_DRIFT / DRY_RUN_DRIFT.
    DriftAfterRun(DriftAfterRun),
    /// POST_RUN_SENSOR_MISSING.
    SensorsMissing(SensorsMissing),
    /// SLA_WARNING / SLA_BREACH.
    SlaAlert(SlaAlert),
    /// RELATIVE_SLA_WARNING / RELATIVE_SLA_BREACH.
    RelativeSla(RelativeSla),
    /// EVALUATION_SLA_WARNING / EVALUATION_SLA_BREACH.
    EvaluationDeadline(EvaluationDeadline),
    /// SLA_MET.
    SlaMet(SlaMet),
    /// DRY_RUN_SLA_PROJECTION.
    SlaProjection(SlaProjection),
    /// SLA_RECOVERED.
    Forecast(Forecast),
    /// SLA_AT_RISK.
    AtRisk(AtRisk),
    /// DRY_RUN_WOULD_REPORT: another event's detail, naming its type.
    WouldReport(WouldReport),
}

impl Detail {
    /// The map published as `Event.detail`.
    pub fn into_map(self) -> Map<String, Value> {
        self.to_map()
    }

    fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // Every payload is a struct of plain fields (the tests serialise each one).
            other => {
                debug_assert!(false, "a detail that is no map: {other:?}");
                Map::new()
            }
        }
    }
}

/// A field written only when true.
fn is_false(flag: &bool) -> bool {
    !flag
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// What the record was (`config gold`, `job report RUN`, ...).
    pub source: String,
    pub error: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigAccepted {
    pub warnings: Vec<String>,
    /// Whether a config was in force before.
    pub replaced: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigDeleted {
    /// Always true: what tells a deletion from a put, both CONFIG_ACCEPTED.
    pub deleted: bool,
    pub had_config: bool,
    pub kept_executions: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRejected {
    pub problems: Vec<Problem>,
    pub previous_config_kept: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Results {
    pub results: Vec<RuleResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WouldTrigger {
    pub job_type: JobKind,
}

/// A job report's own fields, which every event about the report starts with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub status: JobStatus,
    /// The job system's own, free-form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobFailed {
    #[serde(flatten)]
    pub report: Report,
    pub failure_category: FailureCategory,
    pub will_retry: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobInfraFailure {
    #[serde(flatten)]
    pub report: Report,
    pub failure_category: FailureCategory,
    pub restart_on_trigger: bool,
    pub infra_failures: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusUnknown {
    #[serde(flatten)]
    pub report: Report,
    pub failure_category: FailureCategory,
    pub unanswered_checks: u32,
    pub next_check_at: DateTime<Utc>,
    /// The question was refused: a person must act.
    pub action_needed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunCompleted {
    #[serde(flatten)]
    pub report: Report,
    /// `null` without a deadline.
    pub sla: Option<SlaVerdict>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunRetry {
    #[serde(flatten)]
    pub report: Report,
    pub failure_category: FailureCategory,
    pub budget: RetryBudget,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryExhausted {
    pub budget: RetryBudget,
    pub limit: u32,
    pub used: u32,
    pub restart_on_trigger: bool,
    /// Only when the date was released for its next trigger sensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_releases: Option<u32>,
}

/// Which retry setting a failure spends: PERMANENT failures `maxCodeRetries`, the rest
/// `maxRetries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RetryBudget {
    MaxRetries,
    MaxCodeRetries,
}

impl fmt::Display for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryBudget::MaxRetries => "maxRetries",
            RetryBudget::MaxCodeRetries => "maxCodeRetries",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PollExhausted {
    pub poll_window_seconds: i64,
    pub will_watch_on: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleRun {
    pub phase: String,
    pub since: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cancelled {
    pub phase: String,
    pub run_id: Option<RunId>,
    pub requested_by: Option<String>,
    pub reason: Option<String>,
}

/// Who asked for a rerun and how, as every rerun event starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RerunRequest {
    pub requested_by: Option<String>,
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub backfill: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RerunRejected {
    #[serde(flatten)]
    pub request: RerunRequest,
    pub rejection: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RerunAccepted {
    #[serde(flatten)]
    pub request: RerunRequest,
    pub manual_reruns_used: u32,
    pub max_manual_reruns: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftRerunRejected {
    #[serde(flatten)]
    pub request: RerunRequest,
    pub max_drift_reruns: u32,
    pub rejection: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftRerunAccepted {
    #[serde(flatten)]
    pub request: RerunRequest,
    pub max_drift_reruns: u32,
    pub drift_reruns_used: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartedLate {
    pub expected_at: DateTime<Utc>,
    pub late_by_seconds: i64,
    /// Always true (it runs now), against [`NotStarted`]'s false.
    pub started: bool,
    pub later_occurrences_skipped: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotStarted {
    pub expected_at: DateTime<Utc>,
    /// Always false, against [`StartedLate`]'s true.
    pub started: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartMissed {
    pub expected_date: ExecutionDate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerWindowClosed {
    pub rerun_command: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sensor {
    pub sensor: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnknownSensor {
    pub key: String,
    pub known_keys: Vec<String>,
    /// `null` when no known key is near.
    pub did_you_mean: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flapping {
    pub key: String,
    pub changes: usize,
    pub window_seconds: i64,
    pub values: Vec<Flip>,
    /// `null` when a flapping sensor does not hold the trigger back.
    pub hold_for_seconds: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleSensor {
    pub key: String,
    pub last_update: DateTime<Utc>,
    pub silent_seconds: f64,
    pub usual_interval_seconds: f64,
    pub window_closes_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// Each post-run sensor's reading by key: sensor data, free-form.
    pub baseline: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub sensor: String,
    pub field: String,
    pub baseline: f64,
    pub current: f64,
    pub delta: f64,
    pub threshold: f64,
}

impl Drift {
    pub fn new(sensor: &str, field: &str, baseline: f64, current: f64, threshold: f64) -> Drift {
        Drift {
            sensor: sensor.into(),
            field: field.into(),
            baseline,
            current,
            delta: current - baseline,
            threshold,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftAfterRun {
    #[serde(flatten)]
    pub drift: Drift,
    pub rerun: bool,
    pub max_drift_reruns: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SensorsMissing {
    pub sensors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlaAlert {
    pub deadline: DateTime<Utc>,
    pub expected_duration_seconds: Option<i64>,
    /// The execution's phase, `notStarted` without one.
    pub phase: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelativeSla {
    pub first_sensor_at: DateTime<Utc>,
    pub max_duration_seconds: i64,
    pub elapsed_seconds: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationDeadline {
    pub deadline: DateTime<Utc>,
    pub evaluation_began: DateTime<Utc>,
    pub window_closes_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlaMet {
    pub deadline: DateTime<Utc>,
    pub margin_seconds: i64,
    pub warned: bool,
    pub at_risk: bool,
}

/// Whether a completion at some moment meets the SLA deadline, and by how much.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlaVerdict {
    pub deadline: DateTime<Utc>,
    pub met: bool,
    pub margin_seconds: i64,
    pub status: SlaOutcome,
}

impl SlaVerdict {
    /// The verdict on a completion at `at`.
    pub fn at(deadline: DateTime<Utc>, at: DateTime<Utc>) -> SlaVerdict {
        let met = at <= deadline;
        SlaVerdict {
            deadline,
            met,
            margin_seconds: (deadline - at).num_seconds(),
            status: if met { SlaOutcome::Met } else { SlaOutcome::Breach },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlaOutcome {
    Met,
    Breach,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlaProjection {
    #[serde(flatten)]
    pub verdict: SlaVerdict,
    pub projected_completion: DateTime<Utc>,
}

/// An SLA forecast's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    pub deadline: DateTime<Utc>,
    pub projected_completion: DateTime<Utc>,
    pub margin_seconds: i64,
    pub basis: Basis,
    pub runs: usize,
    pub p90_duration_seconds: Option<i64>,
    pub usual_trigger_at: DateTime<Utc>,
    /// `null` (as `elapsedSeconds`) before the job's first trigger.
    pub triggered_at: Option<DateTime<Utc>>,
    pub elapsed_seconds: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AtRisk {
    #[serde(flatten)]
    pub forecast: Forecast,
    /// The sensor keys the date waits for before its job runs.
    pub waiting_for: Vec<String>,
    /// The upstream pipelines among them that are late.
    pub upstreams: Vec<PipelineId>,
}

/// A dry run's stand-in for an event it does not publish: that event's detail and
/// `wouldReport`, its type. Serialise only: which shape the rest has is known from the
/// decision, not from the map.
#[derive(Debug, Clone, PartialEq)]
pub struct WouldReport {
    pub would_report: EventType,
    pub detail: Box<Detail>,
}

/// By hand: a derived `#[serde(flatten)]` of a `Detail` inside a `Detail` instantiates
/// serialisers without end.
impl Serialize for WouldReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = self.detail.to_map();
        map.insert("wouldReport".into(), Value::from(self.would_report.name()));
        map.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;
    use crate::core::config::Severity;

    fn at(hour: u32, minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, hour, minute, 0).unwrap()
    }

    /// `payload` is published as `wire` (what the decider's map said before it was typed),
    /// and reads back from it.
    fn same<T>(payload: T, wire: Value)
    where
        T: Into<Detail> + Clone + PartialEq + fmt::Debug + DeserializeOwned,
    {
        let map = payload.clone().into().into_map();
        assert_eq!(Value::Object(map), wire);
        assert_eq!(serde_json::from_value::<T>(wire).unwrap(), payload);
    }

    fn report(status: JobStatus) -> Report {
        Report {
            status,
            metadata: Some(json!({"handle": {"jobRunId": "jr_1"}, "tries": 2})),
            job_message: Some("boom".into()),
        }
    }

    fn rule(passed: bool) -> RuleResult {
        RuleResult {
            key: "row-count".into(),
            check: "gte".into(),
            field: Some("count".into()),
            passed,
            seen: Some(json!(5)),
            reason: (!passed).then(|| "5 < 10".into()),
            severity: Severity::Warn,
        }
    }

    fn request(force: bool, backfill: bool) -> RerunRequest {
        RerunRequest {
            requested_by: Some("ana".into()),
            reason: None,
            force,
            backfill,
        }
    }

    fn forecast(triggered: bool) -> Forecast {
        Forecast {
            deadline: at(15, 0),
            projected_completion: at(15, 30),
            margin_seconds: -1800,
            basis: if triggered { Basis::Running } else { Basis::UsualTrigger },
            runs: 7,
            p90_duration_seconds: triggered.then_some(3600),
            usual_trigger_at: at(13, 0),
            triggered_at: triggered.then(|| at(14, 0)),
            elapsed_seconds: triggered.then_some(600),
        }
    }

    #[test]
    fn input_and_config_details() {
        same(
            Rejected {
                source: "config gold".into(),
                error: "not JSON".into(),
            },
            json!({"source": "config gold", "error": "not JSON"}),
        );
        same(
            ConfigAccepted {
                warnings: vec!["job.x: unknown".into()],
                replaced: true,
            },
            json!({"warnings": ["job.x: unknown"], "replaced": true}),
        );
        same(
            ConfigDeleted {
                deleted: true,
                had_config: true,
                kept_executions: 2,
            },
            json!({"deleted": true, "hadConfig": true, "keptExecutions": 2}),
        );
        same(
            ConfigRejected {
                problems: vec![Problem {
                    path: "schedule.cron".into(),
                    reason: "not a cron".into(),
                }],
                previous_config_kept: false,
            },
            json!({"problems": [{"path": "schedule.cron", "reason": "not a cron"}], "previousConfigKept": false}),
        );
    }

    #[test]
    fn evaluation_details() {
        same(
            Results {
                results: vec![rule(true), rule(false)],
            },
            json!({"results": [
                {"key": "row-count", "check": "gte", "field": "count", "passed": true, "seen": 5, "severity": "warn"},
                {"key": "row-count", "check": "gte", "field": "count", "passed": false, "seen": 5, "reason": "5 < 10", "severity": "warn"},
            ]}),
        );
        same(
            Reason {
                reason: "job config does not render: no var".into(),
            },
            json!({"reason": "job config does not render: no var"}),
        );
        for kind in JobKind::names() {
            same(
                WouldTrigger {
                    job_type: JobKind::parse(kind).unwrap(),
                },
                json!({ "jobType": kind }),
            );
        }
    }

    #[test]
    fn job_details() {
        same(
            Report {
                status: JobStatus::Running,
                metadata: None,
                job_message: None,
            },
            json!({"status": "running"}),
        );
        same(
            report(JobStatus::Succeeded),
            json!({"status": "succeeded", "metadata": {"handle": {"jobRunId": "jr_1"}, "tries": 2}, "jobMessage": "boom"}),
        );
        same(
            JobFailed {
                report: report(JobStatus::Timeout),
                failure_category: FailureCategory::Timeout,
                will_retry: true,
            },
            json!({"status": "timeout", "metadata": {"handle": {"jobRunId": "jr_1"}, "tries": 2}, "jobMessage": "boom",
                   "failureCategory": "TIMEOUT", "willRetry": true}),
        );
        same(
            JobInfraFailure {
                report: Report {
                    status: JobStatus::Failed,
                    metadata: None,
                    job_message: Some("unreachable".into()),
                },
                failure_category: FailureCategory::Infra,
                restart_on_trigger: true,
                infra_failures: 1,
            },
            json!({"status": "failed", "jobMessage": "unreachable", "failureCategory": "INFRA",
                   "restartOnTrigger": true, "infraFailures": 1}),
        );
        same(
            StatusUnknown {
                report: Report {
                    status: JobStatus::Unknown,
                    metadata: None,
                    job_message: None,
                },
                failure_category: FailureCategory::Permanent,
                unanswered_checks: 3,
                next_check_at: at(12, 5),
                action_needed: true,
            },
            json!({"status": "unknown", "failureCategory": "PERMANENT", "unansweredChecks": 3,
                   "nextCheckAt": "2026-11-22T12:05:00Z", "actionNeeded": true}),
        );
        same(
            RetryExhausted {
                budget: RetryBudget::MaxCodeRetries,
                limit: 2,
                used: 2,
                restart_on_trigger: false,
                trigger_releases: None,
            },
            json!({"budget": "maxCodeRetries", "limit": 2, "used": 2, "restartOnTrigger": false}),
        );
        same(
            RetryExhausted {
                budget: RetryBudget::MaxRetries,
                limit: 3,
                used: 3,
                restart_on_trigger: true,
                trigger_releases: Some(1),
            },
            json!({"budget": "maxRetries", "limit": 3, "used": 3, "restartOnTrigger": true, "triggerReleases": 1}),
        );
        same(
            PollExhausted {
                poll_window_seconds: 3600,
                will_watch_on: false,
            },
            json!({"pollWindowSeconds": 3600, "willWatchOn": false}),
        );
        same(
            StaleRun {
                phase: "awaitingTrigger".into(),
                since: at(12, 0),
            },
            json!({"phase": "awaitingTrigger", "since": "2026-11-22T12:00:00Z"}),
        );
        assert_eq!(RetryBudget::MaxCodeRetries.to_string(), "maxCodeRetries");
    }

    #[test]
    fn dry_run_job_details() {
        same(
            DryRunCompleted {
                report: Report {
                    status: JobStatus::Succeeded,
                    metadata: None,
                    job_message: None,
                },
                sla: Some(SlaVerdict::at(at(15, 0), at(16, 0))),
            },
            json!({"status": "succeeded", "sla": {"deadline": "2026-11-22T15:00:00Z", "met": false,
                   "marginSeconds": -3600, "status": "breach"}}),
        );
        same(
            DryRunCompleted {
                report: Report {
                    status: JobStatus::Succeeded,
                    metadata: None,
                    job_message: None,
                },
                sla: None,
            },
            json!({"status": "succeeded", "sla": null}),
        );
        same(
            DryRunRetry {
                report: report(JobStatus::Failed),
                failure_category: FailureCategory::Transient,
                budget: RetryBudget::MaxRetries,
                limit: 0,
            },
            json!({"status": "failed", "metadata": {"handle": {"jobRunId": "jr_1"}, "tries": 2}, "jobMessage": "boom",
                   "failureCategory": "TRANSIENT", "budget": "maxRetries", "limit": 0}),
        );
    }

    #[test]
    fn command_details() {
        same(
            Cancelled {
                phase: "awaitingJob".into(),
                run_id: Some("gold.daily.2026-11-22.1".into()),
                requested_by: Some("ana".into()),
                reason: Some("wrong input".into()),
            },
            json!({"phase": "awaitingJob", "runId": "gold.daily.2026-11-22.1", "requestedBy": "ana", "reason": "wrong input"}),
        );
        same(
            Cancelled {
                phase: "awaitingRules".into(),
                run_id: None,
                requested_by: None,
                reason: None,
            },
            json!({"phase": "awaitingRules", "runId": null, "requestedBy": null, "reason": null}),
        );
        same(
            RerunRejected {
                request: request(true, false),
                rejection: "maxManualReruns (1) is spent".into(),
            },
            json!({"requestedBy": "ana", "reason": null, "force": true, "rejection": "maxManualReruns (1) is spent"}),
        );
        same(
            RerunAccepted {
                request: request(false, true),
                manual_reruns_used: 1,
                max_manual_reruns: 3,
            },
            json!({"requestedBy": "ana", "reason": null, "backfill": true, "manualRerunsUsed": 1, "maxManualReruns": 3}),
        );
        let drift = RerunRequest {
            requested_by: Some("sluice".into()),
            reason: Some("late data".into()),
            force: false,
            backfill: false,
        };
        same(
            DriftRerunRejected {
                request: drift.clone(),
                max_drift_reruns: 1,
                rejection: "maxDriftReruns (1) is spent".into(),
            },
            json!({"requestedBy": "sluice", "reason": "late data", "maxDriftReruns": 1,
                   "rejection": "maxDriftReruns (1) is spent"}),
        );
        same(
            DriftRerunAccepted {
                request: drift,
                max_drift_reruns: 2,
                drift_reruns_used: 1,
            },
            json!({"requestedBy": "sluice", "reason": "late data", "maxDriftReruns": 2, "driftRerunsUsed": 1}),
        );
    }

    #[test]
    fn schedule_details() {
        same(
            StartedLate {
                expected_at: at(13, 30),
                late_by_seconds: 5400,
                started: true,
                later_occurrences_skipped: 0,
            },
            json!({"expectedAt": "2026-11-22T13:30:00Z", "lateBySeconds": 5400, "started": true,
                   "laterOccurrencesSkipped": 0}),
        );
        same(
            NotStarted {
                expected_at: at(6, 0),
                started: false,
            },
            json!({"expectedAt": "2026-11-22T06:00:00Z", "started": false}),
        );
        same(
            StartMissed {
                expected_date: ExecutionDate::canonical("2026-11-22T05").unwrap(),
            },
            json!({"expectedDate": "2026-11-22T05"}),
        );
        same(
            TriggerWindowClosed {
                rerun_command: "sluice rerun gold 2026-11-22".into(),
            },
            json!({"rerunCommand": "sluice rerun gold 2026-11-22"}),
        );
        same(
            Sensor {
                sensor: "upstream".into(),
            },
            json!({"sensor": "upstream"}),
        );
    }

    #[test]
    fn sensor_details() {
        same(
            UnknownSensor {
                key: "row_count".into(),
                known_keys: vec!["row-count".into(), "upstream".into()],
                did_you_mean: None,
            },
            json!({"key": "row_count", "knownKeys": ["row-count", "upstream"], "didYouMean": null}),
        );
        same(
            Flapping {
                key: "row-count".into(),
                changes: 4,
                window_seconds: 600,
                values: vec![
                    Flip {
                        key: "row-count".into(),
                        at: at(12, 0),
                        passed: true,
                        seen: Some(json!(12)),
                    },
                    Flip {
                        key: "row-count".into(),
                        at: at(12, 1),
                        passed: false,
                        seen: None,
                    },
                ],
                hold_for_seconds: None,
            },
            json!({"key": "row-count", "changes": 4, "windowSeconds": 600, "holdForSeconds": null, "values": [
                {"key": "row-count", "at": "2026-11-22T12:00:00Z", "passed": true, "seen": 12},
                {"key": "row-count", "at": "2026-11-22T12:01:00Z", "passed": false},
            ]}),
        );
        same(
            StaleSensor {
                key: "row-count".into(),
                last_update: at(12, 0),
                silent_seconds: 600.0,
                usual_interval_seconds: 300.5,
                window_closes_at: at(13, 0),
            },
            json!({"key": "row-count", "lastUpdate": "2026-11-22T12:00:00Z", "silentSeconds": 600.0,
                   "usualIntervalSeconds": 300.5, "windowClosesAt": "2026-11-22T13:00:00Z"}),
        );
    }

    #[test]
    fn post_run_details() {
        let mut baseline = Map::new();
        baseline.insert("row-count".into(), json!({"count": 10}));
        same(Baseline { baseline }, json!({"baseline": {"row-count": {"count": 10}}}));
        let drift = Drift::new("row-count", "count", 10.0, 12.5, 1.0);
        let moved = json!({"sensor": "row-count", "field": "count", "baseline": 10.0, "current": 12.5,
                           "delta": 2.5, "threshold": 1.0});
        same(drift.clone(), moved.clone());
        let mut after = moved;
        after["rerun"] = json!(false);
        after["maxDriftReruns"] = json!(1);
        same(
            DriftAfterRun {
                drift,
                rerun: false,
                max_drift_reruns: 1,
            },
            after,
        );
        same(
            SensorsMissing {
                sensors: vec!["row-count".into()],
            },
            json!({"sensors": ["row-count"]}),
        );
    }

    #[test]
    fn sla_details() {
        same(
            SlaAlert {
                deadline: at(15, 0),
                expected_duration_seconds: None,
                phase: "notStarted".into(),
            },
            json!({"deadline": "2026-11-22T15:00:00Z", "expectedDurationSeconds": null, "phase": "notStarted"}),
        );
        same(
            RelativeSla {
                first_sensor_at: at(12, 0),
                max_duration_seconds: 3600,
                elapsed_seconds: 7200,
            },
            json!({"firstSensorAt": "2026-11-22T12:00:00Z", "maxDurationSeconds": 3600, "elapsedSeconds": 7200}),
        );
        same(
            EvaluationDeadline {
                deadline: at(14, 0),
                evaluation_began: at(12, 0),
                window_closes_at: at(18, 0),
            },
            json!({"deadline": "2026-11-22T14:00:00Z", "evaluationBegan": "2026-11-22T12:00:00Z",
                   "windowClosesAt": "2026-11-22T18:00:00Z"}),
        );
        same(
            SlaMet {
                deadline: at(15, 0),
                margin_seconds: 3600,
                warned: false,
                at_risk: true,
            },
            json!({"deadline": "2026-11-22T15:00:00Z", "marginSeconds": 3600, "warned": false, "atRisk": true}),
        );
        same(
            SlaProjection {
                verdict: SlaVerdict::at(at(15, 0), at(15, 0)),
                projected_completion: at(15, 0),
            },
            json!({"deadline": "2026-11-22T15:00:00Z", "met": true, "marginSeconds": 0, "status": "met",
                   "projectedCompletion": "2026-11-22T15:00:00Z"}),
        );
    }

    #[test]
    fn forecast_details() {
        same(
            forecast(false),
            json!({"deadline": "2026-11-22T15:00:00Z", "projectedCompletion": "2026-11-22T15:30:00Z",
                   "marginSeconds": -1800, "basis": "usualTrigger", "runs": 7, "p90DurationSeconds": null,
                   "usualTriggerAt": "2026-11-22T13:00:00Z", "triggeredAt": null, "elapsedSeconds": null}),
        );
        same(
            AtRisk {
                forecast: forecast(true),
                waiting_for: vec![],
                upstreams: vec!["bronze".into()],
            },
            json!({"deadline": "2026-11-22T15:00:00Z", "projectedCompletion": "2026-11-22T15:30:00Z",
                   "marginSeconds": -1800, "basis": "running", "runs": 7, "p90DurationSeconds": 3600,
                   "usualTriggerAt": "2026-11-22T13:00:00Z", "triggeredAt": "2026-11-22T14:00:00Z",
                   "elapsedSeconds": 600, "waitingFor": [], "upstreams": ["bronze"]}),
        );
    }

    #[test]
    fn a_dry_run_names_the_event_it_stands_for_beside_its_detail() {
        let wrapped = WouldReport {
            would_report: EventType::SCHEDULE_MISSED,
            detail: Box::new(
                NotStarted {
                    expected_at: at(6, 0),
                    started: false,
                }
                .into(),
            ),
        };
        assert_eq!(
            Value::Object(Detail::from(wrapped).into_map()),
            json!({"wouldReport": "SCHEDULE_MISSED", "expectedAt": "2026-11-22T06:00:00Z", "started": false})
        );
    }
}
