//! `emr-serverless` jobs: EMR Serverless's REST-JSON API, `POST
//! /applications/{applicationId}/jobruns` then `GET
//! /applications/{applicationId}/jobruns/{jobRunId}`.
//!
//! Config: `applicationId`, `executionRoleArn`, `jobDriver` (the API's object, e.g.
//! `{"sparkSubmit": {"entryPoint": "s3://..."}}`) are required; `configurationOverrides`
//! (object), `name` (default: the run id) and `jobTimeoutMinutes` (the run's
//! `executionTimeoutMinutes`) are optional. Handle: `{"applicationId", "jobRunId"}`.
//!
//! The run's `clientToken` is the Sluice run id (hashed when longer than the API's 64
//! characters), so a trigger requested again after a crash or a lost answer gets the same
//! job run back instead of a second one.
//!
//! States: SUBMITTED, PENDING, SCHEDULED, RUNNING and QUEUED are running; SUCCESS
//! succeeded; FAILED and CANCELLED failed (TRANSIENT, with `stateDetails`, as Interlock
//! categorised both). CANCELLING is running, as in Interlock: the run is still stopping, and a
//! retry now would start beside it.

use reqwest::Method;
use serde_json::{json, Map, Value};

use super::{fit, handle_field, label, Api, Service};
use crate::core::config::EmrServerlessJob;
use crate::runtime::jobs::{usable, Call, CallError, Outcome};

pub(super) static SERVICE: Service = Service {
    name: "EMR Serverless",
    prefix: "emr-serverless",
    signing_name: "emr-serverless",
    env_id: "EMR_SERVERLESS",
};
/// The API's limits on a client token and a job run name.
const TOKEN_LIMIT: usize = 64;
const NAME_LIMIT: usize = 256;

pub(super) async fn trigger(call: &Call<'_>, job: &EmrServerlessJob) -> Result<Outcome, CallError> {
    let application = job.application_id.as_str();
    let input = start_input(call, job)?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let path = format!("/applications/{}/jobruns", label(application));
    let answer = api.rest("StartJobRun", Method::POST, &path, Some(&input)).await?;
    let run_id = answer
        .get("jobRunId")
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("StartJobRun", "a jobRunId", &answer))?;
    let mut outcome =
        Outcome::running(json!({ "applicationId": application, "jobRunId": run_id })).with("jobRunId", json!(run_id));
    if let Some(arn) = answer.get("arn") {
        outcome = outcome.with("arn", arn.clone());
    }
    Ok(outcome)
}

pub(super) async fn status(call: &Call<'_>, job: &EmrServerlessJob, handle: &Value) -> Result<Outcome, CallError> {
    let application = handle_field(handle, "applicationId")?;
    let run_id = handle_field(handle, "jobRunId")?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let path = format!("/applications/{}/jobruns/{}", label(application), label(run_id));
    let answer = api.rest("GetJobRun", Method::GET, &path, None).await?;
    let run = &answer["jobRun"];
    let state = run
        .get("state")
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("GetJobRun", "a jobRun.state", &answer))?;
    let details = run.get("stateDetails").and_then(Value::as_str);
    Ok(outcome(state, details, run_id, handle)
        .with("state", json!(state))
        .with("jobRunId", json!(run_id)))
}

/// StartJobRun's body from the job's config.
fn start_input(call: &Call<'_>, job: &EmrServerlessJob) -> Result<Value, CallError> {
    let run_id = call.run_id();
    let name = match usable(&job.name)? {
        Some(name) => name.to_string(),
        None => fit(run_id, run_id.to_string(), NAME_LIMIT),
    };
    let mut input = Map::new();
    input.insert("clientToken".into(), json!(client_token(run_id)));
    input.insert("executionRoleArn".into(), json!(job.execution_role_arn));
    input.insert("jobDriver".into(), Value::Object(job.job_driver.clone()));
    input.insert("name".into(), json!(name));
    if let Some(overrides) = usable(&job.configuration_overrides)? {
        input.insert("configurationOverrides".into(), Value::Object(overrides.clone()));
    }
    if let Some(minutes) = usable(&job.job_timeout_minutes)? {
        input.insert("executionTimeoutMinutes".into(), json!(minutes));
    }
    Ok(Value::Object(input))
}

