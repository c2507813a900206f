//! Schedules and SLAs on a simulated clock: cron ticks (across DST), exclusions, expected
//! starts, trigger deadlines, absolute and relative SLAs, and config changes mid-execution.
//! Each test is named after the event it is about.
//!
//! Every schedule is in America/New_York (EST = UTC-5, EDT = UTC-4; DST starts 2026-03-08
//! and ends 2026-11-01). 2026-11-21 is a Saturday, 2026-11-22 a Sunday.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};

use super::{at, merge, Sim};
use crate::core::events::EventType::*;
use crate::core::lifecycle::{Input, Phase, PipelineState, StateChange};
use crate::core::records::JobStatus;
use crate::core::timers::TimerKind;

/// Sensor-driven pipeline `gold`: the trigger `upstream` with status ready starts it, and no
/// rules, so it triggers at once. A 12-hour poll window keeps a running job running.
pub(super) fn stream(patch: Value) -> Value {
    let mut config = json!({
        "pipeline": {"id": "gold", "owner": "analytics"},
        "schedule": {
            "timezone": "America/New_York",
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            "evaluation": {"window": "1h", "interval": "5m"}
        },
        "validation": {"trigger": "ALL", "rules": []},
        "job": {"type": "command", "config": {"command": "run ${DATE}"}, "jobPollWindowSeconds": 43200}
    });
    merge(&mut config, patch);
    config
}

/// Cron pipeline `daily`, no rules: its occurrence triggers the job at once.
pub(super) fn cron(expr: &str, patch: Value) -> Value {
    let mut config = json!({
        "pipeline": {"id": "daily", "owner": "analytics"},
        "schedule": {
            "cron": expr,
            "timezone": "America/New_York",
            "evaluation": {"window": "1h", "interval": "5m"}
        },
        "validation": {"trigger": "ALL", "rules": []},
        "job": {"type": "command", "config": {"command": "run ${DATE}"}, "jobPollWindowSeconds": 43200}
    });
    merge(&mut config, patch);
    config
}

fn ready(sim: &mut Sim) {
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
}

fn ready_on(sim: &mut Sim, date: &str) {
    sim.sensor_scoped("gold", "upstream", json!({"status": "ready"}), Some(date), None, None);
}

/// `(date, timestamp)` of every event of a kind.
pub(super) fn when(sim: &Sim, kind: crate::core::events::EventType) -> Vec<(String, DateTime<Utc>)> {
    sim.of(kind)
        .iter()
        .map(|e| (e.date.clone().unwrap_or_default(), e.timestamp))
        .collect()
}

pub(super) fn on(date: &str, time: &str) -> (String, DateTime<Utc>) {
    (date.to_string(), at(time))
}

fn state<'s>(sim: &'s Sim, pipeline: &str) -> &'s PipelineState {
    &sim.states[pipeline]
}

fn phase<'s>(sim: &'s Sim, pipeline: &str, key: &str) -> &'s Phase {
    &state(sim, pipeline).executions[key].phase
}

fn breach(schedule_id: &str, date: &str) -> TimerKind {
    TimerKind::SlaBreach {
        execution: crate::core::execution::id(schedule_id, date),
    }
}

fn warning(schedule_id: &str, date: &str) -> TimerKind {
    TimerKind::SlaWarning {
        execution: crate::core::execution::id(schedule_id, date),
    }
}

/// The SLA timers pending for `pipeline`, as `(kind, due)`.
fn sla_timers(sim: &Sim, pipeline: &str) -> Vec<(TimerKind, DateTime<Utc>)> {
    sim.timers
        .iter()
        .filter(|t| {
            t.pipeline == pipeline
                && matches!(
                    t.kind,
                    TimerKind::SlaWarning { .. }
                        | TimerKind::SlaBreach { .. }
                        | TimerKind::RelativeSlaWarning { .. }
                        | TimerKind::RelativeSlaBreach { .. }
                )
        })
        .map(|t| (t.kind.clone(), t.at))
        .collect()
}

// ---- Cron ----------------------------------------------------------------------------------

#[test]
fn validation_passed_at_the_cron_time_not_before_and_the_next_tick_is_armed() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z")); // 07:00 EST
    sim.config(cron("30 8 * * *", json!({})));
    assert_eq!(sim.due("daily", &TimerKind::CronTick), Some(at("2026-11-22T13:30:00Z")));
    sim.advance_to(at("2026-11-22T13:29:59Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED], "nothing before the cron time");
    assert!(state(&sim, "daily").executions.is_empty());
    assert!(sim.triggers().is_empty());

    sim.advance_to(at("2026-11-22T13:30:00Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [on("2026-11-22", "2026-11-22T13:30:00Z")]
    );
    let trigger = sim.triggers()[0];
    assert_eq!(
        (trigger.execution.schedule(), trigger.execution.date_text()),
        ("cron", "2026-11-22")
    );
    assert_eq!(sim.due("daily", &TimerKind::CronTick), Some(at("2026-11-23T13:30:00Z")));
    sim.assert_timers_agree("daily");
}

#[test]
fn validation_passed_at_the_cron_time_across_the_spring_forward_change() {
    let mut sim = Sim::starting_at(at("2026-03-07T12:00:00Z"));
    sim.config(cron("30 8 * * *", json!({})));
    sim.advance_to(at("2026-03-09T12:00:00Z"));
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [
            on("2026-03-07", "2026-03-07T13:30:00Z"), // 08:30 EST
            on("2026-03-08", "2026-03-08T12:30:00Z"), // 08:30 EDT
        ]
    );
    assert_eq!(sim.due("daily", &TimerKind::CronTick), Some(at("2026-03-09T12:30:00Z")));
}

#[test]
fn validation_passed_after_the_spring_forward_gap_for_a_cron_time_inside_it() {
    let mut sim = Sim::starting_at(at("2026-03-07T12:00:00Z"));
    sim.config(cron("30 2 * * *", json!({})));
    sim.advance_to(at("2026-03-09T12:00:00Z"));
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [
            on("2026-03-08", "2026-03-08T07:00:00Z"), // 02:30 does not exist: 03:00 EDT
            on("2026-03-09", "2026-03-09T06:30:00Z"), // 02:30 EDT
        ]
    );
}

#[test]
fn validation_passed_at_the_cron_time_across_the_fall_back_change_once_in_the_fold() {
    let mut sim = Sim::starting_at(at("2026-10-31T12:00:00Z"));
    sim.config(cron("30 8 * * *", json!({})));
    sim.config(cron("30 1 * * *", json!({"pipeline": {"id": "night"}})));
    sim.advance_to(at("2026-11-02T12:00:00Z"));
    let passed = |pipeline: &str| -> Vec<(String, DateTime<Utc>)> {
        sim.of(VALIDATION_PASSED)
            .iter()
            .filter(|e| e.pipeline_id == pipeline)
            .map(|e| (e.date.clone().unwrap(), e.timestamp))
            .collect()
    };
    assert_eq!(
        passed("daily"),
        [
            on("2026-10-31", "2026-10-31T12:30:00Z"), // 08:30 EDT
            on("2026-11-01", "2026-11-01T13:30:00Z"), // 08:30 EST
        ]
    );
    assert_eq!(
        passed("night"),
        [
            on("2026-11-01", "2026-11-01T05:30:00Z"), // 01:30 EDT; not again at 01:30 EST
            on("2026-11-02", "2026-11-02T06:30:00Z"),
        ]
    );
}

