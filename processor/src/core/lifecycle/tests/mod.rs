//! The decider driven by a simulated clock: no Kafka, no disk, no sleeps.

// The harness records every decision itself; tests look at the ones they care about.
#![allow(unused_must_use)]

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};

use super::*;
use crate::core::events::EventType::{self, *};
use crate::core::partitioning::PartitionId;
use crate::core::records::{FailureCategory, JobRecord, JobStatus};
use crate::core::replay::Engine;
use crate::core::timers::DueTimer;

mod anomalies;
mod deadlines;
mod evaluators;
mod examples;
mod forecast;
mod jobs_and_post_run;
mod schedule_and_sla;

/// Merges `patch` into `base`, object by object; `null` removes a field.
pub(crate) fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (k, v) in patch {
                if v.is_null() {
                    base.remove(&k);
                } else {
                    merge(base.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (base, patch) => *base = patch,
    }
}

/// State, a fake clock and the pending timers of several pipelines: the replay [`Engine`]
/// driven by hand, keeping everything the decisions asked for so tests can look at it.
///
/// A `Sim` derefs to its engine: tests read (and may set) `now`, `states`, `timers` and
/// `settings`. Setting `now` moves the clock without firing the timers due on the way.
pub(super) struct Sim {
    engine: Engine,
    pub(super) events: Vec<Event>,
    pub(super) effects: Vec<Effect>,
    pub(super) dead_letters: Vec<String>,
    pub(super) inputs: usize,
}

impl Deref for Sim {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl DerefMut for Sim {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}

/// The partition every simulated pipeline lives on.
const PARTITION: PartitionId = PartitionId::new(0);

pub(super) fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

impl Sim {
    pub(super) fn new() -> Self {
        Sim::starting_at(t0())
    }

    /// A sim whose clock starts at `now`.
    pub(super) fn starting_at(now: DateTime<Utc>) -> Self {
        Sim {
            engine: Engine::new(Settings::default(), now),
            events: Vec::new(),
            effects: Vec::new(),
            dead_letters: Vec::new(),
            inputs: 0,
        }
    }

    pub(super) fn input(&mut self, pipeline: &str, input: Input) -> Decision {
        self.inputs += 1;
        let origin = format!("test/{}", self.inputs);
        self.apply(pipeline, &input, &origin)
    }

    /// Hands `input` to the decider now, under `origin`, with no timer fired first.
    pub(super) fn apply(&mut self, pipeline: &str, input: &Input, origin: &str) -> Decision {
        let decision =
            (self.engine.handle(PARTITION, &pipeline.into(), input, origin)).expect("no limit is measured here");
        self.keep(&decision);
        decision
    }

    fn keep(&mut self, decision: &Decision) {
        self.events.extend(decision.events.iter().cloned());
        self.effects.extend(decision.effects.iter().cloned());
        self.dead_letters.extend(decision.dead_letter.iter().cloned());
    }

    /// Moves the clock to `at`, firing every timer due on the way, in order.
    pub(super) fn advance_to(&mut self, at: DateTime<Utc>) {
        let mut fired = Vec::new();
        (self.engine.advance(at, |decision| fired.push(decision))).expect("no limit is measured here");
        for decision in &fired {
            self.keep(decision);
        }
    }

    pub(super) fn advance(&mut self, by: TimeDelta) {
        self.advance_to(self.now + by);
    }

    pub(super) fn config(&mut self, config: Value) -> Decision {
        let id = config["pipeline"]["id"].as_str().unwrap().to_string();
        self.input(
            &id,
            Input::ConfigPublished(ConfigRecord::Put {
                pipeline_id: id.as_str().into(),
                config,
            }),
        )
    }

    pub(super) fn sensor(&mut self, pipeline: &str, key: &str, data: Value) -> Decision {
        let reading = SensorReading {
            pipeline_id: pipeline.into(),
            key: key.into(),
            data: data.as_object().unwrap().clone(),
            date: None,
            hour: None,
            timestamp: None,
            ..Default::default()
        };
        self.input(pipeline, Input::SensorReceived(reading))
    }

    pub(super) fn job(
        &mut self,
        pipeline: &str,
        run_id: &str,
        status: JobStatus,
        category: Option<FailureCategory>,
    ) -> Decision {
        let record = JobRecord {
            pipeline_id: pipeline.into(),
            schedule_id: "stream".into(),
            date: "2026-11-22".into(),
            run_id: run_id.into(),
            status,
            failure_category: category,
            message: None,
            metadata: None,
            timestamp: self.now,
        };
        self.input(pipeline, Input::JobReported(record.parse().unwrap()))
    }

    /// True when the only timers left are the expiries of ended executions.
    pub(super) fn only_expiry_left(&self) -> bool {
        self.timers.iter().all(|t| matches!(t.kind, TimerKind::Expire { .. }))
    }

    pub(super) fn types(&self) -> Vec<EventType> {
        self.events.iter().map(|e| e.kind).collect()
    }

    pub(super) fn triggers(&self) -> Vec<&TriggerRequest> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::TriggerJob(r) => Some(r),
                _ => None,
            })
            .collect()
    }
}

