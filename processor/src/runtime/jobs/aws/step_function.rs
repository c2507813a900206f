//! `step-function` jobs: Step Functions' JSON 1.0 API (signing name `states`),
//! `AWSStepFunctions.StartExecution` then `AWSStepFunctions.DescribeExecution`.
//!
//! Config: `stateMachineArn` (required); `input` (an object, or a string holding JSON;
//! default `{}`). Handle: `{"executionArn"}`.
//!
//! The execution is named after the Sluice run, which makes a trigger requested again
//! idempotent: Step Functions answers `ExecutionAlreadyExists` for a name it has seen
//! (within 90 days), and since only Sluice names executions this way, that execution is
//! this run's: its ARN is derived from the state machine's and adopted as running (the
//! next status check tells whether it has ended). Names keep to the characters CloudWatch
//! logging accepts (letters, digits, `-`, `_`) and to 80 characters; a run id that had to
//! change (its dots, at least) gets a hash of itself appended, so distinct runs never share
//! a name: `pipe-1.daily.2026-11-22.1` → `pipe-1_daily_2026-11-22_1-<12 hex>`.
//!
//! Standard workflows only: Express executions keep no status to ask for, so an Express
//! start is reported succeeded at once (fire-and-forget).
//!
//! States: RUNNING and PENDING_REDRIVE are running; SUCCEEDED succeeded (with the output's
//! tail); FAILED and ABORTED failed (TRANSIENT, with the error and cause, as Interlock
//! categorised both: a retry may pass); TIMED_OUT timed out.

use serde_json::{json, Value};

use super::{fit, handle_field, Api, Service};
use crate::core::config::StepFunctionJob;
use crate::runtime::jobs::{tail, Call, CallError, Outcome};

pub(super) static SERVICE: Service = Service {
    name: "Step Functions",
    prefix: "states",
    signing_name: "states",
    env_id: "SFN",
};
const JSON: &str = "1.0";
/// Step Functions' limit on an execution name.
const NAME_LIMIT: usize = 80;