#[test]
fn schedule_missed_when_a_cron_tick_fires_later_than_the_evaluation_window() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron("30 8 * * *", json!({})));
    // The processor was down from before 13:30 until 15:00: the tick fires 90 minutes late.
    sim.now = at("2026-11-22T15:00:00Z");
    sim.fire_late("daily", &TimerKind::CronTick);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, SCHEDULE_MISSED, VALIDATION_PASSED]);
    let missed = &sim.events[1];
    assert_eq!(missed.date.as_deref(), Some("2026-11-22"));
    assert_eq!(missed.schedule_id.as_deref(), Some("cron"));
    assert_eq!(missed.detail["expectedAt"], json!(at("2026-11-22T13:30:00Z")));
    assert_eq!(missed.detail["lateBySeconds"], json!(5400));
    assert_eq!(missed.detail["started"], json!(true));
    assert_eq!(missed.detail["laterOccurrencesSkipped"], json!(0));
    assert_eq!(
        sim.triggers()[0].execution.date_text(),
        "2026-11-22",
        "the missed occurrence still runs"
    );
    assert_eq!(sim.due("daily", &TimerKind::CronTick), Some(at("2026-11-23T13:30:00Z")));
    sim.assert_timers_agree("daily");

    // Late, but within the evaluation window: it just runs.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron("30 8 * * *", json!({})));
    sim.now = at("2026-11-22T14:30:00Z");
    sim.fire_late("daily", &TimerKind::CronTick);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);

    // Down for three days: one SCHEDULE_MISSED, which counts the occurrences that also passed;
    // the next tick is the first one still ahead.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron("30 8 * * *", json!({})));
    sim.now = at("2026-11-25T15:00:00Z");
    sim.fire_late("daily", &TimerKind::CronTick);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, SCHEDULE_MISSED, VALIDATION_PASSED]);
    assert_eq!(sim.events[1].detail["laterOccurrencesSkipped"], json!(3));
    assert_eq!(sim.due("daily", &TimerKind::CronTick), Some(at("2026-11-26T13:30:00Z")));
}

#[test]
fn a_duplicate_or_early_timer_changes_nothing() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron("30 8 * * *", json!({})));
    sim.advance_to(at("2026-11-22T13:30:00Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    let next = sim.due("daily", &TimerKind::CronTick);
    assert_eq!(next, Some(at("2026-11-23T13:30:00Z")));
    let before = sim.states.clone();
    // The same tick delivered again (a batch redone after a crash): the next occurrence is
    // pending but not due, so it must not open early.
    let origin = format!("timer/daily/{}@dup", TimerKind::CronTick.encode());
    let decision = sim.apply("daily", &Input::TimerFired(TimerKind::CronTick), &origin);
    assert_eq!(decision.state, StateChange::Unchanged);
    assert!(decision.events.is_empty() && decision.effects.is_empty() && decision.timers.is_empty());
    assert_eq!(sim.states, before);
    // A timer the state does not have pending at all.
    let stray = TimerKind::SlaBreach {
        execution: crate::core::execution::id("cron", "2026-11-22"),
    };
    let decision = sim.apply("daily", &Input::TimerFired(stray), "timer/stray");
    assert_eq!(decision.state, StateChange::Unchanged);
    assert!(decision.events.is_empty() && decision.timers.is_empty());
    // The real tick, when due, still opens the next day.
    sim.advance_to(at("2026-11-23T13:30:00Z"));
    assert_eq!(sim.of(VALIDATION_PASSED).len(), 2);
}

// ---- PIPELINE_EXCLUDED ---------------------------------------------------------------------

#[test]
fn pipeline_excluded_on_an_excluded_weekday() {
    let mut sim = Sim::starting_at(at("2026-11-21T15:00:00Z")); // Saturday 10:00 EST
    sim.config(stream(json!({"exclusions": {"days": ["saturday"]}})));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED]);
    let excluded = &sim.events[1];
    assert_eq!(excluded.date.as_deref(), Some("2026-11-21"));
    assert!(
        excluded.detail["reason"].as_str().unwrap().contains("Sat"),
        "{:?}",
        excluded.detail
    );
    assert!(sim.triggers().is_empty());
    assert!(matches!(
        phase(&sim, "gold", "stream/2026-11-21"),
        Phase::Skipped { .. }
    ));

    sim.advance_to(at("2026-11-22T15:00:00Z")); // Sunday runs
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-22");
}

/// Issue 60, item 3: a pipeline switched from cron to sensor-started keeps its dates: the
/// date its cron ran is not started again by the trigger (under `stream`, with new run ids
/// beside the old), only by a rerun.
#[test]
fn a_date_that_ran_under_cron_is_not_started_again_after_a_switch_to_a_trigger() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:59:00Z"));
    let cron = json!({"schedule": {"cron": "0 13 * * *", "timezone": "UTC", "trigger": null}});
    sim.config(stream(cron));
    sim.advance(TimeDelta::minutes(2));
    assert_eq!(sim.triggers().len(), 1, "the cron ran the 22nd");
    sim.config(stream(json!({"schedule": {"timezone": "UTC"}})));
    ready(&mut sim);
    assert_eq!(sim.triggers().len(), 1, "the trigger did not run the 22nd again");
    assert!(!sim.states["gold"]
        .executions
        .contains_key(&"stream/2026-11-22".parse().unwrap()));
    // The next day is the trigger's.
    sim.advance_to(at("2026-11-23T12:00:00Z"));
    ready(&mut sim);
    assert_eq!(sim.triggers().len(), 2);
    assert_eq!(sim.triggers()[1].execution.date_text(), "2026-11-23");
}

/// Interlock's rule, the default: a trigger's exclusions are checked against the day it
/// arrives (in the schedule's zone), not the data date it names.
#[test]
fn a_trigger_on_an_excluded_day_passes_over_its_date_and_a_later_day_starts_it() {
    let mut sim = Sim::starting_at(at("2026-11-21T15:00:00Z")); // Saturday in New York
    sim.config(stream(json!({"exclusions": {"days": ["saturday", "sunday"]}})));
    ready_on(&mut sim, "2026-11-20"); // Friday's data, on Saturday
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED]);
    assert_eq!(sim.events[1].date.as_deref(), Some("2026-11-20"));
    let reason = sim.events[1].detail["reason"].as_str().unwrap();
    assert!(reason.contains("arrived on 2026-11-21"), "{reason}");
    sim.advance(TimeDelta::hours(1));
    ready_on(&mut sim, "2026-11-20"); // told once
    assert_eq!(sim.types().len(), 2);
    assert!(sim.triggers().is_empty());

    sim.advance_to(at("2026-11-23T15:00:00Z")); // Monday
    ready_on(&mut sim, "2026-11-22"); // Sunday's data runs on Monday
    ready_on(&mut sim, "2026-11-20"); // and Friday's, passed over on Saturday, starts now
    let dates: Vec<_> = sim.triggers().iter().map(|t| t.execution.date_text()).collect();
    assert_eq!(dates, ["2026-11-22", "2026-11-20"]);
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, PIPELINE_EXCLUDED, VALIDATION_PASSED, VALIDATION_PASSED]
    );
}

