//! The `job` section: type, retries, polling and `job.config`. The earlier design's
//! spellings of job settings (other key names, other shapes) are read here once, so
//! everything past the reader sees one spelling; `job.config` is then checked for its job
//! type and typed ([`JobConfig`]), which is what the runtime reads.

use chrono::TimeDelta;
use serde_json::{json, Map, Value};

use super::{describe, join, Reader, Variables};
use crate::core::config::job::{AirflowVersion, HttpMethod, Job, JobConfig, JobKind, RetryPolicy};
use crate::core::template;

/// The fields of `job`.
const JOB_FIELDS: [&str; 11] = [
    "type",
    "config",
    "maxRetries",
    "maxCodeRetries",
    "maxDriftReruns",
    "maxManualReruns",
    "jobPollWindowSeconds",
    "pollInterval",
    "triggerRetry",
    "statusCheckRetry",
    "retryAfterPollWindow",
];

impl Reader {
    /// `job`; a `dry_run` pipeline's job config may lack what only a real call needs.
    pub(super) fn job(&mut self, root: &Map<String, Value>, variables: Variables, dry_run: bool) -> Option<Job> {
        let path = "job";
        let Some(map) = self.section(root, path, "") else {
            self.problem(path, "is required (job: {type: ..., config: {...}})");
            return None;
        };
        let map = &self.fields(map, path, &JOB_FIELDS);
        let kind = self.job_kind(map);
        let json = self.section(map, "config", path).cloned().unwrap_or_default();
        let max_retries = self.bounded(map, "maxRetries", path, 0, 10, 0);
        let max_code_retries = self.bounded(map, "maxCodeRetries", path, 0, 3, 1);
        let max_drift_reruns = self.bounded(map, "maxDriftReruns", path, 0, 5, 1);
        let max_manual_reruns = self.bounded(map, "maxManualReruns", path, 0, 5, 1);
        let poll_window = self.poll_window(map);
        let kind = kind?;
        let poll_interval = self
            .duration(map, "pollInterval", path)
            .unwrap_or_else(|| kind.default_poll_interval());
        let trigger_retry = self.retry_policy(map, "triggerRetry", RetryPolicy::trigger());
        let status_retry = self.retry_policy(map, "statusCheckRetry", RetryPolicy::status_check());
        let retry_after_poll_window = self.boolean(map, "retryAfterPollWindow", path);
        let config = self.job_config(kind, &json, variables, dry_run)?;
        Some(Job {
            kind,
            config,
            max_retries,
            max_code_retries,
            max_drift_reruns,
            max_manual_reruns,
            poll_window,
            poll_interval,
            trigger_retry,
            status_retry,
            retry_after_poll_window,
        })
    }

    fn job_kind(&mut self, map: &Map<String, Value>) -> Option<JobKind> {
        let name = self.required_string(map, "type", "job")?;
        let found = JobKind::parse(&name);
        if found.is_none() {
            let names = JobKind::names();
            self.problem("job.type", format!("{name:?} is not a job type ({})", names.join(", ")));
        }
        found
    }

    /// `jobPollWindowSeconds`; 0 means "use the default", as in the earlier design.
    fn poll_window(&mut self, map: &Map<String, Value>) -> TimeDelta {
        let seconds = match self.bounded(map, "jobPollWindowSeconds", "job", 0, 86_400, 3_600) {
            0 => 3_600,
            s if s < 60 => {
                self.problem(
                    "job.jobPollWindowSeconds",
                    format!("{s} is out of range [60,86400] (0 = default 3600)"),
                );
                3_600
            }
            s => s,
        };
        TimeDelta::seconds(seconds as i64)
    }

    /// `job.config`: its canonical spellings, the checks of its job type, its templates,
    /// then its typed settings.
    pub(super) fn job_config(
        &mut self,
        kind: JobKind,
        json: &Map<String, Value>,
        variables: Variables,
        dry_run: bool,
    ) -> Option<JobConfig> {
        let json = self.canonical_job_config(kind, json);
        let checked = self.problems.len();
        self.job_config_checks(kind, &json);
        if dry_run {
            self.only_warnings_since(checked);
        }
        let json = Value::Object(json);
        self.placeholders(&json, "job.config", variables);
        match dry_run {
            true => self.dry_run_job_config(kind, json),
            false => self.typed_job_config(kind, &json),
        }
    }

