//! The example pipelines written in the earlier design's shapes (`examples/interlock/`) live
//! through simulated days: producers publish what each pipeline's trigger and rules wait
//! for, when such a producer would (a day's data after midnight, an hour's after the hour,
//! fresh inputs before a cron fires), each job succeeds minutes after it starts, post-run
//! readings follow. No alert may come of it: a team's first days after moving over must not
//! page anyone falsely.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, Timelike, Utc};
use serde_json::{json, Map, Value};

use super::*;
use crate::core::config::{
    parse, yaml_to_json, AgeBound, Check, Comparison, Deadline, PipelineConfig, Rule, Variables,
};
use crate::core::records::{JobRecord, SensorReading};

/// Events that tell a person something went wrong (or may).
const ALERTS: &[EventType] = &[
    SLA_WARNING,
    SLA_BREACH,
    SLA_AT_RISK,
    RELATIVE_SLA_WARNING,
    RELATIVE_SLA_BREACH,
    EVALUATION_SLA_WARNING,
    EVALUATION_SLA_BREACH,
    SCHEDULE_MISSED,
    IRREGULAR_SCHEDULE_MISSED,
    SENSOR_DEADLINE_EXPIRED,
    VALIDATION_EXHAUSTED,
    JOB_FAILED,
    JOB_TIMEOUT,
    JOB_POLL_EXHAUSTED,
    RETRY_EXHAUSTED,
    INFRA_FAILURE,
    STALE_RUN,
    POST_RUN_FAILED,
    POST_RUN_SENSOR_MISSING,
    POST_RUN_DRIFT,
    LATE_DATA_ARRIVAL,
    SENSOR_FLAPPING,
    UNKNOWN_SENSOR,
    STALE_SENSOR_WARNING,
    CONFIG_REJECTED,
    INPUT_REJECTED,
];

/// How a pipeline's producers behave, from what its config waits for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cadence {
    /// A cron starts it: its inputs are kept fresh, published 5 minutes before each hour.
    Cron,
    /// An hour's data, published 5 minutes after the hour, for that hour.
    Hourly,
    /// A day's data, published at 00:30 the next day, for that day.
    Daily,
}

/// A value of `rule`'s field that passes it at `now`.
fn passing(rule: &Rule, now: DateTime<Utc>) -> Value {
    match &rule.check {
        Check::Exists => json!(true),
        Check::Equals(value) => value.clone(),
        Check::Compare(Comparison::Gt | Comparison::Gte, n) => json!(n + 1.0),
        Check::Compare(Comparison::Lt | Comparison::Lte, n) => json!(n - 1.0),
        Check::Age(AgeBound::YoungerThan, _) => json!(now.to_rfc3339()),
        Check::Age(AgeBound::OlderThan, age) => json!((now - *age - TimeDelta::hours(1)).to_rfc3339()),
        Check::Size(_, n) => json!(vec![0; *n as usize + 1]),
        Check::ContainsAll(members) => json!(members),
    }
}

/// Each sensor key the rules name, with data that passes all of them at `now`.
fn readings_passing<'r>(
    rules: impl Iterator<Item = &'r Rule>,
    now: DateTime<Utc>,
) -> BTreeMap<String, Map<String, Value>> {
    let mut readings: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for rule in rules {
        let data = readings.entry(rule.key.clone()).or_default();
        data.insert(rule.field.clone().unwrap_or_else(|| "ok".into()), passing(rule, now));
    }
    readings
}

struct Day {
    sim: Sim,
    config: PipelineConfig,
    id: String,
    cadence: Cadence,
    /// Runs seen requested, and when each is to succeed (with its post-run readings due).
    started: BTreeSet<String>,
    finishing: Vec<(DateTime<Utc>, TriggerRequest)>,
}

impl Day {
    fn new(path: &std::path::Path, start: DateTime<Utc>) -> Day {
        let text = std::fs::read_to_string(path).unwrap();
        // The deployment's own variables (`config apply --var`).
        let text = text.replace("${env_name}", "dev").replace("${data_bucket}", "bucket");
        let raw = yaml_to_json(&text).unwrap();
        let config = parse(&raw, Variables::MustBeResolved)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .config;
        let hourly_sla = config
            .sla
            .as_ref()
            .is_some_and(|s| matches!(s.deadline, Some(Deadline::Hourly { .. })));
        let cadence = match (config.schedule.cron.is_some(), hourly_sla) {
            (true, _) => Cadence::Cron,
            (false, true) => Cadence::Hourly,
            (false, false) => Cadence::Daily,
        };
        let mut sim = Sim::starting_at(start);
        let id = config.id.to_string();
        sim.config(raw);
        Day {
            sim,
            config,
            id,
            cadence,
            started: BTreeSet::new(),
            finishing: Vec::new(),
        }
    }

