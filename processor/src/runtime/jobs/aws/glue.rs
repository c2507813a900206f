//! `glue` jobs: AWS Glue's JSON 1.1 API, `AWSGlue.StartJobRun` then `AWSGlue.GetJobRun`.
//!
//! Config: `jobName` (required); `arguments` (object → the run's `Arguments`, values
//! turned into strings); `workerType`, `numberOfWorkers`; `jobTimeoutMinutes` (Glue's own
//! `Timeout`: `timeout` stays the per-request HTTP timeout in seconds). Handle:
//! `{"jobName", "jobRunId"}`.
//!
//! Every run also gets Interlock's date arguments (internal/lambda/orchestrator/trigger.go:113-135):
//! `--par_day` (the execution day, `YYYYMMDD`) and, for an hourly run, `--par_hour` (`HH`),
//! each only when `arguments` does not set it already (Interlock overwrote it).
//!
//! StartJobRun has no idempotency key: a trigger retried after its answer was lost (a
//! timeout once the request had reached Glue) starts a second run. A job with
//! `MaxConcurrentRuns: 1` turns that second start into `ConcurrentRunsExceededException`,
//! which is retried like every concurrency limit ([`CallError::Infra`]) until the first run
//! ends, so keep jobs Sluice triggers on one concurrent run, or make them idempotent.
//!
//! States: STARTING, RUNNING, STOPPING and WAITING are running; SUCCEEDED succeeded; FAILED,
//! ERROR and STOPPED failed (TRANSIENT: the job's own retries apply, as in Interlock); TIMEOUT
//! timed out. Any state Glue adds later counts as running.
//!
//! A SUCCEEDED run is cross-checked as Interlock did (internal/trigger/glue.go): Glue reports
//! SUCCEEDED when a Spark driver exits 0 after a failure. CloudWatch Logs' FilterLogEvents
//! looks in the run's log group (`LogGroupName`, else `/aws-glue/jobs/logs-v2`) for a
//! `GlueExceptionAnalysisJobFailed` insight in `{runId}-job-insights-rca-driver`, then for
//! an ` ERROR ` or ` FATAL ` log4j line in the driver's output stream `{runId}`. Evidence
//! makes the run failed TRANSIENT, quoting it; no evidence, or logs that cannot be read (no
//! `logs:FilterLogEvents` permission, no such stream), leave it SUCCEEDED.

use serde_json::{json, Map, Value};

use super::{handle_field, Api, Service};
use crate::core::config::GlueJob;
use crate::core::records::FailureCategory;
use crate::runtime::jobs::{usable, Call, CallError, Outcome};

pub(super) static SERVICE: Service = Service {
    name: "Glue",
    prefix: "glue",
    signing_name: "glue",
    env_id: "GLUE",
};
pub(super) static LOGS: Service = Service {
    name: "CloudWatch Logs",
    prefix: "logs",
    signing_name: "logs",
    env_id: "CLOUDWATCH_LOGS",
};
const JSON: &str = "1.1";
/// Where Glue writes a run's logs unless the job says otherwise.
const DEFAULT_LOG_GROUP: &str = "/aws-glue/jobs/logs-v2";
/// log4j's severity markers in the driver's output; the spaces keep JVM flags such as
/// `-XX:OnOutOfMemoryError` out.
const DRIVER_FAILURE_PATTERN: &str = r#"?" ERROR " ?" FATAL ""#;
/// How much of a log line an outcome quotes.
const EVIDENCE_CHARS: usize = 200;

pub(super) async fn trigger(call: &Call<'_>, job: &GlueJob) -> Result<Outcome, CallError> {
    let job_name = &job.job_name;
    let input = start_input(call, job)?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let answer = api.json(JSON, "AWSGlue.StartJobRun", &input).await?;
    let run_id = answer
        .get("JobRunId")
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("StartJobRun", "a JobRunId", &answer))?;
    Ok(Outcome::running(json!({ "jobName": job_name, "jobRunId": run_id })).with("jobRunId", json!(run_id)))
}

