//! `http` jobs: one request (`url`, `method` default POST, `headers`, `body`), 2xx means
//! accepted. The body, as Interlock sent it:
//! - a string `body` is sent as it is, byte for byte (after its templates are rendered),
//!   not JSON-encoded again (internal/trigger/trigger.go:107-125); any other JSON value is
//!   sent as its JSON text;
//! - without `body`, the run's date arguments as JSON, `{"par_day":"20260303"}` and, for an
//!   hourly run, `"par_hour":"10"` (internal/lambda/orchestrator/trigger.go:113-135), except
//!   on a GET, which sends no body.
//!
//! A request with a body carries `Content-Type: application/json` unless `headers` sets
//! another; configured headers override the client's own.
//!
//! Then, as configured:
//! - nothing more (fire-and-forget, as in the earlier design): the accepted request
//!   completes the run;
//! - `statusUrl`: the job runs, and a GET of `statusUrl` (same headers) is its status
//!   check. The JSON answer's `statusField` (default `status`, dotted paths allowed) says
//!   how it is doing: succeeded/success/completed/done, failed/error, timeout/timed_out,
//!   cancelled/aborted (PERMANENT); anything else means still running. `${RUN_ID}` in the
//!   URL names the run;
//! - `awaitReport: true`: the job runs, and its runner reports on `sluice.jobs` itself.
//!
//! Every request carries `Idempotency-Key: <run id>`: a trigger requested again after a
//! crash has the same key, so a target that honours it never starts the run twice.

use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, RequestBuilder};
use serde_json::{json, Map, Value};

use super::{http_error, send, send_json, tail, usable, Call, CallError, Outcome};
use crate::core::config::{HttpJob, HttpMethod, JobKind, JobSettings};
use crate::core::records::FailureCategory;

pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    let JobSettings::Http(job) = call.config.settings() else {
        return Err(call.not_for(JobKind::Http));
    };
    let method = method(job)?;
    let mut request = call.request(method.clone(), &job.url)?;
    if let Some(body) = body(call, job, &method) {
        // Before the configured headers, which may set another type.
        request = request.header(CONTENT_TYPE, "application/json").body(body);
    }
    let (status, body) = send(with_headers(call, request)?).await?;
    if !status.is_success() {
        return Err(http_error("the job endpoint", status, &body));
    }
    let accepted = Outcome::running(json!({ "runId": call.run_id() })).with("httpStatus", json!(status.as_u16()));
    if job.status_url.is_some() {
        return Ok(accepted);
    }
    if job.await_report {
        // No handle: the runner reports by itself, nothing to poll.
        let mut outcome = accepted;
        outcome.metadata = Some(json!({ "httpStatus": status.as_u16() }));
        return Ok(outcome);
    }
    // One report, not "running" then "succeeded": a crash between two reports would leave
    // the run waiting for the second until its poll window ran out.
    let mut message = format!("request accepted with {status} (fire-and-forget)");
    let body = tail(&body);
    if !body.is_empty() {
        message.push_str(": ");
        message.push_str(&body);
    }
    Ok(Outcome::succeeded(message).with("httpStatus", json!(status.as_u16())))
}

pub async fn status(call: &Call<'_>, handle: &Value) -> Result<Outcome, CallError> {
    let JobSettings::Http(job) = call.config.settings() else {
        return Err(call.not_for(JobKind::Http));
    };
    let Some(url) = &job.status_url else {
        return Err(CallError::Permanent("job.config.statusUrl is missing".into()));
    };
    let answer = send_json(
        "the status endpoint",
        with_headers(call, call.request(Method::GET, url)?)?,
    )
    .await?;
    let field = job.status_field.as_deref().unwrap_or("status");
    let found = field.split('.').try_fold(&answer, |v, part| v.get(part));
    let Some(state) = found.and_then(Value::as_str) else {
        return Err(CallError::Permanent(format!(
            "the status endpoint's answer has no string field {field:?}: {}",
            tail(&answer.to_string())
        )));
    };
    let said = format!("the status endpoint says {state}");
    Ok(match state.to_ascii_lowercase().as_str() {
        "succeeded" | "success" | "successful" | "completed" | "complete" | "done" | "ok" => Outcome::succeeded(said),
        "failed" | "failure" | "error" | "errored" => Outcome::failed(None, said),
        "timeout" | "timed_out" | "timedout" => Outcome::timed_out(said),
        "cancelled" | "canceled" | "aborted" => Outcome::failed(Some(FailureCategory::Permanent), said),
        _ => Outcome::running(handle.clone()),
    }
    .with("state", json!(state)))
}

/// The job's `method`.
pub(super) fn method(job: &HttpJob) -> Result<Method, CallError> {
    Ok(match usable(&job.method)? {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Delete => Method::DELETE,
    })
}

/// The trigger's body: a string as it is, another value as JSON, none: the run's date
/// arguments (but a GET sends no body).
pub(super) fn body(call: &Call<'_>, job: &HttpJob, method: &Method) -> Option<String> {
    match &job.body {
        Some(Value::String(raw)) => Some(raw.clone()),
        None if *method == Method::GET || *method == Method::HEAD => None,
        None => {
            let arguments: Map<String, Value> = call
                .date_arguments()
                .into_iter()
                .map(|(name, value)| (name.to_string(), Value::String(value)))
                .collect();
            Some(Value::Object(arguments).to_string())
        }
        Some(other) => Some(other.to_string()),
    }
}

pub(super) fn with_headers(call: &Call<'_>, request: RequestBuilder) -> Result<RequestBuilder, CallError> {
    Ok(request
        .header("Idempotency-Key", call.run_id())
        .headers(call.headers()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::TriggerRequest;
    use crate::runtime::jobs::aws::testing::Parts;

    #[test]
    fn bodies_are_raw_strings_json_or_the_date_arguments() {
        let body_of = |config: Value, method: Method| {
            let parts = Parts::new(JobKind::Http, config);
            let JobSettings::Http(job) = parts.settings() else {
                unreachable!()
            };
            body(&parts.call(), job, &method)
        };
        let raw = r#"{"body": {"pipeline": "x"}}"#;
        assert_eq!(body_of(json!({ "body": raw }), Method::POST).as_deref(), Some(raw));
        assert_eq!(body_of(json!({"body": "a b"}), Method::PUT).as_deref(), Some("a b"));
        assert_eq!(
            body_of(json!({"body": {"b": [1, 2]}}), Method::POST).as_deref(),
            Some(r#"{"b":[1,2]}"#)
        );
        // The test run is daily, 2026-11-22.
        assert_eq!(
            body_of(json!({}), Method::POST).as_deref(),
            Some(r#"{"par_day":"20261122"}"#)
        );
        assert_eq!(
            body_of(json!({"body": null}), Method::DELETE).as_deref(),
            Some(r#"{"par_day":"20261122"}"#)
        );
        assert_eq!(body_of(json!({}), Method::GET), None);
        let mut hourly = Parts::new(JobKind::Http, json!({}));
        hourly.request = TriggerRequest::new(
            "p",
            &crate::core::execution::id("cron", "2026-03-03T10"),
            1,
            hourly.request.config.clone(),
        );
        let JobSettings::Http(job) = hourly.settings() else {
            unreachable!()
        };
        assert_eq!(
            body(&hourly.call(), job, &Method::POST).as_deref(),
            Some(r#"{"par_day":"20260303","par_hour":"10"}"#)
        );
    }
}