    /// Problems found since there were `count` made warnings: a dry run never calls its job,
    /// so a job config that only a real call would find wanting (Interlock's emr-serverless
    /// configs carry only `applicationId` and `jobName`) lets a team shadow the earlier
    /// design before it fixes the job.
    fn only_warnings_since(&mut self, count: usize) {
        for mut p in self.problems.split_off(count) {
            p.reason = format!(
                "{} (a dry run never calls the job: fix this before turning dryRun off)",
                p.reason
            );
            self.warnings.push(p);
        }
    }

    /// A dry run's typed job config: each setting a real call cannot do without that is
    /// missing is read as blank (an empty string, or an empty mapping where one is wanted),
    /// with a warning. Nothing calls it: a dry run triggers nothing, and turning dryRun off
    /// reads the config again, strictly.
    fn dry_run_job_config(&mut self, kind: JobKind, mut json: Value) -> Option<JobConfig> {
        let mut filled: Vec<String> = Vec::new();
        loop {
            match JobConfig::from_json(kind, &json) {
                Ok(config) => return Some(config),
                Err(missing) => {
                    let key = missing
                        .path
                        .strip_prefix("job.config.")
                        .unwrap_or(&missing.path)
                        .to_string();
                    let blank = match filled.iter().filter(|k| **k == key).count() {
                        0 => Value::String(String::new()),
                        1 => Value::Object(Map::new()),
                        // Neither blank will do: say so as a real call would.
                        _ => {
                            self.problem(&missing.path, missing.message);
                            return None;
                        }
                    };
                    // The checks may have named it already.
                    if !filled.contains(&key) && !self.warnings.iter().any(|w| w.path == missing.path) {
                        self.warn(
                            &missing.path,
                            format!(
                                "{} (a dry run never calls the job: fix this before turning dryRun off)",
                                missing.message
                            ),
                        );
                    }
                    let Value::Object(map) = &mut json else { return None };
                    map.insert(key.clone(), blank);
                    filled.push(key);
                }
            }
        }
    }

    /// The settings typed for the job type. A setting no trigger can use was accepted before
    /// job configs were typed, and stored configs may hold one: it is a warning, and its
    /// triggers fail as they always did.
    fn typed_job_config(&mut self, kind: JobKind, json: &Value) -> Option<JobConfig> {
        match JobConfig::from_json(kind, json) {
            Ok(config) => {
                for unusable in config.settings().unusable() {
                    self.warn(
                        &unusable.path,
                        format!("every trigger of this job will be refused: {}", unusable.message),
                    );
                }
                Some(config)
            }
            Err(missing) => {
                // The checks have named what is missing already; this keeps any gap between
                // them and the typed settings from letting a config through unnamed.
                if !self.problems.iter().any(|p| p.path.starts_with("job.config")) {
                    self.problem(&missing.path, missing.message);
                }
                None
            }
        }
    }

    /// `job.config` with every key under its canonical name. The earlier design decoded
    /// job configs with Go's JSON decoder, which matches keys case-insensitively, and read
    /// some settings under other names and shapes (interlock `pkg/types/config.go`,
    /// `internal/lambda/orchestrator/trigger.go`); those are accepted here as aliases and
    /// turned into this design's form once, so the runtime reads one spelling. A key no job
    /// of this type reads is a warning that names the known keys.
    fn canonical_job_config(&mut self, kind: JobKind, config: &Map<String, Value>) -> Map<String, Value> {
        let (known, aliases) = job_config_keys(kind);
        let mut out = Map::new();
        let mut unknown = Vec::new();
        for (key, value) in config {
            let canonical = known.iter().find(|k| k.eq_ignore_ascii_case(key)).or_else(|| {
                aliases
                    .iter()
                    .find(|(a, _)| a.eq_ignore_ascii_case(key))
                    .map(|(_, c)| c)
            });
            let Some(canonical) = canonical else {
                unknown.push(key.clone());
                out.insert(key.clone(), value.clone());
                continue;
            };
            if out.insert(canonical.to_string(), value.clone()).is_some() {
                self.problem(
                    &join("job.config", key),
                    format!("{canonical} is given twice (as {key:?} and another spelling): keep one"),
                );
            }
        }
        for key in unknown {
            self.warn(
                &join("job.config", &key),
                format!(
                    "unknown key for job type {}: it is not read (known: {})",
                    kind.name(),
                    known.join(", ")
                ),
            );
        }
        self.interlock_shapes(kind, &mut out);
        out
    }

