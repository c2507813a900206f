//! `lambda` jobs: one `Invoke` (`POST /2015-03-31/functions/{functionName}/invocations`,
//! signing name `lambda`), whose answer is the run's outcome: Lambda has no run to poll.
//!
//! Config: `functionName` (required: a name, a name with `:alias`, or an ARN); `payload`:
//! a string is sent as it is, byte for byte (after its templates are rendered), as Interlock
//! sent it (internal/trigger/lambda.go:30-32), so `payload: '{"body": {"pipeline": "x"}}'`
//! reaches the function as that JSON text and not as a JSON string; an object, array or
//! other JSON value is sent as its JSON text; default: the run's identity `{pipelineId,
//! scheduleId, date, runId, attempt}`; `invocationType`: `RequestResponse` (default) or
//! `Event`.
//! - RequestResponse waits for the function: 200 without `X-Amz-Function-Error` succeeded
//!   (with the answer's tail); with it, failed TRANSIENT with the error payload's type and
//!   message, or timed out when Lambda says the function timed out. Such a call lasts as long
//!   as the function, so without a `timeout` in the config the request may take up to
//!   [`LAMBDA_SYNC_TRY_TIMEOUT`](crate::core::config::LAMBDA_SYNC_TRY_TIMEOUT) (Lambda's
//!   15-minute maximum and a margin), not the usual 30 seconds; the trigger's deadline
//!   covers it ([`crate::core::lifecycle::TriggerRequest::call_budget`]).
//! - Event queues the invocation: 202 succeeded ("invoked asynchronously").
//!
//! Invoke has no idempotency key: a trigger retried after a lost answer (a timeout, a crash
//! mid-call) invokes the function again, and Lambda itself retries failed Event invocations.
//! Functions should be idempotent on the run id in their payload.

use reqwest::Method;
use serde_json::{json, Value};

use super::{label, Api, Service};
use crate::core::config::{InvocationType, LambdaJob};
use crate::runtime::jobs::{tail, usable, Call, CallError, Outcome};

pub(super) static SERVICE: Service = Service {
    name: "Lambda",
    prefix: "lambda",
    signing_name: "lambda",
    env_id: "LAMBDA",
};

pub(super) async fn trigger(call: &Call<'_>, job: &LambdaJob) -> Result<Outcome, CallError> {
    let function = job.function_name.as_str();
    let invocation = *usable(&job.invocation_type)?;
    let sync = invocation == InvocationType::RequestResponse;
    let body = payload(call, job);
    let api = Api::new(call, &job.aws, &SERVICE).await?;
    let path = format!("/2015-03-31/functions/{}/invocations", label(function));
    let headers = [
        ("content-type", "application/json".to_string()),
        ("x-amz-invocation-type", invocation.as_str().to_string()),
    ];
    // A synchronous call lasts as long as the function: its try timeout covers that.
    let timeout = sync.then(|| call.config.try_timeout());
    let answer = api.send(Method::POST, &path, &headers, body, timeout).await?;
    if let Some(error) = answer.error() {
        return Err(error.into_call_error(&api.what("Invoke")));
    }
    let status = answer.status.as_u16();
    if !sync {
        return Ok(
            Outcome::succeeded(format!("invoked asynchronously (Lambda answered {status})"))
                .with("httpStatus", json!(status)),
        );
    }
    let mut outcome = match answer.header("x-amz-function-error") {
        Some(kind) => function_error(kind, &answer.body),
        None => {
            let body = tail(&answer.body);
            let mut said = format!("Lambda answered {status}");
            if !body.is_empty() {
                said.push_str(": ");
                said.push_str(&body);
            }
            Outcome::succeeded(said)
        }
    }
    .with("httpStatus", json!(status));
    if let Some(version) = answer.header("x-amz-executed-version") {
        outcome = outcome.with("executedVersion", json!(version));
    }
    Ok(outcome)
}