pub(crate) fn pipeline(max_retries: u32) -> Value {
    json!({
        "pipeline": {"id": "gold", "owner": "analytics"},
        "schedule": {
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            "evaluation": {"window": "1h", "interval": "5m"}
        },
        "validation": {"trigger": "ALL", "rules": [
            {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            {"key": "row-count", "check": "gte", "field": "count", "value": 1000}
        ]},
        "job": {"type": "command", "config": {"command": "run ${DATE} ${RUN_ID}"}, "maxRetries": max_retries}
    })
}

const RUN1: &str = "gold.stream.2026-11-22.1";
const RUN2: &str = "gold.stream.2026-11-22.2";

/// A key's readings are looked up by their slots' prefix, not found by scanning every slot:
/// the lookup must find exactly what a scan by key finds, keys that share a prefix or hold
/// `@` themselves included.
#[test]
fn a_keys_readings_are_those_a_scan_by_key_finds() {
    let mut state = PipelineState::default();
    let keys = ["rows", "rows-x", "rows@b", "row", "rowsy"];
    for (n, key) in keys.iter().enumerate() {
        for date in [None, chrono::NaiveDate::from_ymd_opt(2026, 11, 20 + n as u32)] {
            for hour in [None, Some(3)] {
                let sensor = StoredSensor {
                    date,
                    hour: date.and(hour),
                    received_at: t0() + TimeDelta::minutes(n as i64),
                    ..StoredSensor::default()
                };
                state.sensors.insert(sensor.slot(key), sensor.into());
            }
        }
    }
    for key in keys.iter().chain(&["rows@", "absent"]) {
        let scanned: Vec<&str> = (state.sensors.iter())
            .filter(|(slot, s)| s.key_in(slot) == *key)
            .map(|(slot, _)| slot.as_str())
            .collect();
        let looked_up: Vec<&str> = state.readings_of(key).map(|(slot, _)| slot).collect();
        assert_eq!(looked_up, scanned, "key {key}");
    }
    assert_eq!(state.readings_of("rows").count(), 3, "undated, a day, an hour");
}

#[test]
fn happy_path_triggers_once_and_completes() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "row-count", json!({"count": "1500"}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    let triggers = sim.triggers();
    assert_eq!(triggers.len(), 1);
    assert_eq!(triggers[0].run_id, RUN1);
    assert_eq!(
        triggers[0].config.json(),
        json!({"command": format!("run 2026-11-22 {RUN1}")})
    );
    sim.job("gold", RUN1, JobStatus::Running, None);
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let completed = sim.events.last().unwrap();
    assert_eq!((completed.run_id.as_deref(), completed.attempt), (Some(RUN1), Some(1)));
    assert!(sim.only_expiry_left(), "nothing left to wake up for");
}

/// A journaled trigger keeps the form it had before job configs were typed: the job type
/// beside the rendered config's JSON. Journals written by either version read back alike.
#[test]
fn a_journaled_trigger_keeps_its_json_form() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "row-count", json!({"count": "1500"}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    let effect = sim.effects.last().unwrap();
    let journaled = concat!(
        r#"{"effect":"triggerJob","pipelineId":"gold","scheduleId":"stream","date":"2026-11-22","#,
        r#""runId":"gold.stream.2026-11-22.1","attempt":1,"kind":"command","#,
        r#""config":{"command":"run 2026-11-22 gold.stream.2026-11-22.1"},"#,
        r#""retry":{"intervalMs":30000,"backoffRate":2.0,"maxAttempts":3},"#,
        r#""statusRetry":{"intervalMs":2000,"backoffRate":2.0,"maxAttempts":3},"#,
        // A command's call is one try (30 s) and a wait for a slot (10 s); it begins within
        // 30 s.
        r#""deadline":"2026-11-22T08:00:40Z","startBy":"2026-11-22T08:00:30Z"}"#
    );
    assert_eq!(serde_json::to_string(effect).unwrap(), journaled);
    assert_eq!(&serde_json::from_str::<Effect>(journaled).unwrap(), effect);
    // Journaled before start marks were: no time to begin (left to its deadline).
    let unmarked = journaled.replace(r#","startBy":"2026-11-22T08:00:30Z""#, "");
    let Effect::TriggerJob(request) = serde_json::from_str::<Effect>(&unmarked).unwrap() else {
        panic!("a trigger")
    };
    assert_eq!((request.start_by, request.deadline), (None, effect.request().deadline));
    // Journaled before retry policies and deadlines were: the defaults, and no deadline.
    let older = json!({"effect": "triggerJob", "pipelineId": "gold", "scheduleId": "stream", "date": "2026-11-22",
                       "runId": RUN1, "attempt": 1, "kind": "command", "config": {"command": "true"}});
    let Effect::TriggerJob(request) = serde_json::from_value::<Effect>(older).unwrap() else {
        panic!("a trigger")
    };
    assert_eq!(
        (request.retry, request.status_retry, request.deadline),
        (RetryPolicy::trigger(), RetryPolicy::status_check(), None)
    );
    assert_eq!(request.kind(), crate::core::config::JobKind::Command);
}

#[test]
fn failing_rules_wait_for_a_fixing_sensor_and_explain_themselves() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "row-count", json!({"count": 10}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    let exec = &sim.states["gold"].executions["stream/2026-11-22"];
    let verdict = exec.last_verdict.as_ref().unwrap();
    assert_eq!(verdict.failures(), "row-count: count is 10 but must be >= 1000");
    assert_eq!(sim.timers.next_due(), Some(t0() + TimeDelta::minutes(5)));
    sim.advance(TimeDelta::minutes(12));
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED],
        "interval evaluations publish nothing while failing"
    );
    sim.sensor("gold", "row-count", json!({"count": 1000.0}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers().len(), 1);
    assert!(
        !sim.timers.iter().any(|t| matches!(t.kind, TimerKind::Evaluate { .. })),
        "the interval timer is cancelled once rules pass"
    );
}

#[test]
fn window_exhaustion_reports_the_last_reasons() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.advance(TimeDelta::minutes(59));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    sim.advance(TimeDelta::minutes(1));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_EXHAUSTED]);
    let exhausted = sim.events.last().unwrap();
    assert_eq!(exhausted.timestamp, t0() + TimeDelta::hours(1));
    assert!(
        exhausted.message.contains("no reading of sensor \"row-count\""),
        "{}",
        exhausted.message
    );
    assert_eq!(exhausted.detail["results"][1]["passed"], json!(false));
    assert!(sim.only_expiry_left());
    // A late sensor neither revives the execution nor starts another for the same date.
    sim.sensor("gold", "row-count", json!({"count": 5000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_EXHAUSTED]);
    assert!(sim.triggers().is_empty());
}