    /// The earlier design's shapes of settings this design spells differently.
    fn interlock_shapes(&mut self, kind: JobKind, config: &mut Map<String, Value>) {
        match kind {
            JobKind::Airflow => self.airflow_body(config),
            JobKind::Emr => self.emr_flat_step(config),
            _ => {}
        }
    }

    /// An Airflow `body` was a JSON text sent as the DAG run's `conf`
    /// (interlock internal/trigger/airflow.go).
    fn airflow_body(&mut self, config: &mut Map<String, Value>) {
        let Some(Value::String(body)) = config.get("conf") else {
            return;
        };
        match serde_json::from_str::<Value>(body) {
            Ok(conf @ Value::Object(_)) => {
                config.insert("conf".into(), conf);
            }
            _ if template::placeholders(body).is_ok_and(|p| !p.is_empty()) => {}
            _ => self.problem("job.config.body", "must be a JSON object (it is the DAG run's conf)"),
        }
    }

    /// EMR: `stepName`, `command` (the jar) and `arguments` (`k=v` pairs) made the step
    /// (interlock internal/trigger/emr.go).
    fn emr_flat_step(&mut self, config: &mut Map<String, Value>) {
        let flat = ["stepName", "command", "arguments"];
        if config.contains_key("step") || !flat.iter().any(|k| config.contains_key(*k)) {
            return;
        }
        let mut step = Map::new();
        if let Some(name) = config.remove("stepName") {
            step.insert("name".into(), name);
        }
        if let Some(jar) = config.remove("command") {
            step.insert("jar".into(), jar);
        }
        let args: Vec<Value> = match config.remove("arguments") {
            Some(Value::Object(arguments)) => arguments
                .iter()
                .map(|(k, v)| match v {
                    Value::String(v) => json!(format!("{k}={v}")),
                    other => json!(format!("{k}={other}")),
                })
                .collect(),
            Some(other) => {
                self.problem(
                    "job.config.arguments",
                    format!("must map argument names to values, found {}", describe(&other)),
                );
                Vec::new()
            }
            None => Vec::new(),
        };
        step.insert("args".into(), Value::Array(args));
        config.insert("step".into(), Value::Object(step));
    }

    /// Settings each triggerable job type cannot do without, and the values they take.
    fn job_config_checks(&mut self, kind: JobKind, config: &Map<String, Value>) {
        let path = "job.config";
        match kind {
            JobKind::Http => self.http_checks(config),
            JobKind::Command => {
                self.required_string(config, "command", path);
                self.environment(config);
            }
            JobKind::Airflow => self.airflow_checks(config),
            JobKind::Databricks => self.databricks_checks(config),
            JobKind::Glue => self.glue_checks(config),
            JobKind::Emr => {
                self.required_string(config, "clusterId", path);
                if self.section(config, "step", path).is_none() {
                    self.problem("job.config.step", "is required ({name, jar, args})");
                }
            }
            JobKind::EmrServerless => {
                self.required_string(config, "applicationId", path);
                self.required_string(config, "executionRoleArn", path);
                if self.section(config, "jobDriver", path).is_none() {
                    self.problem(
                        "job.config.jobDriver",
                        "is required (the EMR Serverless jobDriver object)",
                    );
                }
            }
            JobKind::StepFunction => {
                self.required_string(config, "stateMachineArn", path);
            }
            JobKind::Lambda => self.lambda_checks(config),
            JobKind::Kafka => {
                self.required_string(config, "topic", path);
            }
        }
        let aws = [
            JobKind::Glue,
            JobKind::Emr,
            JobKind::EmrServerless,
            JobKind::StepFunction,
            JobKind::Lambda,
        ];
        if aws.contains(&kind) {
            self.role_arn(config);
        }
        self.common_checks(config);
    }

    /// An AWS job's `roleArn`, if set: an IAM role's ARN.
    fn role_arn(&mut self, config: &Map<String, Value>) {
        match config.get("roleArn") {
            None | Some(Value::Null) => {}
            Some(Value::String(arn)) if crate::core::config::job::is_role_arn(arn) => {}
            Some(_) => self.problem("job.config.roleArn", crate::core::config::job::NOT_A_ROLE_ARN),
        }
    }