/// An undated reading takes its date in UTC, as Interlock's did, unless the pipeline says
/// `undatedReadings: timezone`.
#[test]
fn an_undated_reading_is_dated_in_utc_unless_the_pipeline_dates_it_in_its_zone() {
    // 21:00 on the 26th in New York is the 27th in UTC.
    for (choice, date) in [
        (None, "2026-11-27"),
        (Some("timezone"), "2026-11-26"),
        (Some("utc"), "2026-11-27"),
    ] {
        let mut sim = Sim::starting_at(at("2026-11-27T02:00:00Z"));
        let patch = match choice {
            Some(c) => json!({"schedule": {"undatedReadings": c}}),
            None => json!({}),
        };
        sim.config(stream(patch));
        ready(&mut sim);
        assert_eq!(sim.triggers()[0].execution.date_text(), date, "{choice:?}");
    }
}

#[test]
fn pipeline_excluded_once_per_date() {
    let mut sim = Sim::starting_at(at("2026-11-21T15:00:00Z"));
    sim.config(stream(json!({"exclusions": {"days": ["saturday"]}})));
    ready(&mut sim);
    sim.advance(TimeDelta::hours(1));
    sim.sensor("gold", "upstream", json!({"status": "ready", "again": true}));
    ready_on(&mut sim, "2026-11-21");
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED]);
    assert!(sim.triggers().is_empty());
}

#[test]
fn pipeline_excluded_on_an_excluded_date() {
    let mut sim = Sim::starting_at(at("2026-11-26T15:00:00Z")); // Thursday
    let by_date = json!({"schedule": {"excludeBy": "dataDate"}, "exclusions": {"dates": ["2026-11-26"]}});
    sim.config(stream(by_date));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED]);
    assert_eq!(sim.events[1].date.as_deref(), Some("2026-11-26"));
    assert!(sim.events[1].detail["reason"]
        .as_str()
        .unwrap()
        .contains("excluded date"));
    // A sensor scoped to another date runs.
    ready_on(&mut sim, "2026-11-27");
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED, VALIDATION_PASSED]);
}

#[test]
fn pipeline_excluded_by_a_resolved_calendar() {
    let mut sim = Sim::starting_at(at("2026-11-22T15:00:00Z")); // Sunday
    let calendar = json!({"name": "us-holidays", "days": ["sunday"], "dates": ["2026-11-26"]});
    sim.config(stream(
        json!({"schedule": {"excludeBy": "dataDate"}, "exclusions": {"calendar": calendar}}),
    ));
    ready(&mut sim); // a calendar weekday
    ready_on(&mut sim, "2026-11-26"); // a calendar date
    ready_on(&mut sim, "2026-11-23"); // Monday
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, PIPELINE_EXCLUDED, PIPELINE_EXCLUDED, VALIDATION_PASSED]
    );
    assert_eq!(
        when(&sim, PIPELINE_EXCLUDED)
            .into_iter()
            .map(|(d, _)| d)
            .collect::<Vec<_>>(),
        ["2026-11-22", "2026-11-26"]
    );
    for e in sim.of(PIPELINE_EXCLUDED) {
        assert!(
            e.detail["reason"].as_str().unwrap().contains("us-holidays"),
            "{:?}",
            e.detail
        );
    }
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-23");
}

#[test]
fn pipeline_excluded_on_weekends_with_the_earlier_designs_schedule_exclude() {
    let mut sim = Sim::starting_at(at("2026-11-21T15:00:00Z"));
    sim.config(stream(json!({"schedule": {"exclude": {"weekends": true}}})));
    ready(&mut sim); // Saturday
    sim.advance_to(at("2026-11-22T15:00:00Z"));
    ready(&mut sim); // Sunday
    sim.advance_to(at("2026-11-23T15:00:00Z"));
    ready(&mut sim); // Monday
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, PIPELINE_EXCLUDED, PIPELINE_EXCLUDED, VALIDATION_PASSED]
    );
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-23");
}

#[test]
fn pipeline_excluded_on_a_cron_tick_of_an_excluded_day_with_no_sla_alert() {
    let mut sim = Sim::starting_at(at("2026-11-20T12:00:00Z")); // Friday 07:00 EST
    sim.config(cron(
        "0 8 * * *",
        json!({"exclusions": {"days": ["saturday"]}, "sla": {"deadline": "10:00", "deadlineDay": "dataDate"}}),
    ));
    sim.advance_to(at("2026-11-22T20:00:00Z"));
    assert_eq!(
        when(&sim, PIPELINE_EXCLUDED),
        [on("2026-11-21", "2026-11-21T13:00:00Z")]
    );
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [
            on("2026-11-20", "2026-11-20T13:00:00Z"),
            on("2026-11-22", "2026-11-22T13:00:00Z"),
        ]
    );
    assert_eq!(
        when(&sim, SLA_BREACH),
        [
            on("2026-11-20", "2026-11-20T15:00:00Z"),
            on("2026-11-22", "2026-11-22T15:00:00Z"),
        ],
        "the dormant Saturday has no SLA"
    );
    assert_eq!(sim.due("daily", &TimerKind::CronTick), Some(at("2026-11-23T13:00:00Z")));
}

#[test]
fn pipeline_excluded_on_a_date_that_is_not_an_inclusion_date() {
    let mut sim = Sim::starting_at(at("2026-11-22T15:00:00Z"));
    sim.config(stream(json!({"schedule": {"include": {"dates": ["2026-11-23"]}}})));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED]);
    assert!(sim.events[1].detail["reason"]
        .as_str()
        .unwrap()
        .contains("not one of the inclusion dates"));
    sim.advance_to(at("2026-11-23T15:00:00Z"));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-23");
}

/// An undated trigger reading that lands after an inclusion date (month-end's "ready" after
/// midnight) counts for that date, as Interlock's MostRecentInclusionDate chose: within 3
/// days, and only while that date's run has not ended.
#[test]
fn an_undated_reading_after_an_inclusion_date_counts_for_it() {
    let month_end = json!({"schedule": {"include": {"dates": ["2026-10-31"]}}});
    let mut sim = Sim::starting_at(at("2026-11-01T04:30:00Z")); // 00:30 in New York
    sim.config(stream(month_end.clone()));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers().len(), 1);
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-10-31");
    sim.job_for("gold", "stream", "2026-10-31", JobStatus::Succeeded);
    // Month-end's run is over: a later undated reading is the day's own, and that day is
    // dormant (no late data, no second run).
    sim.advance_to(at("2026-11-02T15:00:00Z"));
    sim.sensor("gold", "upstream", json!({"status": "ready", "again": true}));
    assert_eq!(sim.of(PIPELINE_EXCLUDED).len(), 1);
    assert!(sim.of(LATE_DATA_ARRIVAL).is_empty());
    assert_eq!(sim.triggers().len(), 1);

    // Four days on, the reading is the day's own.
    let mut sim = Sim::starting_at(at("2026-11-04T15:00:00Z"));
    sim.config(stream(month_end));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, PIPELINE_EXCLUDED]);
    assert!(sim.triggers().is_empty());
}

// ---- Expected starts, recovery, trigger deadline ------------------------------------------------