    /// The readings the pipeline's producers publish, dated for `date` (and `hour`).
    fn publish(&mut self, date: Option<NaiveDate>, hour: Option<u32>) {
        let now = self.sim.now;
        let rules = (self.config.schedule.trigger.iter()).chain(self.config.validation.rules.iter());
        for (key, data) in readings_passing(rules, now) {
            self.sensor(&key, data, date, hour);
        }
    }

    fn sensor(&mut self, key: &str, data: Map<String, Value>, date: Option<NaiveDate>, hour: Option<u32>) {
        let reading = SensorReading {
            pipeline_id: self.id.as_str().into(),
            key: key.into(),
            data,
            date,
            hour,
            ..Default::default()
        };
        let id = self.id.clone();
        self.sim.input(&id, Input::SensorReceived(reading));
    }

    fn report(&mut self, request: &TriggerRequest, status: JobStatus) {
        let record = JobRecord {
            pipeline_id: request.pipeline_id.clone(),
            schedule_id: request.execution.schedule().to_string(),
            date: request.execution.date_text().to_string(),
            run_id: request.run_id.clone(),
            status,
            failure_category: None,
            message: None,
            metadata: None,
            timestamp: self.sim.now,
        };
        let id = self.id.clone();
        self.sim.input(&id, Input::JobReported(record.parse().unwrap()));
    }

    /// One minute of the day: producers, then the jobs' runners.
    fn minute(&mut self) {
        self.sim.advance(TimeDelta::minutes(1));
        let tz = self.config.schedule.timezone;
        let local = self.sim.now.with_timezone(&tz);
        let (today, minute) = (local.date_naive(), local.minute());
        match self.cadence {
            Cadence::Cron if minute == 55 => self.publish(None, None),
            Cadence::Hourly if minute == 5 => {
                let hour_ago = local - TimeDelta::hours(1);
                self.publish(Some(hour_ago.date_naive()), Some(hour_ago.hour()));
            }
            Cadence::Daily if (local.hour(), minute) == (0, 30) => self.publish(today.pred_opt(), None),
            _ => {}
        }
        let requested: Vec<TriggerRequest> = self.sim.triggers().into_iter().cloned().collect();
        for request in requested {
            if self.started.insert(request.run_id.to_string()) {
                self.report(&request, JobStatus::Running);
                self.finishing.push((self.sim.now + TimeDelta::minutes(4), request));
            }
        }
        let now = self.sim.now;
        let (done, running): (Vec<_>, Vec<_>) = self.finishing.drain(..).partition(|(at, _)| *at <= now);
        self.finishing = running;
        for (_, request) in done {
            self.report(&request, JobStatus::Succeeded);
            // The post-run checks' producers, for the run's date.
            let post_run: Vec<Rule> = self.config.post_run.iter().flat_map(|p| p.rules.clone()).collect();
            let date = Some(request.execution.date());
            for (key, data) in readings_passing(post_run.iter(), now) {
                self.sensor(&key, data, date.map(|d| d.day), date.and_then(|d| d.hour));
            }
        }
    }

    fn alerts(&self) -> Vec<String> {
        (self.sim.events.iter())
            .filter(|e| ALERTS.contains(&e.kind))
            .map(|e| format!("{} {} {:?}: {}", e.timestamp, e.kind.name(), e.date, e.message))
            .collect()
    }
}

