//! Pipeline configuration: the YAML of the earlier design, parsed once into types.
//!
//! Parsing never stops at the first mistake: every problem is collected with the field path
//! at fault, so `sluice config validate` can report them all at once. Unknown fields are
//! warnings, not errors, so YAML written for the earlier design keeps loading.

use std::fmt;

use chrono::{Datelike, NaiveDate, TimeDelta, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::duration::parse_duration;
use super::schedule::Cron;
use super::template;

/// One thing wrong (or suspicious) in a config, located by its field path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// Every problem that made a config invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.problems.iter().map(Problem::to_string).collect();
        write!(f, "{}", parts.join("; "))
    }
}

/// How strict parsing is about `${name}` deployment variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variables {
    /// `config validate`: deployment variables may still be unresolved.
    MayBeUnresolved,
    /// `config apply` output and the processor: every `${name}` must be resolved by now.
    MustBeResolved,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Mode {
    All,
    Any,
}

/// What a rule checks. The expected value is parsed here, once.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Exists,
    Equals(Value),
    Compare(Comparison, f64),
    Age(AgeBound, TimeDelta),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Gt,
    Gte,
    Lt,
    Lte,
}

impl Comparison {
    pub fn holds(self, actual: f64, threshold: f64) -> bool {
        match self {
            Comparison::Gt => actual > threshold,
            Comparison::Gte => actual >= threshold,
            Comparison::Lt => actual < threshold,
            Comparison::Lte => actual <= threshold,
        }
    }
    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::Gt => ">",
            Comparison::Gte => ">=",
            Comparison::Lt => "<",
            Comparison::Lte => "<=",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgeBound {
    /// `age_lt`: the timestamp is younger than the bound.
    YoungerThan,
    /// `age_gt`: the timestamp is older than the bound.
    OlderThan,
}

/// One declarative check against the latest reading of a sensor key.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub key: String,
    /// Field inside the sensor's data; `None` only for `exists`.
    pub field: Option<String>,
    pub check: Check,
    /// The check's name as written (`gte`, `age_lt`...), for messages.
    pub check_name: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluation {
    pub window: TimeDelta,
    pub interval: TimeDelta,
}

impl Default for Evaluation {
    fn default() -> Self {
        Evaluation {
            window: TimeDelta::hours(1),
            interval: TimeDelta::minutes(5),
        }
    }
}

/// A wall-clock time of day in the schedule's timezone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockTime {
    pub hour: u32,
    pub minute: u32,
}

/// An SLA deadline: once a day at `HH:MM`, or each hour at `:MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    Daily(ClockTime),
    Hourly { minute: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Parsed once, when the config is read.
    pub cron: Option<Cron>,
    pub timezone: Tz,
    /// The sensor condition that starts an execution (sensor-triggered pipelines).
    pub trigger: Option<Rule>,
    /// Auto-trigger window closes after this time of day (earlier design's `trigger.deadline`).
    pub trigger_deadline: Option<Deadline>,
    pub evaluation: Evaluation,
    pub include_dates: Vec<NaiveDate>,
    pub expected_start: Option<ClockTime>,
}

/// Which day a daily (`HH:MM`) SLA deadline falls on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineDay {
    /// The data date itself, or the next day when the deadline is at or before the day's
    /// start (cron time, else `schedule.time`). The default with `schedule.cron`.
    DataDate,
    /// The day after the data date: data for the 22nd is due by the deadline on the 23rd.
    /// The default without `schedule.cron`, as in the earlier design, whose watchdog shifted
    /// sensor-driven daily SLAs by a day (interlock `internal/lambda/watchdog/sla.go`).
    NextDay,
}

