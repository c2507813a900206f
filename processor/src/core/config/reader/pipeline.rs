//! The sections of a pipeline config: identity, schedule, SLA, validation rules, post-run
//! checks, exclusions and dependencies. The `job` section is [`super::job`]'s.

use chrono::{NaiveDate, TimeDelta, Weekday};
use chrono_tz::Tz;
use serde_json::{Map, Value};

use super::{describe, join, respelt, Reader, Variables, MAX_PIPELINE_ID_LEN};
use crate::core::config::model::{
    AgeBound, Anomalies, Calendar, Check, ClockTime, Comparison, Deadline, DeadlineDay, Dependency, Evaluation,
    Evaluator, ExcludeBy, Exclusions, Flapping, Mode, PipelineConfig, PostRun, Rule, Schedule, Severity, Sla, SlaTime,
    UndatedReadings, Validation,
};
use crate::core::config::JobKind;
use crate::core::duration::parse_duration;
use crate::core::history::{DEFAULT_MIN_RUNS, HISTORY_RUNS};
use crate::core::records::bounds::SENSOR_KEY_BYTES as MAX_KEY_PATTERN;
use crate::core::rules;

/// The most members a `contains_all` rule may list.
const MAX_MEMBERS: usize = 1_000;
use crate::core::schedule::Cron;

/// The shortest `every`: each is a call to someone else's service.
const MIN_EVALUATOR_EVERY: TimeDelta = TimeDelta::seconds(10);

/// The top-level fields of a pipeline config.
const ROOT_FIELDS: [&str; 11] = [
    "pipeline",
    "schedule",
    "sla",
    "validation",
    "job",
    "postRun",
    "exclusions",
    "dryRun",
    "dependsOn",
    "anomalies",
    "archetype",
];

const SCHEDULE_FIELDS: [&str; 10] = [
    "cron",
    "timezone",
    "trigger",
    "evaluation",
    "include",
    "time",
    "exclude",
    "calendar",
    "undatedReadings",
    "excludeBy",
];

/// `pipeline: {id, owner, description}`.
struct Identity {
    id: Option<String>,
    owner: Option<String>,
    description: Option<String>,
}

impl Reader {
    pub(super) fn pipeline(&mut self, raw: &Value, variables: Variables) -> Option<PipelineConfig> {
        let root = self.object(raw, "")?;
        let root = &self.fields(root, "", &ROOT_FIELDS);
        let Identity { id, owner, description } = self.identity(root);
        let schedule = self.schedule(root);
        let sla = self.sla(root, &schedule);
        let validation = self.validation(root, variables);
        let dry_run = self.boolean(root, "dryRun", "");
        let job = self.job(root, variables, dry_run);
        let post_run = self.post_run(root);
        let exclusions = self.exclusions(root, variables);
        let depends_on = self.depends_on(root, id.as_deref());
        let anomalies = self.anomalies(root);
        self.archetype(root);
        if dry_run && schedule.as_ref().is_some_and(|s| s.trigger.is_none()) {
            self.problem("dryRun", "dry-run needs schedule.trigger (sensor-driven evaluation)");
        }
        if let Some(schedule) = schedule.as_ref().filter(|s| s.sensor_started()) {
            self.differences_in_dating(root, schedule, &exclusions);
        }

        Some(PipelineConfig {
            id: id?.into(),
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
            anomalies,
            json: Box::default(),
        })
    }