pub(super) async fn status(call: &Call<'_>, job: &GlueJob, handle: &Value) -> Result<Outcome, CallError> {
    let job_name = handle_field(handle, "jobName")?;
    let run_id = handle_field(handle, "jobRunId")?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let input = json!({ "JobName": job_name, "RunId": run_id, "PredecessorsIncluded": false });
    let answer = api.json(JSON, "AWSGlue.GetJobRun", &input).await?;
    let run = &answer["JobRun"];
    let state = run
        .get("JobRunState")
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("GetJobRun", "a JobRun.JobRunState", &answer))?;
    let error = run.get("ErrorMessage").and_then(Value::as_str);
    let mut outcome = outcome(state, error, run_id, handle);
    if state == "SUCCEEDED" {
        let group = (run.get("LogGroupName").and_then(Value::as_str))
            .filter(|g| !g.is_empty())
            .unwrap_or(DEFAULT_LOG_GROUP);
        if let Some(evidence) = failure_evidence(call, job, group, run_id).await {
            outcome = Outcome::failed(
                Some(FailureCategory::Transient),
                format!("Glue job run {run_id} SUCCEEDED, but its logs say it failed ({evidence})"),
            );
        }
    }
    Ok(outcome.with("state", json!(state)).with("jobRunId", json!(run_id)))
}

/// Evidence in a SUCCEEDED run's logs that it failed, quoted; `None` when there is none or
/// the logs cannot be read.
async fn failure_evidence(call: &Call<'_>, job: &GlueJob, group: &str, run_id: &str) -> Option<String> {
    let api = Api::new(call, &job.aws, &LOGS).await.ok()?;
    let first_match = |stream: String, pattern: &str| {
        let input = json!({
            "logGroupName": group,
            "logStreamNames": [stream],
            "filterPattern": pattern,
            "limit": 1,
        });
        let api = &api;
        async move {
            match api.json(JSON, "Logs_20140328.FilterLogEvents", &input).await {
                Ok(answer) => answer["events"][0]["message"].as_str().map(|m| api.redact(m)),
                Err(e) => {
                    tracing::info!(run_id, error = %e, "could not read a Glue run's logs to cross-check its SUCCEEDED");
                    None
                }
            }
        }
    };
    if let Some(insight) = first_match(
        format!("{run_id}-job-insights-rca-driver"),
        "GlueExceptionAnalysisJobFailed",
    )
    .await
    {
        return Some(format!("RCA: {}", failure_reason(&insight).unwrap_or("JobFailed")));
    }
    let line = first_match(run_id.to_string(), DRIVER_FAILURE_PATTERN).await?;
    Some(format!(
        "driver log: {}",
        line.trim().chars().take(EVIDENCE_CHARS).collect::<String>()
    ))
}

/// The `"Failure Reason"` of a Glue RCA insight (a JSON line), bounded.
fn failure_reason(insight: &str) -> Option<&str> {
    const MARKER: &str = r#""Failure Reason":""#;
    let start = insight.find(MARKER)? + MARKER.len();
    let reason = &insight[start..];
    let reason = &reason[..reason.find('"')?];
    let end = reason
        .char_indices()
        .nth(EVIDENCE_CHARS)
        .map_or(reason.len(), |(i, _)| i);
    Some(&reason[..end])
}

/// StartJobRun's input from the job's config.
fn start_input(call: &Call<'_>, job: &GlueJob) -> Result<Value, CallError> {
    let mut input = Map::new();
    input.insert("JobName".into(), json!(job.job_name));
    let mut arguments: Map<String, Value> = usable(&job.arguments)?
        .iter()
        .flatten()
        .map(|(name, value)| {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (name.clone(), Value::String(value))
        })
        .collect();
    for (name, value) in call.date_arguments() {
        arguments.entry(format!("--{name}")).or_insert(Value::String(value));
    }
    input.insert("Arguments".into(), Value::Object(arguments));
    if let Some(worker_type) = usable(&job.worker_type)? {
        input.insert("WorkerType".into(), json!(worker_type));
    }
    if let Some(workers) = usable(&job.number_of_workers)? {
        input.insert("NumberOfWorkers".into(), json!(workers));
    }
    if let Some(minutes) = usable(&job.job_timeout_minutes)? {
        input.insert("Timeout".into(), json!(minutes));
    }
    Ok(Value::Object(input))
}