#[test]
fn schedule_missed_when_nothing_started_by_the_expected_time() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z")); // 07:00 EST
    sim.config(stream(json!({"schedule": {"time": "09:00"}})));
    sim.advance_to(at("2026-11-22T13:59:59Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    sim.advance_to(at("2026-11-22T14:00:00Z"));
    assert_eq!(when(&sim, SCHEDULE_MISSED), [on("2026-11-22", "2026-11-22T14:00:00Z")]);
    assert_eq!(sim.events[1].schedule_id.as_deref(), Some("stream"));
    let next = TimerKind::StartCheck {
        date: "2026-11-23".parse().unwrap(),
    };
    assert_eq!(sim.due("gold", &next), Some(at("2026-11-23T14:00:00Z")));

    // A day whose trigger came before its expected start is not missed.
    sim.advance_to(at("2026-11-23T13:00:00Z"));
    ready(&mut sim);
    sim.advance_to(at("2026-11-23T20:00:00Z"));
    assert_eq!(sim.of(SCHEDULE_MISSED).len(), 1);
}

#[test]
fn schedule_missed_on_the_next_day_even_though_yesterdays_undated_trigger_sensor_still_holds() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"schedule": {"time": "09:00"}})));
    ready(&mut sim);
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Succeeded);
    sim.advance_to(at("2026-11-23T14:00:00Z"));
    // Yesterday's reading started yesterday's run; it is no reason to start today's.
    assert_eq!(when(&sim, SCHEDULE_MISSED), [on("2026-11-23", "2026-11-23T14:00:00Z")]);
    assert!(sim.of(TRIGGER_RECOVERED).is_empty());
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn schedule_missed_is_not_reported_on_an_excluded_day() {
    let mut sim = Sim::starting_at(at("2026-11-21T12:00:00Z")); // Saturday
    sim.config(stream(
        json!({"schedule": {"time": "09:00"}, "exclusions": {"days": ["saturday"]}}),
    ));
    sim.advance_to(at("2026-11-22T15:00:00Z"));
    assert_eq!(when(&sim, SCHEDULE_MISSED), [on("2026-11-22", "2026-11-22T14:00:00Z")]);
}

#[test]
fn irregular_schedule_missed_for_an_inclusion_date_with_no_execution() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    let include = json!({"include": {"dates": ["2026-11-23", "2026-11-25"]}, "time": "09:00"});
    sim.config(stream(json!({ "schedule": include })));
    sim.advance_to(at("2026-11-25T13:00:00Z"));
    ready(&mut sim); // 2026-11-25 starts before its expected start
    sim.advance_to(at("2026-11-27T00:00:00Z"));
    assert_eq!(
        when(&sim, IRREGULAR_SCHEDULE_MISSED),
        [on("2026-11-23", "2026-11-23T14:00:00Z")]
    );
    assert!(sim.of(SCHEDULE_MISSED).is_empty());
    assert!(
        !sim.timers
            .iter()
            .any(|t| matches!(t.kind, TimerKind::StartCheck { .. })),
        "no inclusion date left to check"
    );

    // Without schedule.time, an inclusion date is missed at its end.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"schedule": {"include": {"dates": ["2026-11-23"]}}})));
    sim.advance_to(at("2026-11-25T00:00:00Z"));
    assert_eq!(
        when(&sim, IRREGULAR_SCHEDULE_MISSED),
        [on("2026-11-23", "2026-11-24T05:00:00Z")]
    );
}

#[test]
fn trigger_recovered_when_a_stored_trigger_sensor_satisfies_the_trigger_as_the_config_arrives() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    ready_on(&mut sim, "2026-11-22");
    ready_on(&mut sim, "2026-11-21"); // the past is not recovered
    sim.advance(TimeDelta::minutes(30));
    assert!(sim.events.is_empty());
    sim.config(stream(json!({})));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, TRIGGER_RECOVERED, VALIDATION_PASSED]);
    let recovered = &sim.events[1];
    assert_eq!(recovered.date.as_deref(), Some("2026-11-22"));
    assert_eq!(recovered.detail["sensor"], json!("upstream"));
    assert_eq!(recovered.timestamp, at("2026-11-22T12:30:00Z"));
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn trigger_recovered_at_the_expected_start_check() {
    let mut sim = Sim::starting_at(at("2026-11-22T13:30:00Z")); // 08:30 EST
    let trigger = json!({"key": "upstream", "check": "age_gt", "field": "at", "value": "10m"});
    sim.config(stream(json!({"schedule": {"time": "09:00", "trigger": trigger}})));
    // Too fresh when it arrives at 08:45: the trigger does not hold yet.
    sim.advance_to(at("2026-11-22T13:45:00Z"));
    sim.sensor("gold", "upstream", json!({"at": "2026-11-22T13:45:00Z"}));
    assert!(state(&sim, "gold").executions.is_empty());
    // At the expected start it does: start now rather than report a miss.
    sim.advance_to(at("2026-11-22T14:00:00Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, TRIGGER_RECOVERED, VALIDATION_PASSED]);
    assert_eq!(
        when(&sim, TRIGGER_RECOVERED),
        [on("2026-11-22", "2026-11-22T14:00:00Z")]
    );
    assert!(sim.of(SCHEDULE_MISSED).is_empty());
}

#[test]
fn sensor_deadline_expired_when_no_trigger_arrived_by_the_trigger_deadline() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"schedule": {"trigger": {"deadline": "10:00"}}})));
    sim.advance_to(at("2026-11-22T14:59:59Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    sim.advance_to(at("2026-11-22T15:00:00Z"));
    assert_eq!(
        when(&sim, SENSOR_DEADLINE_EXPIRED),
        [on("2026-11-22", "2026-11-22T15:00:00Z")]
    );
    // A trigger sensor after the deadline starts nothing for that date.
    sim.advance(TimeDelta::minutes(5));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, SENSOR_DEADLINE_EXPIRED]);
    assert!(sim.triggers().is_empty());
    let next = TimerKind::TriggerDeadline {
        date: "2026-11-23".parse().unwrap(),
    };
    assert_eq!(sim.due("gold", &next), Some(at("2026-11-23T15:00:00Z")));

    // The next day's trigger in time runs, and its deadline passes quietly.
    sim.advance_to(at("2026-11-23T14:00:00Z"));
    ready(&mut sim);
    sim.job_for("gold", "stream", "2026-11-23", JobStatus::Running);
    sim.advance_to(at("2026-11-23T16:00:00Z"));
    assert_eq!(
        sim.types(),
        [
            CONFIG_ACCEPTED,
            SENSOR_DEADLINE_EXPIRED,
            VALIDATION_PASSED,
            JOB_TRIGGERED
        ]
    );
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-23");
}

#[test]
fn sensor_deadline_expired_is_not_reported_for_a_day_with_an_hourly_execution() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"schedule": {"trigger": {"deadline": "10:00"}}})));
    let ready = json!({"status": "ready"});
    sim.sensor_scoped("gold", "upstream", ready, Some("2026-11-22"), Some(7), None);
    sim.advance_to(at("2026-11-22T16:00:00Z"));
    assert!(sim.of(SENSOR_DEADLINE_EXPIRED).is_empty(), "{:?}", sim.types());
}

// ---- Forward-only ------------------------------------------------------------------------------