pub(super) async fn trigger(call: &Call<'_>, job: &StepFunctionJob) -> Result<Outcome, CallError> {
    let machine = job.state_machine_arn.as_str();
    let input = match &job.input {
        None => "{}".to_string(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    let name = execution_name(call.run_id());
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let start = json!({ "stateMachineArn": machine, "name": name, "input": input });
    let answer = api.json_call(JSON, "AWSStepFunctions.StartExecution", &start).await?;
    let (arn, adopted) = match answer.error() {
        Some(error) if error.is("ExecutionAlreadyExists") => {
            let arn = execution_arn(machine, &name).ok_or_else(|| {
                CallError::Permanent(format!(
                    "{}; and {machine:?} is not a state machine ARN to find it under",
                    error.describe(&api.what("StartExecution"))
                ))
            })?;
            (arn, true)
        }
        Some(error) => return Err(error.into_call_error(&api.what("StartExecution"))),
        None => {
            let answer = api.parse("StartExecution", answer)?;
            let arn = answer
                .get("executionArn")
                .and_then(Value::as_str)
                .ok_or_else(|| api.unexpected("StartExecution", "an executionArn", &answer))?;
            (arn.to_string(), false)
        }
    };
    if arn.contains(":express:") {
        return Ok(Outcome::succeeded(format!(
            "Express execution {name} started (fire-and-forget: Express executions have no status to check)"
        ))
        .with("executionArn", json!(arn)));
    }
    let mut outcome = Outcome::running(json!({ "executionArn": arn }))
        .with("executionArn", json!(arn))
        .with("executionName", json!(name));
    if adopted {
        outcome = outcome.with("adopted", json!(true));
    }
    Ok(outcome)
}

pub(super) async fn status(call: &Call<'_>, job: &StepFunctionJob, handle: &Value) -> Result<Outcome, CallError> {
    let arn = handle_field(handle, "executionArn")?;
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let answer = api
        .json(
            JSON,
            "AWSStepFunctions.DescribeExecution",
            &json!({ "executionArn": arn }),
        )
        .await?;
    let state = answer
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| api.unexpected("DescribeExecution", "a status", &answer))?;
    Ok(outcome(state, &answer, handle).with("state", json!(state)))
}

/// The execution name for a run: the run id where Step Functions (and CloudWatch logging)
/// take it as it is, else a cleaned, hashed form of it.
fn execution_name(run_id: &str) -> String {
    let cleaned: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    fit(run_id, cleaned, NAME_LIMIT)
}

/// `arn:aws:states:{region}:{account}:stateMachine:{machine}[:{version or alias}]` →
/// `arn:aws:states:{region}:{account}:execution:{machine}:{name}`.
fn execution_arn(machine_arn: &str, name: &str) -> Option<String> {
    let parts: Vec<&str> = machine_arn.split(':').collect();
    if parts.len() < 7 || parts[0] != "arn" || parts[2] != "states" || parts[5] != "stateMachine" || parts[6].is_empty()
    {
        return None;
    }
    Some(format!("{}:execution:{}:{name}", parts[..5].join(":"), parts[6]))
}

/// What an execution's status means for Sluice; `execution` is DescribeExecution's answer.
fn outcome(state: &str, execution: &Value, handle: &Value) -> Outcome {
    let name = execution
        .get("name")
        .and_then(Value::as_str)
        .or_else(|| handle["executionArn"].as_str().and_then(|a| a.rsplit(':').next()))
        .unwrap_or("?");
    let mut said = format!("execution {name} {state}");
    let why: Vec<&str> = ["error", "cause"]
        .iter()
        .filter_map(|f| execution.get(*f).and_then(Value::as_str))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if !why.is_empty() {
        said.push_str(": ");
        said.push_str(&why.join(": "));
    }
    match state {
        "SUCCEEDED" => {
            if let Some(output) = execution.get("output").and_then(Value::as_str) {
                let output = tail(output);
                if !output.is_empty() {
                    said.push_str(": ");
                    said.push_str(&output);
                }
            }
            Outcome::succeeded(said)
        }
        "FAILED" | "ABORTED" => Outcome::failed(None, said),
        "TIMED_OUT" => Outcome::timed_out(said),
        // RUNNING, PENDING_REDRIVE, and whatever Step Functions adds.
        _ => Outcome::running(handle.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::records::JobStatus;

    #[test]
    fn execution_names_are_logging_safe_distinct_and_short() {
        let name = execution_name("pipe-1.daily.2026-11-22.1");
        assert!(name.starts_with("pipe-1_daily_2026-11-22_1-"), "{name}");
        assert_eq!(name.len(), "pipe-1_daily_2026-11-22_1-".len() + 12);
        assert_eq!(name, execution_name("pipe-1.daily.2026-11-22.1"), "deterministic");
        assert_ne!(name, execution_name("pipe-1_daily.2026-11-22.1"));
        assert_ne!(name, execution_name("pipe-1.daily.2026-11-22.2"));
        // Nothing to change: the run id itself.
        assert_eq!(execution_name("already_clean-1"), "already_clean-1");
        let long = format!("{}.daily.2026-11-22.1", "p".repeat(150));
        let name = execution_name(&long);
        assert_eq!(name.len(), NAME_LIMIT);
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert!(execution_name("ünïcode run").is_ascii());
    }

    #[test]
    fn execution_arns_derive_from_the_state_machine() {
        let machine = "arn:aws:states:us-east-1:123456789012:stateMachine:load";
        assert_eq!(
            execution_arn(machine, "n1").as_deref(),
            Some("arn:aws:states:us-east-1:123456789012:execution:load:n1")
        );
        // A version or alias ARN: executions live under the machine itself.
        assert_eq!(
            execution_arn(&format!("{machine}:prod"), "n1").as_deref(),
            Some("arn:aws:states:us-east-1:123456789012:execution:load:n1")
        );
        assert_eq!(
            execution_arn("arn:aws-cn:states:cn-north-1:1:stateMachine:m", "n").as_deref(),
            Some("arn:aws-cn:states:cn-north-1:1:execution:m:n")
        );
        assert_eq!(execution_arn("not-an-arn", "n"), None);
        assert_eq!(execution_arn("arn:aws:lambda:us-east-1:1:function:f", "n"), None);
    }

    #[test]
    fn execution_states_map_to_outcomes() {
        let handle = json!({"executionArn": "arn:aws:states:us-east-1:1:execution:m:n1"});
        for state in ["RUNNING", "PENDING_REDRIVE"] {
            assert_eq!(outcome(state, &json!({}), &handle), Outcome::running(handle.clone()));
        }
        let done = outcome("SUCCEEDED", &json!({"name": "n1", "output": "{\"rows\":3}"}), &handle);
        assert_eq!(done, Outcome::succeeded("execution n1 SUCCEEDED: {\"rows\":3}"));
        // Captured from DescribeExecution of a machine ending in a Fail state.
        let failed = json!({"name": "n1", "status": "FAILED", "error": "Boom", "cause": "it broke"});
        assert_eq!(
            outcome("FAILED", &failed, &handle),
            Outcome::failed(None, "execution n1 FAILED: Boom: it broke")
        );
        let timed_out = outcome("TIMED_OUT", &json!({}), &handle);
        assert_eq!(timed_out.status, JobStatus::Timeout);
        assert_eq!(timed_out.message.as_deref(), Some("execution n1 TIMED_OUT"));
        let aborted = outcome("ABORTED", &json!({"name": "n1"}), &handle);
        assert_eq!(
            (aborted.status, aborted.category),
            (JobStatus::Failed, None),
            "TRANSIENT, as Interlock"
        );
    }
}
