//! SLA_AT_RISK and SLA_RECOVERED on a simulated clock: forecasts made from the pipeline's
//! own run history, before the trigger and while the job runs.
//!
//! Schedules are in America/New_York (EST, UTC-5, in November): 07:00 local is 12:00Z.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};

use super::schedule_and_sla::{cron, on, stream, when};
use super::{at, Sim};
use crate::core::events::EventType::*;
use crate::core::lifecycle::Input;
use crate::core::records::{CommandKind, CommandRecord, JobStatus};

/// Day `day` of November 2026 at `time` (UTC).
fn nov(day: u32, time: &str) -> DateTime<Utc> {
    at(&format!("2026-11-{day:02}T{time}Z"))
}

fn date(day: u32) -> String {
    format!("2026-11-{day:02}")
}

/// One day of the sensor-driven `gold`: its trigger arrives at `start`, the job runs for
/// `minutes` and succeeds.
fn stream_run(sim: &mut Sim, day: u32, start: DateTime<Utc>, minutes: i64) {
    sim.advance_to(start);
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.job_for("gold", "stream", &date(day), JobStatus::Running);
    sim.advance(TimeDelta::minutes(minutes));
    sim.job_for("gold", "stream", &date(day), JobStatus::Succeeded);
}

/// One day of the cron pipeline `daily` (08:00 local): the job starts at once and runs for
/// `minutes`.
fn cron_run(sim: &mut Sim, day: u32, minutes: i64) {
    sim.advance_to(nov(day, "13:00:00"));
    sim.job_for("daily", "cron", &date(day), JobStatus::Running);
    sim.advance(TimeDelta::minutes(minutes));
    sim.job_for("daily", "cron", &date(day), JobStatus::Succeeded);
}

fn sla(deadline: &str, more: Value) -> Value {
    let mut sla = json!({"deadline": deadline, "deadlineDay": "dataDate"});
    super::merge(&mut sla, more);
    json!({"sla": sla})
}

#[test]
fn sla_at_risk_when_no_trigger_came_by_the_deadline_minus_the_p90_duration() {
    let mut sim = Sim::starting_at(nov(16, "11:00:00"));
    sim.config(stream(sla("10:00", json!({}))));
    // Four days on record, triggered at 07:00 local and done in 30 minutes.
    for day in 16..=19 {
        stream_run(&mut sim, day, nov(day, "12:00:00"), 30);
    }
    // The 20th's trigger is late, but four runs are too few to forecast (minRuns 5).
    sim.advance_to(nov(20, "15:30:00"));
    assert!(sim.of(SLA_AT_RISK).is_empty());
    assert_eq!(when(&sim, SLA_BREACH), [on(&date(20), "2026-11-20T15:00:00Z")]);
    stream_run(&mut sim, 20, nov(20, "16:00:00"), 30);
    assert_eq!(sim.states["gold"].history.len(), 5);

    // The 21st: usually triggered at 07:00 (the median), 9 in 10 runs take 30 minutes or
    // less, so with no trigger by 09:30:01 it can no longer make 10:00.
    sim.advance_to(nov(21, "14:30:00"));
    assert!(sim.of(SLA_AT_RISK).is_empty(), "{:?}", sim.types());
    sim.advance_to(nov(21, "16:00:00"));
    assert_eq!(when(&sim, SLA_AT_RISK), [on(&date(21), "2026-11-21T14:30:01Z")]);
    let risk = sim.of(SLA_AT_RISK)[0];
    assert_eq!(risk.detail["projectedCompletion"], json!(nov(21, "15:00:01")));
    assert_eq!(risk.detail["deadline"], json!(nov(21, "15:00:00")));
    assert_eq!(risk.detail["marginSeconds"], json!(-1));
    assert_eq!(risk.detail["basis"], json!("usualTrigger"));
    assert_eq!(risk.detail["runs"], json!(5));
    assert_eq!(risk.detail["p90DurationSeconds"], json!(1800));
    assert_eq!(risk.detail["usualTriggerAt"], json!(nov(21, "12:00:00")));
    assert_eq!(risk.detail["waitingFor"], json!(["upstream"]));
    assert!(risk.message.contains("no trigger yet"), "{}", risk.message);
    // The breach follows; nothing recovered, nothing repeated.
    assert_eq!(when(&sim, SLA_BREACH)[1], on(&date(21), "2026-11-21T15:00:00Z"));
    assert!(sim.of(SLA_RECOVERED).is_empty());
    sim.assert_timers_agree("gold");
}