    fn http_checks(&mut self, config: &Map<String, Value>) {
        let path = "job.config";
        self.url(config, "url");
        if let Some(url) = self.string(config, "statusUrl", path) {
            self.url_text(&url, "job.config.statusUrl");
        }
        self.string(config, "statusField", path);
        if let Some(method) = self.string(config, "method", path) {
            if HttpMethod::parse(&method).is_none() {
                self.problem(
                    "job.config.method",
                    format!("{method:?} is not an HTTP method (GET, POST, PUT, PATCH, DELETE)"),
                );
            }
        }
        self.string(config, "body", path);
    }

    fn airflow_checks(&mut self, config: &Map<String, Value>) {
        self.url(config, "url");
        self.required_string(config, "dagId", "job.config");
        if let Some(v) = config.get("version") {
            if AirflowVersion::read(v).is_none() {
                self.problem(
                    "job.config.version",
                    format!("{v} is not an Airflow API version (2 or 3)"),
                );
            }
        }
    }

    fn databricks_checks(&mut self, config: &Map<String, Value>) {
        self.url(config, "host");
        let authorized = config
            .get("headers")
            .and_then(Value::as_object)
            .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("authorization")));
        if !authorized {
            self.required_string(config, "token", "job.config");
        }
        match config.get("jobId") {
            Some(Value::Number(n)) if n.is_u64() => {}
            Some(Value::String(s)) if s.parse::<u64>().is_ok() || s.starts_with("${") => {}
            Some(other) => self.problem("job.config.jobId", format!("must be a job id number, found {other}")),
            None => self.problem("job.config.jobId", "is required"),
        }
    }

    fn glue_checks(&mut self, config: &Map<String, Value>) {
        self.required_string(config, "jobName", "job.config");
        let arguments = config.get("arguments").and_then(Value::as_object);
        for name in ["--par_day", "--par_hour"] {
            if arguments.is_some_and(|a| a.contains_key(name)) {
                self.warn(
                    &format!("job.config.arguments.{name}"),
                    "is sent as written; the earlier design replaced it with the execution date (remove it to get the date)",
                );
            }
        }
    }

    fn lambda_checks(&mut self, config: &Map<String, Value>) {
        let path = "job.config";
        self.required_string(config, "functionName", path);
        if let Some(t) = self.string(config, "invocationType", path) {
            if !matches!(t.as_str(), "RequestResponse" | "Event") {
                self.problem(
                    "job.config.invocationType",
                    format!("{t:?} is not RequestResponse or Event"),
                );
            }
        }
    }

    /// Settings any job type may have: `headers`, `timeout`, `endpointUrl`.
    fn common_checks(&mut self, config: &Map<String, Value>) {
        if let Some(headers) = self.section(config, "headers", "job.config") {
            for (name, value) in headers {
                if !value.is_string() {
                    self.problem(&format!("job.config.headers.{name}"), "must be a string");
                }
            }
        }
        self.bounded(config, "timeout", "job.config", 1, 86_400, 300);
        if let Some(url) = config.get("endpointUrl").and_then(Value::as_str) {
            self.url_text(url, "job.config.endpointUrl");
        }
    }

    /// A command's `env`: names a process environment can hold, string values.
    fn environment(&mut self, config: &Map<String, Value>) {
        let Some(env) = self.section(config, "env", "job.config") else {
            return;
        };
        for (name, value) in env {
            let path = format!("job.config.env.{name}");
            if name.is_empty() || name.contains(['=', '\0']) {
                self.problem(&path, "is not an environment variable name");
            } else if !value.is_string() {
                self.problem(&path, "must be a string");
            }
        }
    }

    /// A required http(s) URL setting of `job.config`.
    fn url(&mut self, config: &Map<String, Value>, key: &str) {
        if let Some(url) = self.required_string(config, key, "job.config") {
            self.url_text(&url, &join("job.config", key));
        }
    }

    fn url_text(&mut self, url: &str, path: &str) {
        if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("${")) {
            self.problem(path, format!("{url:?} must start with http:// or https://"));
        }
    }

    /// `{interval: 30s, backoffRate: 2, maxAttempts: 3}`, each field defaulting to `default`'s.
    fn retry_policy(&mut self, job: &Map<String, Value>, key: &str, default: RetryPolicy) -> RetryPolicy {
        let path = join("job", key);
        let Some(map) = self.section(job, key, "job").cloned() else {
            return default;
        };
        let map = self.fields(&map, &path, &["interval", "backoffRate", "maxAttempts"]);
        let interval_ms = self
            .duration(&map, "interval", &path)
            .map(|d| d.num_milliseconds() as u64)
            .unwrap_or(default.interval_ms);
        let backoff_rate = match map.get("backoffRate") {
            None | Some(Value::Null) => default.backoff_rate,
            Some(v) => match v.as_f64() {
                Some(r) if (1.0..=10.0).contains(&r) => r,
                _ => {
                    self.problem(
                        &join(&path, "backoffRate"),
                        format!("must be a number in [1,10], found {v}"),
                    );
                    default.backoff_rate
                }
            },
        };
        let max_attempts = self.bounded(&map, "maxAttempts", &path, 0, 10, default.max_attempts);
        RetryPolicy {
            interval_ms,
            backoff_rate,
            max_attempts,
        }
    }

    fn placeholders(&mut self, value: &Value, path: &str, variables: Variables) {
        match value {
            Value::String(s) => match template::placeholders(s) {
                Err(e) => self.problem(path, e.to_string()),
                Ok(found) => {
                    for name in found {
                        if template::is_builtin(&name) {
                            continue;
                        }
                        if variables == Variables::MayBeUnresolved {
                            self.warn(
                                path,
                                format!("${{{name}}} is a deployment variable: config apply needs --var {name}=VALUE"),
                            );
                            continue;
                        }
                        self.problem(
                            path,
                            format!("${{{name}}} is not resolved: pass --var {name}=VALUE to config apply"),
                        );
                    }
                }
            },
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.placeholders(item, &format!("{path}[{i}]"), variables);
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    self.placeholders(v, &join(path, k), variables);
                }
            }
            _ => {}
        }
    }
}

