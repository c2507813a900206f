//! `databricks` jobs: Jobs API 2.1, `POST /api/2.1/jobs/run-now` then
//! `GET /api/2.1/jobs/runs/get?run_id=N`.
//!
//! Config: `host` (the workspace URL), `jobId`, `token` (a bearer token, best as
//! `${env:NAME}`); `headers` (an object of string values) sent on run-now and on every
//! runs/get (Interlock sent them on the trigger only); `token` may be left out when
//! `headers` carries an `Authorization`, which replaces it; `jobParameters`
//! (→ `job_parameters`) and `notebookParams` (→ `notebook_params`). Handle: `{"runId"}`.
//!
//! Idempotent: `idempotency_token` is the Sluice run id (its SHA-256 hex when longer than
//! the API's 64 characters), so a trigger requested again after a crash gets the run the
//! first request started.
//!
//! States: `life_cycle_state` TERMINATED (or SKIPPED, INTERNAL_ERROR) ends the run:
//! `result_state` SUCCESS succeeded; TIMEDOUT timed out; CANCELED failed TRANSIENT (as
//! interlock `databricks.go` had it, and as SFN ABORTED and EMR CANCELLED are: a retry
//! spends `maxRetries`); FAILED and the rest failed (the job's retries apply);
//! INTERNAL_ERROR failed TRANSIENT. PENDING, QUEUED, RUNNING, TERMINATING, BLOCKED and
//! WAITING_FOR_RETRY are running.

use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{http_error, join_url, send, tail, Call, CallError, Outcome};
use crate::core::config::{DatabricksJob, JobId, JobKind, JobSettings};
use crate::core::records::FailureCategory;

/// The longest idempotency token the Jobs API takes.
const TOKEN_LIMIT: usize = 64;

pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    let JobSettings::Databricks(job) = call.config.settings() else {
        return Err(call.not_for(JobKind::Databricks));
    };
    let job_id = job_id(job)?;
    let mut body = json!({ "job_id": job_id, "idempotency_token": idempotency_token(call.run_id()) });
    if let Some(p) = &job.job_parameters {
        body["job_parameters"] = p.clone();
    }
    if let Some(p) = &job.notebook_params {
        body["notebook_params"] = p.clone();
    }
    let url = join_url(&job.host, "api/2.1/jobs/run-now");
    let request = call
        .request(Method::POST, &url)?
        .header("content-type", "application/json")
        .body(body.to_string());
    let answer = answer(send(authorised(call, job, request)?).await?)?;
    let run_id = answer.get("run_id").and_then(Value::as_u64).ok_or_else(|| {
        CallError::Infra(format!(
            "Databricks answered run-now without a run_id: {}",
            tail(&answer.to_string())
        ))
    })?;
    Ok(Outcome::running(json!({ "runId": run_id })).with(
        "numberInJob",
        answer.get("number_in_job").cloned().unwrap_or(Value::Null),
    ))
}

pub async fn status(call: &Call<'_>, handle: &Value) -> Result<Outcome, CallError> {
    let JobSettings::Databricks(job) = call.config.settings() else {
        return Err(call.not_for(JobKind::Databricks));
    };
    let run_id = handle
        .get("runId")
        .and_then(Value::as_u64)
        .ok_or_else(|| CallError::Permanent(format!("the run's handle has no Databricks runId: {handle}")))?;
    let url = join_url(&job.host, &format!("api/2.1/jobs/runs/get?run_id={run_id}"));
    let request = authorised(call, job, call.request(Method::GET, &url)?)?;
    let run = answer(send(request).await?)?;
    let state = &run["state"];
    let life = state["life_cycle_state"].as_str().unwrap_or("UNKNOWN");
    let result = state["result_state"].as_str();
    let mut said = format!("Databricks run {run_id} is {life}");
    if let Some(r) = result {
        said.push_str(&format!(" ({r})"));
    }
    if let Some(m) = state["state_message"].as_str().filter(|m| !m.is_empty()) {
        said.push_str(": ");
        said.push_str(m);
    }
    let mut outcome = outcome(life, result, said, handle).with("lifeCycleState", json!(life));
    if let Some(r) = result {
        outcome = outcome.with("resultState", json!(r));
    }
    if let Some(page) = run.get("run_page_url") {
        outcome = outcome.with("runPageUrl", page.clone());
    }
    Ok(outcome)
}

/// What a run's `life_cycle_state` and `result_state` mean for Sluice.
fn outcome(life: &str, result: Option<&str>, said: String, handle: &Value) -> Outcome {
    match (life, result) {
        ("TERMINATED" | "SKIPPED" | "INTERNAL_ERROR", Some("SUCCESS")) => Outcome::succeeded(said),
        ("TERMINATED" | "SKIPPED" | "INTERNAL_ERROR", Some("TIMEDOUT")) => Outcome::timed_out(said),
        ("TERMINATED" | "SKIPPED" | "INTERNAL_ERROR", Some("CANCELED" | "CANCELLED")) => {
            Outcome::failed(Some(FailureCategory::Transient), said)
        }
        ("INTERNAL_ERROR", _) => Outcome::failed(Some(FailureCategory::Transient), said),
        ("TERMINATED" | "SKIPPED", _) => Outcome::failed(None, said),
        _ => Outcome::running(handle.clone()),
    }
}