#[test]
fn a_failed_job_is_retried_then_succeeds() {
    let mut sim = Sim::new();
    sim.config(pipeline(1));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.job("gold", RUN1, JobStatus::Running, None);
    sim.job("gold", RUN1, JobStatus::Failed, None);
    assert_eq!(
        sim.triggers().iter().map(|t| t.run_id.as_str()).collect::<Vec<_>>(),
        [RUN1, RUN2]
    );
    // A re-delivered report of the first attempt changes nothing.
    sim.job("gold", RUN1, JobStatus::Failed, None);
    sim.job("gold", RUN2, JobStatus::Running, None);
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    assert_eq!(
        sim.types(),
        [
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_FAILED,
            // The retry waits for the rules to pass again: the sensors still hold.
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED
        ]
    );
    assert_eq!(sim.events[3].detail["willRetry"], json!(true));
    assert_eq!(sim.events[6].attempt, Some(2));
}

#[test]
fn retry_budgets_are_spent_by_failure_category() {
    let mut sim = Sim::new();
    let mut config = pipeline(0);
    config["job"]["maxCodeRetries"] = json!(1);
    sim.config(config);
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    // PERMANENT spends maxCodeRetries (1): one retry.
    sim.job("gold", RUN1, JobStatus::Failed, Some(FailureCategory::Permanent));
    // TRANSIENT spends maxRetries (0): exhausted.
    sim.job("gold", RUN2, JobStatus::Timeout, None);
    assert_eq!(
        sim.types(),
        [
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_FAILED,
            VALIDATION_PASSED,
            JOB_TIMEOUT,
            RETRY_EXHAUSTED
        ]
    );
    let exhausted = sim.events.last().unwrap();
    assert_eq!(exhausted.detail["budget"], json!("maxRetries"));
    assert_eq!(exhausted.run_id.as_deref(), Some(RUN2));
    assert!(matches!(
        sim.states["gold"].executions["stream/2026-11-22"].phase,
        Phase::Failed { .. }
    ));
}

#[test]
fn duplicate_trigger_sensors_start_one_execution() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    for _ in 0..3 {
        sim.sensor("gold", "upstream", json!({"status": "ready"}));
    }
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn a_trigger_condition_that_does_not_hold_starts_nothing() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "upstream", json!({"status": "running"}));
    assert!(sim.states["gold"].executions.is_empty());
    assert!(sim.timers.is_empty());
}

#[test]
fn sensors_before_the_config_are_used_when_it_arrives() {
    let mut sim = Sim::new();
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert!(sim.events.is_empty());
    sim.config(pipeline(0));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, TRIGGER_RECOVERED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn an_invalid_config_is_rejected_and_the_previous_stays_in_force() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let mut bad = pipeline(0);
    bad["job"]["maxRetries"] = json!(11);
    bad["validation"]["rules"][1]["check"] = json!("bigger");
    let decision = sim.config(bad);
    assert!(decision.dead_letter.is_some());
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, CONFIG_REJECTED]);
    let problems = &sim.events[1].detail["problems"];
    assert_eq!(problems.as_array().unwrap().len(), 2, "{problems}");
    assert_eq!(sim.states["gold"].config.as_ref().unwrap().job.max_retries, 0);
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.triggers().len(), 1, "the previous config still works");
}

#[test]
fn a_config_whose_id_differs_from_its_key_is_rejected() {
    let mut sim = Sim::new();
    let config = pipeline(0);
    sim.input(
        "other",
        Input::ConfigPublished(ConfigRecord::Put {
            pipeline_id: "other".into(),
            config,
        }),
    );
    assert_eq!(sim.types(), [CONFIG_REJECTED]);
    assert!(!sim.states.contains_key("other") || sim.states["other"].config.is_none());
}

#[test]
fn a_job_report_for_no_execution_is_rejected() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let decision = sim.job("gold", "nope", JobStatus::Succeeded, None);
    assert!(decision.dead_letter.unwrap().contains("no execution"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, INPUT_REJECTED]);
}