    /// Where a sensor-started pipeline's dating rules matter, `config validate` names the
    /// rule in force and the other (issue 59, item 8): the earlier design dated undated
    /// readings in UTC and checked exclusions against the day a trigger arrived, which are
    /// the defaults; a pipeline that chose otherwise is told it differs from it.
    fn differences_in_dating(&mut self, root: &Map<String, Value>, schedule: &Schedule, exclusions: &Exclusions) {
        let written = root
            .get("schedule")
            .and_then(Value::as_object)
            .map(|m| respelt(m, &SCHEDULE_FIELDS));
        let chosen = |key: &str| written.as_ref().is_some_and(|m| m.contains_key(key));
        let zone = schedule.timezone;
        if zone != Tz::UTC {
            match schedule.undated_readings {
                UndatedReadings::Timezone => self.warn(
                    "schedule.undatedReadings",
                    format!("a reading without a date is dated in {zone}; the earlier design dated it in UTC, so between midnight there and midnight UTC it is for another day"),
                ),
                UndatedReadings::Utc if !chosen("undatedReadings") => self.warn(
                    "schedule.undatedReadings",
                    format!("a reading without a date is dated in UTC, as the earlier design did, not in {zone}: set `undatedReadings: timezone` to date it in {zone}, or `utc` to say so"),
                ),
                UndatedReadings::Utc => {}
            }
        }
        let excludes = exclusions.calendar.is_some() || !exclusions.days.is_empty() || !exclusions.dates.is_empty();
        if excludes {
            match schedule.exclude_by {
                ExcludeBy::DataDate => self.warn(
                    "schedule.excludeBy",
                    "exclusions apply to the data date of a run: a run on Monday for Sunday's data is skipped under a weekend exclusion; the earlier design checked the day the trigger arrived",
                ),
                ExcludeBy::RunDay if !chosen("excludeBy") => self.warn(
                    "schedule.excludeBy",
                    "exclusions apply to the day a trigger arrives, as the earlier design did: a run on Monday for Sunday's data runs, one on Saturday for Friday's does not. Set `excludeBy: dataDate` to exclude by the data date, or `runDay` to say so",
                ),
                ExcludeBy::RunDay => {}
            }
        }
    }

    /// `schedule.undatedReadings: utc | timezone`.
    fn undated_readings(&mut self, map: &Map<String, Value>) -> UndatedReadings {
        match self.string(map, "undatedReadings", "schedule").as_deref() {
            None | Some("utc" | "UTC") => UndatedReadings::Utc,
            Some("timezone") => UndatedReadings::Timezone,
            Some(other) => {
                self.problem("schedule.undatedReadings", format!("{other:?} must be utc or timezone"));
                UndatedReadings::Utc
            }
        }
    }

    /// `schedule.excludeBy: runDay | dataDate`.
    fn exclude_by(&mut self, map: &Map<String, Value>) -> ExcludeBy {
        match self.string(map, "excludeBy", "schedule").as_deref() {
            None | Some("runDay") => ExcludeBy::RunDay,
            Some("dataDate") => ExcludeBy::DataDate,
            Some(other) => {
                self.problem("schedule.excludeBy", format!("{other:?} must be runDay or dataDate"));
                ExcludeBy::RunDay
            }
        }
    }

    fn identity(&mut self, root: &Map<String, Value>) -> Identity {
        let identity = self.section(root, "pipeline", "");
        if identity.is_none() && !root.contains_key("pipeline") {
            self.problem("pipeline", "is required (pipeline: {id: ...})");
        }
        let empty = Map::new();
        let identity = identity.unwrap_or(&empty);
        let identity = &self.fields(identity, "pipeline", &["id", "owner", "description"]);
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
        Identity { id, owner, description }
    }

    fn schedule(&mut self, root: &Map<String, Value>) -> Option<Schedule> {
        let path = "schedule";
        let empty = Map::new();
        let map = match root.get(path) {
            None | Some(Value::Null) => &empty,
            Some(v) => self.object(v, path)?,
        };
        let map = &self.fields(map, path, &SCHEDULE_FIELDS);
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
        let (trigger, trigger_deadline) = self.schedule_trigger(map, &mut cron);
        let evaluation = match self.section(map, "evaluation", path) {
            Some(e) => self.evaluation(e, "schedule.evaluation"),
            None => Evaluation::default(),
        };
        let include_dates = self.include_dates(map);
        let expected_start = self.string(map, "time", path).and_then(|t| match parse_clock(&t) {
            Some(c) => Some(c),
            None => {
                self.problem("schedule.time", format!("{t:?} is not a time of day (expected HH:MM)"));
                None
            }
        });
        let schedule = Schedule {
            cron: cron.map(Box::new),
            timezone,
            trigger,
            trigger_deadline,
            evaluation,
            include_dates,
            expected_start,
            undated_readings: self.undated_readings(map),
            exclude_by: self.exclude_by(map),
        };
        self.something_starts(root, map, &schedule);
        Some(schedule)
    }

