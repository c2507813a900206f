//! "How is this pipeline doing?": the read model behind the HTTP API and `sluice status`,
//! derived from a pipeline's state alone (so any instance that owns it answers the same).

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::config::{AgeBound, Check, Comparison, Deadline, Mode, PipelineConfig, Rule};
use super::duration::format_duration;
use super::events::{Event, EventType};
use super::execution::{ExecutionDate, RunId};
use super::lifecycle::{date_start, deadline_of, Execution, PendingTimer, Phase, PipelineState};
use super::records::EVALUATOR_SOURCE;
use crate::core::ids::PipelineId;

/// One line of the pipeline list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineSummary {
    pub pipeline_id: PipelineId,
    /// False while only sensors have arrived for an id no config names yet.
    pub configured: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    /// The upstream pipelines its config names in `dependsOn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<PipelineId>,
    /// Open and recent executions, newest date first.
    pub executions: Vec<ExecutionSummary>,
    /// The soonest pending timer of the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_timer: Option<TimerSummary>,
}

impl PipelineSummary {
    /// The pipeline's state as a list shows it: its latest execution's, else `idle` (a
    /// config, nothing run yet) or `unconfigured` (sensors only).
    pub fn state(&self) -> &str {
        match self.executions.first() {
            Some(e) => e.state.as_str(),
            None if self.configured => "idle",
            None => "unconfigured",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionSummary {
    pub schedule_id: String,
    pub date: String,
    /// See [`state_name`].
    pub state: String,
    pub attempt: u32,
    /// When the current state began.
    pub since: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Why it failed, went stale or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerSummary {
    /// The timer's kind, e.g. `slaBreach`.
    pub kind: String,
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
}

/// One latest reading, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SensorView {
    pub key: String,
    /// The execution date (`YYYY-MM-DD[THH]`) the reading is for, when the producer named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub data: serde_json::Map<String, serde_json::Value>,
    pub received_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
}

/// The latest readings of `state`, by key then scope.
pub fn sensors(state: &PipelineState) -> Vec<SensorView> {
    state
        .sensors
        .iter()
        .map(|(slot, sensor)| {
            let (key, scope) = sensor.split_slot(slot);
            SensorView {
                key: key.to_string(),
                scope: scope.map(str::to_string),
                data: (*sensor.data).clone(),
                received_at: sensor.received_at,
                timestamp: sensor.timestamp,
            }
        })
        .collect()
}

/// An evaluator, as the operator page shows it: how it is called and what it last answered
/// for each date.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluatorView {
    pub key: String,
    /// `http` or `command`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// How often it is called while an execution evaluates.
    pub every: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    pub answers: Vec<EvaluatorAnswer>,
}

/// One answer of an evaluator (the latest per date): its age is `now - answeredAt`, and
/// after `expiresAt` it no longer satisfies a rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluatorAnswer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub answered_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Why the last call gave no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Failed calls in a row.
    pub failures: u32,
    pub data: serde_json::Map<String, serde_json::Value>,
}

/// The evaluators of `state`'s config, with their answers.
pub fn evaluators(state: &PipelineState) -> Vec<EvaluatorView> {
    let Some(config) = state.config.as_deref() else {
        return Vec::new();
    };
    let interval = config.schedule.evaluation.interval;
    (config.validation.evaluators.iter())
        .map(|e| EvaluatorView {
            key: e.key.clone(),
            kind: e.call.kind().name(),
            every: format_duration(e.every.unwrap_or(interval)),
            ttl: e.ttl.map(format_duration),
            answers: (state.sensors.iter())
                .filter(|(slot, s)| s.key_in(slot) == e.key && s.source.as_deref() == Some(EVALUATOR_SOURCE))
                .map(|(slot, s)| {
                    let answered_at = s.timestamp.unwrap_or(s.received_at);
                    EvaluatorAnswer {
                        scope: s.split_slot(slot).1.map(str::to_string),
                        answered_at,
                        expires_at: e.ttl.filter(|_| s.error.is_none()).map(|ttl| answered_at + ttl),
                        error: s.error.clone(),
                        failures: s.failures,
                        data: (*s.data).clone(),
                    }
                })
                .collect(),
        })
        .collect()
}

/// Every pending timer of `state`, soonest first.
pub fn timers(state: &PipelineState) -> Vec<TimerSummary> {
    let mut timers: Vec<TimerSummary> = state.timers.values().map(|t| timer_summary(t)).collect();
    timers.sort_by_key(|t| t.at);
    timers
}

fn timer_summary(t: &PendingTimer) -> TimerSummary {
    TimerSummary {
        kind: timer_kind_name(&t.timer.encode()),
        at: t.at,
        date: t.timer.execution().map(|id| id.date_text().to_string()),
    }
}

/// The operator's word for a phase: waiting (for its rules), triggering, running, completed,
/// failed, validation-exhausted, dry-run, cancelled, stale, excluded.
pub fn state_name(phase: &Phase) -> &'static str {
    match phase {
        Phase::AwaitingRules => "waiting",
        Phase::AwaitingTrigger { .. } => "triggering",
        Phase::AwaitingJob { .. } => "running",
        Phase::Succeeded { .. } => "completed",
        Phase::Failed { .. } => "failed",
        Phase::ValidationExhausted { .. } => "validation-exhausted",
        Phase::WouldHaveTriggered { .. } => "dry-run",
        Phase::Cancelled { .. } => "cancelled",
        Phase::Stale { .. } => "stale",
        Phase::Skipped { .. } => "excluded",
    }
}