#[test]
fn schedule_missed_sensor_deadline_expired_and_sla_breach_are_not_reported_for_times_before_the_config() {
    let mut sim = Sim::starting_at(at("2026-11-22T16:00:00Z")); // 11:00 EST
    sim.config(stream(json!({
        "schedule": {"time": "09:00", "trigger": {"deadline": "10:00"}},
        "sla": {"deadline": "10:30", "deadlineDay": "dataDate", "expectedDuration": "1h"}
    })));
    sim.advance_to(at("2026-11-23T13:00:00Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED], "nothing about the 22nd");
    sim.advance_to(at("2026-11-23T16:00:00Z"));
    let dates: Vec<_> = sim.events[1..]
        .iter()
        .map(|e| (e.kind, e.date.clone().unwrap()))
        .collect();
    let day = || "2026-11-23".to_string();
    assert_eq!(
        dates,
        [
            (SCHEDULE_MISSED, day()),
            (SLA_WARNING, day()),
            (SENSOR_DEADLINE_EXPIRED, day()),
            (SLA_BREACH, day()),
        ]
    );

    // A cron pipeline accepted after today's occurrence starts tomorrow, without a miss.
    let mut sim = Sim::starting_at(at("2026-11-22T16:00:00Z"));
    sim.config(cron(
        "0 8 * * *",
        json!({"sla": {"deadline": "12:00", "deadlineDay": "dataDate"}}),
    ));
    sim.advance_to(at("2026-11-23T12:00:00Z"));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    assert!(state(&sim, "daily").executions.is_empty());
}

// ---- Absolute SLA --------------------------------------------------------------------------------

fn sla_cron() -> Value {
    cron(
        "0 8 * * *",
        json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate", "expectedDuration": "30m"}}),
    )
}

#[test]
fn sla_warning_at_deadline_minus_expected_duration_and_sla_breach_at_the_deadline() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z")); // 08:00 EST: the run starts
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    assert_eq!(
        sim.due("daily", &warning("cron", "2026-11-22")),
        Some(at("2026-11-22T14:30:00Z"))
    );
    assert_eq!(
        sim.due("daily", &breach("cron", "2026-11-22")),
        Some(at("2026-11-22T15:00:00Z"))
    );
    sim.advance_to(at("2026-11-22T16:00:00Z"));
    assert_eq!(when(&sim, SLA_WARNING), [on("2026-11-22", "2026-11-22T14:30:00Z")]);
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T15:00:00Z")]);
    let breach_event = sim.of(SLA_BREACH)[0];
    assert_eq!(breach_event.detail["deadline"], json!(at("2026-11-22T15:00:00Z")));
    assert_eq!(breach_event.detail["phase"], json!("awaitingJob"));
    assert_eq!(breach_event.run_id.as_deref(), Some("daily.cron.2026-11-22.1"));
    // A late completion is no SLA_MET.
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Succeeded);
    assert!(sim.of(SLA_MET).is_empty());
    sim.assert_timers_agree("daily");
}

#[test]
fn sla_met_when_the_job_completes_before_the_deadline() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T14:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Succeeded);
    assert_eq!(when(&sim, SLA_MET), [on("2026-11-22", "2026-11-22T14:00:00Z")]);
    let met = sim.of(SLA_MET)[0];
    assert_eq!(met.detail["marginSeconds"], json!(3600));
    assert_eq!(met.detail["warned"], json!(false));
    assert_eq!(sim.due("daily", &warning("cron", "2026-11-22")), None);
    // Met, nothing is pending for the date but its expiry: its execution is quiet.
    assert_eq!(sim.due("daily", &breach("cron", "2026-11-22")), None);
    assert!(state(&sim, "daily").live().is_empty());
    sim.advance_to(at("2026-11-22T20:00:00Z"));
    assert!(sim.of(SLA_WARNING).is_empty() && sim.of(SLA_BREACH).is_empty());
    assert_eq!(sim.of(SLA_MET).len(), 1);
    sim.assert_timers_agree("daily");
}

#[test]
fn a_rerun_of_a_date_whose_sla_was_met_is_breached_when_it_runs_past_the_deadline() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    let mut config = sla_cron();
    config["validation"]["rules"] = json!([{"key": "rows", "check": "gte", "field": "count", "value": 1}]);
    sim.config(config);
    sim.sensor("daily", "rows", json!({"count": 1}));
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Succeeded);
    assert_eq!(sim.of(SLA_MET).len(), 1);
    assert_eq!(sim.due("daily", &breach("cron", "2026-11-22")), None);
    // New data, then a rerun: it arms the breach again, at the same deadline.
    sim.advance_to(at("2026-11-22T14:00:00Z"));
    sim.sensor("daily", "rows", json!({"count": 2}));
    sim.rerun("daily", "2026-11-22");
    assert_eq!(sim.of(RERUN_ACCEPTED).len(), 1);
    assert_eq!(
        sim.due("daily", &breach("cron", "2026-11-22")),
        Some(at("2026-11-22T15:00:00Z"))
    );
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T16:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T15:00:00Z")]);
    assert_eq!(sim.of(SLA_MET).len(), 1, "met once, by the first run");
    sim.assert_timers_agree("daily");
}

#[test]
fn sla_met_after_a_warning_and_then_no_breach() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T14:45:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Succeeded);
    sim.advance_to(at("2026-11-22T20:00:00Z"));
    let kinds: Vec<_> = sim
        .types()
        .into_iter()
        .filter(|k| matches!(k, SLA_WARNING | SLA_BREACH | SLA_MET))
        .collect();
    assert_eq!(kinds, [SLA_WARNING, SLA_MET]);
    assert_eq!(sim.of(SLA_MET)[0].detail["warned"], json!(true));
}

#[test]
fn sla_breach_is_never_followed_by_sla_warning() {
    // Both timers overdue when the processor comes back: the warning (due first) fires at or
    // after the deadline and says nothing; the breach does.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.now = at("2026-11-22T15:10:00Z");
    sim.advance_to(sim.now);
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T15:10:00Z")]);
    assert!(sim.of(SLA_WARNING).is_empty());

    // A breach timer delivered before its time says nothing.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.now = at("2026-11-22T14:20:00Z");
    sim.fire_late("daily", &breach("cron", "2026-11-22"));
    assert!(sim.of(SLA_BREACH).is_empty());
    // Both overdue, the breach fires first (the warning timer lost or re-delivered): it
    // cancels the warning, and a warning firing anyway says nothing.
    sim.now = at("2026-11-22T15:05:00Z");
    sim.fire_late("daily", &breach("cron", "2026-11-22"));
    assert_eq!(sim.of(SLA_BREACH).len(), 1);
    assert_eq!(sim.due("daily", &warning("cron", "2026-11-22")), None);
    sim.fire_late("daily", &warning("cron", "2026-11-22"));
    sim.advance_to(at("2026-11-22T20:00:00Z"));
    assert!(sim.of(SLA_WARNING).is_empty());
    assert_eq!(sim.of(SLA_BREACH).len(), 1);
}

#[test]
fn sla_breach_when_no_data_ever_arrives_and_again_the_next_day() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(
        json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate", "expectedDuration": "1h"}}),
    ));
    assert_eq!(
        sim.due("gold", &breach("stream", "2026-11-22")),
        Some(at("2026-11-22T15:00:00Z"))
    );
    sim.advance_to(at("2026-11-23T16:00:00Z"));
    assert_eq!(
        when(&sim, SLA_WARNING),
        [
            on("2026-11-22", "2026-11-22T14:00:00Z"),
            on("2026-11-23", "2026-11-23T14:00:00Z"),
        ]
    );
    assert_eq!(
        when(&sim, SLA_BREACH),
        [
            on("2026-11-22", "2026-11-22T15:00:00Z"),
            on("2026-11-23", "2026-11-23T15:00:00Z"),
        ]
    );
    assert_eq!(sim.of(SLA_BREACH)[0].detail["phase"], json!("notStarted"));
    assert_eq!(
        sim.due("gold", &breach("stream", "2026-11-24")),
        Some(at("2026-11-24T15:00:00Z"))
    );
    sim.assert_timers_agree("gold");
}

#[test]
fn sla_breach_chain_skips_a_day_whose_job_met_its_sla() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate"}})));
    ready(&mut sim);
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Succeeded);
    assert_eq!(sim.of(SLA_MET).len(), 1);
    sim.advance_to(at("2026-11-23T16:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-23", "2026-11-23T15:00:00Z")]);
}