#[test]
fn the_interlock_example_pipelines_live_through_two_days_without_a_false_alert() {
    let files = example_files();
    assert!(files.len() >= 6, "{files:?}");
    let mut failures = Vec::new();
    for path in &files {
        let day = two_days(path);
        let runs = day.started.len();
        let alerts = day.alerts();
        eprintln!("{}: {:?}, {runs} runs, {} alerts", day.id, day.cadence, alerts.len());
        if runs == 0 {
            failures.push(format!("{}: nothing ran", day.id));
        }
        failures.extend(alerts.into_iter().map(|a| format!("{}: {a}", day.id)));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The example pipeline at `path` through two days and a half, from a Monday's start: weekday
/// crons run, and each day's data has a day after it.
fn two_days(path: &std::path::Path) -> Day {
    two_days_reading(path, false, false)
}

/// [`two_days`], each decision made from the state read without its settled executions when
/// `partially` (deciding again from the whole state when it asks for one); `guessing`: but
/// for those it is likely to need ([`crate::core::lifecycle::likely_needs`]).
fn two_days_reading(path: &std::path::Path, partially: bool, guessing: bool) -> Day {
    let start = at("2026-11-23T00:00:00Z");
    assert_eq!(start.weekday(), chrono::Weekday::Mon);
    let mut day = Day::new(path, start);
    day.sim.partial_reads = partially;
    day.sim.guess_needs = guessing;
    for _ in 0..(60 * 60) {
        day.minute();
    }
    day
}

fn example_files() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/interlock");
    let mut files: Vec<_> = (std::fs::read_dir(&dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// Where the digests of what an earlier version wrote are kept.
const GOLDEN: &str = "src/core/lifecycle/tests/formats.golden";

/// What Sluice keeps and publishes stays byte for byte what the version that wrote
/// [`GOLDEN`] did, for the example pipelines' two days: each pipeline's final state (its
/// executions keyed by id, their timers, forecasts: what the store and the changelog hold),
/// every event (its `eventId` derives from the timer that caused it) and every effect (a
/// journaled trigger request), each as the SHA-256 of its JSON lines. Stored keys, event ids
/// and journals are read back by later versions, so none may drift unnoticed. An intended
/// change is recorded with `SLUICE_WRITE_GOLDEN=1`, and said in the commit.
#[test]
fn the_example_pipelines_keep_and_publish_the_bytes_an_earlier_version_did() {
    use sha2::{Digest, Sha256};
    let digest = |lines: Vec<String>| {
        let mut hasher = Sha256::new();
        for line in &lines {
            hasher.update(line.as_bytes());
            hasher.update(b"\n");
        }
        let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        format!("{} lines, sha256 {hex}", lines.len())
    };
    let mut found = String::new();
    for path in example_files() {
        let day = two_days(&path);
        let state = digest(vec![json(&day.sim.states[day.id.as_str()])]);
        let events = digest(day.sim.events.iter().map(json).collect());
        let effects = digest(day.sim.effects.iter().map(json).collect());
        found.push_str(&format!(
            "{}\n  state: {state}\n  events: {events}\n  effects: {effects}\n",
            day.id
        ));
    }
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("SLUICE_WRITE_GOLDEN").is_some() {
        std::fs::write(&golden, &found).unwrap();
    }
    let kept = std::fs::read_to_string(&golden).unwrap();
    assert_eq!(found, kept, "the formats drifted from {GOLDEN}");
}

/// A decision made from a state read without its settled executions is the decision the
/// whole state gives: the example pipelines' two days, decided that way (and again from the
/// whole state whenever a decision asks for an execution left out), keep the same states,
/// events and effects. Most decisions need nothing left out: that is what makes reading
/// states in part worth it.
#[test]
fn decisions_from_states_read_in_part_are_those_of_the_whole_states() {
    let wholes: Vec<Day> = example_files().iter().map(|path| two_days(path)).collect();
    for guessing in [false, true] {
        let (mut partially, mut redecided) = (0, 0);
        for (path, whole) in example_files().iter().zip(&wholes) {
            let part = two_days_reading(path, true, guessing);
            let id = &whole.id;
            assert_eq!(
                json(&part.sim.states[id.as_str()]),
                json(&whole.sim.states[id.as_str()]),
                "{id}: the state"
            );
            assert_eq!(part.sim.events, whole.sim.events, "{id}: the events");
            assert_eq!(part.sim.effects, whole.sim.effects, "{id}: the effects");
            partially += part.sim.decided_partially;
            redecided += part.sim.redecided;
        }
        eprintln!(
            "guessing {guessing}: {partially} decisions from states read in part, {redecided} of them decided again"
        );
        assert!(partially > 500, "decisions from states read in part: {partially}");
        match guessing {
            // Only the live executions and their days read: deciding again is exercised.
            false => assert!(redecided * 20 > partially, "{redecided} of {partially} decided again"),
            // What each input names loaded first: no decision of the examples is made twice.
            true => assert_eq!(redecided, 0, "{redecided} of {partially} decided again"),
        }
    }
}

/// A value as the JSON Sluice writes of it.
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("serialisable")
}