#[test]
fn timers_that_fire_twice_or_late_change_nothing() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    let before = sim.states.clone();
    let kind = TimerKind::Evaluate {
        execution: crate::core::execution::id("stream", "2026-11-22"),
    };
    sim.advance(TimeDelta::hours(3));
    let decision = sim.apply("gold", &Input::TimerFired(kind), "timer/late");
    assert_eq!(decision.state, StateChange::Unchanged);
    assert!(decision.events.is_empty() && decision.effects.is_empty());
    assert_eq!(sim.states, before);
}

#[test]
fn every_job_type_is_triggered_with_its_retry_policies() {
    let mut sim = Sim::new();
    let mut config = pipeline(0);
    config["job"] = json!({"type": "glue", "config": {"jobName": "etl-${DATE}"},
        "triggerRetry": {"interval": "5s", "maxAttempts": 1}});
    sim.config(config);
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    let triggers = sim.triggers();
    assert_eq!(triggers.len(), 1);
    assert_eq!(triggers[0].kind(), crate::core::config::JobKind::Glue);
    assert_eq!(triggers[0].config.json()["jobName"], "etl-2026-11-22");
    assert_eq!(triggers[0].retry.interval_ms, 5_000);
    assert_eq!(triggers[0].retry.max_attempts, 1);
    assert_eq!(
        triggers[0].status_retry,
        crate::core::config::RetryPolicy::status_check()
    );
}

#[test]
fn dry_run_reports_instead_of_triggering() {
    let mut sim = Sim::new();
    let mut config = pipeline(0);
    config["dryRun"] = json!(true);
    sim.config(config);
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, DRY_RUN_WOULD_TRIGGER]);
    assert!(sim.triggers().is_empty());
}

#[test]
fn hourly_sensors_scope_hourly_executions() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    for hour in ["07", "08"] {
        sim.sensor(
            "gold",
            "upstream",
            json!({"status": "ready", "date": "2026-11-22", "hour": hour}),
        );
    }
    let reading = |hour: u32| SensorReading {
        pipeline_id: "gold".into(),
        key: "upstream".into(),
        data: json!({"status": "ready"}).as_object().unwrap().clone(),
        date: chrono::NaiveDate::from_ymd_opt(2026, 11, 22),
        hour: Some(hour),
        timestamp: None,
        ..Default::default()
    };
    sim.input("gold", Input::SensorReceived(reading(7)));
    sim.input("gold", Input::SensorReceived(reading(8)));
    sim.input("gold", Input::SensorReceived(reading(8)));
    let runs: Vec<&str> = sim.triggers().iter().map(|t| t.run_id.as_str()).collect();
    assert_eq!(
        runs,
        [
            "gold.stream.2026-11-22.1",
            "gold.stream.2026-11-22T07.1",
            "gold.stream.2026-11-22T08.1"
        ]
    );
}

#[test]
fn the_same_inputs_give_the_same_events_byte_for_byte() {
    let run = || {
        let mut sim = Sim::new();
        sim.config(pipeline(1));
        sim.sensor("gold", "upstream", json!({"status": "ready"}));
        sim.advance(TimeDelta::minutes(7));
        sim.sensor("gold", "row-count", json!({"count": 2000}));
        sim.job("gold", RUN1, JobStatus::Failed, None);
        sim.job("gold", RUN2, JobStatus::Succeeded, None);
        serde_json::to_string(&sim.events).unwrap()
    };
    let first = run();
    assert_eq!(first, run());
    let events: Vec<Event> = serde_json::from_str(&first).unwrap();
    assert_eq!(events.len(), 6);
    let ids: BTreeSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "ids are unique: {first}");
}

#[test]
fn deleting_a_config_drops_the_pipeline_and_its_timers() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.timers.len(), 2, "the next evaluation and the watchdog");
    let decision = sim.input(
        "gold",
        Input::ConfigPublished(ConfigRecord::Delete {
            pipeline_id: "gold".into(),
        }),
    );
    assert_eq!(decision.state, StateChange::Delete);
    assert!(sim.timers.is_empty());
    assert!(!sim.states.contains_key("gold"));
}

#[test]
fn a_config_that_is_not_json_is_rejected_as_a_config() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let record = crate::core::records::decode_config(Some(b"gold"), Some(b"pipeline: yaml?")).unwrap();
    let decision = sim.input("gold", Input::ConfigPublished(record));
    assert!(decision
        .dead_letter
        .unwrap()
        .starts_with("invalid config: not valid JSON"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, CONFIG_REJECTED]);
    assert_eq!(sim.events[1].detail["previousConfigKept"], json!(true));
    assert!(sim.states["gold"].config.is_some());
}

/// The earlier design read a key's latest row whatever its date; Sluice reads the
/// execution's own. A rule waiting on a key that has a reading for another date says so.
#[test]
fn a_rule_waiting_on_a_key_read_for_another_date_names_that_date() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let today = t0().date_naive();
    let yesterday = (today - TimeDelta::days(1)).to_string();
    sim.sensor_scoped(
        "gold",
        "row-count",
        json!({"count": 5000}),
        Some(&yesterday),
        None,
        None,
    );
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.advance(TimeDelta::hours(1));
    let exhausted = sim.of(VALIDATION_EXHAUSTED)[0].clone();
    let reason = exhausted.detail["results"][1]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains(&format!(
            "no reading of sensor \"row-count\" for {today}; the latest is for {yesterday}"
        )),
        "{reason}"
    );
    assert!(
        exhausted.message.contains("earlier design read a key's latest row"),
        "{}",
        exhausted.message
    );
}

