//! Job-type clients: how Sluice starts a job on each kind of target and asks how it is
//! doing. Each module speaks its target's documented protocol and nothing else; retries,
//! backoff, concurrency bounds, circuit breaking and reporting on `sluice.jobs` are the
//! executor's ([`super::effects`]).
//!
//! Every client exposes the same two calls:
//! - `trigger(&Call) -> Result<Outcome, CallError>`: start the run. A job that keeps running
//!   answers [`Outcome::running`] with a *handle* (whatever the status check needs: a run id,
//!   an ARN), kept in the execution's state until the run ends.
//! - `status(&Call, handle) -> Result<Outcome, CallError>`: one status check.
//!
//! A client reads its job's settings as the config reader typed them ([`JobSettings`]),
//! never out of a JSON value; [`trigger`] and [`status`] pick the client by job type.
//!
//! [`CallError::Infra`] means "the target could not be asked" (connection refused, timeout,
//! 5xx, throttling, a concurrency limit): the executor retries it with backoff and, once the
//! policy is spent, reports the run as an infrastructure failure (INFRA_FAILURE).
//! [`CallError::Permanent`] means the request itself is wrong (4xx, a missing job): the run
//! fails with category PERMANENT at once.

pub mod airflow;
pub mod aws;
pub mod command;
pub mod databricks;
pub mod evaluator;
pub mod guard;
pub mod http;
pub mod kafka;
pub mod secrets;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Map, Value};

use crate::core::config::{JobConfig, JobKind, JobSettings, Setting};
use crate::core::execution::ExecutionDate;
use crate::core::lifecycle::TriggerRequest;
use crate::core::records::{FailureCategory, JobStatus};

pub use guard::{Client, Guard, KafkaTopics};
pub use secrets::{Redactor, SecretPolicy};

/// Longest message taken from a target's answer into a report.
pub const MESSAGE_LIMIT: usize = 500;
/// Per-request timeout when the job config sets none (`job.config.timeout`, seconds).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = crate::core::lifecycle::DEFAULT_TRY_TIMEOUT;

/// What became of a trigger or a status check, before it is written to `sluice.jobs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: JobStatus,
    pub category: Option<FailureCategory>,
    pub message: Option<String>,
    pub metadata: Option<Value>,
}

impl Outcome {
    /// The job runs; `handle` is what its status checks need (stored in state, so it must
    /// hold no secret).
    pub fn running(handle: Value) -> Self {
        Outcome {
            status: JobStatus::Running,
            category: None,
            message: None,
            metadata: Some(json!({ "handle": handle })),
        }
    }

    pub fn succeeded(message: impl Into<String>) -> Self {
        Outcome {
            status: JobStatus::Succeeded,
            category: None,
            message: Some(message.into()),
            metadata: None,
        }
    }

    pub fn failed(category: Option<FailureCategory>, message: impl Into<String>) -> Self {
        Outcome {
            status: JobStatus::Failed,
            category,
            message: Some(message.into()),
            metadata: None,
        }
    }

    pub fn timed_out(message: impl Into<String>) -> Self {
        Outcome {
            status: JobStatus::Timeout,
            category: Some(FailureCategory::Timeout),
            message: Some(message.into()),
            metadata: None,
        }
    }

    /// The executor let go of the trigger whose call was to end by `deadline` (its
    /// partition was revoked), naming the call's release key: see [`JobStatus::Released`].
    pub fn released(deadline: Option<chrono::DateTime<chrono::Utc>>, key: Option<&str>) -> Self {
        let metadata = deadline.map(|d| {
            let mut m = json!({ "deadline": d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true) });
            if let Some(key) = key {
                m["releaseKey"] = json!(key);
            }
            m
        });
        Outcome {
            status: JobStatus::Released,
            category: None,
            message: Some("the processor lost the run's partition and stopped making this trigger's call: its next owner may request it".into()),
            metadata,
        }
    }

    /// The executor let go of a trigger whose call it could not begin by its time to begin
    /// (see [`JobStatus::Calling`]): released, with `begun: false`, so that the run's owner
    /// (this processor, or the next) requests it again at once.
    pub fn not_begun(deadline: Option<chrono::DateTime<chrono::Utc>>, key: Option<&str>) -> Self {
        let mut outcome = Outcome::released(deadline, key);
        if let Some(m) = outcome.metadata.as_mut().and_then(Value::as_object_mut) {
            m.insert(crate::core::handover::BEGUN.into(), json!(false));
        }
        outcome.message = Some("the trigger's call could not begin by its time to begin (its start mark not on the jobs topic by then): no call was made, and it is requested again".into());
        outcome
    }

    /// The first try of the trigger whose call is to end by `deadline` is about to be
    /// made: see [`JobStatus::Calling`]. No release key: the mark is public, and a forged
    /// one only makes a new owner wait for the deadline, as before marks were.
    pub fn calling(deadline: chrono::DateTime<chrono::Utc>) -> Self {
        Outcome {
            status: JobStatus::Calling,
            category: None,
            message: Some("the trigger's call is about to be made".into()),
            metadata: Some(json!({ "deadline": deadline.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true) })),
        }
    }

    /// A status check that could not ask how the job is doing: see [`JobStatus::Unknown`].
    pub fn unknown(category: FailureCategory, message: impl Into<String>) -> Self {
        Outcome {
            status: JobStatus::Unknown,
            category: Some(category),
            message: Some(message.into()),
            metadata: None,
        }
    }

    /// The outcome with `redactor`'s secrets replaced in its message and metadata, but for
    /// the handle: status checks need it as the target gave it (and it holds no secret).
    pub fn redacted(mut self, redactor: &Redactor) -> Self {
        self.message = self.message.map(|m| redactor.redact(&m));
        if let Some(Value::Object(metadata)) = &mut self.metadata {
            for (_, value) in metadata.iter_mut().filter(|(k, _)| *k != "handle") {
                redactor.redact_value(value);
            }
        }
        self
    }

    /// Adds `key: value` to the report's metadata (the target's own ids, states, codes).
    pub fn with(mut self, key: &str, value: Value) -> Self {
        let mut map = match self.metadata.take() {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        map.insert(key.to_string(), value);
        self.metadata = Some(Value::Object(map));
        self
    }
}

