//! The job a pipeline triggers: its type, how often it is retried and polled, and its
//! settings (`job.config`), typed for its type by [`settings`] and read from JSON by [`read`].
//!
//! A [`JobConfig`] keeps the JSON it was read from (under the canonical spellings), as a
//! pipeline config keeps its own: templates render that JSON, a journaled trigger stores it,
//! and the typed view is read again from what was rendered, so the two never drift apart and
//! no client picks a setting out of a `Value`.

mod read;
pub(crate) use read::{is_role_arn, NOT_A_ROLE_ARN};
mod settings;

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::template::TemplateError;

/// How long one try of a trigger may take unless `job.config.timeout` says: the job
/// clients' per-request timeout.
pub const DEFAULT_TRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a synchronous Lambda invocation (RequestResponse) may take unless
/// `job.config.timeout` says: Lambda's 15-minute maximum and a margin.
pub const LAMBDA_SYNC_TRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15 * 60 + 30);

pub use settings::{
    reserved_header, reserved_topic, AirflowJob, AirflowVersion, AwsEndpoint, CommandJob, DatabricksJob, EmrJob,
    EmrServerlessJob, EmrStep, Environment, GlueJob, Headers, HttpJob, HttpMethod, InvocationType, JobId, JobSettings,
    KafkaJob, LambdaJob, StepFunctionJob,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    Http,
    Command,
    Airflow,
    Databricks,
    Glue,
    Emr,
    EmrServerless,
    StepFunction,
    Lambda,
    Kafka,
}

impl JobKind {
    pub(super) const ALL: [(&'static str, JobKind); 10] = [
        ("http", JobKind::Http),
        ("command", JobKind::Command),
        ("airflow", JobKind::Airflow),
        ("databricks", JobKind::Databricks),
        ("glue", JobKind::Glue),
        ("emr", JobKind::Emr),
        ("emr-serverless", JobKind::EmrServerless),
        ("step-function", JobKind::StepFunction),
        ("lambda", JobKind::Lambda),
        ("kafka", JobKind::Kafka),
    ];

    /// The type named `name` (as `job.type` spells it).
    pub fn parse(name: &str) -> Option<JobKind> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// Every type's name, for messages.
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|(n, _)| *n).collect()
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// How often a running job of this type is asked how it is doing, unless
    /// `job.pollInterval` says otherwise.
    pub fn default_poll_interval(self) -> TimeDelta {
        match self {
            JobKind::Http | JobKind::Airflow | JobKind::Databricks | JobKind::StepFunction => TimeDelta::seconds(30),
            _ => TimeDelta::seconds(60),
        }
    }
}

/// Retries with exponential backoff, as a Step Functions `Retry` block has them:
/// `maxAttempts` retries after the first try, waiting `interval`, then `interval ×
/// backoffRate`, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    pub interval_ms: u64,
    pub backoff_rate: f64,
    pub max_attempts: u32,
}

impl RetryPolicy {
    /// Triggers: 30 s, ×2, 3 retries (what the earlier design's state machine did).
    pub fn trigger() -> Self {
        RetryPolicy {
            interval_ms: 30_000,
            backoff_rate: 2.0,
            max_attempts: 3,
        }
    }

    /// Status checks: 2 s, ×2, 3 retries.
    pub fn status_check() -> Self {
        RetryPolicy {
            interval_ms: 2_000,
            backoff_rate: 2.0,
            max_attempts: 3,
        }
    }

    /// The wait before retry `n` (1-based), or `None` when the retries are spent.
    pub fn delay(&self, n: u32) -> Option<std::time::Duration> {
        if n == 0 || n > self.max_attempts {
            return None;
        }
        let ms = self.interval_ms as f64 * self.backoff_rate.powi(n as i32 - 1);
        Some(std::time::Duration::from_millis(ms.min(86_400_000.0) as u64))
    }