/// Counts from many writers, as the earlier design's producers kept them with DynamoDB
/// `ADD`: each `merge: add` reading adds its numbers to the stored reading; the run starts
/// when the sum reaches the rule's threshold.
#[test]
fn readings_with_merge_add_are_summed_until_the_rule_passes() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let add = |sim: &mut Sim, data: Value| {
        let record = json!({"pipelineId": "gold", "key": "row-count", "data": data, "merge": "add"});
        let bytes = serde_json::to_vec(&record).unwrap();
        let reading = crate::core::records::decode_sensor(Some(b"gold"), Some(&bytes)).unwrap();
        sim.input("gold", Input::SensorReceived(reading));
    };
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    add(&mut sim, json!({"count": 400, "writer": "a"}));
    add(&mut sim, json!({"count": 400, "writer": "b", "files": 2}));
    assert!(sim.triggers().is_empty(), "800 rows: not yet");
    add(&mut sim, json!({"count": 300.5}));
    assert_eq!(sim.triggers().len(), 1, "1100.5 rows");
    let stored = sim.states["gold"]
        .sensors
        .values()
        .find(|s| s.data.contains_key("count"))
        .unwrap();
    assert_eq!(stored.data["count"], json!(1100.5));
    assert_eq!(stored.data["writer"], json!("b"), "other fields are set");
    assert_eq!(stored.data["files"], json!(2), "fields left out are kept");
    // Without merge, a reading replaces what is stored.
    sim.sensor("gold", "row-count", json!({"count": 7}));
    let stored = sim.states["gold"]
        .sensors
        .values()
        .find(|s| s.data.contains_key("count"))
        .unwrap();
    assert_eq!(*stored.data, *json!({"count": 7}).as_object().unwrap());
    // An unknown mode is refused at decode (a dead letter), never guessed.
    let record = json!({"pipelineId": "gold", "key": "row-count", "data": {}, "merge": "max"});
    let refused = crate::core::records::decode_sensor(Some(b"gold"), Some(&serde_json::to_vec(&record).unwrap()));
    assert!(refused.unwrap_err().to_string().contains("not a merge mode"));
}

/// The earlier design's daily fan-in (interlock-aws-example `daily_sensor`): each hour that
/// finishes is ADDed to a string set on the day's `daily-status` sensor. `merge: add` joins
/// lists as sets, and a `size_gte` (or `contains_all`) rule says "all 24 hours": the daily
/// run starts with the 24th distinct hour, not before, whatever arrives twice.
#[test]
fn merge_add_collects_a_set_and_the_daily_run_starts_with_its_24th_hour() {
    let hours: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    for rule in [
        json!({"key": "daily-status", "check": "size_gte", "field": "completed_hours", "value": 24}),
        json!({"key": "daily-status", "check": "contains_all", "field": "completed_hours", "value": hours}),
    ] {
        let mut sim = Sim::new();
        sim.config(json!({
            "pipeline": {"id": "gold", "owner": "analytics"},
            "schedule": {"trigger": rule.clone(), "evaluation": {"window": "30m", "interval": "5m"}},
            "validation": {"rules": [rule.clone()]},
            "job": {"type": "command", "config": {"command": "agg ${DATE}"}}
        }));
        let add = |sim: &mut Sim, hour: &str| {
            let record = json!({"pipelineId": "gold", "key": "daily-status", "date": "2026-11-22",
                "merge": "add", "data": {"completed_hours": [hour], "date": "20261122"}});
            let bytes = serde_json::to_vec(&record).unwrap();
            let reading = crate::core::records::decode_sensor(Some(b"gold"), Some(&bytes)).unwrap();
            sim.input("gold", Input::SensorReceived(reading));
        };
        for hour in &hours[..23] {
            add(&mut sim, hour);
            add(&mut sim, "05"); // re-delivered: a set holds it once
        }
        assert!(sim.triggers().is_empty(), "{rule}: 23 hours: not yet");
        let stored = sim.states["gold"]
            .sensors
            .values()
            .find(|s| s.data.contains_key("completed_hours"))
            .unwrap();
        assert_eq!(stored.data["completed_hours"].as_array().unwrap().len(), 23);
        add(&mut sim, "23");
        assert_eq!(sim.triggers().len(), 1, "{rule}: all 24 hours");
    }
    // What fails says what is missing.
    let mut sim = Sim::new();
    let rule = json!({"key": "daily-status", "check": "contains_all", "field": "completed_hours", "value": ["00", "01", "02"]});
    sim.config(json!({
        "pipeline": {"id": "gold", "owner": "analytics"},
        "schedule": {"trigger": {"key": "go", "check": "exists"}, "evaluation": {"window": "30m", "interval": "5m"}},
        "validation": {"rules": [rule]},
        "job": {"type": "command", "config": {"command": "agg"}}
    }));
    sim.sensor("gold", "daily-status", json!({"completed_hours": ["01"]}));
    sim.sensor("gold", "go", json!({}));
    sim.advance(TimeDelta::minutes(30));
    let exhausted = sim.of(EventType::VALIDATION_EXHAUSTED);
    let reason = serde_json::to_string(&exhausted[0].detail).unwrap();
    assert!(
        reason.contains("lacks 2 of 3 members") && reason.contains("02"),
        "{reason}"
    );
}