/// The idempotency token: the run id, or a stable shortening of it.
fn client_token(run_id: &str) -> String {
    fit(run_id, run_id.to_string(), TOKEN_LIMIT)
}

/// What a job run's state means for Sluice.
fn outcome(state: &str, details: Option<&str>, run_id: &str, handle: &Value) -> Outcome {
    let said = match details {
        Some(details) if !details.trim().is_empty() => {
            format!("EMR Serverless job run {run_id} {state}: {}", details.trim())
        }
        _ => format!("EMR Serverless job run {run_id} {state}"),
    };
    match state {
        "SUCCESS" => Outcome::succeeded(said),
        "FAILED" | "CANCELLED" => Outcome::failed(None, said),
        // SUBMITTED, PENDING, SCHEDULED, RUNNING, QUEUED, CANCELLING, and whatever EMR adds.
        _ => Outcome::running(handle.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{JobConfig, JobKind, JobSettings};
    use crate::core::records::JobStatus;
    use crate::runtime::jobs::aws::testing::Parts;

    #[test]
    fn job_run_states_map_to_outcomes() {
        let handle = json!({"applicationId": "00f", "jobRunId": "00r"});
        for state in ["SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED"] {
            assert_eq!(
                outcome(state, None, "00r", &handle),
                Outcome::running(handle.clone()),
                "{state}"
            );
        }
        assert_eq!(
            outcome("SUCCESS", Some(""), "00r", &handle),
            Outcome::succeeded("EMR Serverless job run 00r SUCCESS")
        );
        let failed = outcome("FAILED", Some("Job failed, please check complete logs"), "00r", &handle);
        assert_eq!((failed.status, failed.category), (JobStatus::Failed, None));
        assert_eq!(
            failed.message.as_deref(),
            Some("EMR Serverless job run 00r FAILED: Job failed, please check complete logs")
        );
        let cancelled = outcome("CANCELLED", None, "00r", &handle);
        assert_eq!(
            (cancelled.status, cancelled.category),
            (JobStatus::Failed, None),
            "TRANSIENT, as Interlock"
        );
        let stopping = outcome("CANCELLING", None, "00r", &handle);
        assert_eq!(
            stopping.status,
            JobStatus::Running,
            "still stopping: nothing may start beside it"
        );
    }

    #[test]
    fn client_tokens_are_the_run_id_within_the_limit() {
        assert_eq!(client_token("p.d.2026-11-22.1"), "p.d.2026-11-22.1");
        let long = format!("{}.daily.2026-11-22.1", "p".repeat(100));
        let token = client_token(&long);
        assert_eq!(token.len(), TOKEN_LIMIT);
        assert_eq!(token, client_token(&long), "stable");
        assert_ne!(token, client_token(&long.replace(".1", ".2")));
    }

    #[test]
    fn start_input_carries_the_token_role_and_driver() {
        let parts = Parts::new(
            JobKind::EmrServerless,
            json!({
                "applicationId": "00f",
                "executionRoleArn": "arn:aws:iam::123456789012:role/emr",
                "jobDriver": {"sparkSubmit": {"entryPoint": "s3://b/x.py"}},
                "configurationOverrides": {"monitoringConfiguration": {}},
                "jobTimeoutMinutes": 30
            }),
        );
        let JobSettings::EmrServerless(job) = parts.settings() else {
            unreachable!()
        };
        let input = start_input(&parts.call(), job).unwrap();
        let run_id = parts.request.run_id.clone();
        assert_eq!(
            input,
            json!({
                "clientToken": run_id,
                "executionRoleArn": "arn:aws:iam::123456789012:role/emr",
                "jobDriver": {"sparkSubmit": {"entryPoint": "s3://b/x.py"}},
                "name": run_id,
                "configurationOverrides": {"monitoringConfiguration": {}},
                "executionTimeoutMinutes": 30
            })
        );
        // The job driver is a setting the job cannot do without: no settings without it.
        let missing = JobConfig::from_json(
            JobKind::EmrServerless,
            &json!({"applicationId": "00f", "executionRoleArn": "arn:aws:iam::1:role/r"}),
        );
        assert!(matches!(missing, Err(e) if e.message.contains("jobDriver")));
    }
}