fn execution_summary(execution: &Execution) -> ExecutionSummary {
    let reason = match &execution.phase {
        Phase::Failed { reason, .. } | Phase::Stale { reason, .. } | Phase::Skipped { reason, .. } => {
            Some(reason.clone())
        }
        _ => None,
    };
    ExecutionSummary {
        schedule_id: execution.id.schedule().to_string(),
        date: execution.id.date_text().to_string(),
        state: state_name(&execution.phase).to_string(),
        attempt: execution.attempt,
        since: execution.phase_since,
        run_id: execution.phase.run_id().cloned(),
        reason,
    }
}

/// The summary of `state`, pipeline `pipeline_id`.
pub fn summarize(pipeline_id: &str, state: &PipelineState) -> PipelineSummary {
    let mut executions: Vec<ExecutionSummary> = state.executions.values().map(|e| execution_summary(e)).collect();
    executions.sort_by(|a, b| b.date.cmp(&a.date).then_with(|| a.schedule_id.cmp(&b.schedule_id)));
    let next_timer = state.timers.values().min_by_key(|t| t.at).map(|t| timer_summary(t));
    let config = state.config.as_deref();
    PipelineSummary {
        pipeline_id: pipeline_id.into(),
        configured: config.is_some(),
        owner: config.and_then(|c| c.owner.clone()),
        description: config.and_then(|c| c.description.clone()),
        dry_run: config.is_some_and(|c| c.dry_run),
        depends_on: config
            .map(|c| c.depends_on.iter().map(|d| d.pipeline.clone()).collect())
            .unwrap_or_default(),
        executions,
        next_timer,
    }
}

/// One past run as the pipeline page charts it: when, within its date, it was triggered and
/// completed, and the date's SLA deadline.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub date: String,
    /// The start of the date in the schedule's timezone: its midnight, or its hour.
    pub date_start: DateTime<Utc>,
    /// Seconds from the date's start to the first trigger.
    pub triggered_after: i64,
    /// Seconds from the first trigger to success.
    pub duration: i64,
    pub triggered_at: DateTime<Utc>,
    pub completed_at: DateTime<Utc>,
    /// The date's SLA deadline under the config in force, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
}

/// The runs the SLA forecast is made from (see [`crate::core::history`]), oldest first.
pub fn run_history(state: &PipelineState) -> Vec<RunView> {
    let Some(config) = state.config.as_deref() else {
        return Vec::new();
    };
    (state.history.runs.iter())
        .map(|run| {
            let start = date_start(config, run.date);
            let triggered_at = start + TimeDelta::seconds(run.triggered_after);
            RunView {
                date: run.date.to_string(),
                date_start: start,
                triggered_after: run.triggered_after,
                duration: run.duration,
                triggered_at,
                completed_at: triggered_at + TimeDelta::seconds(run.duration),
                deadline: deadline_of(config, run.date),
            }
        })
        .collect()
}

/// The SLA forecast of a date still open, as its latest SLA_AT_RISK or SLA_RECOVERED said it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionView {
    pub date: String,
    /// The start of the date in the schedule's timezone (see [`RunView::date_start`]).
    pub date_start: DateTime<Utc>,
    /// SLA_AT_RISK or SLA_RECOVERED.
    #[serde(rename = "type")]
    pub kind: EventType,
    pub event_id: String,
    #[serde(flatten)]
    pub figures: ProjectionFigures,
}

/// The figures of a forecast event's detail the page draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionFigures {
    pub deadline: DateTime<Utc>,
    pub projected_completion: DateTime<Utc>,
    pub margin_seconds: i64,
    pub usual_trigger_at: DateTime<Utc>,
    #[serde(default)]
    pub triggered_at: Option<DateTime<Utc>>,
}