/// A producer adding new members forever is refused once a set would pass its bound.
#[test]
fn merge_add_refuses_a_set_past_its_bound() {
    let stored: serde_json::Map<String, Value> =
        json!({"ids": (0..crate::core::records::MAX_SET_MEMBERS).collect::<Vec<_>>()})
            .as_object()
            .unwrap()
            .clone();
    let more = json!({"ids": [-1]}).as_object().unwrap().clone();
    let refused = crate::core::records::Merge::Add
        .apply(Some(&stored), &more)
        .unwrap_err();
    assert_eq!((refused.field.as_str(), refused.members), ("ids", 10_001));
    assert!(refused.to_string().contains("more than the 10000"), "{refused}");
    let same = json!({"ids": [0, 1]}).as_object().unwrap().clone();
    assert!(
        crate::core::records::Merge::Add.apply(Some(&stored), &same).is_ok(),
        "nothing new: still fits"
    );
}

// ---- Helpers for the schedule and SLA scenarios (tests/schedule_and_sla.rs) ----

/// An instant written in RFC 3339.
pub(super) fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
}

impl Sim {
    /// A sensor reading scoped to a date (and hour), with an optional producer timestamp.
    pub(super) fn sensor_scoped(
        &mut self,
        pipeline: &str,
        key: &str,
        data: Value,
        date: Option<&str>,
        hour: Option<u32>,
        timestamp: Option<DateTime<Utc>>,
    ) -> Decision {
        let reading = SensorReading {
            pipeline_id: pipeline.into(),
            key: key.into(),
            data: data.as_object().unwrap().clone(),
            date: date.map(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").unwrap()),
            hour,
            timestamp,
            ..Default::default()
        };
        self.input(pipeline, Input::SensorReceived(reading))
    }

    /// A job report for any execution.
    /// An operator's `rerun` of `pipeline`'s execution for `date`.
    pub(super) fn rerun(&mut self, pipeline: &str, date: &str) -> Decision {
        let record = crate::core::records::CommandRecord {
            pipeline_id: pipeline.into(),
            command: crate::core::records::CommandKind::Rerun,
            schedule_id: None,
            date: date.into(),
            reason: None,
            requested_by: None,
            subscriber: None,
            key: None,
            force: false,
            backfill: false,
        };
        self.input(pipeline, Input::CommandReceived(record.parse().unwrap()))
    }

    pub(super) fn job_for(&mut self, pipeline: &str, schedule_id: &str, date: &str, status: JobStatus) -> Decision {
        let run_id = self.states[pipeline].executions[&crate::core::execution::id(schedule_id, date)]
            .phase
            .run_id()
            .map(|r| r.to_string())
            .unwrap_or_default();
        let record = JobRecord {
            pipeline_id: pipeline.into(),
            schedule_id: schedule_id.into(),
            date: date.into(),
            run_id: run_id.into(),
            status,
            failure_category: None,
            message: None,
            metadata: None,
            timestamp: self.now,
        };
        self.input(pipeline, Input::JobReported(record.parse().unwrap()))
    }

    /// Fires a pending timer now, however long after its due time (a processor that was down).
    pub(super) fn fire_late(&mut self, pipeline: &str, kind: &TimerKind) -> Decision {
        self.engine.timers.cancel(PARTITION, pipeline, kind);
        let origin = format!("timer/{pipeline}/{}@late", kind.encode());
        self.apply(pipeline, &Input::TimerFired(kind.clone()), &origin)
    }

    /// Drops the pending timers `which` selects, as a bug or a restore that missed them
    /// would: the pipelines' states still list them.
    pub(super) fn lose_timers(&mut self, which: impl Fn(&TimerKind) -> bool) {
        let lost: Vec<DueTimer> = self.timers.iter().filter(|t| which(&t.kind)).collect();
        for t in lost {
            self.engine.timers.cancel(t.partition, &t.pipeline, &t.kind);
        }
    }

    /// Deletes a pipeline's config.
    pub(super) fn delete(&mut self, pipeline: &str) -> Decision {
        let record = ConfigRecord::Delete {
            pipeline_id: pipeline.into(),
        };
        self.input(pipeline, Input::ConfigPublished(record))
    }

    /// The events of one type, in order.
    pub(super) fn of(&self, kind: EventType) -> Vec<&Event> {
        self.events.iter().filter(|e| e.kind == kind).collect()
    }

    /// When a pending timer of `pipeline` is due.
    pub(super) fn due(&self, pipeline: &str, kind: &TimerKind) -> Option<DateTime<Utc>> {
        self.timers
            .iter()
            .find(|t| t.pipeline == pipeline && t.kind == *kind)
            .map(|t| t.at)
    }

    /// Asserts the scheduler's timers and the ones the pipeline's state lists are the same.
    pub(super) fn assert_timers_agree(&self, pipeline: &str) {
        let scheduled: BTreeSet<(DateTime<Utc>, TimerKind)> = self
            .timers
            .iter()
            .filter(|t| t.pipeline == pipeline)
            .map(|t| (t.at, t.kind.clone()))
            .collect();
        let listed: BTreeSet<(DateTime<Utc>, TimerKind)> = self
            .states
            .get(pipeline)
            .map(|s| s.timers.values().map(|t| (t.at, t.timer.clone())).collect())
            .unwrap_or_default();
        assert_eq!(scheduled, listed, "scheduled timers differ from the state's list");
    }
}

// ---- Bounded state ---------------------------------------------------------------------------

#[test]
fn an_ended_execution_and_its_dated_sensors_expire_after_the_retention() {
    let mut sim = Sim::new();
    let expire = run_gold_to_success(&mut sim);
    // Not before its date (the 22nd) is older than the retention: the 30th, 00:00 (UTC).
    assert_eq!(sim.due("gold", &expire), Some(at("2026-11-30T00:00:00Z")));
    sim.advance(TimeDelta::days(6));
    assert!(sim.states["gold"]
        .executions
        .contains_key(&"stream/2026-11-22".parse().unwrap()));
    sim.advance(TimeDelta::days(2));
    let state = &sim.states["gold"];
    assert!(
        state.executions.is_empty(),
        "{:?}",
        state.executions.keys().collect::<Vec<_>>()
    );
    assert!(
        state.sensors.is_empty(),
        "{:?}",
        state.sensors.keys().collect::<Vec<_>>()
    );
    assert!(state.timers.is_empty() && sim.timers.is_empty());

    // A re-delivered trigger for that forgotten date must not run the job again.
    let decision = sim.sensor_scoped(
        "gold",
        "upstream",
        json!({"status": "ready"}),
        Some("2026-11-22"),
        None,
        None,
    );
    assert_eq!(decision.events[0].kind, INPUT_REJECTED);
    assert!(decision
        .dead_letter
        .unwrap()
        .contains("older than the execution retention"));
    assert_eq!(sim.triggers().len(), 1);
}

/// No slow leak: readings of dates that never get an execution (a producer's readings of
/// days whose trigger never came) and hour-scoped readings of a daily pipeline (an hourly
/// upstream's every hour) are forgotten once the retention is past. Before, they were kept
/// for ever: 24 slots a day filled `--max-sensors-per-pipeline` (1,000) in about 41 days, and
/// the pipeline then refused every new date. 400 simulated days.
#[test]
fn readings_of_days_without_an_execution_are_forgotten_after_the_retention_over_400_days() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let first = t0().date_naive();
    let mut most = 0;
    for n in 0..400 {
        let day = first + TimeDelta::days(n);
        let date = day.format("%Y-%m-%d").to_string();
        sim.advance_to(day.and_hms_opt(1, 0, 0).unwrap().and_utc());
        for hour in 0..24 {
            sim.sensor_scoped("gold", "feed", json!({"rows": hour}), Some(&date), Some(hour), None);
        }
        sim.sensor_scoped("gold", "row-count", json!({"count": 2000}), Some(&date), None, None);
        // Every third day's trigger never comes: that day has readings and no execution.
        if n % 3 != 2 {
            sim.sensor_scoped("gold", "upstream", json!({"status": "ready"}), Some(&date), None, None);
            sim.job_for("gold", "stream", &date, JobStatus::Succeeded);
        }
        most = most.max(sim.states["gold"].sensors.len());
        let refused: Vec<&String> = sim.dead_letters.iter().collect();
        assert!(refused.is_empty(), "day {n} ({date}): {refused:?}");
    }
    // The retention (7 days) and the day under way: 26 readings a day for at most 9 days.
    assert!(most <= 26 * 9, "{most} readings kept at most");
    let ran = sim.triggers().len();
    assert_eq!(
        ran,
        (0..400).filter(|n| n % 3 != 2).count(),
        "every day with a trigger ran"
    );
}

