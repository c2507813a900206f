//! `emr` jobs: a step on a running EMR cluster, through EMR's JSON 1.1 API
//! (`ElasticMapReduce.AddJobFlowSteps`, then `ElasticMapReduce.DescribeStep`).
//!
//! Config: `clusterId` (required) and `step`: `{ args: [..], name, jar, mainClass,
//! actionOnFailure }`. `name` defaults to the Sluice run id, `jar` to `command-runner.jar`
//! (which needs `args`), `actionOnFailure` to `CONTINUE` (a failed step leaves the cluster
//! running). Handle: `{"clusterId", "stepId"}`.
//!
//! AddJobFlowSteps has no idempotency key. When the step is named after the run (the
//! default), a trigger first looks for a step of that name among the cluster's most recent
//! steps (`ListSteps`, first page: 50) and adopts it, so a trigger requested again after a
//! crash or a lost answer does not add the step twice. A step with a configured `name` is
//! always added.
//!
//! States: PENDING, RUNNING and CANCEL_PENDING are running; COMPLETED succeeded; FAILED
//! failed (TRANSIENT, with EMR's failure reason and log file); CANCELLED failed TRANSIENT, as
//! Interlock categorised it (an earlier step's `actionOnFailure` cancels the steps after it:
//! a retry may pass); INTERRUPTED failed TRANSIENT (the cluster went away under the step: a
//! retry on a healthy cluster may pass).

use serde_json::{json, Value};

use super::{handle_field, Api, Service};
use crate::core::config::{EmrJob, EmrStep};
use crate::runtime::jobs::{usable, Call, CallError, Outcome};

pub(super) static SERVICE: Service = Service {
    name: "EMR",
    prefix: "elasticmapreduce",
    signing_name: "elasticmapreduce",
    env_id: "EMR",
};
const JSON: &str = "1.1";
/// EMR's limit on a step name.
const NAME_LIMIT: usize = 256;
const ACTIONS: [&str; 4] = ["CONTINUE", "CANCEL_AND_WAIT", "TERMINATE_CLUSTER", "TERMINATE_JOB_FLOW"];

pub(super) async fn trigger(call: &Call<'_>, job: &EmrJob) -> Result<Outcome, CallError> {
    let cluster = job.cluster_id.as_str();
    let (step, named_after_run) = step(usable(&job.step)?, call.run_id())?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let name = step["Name"].as_str().unwrap_or_default();
    if named_after_run {
        if let Some(step_id) = existing_step(&api, cluster, name).await? {
            return Ok(Outcome::running(json!({ "clusterId": cluster, "stepId": step_id }))
                .with("stepId", json!(step_id))
                .with("adopted", json!(true)));
        }
    }
    let input = json!({ "JobFlowId": cluster, "Steps": [step] });
    let answer = api.json(JSON, "ElasticMapReduce.AddJobFlowSteps", &input).await?;
    let step_id = answer["StepIds"]
        .get(0)
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("AddJobFlowSteps", "a step id", &answer))?;
    Ok(Outcome::running(json!({ "clusterId": cluster, "stepId": step_id })).with("stepId", json!(step_id)))
}

pub(super) async fn status(call: &Call<'_>, job: &EmrJob, handle: &Value) -> Result<Outcome, CallError> {
    let cluster = handle_field(handle, "clusterId")?;
    let step_id = handle_field(handle, "stepId")?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let input = json!({ "ClusterId": cluster, "StepId": step_id });
    let answer = api.json(JSON, "ElasticMapReduce.DescribeStep", &input).await?;
    let Some(status) = answer.get("Step").and_then(|s| s.get("Status")) else {
        return Err(CallError::Permanent(format!(
            "EMR DescribeStep knows no step {step_id} on cluster {cluster}"
        )));
    };
    let state = status
        .get("State")
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("DescribeStep", "a Step.Status.State", &answer))?;
    Ok(outcome(state, status, step_id, handle)
        .with("state", json!(state))
        .with("stepId", json!(step_id)))
}