    /// `schedule.trigger`: a sensor condition (with the auto-trigger `deadline`), or the
    /// earlier design's cron trigger, which sets `cron`.
    fn schedule_trigger(
        &mut self,
        map: &Map<String, Value>,
        cron: &mut Option<Cron>,
    ) -> (Option<Rule>, Option<Deadline>) {
        match self.section(map, "trigger", "schedule") {
            Some(t) if t.get("type").and_then(Value::as_str) == Some("cron") => {
                self.cron_trigger(t, map, cron);
                (None, None)
            }
            Some(t) => {
                let rule = self.rule(t, "schedule.trigger", &["deadline"]);
                let deadline = self.deadline(t, "deadline", "schedule.trigger");
                (rule, deadline)
            }
            None => (None, None),
        }
    }

    /// `trigger: {type: cron, expression: ...}` was written for the earlier design, which
    /// had no such trigger: its decoder dropped both fields and the pipeline never triggered
    /// (interlock pkg/types/pipeline.go, TriggerCondition). What its author meant is a cron
    /// schedule, so that is how it is read.
    fn cron_trigger(&mut self, trigger: &Map<String, Value>, schedule: &Map<String, Value>, cron: &mut Option<Cron>) {
        let trigger = &self.fields(trigger, "schedule.trigger", &["type", "expression"]);
        let expression = self.required_string(trigger, "expression", "schedule.trigger");
        if cron.is_some() || schedule.contains_key("cron") {
            self.problem(
                "schedule.trigger",
                "a cron trigger and schedule.cron together: keep one (schedule.cron)",
            );
            return;
        }
        let Some(text) = expression else {
            return;
        };
        match Cron::parse(&text) {
            Ok(parsed) => {
                self.warn(
                    "schedule.trigger",
                    format!("{{type: cron}} is read as schedule.cron {text:?}: executions start at the cron time, and a relative SLA is measured from it (write schedule.cron instead)"),
                );
                *cron = Some(parsed);
            }
            Err(e) => self.problem("schedule.trigger.expression", e),
        }
    }

    /// `schedule.include.dates`: the only days a pipeline without cron or trigger runs.
    fn include_dates(&mut self, map: &Map<String, Value>) -> Vec<NaiveDate> {
        let Some(include) = self.section(map, "include", "schedule") else {
            return Vec::new();
        };
        let include = &self.fields(include, "schedule.include", &["dates"]);
        let dates = self.dates(include, "dates", "schedule.include");
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

    /// A pipeline needs something to start its executions: a trigger, a cron, inclusion
    /// dates or upstreams.
    fn something_starts(&mut self, root: &Map<String, Value>, map: &Map<String, Value>, schedule: &Schedule) {
        let has_dependencies = root
            .get("dependsOn")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty());
        if schedule.trigger.is_none()
            && schedule.cron.is_none()
            && !map.contains_key("cron")
            && schedule.include_dates.is_empty()
            && !map.contains_key("trigger")
            && !has_dependencies
        {
            self.problem(
                "schedule",
                "nothing starts this pipeline: give schedule.trigger (a sensor condition), schedule.cron or schedule.include.dates",
            );
        }
    }

