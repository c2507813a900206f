//! Evaluator calls: one question to a rule's evaluator, whose answer becomes a sensor
//! reading (the executor writes it on `sluice.sensors`, source `evaluator`).
//!
//! - `http`: one request, as an `http` job's trigger is made (`url`, `method`, `headers`,
//!   `body`, `timeout`, the SSRF guard) but GET unless `method` says otherwise; a POST
//!   without `body` sends the question as JSON. A 2xx JSON answer is the reading; any other
//!   answer, or none within the timeout, is a failure.
//! - `command`: `sh -c <command>` with the question as JSON on stdin and the execution's
//!   identity in the environment (`SLUICE_SENSOR_KEY` too), and otherwise only what a
//!   `command` job gets ([`command::shell`]); exit 0 with a JSON object on stdout is the
//!   reading. Killed at the timeout (default 30 s).
//!
//! The question is the earlier AWS variant's evaluator input, `{pipelineId, scheduleId,
//! date, key}`, and its evaluators' answers (`{status: PASS, value: {...}, reason}`) read
//! as they are: a reading holds scalar fields, so nested objects are flattened to dotted
//! names (`value.lag`), which rules name the same way, and lists become their JSON text.

use std::process::Stdio;
use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use reqwest::Method;
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt as _;

use super::{command, http, send_json, tail, Call, CallError};
use crate::core::config::{JobKind, JobSettings};

/// How long an evaluator may take unless its `timeout` says.
pub const DEFAULT_EVALUATOR_TIMEOUT: Duration = Duration::from_secs(30);
/// How deep an answer is flattened; deeper values are kept as JSON text.
const MAX_DEPTH: usize = 8;

/// Asks the evaluator of sensor `key`; `Ok` is the reading's data.
pub async fn ask(call: &Call<'_>, key: &str) -> Result<Map<String, Value>, CallError> {
    match call.config.settings() {
        JobSettings::Http(job) => {
            let method = http::method(job)?;
            let mut request = call.request(method.clone(), &job.url)?;
            let body = match &job.body {
                None if method != Method::GET && method != Method::HEAD => Some(question(call, key).to_string()),
                _ => http::body(call, job, &method),
            };
            if let Some(body) = body {
                request = request.header(CONTENT_TYPE, "application/json").body(body);
            }
            let answer = send_json("the evaluator", http::with_headers(call, request)?).await?;
            reading(answer)
        }
        JobSettings::Command(_) => run(call, key).await,
        _ => Err(call.not_for(JobKind::Http)),
    }
}

/// What the evaluator is asked.
fn question(call: &Call<'_>, key: &str) -> Value {
    let r = call.request;
    json!({"pipelineId": r.pipeline_id, "scheduleId": r.execution.schedule(), "date": r.execution.date_text(), "key": key})
}

async fn run(call: &Call<'_>, key: &str) -> Result<Map<String, Value>, CallError> {
    let mut child = command::shell(call)?
        .env("SLUICE_SENSOR_KEY", key)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| CallError::Permanent(format!("could not start the evaluator command: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input closes the pipe: that is not a failure.
        let _ = stdin.write_all(question(call, key).to_string().as_bytes()).await;
    }
    let timeout = call.timeout_or(DEFAULT_EVALUATOR_TIMEOUT);
    // Dropping the child at the timeout kills it (`kill_on_drop`).
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => {
            return Err(CallError::Infra(format!(
                "the evaluator command timed out after {}s and was killed",
                timeout.as_secs()
            )))
        }
        Ok(Err(e)) => {
            return Err(CallError::Infra(format!(
                "waiting for the evaluator command failed: {e}"
            )))
        }
        Ok(Ok(output)) => output,
    };
    let stdout = call.redactor.redact(&String::from_utf8_lossy(&output.stdout));
    if !output.status.success() {
        let code = output.status.code().map_or("a signal".to_string(), |c| c.to_string());
        let stderr = tail(&call.redactor.redact(&String::from_utf8_lossy(&output.stderr)));
        return Err(CallError::Infra(format!(
            "the evaluator command exited {code}: {stderr}"
        )));
    }
    let answer = serde_json::from_str(stdout.trim()).map_err(|e| {
        CallError::Infra(format!(
            "the evaluator command's output is not JSON ({e}): {}",
            tail(&stdout)
        ))
    })?;
    reading(answer)
}

/// An answer as a reading's data: an object's fields, flattened; a single value as
/// `value`.
pub fn reading(answer: Value) -> Result<Map<String, Value>, CallError> {
    let mut data = Map::new();
    match answer {
        Value::Null => return Err(CallError::Infra("the evaluator answered nothing".into())),
        Value::Object(fields) => flatten("", fields, 0, &mut data),
        other => flatten("", Map::from_iter([("value".to_string(), other)]), 0, &mut data),
    }
    Ok(data)
}

fn flatten(prefix: &str, fields: Map<String, Value>, depth: usize, out: &mut Map<String, Value>) {
    for (name, value) in fields {
        let name = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}.{name}")
        };
        match value {
            Value::Object(inner) if depth < MAX_DEPTH => flatten(&name, inner, depth + 1, out),
            value @ (Value::Object(_) | Value::Array(_)) => {
                out.insert(name, Value::String(value.to_string()));
            }
            scalar => {
                out.insert(name, scalar);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_flattened_to_the_dotted_names_rules_use() {
        let answer =
            json!({"status": "PASS", "value": {"lag": 12, "deep": {"ok": true}}, "tags": ["a"], "reason": null});
        let data = reading(answer).unwrap();
        assert_eq!(
            Value::Object(data),
            json!({"status": "PASS", "value.lag": 12, "value.deep.ok": true, "tags": "[\"a\"]", "reason": null})
        );
        assert_eq!(Value::Object(reading(json!(42)).unwrap()), json!({"value": 42}));
        assert!(reading(Value::Null).is_err());
    }
}