impl Schedule {
    /// Whether sensors start executions: there is a trigger, or no cron (dependencies,
    /// inclusion dates). With `cron` and `trigger` both, the trigger starts the day's
    /// execution and the cron time only checks that something started.
    pub fn sensor_started(&self) -> bool {
        self.trigger.is_some() || self.cron.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sla {
    pub deadline: Option<Deadline>,
    pub deadline_day: DeadlineDay,
    pub expected_duration: Option<TimeDelta>,
    pub max_duration: Option<TimeDelta>,
    pub timezone: Option<Tz>,
    pub critical: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub mode: Mode,
    pub rules: Vec<Rule>,
}

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
    const ALL: [(&'static str, JobKind); 10] = [
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
    pub config: Map<String, Value>,
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct PostRun {
    pub rules: Vec<Rule>,
    pub evaluation: Option<Evaluation>,
    pub drift_threshold: f64,
    pub drift_field: String,
    pub sensor_timeout: TimeDelta,
}

/// Days on which a pipeline is dormant.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Exclusions {
    pub calendar: Option<Calendar>,
    pub days: Vec<Weekday>,
    pub dates: Vec<NaiveDate>,
}

/// A named calendar. `config apply` replaces the name with the calendar's contents
/// (`{name, days, dates}`), so the processor never reads files; an unresolved one has
/// no days or dates and is only accepted by `config validate`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Calendar {
    pub name: String,
    pub resolved: bool,
    pub days: Vec<Weekday>,
    pub dates: Vec<NaiveDate>,
}

impl Exclusions {
    /// Why `day` is excluded, or `None` when the pipeline runs that day.
    pub fn excludes(&self, day: NaiveDate) -> Option<String> {
        let weekday = day.weekday();
        if self.days.contains(&weekday) {
            return Some(format!("{weekday} is an excluded weekday"));
        }
        if self.dates.contains(&day) {
            return Some(format!("{day} is an excluded date"));
        }
        let calendar = self.calendar.as_ref()?;
        (calendar.days.contains(&weekday) || calendar.dates.contains(&day))
            .then(|| format!("{day} is excluded by calendar {:?}", calendar.name))
    }
}

/// A valid pipeline config. It keeps the JSON it was parsed from: that is what travels on
/// `sluice.config` and what is stored, so the typed view is always derived from one source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct PipelineConfig {
    pub id: String,
    pub owner: Option<String>,
    pub description: Option<String>,
    pub schedule: Schedule,
    pub sla: Option<Sla>,
    pub validation: Validation,
    pub job: Job,
    pub post_run: Option<PostRun>,
    pub exclusions: Exclusions,
    pub dry_run: bool,
    /// Upstream pipelines whose completion for a date is this pipeline's input for that date.
    pub depends_on: Vec<Dependency>,
    raw: Value,
}

/// `dependsOn` entry: when `pipeline` completes an execution, Sluice publishes a sensor
/// `key` (`{status: succeeded, ...}`) to this pipeline for the same date and hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub pipeline: String,
    pub key: String,
}

impl Dependency {
    /// The sensor key an upstream's completion arrives under unless one is named.
    pub fn default_key(upstream: &str) -> String {
        format!("upstream:{upstream}")
    }
}

impl PipelineConfig {
    /// Parses a config in the form it has on the topic (all variables resolved).
    pub fn from_json(raw: &Value) -> Result<Parsed, ConfigError> {
        parse(raw, Variables::MustBeResolved)
    }

    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The schedule id that, with the date, names an execution (`cron` or `stream`, as in
    /// the earlier design).
    pub fn schedule_id(&self) -> &'static str {
        if self.schedule.cron.is_some() {
            "cron"
        } else {
            "stream"
        }
    }

    /// The sensor keys a run reads before it starts: trigger, rules and dependencies.
    pub fn input_keys(&self) -> impl Iterator<Item = &str> {
        let trigger = self.schedule.trigger.iter().map(|t| t.key.as_str());
        let rules = self.validation.rules.iter().map(|r| r.key.as_str());
        let deps = self.depends_on.iter().map(|d| d.key.as_str());
        trigger.chain(rules).chain(deps)
    }

    /// The sensor keys read after a run succeeded (`postRun.rules`).
    pub fn post_run_keys(&self) -> impl Iterator<Item = &str> {
        self.post_run
            .iter()
            .flat_map(|p| p.rules.iter().map(|r| r.key.as_str()))
    }
}

impl TryFrom<Value> for PipelineConfig {
    type Error = ConfigError;
    fn try_from(raw: Value) -> Result<Self, ConfigError> {
        parse(&raw, Variables::MustBeResolved).map(|parsed| parsed.config)
    }
}

impl From<PipelineConfig> for Value {
    fn from(config: PipelineConfig) -> Value {
        config.raw
    }
}

/// A config that parsed, with the warnings worth showing its author.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub config: PipelineConfig,
    pub warnings: Vec<Problem>,
}

/// Parses YAML text into the JSON form used on the topic.
pub fn yaml_to_json(text: &str) -> Result<Value, Problem> {
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| Problem {
        path: String::new(),
        reason: format!("not valid YAML: {e}"),
    })
}

/// Parses and validates a pipeline config, reporting every problem found.
pub fn parse(raw: &Value, variables: Variables) -> Result<Parsed, ConfigError> {
    let mut r = Reader::default();
    let config = r.pipeline(raw, variables);
    match config {
        Some(mut config) if r.problems.is_empty() => {
            config.raw = raw.clone();
            Ok(Parsed {
                config,
                warnings: r.warnings,
            })
        }
        _ => {
            if r.problems.is_empty() {
                r.problem("", "config is not valid");
            }
            Err(ConfigError { problems: r.problems })
        }
    }
}

pub const MAX_PIPELINE_ID_LEN: usize = 200;

/// Collects problems and warnings while walking the JSON.
#[derive(Default)]
struct Reader {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

impl Reader {
    fn problem(&mut self, path: &str, reason: impl Into<String>) {
        self.problems.push(Problem {
            path: path.to_string(),
            reason: reason.into(),
        });
    }

    fn warn(&mut self, path: &str, reason: impl Into<String>) {
        self.warnings.push(Problem {
            path: path.to_string(),
            reason: reason.into(),
        });
    }