/// The latest forecast among `events` (oldest first) of a date not started or still open.
pub fn sla_projection(state: &PipelineState, events: &[&Event]) -> Option<ProjectionView> {
    let config = state.config.as_deref()?;
    let open = |date: &str| {
        (state.executions.values())
            .filter(|e| e.id.date_text() == date)
            .all(|e| e.phase().is_open())
    };
    events.iter().rev().find_map(|e| {
        if !matches!(e.kind, EventType::SLA_AT_RISK | EventType::SLA_RECOVERED) {
            return None;
        }
        let date = e.date.as_deref().filter(|d| open(d))?;
        let figures = serde_json::from_value(serde_json::Value::Object(e.detail.clone())).ok()?;
        Some(ProjectionView {
            date: date.to_string(),
            date_start: date_start(config, ExecutionDate::canonical(date)?),
            kind: e.kind,
            event_id: e.event_id.clone(),
            figures,
        })
    })
}

/// A validation rule as the pipeline page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleView {
    pub key: String,
    pub sentence: String,
}

/// The config's validation rules, in order (their latest results are in the same order).
pub fn rules(config: &PipelineConfig) -> Vec<RuleView> {
    config
        .validation
        .rules
        .iter()
        .map(|r| RuleView {
            key: r.key.clone(),
            sentence: rule_sentence(r),
        })
        .collect()
}

/// A rule as a sentence: `row-count.count is at least 1000`.
pub fn rule_sentence(rule: &Rule) -> String {
    let subject = match &rule.field {
        Some(field) => format!("{}.{field}", rule.key),
        None => format!("sensor {}", rule.key),
    };
    match &rule.check {
        Check::Exists if rule.field.is_some() => format!("{subject} is present"),
        Check::Exists => format!("{subject} has arrived"),
        Check::Equals(value) => format!("{subject} equals {value}"),
        Check::Compare(comparison, threshold) => {
            let words = match comparison {
                Comparison::Gt => "more than",
                Comparison::Gte => "at least",
                Comparison::Lt => "less than",
                Comparison::Lte => "at most",
            };
            format!("{subject} is {words} {}", number(*threshold))
        }
        Check::Age(AgeBound::YoungerThan, age) => {
            format!("{subject} is less than {} old", format_duration(*age))
        }
        Check::Age(AgeBound::OlderThan, age) => format!("{subject} is more than {} old", format_duration(*age)),
        Check::Size(comparison, threshold) => {
            format!("{subject} has {} {} members", comparison.symbol(), number(*threshold))
        }
        Check::ContainsAll(members) => format!("{subject} holds all {} expected members", members.len()),
    }
}

/// `1000`, `0.5`.
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// The config as a person reads it: what starts a run, how its rules are checked, its SLA
/// and its job, one sentence each.
pub fn config_sentences(config: &PipelineConfig) -> Vec<String> {
    let mut out = Vec::new();
    let schedule = &config.schedule;
    if let Some(trigger) = &schedule.trigger {
        out.push(format!("A run starts when {}.", rule_sentence(trigger)));
    }
    if let Some(cron) = &schedule.cron {
        let cron = cron.as_str();
        out.push(format!(
            "A run starts at each time of cron `{cron}` ({}).",
            schedule.timezone
        ));
    }
    for d in &config.depends_on {
        out.push(format!(
            "It waits for pipeline {} to succeed for the same date.",
            d.pipeline
        ));
    }
    let evaluation = schedule.evaluation;
    let mode = match config.validation.mode {
        Mode::All => "all rules must pass",
        Mode::Any => "one rule must pass",
        Mode::Majority => "at least half of the rules must pass",
    };
    out.push(format!(
        "Rules are checked on every sensor and every {} for {} after a run starts; {mode}.",
        format_duration(evaluation.interval),
        format_duration(evaluation.window)
    ));
    for e in &config.validation.evaluators {
        let ttl = match e.ttl {
            Some(ttl) => format!("; an answer counts for {}", format_duration(ttl)),
            None => String::new(),
        };
        out.push(format!(
            "Sensor {} is asked of its {} evaluator every {} while a run waits{ttl}.",
            e.key,
            e.call.kind().name(),
            format_duration(e.every.unwrap_or(evaluation.interval))
        ));
    }
    if let Some(sla) = &config.sla {
        let deadline = match &sla.deadline {
            Some(Deadline::Daily(t)) => Some(format!("{:02}:{:02} each day", t.hour, t.minute)),
            Some(Deadline::Hourly { minute }) => Some(format!("minute {minute:02} of the next hour")),
            None => None,
        };
        if let Some(deadline) = deadline {
            let warning = sla
                .expected_duration
                .map(|d| format!(", with a warning {} before", format_duration(d)))
                .unwrap_or_default();
            out.push(format!("It must complete by {deadline}{warning}."));
        }
        if let Some(max) = sla.max_duration {
            out.push(format!(
                "It must complete within {} of its first sensor.",
                format_duration(max)
            ));
        }
    }
    let job = &config.job;
    out.push(format!(
        "It runs a {} job, retried up to {} time(s) after a failure.",
        job.kind.name(),
        job.max_retries
    ));
    if config.dry_run {
        out.push("Dry run: it decides, but triggers nothing.".to_string());
    }
    out
}