/// The bearer `token`, unless `headers` carries an `Authorization`; then the configured
/// headers, last, so that they override the client's own.
fn authorised(call: &Call<'_>, job: &DatabricksJob, request: RequestBuilder) -> Result<RequestBuilder, CallError> {
    let request = if call.has_header("authorization") {
        request
    } else {
        let token = job.token.as_ref().ok_or_else(|| {
            CallError::Permanent(
                "job.config.token is missing (or set an Authorization header in job.config.headers)".into(),
            )
        })?;
        request.bearer_auth(token)
    };
    Ok(request.headers(call.headers()?))
}

/// `jobId`: a number, or a text that holds one once its templates are rendered.
fn job_id(job: &DatabricksJob) -> Result<u64, CallError> {
    match &job.job_id {
        JobId::Number(n) => Some(*n),
        JobId::Text(s) => s.trim().parse().ok(),
    }
    .ok_or_else(|| CallError::Permanent("job.config.jobId must be a Databricks job id (a number)".into()))
}

/// The run id, or its SHA-256 hex (exactly 64 characters) when longer than the API takes.
fn idempotency_token(run_id: &str) -> String {
    if run_id.len() <= TOKEN_LIMIT {
        return run_id.to_string();
    }
    Sha256::digest(run_id.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A 2xx answer as JSON; other answers quote Databricks' `error_code` and `message`.
fn answer((status, body): (StatusCode, String)) -> Result<Value, CallError> {
    if !status.is_success() {
        let parsed = serde_json::from_str::<Value>(&body).ok();
        let quoted = match parsed
            .as_ref()
            .map(|v| (v["error_code"].as_str(), v["message"].as_str()))
        {
            Some((Some(code), Some(message))) => format!("{code}: {message}"),
            Some((Some(code), None)) => code.to_string(),
            _ => body,
        };
        return Err(http_error("Databricks", status, &quoted));
    }
    serde_json::from_str(&body).map_err(|e| {
        CallError::Infra(format!(
            "Databricks answered {status} with a body that is not JSON: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::records::JobStatus;
    use crate::runtime::jobs::aws::testing::Parts;

    /// The authorization header values and `x-org` of a request `authorised` made.
    fn sent(config: Value) -> Result<(Vec<String>, Option<String>), CallError> {
        let parts = Parts::new(JobKind::Databricks, config);
        let call = parts.call();
        let JobSettings::Databricks(job) = parts.settings() else {
            unreachable!()
        };
        let request = authorised(&call, job, call.request(Method::GET, "https://dbc.example/api")?)?
            .build()
            .unwrap();
        let values = |name: &str| -> Vec<String> {
            request
                .headers()
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect()
        };
        Ok((values("authorization"), values("x-org").pop()))
    }

    #[test]
    fn an_authorization_header_replaces_the_token() {
        assert_eq!(
            sent(json!({"token": "dapi1"})).unwrap(),
            (vec!["Bearer dapi1".to_string()], None)
        );
        let headers = json!({"Authorization": "Bearer from-header", "X-Org": "42"});
        assert_eq!(
            sent(json!({ "headers": headers })).unwrap(),
            (vec!["Bearer from-header".to_string()], Some("42".into()))
        );
        assert_eq!(
            sent(json!({"token": "dapi1", "headers": headers})).unwrap(),
            (vec!["Bearer from-header".to_string()], Some("42".into())),
            "one Authorization, the configured one"
        );
        assert_eq!(
            sent(json!({"headers": {"X-Org": "42"}})).unwrap_err(),
            CallError::Permanent(
                "job.config.token is missing (or set an Authorization header in job.config.headers)".into()
            )
        );
    }

    #[test]
    fn long_run_ids_become_a_64_character_token() {
        assert_eq!(
            idempotency_token("gold.stream.2026-11-22.1"),
            "gold.stream.2026-11-22.1"
        );
        let long = format!("{}.stream.2026-11-22T05.1", "p".repeat(80));
        let token = idempotency_token(&long);
        assert_eq!(token.len(), 64);
        assert_eq!(token, idempotency_token(&long), "stable");
        assert_ne!(token, idempotency_token(&long.replace(".1", ".2")));
    }

    #[test]
    fn errors_quote_the_error_code_and_message() {
        let e = answer((
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"error_code":"REQUEST_LIMIT_EXCEEDED","message":"Too many requests"}"#.into(),
        ));
        assert_eq!(
            e.unwrap_err(),
            CallError::Infra(
                "Databricks answered 429 Too Many Requests: REQUEST_LIMIT_EXCEEDED: Too many requests".into()
            )
        );
        let e = answer((
            StatusCode::BAD_REQUEST,
            r#"{"error_code":"INVALID_PARAMETER_VALUE","message":"Job 7 does not exist."}"#.into(),
        ));
        assert!(
            matches!(e, Err(CallError::Permanent(m)) if m.contains("INVALID_PARAMETER_VALUE: Job 7 does not exist."))
        );
    }

    /// Interlock's `databricks.go`: every TERMINATED result but SUCCESS failed TRANSIENT, a
    /// cancelled run too (its retry spends `maxRetries`); SKIPPED failed.
    #[test]
    fn a_cancelled_run_failed_transient_as_in_interlock() {
        let handle = json!({"runId": 7});
        let failed = |life: &str, result: Option<&str>| outcome(life, result, String::new(), &handle);
        assert_eq!(
            failed("TERMINATED", Some("CANCELED")).category,
            Some(FailureCategory::Transient)
        );
        assert_eq!(
            failed("INTERNAL_ERROR", None).category,
            Some(FailureCategory::Transient)
        );
        assert_eq!(failed("TERMINATED", Some("SUCCESS")).status, JobStatus::Succeeded);
        assert_eq!(failed("RUNNING", None).status, JobStatus::Running);
    }
}