    fn evaluation(&mut self, map: &Map<String, Value>, path: &str) -> Evaluation {
        let map = &self.fields(map, path, &["window", "interval"]);
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
        let map = &self.fields(
            map,
            path,
            &[
                "deadline",
                "deadlineDay",
                "expectedDuration",
                "maxDuration",
                "timezone",
                "critical",
                "forecast",
                "evaluationDeadline",
                "completionDeadline",
                "validationTimeout",
                "atRiskLeadTime",
            ],
        );
        // The earlier AWS variant's completion deadline is the SLA deadline (HH:MM) or the
        // relative SLA (a duration); its at-risk lead, the warning's lead.
        let completion = self.sla_time(map, "completionDeadline", path);
        let at_risk_lead_time = self.duration(map, "atRiskLeadTime", path);
        let deadline = self.deadline(map, "deadline", path);
        let deadline = match (deadline, completion) {
            (Some(d), Some(SlaTime::At(_))) => {
                self.warn(
                    "sla.completionDeadline",
                    "is ignored: sla.deadline is set (they are the same thing)",
                );
                Some(d)
            }
            (None, Some(SlaTime::At(time))) => Some(Deadline::Daily(time)),
            (d, _) => d,
        };
        let deadline_day = self.deadline_day(map, deadline, schedule);
        let expected = self.duration(map, "expectedDuration", path);
        let expected_duration = expected.or(at_risk_lead_time);
        let max_duration = match (self.max_duration(map, schedule), completion) {
            (Some(max), Some(SlaTime::After(_))) => {
                self.warn(
                    "sla.completionDeadline",
                    "is ignored: sla.maxDuration is set (they are the same thing)",
                );
                Some(max)
            }
            (None, Some(SlaTime::After(after))) if after > TimeDelta::hours(24) => {
                self.problem("sla.completionDeadline", "must not exceed 24h");
                None
            }
            (None, Some(SlaTime::After(after))) => Some(after),
            (max, _) => max,
        };
        let evaluation_deadline = self.sla_time(map, "evaluationDeadline", path);
        let validation_timeout = self.sla_time(map, "validationTimeout", path);
        if map.contains_key("atRiskLeadTime") && evaluation_deadline.is_none() && deadline.is_none() {
            self.warn(
                "sla.atRiskLeadTime",
                "has no effect without sla.evaluationDeadline or a deadline",
            );
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
        if expected.is_some() && deadline.is_none() {
            self.warn("sla.expectedDuration", "has no effect without sla.deadline");
        }
        let timezone = self.timezone(map, "timezone", path);
        // The earlier design read an unset sla.timezone as UTC; Sluice reads the schedule's.
        // Where the two differ, a deadline would move by hours without a word: say which.
        let schedule_zone = schedule.as_ref().map_or(Tz::UTC, |s| s.timezone);
        if timezone.is_none() && schedule_zone != Tz::UTC && matches!(deadline, Some(Deadline::Daily(_))) {
            self.warn(
                "sla.timezone",
                format!(
                    "is not set: sla.deadline is read in schedule.timezone ({schedule_zone}); the earlier design read it in UTC. Set sla.timezone to say which"
                ),
            );
        }
        let critical = self.boolean(map, "critical", path);
        if critical {
            self.warn(
                "sla.critical",
                "is read but changes nothing: every SLA alert is sent the same way (route by pipeline in the alert consumer)",
            );
        }
        let forecast = self.forecast(map, deadline.is_some());
        Some(Sla {
            deadline,
            deadline_day,
            expected_duration,
            max_duration,
            timezone,
            critical,
            forecast,
            evaluation_deadline,
            validation_timeout,
            at_risk_lead_time,
        })
    }

    /// A deadline of the earlier AWS variant: `HH:MM`, or a duration (`45m`, `+45m`) after
    /// evaluation began.
    fn sla_time(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<SlaTime> {
        let text = self.string(map, key, path)?;
        if let Some(time) = parse_clock(&text) {
            return Some(SlaTime::At(time));
        }
        match parse_duration(text.trim_start_matches('+')) {
            Ok(d) if d > TimeDelta::zero() => Some(SlaTime::After(d)),
            _ => {
                self.problem(
                    &join(path, key),
                    format!("{text:?} is neither a time of day (HH:MM) nor a duration (45m, +2h)"),
                );
                None
            }
        }
    }

    /// `sla.forecast`: `true` (the default), `false`, or `{minRuns: N}` (1 to the runs kept).
    fn forecast(&mut self, map: &Map<String, Value>, has_deadline: bool) -> Option<usize> {
        let path = "sla.forecast";
        let (most, default) = (HISTORY_RUNS as u32, DEFAULT_MIN_RUNS as u32);
        let min_runs = match map.get("forecast") {
            None | Some(Value::Null) | Some(Value::Bool(true)) => Some(DEFAULT_MIN_RUNS),
            Some(Value::Bool(false)) => return None,
            Some(Value::Object(forecast)) => {
                let forecast = &self.fields(forecast, path, &["minRuns"]);
                Some(self.bounded(forecast, "minRuns", path, 1, most, default) as usize)
            }
            Some(other) => {
                self.problem(
                    path,
                    format!("must be true, false or {{minRuns: N}}, not {}", describe(other)),
                );
                None
            }
        };
        if map.contains_key("forecast") && !has_deadline {
            self.warn(path, "has no effect without sla.deadline (it forecasts the deadline)");
        }
        min_runs
    }

    /// `sla.deadlineDay`; its default depends on whether a cron starts the executions.
    fn deadline_day(
        &mut self,
        map: &Map<String, Value>,
        deadline: Option<Deadline>,
        schedule: &Option<Schedule>,
    ) -> DeadlineDay {
        let has_cron = schedule.as_ref().is_some_and(|s| s.cron.is_some());
        let day = match self.string(map, "deadlineDay", "sla").as_deref() {
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
        day
    }

    /// `sla.maxDuration`, the relative SLA: at most a day, measured from a start it needs.
    fn max_duration(&mut self, map: &Map<String, Value>, schedule: &Option<Schedule>) -> Option<TimeDelta> {
        let max = self.duration(map, "maxDuration", "sla")?;
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
        Some(max)
    }

    /// `archetype`: `{name}` once `config apply` merged the archetype in; a bare name means
    /// nothing did, and its defaults would be silently missing.
    fn archetype(&mut self, root: &Map<String, Value>) {
        match root.get("archetype") {
            None | Some(Value::Null) => {}
            Some(Value::Object(merged)) if merged.get("name").is_some_and(Value::is_string) => {}
            Some(Value::String(name)) => self.problem(
                "archetype",
                format!("archetype {name:?} is not merged in: publish with `sluice config apply`, which reads archetypes/{name}.yaml"),
            ),
            Some(other) => self.problem("archetype", format!("must be an archetype's name, found {}", describe(other))),
        }
    }

    /// `anomalies: {flapping: {changes, window, holdFor}, unknownSensors, expectedSensors,
    /// staleSensors}`.
    fn anomalies(&mut self, root: &Map<String, Value>) -> Anomalies {
        let path = "anomalies";
        let Some(map) = self.section(root, path, "") else {
            return Anomalies::default();
        };
        let map = &self.fields(
            map,
            path,
            &["flapping", "unknownSensors", "expectedSensors", "staleSensors"],
        );
        let flapping = self.section(map, "flapping", path).map(|f| {
            let path = "anomalies.flapping";
            let f = &self.fields(f, path, &["changes", "window", "holdFor"]);
            Flapping {
                changes: self.bounded(f, "changes", path, 1, 100, 3),
                window: self.duration(f, "window", path).unwrap_or(TimeDelta::hours(1)),
                hold_for: self.duration(f, "holdFor", path),
            }
        });
        Anomalies {
            flapping,
            unknown_sensors: self.boolean_or(map, "unknownSensors", path, true),
            expected_sensors: self.each(map, "expectedSensors", path, |r, item, at| match item {
                Value::String(pattern) if !pattern.is_empty() && pattern.len() <= MAX_KEY_PATTERN => {
                    Some(pattern.clone())
                }
                other => {
                    let found = describe(other);
                    r.problem(
                        at,
                        format!(
                            "must be a sensor key or a pattern with * (1 to {MAX_KEY_PATTERN} bytes), found {found}"
                        ),
                    );
                    None
                }
            }),
            stale_sensors: self.boolean_or(map, "staleSensors", path, true),
        }
    }

    fn validation(&mut self, root: &Map<String, Value>, variables: Variables) -> Option<Validation> {
        let path = "validation";
        let empty = Map::new();
        let map = match root.get(path) {
            None | Some(Value::Null) => &empty,
            Some(v) => self.object(v, path)?,
        };
        let map = &self.fields(map, path, &["trigger", "rules"]);
        let mode = match self.string(map, "trigger", path).map(|m| m.to_ascii_uppercase()) {
            None => Mode::All,
            Some(m) if m == "ALL" => Mode::All,
            Some(m) if m == "ANY" => Mode::Any,
            Some(m) if m == "MAJORITY" => Mode::Majority,
            Some(m) => {
                self.problem("validation.trigger", format!("{m:?} must be ALL, ANY or MAJORITY"));
                Mode::All
            }
        };
        let rules = self.rules(map, path);
        let evaluators = self.evaluators(map, variables);
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
        Some(Validation {
            mode,
            rules,
            evaluators,
        })
    }

    /// The `evaluator` of each validation rule, one per sensor key: rules on the same key
    /// share it, so a second one must say the same.
    fn evaluators(&mut self, map: &Map<String, Value>, variables: Variables) -> Vec<Evaluator> {
        let mut found: Vec<(Evaluator, Value)> = Vec::new();
        let list = map
            .get("rules")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, rule) in list.iter().enumerate() {
            let Some(raw) = rule.get("evaluator").filter(|v| !v.is_null()) else {
                continue;
            };
            let path = format!("validation.rules[{i}].evaluator");
            let Some(key) = rule.get("key").and_then(Value::as_str) else {
                continue; // the rule's own reading names the missing key
            };
            let Some(evaluator) = self.evaluator(key, raw, &path, variables) else {
                continue;
            };
            match found.iter().find(|(e, _)| e.key == key) {
                Some((_, first)) if first != raw => self.problem(
                    &path,
                    format!(
                        "sensor {key:?} has another evaluator on an earlier rule: rules on one key share one evaluator"
                    ),
                ),
                Some(_) => {}
                None => found.push((evaluator, raw.clone())),
            }
        }
        found.into_iter().map(|(e, _)| e).collect()
    }

    /// `evaluator: {type: http, url, method, headers, body, timeout, ttl, every}` or
    /// `{type: command, command, timeout, ttl, every}`. The call is read as that job type's
    /// settings (an `http` evaluator GETs unless `method` says otherwise), and `timeout`
    /// takes a duration as well as seconds.
    fn evaluator(&mut self, key: &str, raw: &Value, path: &str, variables: Variables) -> Option<Evaluator> {
        let map = self.object(raw, path)?;
        let kind = match self.required_string(map, "type", path).as_deref() {
            Some("http") => JobKind::Http,
            Some("command") => JobKind::Command,
            Some(other) => {
                self.problem(
                    &join(path, "type"),
                    format!("{other:?} is not an evaluator type (http, command)"),
                );
                return None;
            }
            None => return None,
        };
        let ttl = self.duration(map, "ttl", path);
        let every = self.duration(map, "every", path);
        if every.is_some_and(|e| e < MIN_EVALUATOR_EVERY) {
            self.problem(
                &join(path, "every"),
                "must be at least 10s: an evaluator is a remote call",
            );
        }
        let mut call: Map<String, Value> = map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "type" | "ttl" | "every"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if kind == JobKind::Http && !call.keys().any(|k| k.eq_ignore_ascii_case("method")) {
            call.insert("method".into(), Value::from("GET"));
        }
        if let Some(Value::String(text)) = call.get("timeout") {
            match parse_duration(text) {
                Ok(d) if d >= TimeDelta::seconds(1) => {
                    call.insert("timeout".into(), Value::from(d.num_seconds()));
                }
                _ => self.problem(
                    &join(path, "timeout"),
                    format!("{text:?} must be a duration of at least 1s, or seconds"),
                ),
            }
        }
        // The job reader names its problems under `job.config`; here they are the evaluator's.
        let (problems, warnings) = (self.problems.len(), self.warnings.len());
        let config = self.job_config(kind, &call, variables, false);
        for p in (self.problems.iter_mut().skip(problems)).chain(self.warnings.iter_mut().skip(warnings)) {
            if let Some(rest) = p.path.strip_prefix("job.config") {
                p.path = format!("{path}{rest}");
            }
        }
        Some(Evaluator {
            key: key.to_string(),
            call: config?,
            ttl,
            every,
        })
    }

    /// `validation.rules` or `postRun.rules`: rules that may carry a `severity`.
    fn rules(&mut self, map: &Map<String, Value>, path: &str) -> Vec<Rule> {
        self.each(map, "rules", path, |r, item, at| {
            let m = r.object(item, at)?;
            let evaluator = path == "validation";
            let rule = r.rule(
                m,
                at,
                if evaluator {
                    &["severity", "evaluator"]
                } else {
                    &["severity"]
                },
            )?;
            if !evaluator && m.contains_key("evaluator") {
                r.problem(
                    &join(at, "evaluator"),
                    "evaluators answer validation rules only: post-run readings come from the job's producers",
                );
            }
            let severity = match r.string(m, "severity", at).as_deref() {
                None | Some("error") => Severity::Error,
                Some("warn") => Severity::Warn,
                Some(other) => {
                    r.problem(&join(at, "severity"), format!("{other:?} must be error or warn"));
                    Severity::Error
                }
            };
            Some(Rule { severity, ..rule })
        })
    }

    /// A rule (`key`, `check`, `field`, `value`); `extra` names fields the caller reads.
    fn rule(&mut self, map: &Map<String, Value>, path: &str, extra: &[&str]) -> Option<Rule> {
        let mut known = vec!["key", "check", "field", "value"];
        known.extend_from_slice(extra);
        let map = &self.fields(map, path, &known);
        let key = self.required_string(map, "key", path);
        let check_name = self.required_string(map, "check", path)?;
        let field = self.string(map, "field", path);
        let value = map.get("value").filter(|v| !v.is_null());
        let (check, name) = self.check(&check_name, value, path);
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
            severity: Severity::Error,
        })
    }