/// A timer's kind as its tagged form names it (`{"kind":"slaBreach",…}` → `slaBreach`).
fn timer_kind_name(encoded: &str) -> String {
    serde_json::from_str::<serde_json::Value>(encoded)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_string))
        .unwrap_or_else(|| encoded.to_string())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::core::timers::TimerKind;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, 0, 0).unwrap()
    }

    fn execution(date: &str, phase: Phase) -> Execution {
        let mut e: Execution = serde_json::from_value(serde_json::json!({
            "scheduleId": "stream", "date": date, "startedAt": at(1), "windowClosesAt": at(2),
            "attempt": 2, "retriesUsed": 0, "codeRetriesUsed": 0, "phase": {"phase": "awaitingRules"},
        }))
        .expect("an execution");
        e.phase = phase;
        e.phase_since = at(3);
        e
    }

    #[test]
    fn configs_and_rules_read_as_sentences() {
        let raw = serde_json::json!({
            "pipeline": {"id": "gold", "owner": "analytics"},
            "schedule": {
                "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
                "evaluation": {"window": "1h", "interval": "5m"}
            },
            "sla": {"deadline": "09:30", "expectedDuration": "30m"},
            "validation": {"trigger": "ALL", "rules": [
                {"key": "row-count", "check": "gte", "field": "count", "value": 1000},
                {"key": "landed", "check": "age_lt", "field": "at", "value": "2h"},
                {"key": "manifest", "check": "exists"}
            ]},
            "job": {"type": "command", "config": {"command": "run"}, "maxRetries": 2}
        });
        let config = PipelineConfig::from_json(&raw).expect("valid").config;
        let rules: Vec<String> = super::rules(&config).into_iter().map(|r| r.sentence).collect();
        assert_eq!(super::rules(&config)[2].key, "manifest");
        assert_eq!(
            rules,
            [
                "row-count.count is at least 1000",
                "landed.at is less than 2h old",
                "sensor manifest has arrived"
            ]
        );
        assert_eq!(
            config_sentences(&config),
            [
                "A run starts when upstream.status equals \"ready\".",
                "Rules are checked on every sensor and every 5m for 1h after a run starts; all rules must pass.",
                "It must complete by 09:30 each day, with a warning 30m before.",
                "It runs a command job, retried up to 2 time(s) after a failure."
            ]
        );
    }

    #[test]
    fn the_run_history_is_placed_in_its_dates_with_their_deadlines_and_the_open_dates_forecast() {
        let raw = serde_json::json!({
            "pipeline": {"id": "gold"},
            "schedule": {"trigger": {"key": "upstream", "check": "exists"}, "timezone": "Europe/Paris"},
            "dependsOn": ["silver"],
            "sla": {"deadline": "06:00", "forecast": {"minRuns": 2}},
            "validation": {"rules": []},
            "job": {"type": "command", "config": {"command": "run"}}
        });
        let mut state = PipelineState {
            config: Some(std::sync::Arc::new(
                PipelineConfig::from_json(&raw).expect("valid").config,
            )),
            ..PipelineState::default()
        };
        // Triggered at 02:00 Paris time (01:00 UTC in November) the day after its date, 45
        // minutes to success; its deadline is 06:00 the day after (`deadlineDay` by default).
        state.history.record(crate::core::history::PastRun {
            date: "2026-11-19".parse().unwrap(),
            triggered_after: 26 * 3600,
            duration: 45 * 60,
        });
        let runs = run_history(&state);
        assert_eq!(runs.len(), 1);
        let paris = |h: u32, m: u32| Utc.with_ymd_and_hms(2026, 11, 20, h - 1, m, 0).unwrap();
        assert_eq!(
            runs[0].date_start,
            Utc.with_ymd_and_hms(2026, 11, 18, 23, 0, 0).unwrap()
        );
        assert_eq!(
            (runs[0].triggered_at, runs[0].completed_at),
            (paris(2, 0), paris(2, 45))
        );
        assert_eq!(runs[0].deadline, Some(paris(6, 0)));
        assert_eq!(summarize("gold", &state).depends_on, ["silver"]);

        let event = |id: &str, kind: &str, date: &str, projected: &str| -> Event {
            serde_json::from_value(serde_json::json!({
                "eventId": id, "type": kind, "category": "sla", "pipelineId": "gold", "date": date,
                "timestamp": at(1), "message": "forecast",
                "detail": {"deadline": "2026-11-20T05:00:00Z", "projectedCompletion": projected,
                           "marginSeconds": -600, "usualTriggerAt": "2026-11-20T01:00:00Z",
                           "triggeredAt": null, "basis": "usualTrigger"}
            }))
            .expect("an event")
        };
        let risk = event("e1", "SLA_AT_RISK", "2026-11-20", "2026-11-20T05:10:00Z");
        let older = event("e0", "SLA_AT_RISK", "2026-11-19", "2026-11-19T05:10:00Z");
        let met = event("e2", "SLA_MET", "2026-11-20", "2026-11-20T05:10:00Z");
        // Not started: the date is open, and its latest forecast is drawn.
        let projection = sla_projection(&state, &[&older, &risk, &met]).expect("a projection");
        assert_eq!(
            (projection.date.as_str(), projection.kind),
            ("2026-11-20", EventType::SLA_AT_RISK)
        );
        assert_eq!(
            projection.date_start,
            Utc.with_ymd_and_hms(2026, 11, 19, 23, 0, 0).unwrap()
        );
        assert_eq!(
            projection.figures.projected_completion,
            Utc.with_ymd_and_hms(2026, 11, 20, 5, 10, 0).unwrap()
        );
        assert_eq!(serde_json::to_value(&projection).unwrap()["type"], "SLA_AT_RISK");
        // Once the date has completed, its forecast is history; an older open date's is not.
        state.executions.insert(
            crate::core::execution::id("stream", "2026-11-20"),
            execution("2026-11-20", Phase::Succeeded { at: at(5) }).into(),
        );
        assert_eq!(
            sla_projection(&state, &[&older, &risk]).map(|p| p.date),
            Some("2026-11-19".into())
        );
        state.executions.insert(
            crate::core::execution::id("stream", "2026-11-19"),
            execution(
                "2026-11-19",
                Phase::Failed {
                    at: at(5),
                    reason: "exit 1".into(),
                },
            )
            .into(),
        );
        assert_eq!(sla_projection(&state, &[&older, &risk]), None);
    }

    #[test]
    fn summaries_name_states_newest_date_first_with_the_soonest_timer() {
        let mut state = PipelineState::default();
        state.executions.insert(
            crate::core::execution::id("stream", "2026-11-19"),
            execution(
                "2026-11-19",
                Phase::Failed {
                    at: at(3),
                    reason: "exit 3".into(),
                },
            )
            .into(),
        );
        state.executions.insert(
            crate::core::execution::id("stream", "2026-11-20"),
            execution("2026-11-20", Phase::AwaitingJob { run_id: "run-7".into() }).into(),
        );
        state.timers = [
            PendingTimer {
                timer: TimerKind::SlaBreach {
                    execution: crate::core::execution::id("stream", "2026-11-20"),
                },
                at: at(10),
            },
            PendingTimer {
                timer: TimerKind::CronTick,
                at: at(8),
            },
        ]
        .into_iter()
        .map(|t| (t.timer.clone(), t.into()))
        .collect();
        let summary = summarize("gold", &state);
        assert!(!summary.configured);
        let states: Vec<_> = summary
            .executions
            .iter()
            .map(|e| {
                (
                    e.date.as_str(),
                    e.state.as_str(),
                    e.run_id.as_deref(),
                    e.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("2026-11-20", "running", Some("run-7"), None),
                ("2026-11-19", "failed", None, Some("exit 3"))
            ]
        );
        let next = summary.next_timer.expect("a timer");
        assert_eq!((next.kind.as_str(), next.at, next.date), ("cronTick", at(8), None));
        state.timers.remove(&TimerKind::CronTick);
        let next = summarize("gold", &state).next_timer.expect("a timer");
        assert_eq!(
            (next.kind.as_str(), next.date.as_deref()),
            ("slaBreach", Some("2026-11-20"))
        );
    }
}