/// No wedge and no slow growth from readings that never expire with an execution: undated
/// readings of keys nothing reads (a new key a day), readings dated far ahead (refused: held
/// until their date, they would fill `--max-sensors-per-pipeline` for good), and pipelines
/// nobody configures (a new id a day). 400 simulated days.
#[test]
fn stray_keys_far_dates_and_unconfigured_pipelines_are_bounded_over_400_days() {
    let mut sim = Sim::new();
    sim.config(pipeline(0));
    let first = t0().date_naive();
    let (mut most_readings, mut most_states) = (0, 0);
    for n in 0..400 {
        let day = first + TimeDelta::days(n);
        sim.advance_to(day.and_hms_opt(1, 0, 0).unwrap().and_utc());
        sim.sensor("gold", &format!("probe-{n}"), json!({"n": n}));
        let ahead = (day + TimeDelta::days(30)).format("%Y-%m-%d").to_string();
        let far = sim.sensor_scoped("gold", "row-count", json!({"count": 1}), Some(&ahead), None, None);
        let reason = far.dead_letter.unwrap_or_default();
        assert!(
            reason.contains("ahead"),
            "day {n}: a reading 30 days ahead was kept ({reason:?})"
        );
        sim.sensor(&format!("ghost-{n}"), "landed", json!({"n": n}));
        most_readings = most_readings.max(sim.states["gold"].sensors.len());
        most_states = most_states.max(sim.states.len());
    }
    // The retention (7 days) of stray keys, and gold beside the ghosts of as many days.
    assert!(most_readings <= 9, "{most_readings} readings kept at most");
    assert!(most_states <= 10, "{most_states} pipeline states at most");
    assert_eq!(
        sim.dead_letters.len(),
        400,
        "only the far readings refused: {:?}",
        sim.dead_letters.last()
    );
    // A ghost configured in time keeps what it was sent.
    let mut ghost = pipeline(0);
    ghost["pipeline"]["id"] = json!("ghost-399");
    sim.config(ghost);
    assert!(sim.states["ghost-399"].sensors.len() == 1 && sim.due("ghost-399", &TimerKind::Forget).is_none());
}

