//! Carries out the decider's effects outside it. A trigger's outcome is never returned to
//! the decider directly: it is written as a record on `sluice.jobs`, and only that record
//! moves the run forward (the journal).
//!
//! Job types here: `command` (a shell command with a timeout; the exit code decides) and
//! `http` (a request with a timeout; 2xx means submitted). Secrets (`${env:NAME}`) are
//! resolved at the moment of the request and never leave this module.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use chrono::Utc;
use rdkafka::producer::FutureProducer;
use serde_json::{json, Map, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::http::Telemetry;
use super::kafka;
use crate::core::config::JobKind;
use crate::core::lifecycle::{Effect, TriggerRequest};
use crate::core::records::{FailureCategory, JobRecord, JobStatus};
use crate::core::template::render_value;

const DEFAULT_COMMAND_TIMEOUT_S: u64 = 300;
const DEFAULT_HTTP_TIMEOUT_S: u64 = 30;
const MESSAGE_LIMIT: usize = 500;

/// What became of a trigger, before it is written to `sluice.jobs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: JobStatus,
    pub category: Option<FailureCategory>,
    pub message: Option<String>,
    pub metadata: Option<Value>,
}

impl Outcome {
    fn failed(category: Option<FailureCategory>, message: impl Into<String>) -> Self {
        Outcome {
            status: JobStatus::Failed,
            category,
            message: Some(message.into()),
            metadata: None,
        }
    }
}

pub struct Executor {
    producer: FutureProducer,
    jobs_topic: String,
    http: reqwest::Client,
    permits: Arc<Semaphore>,
    tasks: JoinSet<()>,
    telemetry: Arc<Telemetry>,
}

impl Executor {
    pub fn new(
        producer: FutureProducer,
        jobs_topic: String,
        max_concurrent: usize,
        telemetry: Arc<Telemetry>,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Executor {
            producer,
            jobs_topic,
            http,
            permits: Arc::new(Semaphore::new(max_concurrent)),
            tasks: JoinSet::new(),
            telemetry,
        })
    }

    pub fn spawn(&mut self, effect: Effect) {
        let Effect::TriggerJob(request) = effect;
        let producer = self.producer.clone();
        let topic = self.jobs_topic.clone();
        let http = self.http.clone();
        let permits = self.permits.clone();
        let telemetry = self.telemetry.clone();
        telemetry.effect_started();
        self.tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            info!(pipeline = %request.pipeline_id, run_id = %request.run_id, job = request.kind.name(), "triggering job");
            let reporter = Reporter { producer: &producer, topic: &topic, request: &request };
            let outcome = match resolve_secrets(&request.config) {
                Err(missing) => Outcome::failed(Some(FailureCategory::Permanent), missing),
                Ok(config) => match request.kind {
                    JobKind::Command => run_command(&request, &config, &reporter).await,
                    JobKind::Http => call_http(&http, &request.run_id, &config).await,
                    other => Outcome::failed(Some(FailureCategory::Permanent), format!("{} jobs cannot be triggered by this build", other.name())),
                },
            };
            telemetry.effect_outcome(outcome.status.as_str());
            reporter.report(outcome).await;
            telemetry.effect_finished();
        });
        // Reap finished tasks so the set does not grow.
        while self.tasks.try_join_next().is_some() {}
    }

    /// Waits for in-flight effects, at most `grace`.
    pub async fn drain(&mut self, grace: Duration) {
        let deadline = tokio::time::sleep(grace);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = self.tasks.join_next() => if next.is_none() { return },
                _ = &mut deadline => {
                    warn!(in_flight = self.tasks.len(), "shutdown grace elapsed with triggers in flight; their runs stay awaiting a report");
                    self.tasks.abort_all();
                    return;
                }
            }
        }
    }
}

/// Writes job reports for one request.
struct Reporter<'a> {
    producer: &'a FutureProducer,
    topic: &'a str,
    request: &'a TriggerRequest,
}

