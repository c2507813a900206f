//! `airflow` jobs: a DAG run through Airflow's stable REST API, `/api/v1` (Airflow 2) or
//! `/api/v2` (Airflow 3), with the Sluice run id as the DAG run id.
//!
//! Config: `url` (the webserver / API server) and `dagId` (required); `version` (2 or 3,
//! default 2); `conf` (the DAG run's conf); `logicalDate`; auth: `token` (a bearer token)
//! or `username` + `password` (Airflow 2: basic auth; Airflow 3: exchanged for a token at
//! `POST {url}/auth/token`); `headers` (an object of string values) sent on the trigger,
//! on every status check and on the token exchange (Interlock sent them on the trigger
//! only). An `Authorization` among the `headers` replaces `token` / `username` +
//! `password`: no other credentials are sent or exchanged. Handle: `{"dagRunId"}`.
//!
//! Idempotent: the DAG run id is the run id, so a trigger requested again after a crash
//! gets 409 Conflict ("already exists"), which means this run was started: it is adopted.
//!
//! States: success succeeded; failed failed (the job's retries apply); queued, running and
//! any other state (restarting, up_for_retry, ...) are running.

use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Map, Value};

use super::{http_error, join_url, send, send_json, tail, Call, CallError, Outcome};
use crate::core::config::{AirflowJob, AirflowVersion, JobKind, JobSettings};

pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    let api = Api::new(call)?;
    let mut body = Map::new();
    body.insert("dag_run_id".into(), json!(call.run_id()));
    body.insert("conf".into(), api.job.conf.clone().unwrap_or(json!({})));
    match (&api.job.logical_date, api.job.version) {
        (Some(date), _) => {
            body.insert("logical_date".into(), json!(date));
        }
        // Airflow 3 requires the field; null lets it run without one.
        (None, AirflowVersion::V3) => {
            body.insert("logical_date".into(), Value::Null);
        }
        (None, _) => {}
    }
    let request = api.authorised(call.request(Method::POST, &api.runs_url())?).await?;
    let (status, answer) = send(
        request
            .header("content-type", "application/json")
            .body(Value::Object(body).to_string())
            .headers(call.headers()?),
    )
    .await?;
    let handle = json!({ "dagRunId": call.run_id() });
    if status == StatusCode::CONFLICT {
        return Ok(Outcome::running(handle).with("adopted", json!(true)));
    }
    if !status.is_success() {
        return Err(error(status, &answer));
    }
    let state = serde_json::from_str::<Value>(&answer)
        .ok()
        .and_then(|v| v.get("state").cloned());
    Ok(Outcome::running(handle).with("state", state.unwrap_or(Value::Null)))
}

pub async fn status(call: &Call<'_>, handle: &Value) -> Result<Outcome, CallError> {
    let api = Api::new(call)?;
    let run = handle.get("dagRunId").and_then(Value::as_str).unwrap_or(call.run_id());
    let url = format!("{}/{}", api.runs_url(), segment(run));
    let request = api.authorised(call.request(Method::GET, &url)?).await?;
    let (status, answer) = send(request.headers(call.headers()?)).await?;
    if !status.is_success() {
        return Err(error(status, &answer));
    }
    let run_state: Value = serde_json::from_str(&answer)
        .map_err(|e| CallError::Infra(format!("Airflow answered a DAG run that is not JSON: {e}")))?;
    let state = run_state.get("state").and_then(Value::as_str).unwrap_or("unknown");
    let said = format!("DAG run {run} is {state}");
    Ok(match state {
        "success" => Outcome::succeeded(said),
        "failed" => Outcome::failed(None, said),
        _ => Outcome::running(handle.clone()),
    }
    .with("state", json!(state)))
}

struct Api<'c> {
    call: &'c Call<'c>,
    job: &'c AirflowJob,
}

impl<'c> Api<'c> {
    fn new(call: &'c Call<'c>) -> Result<Self, CallError> {
        match call.config.settings() {
            JobSettings::Airflow(job) => Ok(Api { call, job }),
            _ => Err(call.not_for(JobKind::Airflow)),
        }
    }

    fn runs_url(&self) -> String {
        let api = match self.job.version {
            AirflowVersion::V2 => "api/v1",
            AirflowVersion::V3 => "api/v2",
        };
        join_url(
            &self.job.url,
            &format!("{api}/dags/{}/dagRuns", segment(&self.job.dag_id)),
        )
    }

    /// Adds the configured credentials; Airflow 3 exchanges a username and password for a
    /// token first. None when `headers` carries an `Authorization`.
    async fn authorised(&self, request: RequestBuilder) -> Result<RequestBuilder, CallError> {
        if self.call.has_header("authorization") {
            return Ok(request);
        }
        if let Some(token) = &self.job.token {
            return Ok(request.bearer_auth(token));
        }
        let (Some(user), Some(password)) = (&self.job.username, &self.job.password) else {
            return Ok(request);
        };
        if self.job.version == AirflowVersion::V2 {
            return Ok(request.basic_auth(user, Some(password)));
        }
        let login = self
            .call
            .request(Method::POST, &join_url(&self.job.url, "auth/token"))?
            .header("content-type", "application/json")
            .body(json!({"username": user, "password": password}).to_string())
            .headers(self.call.headers()?);
        let answer = send_json("Airflow's token endpoint", login).await?;
        let token = answer
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or_else(|| CallError::Permanent("Airflow's token endpoint answered no access_token".into()))?;
        Ok(request.bearer_auth(token))
    }
}

/// Airflow's error answers carry `detail` (problem+json in Airflow 2, FastAPI's shape in
/// Airflow 3): quote that rather than the whole body.
fn error(status: StatusCode, body: &str) -> CallError {
    let detail = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.get("detail")
            .map(|d| d.as_str().map(str::to_string).unwrap_or_else(|| d.to_string()))
    });
    http_error("Airflow", status, &detail.unwrap_or_else(|| tail(body)))
}

/// A URL path segment: DAG ids and run ids may hold characters a path may not.
fn segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_quote_the_detail_and_classify_by_status() {
        let e = error(
            StatusCode::NOT_FOUND,
            r#"{"detail": "DAG with dag_id: 'nope' not found", "status": 404, "title": "DAG not found", "type": "about:blank"}"#,
        );
        assert_eq!(
            e,
            CallError::Permanent("Airflow answered 404 Not Found: DAG with dag_id: 'nope' not found".into())
        );
        let e = error(StatusCode::SERVICE_UNAVAILABLE, "upstream down");
        assert!(matches!(e, CallError::Infra(m) if m.ends_with("upstream down")));
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("gold.stream.2026-11-22.1"), "gold.stream.2026-11-22.1");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }
}
