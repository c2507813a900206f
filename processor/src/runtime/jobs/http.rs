//! `http` jobs: one request (`url`, `method` default POST, `headers`, `body`), 2xx means
//! accepted. Then, as configured:
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

use reqwest::Method;
use serde_json::{json, Value};

use super::{http_error, send, send_json, tail, Call, CallError, Outcome};
use crate::core::records::FailureCategory;

pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    let url = call.required("url")?;
    let method = call.optional("method").unwrap_or("POST").to_ascii_uppercase();
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| CallError::Permanent(format!("{method:?} is not an HTTP method")))?;
    let mut request = with_headers(call, call.request(method, url)?);
    if let Some(body) = call.config.get("body") {
        request = request.body(match body {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    let (status, body) = send(request).await?;
    if !status.is_success() {
        return Err(http_error("the job endpoint", status, &body));
    }
    let accepted = Outcome::running(json!({ "runId": call.run_id() })).with("httpStatus", json!(status.as_u16()));
    if call.optional("statusUrl").is_some() {
        return Ok(accepted);
    }
    if call.config.get("awaitReport").and_then(Value::as_bool) == Some(true) {
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
    let url = call.required("statusUrl")?;
    let answer = send_json(
        "the status endpoint",
        with_headers(call, call.request(Method::GET, url)?),
    )
    .await?;
    let field = call.optional("statusField").unwrap_or("status");
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

fn with_headers(call: &Call<'_>, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request = request.header("Idempotency-Key", call.run_id());
    if let Some(headers) = call.config.get("headers").and_then(Value::as_object) {
        for (name, value) in headers {
            if let Some(v) = value.as_str() {
                request = request.header(name.as_str(), v);
            }
        }
    }
    request
}