    /// All the waits together: how long a spent policy can take, requests aside.
    pub fn total(&self) -> std::time::Duration {
        (1..=self.max_attempts).filter_map(|n| self.delay(n)).sum()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub kind: JobKind,
    /// Type-specific settings, templates unexpanded.
    pub config: JobConfig,
    pub max_retries: u32,
    pub max_code_retries: u32,
    pub max_drift_reruns: u32,
    pub max_manual_reruns: u32,
    pub poll_window: TimeDelta,
    /// How often a running job's status is checked (`job.pollInterval`; per-type default).
    pub poll_interval: TimeDelta,
    /// `job.triggerRetry`: retries of a trigger the target could not take.
    pub trigger_retry: RetryPolicy,
    /// `job.statusCheckRetry`: retries of a status check that failed the same way.
    pub status_retry: RetryPolicy,
    /// `job.retryAfterPollWindow`: a job still running when its poll window closes is
    /// watched on, and its own end (failed, timed out) may spend `maxRetries`. Off (the
    /// earlier design's way): the closed window ends the run, never retried, so no second
    /// copy starts beside one that may still run.
    pub retry_after_poll_window: bool,
}

/// Why a setting cannot be used: the message a trigger reports, and the setting at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unusable {
    /// `job.config.arguments`.
    pub path: String,
    pub message: String,
}

impl Unusable {
    /// `job.config.{key} {reason}`, the form most messages take.
    fn of(key: &str, reason: &str) -> Self {
        let path = format!("job.config.{key}");
        Unusable {
            message: format!("{path} {reason}"),
            path,
        }
    }
}

/// A setting as read: usable, or why no trigger can use it. Settings the config reader once
/// accepted whatever their type are read this way (see [`read`]): a stored config may hold
/// a wrong one, and a trigger refuses the job when it comes to it.
pub type Setting<T> = Result<T, Unusable>;

/// `job.config`: typed for its job type, with the JSON it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfig {
    settings: JobSettings,
    /// `timeout`: seconds per request, which every job type takes.
    timeout: Option<u64>,
    /// The JSON the settings were read from, compact, as text: every pipeline holds one,
    /// and a parsed `Value` costs several times its text (see README, Memory).
    json: Box<str>,
}

/// Why a job config could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// Rendering changes strings only, so a config that read before reads after: this is
    /// a bug, reported rather than hidden.
    #[error(transparent)]
    Unusable(#[from] Unusable),
}

impl JobConfig {
    /// Reads `json` (canonical spellings) as the settings of a `kind` job. It fails only when
    /// a setting the job cannot run without is missing or of the wrong type, which the
    /// reader has reported as a problem first.
    pub fn from_json(kind: JobKind, json: &Value) -> Result<Self, Unusable> {
        let Value::Object(map) = json else {
            return Err(Unusable {
                path: "job.config".into(),
                message: "job config is not a mapping".into(),
            });
        };
        Ok(JobConfig {
            settings: read::settings(kind, map)?,
            timeout: map.get("timeout").and_then(Value::as_u64),
            json: json.to_string().into_boxed_str(),
        })
    }

    pub fn kind(&self) -> JobKind {
        self.settings.kind()
    }

    pub fn settings(&self) -> &JobSettings {
        &self.settings
    }

    /// `timeout`, the per-request timeout in seconds, when one is set.
    pub fn timeout(&self) -> Option<u64> {
        self.timeout
    }

    /// How long one try of this job's trigger may take: `timeout` when set, else what the
    /// job type can legitimately take to answer. A synchronous Lambda invocation lasts as
    /// long as the function (up to Lambda's 15 minutes), every other trigger answers once
    /// the job is started ([`DEFAULT_TRY_TIMEOUT`]). A deadline built on this never cuts a
    /// call that is still within the job's own limits.
    pub fn try_timeout(&self) -> std::time::Duration {
        if let Some(seconds) = self.timeout {
            return std::time::Duration::from_secs(seconds);
        }
        match &self.settings {
            JobSettings::Lambda(job) if job.invocation_type == Ok(InvocationType::RequestResponse) => {
                LAMBDA_SYNC_TRY_TIMEOUT
            }
            _ => DEFAULT_TRY_TIMEOUT,
        }
    }

    /// The JSON the settings were read from (parsed again): what a journaled trigger stores.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.json).expect("a job config's JSON was written from a Value")
    }

    /// The settings with their templates rendered by `render` (run variables in the core,
    /// secrets in the runtime), read again from the rendered JSON.
    pub fn rendered(&self, render: impl FnOnce(&Value) -> Result<Value, TemplateError>) -> Result<Self, RenderError> {
        let json = render(&self.json())?;
        Ok(JobConfig::from_json(self.kind(), &json)?)
    }
}

#[cfg(test)]
mod tests;