    /// A rule's check and its `value`, with the check's name as written (`?` when unknown).
    fn check(&mut self, name: &str, value: Option<&Value>, path: &str) -> (Option<Check>, &'static str) {
        let value_path = join(path, "value");
        match name {
            "exists" => (Some(Check::Exists), "exists"),
            "equals" => (self.equals(value, &value_path), "equals"),
            "gt" => (self.comparison(Comparison::Gt, "gt", value, &value_path), "gt"),
            "gte" => (self.comparison(Comparison::Gte, "gte", value, &value_path), "gte"),
            "lt" => (self.comparison(Comparison::Lt, "lt", value, &value_path), "lt"),
            "lte" => (self.comparison(Comparison::Lte, "lte", value, &value_path), "lte"),
            "age_lt" => (self.age(AgeBound::YoungerThan, "age_lt", value, &value_path), "age_lt"),
            "age_gt" => (self.age(AgeBound::OlderThan, "age_gt", value, &value_path), "age_gt"),
            "size_gt" => (self.size(Comparison::Gt, "size_gt", value, &value_path), "size_gt"),
            "size_gte" => (self.size(Comparison::Gte, "size_gte", value, &value_path), "size_gte"),
            "size_lt" => (self.size(Comparison::Lt, "size_lt", value, &value_path), "size_lt"),
            "size_lte" => (self.size(Comparison::Lte, "size_lte", value, &value_path), "size_lte"),
            "contains_all" => (self.contains_all(value, &value_path), "contains_all"),
            other => {
                self.problem(
                    &join(path, "check"),
                    format!("{other:?} is not a check (exists, equals, gt, gte, lt, lte, age_lt, age_gt, size_gt, size_gte, size_lt, size_lte, contains_all)"),
                );
                (None, "?")
            }
        }
    }