#[test]
fn sla_at_risk_is_not_forecast_when_switched_off() {
    let mut sim = Sim::starting_at(nov(16, "11:00:00"));
    sim.config(stream(sla("10:00", json!({"forecast": false}))));
    for day in 16..=20 {
        stream_run(&mut sim, day, nov(day, "12:00:00"), 30);
    }
    sim.advance_to(nov(21, "16:00:00"));
    assert!(sim.of(SLA_AT_RISK).is_empty());
    assert_eq!(when(&sim, SLA_BREACH), [on(&date(21), "2026-11-21T15:00:00Z")]);
    assert_eq!(sim.states["gold"].history.len(), 5, "the history is kept all the same");
}

#[test]
fn sla_at_risk_while_running_once_the_run_outlasts_the_usual_ones() {
    let mut sim = Sim::starting_at(nov(11, "12:00:00"));
    sim.config(cron("0 8 * * *", sla("10:00", json!({"forecast": {"minRuns": 10}}))));
    // Ten days: nine of 30 minutes, one of 150.
    for day in 11..=20 {
        cron_run(&mut sim, day, if day == 15 { 150 } else { 30 });
    }
    assert!(sim.of(SLA_AT_RISK).is_empty(), "none of them was at risk when it ran");
    // The 21st starts at 13:00Z: 9 in 10 runs were done in 30 minutes, so it projects
    // 13:30Z. Past 30 minutes only the 150-minute run is like it: 15:30Z, after 15:00Z.
    sim.advance_to(nov(21, "13:00:00"));
    sim.job_for("daily", "cron", &date(21), JobStatus::Running);
    sim.advance_to(nov(21, "13:30:00"));
    assert!(sim.of(SLA_AT_RISK).is_empty());
    sim.advance_to(nov(21, "13:45:00"));
    assert_eq!(when(&sim, SLA_AT_RISK), [on(&date(21), "2026-11-21T13:30:01Z")]);
    let risk = sim.of(SLA_AT_RISK)[0];
    assert_eq!(risk.detail["basis"], json!("running"));
    assert_eq!(risk.detail["projectedCompletion"], json!(nov(21, "15:30:00")));
    assert_eq!(risk.detail["runs"], json!(1));
    assert_eq!(risk.detail["elapsedSeconds"], json!(1801));
    assert_eq!(risk.detail["waitingFor"], json!([]));
    assert_eq!(risk.run_id.as_deref(), Some("daily.cron.2026-11-21.1"));
    // It finishes in time after all: SLA_MET says it was at risk, and nothing else follows.
    sim.job_for("daily", "cron", &date(21), JobStatus::Succeeded);
    assert_eq!(sim.of(SLA_MET).last().unwrap().detail["atRisk"], json!(true));
    sim.advance_to(nov(21, "20:00:00"));
    assert_eq!(sim.of(SLA_AT_RISK).len(), 1);
    assert!(sim.of(SLA_RECOVERED).is_empty());
    assert_eq!(
        when(&sim, SLA_BREACH),
        [on(&date(15), "2026-11-15T15:00:00Z")],
        "the slow day's only"
    );
    sim.assert_timers_agree("daily");
}