/// Why a target could not be asked, or refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Worth retrying with backoff: the target is unreachable, overloaded or throttling.
    #[error("{0}")]
    Infra(String),
    /// Retrying the same request cannot help.
    #[error("{0}")]
    Permanent(String),
}

/// One call about one run: the request the decider made (run identity, rendered config)
/// and its job config with `${env:...}` (and `${INTERLOCK_...}`) secrets resolved.
pub struct Call<'a> {
    pub request: &'a TriggerRequest,
    /// The request's job config, its secrets resolved.
    pub config: &'a JobConfig,
    pub client: &'a Client,
    /// For `kafka` jobs, which publish their request on the broker.
    pub producer: Option<&'a crate::runtime::kafka::RenewableProducer>,
    /// The secrets this call resolved and the processor's own, to keep out of its reports.
    pub redactor: &'a Redactor,
}

impl Call<'_> {
    pub fn run_id(&self) -> &str {
        &self.request.run_id
    }

    /// `job.config.timeout` (seconds) or [`DEFAULT_REQUEST_TIMEOUT`].
    pub fn timeout(&self) -> Duration {
        self.timeout_or(DEFAULT_REQUEST_TIMEOUT)
    }

    /// `job.config.timeout` (seconds) or `default`.
    pub fn timeout_or(&self, default: Duration) -> Duration {
        self.config.timeout().map(Duration::from_secs).unwrap_or(default)
    }

    /// A request through the guarded client, with the job's per-request timeout and a W3C
    /// `traceparent` ([`traceparent`]).
    pub fn request(&self, method: Method, url: &str) -> Result<RequestBuilder, CallError> {
        Ok(self
            .client
            .request(method, url, self.timeout())?
            .header("traceparent", traceparent(self.run_id())))
    }

    /// `job.config.headers` as headers, for every request of the job: the trigger and each
    /// status check. Add them last (`RequestBuilder::headers` replaces what was set before
    /// under the same name), so that a configured header overrides the client's own
    /// (`Content-Type`, `Authorization`). Values are marked sensitive (they often carry a
    /// secret) and never quoted in errors.
    pub fn headers(&self) -> Result<HeaderMap, CallError> {
        let mut map = HeaderMap::new();
        let headers = match self.config.settings().headers() {
            None => return Ok(map),
            Some(headers) => usable(headers)?,
        };
        for (name, value) in headers {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                CallError::Permanent(format!("job.config.headers: {name:?} is not an HTTP header name"))
            })?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                CallError::Permanent(format!("job.config.headers.{name} is not a valid HTTP header value"))
            })?;
            value.set_sensitive(true);
            map.append(header, value);
        }
        Ok(map)
    }

    /// Whether `job.config.headers` sets `name` (in any case).
    pub fn has_header(&self, name: &str) -> bool {
        let headers = self.config.settings().headers();
        headers.is_some_and(|h| h.as_ref().is_ok_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case(name))))
    }

    /// Interlock's date arguments of this run ([`date_arguments`]).
    pub fn date_arguments(&self) -> Vec<(&'static str, String)> {
        date_arguments(self.request.execution.date())
    }

    /// The refusal of a client handed another job type's settings: a caller's mistake.
    pub fn not_for(&self, kind: JobKind) -> CallError {
        CallError::Permanent(format!(
            "a {} job's settings were handed to the {} client",
            self.config.kind().name(),
            kind.name()
        ))
    }
}