    fn equals(&mut self, value: Option<&Value>, value_path: &str) -> Option<Check> {
        match value {
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => Some(Check::Equals(v.clone())),
            Some(other) => {
                self.problem(
                    value_path,
                    format!(
                        "equals compares with a string, number or boolean, found {}",
                        describe(other)
                    ),
                );
                None
            }
            None => {
                self.problem(value_path, "is required for equals");
                None
            }
        }
    }

    fn comparison(&mut self, cmp: Comparison, name: &str, value: Option<&Value>, value_path: &str) -> Option<Check> {
        let threshold = value.and_then(rules::as_number);
        if threshold.is_none() {
            self.problem(
                value_path,
                format!(
                    "{name} needs a number, found {}",
                    value.map(describe).unwrap_or("nothing")
                ),
            );
        }
        Some(Check::Compare(cmp, threshold?))
    }

    fn size(&mut self, cmp: Comparison, name: &str, value: Option<&Value>, value_path: &str) -> Option<Check> {
        match self.comparison(cmp, name, value, value_path)? {
            Check::Compare(cmp, threshold) => Some(Check::Size(cmp, threshold)),
            _ => None,
        }
    }

    /// `contains_all`: a list of the members the field's list must hold (strings, numbers
    /// or booleans, at most [`MAX_MEMBERS`]).
    fn contains_all(&mut self, value: Option<&Value>, value_path: &str) -> Option<Check> {
        let scalar = |v: &Value| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_));
        match value {
            Some(Value::Array(members))
                if !members.is_empty() && members.len() <= MAX_MEMBERS && members.iter().all(scalar) =>
            {
                Some(Check::ContainsAll(members.clone()))
            }
            other => {
                let found = other.map(describe).unwrap_or("nothing");
                self.problem(
                    value_path,
                    format!(
                        "contains_all needs a list of 1 to {MAX_MEMBERS} strings, numbers or booleans, found {found}"
                    ),
                );
                None
            }
        }
    }

    fn age(&mut self, bound: AgeBound, name: &str, value: Option<&Value>, value_path: &str) -> Option<Check> {
        match value.and_then(Value::as_str).map(parse_duration) {
            Some(Ok(d)) => Some(Check::Age(bound, d)),
            Some(Err(e)) => {
                self.problem(value_path, e.to_string());
                None
            }
            None => {
                self.problem(value_path, format!("{name} needs a duration such as 2h"));
                None
            }
        }
    }

    fn post_run(&mut self, root: &Map<String, Value>) -> Option<PostRun> {
        let path = "postRun";
        let map = self.section(root, path, "")?;
        let map = &self.fields(
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
            Some(v) => match rules::as_number(v) {
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
            let map = &self.fields(map, "exclusions", &["calendar", "days", "dates"]);
            out.calendar = self.calendar(map, "calendar", "exclusions", variables);
            out.days = self.weekdays(map, "exclusions");
            out.dates = self.dates(map, "dates", "exclusions");
        }
        let Some(schedule) = root.get("schedule").and_then(Value::as_object) else {
            return out;
        };
        let schedule = &respelt(schedule, &SCHEDULE_FIELDS);
        if let Some(calendar) = self.calendar(schedule, "calendar", "schedule", variables) {
            out.calendar = Some(both_calendars(out.calendar.take(), calendar));
        }
        if let Some(map) = self.section(schedule, "exclude", "schedule") {
            let map = &self.fields(map, "schedule.exclude", &["weekends", "holidays", "dates"]);
            if self.boolean(map, "weekends", "schedule.exclude") {
                out.days.extend([Weekday::Sat, Weekday::Sun]);
            }
            if let Some(calendar) = self.calendar(map, "holidays", "schedule.exclude", variables) {
                out.calendar = Some(both_calendars(out.calendar.take(), calendar));
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
                let calendar = &self.fields(calendar, &at, &["name", "days", "dates"]);
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
                pipeline: id.into(),
                key: Dependency::default_key(id),
            }),
            Value::Object(map) => {
                let map = &r.fields(map, at, &["pipeline", "key"]);
                let pipeline = r.required_string(map, "pipeline", at)?;
                let key = r
                    .string(map, "key", at)
                    .unwrap_or_else(|| Dependency::default_key(&pipeline));
                Some(Dependency {
                    pipeline: pipeline.into(),
                    key,
                })
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
}

fn parse_clock(text: &str) -> Option<ClockTime> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (hour, minute) = (h.parse().ok()?, m.parse().ok()?);
    (hour < 24 && minute < 60).then_some(ClockTime { hour, minute })
}

/// `extra` added to the calendar already named, so that every calendar a config names
/// applies (a day any of them excludes is skipped), never only the first: named as both
/// (`us-holidays+uk-holidays`), with the days and dates of both. The same name twice is one.
fn both_calendars(first: Option<Calendar>, extra: Calendar) -> Calendar {
    let Some(mut first) = first else { return extra };
    if first.name == extra.name {
        return first;
    }
    first.name = format!("{}+{}", first.name, extra.name);
    first.resolved &= extra.resolved;
    first.days.extend(extra.days);
    first.days.sort_by_key(|d| d.num_days_from_monday());
    first.days.dedup();
    first.dates.extend(extra.dates);
    first.dates.sort();
    first.dates.dedup();
    first
}