/// Runs gold's execution of 2026-11-22 (dated sensors) to success; returns its expiry timer.
fn run_gold_to_success(sim: &mut Sim) -> TimerKind {
    sim.config(pipeline(0));
    for (key, data) in [
        ("row-count", json!({"count": 2000})),
        ("upstream", json!({"status": "ready"})),
    ] {
        sim.sensor_scoped("gold", key, data, Some("2026-11-22"), None, None);
    }
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    TimerKind::Expire {
        execution: crate::core::execution::id("stream", "2026-11-22"),
    }
}

/// Issue 60, item 3: an execution that ended on its own day used to be forgotten at the
/// retention after its end, a day before its date's readings were refused; in that gap the
/// same reading started the date again, under the run id it had run with. It is kept now
/// until its date is older than the retention, and the reading changes nothing.
#[test]
fn a_date_that_ran_is_not_started_again_between_its_expiry_and_its_cutoff() {
    let mut sim = Sim::new();
    run_gold_to_success(&mut sim);
    // A week and an hour after the run: inside the old gap.
    sim.advance(retention::RETENTION + TimeDelta::hours(1));
    assert!(sim.states["gold"]
        .executions
        .contains_key(&"stream/2026-11-22".parse().unwrap()));
    let ready = json!({"status": "ready"});
    // The same readings again (a producer replaying its day): the same date, no news.
    sim.sensor_scoped(
        "gold",
        "row-count",
        json!({"count": 2000}),
        Some("2026-11-22"),
        None,
        None,
    );
    sim.sensor_scoped("gold", "upstream", ready.clone(), Some("2026-11-22"), None, None);
    assert_eq!(sim.triggers().len(), 1, "the date ran once");
    // From its cutoff on, the date is forgotten and its readings refused.
    sim.advance_to(at("2026-11-30T00:00:01Z"));
    assert!(sim.states["gold"].executions.is_empty());
    let decision = sim.sensor_scoped("gold", "upstream", ready, Some("2026-11-22"), None, None);
    assert_eq!(decision.events[0].kind, INPUT_REJECTED);
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn the_retention_is_a_setting() {
    let mut sim = Sim::new();
    sim.settings.retention = TimeDelta::days(2);
    let expire = run_gold_to_success(&mut sim);
    assert_eq!(sim.due("gold", &expire), Some(at("2026-11-25T00:00:00Z")));
    sim.advance(TimeDelta::days(3));
    assert!(
        sim.states["gold"].executions.is_empty(),
        "pruned after two days, not seven"
    );
    // And a date older than two days can no longer start an execution.
    let decision = sim.sensor_scoped(
        "gold",
        "upstream",
        json!({"status": "ready"}),
        Some("2026-11-21"),
        None,
        None,
    );
    assert_eq!(decision.events[0].kind, INPUT_REJECTED);
}

#[test]
fn a_rerun_cancels_the_expiry_and_the_next_end_arms_it_again() {
    let mut sim = Sim::new();
    let mut config = pipeline(0);
    config["validation"]["rules"] = json!([]);
    sim.config(config);
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.job("gold", RUN1, JobStatus::Failed, Some(FailureCategory::Transient));
    let expire = TimerKind::Expire {
        execution: crate::core::execution::id("stream", "2026-11-22"),
    };
    assert!(sim.due("gold", &expire).is_some());
    sim.advance(TimeDelta::days(1));
    sim.rerun("gold", "2026-11-22");
    assert_eq!(sim.due("gold", &expire), None, "an open execution never expires");
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    assert_eq!(sim.due("gold", &expire), Some(sim.now + retention::RETENTION));
}

#[test]
fn an_input_redone_at_another_time_never_gives_an_existing_id_to_another_event() {
    // The same record (same origin) handled twice, as a batch redone after a crash with a
    // later `now`: the first time its timestamp is too far ahead and it is rejected, the
    // second time it passes the rules. The first event of each differs, and so do the ids.
    let run = |now: DateTime<Utc>| {
        let mut sim = Sim::starting_at(t0());
        sim.config(pipeline(0));
        sim.sensor("gold", "row-count", json!({"count": 1500}));
        sim.now = now;
        let reading = SensorReading {
            pipeline_id: "gold".into(),
            key: "upstream".into(),
            data: json!({"status": "ready"}).as_object().unwrap().clone(),
            date: None,
            hour: None,
            timestamp: Some(t0() + TimeDelta::minutes(10)),
            ..Default::default()
        };
        sim.apply("gold", &Input::SensorReceived(reading), "sensors/0@7").events
    };
    let early = run(t0());
    let late = run(t0() + TimeDelta::minutes(10));
    assert_eq!(early.iter().map(|e| e.kind).collect::<Vec<_>>(), [INPUT_REJECTED]);
    assert_eq!(late.iter().map(|e| e.kind).collect::<Vec<_>>(), [VALIDATION_PASSED]);
    assert_ne!(early[0].event_id, late[0].event_id);
    // Handled again at the same time, the same events get the same ids.
    assert_eq!(run(t0())[0].event_id, early[0].event_id);
}