#[test]
fn sla_breach_at_the_hourly_deadline_of_an_hourly_execution() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:05:00Z")); // 07:05 EST
    sim.config(stream(json!({"sla": {"deadline": ":30"}})));
    let hourly = |sim: &mut Sim, hour| {
        sim.sensor_scoped(
            "gold",
            "upstream",
            json!({"status": "ready"}),
            Some("2026-11-22"),
            Some(hour),
            None,
        );
    };
    hourly(&mut sim, 7);
    sim.job_for("gold", "stream", "2026-11-22T07", JobStatus::Running);
    assert_eq!(
        sim.due("gold", &breach("stream", "2026-11-22T07")),
        Some(at("2026-11-22T13:30:00Z")),
        "hour 07 is due at 08:30 local"
    );
    sim.advance_to(at("2026-11-22T13:10:00Z"));
    hourly(&mut sim, 8);
    sim.job_for("gold", "stream", "2026-11-22T08", JobStatus::Succeeded);
    sim.advance_to(at("2026-11-22T14:40:00Z"));
    let of_hours = |kind| -> Vec<(String, DateTime<Utc>)> {
        when(&sim, kind)
            .into_iter()
            .filter(|(d, _)| d == "2026-11-22T07" || d == "2026-11-22T08")
            .collect()
    };
    assert_eq!(of_hours(SLA_BREACH), [on("2026-11-22T07", "2026-11-22T13:30:00Z")]);
    assert_eq!(of_hours(SLA_MET), [on("2026-11-22T08", "2026-11-22T13:10:00Z")]);
    assert_eq!(sim.of(SLA_MET)[0].detail["deadline"], json!(at("2026-11-22T14:30:00Z")));
}

#[test]
fn sla_breach_the_next_morning_for_a_late_evening_cron() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron(
        "0 23 * * *",
        json!({"sla": {"deadline": "02:00", "deadlineDay": "dataDate", "expectedDuration": "1h"}}),
    ));
    sim.advance_to(at("2026-11-23T04:00:00Z")); // 23:00 EST on the 22nd
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [on("2026-11-22", "2026-11-23T04:00:00Z")]
    );
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-23T08:00:00Z"));
    assert_eq!(when(&sim, SLA_WARNING), [on("2026-11-22", "2026-11-23T06:00:00Z")]);
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-23T07:00:00Z")]);
}

#[test]
fn sla_breach_at_the_deadline_in_the_schedules_timezone() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate"}})));
    sim.advance_to(at("2026-11-22T14:59:00Z"));
    assert!(sim.of(SLA_BREACH).is_empty(), "10:00 is New York time, not UTC");
    sim.advance_to(at("2026-11-22T15:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T15:00:00Z")]);

    // sla.timezone, when given, overrides the schedule's.
    let mut sim = Sim::starting_at(at("2026-11-22T06:00:00Z"));
    sim.config(stream(
        json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate", "timezone": "Europe/London"}}),
    ));
    sim.advance_to(at("2026-11-22T10:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T10:00:00Z")]);
}

#[test]
fn sla_breach_at_the_local_deadline_across_both_dst_changes() {
    let mut sim = Sim::starting_at(at("2026-03-07T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate"}})));
    sim.advance_to(at("2026-03-09T16:00:00Z"));
    assert_eq!(
        when(&sim, SLA_BREACH),
        [
            on("2026-03-07", "2026-03-07T15:00:00Z"),
            on("2026-03-08", "2026-03-08T14:00:00Z"),
            on("2026-03-09", "2026-03-09T14:00:00Z"),
        ]
    );

    let mut sim = Sim::starting_at(at("2026-10-31T11:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-01T16:00:00Z"));
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [
            on("2026-10-31", "2026-10-31T12:00:00Z"),
            on("2026-11-01", "2026-11-01T13:00:00Z"),
        ]
    );
    assert_eq!(
        when(&sim, SLA_WARNING),
        [
            on("2026-10-31", "2026-10-31T13:30:00Z"),
            on("2026-11-01", "2026-11-01T14:30:00Z"),
        ]
    );
    assert_eq!(
        when(&sim, SLA_BREACH),
        [
            on("2026-10-31", "2026-10-31T14:00:00Z"),
            on("2026-11-01", "2026-11-01T15:00:00Z"),
        ]
    );
}

// ---- Relative SLA ----------------------------------------------------------------------------

#[test]
fn relative_sla_warning_and_relative_sla_breach_measured_from_the_first_sensor() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({
        "sla": {"maxDuration": "2h", "expectedDuration": "30m"},
        "validation": {"rules": [{"key": "row-count", "check": "gte", "field": "count", "value": 1000}]}
    })));
    ready(&mut sim); // the first sensor opens the execution; the rules still wait
    sim.advance_to(at("2026-11-22T12:40:00Z"));
    sim.sensor("gold", "row-count", json!({"count": 5000}));
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T15:00:00Z"));
    assert_eq!(
        when(&sim, RELATIVE_SLA_WARNING),
        [on("2026-11-22", "2026-11-22T13:30:00Z")]
    );
    assert_eq!(
        when(&sim, RELATIVE_SLA_BREACH),
        [on("2026-11-22", "2026-11-22T14:00:00Z")]
    );
    let breach = sim.of(RELATIVE_SLA_BREACH)[0];
    assert_eq!(breach.detail["firstSensorAt"], json!(at("2026-11-22T12:00:00Z")));
    assert_eq!(breach.detail["elapsedSeconds"], json!(7200));
}

#[test]
fn relative_sla_breach_is_not_reported_after_the_job_completed() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"maxDuration": "2h"}})));
    ready(&mut sim);
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T13:45:00Z"));
    assert_eq!(
        when(&sim, RELATIVE_SLA_WARNING),
        [on("2026-11-22", "2026-11-22T13:30:00Z")],
        "without expectedDuration the warning is at three quarters"
    );
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Succeeded);
    sim.advance_to(at("2026-11-22T18:00:00Z"));
    assert!(sim.of(RELATIVE_SLA_BREACH).is_empty());
}

// ---- Config changes mid-execution --------------------------------------------------------------

#[test]
fn validation_passed_at_the_next_evaluation_after_a_lowered_threshold() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    let rules = |min: u32| json!({"validation": {"rules": [{"key": "row-count", "check": "gte", "field": "count", "value": min}]}});
    sim.config(stream(rules(1000)));
    sim.sensor("gold", "row-count", json!({"count": 500}));
    ready(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    sim.advance_to(at("2026-11-22T12:02:00Z"));
    sim.config(stream(rules(100)));
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, CONFIG_ACCEPTED],
        "applies at the next evaluation"
    );
    sim.advance_to(at("2026-11-22T12:05:00Z"));
    assert_eq!(
        when(&sim, VALIDATION_PASSED),
        [on("2026-11-22", "2026-11-22T12:05:00Z")]
    );
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn sla_breach_moves_with_a_changed_deadline_and_leaves_no_timer_behind() {
    // A cron execution in flight.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T13:30:00Z"));
    sim.config(cron(
        "0 8 * * *",
        json!({"sla": {"deadline": "11:00", "deadlineDay": "dataDate", "expectedDuration": "30m"}}),
    ));
    assert_eq!(
        sla_timers(&sim, "daily"),
        [
            (warning("cron", "2026-11-22"), at("2026-11-22T15:30:00Z")),
            (breach("cron", "2026-11-22"), at("2026-11-22T16:00:00Z")),
        ]
    );
    sim.assert_timers_agree("daily");
    sim.advance_to(at("2026-11-22T17:00:00Z"));
    assert_eq!(when(&sim, SLA_WARNING), [on("2026-11-22", "2026-11-22T15:30:00Z")]);
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T16:00:00Z")]);

    // A sensor-driven pipeline with no data yet: its chain moves.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate"}})));
    sim.config(stream(json!({"sla": {"deadline": "11:00", "deadlineDay": "dataDate"}})));
    assert_eq!(
        sla_timers(&sim, "gold"),
        [(breach("stream", "2026-11-22"), at("2026-11-22T16:00:00Z"))]
    );
    sim.assert_timers_agree("gold");
    sim.advance_to(at("2026-11-22T17:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22", "2026-11-22T16:00:00Z")]);
}