/// What a job run's state means for Sluice.
fn outcome(state: &str, error: Option<&str>, run_id: &str, handle: &Value) -> Outcome {
    let said = match error {
        Some(error) if !error.trim().is_empty() => format!("Glue job run {run_id} {state}: {}", error.trim()),
        _ => format!("Glue job run {run_id} {state}"),
    };
    match state {
        "SUCCEEDED" => Outcome::succeeded(said),
        "FAILED" | "ERROR" | "STOPPED" => Outcome::failed(None, said),
        "TIMEOUT" => Outcome::timed_out(said),
        // STARTING, RUNNING, STOPPING, WAITING, and whatever Glue adds.
        _ => Outcome::running(handle.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{JobKind, JobSettings};
    use crate::core::lifecycle::TriggerRequest;
    use crate::core::records::JobStatus;
    use crate::runtime::jobs::aws::testing::Parts;

    /// StartJobRun's input for the run `parts` describe.
    fn input_of(parts: &Parts) -> Result<Value, CallError> {
        let JobSettings::Glue(job) = parts.settings() else {
            unreachable!()
        };
        start_input(&parts.call(), job)
    }

    #[test]
    fn start_input_follows_the_config() {
        let parts = Parts::new(
            JobKind::Glue,
            json!({
                "jobName": "nightly",
                "arguments": {"--day": "2026-11-22", "--rows": 3, "--full": true},
                "workerType": "G.1X",
                "numberOfWorkers": 4,
                "jobTimeoutMinutes": 60,
                "timeout": 10
            }),
        );
        assert_eq!(
            input_of(&parts).unwrap(),
            json!({
                "JobName": "nightly",
                "Arguments": {"--day": "2026-11-22", "--rows": "3", "--full": "true", "--par_day": "20261122"},
                "WorkerType": "G.1X",
                "NumberOfWorkers": 4,
                "Timeout": 60
            })
        );
        let parts = Parts::new(JobKind::Glue, json!({"jobName": "nightly"}));
        assert_eq!(
            input_of(&parts).unwrap(),
            json!({"JobName": "nightly", "Arguments": {"--par_day": "20261122"}})
        );
        // Hourly: --par_hour too; a --par_day the config sets is left as it is.
        let config = json!({"jobName": "nightly", "arguments": {"--par_day": "custom"}});
        let mut parts = Parts::new(JobKind::Glue, config);
        parts.request = TriggerRequest::new(
            "p",
            &crate::core::execution::id("cron", "2026-03-03T10"),
            1,
            parts.request.config.clone(),
        );
        assert_eq!(
            input_of(&parts).unwrap()["Arguments"],
            json!({"--par_day": "custom", "--par_hour": "10"})
        );
        for bad in [
            json!({"jobName": "j", "arguments": ["--x"]}),
            json!({"jobName": "j", "numberOfWorkers": "four"}),
            json!({"jobName": "j", "workerType": 1}),
        ] {
            let parts = Parts::new(JobKind::Glue, bad.clone());
            assert!(matches!(input_of(&parts), Err(CallError::Permanent(_))), "{bad}");
        }
    }

    #[test]
    fn job_run_states_map_to_outcomes() {
        let handle = json!({"jobName": "j", "jobRunId": "jr_1"});
        for state in ["STARTING", "RUNNING", "STOPPING", "WAITING", "SOMETHING_NEW"] {
            assert_eq!(
                outcome(state, None, "jr_1", &handle),
                Outcome::running(handle.clone()),
                "{state}"
            );
        }
        assert_eq!(
            outcome("SUCCEEDED", None, "jr_1", &handle),
            Outcome::succeeded("Glue job run jr_1 SUCCEEDED")
        );
        let failed = outcome("FAILED", Some("NameError: x"), "jr_1", &handle);
        assert_eq!(failed, Outcome::failed(None, "Glue job run jr_1 FAILED: NameError: x"));
        assert_eq!(outcome("ERROR", None, "jr_1", &handle).status, JobStatus::Failed);
        assert_eq!(outcome("TIMEOUT", None, "jr_1", &handle).status, JobStatus::Timeout);
        // Interlock retried a stopped run like a failed one.
        let stopped = outcome("STOPPED", None, "jr_1", &handle);
        assert_eq!(stopped.status, JobStatus::Failed);
        assert_eq!(stopped.category, None);
    }

    #[test]
    fn an_rca_insight_gives_its_failure_reason() {
        let insight =
            r#"{"Event":"GlueExceptionAnalysisJobFailed","Failure Reason":"No space left on device","Stack Trace":[]}"#;
        assert_eq!(failure_reason(insight), Some("No space left on device"));
        assert_eq!(failure_reason(r#"{"Event":"GlueExceptionAnalysisJobFailed"}"#), None);
        let long = format!(r#"{{"Failure Reason":"{}"}}"#, "é".repeat(500));
        assert_eq!(failure_reason(&long).map(|r| r.chars().count()), Some(EVIDENCE_CHARS));
    }
}
