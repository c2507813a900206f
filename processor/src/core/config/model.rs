//! What a pipeline config says, as types: schedule, SLA, rules, post-run checks,
//! exclusions and dependencies. Durations, timezones, cron expressions and checks are parsed
//! here once, so nothing past this module reads them as strings. A [`PipelineConfig`] keeps
//! the JSON it was read from, as text: that is what travels and what is stored.

use chrono::{Datelike, NaiveDate, TimeDelta, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::job::{Job, JobConfig};
use super::reader::{parse, ConfigError, Parsed, Variables};
use crate::core::ids::PipelineId;
use crate::core::schedule::Cron;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Mode {
    All,
    Any,
    /// At least half of the deciding rules, rounded up: the earlier AWS variant's
    /// `majority-pass` readiness rule.
    Majority,
}

/// What a rule checks. The expected value is parsed here, once.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Exists,
    Equals(Value),
    Compare(Comparison, f64),
    Age(AgeBound, TimeDelta),
    /// How many members a list (a set built with `merge: add`) has: `size_gte` and kin.
    Size(Comparison, f64),
    /// The list holds every one of these members (`contains_all`): "all 24 hours are in".
    ContainsAll(Vec<Value>),
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
    /// Whether failing it holds the run (`error`) or only warns (`warn`).
    pub severity: Severity,
}

/// A rule's `severity`: an `error` (the default) holds the trigger, or fails the post-run
/// check; a `warn` is reported (VALIDATION_WARNED, POST_RUN_WARNED) and the run goes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Error,
    Warn,
}

impl Severity {
    pub fn is_error(&self) -> bool {
        *self == Severity::Error
    }
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
    /// Parsed once, when the config is read; boxed, as most configs have none and a cron
    /// is large.
    pub cron: Option<Box<Cron>>,
    pub timezone: Tz,
    /// The sensor condition that starts an execution (sensor-triggered pipelines).
    pub trigger: Option<Rule>,
    /// Auto-trigger window closes after this time of day (earlier design's `trigger.deadline`).
    pub trigger_deadline: Option<Deadline>,
    pub evaluation: Evaluation,
    pub include_dates: Vec<NaiveDate>,
    pub expected_start: Option<ClockTime>,
    /// `schedule.undatedReadings`: the zone a reading without a date is dated in.
    pub undated_readings: UndatedReadings,
    /// `schedule.excludeBy`: which day a trigger sensor's exclusions are checked against.
    pub exclude_by: ExcludeBy,
}

/// The zone in which a reading that names no date takes its date (from its timestamp, else
/// when it arrived).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UndatedReadings {
    /// UTC, as the earlier design dated them (interlock `ResolveExecutionDate` on Lambda's
    /// UTC clock), whatever `schedule.timezone` says. The default, so its configs and
    /// producers keep their dates.
    #[default]
    Utc,
    /// `schedule.timezone`.
    Timezone,
}

/// Which day decides whether a trigger sensor may start a run on an excluded day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExcludeBy {
    /// The day the trigger arrives, in `schedule.timezone`, as the earlier design checked
    /// its sensor triggers (interlock `IsExcluded(cfg, now)`): a run on Monday for Sunday's
    /// data runs, one on Saturday for Friday's does not. The default.
    #[default]
    RunDay,
    /// The run's data date: Sunday's data is never processed under a weekend exclusion.
    DataDate,
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

    /// The zone an undated reading is dated in (see [`UndatedReadings`]).
    pub fn undated_zone(&self) -> Tz {
        match self.undated_readings {
            UndatedReadings::Utc => Tz::UTC,
            UndatedReadings::Timezone => self.timezone,
        }
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
    /// SLA_AT_RISK forecasts: the runs on record they need (`sla.forecast.minRuns`), or
    /// `None` when switched off (`sla.forecast: false`).
    pub forecast: Option<usize>,
    /// `sla.evaluationDeadline` (the earlier AWS variant's): readiness not reached by then
    /// is EVALUATION_SLA_BREACH.
    pub evaluation_deadline: Option<SlaTime>,
    /// `sla.validationTimeout` (the earlier AWS variant's): a hard stop of evaluation, which
    /// is where the evaluation window closes if that comes first.
    pub validation_timeout: Option<SlaTime>,
    /// `sla.atRiskLeadTime`: EVALUATION_SLA_WARNING comes this long before the evaluation
    /// deadline (and SLA_WARNING before the deadline, unless `expectedDuration` says).
    pub at_risk_lead_time: Option<TimeDelta>,
}