#[test]
fn no_sla_breach_for_a_failed_run_even_after_a_config_change() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(sla_cron());
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Failed);
    assert!(matches!(phase(&sim, "daily", "cron/2026-11-22"), Phase::Failed { .. }));
    sim.advance_to(at("2026-11-22T13:30:00Z"));
    let mut changed = sla_cron();
    changed["pipeline"]["description"] = json!("now with a description");
    sim.config(changed);
    sim.assert_timers_agree("daily");
    sim.advance_to(at("2026-11-22T16:00:00Z"));
    // The failure was the alert (as Interlock cancelled its SLA schedules); a config change
    // re-arms nothing for it.
    assert!(when(&sim, SLA_BREACH).is_empty(), "{:?}", sim.types());
    assert!(sim.types().contains(&RETRY_EXHAUSTED));
}

#[test]
fn sla_timers_are_cancelled_when_the_sla_is_removed() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    let sla = json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate", "expectedDuration": "30m", "maxDuration": "2h"}});
    sim.config(stream(sla));
    ready(&mut sim);
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Running);
    assert_eq!(sla_timers(&sim, "gold").len(), 4);
    sim.config(stream(json!({})));
    assert!(sla_timers(&sim, "gold").is_empty());
    sim.assert_timers_agree("gold");
    sim.advance_to(at("2026-11-24T00:00:00Z"));
    let kinds = sim.types();
    for kind in [SLA_WARNING, SLA_BREACH, RELATIVE_SLA_WARNING, RELATIVE_SLA_BREACH] {
        assert!(!kinds.contains(&kind), "{kinds:?}");
    }
}

#[test]
fn config_accepted_for_a_delete_cancels_every_timer() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron(
        "0 8 * * *",
        json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate", "expectedDuration": "30m"}}),
    ));
    sim.config(stream(json!({
        "schedule": {"time": "09:00", "trigger": {"deadline": "10:30"}},
        "sla": {"deadline": "11:00", "deadlineDay": "dataDate", "maxDuration": "2h"},
        "validation": {"rules": [{"key": "row-count", "check": "exists"}]}
    })));
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    ready(&mut sim); // an execution waiting for its rules
    sim.assert_timers_agree("gold");
    sim.assert_timers_agree("daily");
    let pending = |sim: &Sim, p: &str| sim.timers.iter().filter(|t| t.pipeline == p).count();
    assert!(pending(&sim, "gold") >= 6, "{:?}", sim.timers);
    assert!(pending(&sim, "daily") >= 4, "{:?}", sim.timers);

    sim.delete("gold");
    sim.delete("daily");
    assert_eq!(sim.events.last().unwrap().kind, CONFIG_ACCEPTED);
    assert_eq!(sim.events.last().unwrap().detail["deleted"], json!(true));
    // What never triggered goes with its timers; the date that did is kept, with nothing
    // pending but its expiry (so a config applied again does not run it twice).
    assert!(!sim.states.contains_key("gold"));
    assert!(
        sim.timers
            .iter()
            .all(|t| t.pipeline == "daily" && matches!(t.kind, TimerKind::Expire { .. })),
        "{:?}",
        sim.timers
    );
    sim.assert_timers_agree("daily");
    let before = sim.events.len();
    sim.advance_to(at("2026-11-25T00:00:00Z"));
    assert_eq!(sim.events.len(), before);
    sim.advance_to(at("2026-12-01T00:00:00Z"));
    assert!(sim.states.is_empty() && sim.timers.is_empty(), "{:?}", sim.timers);
    assert_eq!(sim.events.len(), before, "expiry says nothing");
}

#[test]
fn relative_sla_breach_of_a_recovered_run_counts_from_its_trigger_sensor() {
    let mut sim = Sim::starting_at(at("2026-11-22T14:00:00Z"));
    ready(&mut sim);
    sim.now = at("2026-11-22T14:30:00Z");
    sim.config(stream(json!({
        "sla": {"maxDuration": "2h"},
        "validation": {"rules": [{"key": "never", "check": "exists"}]}
    })));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, TRIGGER_RECOVERED]);
    let breach = TimerKind::RelativeSlaBreach {
        execution: crate::core::execution::id("stream", "2026-11-22"),
    };
    assert_eq!(
        sim.due("gold", &breach),
        Some(at("2026-11-22T16:00:00Z")),
        "two hours after the sensor arrived, not after the config"
    );
}

#[test]
fn sla_breach_of_a_daily_deadline_over_hourly_runs_names_the_hour_that_did_not_complete() {
    // Every hour that ran completed before the deadline: the day's SLA is met.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate"}})));
    for hour in [7, 8] {
        let data = json!({"status": "ready"});
        sim.sensor_scoped("gold", "upstream", data, Some("2026-11-22"), Some(hour), None);
        let date = format!("2026-11-22T{hour:02}");
        sim.job_for("gold", "stream", &date, JobStatus::Succeeded);
    }
    sim.advance_to(at("2026-11-22T16:00:00Z"));
    assert!(sim.of(SLA_BREACH).is_empty(), "{:?}", sim.types());

    // One hour still running at the deadline: that hour breaches, not the day as well.
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "10:00", "deadlineDay": "dataDate"}})));
    for hour in [7, 8] {
        let data = json!({"status": "ready"});
        sim.sensor_scoped("gold", "upstream", data, Some("2026-11-22"), Some(hour), None);
    }
    sim.job_for("gold", "stream", "2026-11-22T07", JobStatus::Succeeded);
    sim.advance_to(at("2026-11-22T16:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-22T08", "2026-11-22T15:00:00Z")]);
}

#[test]
fn sensor_deadline_expired_each_hour_with_an_hourly_trigger_deadline() {
    // 12:10 EST. Hour 12's window closes at 13:15; a trigger for hour 12 arrives in time.
    let mut sim = Sim::starting_at(at("2026-11-22T17:10:00Z"));
    sim.config(stream(json!({"schedule": {"trigger": {"deadline": ":15"}}})));
    let first = TimerKind::TriggerDeadline {
        date: "2026-11-22T11".parse().unwrap(),
    };
    assert_eq!(
        sim.due("gold", &first),
        Some(at("2026-11-22T17:15:00Z")),
        "hour 11 closes at 12:15"
    );
    sim.sensor_scoped(
        "gold",
        "upstream",
        json!({"status": "ready"}),
        Some("2026-11-22"),
        Some(12),
        None,
    );
    sim.advance_to(at("2026-11-22T19:20:00Z"));
    // Hour 11 and hour 13 had no trigger; hour 12 did.
    assert_eq!(
        when(&sim, SENSOR_DEADLINE_EXPIRED),
        [
            on("2026-11-22T11", "2026-11-22T17:15:00Z"),
            on("2026-11-22T13", "2026-11-22T19:15:00Z"),
        ]
    );
    sim.assert_timers_agree("gold");
}