/// A setting the config reader accepted although no call can use it: refused, PERMANENT,
/// with the message it was always refused with.
pub fn usable<T>(setting: &Setting<T>) -> Result<&T, CallError> {
    setting
        .as_ref()
        .map_err(|unusable| CallError::Permanent(unusable.message.clone()))
}

/// Starts the run of a job of any type but `command` (which [`command`] runs and waits for).
pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    match call.config.kind() {
        JobKind::Http => http::trigger(call).await,
        JobKind::Airflow => airflow::trigger(call).await,
        JobKind::Databricks => databricks::trigger(call).await,
        JobKind::Kafka => kafka::trigger(call).await,
        JobKind::Glue | JobKind::Emr | JobKind::EmrServerless | JobKind::StepFunction | JobKind::Lambda => {
            aws::trigger(call).await
        }
        JobKind::Command => Err(call.not_for(JobKind::Command)),
    }
}

/// One status check of a running job; `handle` is what its trigger answered.
pub async fn status(call: &Call<'_>, handle: &Value) -> Result<Outcome, CallError> {
    match call.config.kind() {
        JobKind::Http => http::status(call, handle).await,
        JobKind::Airflow => airflow::status(call, handle).await,
        JobKind::Databricks => databricks::status(call, handle).await,
        JobKind::Glue | JobKind::Emr | JobKind::EmrServerless | JobKind::StepFunction | JobKind::Lambda => {
            aws::status(call, handle).await
        }
        kind @ (JobKind::Command | JobKind::Kafka) => Err(CallError::Permanent(format!(
            "{} jobs report by themselves and have no status check",
            kind.name()
        ))),
    }
}

/// The date arguments Interlock gave every run (internal/lambda/orchestrator/trigger.go:113-135,
/// internal/lambda/date.go:27-55): `par_day`, the execution day as `YYYYMMDD`, and for an
/// hourly run (`YYYY-MM-DDTHH`) `par_hour`, the hour `HH`.
pub fn date_arguments(date: ExecutionDate) -> Vec<(&'static str, String)> {
    let mut arguments = vec![("par_day", date.compact_day())];
    if let Some(hour) = date.hour {
        arguments.push(("par_hour", format!("{hour:02}")));
    }
    arguments
}

/// The W3C trace context of a job's call: the current span's when spans are exported over
/// OTLP (the target's traces then join Sluice's), else a trace named after the run, not
/// sampled, so that the trigger and every status check of one run share a trace id in the
/// target's logs.
pub fn traceparent(run_id: &str) -> String {
    use opentelemetry::trace::TraceContextExt as _;
    use sha2::{Digest, Sha256};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    let span = context.span();
    let current = span.span_context();
    if current.is_valid() {
        return format!(
            "00-{}-{}-{:02x}",
            current.trace_id(),
            current.span_id(),
            current.trace_flags().to_u8()
        );
    }
    let digest = Sha256::digest(run_id.as_bytes());
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("00-{}-{}-00", hex(&digest[..16]), hex(&digest[16..24]))
}

/// The target a job's calls go to, for concurrency bounds and circuit breaking: the host
/// of a URL, the AWS resource, the topic.
pub fn target(config: &JobConfig) -> String {
    let host = |url: &str| {
        url::Url::parse(url)
            .ok()
            .map(|u| {
                format!(
                    "{}:{}",
                    u.host_str().unwrap_or(""),
                    u.port_or_known_default().unwrap_or(0)
                )
            })
            .unwrap_or_default()
    };
    match config.settings() {
        JobSettings::Http(job) => format!("http:{}", host(&job.url)),
        JobSettings::Airflow(job) => format!("airflow:{}", host(&job.url)),
        JobSettings::Databricks(job) => format!("databricks:{}", host(&job.host)),
        JobSettings::Kafka(job) => format!("kafka:{}", job.topic.as_deref().unwrap_or("?")),
        JobSettings::Command(_) => "command".into(),
        _ => aws::target(config),
    }
}

/// Sends a request; a transport failure (refused, reset, timed out) is [`CallError::Infra`].
/// The URL is left out of messages: it may carry a secret.
pub async fn send(request: RequestBuilder) -> Result<(StatusCode, String), CallError> {
    let response = request.send().await.map_err(|e| {
        if let Some(refused) = guard::refusal(&e) {
            return CallError::Permanent(refused);
        }
        let what = if e.is_timeout() { "timed out" } else { "failed" };
        CallError::Infra(format!("request {what}: {}", e.without_url()))
    })?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| CallError::Infra(format!("reading the answer failed: {}", e.without_url())))?;
    Ok((status, body))
}