#[test]
fn sla_recovered_when_the_trigger_comes_early_enough() {
    let mut sim = Sim::starting_at(nov(16, "11:00:00"));
    // A 07:20 deadline, and a trigger that usually comes at 07:00 for a 30-minute job.
    sim.config(stream(sla("07:20", json!({}))));
    for day in 16..=19 {
        stream_run(&mut sim, day, nov(day, "12:00:00"), 30);
    }
    assert!(sim.of(SLA_AT_RISK).is_empty(), "fewer than five runs: no forecast");
    // The fifth run completing is what makes the 21st forecastable: at risk at once.
    stream_run(&mut sim, 20, nov(20, "12:00:00"), 30);
    assert_eq!(when(&sim, SLA_AT_RISK), [on(&date(21), "2026-11-20T12:30:00Z")]);
    assert_eq!(
        sim.of(SLA_AT_RISK)[0].detail["projectedCompletion"],
        json!(nov(21, "12:30:00"))
    );
    // The trigger comes at 06:40 local: done by 07:10 projected, before 07:20.
    sim.advance_to(nov(21, "11:40:00"));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert!(sim.of(SLA_RECOVERED).is_empty(), "not before the job runs");
    sim.job_for("gold", "stream", &date(21), JobStatus::Running);
    assert_eq!(when(&sim, SLA_RECOVERED), [on(&date(21), "2026-11-21T11:40:00Z")]);
    let recovered = sim.of(SLA_RECOVERED)[0];
    assert_eq!(recovered.detail["basis"], json!("running"));
    assert_eq!(recovered.detail["projectedCompletion"], json!(nov(21, "12:10:00")));
    assert_eq!(recovered.detail["marginSeconds"], json!(600));
    sim.advance_to(nov(21, "12:05:00"));
    sim.job_for("gold", "stream", &date(21), JobStatus::Succeeded);
    assert_eq!(sim.of(SLA_MET).last().unwrap().detail["atRisk"], json!(true));
    assert_eq!((sim.of(SLA_AT_RISK).len(), sim.of(SLA_RECOVERED).len()), (1, 1));
    sim.assert_timers_agree("gold");
}

#[test]
fn run_history_keeps_each_dates_first_success_measured_from_its_first_trigger() {
    let mut sim = Sim::starting_at(nov(16, "11:00:00"));
    let mut config = stream(json!({}));
    config["job"]["maxRetries"] = json!(1);
    sim.config(config);
    // The first attempt fails after 10 minutes, the retry succeeds 20 minutes later.
    sim.advance_to(nov(16, "12:00:00"));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.job_for("gold", "stream", &date(16), JobStatus::Running);
    sim.advance(TimeDelta::minutes(10));
    sim.job_for("gold", "stream", &date(16), JobStatus::Failed);
    sim.job_for("gold", "stream", &date(16), JobStatus::Running);
    sim.advance(TimeDelta::minutes(20));
    sim.job_for("gold", "stream", &date(16), JobStatus::Succeeded);
    let runs = &sim.states["gold"].history.runs;
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].date.to_string(), runs[0].triggered_after, runs[0].duration),
        ("2026-11-16".to_string(), 7 * 3600, 1800)
    );
    // A rerun of the same date (its data changed) adds nothing.
    sim.sensor("gold", "upstream", json!({"status": "ready", "version": 2}));
    let rerun = CommandRecord {
        pipeline_id: "gold".into(),
        command: CommandKind::Rerun,
        schedule_id: None,
        date: date(16),
        reason: None,
        requested_by: None,
        subscriber: None,
        key: None,
        force: false,
        backfill: false,
    };
    sim.input("gold", Input::CommandReceived(rerun.parse().unwrap()));
    assert_eq!(sim.of(RERUN_ACCEPTED).len(), 1, "{:?}", sim.types());
    sim.job_for("gold", "stream", &date(16), JobStatus::Succeeded);
    assert_eq!(sim.states["gold"].history.len(), 1);
}