/// The id of the cluster's most recent step named `name`, if any.
async fn existing_step(api: &Api<'_, '_>, cluster: &str, name: &str) -> Result<Option<String>, CallError> {
    let answer = api
        .json(JSON, "ElasticMapReduce.ListSteps", &json!({ "ClusterId": cluster }))
        .await?;
    Ok(answer["Steps"].as_array().and_then(|steps| {
        steps
            .iter()
            .find(|s| s.get("Name").and_then(Value::as_str) == Some(name))
            .and_then(|s| s.get("Id").and_then(Value::as_str))
            .map(str::to_string)
    }))
}

/// The step to add, from `job.config.step`, and whether it is named after the run.
fn step(step: &EmrStep, run_id: &str) -> Result<(Value, bool), CallError> {
    let bad = |what: &str| CallError::Permanent(format!("job.config.step.{what}"));
    let (name, named_after_run) = match &step.name {
        Some(name) => (name.clone(), false),
        None => (cut(run_id, NAME_LIMIT), true),
    };
    let jar = step.jar.as_deref().unwrap_or("command-runner.jar");
    if step.args.is_empty() && jar == "command-runner.jar" {
        return Err(bad("args is required with command-runner.jar (the command to run)"));
    }
    let action = step
        .action_on_failure
        .as_deref()
        .unwrap_or("CONTINUE")
        .to_ascii_uppercase();
    if !ACTIONS.contains(&action.as_str()) {
        return Err(bad(&format!("actionOnFailure must be one of {}", ACTIONS.join(", "))));
    }
    let mut hadoop = json!({ "Jar": jar, "Args": step.args });
    if let Some(main_class) = &step.main_class {
        hadoop["MainClass"] = json!(main_class);
    }
    let step = json!({ "Name": name, "ActionOnFailure": action, "HadoopJarStep": hadoop });
    Ok((step, named_after_run))
}