impl Reporter<'_> {
    async fn report(&self, outcome: Outcome) {
        let r = self.request;
        let record = JobRecord {
            pipeline_id: r.pipeline_id.clone(),
            schedule_id: r.schedule_id.clone(),
            date: r.date.clone(),
            run_id: r.run_id.clone(),
            status: outcome.status,
            failure_category: outcome.category,
            message: outcome.message,
            metadata: outcome.metadata,
            timestamp: Utc::now(),
        };
        let bytes = serde_json::to_vec(&record).expect("job records serialise");
        // The report is the journal: keep trying, a lost report would strand the run.
        let mut backoff = Duration::from_millis(200);
        loop {
            match kafka::send(
                self.producer,
                self.topic,
                Some(r.pipeline_id.as_bytes()),
                Some(&bytes),
                &[],
            )
            .await
            {
                Ok(_) => return,
                Err(e) => {
                    warn!(run_id = %r.run_id, error = %e, "could not write job report; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    async fn running(&self, metadata: Value) {
        self.report(Outcome {
            status: JobStatus::Running,
            category: None,
            message: None,
            metadata: Some(metadata),
        })
        .await;
    }
}

/// Expands `${env:NAME}` from the environment. Errors name the variable, never a value.
fn resolve_secrets(config: &Value) -> Result<Map<String, Value>, String> {
    let mut missing = Vec::new();
    let resolved = render_value(config, &mut |name| {
        let var = name.strip_prefix("env:")?;
        let value = std::env::var(var).ok();
        if value.is_none() {
            missing.push(var.to_string());
        }
        value
    })
    .map_err(|e| e.to_string())?;
    if !missing.is_empty() {
        return Err(format!(
            "secret environment variable(s) not set: {}",
            missing.join(", ")
        ));
    }
    match resolved {
        Value::Object(map) => Ok(map),
        _ => Err("job config is not a mapping".into()),
    }
}

fn timeout_of(config: &Map<String, Value>, default_s: u64) -> Duration {
    Duration::from_secs(config.get("timeout").and_then(Value::as_u64).unwrap_or(default_s))
}

fn tail(text: &str) -> String {
    let trimmed = text.trim();
    let start = trimmed.len().saturating_sub(MESSAGE_LIMIT);
    let start = (start..=trimmed.len())
        .find(|i| trimmed.is_char_boundary(*i))
        .unwrap_or(0);
    trimmed[start..].to_string()
}

/// `command`: `sh -c <command>`; exit 0 succeeds, anything else fails; the timeout kills it.
async fn run_command(request: &TriggerRequest, config: &Map<String, Value>, reporter: &Reporter<'_>) -> Outcome {
    let Some(command) = config.get("command").and_then(Value::as_str) else {
        return Outcome::failed(Some(FailureCategory::Permanent), "job.config.command is missing");
    };
    let timeout = timeout_of(config, DEFAULT_COMMAND_TIMEOUT_S);
    let spawned = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("SLUICE_PIPELINE_ID", &request.pipeline_id)
        .env("SLUICE_SCHEDULE_ID", &request.schedule_id)
        .env("SLUICE_DATE", &request.date)
        .env("SLUICE_RUN_ID", &request.run_id)
        .env("SLUICE_ATTEMPT", request.attempt.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return Outcome::failed(
                Some(FailureCategory::Permanent),
                format!("could not start the command: {e}"),
            )
        }
    };
    reporter.running(json!({"pid": child.id()})).await;
    let mut stderr = child.stderr.take();
    let waited = tokio::time::timeout(timeout, async {
        let mut err = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_string(&mut err).await;
        }
        (child.wait().await, err)
    })
    .await;
    match waited {
        Err(_) => Outcome {
            status: JobStatus::Timeout,
            category: Some(FailureCategory::Timeout),
            message: Some(format!("command timed out after {}s and was killed", timeout.as_secs())),
            metadata: None,
        },
        Ok((Err(e), _)) => Outcome::failed(None, format!("waiting for the command failed: {e}")),
        Ok((Ok(status), _)) if status.success() => Outcome {
            status: JobStatus::Succeeded,
            category: None,
            message: Some("command exited 0".into()),
            metadata: Some(json!({"exitCode": 0})),
        },
        Ok((Ok(status), err)) => {
            let code = status.code();
            let mut message = match code {
                Some(c) => format!("command exited {c}"),
                None => "command was killed by a signal".into(),
            };
            if !err.trim().is_empty() {
                message.push_str(": ");
                message.push_str(&tail(&err));
            }
            Outcome {
                status: JobStatus::Failed,
                category: None,
                message: Some(message),
                metadata: Some(json!({"exitCode": code})),
            }
        }
    }
}

/// `http`: 2xx means submitted. Without `awaitReport: true` the request is fire-and-forget,
/// as in the earlier design, and the accepted request completes the run; with it, the job's
/// runner reports the outcome on `sluice.jobs` (using `${RUN_ID}`). Every request carries
/// `Idempotency-Key: <run id>`: a trigger requested again after a crash has the same key, so
/// a target that honours it never starts the run twice.
async fn call_http(http: &reqwest::Client, run_id: &str, config: &Map<String, Value>) -> Outcome {
    let Some(url) = config.get("url").and_then(Value::as_str) else {
        return Outcome::failed(Some(FailureCategory::Permanent), "job.config.url is missing");
    };
    let method = config
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("POST")
        .to_ascii_uppercase();
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return Outcome::failed(
            Some(FailureCategory::Permanent),
            format!("{method:?} is not an HTTP method"),
        );
    };
    let mut request = http
        .request(method, url)
        .timeout(timeout_of(config, DEFAULT_HTTP_TIMEOUT_S))
        .header("Idempotency-Key", run_id);
    if let Some(headers) = config.get("headers").and_then(Value::as_object) {
        for (name, value) in headers {
            if let Some(v) = value.as_str() {
                request = request.header(name.as_str(), v);
            }
        }
    }
    if let Some(body) = config.get("body") {
        request = request.body(match body {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let what = if e.is_timeout() { "timed out" } else { "failed" };
            // Without the URL: it may carry a secret.
            return Outcome::failed(
                Some(FailureCategory::Transient),
                format!("request {what}: {}", e.without_url()),
            );
        }
    };
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    let metadata = json!({"httpStatus": status.as_u16()});
    if status.is_success() {
        if config.get("awaitReport").and_then(Value::as_bool) == Some(true) {
            return Outcome {
                status: JobStatus::Running,
                category: None,
                message: None,
                metadata: Some(metadata),
            };
        }
        // One report, not "running" then "succeeded": a crash between two reports would leave
        // the run waiting for the second until its poll window ran out. A success on a run
        // still triggering publishes JOB_TRIGGERED and JOB_COMPLETED together.
        return Outcome {
            status: JobStatus::Succeeded,
            category: None,
            message: Some(format!("request accepted with {status} (fire-and-forget)")),
            metadata: Some(metadata),
        };
    }
    // Client errors will not fix themselves, except timeouts and throttling.
    let category = if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 429 {
        FailureCategory::Permanent
    } else {
        FailureCategory::Transient
    };
    let mut message = format!("target answered {status}");
    if !body.trim().is_empty() {
        message.push_str(": ");
        message.push_str(&tail(&body));
    }
    Outcome {
        status: JobStatus::Failed,
        category: Some(category),
        message: Some(message),
        metadata: Some(metadata),
    }
}