/// A deadline as the earlier AWS variant wrote it: a time of day (`HH:MM`), or a duration
/// after evaluation began (`45m`, `+45m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlaTime {
    At(ClockTime),
    After(TimeDelta),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub mode: Mode,
    pub rules: Vec<Rule>,
    /// Sensors Sluice asks for itself (`evaluator` on a rule), by sensor key.
    pub evaluators: Vec<Evaluator>,
}

impl Validation {
    /// The evaluator that answers for sensor `key`, if one does.
    pub fn evaluator(&self, key: &str) -> Option<&Evaluator> {
        self.evaluators.iter().find(|e| e.key == key)
    }
}

/// A pull sensor: while an execution evaluates, Sluice calls it every `every` and writes
/// its answer as a reading of `key` (source `evaluator`). `call` is an `http` or `command`
/// job's settings, so the SSRF guard, secrets, timeouts and per-target bounds of jobs apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluator {
    pub key: String,
    pub call: JobConfig,
    /// How long an answer satisfies a rule; `None`: until the next answer.
    pub ttl: Option<TimeDelta>,
    /// How often it is called while the execution evaluates; `None`: on the pipeline's
    /// evaluation interval.
    pub every: Option<TimeDelta>,
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

/// How many days after an inclusion date an undated reading still counts for it (Interlock's
/// watchdog looked back as far for inclusion dates).
pub const INCLUSION_LOOKBACK_DAYS: i64 = 3;

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

/// Every schedule id an execution is named by: a cron-started pipeline's, a
/// sensor-started one's.
pub const SCHEDULE_IDS: [&str; 2] = ["cron", "stream"];

/// A valid pipeline config. It keeps the JSON it was parsed from: that is what travels on
/// `sluice.config` and what is stored, so the typed view is always derived from one source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub struct PipelineConfig {
    pub id: PipelineId,
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
    /// Which sensor anomalies are reported (`anomalies`).
    pub anomalies: Anomalies,
    /// The JSON, compact, as text: an instance holds a config for each of its pipelines, and
    /// a parsed `Value` costs several times its text in map nodes (see README, Memory).
    pub(super) json: Box<str>,
}

/// `anomalies`: SENSOR_FLAPPING (off unless configured), UNKNOWN_SENSOR and
/// STALE_SENSOR_WARNING (on unless switched off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomalies {
    pub flapping: Option<Flapping>,
    pub unknown_sensors: bool,
    /// Keys (`*` matches any run of characters) that no rule reads but whose producers are
    /// expected (`machine_*_status`): never UNKNOWN_SENSOR.
    pub expected_sensors: Vec<String>,
    pub stale_sensors: bool,
}

impl Default for Anomalies {
    fn default() -> Self {
        Anomalies {
            flapping: None,
            unknown_sensors: true,
            expected_sensors: Vec::new(),
            stale_sensors: true,
        }
    }
}

/// `anomalies.flapping`: a rule's result changing more than `changes` times within `window`
/// is flapping; with `hold_for`, the trigger waits until the flapping sensor's rules have
/// kept their result that long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flapping {
    pub changes: u32,
    pub window: TimeDelta,
    pub hold_for: Option<TimeDelta>,
}

/// `dependsOn` entry: when `pipeline` completes an execution, Sluice publishes a sensor
/// `key` (`{status: succeeded, ...}`) to this pipeline for the same date and hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub pipeline: PipelineId,
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

    /// The JSON the config was read from, compact (keys sorted): what is stored.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// That JSON as a value, parsed again (for the API, not the loop).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.json).expect("a config's JSON was written from a Value")
    }

    /// The schedule id that, with the date, names an execution (`cron` or `stream`, as in
    /// the earlier design): one of [`SCHEDULE_IDS`].
    pub fn schedule_id(&self) -> &'static str {
        if self.schedule.cron.is_some() {
            SCHEDULE_IDS[0]
        } else {
            SCHEDULE_IDS[1]
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

impl Serialize for PipelineConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}