// Sensor-driven daily pipelines measure an `HH:MM` deadline on the day after the data date,
// as the earlier design's watchdog did (interlock internal/lambda/watchdog/sla.go).

#[test]
fn sla_met_the_next_morning_for_a_sensor_driven_daily_pipeline() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z")); // 07:00 EST
    sim.config(stream(json!({"sla": {"deadline": "02:00", "expectedDuration": "1h"}})));
    assert_eq!(
        sim.due("gold", &breach("stream", "2026-11-22")),
        Some(at("2026-11-23T07:00:00Z")),
        "data for the 22nd is due by 02:00 EST on the 23rd"
    );
    sim.advance_to(at("2026-11-23T03:00:00Z")); // 22:00 EST on the 22nd
    ready_on(&mut sim, "2026-11-22");
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-23T05:00:00Z"));
    sim.job_for("gold", "stream", "2026-11-22", JobStatus::Succeeded);
    sim.advance_to(at("2026-11-23T08:00:00Z"));
    assert_eq!(
        when(&sim, SLA_MET),
        [on("2026-11-22", "2026-11-23T05:00:00Z")],
        "{:?}",
        sim.types()
    );
    assert_eq!(sim.of(SLA_MET)[0].detail["deadline"], json!(at("2026-11-23T07:00:00Z")));
    assert!(sim.of(SLA_WARNING).is_empty(), "{:?}", sim.of(SLA_WARNING));
    assert!(sim.of(SLA_BREACH).is_empty(), "{:?}", sim.of(SLA_BREACH));
    sim.assert_timers_agree("gold");
}

#[test]
fn sla_breach_the_next_morning_when_a_sensor_driven_day_never_completes() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "02:00", "expectedDuration": "1h"}})));
    sim.advance_to(at("2026-11-24T08:00:00Z"));
    assert_eq!(
        when(&sim, SLA_WARNING),
        [
            on("2026-11-22", "2026-11-23T06:00:00Z"),
            on("2026-11-23", "2026-11-24T06:00:00Z"),
        ]
    );
    assert_eq!(
        when(&sim, SLA_BREACH),
        [
            on("2026-11-22", "2026-11-23T07:00:00Z"),
            on("2026-11-23", "2026-11-24T07:00:00Z"),
        ],
        "the 21st's deadline (02:00 on the 22nd) had passed before the config arrived"
    );
}

#[test]
fn sla_breach_of_a_next_day_deadline_follows_the_data_dates_exclusions() {
    // 2026-11-21 is a Saturday: its data is not produced, so nothing is due on Sunday; Friday's
    // data is still due on Saturday morning.
    let mut sim = Sim::starting_at(at("2026-11-20T12:00:00Z"));
    sim.config(stream(json!({
        "sla": {"deadline": "02:00"},
        "exclusions": {"days": ["saturday"]}
    })));
    sim.advance_to(at("2026-11-22T08:00:00Z"));
    assert_eq!(when(&sim, SLA_BREACH), [on("2026-11-20", "2026-11-21T07:00:00Z")]);
}

#[test]
fn sla_deadline_day_data_date_keeps_a_sensor_driven_deadline_on_its_own_day() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"sla": {"deadline": "17:00", "deadlineDay": "dataDate"}})));
    assert_eq!(
        sim.due("gold", &breach("stream", "2026-11-22")),
        Some(at("2026-11-22T22:00:00Z"))
    );
    sim.config(stream(json!({"sla": {"deadline": "17:00"}})));
    assert_eq!(
        sim.due("gold", &breach("stream", "2026-11-21")),
        Some(at("2026-11-22T22:00:00Z")),
        "by default the 21st's data is due at 17:00 on the 22nd"
    );
}

#[test]
fn rerun_accepted_after_sensor_deadline_expired_runs_the_date_with_a_fresh_window() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(stream(json!({"schedule": {"trigger": {"deadline": "10:00"}}})));
    sim.advance_to(at("2026-11-22T15:00:00Z"));
    let expired = sim.of(SENSOR_DEADLINE_EXPIRED)[0].clone();
    assert!(expired.message.contains("rerun to restart it"), "{}", expired.message);
    assert_eq!(expired.detail["rerunCommand"], json!("sluice rerun gold 2026-11-22"));
    sim.advance(TimeDelta::minutes(30));
    ready_on(&mut sim, "2026-11-22");
    assert!(sim.triggers().is_empty(), "the closed window starts nothing by itself");
    sim.rerun("gold", "2026-11-22");
    assert_eq!(
        sim.types(),
        [
            CONFIG_ACCEPTED,
            SENSOR_DEADLINE_EXPIRED,
            RERUN_ACCEPTED,
            VALIDATION_PASSED
        ]
    );
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-22");
    let run = &sim.states["gold"].executions["stream/2026-11-22"];
    assert_eq!(run.window_closes_at, sim.now + TimeDelta::hours(1));
    assert_eq!(run.manual_reruns_used, 1);
}

// A pipeline with both `cron` and `trigger`: the trigger starts the day's execution at any
// time; the cron time reports SCHEDULE_MISSED when nothing started (the earlier design).

fn cron_with_trigger() -> Value {
    cron(
        "0 8 * * *",
        json!({"schedule": {"trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"}}}),
    )
}

#[test]
fn schedule_missed_at_the_cron_time_when_the_trigger_has_not_started_the_day() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z")); // 07:00 EST
    sim.config(cron_with_trigger());
    sim.advance_to(at("2026-11-22T13:00:00Z")); // 08:00 EST
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, SCHEDULE_MISSED]);
    assert_eq!(when(&sim, SCHEDULE_MISSED), [on("2026-11-22", "2026-11-22T13:00:00Z")]);
    assert!(sim.triggers().is_empty(), "the cron time starts nothing by itself");
    // The trigger still starts the day, late.
    sim.advance_to(at("2026-11-22T14:00:00Z"));
    sim.sensor("daily", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, SCHEDULE_MISSED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-22");
    assert_eq!(sim.triggers()[0].execution.schedule(), "cron");
}

#[test]
fn validation_passed_when_the_trigger_starts_a_cron_pipeline_before_its_cron_time() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:00:00Z"));
    sim.config(cron_with_trigger());
    sim.advance_to(at("2026-11-22T12:30:00Z"));
    sim.sensor("daily", "upstream", json!({"status": "ready"}));
    sim.job_for("daily", "cron", "2026-11-22", JobStatus::Running);
    sim.advance_to(at("2026-11-22T14:00:00Z"));
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED],
        "nothing is missed, and the cron time opens no second execution"
    );
    assert_eq!(sim.states["daily"].executions.len(), 1);
}

#[test]
fn relative_sla_breach_of_a_cron_trigger_is_measured_from_the_cron_start() {
    let mut sim = Sim::starting_at(at("2026-11-22T12:10:00Z"));
    sim.config(cron(
        "0 * * * *",
        json!({
            "schedule": {"cron": null, "trigger": {"type": "cron", "expression": "0 * * * *"}},
            "sla": {"maxDuration": "30m"}
        }),
    ));
    sim.advance_to(at("2026-11-22T13:00:00Z"));
    sim.job_for("daily", "cron", "2026-11-22T08", JobStatus::Running);
    sim.advance_to(at("2026-11-22T13:45:00Z"));
    assert_eq!(
        when(&sim, RELATIVE_SLA_BREACH),
        [on("2026-11-22T08", "2026-11-22T13:30:00Z")]
    );
}