    /// Warns about fields nobody reads: usually a typo.
    fn known_fields(&mut self, map: &Map<String, Value>, path: &str, known: &[&str]) {
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                self.warn(&join(path, key), format!("unknown field (known: {})", known.join(", ")));
            }
        }
    }

    fn object<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(map) => Some(map),
            other => {
                self.problem(path, format!("must be a mapping, found {}", describe(other)));
                None
            }
        }
    }

    /// An optional sub-mapping; `null` counts as absent.
    fn section<'v>(&mut self, map: &'v Map<String, Value>, key: &str, path: &str) -> Option<&'v Map<String, Value>> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => self.object(v, &join(path, key)),
        }
    }

    fn string(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.problem(&join(path, key), format!("must be a string, found {}", describe(other)));
                None
            }
        }
    }

    fn required_string(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        let value = self.string(map, key, path);
        if value.is_none() && !self.problems.iter().any(|p| p.path == join(path, key)) {
            self.problem(&join(path, key), "is required");
        }
        value
    }

    fn boolean(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> bool {
        match map.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.problem(
                    &join(path, key),
                    format!("must be true or false, found {}", describe(other)),
                );
                false
            }
        }
    }

    fn duration(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<TimeDelta> {
        let text = self.string(map, key, path)?;
        match parse_duration(&text) {
            Ok(d) if d > TimeDelta::zero() => Some(d),
            Ok(_) => {
                self.problem(&join(path, key), "must be longer than zero");
                None
            }
            Err(e) => {
                self.problem(&join(path, key), e.to_string());
                None
            }
        }
    }

    /// A whole number within `lo..=hi`; absent means `default`.
    fn bounded(&mut self, map: &Map<String, Value>, key: &str, path: &str, lo: u32, hi: u32, default: u32) -> u32 {
        let path = join(path, key);
        match map.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Number(n)) => match n.as_i64() {
                Some(v) if (lo as i64..=hi as i64).contains(&v) => v as u32,
                Some(v) => {
                    self.problem(&path, format!("{v} is out of range [{lo},{hi}]"));
                    default
                }
                None => {
                    self.problem(&path, format!("must be a whole number in [{lo},{hi}], found {n}"));
                    default
                }
            },
            Some(other) => {
                self.problem(
                    &path,
                    format!("must be a whole number in [{lo},{hi}], found {}", describe(other)),
                );
                default
            }
        }
    }

    fn timezone(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<Tz> {
        let name = self.string(map, key, path)?;
        match name.parse::<Tz>() {
            Ok(tz) => Some(tz),
            Err(_) => {
                self.problem(
                    &join(path, key),
                    format!("{name:?} is not an IANA timezone (e.g. UTC, America/New_York)"),
                );
                None
            }
        }
    }

    fn dates(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Vec<NaiveDate> {
        self.each(map, key, path, |r, item, at| {
            let date = item
                .as_str()
                .and_then(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok());
            if date.is_none() {
                r.problem(at, format!("{item} is not a date (expected YYYY-MM-DD)"));
            }
            date
        })
    }

    /// Parses each item of an optional list; `parse` reports its own problems, located by
    /// the item's path (`field[i]`).
    fn each<T>(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        mut parse: impl FnMut(&mut Self, &Value, &str) -> Option<T>,
    ) -> Vec<T> {
        let path = join(path, key);
        let Some(list) = self.list(map, key, &path) else {
            return Vec::new();
        };
        list.iter()
            .enumerate()
            .filter_map(|(i, item)| parse(self, item, &format!("{path}[{i}]")))
            .collect()
    }

    fn list<'v>(&mut self, map: &'v Map<String, Value>, key: &str, path: &str) -> Option<&'v Vec<Value>> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) => Some(list),
            Some(other) => {
                self.problem(path, format!("must be a list, found {}", describe(other)));
                None
            }
        }
    }

    fn pipeline(&mut self, raw: &Value, variables: Variables) -> Option<PipelineConfig> {
        let root = self.object(raw, "")?;
        self.known_fields(
            root,
            "",
            &[
                "pipeline",
                "schedule",
                "sla",
                "validation",
                "job",
                "postRun",
                "exclusions",
                "dryRun",
                "dependsOn",
            ],
        );

        let identity = self.section(root, "pipeline", "");
        if identity.is_none() && !root.contains_key("pipeline") {
            self.problem("pipeline", "is required (pipeline: {id: ...})");
        }
        let empty = Map::new();
        let identity = identity.unwrap_or(&empty);
        self.known_fields(identity, "pipeline", &["id", "owner", "description"]);
        let id = self.required_string(identity, "id", "pipeline");
        if let Some(id) = &id {
            if id.len() > MAX_PIPELINE_ID_LEN
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                self.problem(
                    "pipeline.id",
                    format!("{id:?} must be 1-{MAX_PIPELINE_ID_LEN} characters of letters, digits, '-', '_' or '.'"),
                );
            }
        }
        let owner = self.string(identity, "owner", "pipeline");
        if owner.is_none() {
            self.warn("pipeline.owner", "no owner: alerts will have nobody to go to");
        }
        let description = self.string(identity, "description", "pipeline");

        let schedule = self.schedule(root);
        let sla = self.sla(root, &schedule);
        let validation = self.validation(root);
        let job = self.job(root, variables);
        let post_run = self.post_run(root);
        let exclusions = self.exclusions(root, variables);
        let dry_run = self.boolean(root, "dryRun", "");
        let depends_on = self.depends_on(root, id.as_deref());
        if dry_run && schedule.as_ref().is_some_and(|s| s.trigger.is_none()) {
            self.problem("dryRun", "dry-run needs schedule.trigger (sensor-driven evaluation)");
        }

        Some(PipelineConfig {
            id: id?,
            owner,
            description,
            schedule: schedule?,
            sla,
            validation: validation?,
            job: job?,
            post_run,
            exclusions,
            dry_run,
            depends_on,
            raw: Value::Null,
        })
    }

    fn schedule(&mut self, root: &Map<String, Value>) -> Option<Schedule> {
        let path = "schedule";
        let empty = Map::new();
        let map = match root.get(path) {
            None | Some(Value::Null) => &empty,
            Some(v) => self.object(v, path)?,
        };
        self.known_fields(
            map,
            path,
            &[
                "cron",
                "timezone",
                "trigger",
                "evaluation",
                "include",
                "time",
                "exclude",
                "calendar",
            ],
        );
        let mut cron = self
            .string(map, "cron", path)
            .and_then(|text| match Cron::parse(&text) {
                Ok(cron) => Some(cron),
                Err(e) => {
                    self.problem("schedule.cron", e);
                    None
                }
            });
        let timezone = self.timezone(map, "timezone", path).unwrap_or(Tz::UTC);

        let (trigger, trigger_deadline) = match self.section(map, "trigger", path) {
            // `trigger: {type: cron, expression: ...}` was written for the earlier design,
            // which had no such trigger: its decoder dropped both fields and the pipeline
            // never triggered (interlock pkg/types/pipeline.go, TriggerCondition). What its
            // author meant is a cron schedule, so that is how it is read.
            Some(t) if t.get("type").and_then(Value::as_str) == Some("cron") => {
                self.known_fields(t, "schedule.trigger", &["type", "expression"]);
                let expression = self.required_string(t, "expression", "schedule.trigger");
                if cron.is_some() || map.contains_key("cron") {
                    self.problem(
                        "schedule.trigger",
                        "a cron trigger and schedule.cron together: keep one (schedule.cron)",
                    );
                } else if let Some(text) = expression {
                    match Cron::parse(&text) {
                        Ok(parsed) => {
                            self.warn(
                                "schedule.trigger",
                                format!("{{type: cron}} is read as schedule.cron {text:?}: executions start at the cron time, and a relative SLA is measured from it (write schedule.cron instead)"),
                            );
                            cron = Some(parsed);
                        }
                        Err(e) => self.problem("schedule.trigger.expression", e),
                    }
                }
                (None, None)
            }
            Some(t) => {
                let rule = self.rule(t, "schedule.trigger", &["deadline"]);
                let deadline = self.deadline(t, "deadline", "schedule.trigger");
                (rule, deadline)
            }
            None => (None, None),
        };

        let evaluation = match self.section(map, "evaluation", path) {
            Some(e) => self.evaluation(e, "schedule.evaluation"),
            None => Evaluation::default(),
        };

        let include_dates = match self.section(map, "include", path) {
            Some(inc) => {
                self.known_fields(inc, "schedule.include", &["dates"]);
                let dates = self.dates(inc, "dates", "schedule.include");
                if dates.is_empty()
                    && !self
                        .problems
                        .iter()
                        .any(|p| p.path.starts_with("schedule.include.dates"))
                {
                    self.problem("schedule.include.dates", "must list at least one date");
                }
                if map.contains_key("cron") {
                    self.problem(
                        "schedule.include",
                        "schedule.cron and schedule.include are mutually exclusive",
                    );
                }
                dates
            }
            None => Vec::new(),
        };

        let expected_start = self.string(map, "time", path).and_then(|t| match parse_clock(&t) {
            Some(c) => Some(c),
            None => {
                self.problem("schedule.time", format!("{t:?} is not a time of day (expected HH:MM)"));
                None
            }
        });

        let has_dependencies = root
            .get("dependsOn")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty());
        if trigger.is_none()
            && cron.is_none()
            && !map.contains_key("cron")
            && include_dates.is_empty()
            && !map.contains_key("trigger")
            && !has_dependencies
        {
            self.problem(
                "schedule",
                "nothing starts this pipeline: give schedule.trigger (a sensor condition), schedule.cron or schedule.include.dates",
            );
        }

        Some(Schedule {
            cron,
            timezone,
            trigger,
            trigger_deadline,
            evaluation,
            include_dates,
            expected_start,
        })
    }

    fn evaluation(&mut self, map: &Map<String, Value>, path: &str) -> Evaluation {
        self.known_fields(map, path, &["window", "interval"]);
        let defaults = Evaluation::default();
        let window = self.duration(map, "window", path).unwrap_or(defaults.window);
        let interval = self
            .duration(map, "interval", path)
            .unwrap_or(defaults.interval.min(window));
        if interval > window {
            self.problem(&join(path, "interval"), "must not be longer than the window");
        }
        Evaluation { window, interval }
    }

    fn deadline(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<Deadline> {
        let text = self.string(map, key, path)?;
        let parsed = match text.strip_prefix(':') {
            Some(minute) => minute
                .parse::<u32>()
                .ok()
                .filter(|m| *m < 60 && minute.len() == 2)
                .map(|minute| Deadline::Hourly { minute }),
            None => parse_clock(&text).map(Deadline::Daily),
        };
        if parsed.is_none() {
            self.problem(
                &join(path, key),
                format!("{text:?} is not a deadline (expected HH:MM daily or :MM hourly)"),
            );
        }
        parsed
    }

    fn sla(&mut self, root: &Map<String, Value>, schedule: &Option<Schedule>) -> Option<Sla> {
        let path = "sla";
        let map = self.section(root, path, "")?;
        self.known_fields(
            map,
            path,
            &[
                "deadline",
                "deadlineDay",
                "expectedDuration",
                "maxDuration",
                "timezone",
                "critical",
            ],
        );
        let deadline = self.deadline(map, "deadline", path);
        let has_cron = schedule.as_ref().is_some_and(|s| s.cron.is_some());
        let deadline_day = match self.string(map, "deadlineDay", path).as_deref() {
            None if has_cron => DeadlineDay::DataDate,
            None => DeadlineDay::NextDay,
            Some("dataDate") => DeadlineDay::DataDate,
            Some("nextDay") => DeadlineDay::NextDay,
            Some(other) => {
                self.problem("sla.deadlineDay", format!("{other:?} must be dataDate or nextDay"));
                DeadlineDay::DataDate
            }
        };
        if map.contains_key("deadlineDay") && !matches!(deadline, Some(Deadline::Daily(_))) {
            self.warn("sla.deadlineDay", "has no effect without a daily sla.deadline (HH:MM)");
        }
        let expected_duration = self.duration(map, "expectedDuration", path);
        let max_duration = self.duration(map, "maxDuration", path);
        if let Some(max) = max_duration {
            if max > TimeDelta::hours(24) {
                self.problem("sla.maxDuration", "must not exceed 24h");
            }
            if schedule
                .as_ref()
                .is_some_and(|s| s.trigger.is_none() && s.cron.is_none())
            {
                self.problem(
                    "sla.maxDuration",
                    "needs schedule.trigger or schedule.cron: the relative SLA is measured from the first sensor, or from the cron start",
                );
            }
        }
        let daily_cron = schedule
            .as_ref()
            .and_then(|s| s.cron.as_ref())
            .is_some_and(|c| !c.is_sub_daily());
        if daily_cron && matches!(deadline, Some(Deadline::Hourly { .. })) {
            self.problem(
                "sla.deadline",
                "an hourly deadline (:MM) needs hourly executions, but schedule.cron runs once a day: use HH:MM",
            );
        }
        if expected_duration.is_some() && deadline.is_none() {
            self.warn("sla.expectedDuration", "has no effect without sla.deadline");
        }
        let timezone = self.timezone(map, "timezone", path);
        let critical = self.boolean(map, "critical", path);
        if critical {
            self.warn(
                "sla.critical",
                "is read but changes nothing: every SLA alert is sent the same way (route by pipeline in the alert consumer)",
            );
        }
        Some(Sla {
            deadline,
            deadline_day,
            expected_duration,
            max_duration,
            timezone,
            critical,
        })
    }

    fn validation(&mut self, root: &Map<String, Value>) -> Option<Validation> {
        let path = "validation";
        let empty = Map::new();
        let map = match root.get(path) {
            None | Some(Value::Null) => &empty,
            Some(v) => self.object(v, path)?,
        };
        self.known_fields(map, path, &["trigger", "rules"]);
        let mode = match self.string(map, "trigger", path).map(|m| m.to_ascii_uppercase()) {
            None => Mode::All,
            Some(m) if m == "ALL" => Mode::All,
            Some(m) if m == "ANY" => Mode::Any,
            Some(m) => {
                self.problem("validation.trigger", format!("{m:?} must be ALL or ANY"));
                Mode::All
            }
        };
        let rules = self.rules(map, path);
        let has_dependencies = root
            .get("dependsOn")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty());
        if rules.is_empty()
            && !has_dependencies
            && !self.problems.iter().any(|p| p.path.starts_with("validation.rules"))
        {
            self.warn(
                "validation.rules",
                "no rules: the job triggers as soon as the pipeline starts",
            );
        }
        Some(Validation { mode, rules })
    }

    fn rules(&mut self, map: &Map<String, Value>, path: &str) -> Vec<Rule> {
        self.each(map, "rules", path, |r, item, at| {
            r.object(item, at).and_then(|m| r.rule(m, at, &[]))
        })
    }

    /// A rule (`key`, `check`, `field`, `value`); `extra` names fields the caller reads.
    fn rule(&mut self, map: &Map<String, Value>, path: &str, extra: &[&str]) -> Option<Rule> {
        let mut known = vec!["key", "check", "field", "value"];
        known.extend_from_slice(extra);
        self.known_fields(map, path, &known);
        let key = self.required_string(map, "key", path);
        let check_name = self.required_string(map, "check", path)?;
        let field = self.string(map, "field", path);
        let value = map.get("value").filter(|v| !v.is_null());
        let value_path = join(path, "value");
        let (check, name): (Option<Check>, &'static str) = match check_name.as_str() {
            "exists" => (Some(Check::Exists), "exists"),
            "equals" => match value {
                Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
                    (Some(Check::Equals(v.clone())), "equals")
                }
                Some(other) => {
                    self.problem(
                        &value_path,
                        format!(
                            "equals compares with a string, number or boolean, found {}",
                            describe(other)
                        ),
                    );
                    (None, "equals")
                }
                None => {
                    self.problem(&value_path, "is required for equals");
                    (None, "equals")
                }
            },
            "gt" | "gte" | "lt" | "lte" => {
                let (cmp, name) = match check_name.as_str() {
                    "gt" => (Comparison::Gt, "gt"),
                    "gte" => (Comparison::Gte, "gte"),
                    "lt" => (Comparison::Lt, "lt"),
                    _ => (Comparison::Lte, "lte"),
                };
                match value.and_then(super::rules::as_number) {
                    Some(n) => (Some(Check::Compare(cmp, n)), name),
                    None => {
                        self.problem(
                            &value_path,
                            format!(
                                "{name} needs a number, found {}",
                                value.map(describe).unwrap_or("nothing")
                            ),
                        );
                        (None, name)
                    }
                }
            }
            "age_lt" | "age_gt" => {
                let (bound, name) = if check_name == "age_lt" {
                    (AgeBound::YoungerThan, "age_lt")
                } else {
                    (AgeBound::OlderThan, "age_gt")
                };
                match value.and_then(Value::as_str).map(parse_duration) {
                    Some(Ok(d)) => (Some(Check::Age(bound, d)), name),
                    Some(Err(e)) => {
                        self.problem(&value_path, e.to_string());
                        (None, name)
                    }
                    None => {
                        self.problem(&value_path, format!("{name} needs a duration such as 2h"));
                        (None, name)
                    }
                }
            }
            other => {
                self.problem(
                    &join(path, "check"),
                    format!("{other:?} is not a check (exists, equals, gt, gte, lt, lte, age_lt, age_gt)"),
                );
                (None, "?")
            }
        };
        let check = check?;
        if field.is_none() && check != Check::Exists {
            self.problem(&join(path, "field"), format!("is required for {name}"));
            return None;
        }
        let field = if check == Check::Exists { None } else { field };
        Some(Rule {
            key: key?,
            field,
            check,
            check_name: name,
        })
    }

    fn job(&mut self, root: &Map<String, Value>, variables: Variables) -> Option<Job> {
        let path = "job";
        let Some(map) = self.section(root, path, "") else {
            self.problem(path, "is required (job: {type: ..., config: {...}})");
            return None;
        };
        self.known_fields(
            map,
            path,
            &[
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
            ],
        );
        let kind = self.required_string(map, "type", path).and_then(|t| {
            let found = JobKind::ALL.iter().find(|(name, _)| *name == t).map(|(_, k)| *k);
            if found.is_none() {
                let names: Vec<&str> = JobKind::ALL.iter().map(|(n, _)| *n).collect();
                self.problem("job.type", format!("{t:?} is not a job type ({})", names.join(", ")));
            }
            found
        });
        let config = self.section(map, "config", path).cloned().unwrap_or_default();
        let max_retries = self.bounded(map, "maxRetries", path, 0, 10, 0);
        let max_code_retries = self.bounded(map, "maxCodeRetries", path, 0, 3, 1);
        let max_drift_reruns = self.bounded(map, "maxDriftReruns", path, 0, 5, 1);
        let max_manual_reruns = self.bounded(map, "maxManualReruns", path, 0, 5, 1);
        // 0 means "use the default", as in the earlier design.
        let poll_seconds = match self.bounded(map, "jobPollWindowSeconds", path, 0, 86_400, 3_600) {
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
        let kind = kind?;
        let poll_interval = self
            .duration(map, "pollInterval", path)
            .unwrap_or_else(|| kind.default_poll_interval());
        let trigger_retry = self.retry_policy(map, "triggerRetry", RetryPolicy::trigger());
        let status_retry = self.retry_policy(map, "statusCheckRetry", RetryPolicy::status_check());
        let config = self.canonical_job_config(kind, &config);
        self.job_config(kind, &config);
        self.placeholders(&Value::Object(config.clone()), "job.config", variables);
        Some(Job {
            kind,
            config,
            max_retries,
            max_code_retries,
            max_drift_reruns,
            max_manual_reruns,
            poll_window: TimeDelta::seconds(poll_seconds as i64),
            poll_interval,
            trigger_retry,
            status_retry,
        })
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
            // An Airflow `body` was a JSON text sent as the DAG run's `conf`
            // (interlock internal/trigger/airflow.go).
            JobKind::Airflow => {
                if let Some(Value::String(body)) = config.get("conf") {
                    match serde_json::from_str::<Value>(body) {
                        Ok(conf @ Value::Object(_)) => {
                            config.insert("conf".into(), conf);
                        }
                        _ if template::placeholders(body).is_ok_and(|p| !p.is_empty()) => {}
                        _ => self.problem("job.config.body", "must be a JSON object (it is the DAG run's conf)"),
                    }
                }
            }
            // EMR: `stepName`, `command` (the jar) and `arguments` (`k=v` pairs) made the step
            // (interlock internal/trigger/emr.go).
            JobKind::Emr => {
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
            _ => {}
        }
    }

    /// Settings each triggerable job type cannot do without.
    fn job_config(&mut self, kind: JobKind, config: &Map<String, Value>) {
        let path = "job.config";
        match kind {
            JobKind::Http => {
                self.url(config, "url");
                if let Some(url) = self.string(config, "statusUrl", path) {
                    self.url_text(&url, "job.config.statusUrl");
                }
                self.string(config, "statusField", path);
                if let Some(method) = self.string(config, "method", path) {
                    if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method.to_ascii_uppercase().as_str()) {
                        self.problem(
                            "job.config.method",
                            format!("{method:?} is not an HTTP method (GET, POST, PUT, PATCH, DELETE)"),
                        );
                    }
                }
                self.string(config, "body", path);
            }
            JobKind::Command => {
                self.required_string(config, "command", path);
            }
            JobKind::Airflow => {
                self.url(config, "url");
                self.required_string(config, "dagId", path);
                if let Some(v) = config.get("version") {
                    if !matches!(v.to_string().trim_matches('"'), "2" | "3") {
                        self.problem(
                            "job.config.version",
                            format!("{v} is not an Airflow API version (2 or 3)"),
                        );
                    }
                }
            }
            JobKind::Databricks => {
                self.url(config, "host");
                let authorized = config
                    .get("headers")
                    .and_then(Value::as_object)
                    .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("authorization")));
                if !authorized {
                    self.required_string(config, "token", path);
                }
                match config.get("jobId") {
                    Some(Value::Number(n)) if n.is_u64() => {}
                    Some(Value::String(s)) if s.parse::<u64>().is_ok() || s.starts_with("${") => {}
                    Some(other) => self.problem("job.config.jobId", format!("must be a job id number, found {other}")),
                    None => self.problem("job.config.jobId", "is required"),
                }
            }
            JobKind::Glue => {
                self.required_string(config, "jobName", path);
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
            JobKind::Lambda => {
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
            JobKind::Kafka => {
                self.required_string(config, "topic", path);
            }
        }
        if let Some(headers) = self.section(config, "headers", path) {
            for (name, value) in headers {
                if !value.is_string() {
                    self.problem(&format!("job.config.headers.{name}"), "must be a string");
                }
            }
        }
        self.timeout_seconds(config);
        if let Some(url) = config.get("endpointUrl").and_then(Value::as_str) {
            self.url_text(url, "job.config.endpointUrl");
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
        self.known_fields(&map, &path, &["interval", "backoffRate", "maxAttempts"]);
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

    fn timeout_seconds(&mut self, config: &Map<String, Value>) {
        self.bounded(config, "timeout", "job.config", 1, 86_400, 300);
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

    fn post_run(&mut self, root: &Map<String, Value>) -> Option<PostRun> {
        let path = "postRun";
        let map = self.section(root, path, "")?;
        self.known_fields(
            map,
            path,
            &["rules", "evaluation", "driftThreshold", "driftField", "sensorTimeout"],
        );
        if !map.contains_key("rules") {
            self.problem("postRun.rules", "is required");
        }
        let rules = self.rules(map, path);
        if rules.is_empty() && map.get("rules").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            self.warn(
                "postRun.rules",
                "no rules: nothing is watched after the run (no baseline, drift or missing-sensor alert)",
            );
        }
        let evaluation = self
            .section(map, "evaluation", path)
            .map(|e| self.evaluation(e, "postRun.evaluation"));
        if evaluation.is_some() {
            self.warn(
                "postRun.evaluation",
                "is read but changes nothing: post-run rules are judged on every reading, and sensorTimeout bounds the wait",
            );
        }
        let drift_threshold = match map.get("driftThreshold") {
            None | Some(Value::Null) => 0.0,
            Some(v) => match super::rules::as_number(v) {
                Some(n) if n >= 0.0 => n,
                _ => {
                    self.problem("postRun.driftThreshold", format!("must be a number >= 0, found {v}"));
                    0.0
                }
            },
        };
        let drift_field = self
            .string(map, "driftField", path)
            .unwrap_or_else(|| "sensor_count".to_string());
        let sensor_timeout = self.duration(map, "sensorTimeout", path).unwrap_or(TimeDelta::hours(2));
        Some(PostRun {
            rules,
            evaluation,
            drift_threshold,
            drift_field,
            sensor_timeout,
        })
    }

    /// Top-level `exclusions` (this design) merged with `schedule.exclude`/`schedule.calendar`
    /// (the earlier one), so either form loads.
    fn exclusions(&mut self, root: &Map<String, Value>, variables: Variables) -> Exclusions {
        let mut out = Exclusions::default();
        if let Some(map) = self.section(root, "exclusions", "") {
            self.known_fields(map, "exclusions", &["calendar", "days", "dates"]);
            out.calendar = self.calendar(map, "calendar", "exclusions", variables);
            out.days = self.weekdays(map, "exclusions");
            out.dates = self.dates(map, "dates", "exclusions");
        }
        let Some(schedule) = root.get("schedule").and_then(Value::as_object) else {
            return out;
        };
        if let Some(calendar) = self.calendar(schedule, "calendar", "schedule", variables) {
            out.calendar.get_or_insert(calendar);
        }
        if let Some(map) = self.section(schedule, "exclude", "schedule") {
            self.known_fields(map, "schedule.exclude", &["weekends", "holidays", "dates"]);
            if self.boolean(map, "weekends", "schedule.exclude") {
                out.days.extend([Weekday::Sat, Weekday::Sun]);
            }
            if let Some(calendar) = self.calendar(map, "holidays", "schedule.exclude", variables) {
                out.calendar.get_or_insert(calendar);
            }
            out.dates.extend(self.dates(map, "dates", "schedule.exclude"));
        }
        out.days.sort_by_key(|d| d.num_days_from_monday());
        out.days.dedup();
        out.dates.sort();
        out.dates.dedup();
        out
    }

    /// A calendar reference: a name as written, or `{name, days, dates}` once resolved.
    fn calendar(&mut self, map: &Map<String, Value>, key: &str, path: &str, variables: Variables) -> Option<Calendar> {
        let at = join(path, key);
        match map.get(key)? {
            Value::Null => None,
            Value::String(name) => {
                if variables == Variables::MustBeResolved {
                    self.problem(
                        &at,
                        format!(
                            "calendar {name:?} is not resolved: publish configs with `sluice config apply`, which reads calendars from --calendars DIR"
                        ),
                    );
                }
                Some(Calendar {
                    name: name.clone(),
                    ..Calendar::default()
                })
            }
            Value::Object(calendar) => {
                self.known_fields(calendar, &at, &["name", "days", "dates"]);
                let name = self.required_string(calendar, "name", &at)?;
                Some(Calendar {
                    name,
                    resolved: true,
                    days: self.weekdays(calendar, &at),
                    dates: self.dates(calendar, "dates", &at),
                })
            }
            other => {
                self.problem(
                    &at,
                    format!(
                        "must be a calendar name or a resolved calendar, found {}",
                        describe(other)
                    ),
                );
                None
            }
        }
    }

    /// `dependsOn: [upstream-id, {pipeline: upstream-id, key: sensor-key}]`.
    fn depends_on(&mut self, root: &Map<String, Value>, own_id: Option<&str>) -> Vec<Dependency> {
        let deps = self.each(root, "dependsOn", "", |r, item, at| match item {
            Value::String(id) => Some(Dependency {
                pipeline: id.clone(),
                key: Dependency::default_key(id),
            }),
            Value::Object(map) => {
                r.known_fields(map, at, &["pipeline", "key"]);
                let pipeline = r.required_string(map, "pipeline", at)?;
                let key = r
                    .string(map, "key", at)
                    .unwrap_or_else(|| Dependency::default_key(&pipeline));
                Some(Dependency { pipeline, key })
            }
            other => {
                r.problem(
                    at,
                    format!("must be a pipeline id or {{pipeline, key}}, found {}", describe(other)),
                );
                None
            }
        });
        for (i, dep) in deps.iter().enumerate() {
            if Some(dep.pipeline.as_str()) == own_id {
                self.problem(&format!("dependsOn[{i}]"), "a pipeline cannot depend on itself");
            }
            if deps[..i].iter().any(|d| d.pipeline == dep.pipeline) {
                self.problem(
                    &format!("dependsOn[{i}]"),
                    format!("{:?} is listed twice", dep.pipeline),
                );
            }
        }
        deps
    }

    fn weekdays(&mut self, map: &Map<String, Value>, path: &str) -> Vec<Weekday> {
        self.each(map, "days", path, |r, item, at| {
            let day = item.as_str().and_then(|s| s.parse::<Weekday>().ok());
            if day.is_none() {
                r.problem(at, format!("{item} is not a weekday (monday..sunday)"));
            }
            day
        })
    }
}

/// The keys a job type reads, and the other spellings accepted for them (alias, canonical).
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
        JobKind::Command => (&["command", "timeout"], &[]),
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
                "timeout",
            ],
            &[("jobName", "name")],
        ),
        JobKind::StepFunction => (
            &["stateMachineArn", "input", "region", "endpointUrl", "timeout"],
            &[("arguments", "input")],
        ),
        JobKind::Lambda => (
            &[
                "functionName",
                "payload",
                "invocationType",
                "region",
                "endpointUrl",
                "timeout",
            ],
            &[],
        ),
        JobKind::Kafka => (&["topic", "payload", "headers", "timeout"], &[]),
    }
}

fn parse_clock(text: &str) -> Option<ClockTime> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (hour, minute) = (h.parse().ok()?, m.parse().ok()?);
    (hour < 24 && minute < 60).then_some(ClockTime { hour, minute })
}

#[cfg(test)]
mod tests;