/// The keys a job type reads, and the other spellings accepted for them (alias, canonical).
/// A table, one arm per job type, long only as rustfmt lays out its lists.
fn job_config_keys(kind: JobKind) -> (&'static [&'static str], &'static [(&'static str, &'static str)]) {
    match kind {
        JobKind::Http => (
            &[
                "url",
                "method",
                "headers",
                "body",
                "statusUrl",
                "statusField",
                "awaitReport",
                "timeout",
            ],
            &[],
        ),
        JobKind::Command => (&["command", "env", "timeout"], &[]),
        JobKind::Airflow => (
            &[
                "url",
                "dagId",
                "conf",
                "logicalDate",
                "version",
                "username",
                "password",
                "token",
                "headers",
                "timeout",
            ],
            &[("body", "conf")],
        ),
        JobKind::Databricks => (
            &[
                "host",
                "token",
                "jobId",
                "jobParameters",
                "notebookParams",
                "headers",
                "timeout",
            ],
            &[("workspaceUrl", "host"), ("arguments", "notebookParams")],
        ),
        JobKind::Glue => (
            &[
                "jobName",
                "arguments",
                "workerType",
                "numberOfWorkers",
                "jobTimeoutMinutes",
                "region",
                "endpointUrl",
                "roleArn",
                "timeout",
            ],
            &[],
        ),
        // `stepName`, `command` and `arguments` are folded into `step` (interlock_shapes).
        JobKind::Emr => (
            &[
                "clusterId",
                "step",
                "stepName",
                "command",
                "arguments",
                "region",
                "endpointUrl",
                "roleArn",
                "timeout",
            ],
            &[],
        ),
        JobKind::EmrServerless => (
            &[
                "applicationId",
                "executionRoleArn",
                "jobDriver",
                "configurationOverrides",
                "name",
                "jobTimeoutMinutes",
                "region",
                "endpointUrl",
                "roleArn",
                "timeout",
            ],
            &[("jobName", "name")],
        ),
        JobKind::StepFunction => (
            &[
                "stateMachineArn",
                "input",
                "region",
                "endpointUrl",
                "roleArn",
                "timeout",
            ],
            &[("arguments", "input")],
        ),
        JobKind::Lambda => (
            &[
                "functionName",
                "payload",
                "invocationType",
                "region",
                "endpointUrl",
                "roleArn",
                "timeout",
            ],
            &[],
        ),
        JobKind::Kafka => (&["topic", "payload", "headers", "timeout"], &[]),
    }
}