/// `text` cut to at most `limit` bytes, on a character boundary.
fn cut(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// What a step's state means for Sluice; `status` is DescribeStep's `Step.Status`.
fn outcome(state: &str, status: &Value, step_id: &str, handle: &Value) -> Outcome {
    let mut said = format!("EMR step {step_id} {state}");
    let details = &status["FailureDetails"];
    let reason = [
        details.get("Reason").and_then(Value::as_str),
        details.get("Message").and_then(Value::as_str),
        status["StateChangeReason"].get("Message").and_then(Value::as_str),
    ]
    .into_iter()
    .flatten()
    .map(str::trim)
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>();
    if !reason.is_empty() {
        said.push_str(": ");
        said.push_str(&reason.join(": "));
    }
    if let Some(log) = details.get("LogFile").and_then(Value::as_str) {
        said.push_str(&format!(" (log: {log})"));
    }
    match state {
        "COMPLETED" => Outcome::succeeded(said),
        "FAILED" | "INTERRUPTED" | "CANCELLED" => Outcome::failed(None, said),
        // PENDING, RUNNING, CANCEL_PENDING, and whatever EMR adds.
        _ => Outcome::running(handle.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{JobConfig, JobKind, JobSettings};
    use crate::core::records::JobStatus;

    /// The step of an `emr` job with `config` for run `run_id`: refused as a trigger refuses
    /// it, whether by the job's settings or by the step's contents.
    fn step_of(config: Value, run_id: &str) -> Result<(Value, bool), CallError> {
        let mut config = config;
        config["clusterId"] = json!("j-1");
        let settings = JobConfig::from_json(JobKind::Emr, &config).map_err(|e| CallError::Permanent(e.message))?;
        let JobSettings::Emr(job) = settings.settings() else {
            unreachable!()
        };
        step(usable(&job.step)?, run_id)
    }

    #[test]
    fn steps_default_to_command_runner_named_after_the_run() {
        let (step, named) = step_of(
            json!({"step": {"args": ["spark-submit", "s3://b/x.py", 3]}}),
            "p.d.2026-11-22.1",
        )
        .unwrap();
        assert!(named);
        assert_eq!(
            step,
            json!({
                "Name": "p.d.2026-11-22.1",
                "ActionOnFailure": "CONTINUE",
                "HadoopJarStep": {"Jar": "command-runner.jar", "Args": ["spark-submit", "s3://b/x.py", "3"]}
            })
        );
        let custom = json!({"step": {"name": "load", "jar": "s3://b/app.jar", "mainClass": "x.Main",
            "actionOnFailure": "cancel_and_wait"}});
        let (step, named) = step_of(custom, "r").unwrap();
        assert!(!named);
        assert_eq!(step["Name"], "load");
        assert_eq!(step["ActionOnFailure"], "CANCEL_AND_WAIT");
        assert_eq!(
            step["HadoopJarStep"],
            json!({"Jar": "s3://b/app.jar", "Args": [], "MainClass": "x.Main"})
        );
        let long = "x".repeat(300);
        let (step, _) = step_of(json!({"step": {"args": ["true"]}}), &long).unwrap();
        assert_eq!(step["Name"].as_str().unwrap().len(), NAME_LIMIT);
    }

    #[test]
    fn bad_steps_are_permanent() {
        for bad in [
            json!({}),
            json!({"step": "spark-submit x"}),
            json!({"step": {}}),
            json!({"step": {"args": "spark-submit"}}),
            json!({"step": {"args": [{"a": 1}]}}),
            json!({"step": {"args": ["x"], "actionOnFailure": "EXPLODE"}}),
            json!({"step": {"args": ["x"], "name": 7}}),
        ] {
            let e = step_of(bad.clone(), "r").unwrap_err();
            assert!(matches!(e, CallError::Permanent(_)), "{bad}");
        }
    }

    #[test]
    fn step_states_map_to_outcomes() {
        let handle = json!({"clusterId": "j-1", "stepId": "s-1"});
        for state in ["PENDING", "RUNNING", "CANCEL_PENDING"] {
            let status = json!({"State": state});
            assert_eq!(
                outcome(state, &status, "s-1", &handle),
                Outcome::running(handle.clone())
            );
        }
        let done = outcome("COMPLETED", &json!({"State": "COMPLETED"}), "s-1", &handle);
        assert_eq!(done, Outcome::succeeded("EMR step s-1 COMPLETED"));
        // Captured from DescribeStep on a failed spark-submit.
        let failed = json!({
            "State": "FAILED",
            "StateChangeReason": {},
            "FailureDetails": {
                "Reason": "Unknown Error.",
                "Message": "Exception in thread main: java.io.FileNotFoundException",
                "LogFile": "s3://logs/j-1/steps/s-1/stderr.gz"
            }
        });
        let o = outcome("FAILED", &failed, "s-1", &handle);
        assert_eq!(o.status, JobStatus::Failed);
        assert_eq!(o.category, None);
        assert_eq!(
            o.message.as_deref(),
            Some(
                "EMR step s-1 FAILED: Unknown Error.: Exception in thread main: java.io.FileNotFoundException \
                 (log: s3://logs/j-1/steps/s-1/stderr.gz)"
            )
        );
        let cancelled = outcome(
            "CANCELLED",
            &json!({"StateChangeReason": {"Message": "by user"}}),
            "s-1",
            &handle,
        );
        assert_eq!(
            (cancelled.status, cancelled.category),
            (JobStatus::Failed, None),
            "TRANSIENT, as Interlock"
        );
        assert_eq!(cancelled.message.as_deref(), Some("EMR step s-1 CANCELLED: by user"));
        let interrupted = outcome("INTERRUPTED", &json!({}), "s-1", &handle);
        assert_eq!((interrupted.status, interrupted.category), (JobStatus::Failed, None));
    }
}