/// The bytes the function gets: a string payload as it is, any other as JSON, none: the
/// run's identity.
fn payload(call: &Call<'_>, job: &LambdaJob) -> Vec<u8> {
    match &job.payload {
        Some(Value::String(raw)) => raw.clone().into_bytes(),
        Some(payload) => payload.to_string().into_bytes(),
        None => identity(call).to_string().into_bytes(),
    }
}

/// The payload a function gets when the config sets none: which run this is.
fn identity(call: &Call<'_>) -> Value {
    let r = call.request;
    json!({
        "pipelineId": r.pipeline_id,
        "scheduleId": r.execution.schedule(),
        "date": r.execution.date_text(),
        "runId": r.run_id,
        "attempt": r.attempt,
    })
}

/// The outcome of an invocation Lambda flagged with `X-Amz-Function-Error` (`Unhandled`
/// or `Handled`); `body` is the error payload, `{errorType, errorMessage, ...}`.
fn function_error(kind: &str, body: &str) -> Outcome {
    let payload: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let text = |f: &str| {
        payload
            .get(f)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let detail = match (text("errorType"), text("errorMessage")) {
        (Some(t), Some(m)) => format!("{t}: {m}"),
        (Some(t), None) => t.to_string(),
        (None, Some(m)) => m.to_string(),
        (None, None) => body.trim().to_string(),
    };
    let said = tail(&format!("function error ({kind}): {detail}"));
    if text("errorMessage").is_some_and(|m| m.contains("Task timed out")) {
        Outcome::timed_out(said)
    } else {
        Outcome::failed(None, said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::JobSettings;
    use crate::core::records::JobStatus;

    #[test]
    fn function_errors_carry_the_error_payload() {
        let body = r#"{"errorMessage": "division by zero", "errorType": "ZeroDivisionError", "requestId": "r", "stackTrace": ["  File \"/var/task/f.py\""]}"#;
        assert_eq!(
            function_error("Unhandled", body),
            Outcome::failed(None, "function error (Unhandled): ZeroDivisionError: division by zero")
        );
        let timeout = r#"{"errorMessage":"2026-11-22T10:00:00.000Z 1f Task timed out after 3.00 seconds"}"#;
        let o = function_error("Unhandled", timeout);
        assert_eq!(o.status, JobStatus::Timeout);
        assert_eq!(
            function_error("Handled", "not json"),
            Outcome::failed(None, "function error (Handled): not json")
        );
    }

    #[test]
    fn a_string_payload_is_sent_as_it_is_and_others_as_json() {
        let bytes = |config: Value| {
            let parts = super::super::testing::Parts::new(crate::core::config::JobKind::Lambda, config);
            let JobSettings::Lambda(job) = parts.settings() else {
                unreachable!()
            };
            String::from_utf8(payload(&parts.call(), job)).unwrap()
        };
        let raw = r#"{"body": {"pipeline": "x"}}"#;
        assert_eq!(bytes(json!({ "payload": raw })), raw);
        assert_eq!(bytes(json!({"payload": "not json"})), "not json");
        assert_eq!(
            bytes(json!({"payload": {"body": {"pipeline": "x"}}})),
            r#"{"body":{"pipeline":"x"}}"#
        );
        assert_eq!(bytes(json!({"payload": [1, "a"]})), r#"[1,"a"]"#);
        assert!(bytes(json!({})).starts_with(r#"{"attempt":1,"#));
    }

    #[test]
    fn the_default_payload_is_the_run_identity() {
        let parts = super::super::testing::Parts::new(crate::core::config::JobKind::Lambda, json!({}));
        let payload = identity(&parts.call());
        assert_eq!(
            payload,
            json!({"pipelineId": "pipe-1", "scheduleId": "daily", "date": "2026-11-22",
                   "runId": "pipe-1.daily.2026-11-22.1", "attempt": 1})
        );
    }
}