/// Sends a request and parses a 2xx answer as JSON; other answers become [`http_error`].
pub async fn send_json(service: &str, request: RequestBuilder) -> Result<Value, CallError> {
    let (status, body) = send(request).await?;
    if !status.is_success() {
        return Err(http_error(service, status, &body));
    }
    if body.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&body)
        .map_err(|e| CallError::Infra(format!("{service} answered {status} with a body that is not JSON: {e}")))
}

/// Classifies a non-2xx answer: timeouts (408), throttling (429) and server errors are
/// worth retrying; other client errors are not.
pub fn http_error(service: &str, status: StatusCode, body: &str) -> CallError {
    let mut message = format!("{service} answered {status}");
    let body = tail(body);
    if !body.is_empty() {
        message.push_str(": ");
        message.push_str(&body);
    }
    let code = status.as_u16();
    if status.is_server_error() || code == 408 || code == 429 {
        CallError::Infra(message)
    } else {
        CallError::Permanent(message)
    }
}

/// The last [`MESSAGE_LIMIT`] bytes of a text, trimmed, cut on a character boundary.
pub fn tail(text: &str) -> String {
    let trimmed = text.trim();
    let start = trimmed.len().saturating_sub(MESSAGE_LIMIT);
    let start = (start..=trimmed.len())
        .find(|i| trimmed.is_char_boundary(*i))
        .unwrap_or(0);
    trimmed[start..].to_string()
}

/// Joins a base URL from config and a path, whatever slashes either has.
pub fn join_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_redacted_but_for_the_handle_status_checks_need() {
        let redactor = Redactor::new(vec!["s3cret-value".into()]);
        let running = Outcome::running(json!("id-s3cret-value"))
            .with("note", json!({"echo": ["s3cret-value"]}))
            .redacted(&redactor);
        assert_eq!(
            running.metadata,
            Some(json!({"handle": "id-s3cret-value", "note": {"echo": ["***"]}}))
        );
        let failed = Outcome::failed(None, "denied for s3cret-value").redacted(&redactor);
        assert_eq!(failed.message.as_deref(), Some("denied for ***"));
    }

    #[test]
    fn http_errors_retry_only_what_can_recover() {
        for code in [408, 429, 500, 502, 503, 504] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(matches!(http_error("x", status, ""), CallError::Infra(_)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(matches!(http_error("x", status, ""), CallError::Permanent(_)), "{code}");
        }
        let e = http_error("airflow", StatusCode::NOT_FOUND, " {\"detail\":\"DAG not found\"} ");
        assert_eq!(
            e.to_string(),
            "airflow answered 404 Not Found: {\"detail\":\"DAG not found\"}"
        );
    }

    #[test]
    fn urls_join_whatever_the_slashes() {
        assert_eq!(join_url("http://a/", "/api/v1"), "http://a/api/v1");
        assert_eq!(join_url("http://a", "api/v1"), "http://a/api/v1");
    }

    #[test]
    fn date_arguments_are_the_compact_day_and_the_hour_of_hourly_runs() {
        let date = |text: &str| text.parse::<ExecutionDate>().unwrap();
        assert_eq!(
            date_arguments(date("2026-03-03")),
            [("par_day", "20260303".to_string())]
        );
        assert_eq!(
            date_arguments(date("2026-03-03T10")),
            [("par_day", "20260303".to_string()), ("par_hour", "10".to_string())]
        );
    }

    #[test]
    fn configured_headers_are_strings_and_checked() {
        use crate::runtime::jobs::aws::testing::Parts;
        let parts = Parts::new(
            JobKind::Http,
            json!({"headers": {"Authorization": "Bearer t", "X-Team": "data"}}),
        );
        let call = parts.call();
        let headers = call.headers().unwrap();
        assert_eq!(headers["authorization"], "Bearer t");
        assert!(headers["authorization"].is_sensitive());
        assert_eq!(headers["x-team"], "data");
        assert!(call.has_header("AUTHORIZATION") && !call.has_header("content-type"));
        for (bad, says) in [
            (
                json!({"headers": {"X-N": 1}}),
                "job.config.headers.X-N must be a string",
            ),
            (json!({"headers": {"bad name": "v"}}), "is not an HTTP header name"),
            (
                json!({"headers": {"X-V": "line\nbreak"}}),
                "X-V is not a valid HTTP header value",
            ),
            (json!({"headers": ["X-A"]}), "must map header names"),
        ] {
            let parts = Parts::new(JobKind::Http, bad.clone());
            match parts.call().headers() {
                Err(CallError::Permanent(m)) => assert!(m.contains(says), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let parts = Parts::new(JobKind::Http, json!({}));
        assert!(parts.call().headers().unwrap().is_empty());
    }

    #[test]
    fn outcomes_gather_metadata() {
        let o = Outcome::running(json!({"runId": 7})).with("state", json!("QUEUED"));
        assert_eq!(o.metadata, Some(json!({"handle": {"runId": 7}, "state": "QUEUED"})));
    }
}
