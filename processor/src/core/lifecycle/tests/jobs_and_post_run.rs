//! Jobs, retries, stale runs, commands, late data, post-run watching, dry runs, clock skew,
//! hourly executions and `dependsOn`, on a simulated clock. Each test is named after the
//! event it is about.
//!
//! The clock starts at 2026-11-22T08:00Z (a Sunday); every schedule here is in UTC.

use chrono::TimeDelta;
use serde_json::{json, Value};

use super::{merge, t0, Sim};
use crate::core::events::{Event, EventType, EventType::*};
use crate::core::lifecycle::{Decision, Effect, Execution, Input, Outbound, OutboundTopic, Phase, StateChange};
use crate::core::records::{
    decode_command, decode_sensor, CommandKind, CommandRecord, FailureCategory, JobRecord, JobStatus, Rejection,
};
use crate::core::timers::TimerKind;

const DAY: &str = "2026-11-22";
const KEY: &str = "stream/2026-11-22";
const RUN1: &str = "gold.stream.2026-11-22.1";
const RUN2: &str = "gold.stream.2026-11-22.2";
const RUN3: &str = "gold.stream.2026-11-22.3";

/// Pipeline `gold`: the trigger `upstream` (status ready) starts it and `row-count` >= 1000
/// lets it run. No retries unless the patch gives some.
fn gold(patch: Value) -> Value {
    let mut config = json!({
        "pipeline": {"id": "gold", "owner": "analytics"},
        "schedule": {
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            "evaluation": {"window": "1h", "interval": "5m"}
        },
        "validation": {"trigger": "ALL", "rules": [
            {"key": "row-count", "check": "gte", "field": "count", "value": 1000}
        ]},
        "job": {
            "type": "command",
            "config": {"command": "run ${DATE}"},
            "maxRetries": 0,
            "maxCodeRetries": 0
        }
    });
    merge(&mut config, patch);
    config
}

/// `gold` with post-run checks: sensor `quality` must have status ok; drift is measured on
/// its `count`.
fn gold_post_run(patch: Value) -> Value {
    let mut config = gold(json!({"postRun": {
        "rules": [{"key": "quality", "check": "equals", "field": "status", "value": "ok"}],
        "driftField": "count",
        "driftThreshold": 10,
        "sensorTimeout": "2h"
    }}));
    merge(&mut config, patch);
    config
}

/// Satisfies `gold`'s rules and trigger: the first attempt is requested.
fn start(sim: &mut Sim) {
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
}

/// Starts `gold` and runs its first attempt to success.
fn succeed(sim: &mut Sim) {
    start(sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
}

fn execution<'s>(sim: &'s Sim, pipeline: &str, key: &str) -> &'s Execution {
    &sim.states[pipeline].executions[key]
}

fn gold_run(sim: &Sim) -> &Execution {
    execution(sim, "gold", KEY)
}

/// The event types published after the first `from`.
fn since(sim: &Sim, from: usize) -> Vec<EventType> {
    sim.events[from..].iter().map(|e| e.kind).collect()
}

fn last(sim: &Sim, kind: EventType) -> &Event {
    sim.events
        .iter()
        .rev()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("no {kind:?} in {:?}", sim.types()))
}

fn run_ids(sim: &Sim) -> Vec<&str> {
    sim.triggers().iter().map(|t| t.run_id.as_str()).collect()
}

/// A job report for any pipeline and execution date.
fn report(sim: &mut Sim, pipeline: &str, date: &str, run_id: &str, status: JobStatus) -> Decision {
    let record = JobRecord {
        pipeline_id: pipeline.into(),
        schedule_id: "stream".into(),
        date: date.into(),
        run_id: run_id.into(),
        status,
        failure_category: None,
        message: None,
        metadata: None,
        timestamp: sim.now,
    };
    sim.input(pipeline, Input::JobReported(record.parse().unwrap()))
}

/// Reports the current run of `pipeline`'s execution on `date` as started then succeeded,
/// and routes whatever it publishes.
fn complete(sim: &mut Sim, pipeline: &str, date: &str) -> Vec<Outbound> {
    let run_id = execution(sim, pipeline, &format!("stream/{date}"))
        .phase
        .run_id()
        .unwrap_or_else(|| panic!("{pipeline} {date} has no run in flight"))
        .to_string();
    report(sim, pipeline, date, &run_id, JobStatus::Running);
    let decision = report(sim, pipeline, date, &run_id, JobStatus::Succeeded);
    route(sim, decision)
}

/// An operator's command about `date`.
fn command(sim: &mut Sim, pipeline: &str, kind: CommandKind, date: &str) -> Decision {
    command_record(sim, pipeline, kind, date, |_| {})
}

/// [`command`], with `change` made to the record first.
fn command_record(
    sim: &mut Sim,
    pipeline: &str,
    kind: CommandKind,
    date: &str,
    change: impl FnOnce(&mut CommandRecord),
) -> Decision {
    let mut record = CommandRecord {
        pipeline_id: pipeline.into(),
        command: kind,
        schedule_id: None,
        date: date.into(),
        reason: Some("operator request".into()),
        requested_by: Some("ops@example.com".into()),
        subscriber: None,
        key: None,
        force: false,
        backfill: false,
    };
    change(&mut record);
    sim.input(pipeline, Input::CommandReceived(record.parse().unwrap()))
}

/// Feeds a decision's outbound records back in as the records a consumer would read
/// (through the real decoders), and so on until nothing more is published. Returns every
/// record routed, in order.
fn route(sim: &mut Sim, decision: Decision) -> Vec<Outbound> {
    let mut queue: std::collections::VecDeque<Outbound> = decision.records.into();
    let mut routed = Vec::new();
    while let Some(record) = queue.pop_front() {
        let bytes = serde_json::to_vec(&record.value).unwrap();
        let key = Some(record.key.as_bytes());
        let input = match record.topic {
            OutboundTopic::Sensors => Input::SensorReceived(decode_sensor(key, Some(&bytes)).unwrap()),
            OutboundTopic::Commands => Input::CommandReceived(decode_command(key, Some(&bytes)).unwrap()),
        };
        let next = sim.input(&record.key, input);
        queue.extend(next.records);
        routed.push(record);
    }
    routed
}

fn has_run_timers(sim: &Sim, pipeline: &str) -> bool {
    sim.timers.iter().any(|t| {
        t.pipeline == pipeline
            && matches!(
                t.kind,
                TimerKind::Evaluate { .. } | TimerKind::JobPollWindow { .. } | TimerKind::Watchdog { .. }
            )
    })
}

// ---- JOB_POLL_EXHAUSTED, JOB_TIMEOUT, RETRY_EXHAUSTED ----

#[test]
fn a_job_outliving_its_poll_window_ends_the_run_and_no_second_copy_starts() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 2, "jobPollWindowSeconds": 600}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    let mark = sim.events.len();
    sim.advance(TimeDelta::seconds(599));
    assert_eq!(since(&sim, mark), []);
    sim.advance(TimeDelta::seconds(1));
    // As the earlier design did: the run ends, never retried (the job may still run).
    assert_eq!(since(&sim, mark), [JOB_POLL_EXHAUSTED]);
    let exhausted = last(&sim, JOB_POLL_EXHAUSTED);
    assert_eq!(exhausted.timestamp, t0() + TimeDelta::seconds(600));
    assert_eq!(exhausted.run_id.as_deref(), Some(RUN1));
    assert_eq!(exhausted.detail["pollWindowSeconds"], json!(600));
    assert_eq!(exhausted.detail["willWatchOn"], json!(false));
    assert!(matches!(gold_run(&sim).phase, Phase::Failed { .. }));
    assert_eq!(gold_run(&sim).retries_used, 0, "maxRetries is not spent");
    assert_eq!(run_ids(&sim), [RUN1], "no second attempt");
    assert!(!has_run_timers(&sim, "gold"), "{:?}", sim.timers);
    // Its job reporting after all is told, once; the execution stays as it ended.
    sim.job("gold", RUN1, JobStatus::Running, None);
    assert_eq!(since(&sim, mark), [JOB_POLL_EXHAUSTED], "running is no end");
    let late = sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert_eq!(since(&sim, mark), [JOB_POLL_EXHAUSTED, JOB_REPORT_AFTER_END]);
    assert_ne!(late.state, StateChange::Unchanged, "told once: the mark is cleared");
    let told = last(&sim, JOB_REPORT_AFTER_END);
    assert_eq!(
        (told.run_id.as_deref(), &told.detail["status"]),
        (Some(RUN1), &json!("succeeded"))
    );
    assert!(matches!(gold_run(&sim).phase, Phase::Failed { .. }));
    let again = sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert!(again.events.is_empty(), "{:?}", again.events);
    sim.advance(TimeDelta::hours(3));
    assert_eq!(since(&sim, mark).len(), 2, "nothing more: {:?}", since(&sim, mark));
    assert_eq!(run_ids(&sim), [RUN1]);
}

#[test]
fn with_retry_after_poll_window_a_watched_job_is_retried_only_once_it_has_ended() {
    let mut sim = Sim::new();
    sim.config(gold(
        json!({"job": {"type": "databricks", "pollInterval": "1m", "maxRetries": 1,
        "jobPollWindowSeconds": 600, "retryAfterPollWindow": true,
        "config": {"host": "https://dbc.example", "jobId": 7, "token": "${env:DATABRICKS_TOKEN}"}}}),
    ));
    start(&mut sim);
    still_running(&mut sim);
    let mark = sim.events.len();
    sim.advance(TimeDelta::seconds(600));
    assert_eq!(since(&sim, mark), [JOB_POLL_EXHAUSTED]);
    assert_eq!(last(&sim, JOB_POLL_EXHAUSTED).detail["willWatchOn"], json!(true));
    assert!(gold_run(&sim).phase.is_running(), "{:?}", gold_run(&sim).phase);
    // Still watched: the status checks go on, and nothing starts beside the job.
    let checks = status_checks(&sim).len();
    sim.advance(TimeDelta::minutes(5));
    assert!(status_checks(&sim).len() > checks);
    assert_eq!(run_ids(&sim), [RUN1]);
    // The job system says it failed: now the retry.
    report_with(&mut sim, RUN1, JobStatus::Failed, None, json!({}));
    assert_eq!(since(&sim, mark), [JOB_POLL_EXHAUSTED, JOB_FAILED, VALIDATION_PASSED]);
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
}

#[test]
fn with_retry_after_poll_window_a_job_that_cannot_be_watched_still_ends() {
    let mut sim = Sim::new();
    sim.config(gold(
        json!({"job": {"maxRetries": 2, "jobPollWindowSeconds": 600, "retryAfterPollWindow": true}}),
    ));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    let mark = sim.events.len();
    sim.advance(TimeDelta::seconds(600));
    assert_eq!(since(&sim, mark), [JOB_POLL_EXHAUSTED]);
    assert_eq!(last(&sim, JOB_POLL_EXHAUSTED).detail["willWatchOn"], json!(false));
    assert!(matches!(gold_run(&sim).phase, Phase::Failed { .. }));
    assert_eq!(run_ids(&sim), [RUN1]);
}

/// `gold` (one retry) with its first attempt running when the data it needs goes (a row
/// count below its rule's); and where its events stood then.
fn running_when_its_data_goes() -> (Sim, usize) {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 1}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    sim.sensor("gold", "row-count", json!({"count": 10}));
    let mark = sim.events.len();
    (sim, mark)
}

#[test]
fn a_failed_attempt_is_retried_only_once_the_rules_pass_again() {
    let (mut sim, mark) = running_when_its_data_goes();
    sim.job("gold", RUN1, JobStatus::Failed, None);
    assert_eq!(since(&sim, mark), [JOB_FAILED]);
    assert_eq!(last(&sim, JOB_FAILED).detail["willRetry"], json!(true));
    assert_eq!(gold_run(&sim).phase, Phase::AwaitingRules);
    assert_eq!(gold_run(&sim).retries_used, 1);
    assert_eq!(run_ids(&sim), [RUN1], "no attempt while the rules fail");
    sim.advance(TimeDelta::minutes(20));
    assert_eq!(run_ids(&sim), [RUN1]);
    // Ready again: the retry starts, in its fresh window.
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    assert_eq!(since(&sim, mark), [JOB_FAILED, VALIDATION_PASSED]);
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
}

#[test]
fn a_retry_whose_rules_never_pass_again_ends_with_the_window() {
    let (mut sim, mark) = running_when_its_data_goes();
    sim.advance(TimeDelta::minutes(30));
    sim.job("gold", RUN1, JobStatus::Failed, None);
    // The window is a fresh one from the failure (1 h), not what was left of the first.
    sim.advance(TimeDelta::minutes(59));
    assert_eq!(since(&sim, mark), [JOB_FAILED]);
    sim.advance(TimeDelta::minutes(1));
    assert_eq!(since(&sim, mark), [JOB_FAILED, VALIDATION_EXHAUSTED]);
    assert_eq!(run_ids(&sim), [RUN1]);
}

/// A report that the target could not be reached, its retries spent.
fn unreachable(sim: &mut Sim, run_id: &str) {
    report_with(sim, run_id, JobStatus::Failed, Some(FailureCategory::Infra), json!({}));
}

#[test]
fn an_outage_does_not_close_the_date_the_next_trigger_sensor_starts_it_again() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    let mark = sim.events.len();
    unreachable(&mut sim, RUN1);
    assert_eq!(since(&sim, mark), [INFRA_FAILURE]);
    let failure = last(&sim, INFRA_FAILURE);
    assert_eq!(failure.detail["restartOnTrigger"], json!(true));
    assert!(matches!(gold_run(&sim).phase, Phase::Failed { .. }));
    // A row count changes nothing; the trigger sensor, still holding, starts the date again.
    sim.sensor("gold", "row-count", json!({"count": 2500}));
    assert_eq!(run_ids(&sim), [RUN1]);
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(since(&sim, mark), [INFRA_FAILURE, VALIDATION_PASSED]);
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    assert!(gold_run(&sim).phase.is_completed());
}

#[test]
fn outages_restart_a_date_at_most_three_times() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    for attempt in 1..=3 {
        unreachable(&mut sim, &format!("gold.stream.2026-11-22.{attempt}"));
        sim.sensor("gold", "upstream", json!({"status": "ready"}));
    }
    assert_eq!(run_ids(&sim).len(), 4);
    let mark = sim.events.len();
    unreachable(&mut sim, "gold.stream.2026-11-22.4");
    assert_eq!(last(&sim, INFRA_FAILURE).detail["restartOnTrigger"], json!(false));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(since(&sim, mark), [INFRA_FAILURE], "the date stays closed");
    assert_eq!(run_ids(&sim).len(), 4);
}

#[test]
fn retry_exhausted_names_max_code_retries_for_permanent_failures() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 3, "maxCodeRetries": 1}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    sim.job("gold", RUN1, JobStatus::Failed, Some(FailureCategory::Permanent));
    assert_eq!(last(&sim, JOB_FAILED).detail["willRetry"], json!(true));
    assert_eq!(last(&sim, JOB_FAILED).detail["failureCategory"], json!("PERMANENT"));
    sim.job("gold", RUN2, JobStatus::Running, None);
    let mark = sim.events.len();
    sim.job("gold", RUN2, JobStatus::Failed, Some(FailureCategory::Permanent));
    assert_eq!(since(&sim, mark), [JOB_FAILED, RETRY_EXHAUSTED]);
    let exhausted = last(&sim, RETRY_EXHAUSTED);
    assert_eq!(exhausted.detail["budget"], json!("maxCodeRetries"));
    assert_eq!(exhausted.detail["limit"], json!(1));
    assert!(exhausted.message.contains("maxCodeRetries"), "{}", exhausted.message);
    // What to do next travels with the event (Interlock's actionHint), for any consumer.
    let hint = exhausted.detail["actionHint"].as_str().unwrap_or_default();
    assert!(hint.contains("`sluice rerun gold "), "{:?}", exhausted.detail);
    assert!(last(&sim, JOB_FAILED).detail["actionHint"].is_string());
    // maxRetries was never touched: PERMANENT failures draw on their own budget.
    assert_eq!(gold_run(&sim).retries_used, 0);
    assert_eq!(gold_run(&sim).code_retries_used, 1);
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
}

/// `gold` as a synchronous Lambda (its call is the run) with one retry to spend.
fn lambda_gold() -> Value {
    gold(json!({"job": {"type": "lambda", "maxRetries": 1, "config": {"functionName": "report"}}}))
}

#[test]
fn retry_exhausted_by_a_failing_trigger_releases_the_date_for_the_next_trigger_sensor() {
    let mut sim = Sim::new();
    sim.config(lambda_gold());
    start(&mut sim);
    // The function fails at once (the executor's own tries spent), twice: the retry, then
    // the budget is spent. As Interlock released its trigger lock, the date is not closed.
    sim.job("gold", RUN1, JobStatus::Failed, None);
    let mark = sim.events.len();
    sim.job("gold", RUN2, JobStatus::Failed, None);
    assert_eq!(since(&sim, mark), [JOB_FAILED, RETRY_EXHAUSTED]);
    let exhausted = last(&sim, RETRY_EXHAUSTED);
    assert_eq!(exhausted.detail["restartOnTrigger"], json!(true));
    assert_eq!(exhausted.detail["triggerReleases"], json!(1));
    assert!(exhausted.message.contains("release 1 of 3"), "{}", exhausted.message);
    // A row count changes nothing; the next trigger sensor starts the date again.
    sim.sensor("gold", "row-count", json!({"count": 2500}));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(run_ids(&sim), [RUN1, RUN2, RUN3]);
    // Bounded: after three releases the date stays closed until a rerun.
    for attempt in 3..=5 {
        sim.job(
            "gold",
            &format!("gold.stream.2026-11-22.{attempt}"),
            JobStatus::Failed,
            None,
        );
        sim.sensor("gold", "upstream", json!({"status": "ready"}));
    }
    assert_eq!(run_ids(&sim).len(), 5);
    assert_eq!(last(&sim, RETRY_EXHAUSTED).detail["restartOnTrigger"], json!(false));
    assert!(matches!(gold_run(&sim).phase, Phase::Failed { .. }));
}

#[test]
fn retry_exhausted_by_a_job_that_ran_and_failed_closes_the_date() {
    // A Databricks run that started, then failed: the job ran, the date stays closed.
    let mut sim = watched_databricks_run();
    for run in [RUN1, RUN2, RUN3] {
        report_with(
            &mut sim,
            run,
            JobStatus::Running,
            None,
            json!({"handle": {"runId": 42}}),
        );
        report_with(&mut sim, run, JobStatus::Failed, None, json!({}));
    }
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(last(&sim, RETRY_EXHAUSTED).detail["restartOnTrigger"], json!(false));
    assert_eq!(run_ids(&sim).len(), 3);
}

#[test]
fn a_run_that_ends_while_its_call_may_retry_is_named_for_the_runtime() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 2}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    // Cancelled while its command runs (and may be run again after a failure).
    let cancelled = command(&mut sim, "gold", CommandKind::Cancel, DAY);
    assert_eq!(cancelled.ended_runs, [RUN1]);
    // A job's own end names its run too; an input that ends nothing names none.
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    assert!(sim
        .sensor("gold", "row-count", json!({"count": 3000}))
        .ended_runs
        .is_empty());
    assert_eq!(sim.job("gold", RUN1, JobStatus::Succeeded, None).ended_runs, [RUN1]);
    // Deleting the pipeline ends whatever ran.
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    let deleted = sim.input(
        "gold",
        Input::ConfigPublished(crate::core::records::ConfigRecord::Delete {
            pipeline_id: "gold".into(),
        }),
    );
    assert_eq!(deleted.ended_runs, [RUN1]);
}

/// `config delete` then `config apply` of the same pipeline, and the same reading again:
/// the date that ran is not run a second time under the run id the job system has seen;
/// only an operator's rerun runs it, as attempt 2. Once its retention ends, nothing of the
/// deleted pipeline is left.
#[test]
fn a_date_that_ran_is_not_run_again_after_its_config_is_deleted_and_applied_again() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    succeed(&mut sim);
    assert_eq!(run_ids(&sim), [RUN1]);
    let deleted = sim.delete("gold");
    assert!(
        matches!(&deleted.state, StateChange::Put(s) if s.executions.len() == 1),
        "the run that triggered is kept"
    );
    assert_eq!(last(&sim, CONFIG_ACCEPTED).detail["keptExecutions"], json!(1));
    assert!(sim.states["gold"].config.is_none());
    sim.assert_timers_agree("gold");

    sim.config(gold(json!({})));
    start(&mut sim);
    assert_eq!(
        run_ids(&sim),
        [RUN1],
        "the same reading started the date again: {:?}",
        sim.events
            .iter()
            .rev()
            .take(6)
            .map(|e| (e.kind, e.message.clone()))
            .collect::<Vec<_>>()
    );
    sim.sensor("gold", "row-count", json!({"count": 2500}));
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);

    // Deleted again, the kept executions expire with their retention, and the state goes.
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    sim.delete("gold");
    sim.advance(chrono::TimeDelta::days(10));
    assert!(!sim.states.contains_key("gold"), "{:?}", sim.states.get("gold"));
    assert!(sim.timers.is_empty(), "{:?}", sim.timers);
}

#[test]
fn a_synchronous_lambdas_call_and_its_watchdog_cover_what_the_function_may_take() {
    let mut sim = Sim::new();
    sim.config(lambda_gold());
    start(&mut sim);
    let request = sim.triggers()[0].clone();
    let fifteen_minutes = std::time::Duration::from_secs(15 * 60);
    let tries = request.retry.max_attempts + 1;
    assert!(
        request.call_budget() > fifteen_minutes * tries,
        "{:?}",
        request.call_budget()
    );
    // Nothing closes the run while a try may still be running the function.
    let deadline = request.deadline.expect("a trigger has a deadline");
    sim.advance(deadline - sim.now);
    assert!(
        matches!(gold_run(&sim).phase, Phase::AwaitingTrigger { .. }),
        "{:?}",
        sim.types()
    );
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert_eq!(*sim.types().last().unwrap(), JOB_COMPLETED);
    // An asynchronous invocation answers at once, and an explicit timeout is the try's.
    for (config, seconds) in [
        (json!({"functionName": "report", "invocationType": "Event"}), 30),
        (json!({"functionName": "report", "timeout": 120}), 120),
        (json!({"command": "run", "timeout": 7200}), 7200),
    ] {
        let kind = if config.get("command").is_some() {
            "command"
        } else {
            "lambda"
        };
        let mut sim = Sim::new();
        sim.config(gold(json!({"job": {"type": kind, "config": config}})));
        start(&mut sim);
        let try_timeout = sim.triggers()[0].config.try_timeout();
        assert_eq!(try_timeout, std::time::Duration::from_secs(seconds), "{kind}");
    }
}

#[test]
fn no_sla_breach_after_a_failure_that_ended_the_date() {
    // A Databricks run that failed for good at 08:00, and a window that closed unpassed:
    // each failure was the alert; the 10:00 deadline says nothing more.
    let sla = json!({"deadline": "10:00", "deadlineDay": "dataDate", "expectedDuration": "30m"});
    let mut sim = Sim::new();
    sim.config(gold(json!({"sla": sla, "job": {"type": "databricks",
        "config": {"host": "https://dbc.example", "jobId": 7, "token": "t"}}})));
    start(&mut sim);
    still_running(&mut sim);
    report_with(&mut sim, RUN1, JobStatus::Failed, None, json!({}));
    assert_eq!(*sim.types().last().unwrap(), RETRY_EXHAUSTED);
    let mut exhausted = Sim::new();
    exhausted.config(gold(json!({"sla": sla})));
    exhausted.sensor("gold", "upstream", json!({"status": "ready"}));
    for sim in [&mut sim, &mut exhausted] {
        sim.advance(TimeDelta::hours(4));
        let told: Vec<_> = sim
            .types()
            .into_iter()
            .filter(|k| k.category() == crate::core::events::Category::Sla)
            .collect();
        assert!(told.is_empty(), "{:?}", sim.types());
    }
    assert!(exhausted.types().contains(&VALIDATION_EXHAUSTED));
    // Still running at the deadline: the breach is told.
    let mut late = Sim::new();
    late.config(gold(json!({"sla": sla, "job": {"jobPollWindowSeconds": 14400}})));
    start(&mut late);
    late.job("gold", RUN1, JobStatus::Running, None);
    late.advance(TimeDelta::hours(2));
    assert!(late.types().contains(&SLA_BREACH), "{:?}", late.types());
}

// ---- STALE_RUN ----

#[test]
fn stale_run_when_a_trigger_never_reports_closes_the_run_and_it_can_be_rerun() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    assert!(matches!(gold_run(&sim).phase, Phase::AwaitingTrigger { .. }));
    let mark = sim.events.len();
    // 15 minutes after the trigger retry policy (30 s + 60 s + 120 s) could be spent.
    let grace = TimeDelta::minutes(15) + TimeDelta::seconds(210);
    sim.advance(grace - TimeDelta::seconds(1));
    assert_eq!(since(&sim, mark), []);
    sim.advance(TimeDelta::seconds(1));
    assert_eq!(since(&sim, mark), [STALE_RUN]);
    let stale = last(&sim, STALE_RUN);
    assert_eq!(stale.run_id.as_deref(), Some(RUN1));
    assert_eq!(stale.detail["phase"], json!("awaitingTrigger"));
    assert_eq!(stale.timestamp, t0() + grace);
    assert!(matches!(gold_run(&sim).phase, Phase::Stale { .. }));
    assert!(!has_run_timers(&sim, "gold"));

    // The run is closed: its report, arriving at last, changes nothing.
    let late = sim.job("gold", RUN1, JobStatus::Running, None);
    assert_eq!(late.state, StateChange::Unchanged);
    let late = sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert_eq!(late.state, StateChange::Unchanged);
    assert!(sim.of(JOB_COMPLETED).is_empty() && sim.of(JOB_TRIGGERED).is_empty());

    // A stale run can be rerun, with the next attempt's run id.
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [RERUN_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    assert_eq!(sim.triggers()[1].attempt, 2);
    sim.job("gold", RUN2, JobStatus::Running, None);
    let triggered = last(&sim, JOB_TRIGGERED);
    assert_eq!((triggered.run_id.as_deref(), triggered.attempt), (Some(RUN2), Some(2)));
}

#[test]
fn stale_run_when_a_lost_evaluation_timer_leaves_an_execution_hanging() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(gold_run(&sim).phase, Phase::AwaitingRules);
    // The interval timer is lost (a bug, a restore that missed it): only the watchdog is left.
    sim.lose_timers(|k| matches!(k, TimerKind::Evaluate { .. }));
    let mark = sim.events.len();
    sim.advance(TimeDelta::minutes(69));
    assert_eq!(since(&sim, mark), [], "no evaluation closes the window");
    sim.advance(TimeDelta::minutes(1));
    assert_eq!(since(&sim, mark), [STALE_RUN]);
    let stale = last(&sim, STALE_RUN);
    assert_eq!(stale.detail["phase"], json!("awaitingRules"));
    assert_eq!(stale.run_id, None);
    assert!(matches!(gold_run(&sim).phase, Phase::Stale { .. }));
    assert!(
        sim.states["gold"]
            .timers
            .values()
            .all(|t| matches!(t.timer, TimerKind::Expire { .. })),
        "{:?}",
        sim.states["gold"].timers
    );

    // A stale execution is not revived by a sensor ...
    sim.sensor("gold", "row-count", json!({"count": 5000}));
    assert!(sim.triggers().is_empty());
    // ... but an operator can rerun it; it never ran, so this is attempt 1.
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [STALE_RUN, RERUN_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(run_ids(&sim), [RUN1]);
}

// ---- RERUN_ACCEPTED / RERUN_REJECTED ----

/// "Fixed the code, rerun yesterday": a forced rerun of a completed date whose inputs did
/// not change is accepted, within `maxManualReruns`.
#[test]
fn a_forced_rerun_runs_a_completed_date_again_with_unchanged_inputs() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    succeed(&mut sim);
    let forced = |sim: &mut Sim| {
        let record = CommandRecord {
            pipeline_id: "gold".into(),
            command: CommandKind::Rerun,
            schedule_id: None,
            date: DAY.into(),
            reason: Some("fixed the join".into()),
            requested_by: Some("ops@example.com".into()),
            subscriber: None,
            key: None,
            force: true,
            backfill: false,
        };
        sim.input("gold", Input::CommandReceived(record.parse().unwrap()))
    };
    let mark = sim.events.len();
    forced(&mut sim);
    assert_eq!(since(&sim, mark), [RERUN_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(last(&sim, RERUN_ACCEPTED).detail["force"], json!(true));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    // The budget still holds (maxManualReruns 1).
    forced(&mut sim);
    assert_eq!(
        last(&sim, RERUN_REJECTED).detail["rejection"],
        json!(format!("maxManualReruns (1) is spent for {KEY}"))
    );
}

#[test]
fn rerun_accepted_after_a_success_when_sensor_data_changed() {
    let mut sim = Sim::new();
    // No drift budget: the late data alone reruns nothing (RERUN_REJECTED), the operator does.
    sim.config(gold(json!({"job": {"maxDriftReruns": 0}})));
    succeed(&mut sim);
    sim.sensor("gold", "row-count", json!({"count": 2500}));
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [RERUN_ACCEPTED, VALIDATION_PASSED]);
    let accepted = last(&sim, RERUN_ACCEPTED);
    assert_eq!(accepted.detail["manualRerunsUsed"], json!(1));
    assert_eq!(accepted.detail["maxManualReruns"], json!(1));
    assert_eq!(accepted.detail["requestedBy"], json!("ops@example.com"));
    assert_eq!(accepted.detail["reason"], json!("operator request"));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    assert_eq!(sim.triggers()[1].attempt, 2);
    sim.job("gold", RUN2, JobStatus::Running, None);
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    assert_eq!(
        since(&sim, mark),
        [RERUN_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let completed = last(&sim, JOB_COMPLETED);
    assert_eq!((completed.run_id.as_deref(), completed.attempt), (Some(RUN2), Some(2)));
}

#[test]
fn rerun_accepted_after_a_failure_without_any_change_with_fresh_retries() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 1}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Failed, None);
    sim.job("gold", RUN2, JobStatus::Failed, None);
    assert_eq!(last(&sim, RETRY_EXHAUSTED).run_id.as_deref(), Some(RUN2));
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [RERUN_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(run_ids(&sim), [RUN1, RUN2, RUN3]);
    assert_eq!(gold_run(&sim).retries_used, 0, "a rerun gets a fresh retry budget");
    sim.job("gold", RUN3, JobStatus::Failed, None);
    assert_eq!(last(&sim, JOB_FAILED).detail["willRetry"], json!(true));
}

#[test]
fn rerun_rejected_when_no_sensor_data_changed_since_the_success() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    succeed(&mut sim);
    // The same data again is no change.
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [RERUN_REJECTED]);
    let rejected = last(&sim, RERUN_REJECTED);
    let why = rejected.detail["rejection"].as_str().unwrap();
    assert!(why.contains("no sensor data changed"), "{why}");
    assert!(rejected.message.contains(why));
    assert_eq!(rejected.date.as_deref(), Some(DAY));
    assert!(matches!(gold_run(&sim).phase, Phase::Succeeded { .. }));
    assert_eq!(gold_run(&sim).manual_reruns_used, 0);
    assert_eq!(run_ids(&sim), [RUN1]);
}

/// Records whose date names no execution (decoding makes a rerun's and a cancel's date
/// canonical, so only a record made in process gets here; a report is parsed to the
/// execution it names, here an hour the daily pipeline never ran): each is refused with the
/// reason and dead-lettered, nothing opens or runs. Before execution ids were typed, such a
/// rerun was accepted and did nothing.
#[test]
fn records_naming_no_execution_are_refused_with_the_reason() {
    let mut sim = Sim::new();
    let refused = |d: &Decision| (d.rejection, d.dead_letter.clone().unwrap_or_default());
    // No config yet: a rerun names no schedule.
    let d = command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(
        refused(&d),
        (Some(Rejection::Refused), "pipeline gold has no config".into())
    );
    sim.config(gold(json!({"job": {"maxManualReruns": 3}})));
    succeed(&mut sim);
    let mark = sim.events.len();
    let d = command(&mut sim, "gold", CommandKind::Cancel, "2026-11-21");
    assert_eq!(
        refused(&d),
        (
            Some(Rejection::Refused),
            "nothing to cancel: no execution stream/2026-11-21 in progress".into()
        )
    );
    let d = report(&mut sim, "gold", "2026-11-22T5", RUN1, JobStatus::Failed);
    let (rejection, reason) = refused(&d);
    assert_eq!(rejection, Some(Rejection::Refused));
    assert_eq!(
        reason,
        "no execution stream/2026-11-22T05 of pipeline gold to report on"
    );
    assert_eq!(since(&sim, mark), [INPUT_REJECTED, INPUT_REJECTED]);
    assert!(matches!(gold_run(&sim).phase, Phase::Succeeded { .. }));
    assert_eq!(sim.states["gold"].executions.len(), 1);
    assert_eq!(run_ids(&sim), [RUN1]);
}

/// A command naming a schedule the pipeline does not have: before, a `rerun` with
/// `scheduleId: cron` for this trigger-driven pipeline opened a second execution of the date
/// beside the succeeded one and triggered the job again, with new run ids and its own budget.
#[test]
fn commands_naming_a_schedule_the_pipeline_does_not_have_are_refused() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxManualReruns": 3, "maxDriftReruns": 0}})));
    succeed(&mut sim);
    sim.sensor("gold", "row-count", json!({"count": 2500}));
    let foreign = |kind| CommandRecord {
        pipeline_id: "gold".into(),
        command: kind,
        schedule_id: Some("cron".into()),
        date: DAY.into(),
        reason: None,
        requested_by: None,
        subscriber: None,
        key: None,
        force: false,
        backfill: false,
    };
    let mark = sim.events.len();
    let decision = sim.input(
        "gold",
        Input::CommandReceived(foreign(CommandKind::Rerun).parse().unwrap()),
    );
    assert_eq!(since(&sim, mark), [RERUN_REJECTED]);
    let why = last(&sim, RERUN_REJECTED).detail["rejection"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        why.contains("no schedule \"cron\"") && why.contains("\"stream\""),
        "{why}"
    );
    assert!(decision.effects.is_empty());
    assert_eq!(run_ids(&sim), [RUN1]);
    assert_eq!(
        sim.states["gold"].executions.len(),
        1,
        "no second execution of the date"
    );
    let mark = sim.events.len();
    let decision = sim.input(
        "gold",
        Input::CommandReceived(foreign(CommandKind::Cancel).parse().unwrap()),
    );
    assert_eq!(since(&sim, mark), [INPUT_REJECTED]);
    assert!(decision.dead_letter.is_some_and(|r| r.contains("no schedule")));
    // The pipeline's own schedule, named, is what it always was.
    let mut own = foreign(CommandKind::Rerun);
    own.schedule_id = Some("stream".into());
    sim.input("gold", Input::CommandReceived(own.parse().unwrap()));
    assert_eq!(last(&sim, RERUN_ACCEPTED).date.as_deref(), Some(DAY));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
}

#[test]
fn rerun_rejected_once_max_manual_reruns_is_spent() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxManualReruns": 1}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Failed, None);
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    sim.job("gold", RUN2, JobStatus::Failed, None);
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [RERUN_REJECTED]);
    let why = last(&sim, RERUN_REJECTED).detail["rejection"].as_str().unwrap();
    assert!(why.contains("maxManualReruns (1) is spent"), "{why}");
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
}

#[test]
fn rerun_rejected_while_the_run_is_in_progress() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    let why = last(&sim, RERUN_REJECTED).detail["rejection"].as_str().unwrap();
    assert!(why.contains("still in progress (awaitingRules)"), "{why}");
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.job("gold", RUN1, JobStatus::Running, None);
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [RERUN_REJECTED]);
    let why = last(&sim, RERUN_REJECTED).detail["rejection"].as_str().unwrap();
    assert!(why.contains("still in progress (awaitingJob)"), "{why}");
    assert_eq!(gold_run(&sim).phase, Phase::AwaitingJob { run_id: RUN1.into() });
    assert_eq!(gold_run(&sim).manual_reruns_used, 0);
}

// A date that never ran is started by a rerun, as the earlier design's runbooks do.
#[test]
fn rerun_accepted_for_a_date_with_no_execution_starts_it_with_a_fresh_window() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor_scoped(
        "gold",
        "row-count",
        json!({"count": 2000}),
        Some("2026-11-20"),
        None,
        None,
    );
    command(&mut sim, "gold", CommandKind::Rerun, "2026-11-20");
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, RERUN_ACCEPTED, VALIDATION_PASSED]);
    let accepted = last(&sim, RERUN_ACCEPTED);
    assert_eq!(accepted.date.as_deref(), Some("2026-11-20"));
    assert_eq!(accepted.detail["manualRerunsUsed"], json!(1));
    let run = execution(&sim, "gold", "stream/2026-11-20");
    assert_eq!(run.manual_reruns_used, 1);
    assert_eq!(run.window_closes_at, sim.now + TimeDelta::hours(1));
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-20");
    // The budget applies: one manual rerun by default, and it is spent.
    sim.job_for("gold", "stream", "2026-11-20", JobStatus::Running);
    sim.job_for("gold", "stream", "2026-11-20", JobStatus::Failed);
    command(&mut sim, "gold", CommandKind::Rerun, "2026-11-20");
    let why = last(&sim, RERUN_REJECTED).detail["rejection"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("maxManualReruns (1) is spent"), "{why}");
}

/// A backfill (issue 59, item 5): a date older than the retention, which a plain rerun and
/// its dated sensors may not start, is started on purpose; its readings then count, its run
/// ids are its own (the date may have run under `.1` before Sluice forgot it), and it is one
/// execution like any other while it runs.
#[test]
fn a_backfill_starts_a_forgotten_date_with_run_ids_of_its_own() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    let old = "2026-10-01";
    command(&mut sim, "gold", CommandKind::Rerun, old);
    let why = last(&sim, RERUN_REJECTED).detail["rejection"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        why.contains("older than the execution retention") && why.contains("sluice backfill"),
        "{why}"
    );
    let backfill =
        |sim: &mut Sim, date: &str| command_record(sim, "gold", CommandKind::Rerun, date, |r| r.backfill = true);
    let accepted_at = sim.now;
    backfill(&mut sim, old);
    assert_eq!(last(&sim, RERUN_ACCEPTED).detail["backfill"], json!(true));
    // Its dated readings count now, and the run starts on them.
    let decision = sim.sensor_scoped("gold", "row-count", json!({"count": 5000}), Some(old), None, None);
    assert!(
        !decision.events.iter().any(|e| e.kind == INPUT_REJECTED),
        "{:?}",
        decision.events
    );
    let trigger = (*sim.triggers().last().unwrap()).clone();
    assert_eq!(trigger.execution.date_text(), old);
    let run_id = format!("gold.stream.{old}.b{}.1", accepted_at.timestamp_millis());
    assert_eq!(trigger.run_id, run_id);
    // Asked again while it runs: still one execution of the date.
    backfill(&mut sim, old);
    let why = last(&sim, RERUN_REJECTED).detail["rejection"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("still in progress"), "{why}");
    assert_eq!(sim.triggers().len(), 1);
    // Another forgotten date's reading is still refused: only a backfill opens a date.
    let decision = sim.sensor_scoped(
        "gold",
        "row-count",
        json!({"count": 5000}),
        Some("2026-10-02"),
        None,
        None,
    );
    assert_eq!(decision.events[0].kind, INPUT_REJECTED);
    // The job's report for the backfill's run id ends it like any run.
    sim.job_for("gold", "stream", old, JobStatus::Succeeded);
    assert_eq!(last(&sim, JOB_COMPLETED).date.as_deref(), Some(old));
}

#[test]
fn rerun_rejected_for_a_date_with_no_execution_that_could_not_have_run() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"exclusions": {"days": ["saturday"]}})));
    let rejection = |sim: &mut Sim, date: &str| {
        command(sim, "gold", CommandKind::Rerun, date);
        last(sim, RERUN_REJECTED).detail["rejection"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let dormant = rejection(&mut sim, "2026-11-21");
    assert!(dormant.contains("2026-11-21 is dormant"), "{dormant}");
    let future = rejection(&mut sim, "2026-11-23");
    assert!(future.contains("in the future"), "{future}");
    let ancient = rejection(&mut sim, "2026-01-01");
    assert!(ancient.contains("older than the execution retention"), "{ancient}");
    assert!(sim.states["gold"].executions.is_empty());
    assert!(sim.triggers().is_empty());

    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxManualReruns": 0}})));
    let decision = command(&mut sim, "gold", CommandKind::Rerun, "2026-11-20");
    let why = last(&sim, RERUN_REJECTED).detail["rejection"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("maxManualReruns is 0"), "{why}");
    assert_eq!(decision.state, StateChange::Unchanged);
}

// ---- RUN_CANCELLED ----

#[test]
fn run_cancelled_while_awaiting_rules_stops_evaluation_and_never_triggers() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Cancel, DAY);
    assert_eq!(since(&sim, mark), [RUN_CANCELLED]);
    let cancelled = last(&sim, RUN_CANCELLED);
    assert_eq!(cancelled.detail["phase"], json!("awaitingRules"));
    assert_eq!(cancelled.detail["runId"], Value::Null);
    assert_eq!(cancelled.detail["requestedBy"], json!("ops@example.com"));
    assert!(matches!(gold_run(&sim).phase, Phase::Cancelled { .. }));
    assert!(sim.only_expiry_left(), "{:?}", sim.timers);
    // The sensor that would have passed the rules, and the passing of the window, do nothing.
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.advance(TimeDelta::hours(3));
    assert_eq!(since(&sim, mark), [RUN_CANCELLED]);
    assert!(sim.triggers().is_empty());
}

#[test]
fn run_cancelled_while_awaiting_the_job_ignores_its_later_report() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 2}})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Cancel, DAY);
    assert_eq!(since(&sim, mark), [RUN_CANCELLED]);
    let cancelled = last(&sim, RUN_CANCELLED);
    assert_eq!(cancelled.detail["phase"], json!("awaitingJob"));
    assert_eq!(cancelled.detail["runId"], json!(RUN1));
    assert!(!has_run_timers(&sim, "gold"));
    for status in [JobStatus::Succeeded, JobStatus::Failed] {
        let late = sim.job("gold", RUN1, status, None);
        assert_eq!(late.state, StateChange::Unchanged);
        assert!(late.events.is_empty() && late.effects.is_empty());
    }
    sim.advance(TimeDelta::hours(3));
    assert_eq!(since(&sim, mark), [RUN_CANCELLED]);
    assert_eq!(run_ids(&sim), [RUN1], "no retry after a cancel");
}

#[test]
fn input_rejected_when_a_cancel_finds_nothing_in_progress() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    let decision = command(&mut sim, "gold", CommandKind::Cancel, DAY);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, INPUT_REJECTED]);
    assert!(decision.dead_letter.as_deref().unwrap().contains("nothing to cancel"));
    assert_eq!(decision.state, StateChange::Unchanged);
    // A finished run is nothing to cancel either.
    succeed(&mut sim);
    let decision = command(&mut sim, "gold", CommandKind::Cancel, DAY);
    assert!(decision.dead_letter.is_some());
    assert_eq!(sim.of(INPUT_REJECTED).len(), 2);
    assert!(sim.of(RUN_CANCELLED).is_empty());
    assert!(matches!(gold_run(&sim).phase, Phase::Succeeded { .. }));
    assert_eq!(sim.dead_letters.len(), 2);
}

// ---- LATE_DATA_ARRIVAL ----

#[test]
fn late_data_arrival_is_told_once_per_completion_and_reruns_once_on_the_drift_budget() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    succeed(&mut sim);
    let mark = sim.events.len();
    // The same data re-sent is not news.
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    assert_eq!(since(&sim, mark), []);
    sim.sensor("gold", "row-count", json!({"count": 2600}));
    // As the earlier design did: one alert, and a rerun from maxDriftReruns (default 1).
    assert_eq!(
        since(&sim, mark),
        [LATE_DATA_ARRIVAL, RERUN_ACCEPTED, VALIDATION_PASSED]
    );
    let late = last(&sim, LATE_DATA_ARRIVAL);
    assert_eq!(late.detail["sensor"], json!("row-count"));
    assert_eq!(late.date.as_deref(), Some(DAY));
    assert_eq!(last(&sim, RERUN_ACCEPTED).detail["maxDriftReruns"], json!(1));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    // More writes while the rerun runs are what it will read: no alert.
    for count in [2700, 2800, 2900] {
        sim.sensor("gold", "row-count", json!({"count": count}));
    }
    sim.job("gold", RUN2, JobStatus::Running, None);
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    let rerun_done = sim.events.len();
    // After this completion: one alert again, and the budget is spent.
    sim.sensor("gold", "row-count", json!({"count": 3000}));
    sim.sensor("gold", "row-count", json!({"count": 3100}));
    assert_eq!(since(&sim, rerun_done), [LATE_DATA_ARRIVAL, RERUN_REJECTED]);
    assert!(last(&sim, RERUN_REJECTED).detail["rejection"]
        .as_str()
        .unwrap()
        .contains("maxDriftReruns (1)"));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
}

#[test]
fn late_data_arrival_is_not_reported_for_a_sensor_re_sent_unchanged() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    succeed(&mut sim);
    let mark = sim.events.len();
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    // A sensor no rule reads is not late data (it is an unknown sensor).
    sim.sensor("gold", "unrelated", json!({"count": 1}));
    assert_eq!(since(&sim, mark), [UNKNOWN_SENSOR]);
}

// ---- POST_RUN_* ----

#[test]
fn post_run_baseline_captured_on_success_with_the_post_run_sensor_values() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    let mark = sim.events.len();
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert_eq!(since(&sim, mark), [JOB_COMPLETED, POST_RUN_BASELINE_CAPTURED]);
    let captured = last(&sim, POST_RUN_BASELINE_CAPTURED);
    assert_eq!(
        captured.detail["baseline"],
        json!({"quality": {"status": "ok", "count": 500}})
    );
    assert_eq!(
        gold_run(&sim).baseline.as_ref().map(|b| Value::Object(b.clone())),
        Some(json!({"quality": {"status": "ok", "count": 500}}))
    );
    let timeout = TimerKind::PostRunTimeout {
        execution: crate::core::execution::id("stream", DAY),
    };
    assert_eq!(sim.due("gold", &timeout), Some(sim.now + TimeDelta::hours(2)));
}

#[test]
fn post_run_passed_on_a_later_post_run_sensor_and_then_no_sensor_missing() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    sim.advance(TimeDelta::minutes(30));
    let mark = sim.events.len();
    // Within the drift threshold (|505 - 500| <= 10).
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 505}));
    assert_eq!(since(&sim, mark), [POST_RUN_PASSED]);
    assert_eq!(last(&sim, POST_RUN_PASSED).detail["results"][0]["passed"], json!(true));
    sim.advance(TimeDelta::hours(4));
    assert_eq!(since(&sim, mark), [POST_RUN_PASSED], "no POST_RUN_SENSOR_MISSING");
    assert!(sim.only_expiry_left(), "{:?}", sim.timers);
}

#[test]
fn post_run_warned_when_only_a_warn_rule_fails_and_failed_when_an_error_rule_does() {
    let mut sim = Sim::new();
    // The status must be ok (an error); the rows should be at least 400 (a warning).
    let warn = json!({"key": "quality", "check": "gte", "field": "rows", "value": 400, "severity": "warn"});
    let mut config = gold_post_run(json!({}));
    config["postRun"]["rules"].as_array_mut().unwrap().push(warn);
    sim.config(config);
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500, "rows": 500}));
    succeed(&mut sim);
    let mark = sim.events.len();
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500, "rows": 395}));
    assert_eq!(since(&sim, mark), [POST_RUN_WARNED]);
    let warned = last(&sim, POST_RUN_WARNED);
    assert!(
        warned.message.contains("rows is 395 but must be >= 400"),
        "{}",
        warned.message
    );
    assert_eq!(warned.detail["results"][1]["severity"], json!("warn"));
    sim.sensor(
        "gold",
        "quality",
        json!({"status": "corrupt", "count": 500, "rows": 395}),
    );
    assert_eq!(since(&sim, mark), [POST_RUN_WARNED, POST_RUN_FAILED]);
    let failed = last(&sim, POST_RUN_FAILED);
    assert!(
        !failed.message.contains("395"),
        "the failure names the error rule only: {}",
        failed.message
    );
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500, "rows": 401}));
    assert_eq!(since(&sim, mark), [POST_RUN_WARNED, POST_RUN_FAILED, POST_RUN_PASSED]);
}

#[test]
fn validation_warned_just_before_validation_passed_when_a_warn_rule_fails() {
    let mut sim = Sim::new();
    let warn = json!({"key": "freshness", "check": "exists", "severity": "warn"});
    let mut config = gold(json!({}));
    config["validation"]["rules"].as_array_mut().unwrap().push(warn);
    sim.config(config);
    start(&mut sim);
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_WARNED, VALIDATION_PASSED]);
    let warned = last(&sim, VALIDATION_WARNED);
    assert_eq!(warned.detail["results"].as_array().unwrap().len(), 1);
    assert_eq!(warned.detail["results"][0]["key"], json!("freshness"));
    assert!(
        warned.message.contains("no reading of sensor \"freshness\""),
        "{}",
        warned.message
    );
    assert_eq!(sim.triggers().len(), 1, "the run goes on");
    // The same rule as an error holds the trigger.
    let mut held = Sim::new();
    let mut config = gold(json!({}));
    let error = json!({"key": "freshness", "check": "exists"});
    config["validation"]["rules"].as_array_mut().unwrap().push(error);
    held.config(config);
    start(&mut held);
    assert!(held.triggers().is_empty() && held.of(VALIDATION_WARNED).is_empty());
}

#[test]
fn post_run_failed_on_a_later_post_run_sensor_that_breaks_a_rule() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    let mark = sim.events.len();
    sim.sensor("gold", "quality", json!({"status": "corrupt", "count": 500}));
    assert_eq!(since(&sim, mark), [POST_RUN_FAILED]);
    let failed = last(&sim, POST_RUN_FAILED);
    assert!(
        failed.message.contains("status is corrupt but must equal ok"),
        "{}",
        failed.message
    );
    assert_eq!(failed.detail["results"][0]["seen"], json!("corrupt"));
    assert_eq!(run_ids(&sim), [RUN1], "a failed post-run check is reported, not rerun");
}

#[test]
fn post_run_drift_above_the_threshold_reruns_while_max_drift_reruns_allows() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({"job": {"maxDriftReruns": 1}})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    let mark = sim.events.len();
    // Exactly at the threshold is no drift; above it is.
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 510}));
    assert_eq!(since(&sim, mark), [POST_RUN_PASSED]);
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 511}));
    assert_eq!(
        since(&sim, mark),
        [
            POST_RUN_PASSED,
            POST_RUN_PASSED,
            POST_RUN_DRIFT,
            RERUN_ACCEPTED,
            VALIDATION_PASSED
        ]
    );
    let accepted = last(&sim, RERUN_ACCEPTED);
    assert_eq!(accepted.detail["requestedBy"], json!("sluice"));
    assert_eq!(accepted.detail["driftRerunsUsed"], json!(1));
    let drift = last(&sim, POST_RUN_DRIFT);
    assert_eq!(drift.detail["sensor"], json!("quality"));
    assert_eq!(drift.detail["field"], json!("count"));
    assert_eq!(drift.detail["baseline"], json!(500.0));
    assert_eq!(drift.detail["current"], json!(511.0));
    assert_eq!(drift.detail["delta"], json!(11.0));
    assert_eq!(drift.detail["threshold"], json!(10.0));
    assert_eq!(drift.detail["rerun"], json!(true));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    assert_eq!(gold_run(&sim).drift_reruns_used, 1);
    assert_eq!(
        gold_run(&sim).manual_reruns_used,
        0,
        "drift reruns do not spend maxManualReruns"
    );
}

#[test]
fn post_run_drift_without_a_rerun_once_max_drift_reruns_is_spent() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({"job": {"maxDriftReruns": 1}})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 600}));
    sim.job("gold", RUN2, JobStatus::Running, None);
    sim.job("gold", RUN2, JobStatus::Succeeded, None);
    // The rerun's success took a new baseline (600).
    assert_eq!(
        last(&sim, POST_RUN_BASELINE_CAPTURED).detail["baseline"]["quality"]["count"],
        json!(600)
    );
    let mark = sim.events.len();
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 605}));
    assert_eq!(
        since(&sim, mark),
        [POST_RUN_PASSED],
        "within the threshold of the new baseline"
    );
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 700}));
    assert_eq!(since(&sim, mark), [POST_RUN_PASSED, POST_RUN_PASSED, POST_RUN_DRIFT]);
    let drift = last(&sim, POST_RUN_DRIFT);
    assert_eq!(drift.detail["rerun"], json!(false));
    assert_eq!(drift.detail["baseline"], json!(600.0));
    assert!(
        drift.message.contains("maxDriftReruns (1) is spent"),
        "{}",
        drift.message
    );
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    assert!(matches!(gold_run(&sim).phase, Phase::Succeeded { .. }));
}

#[test]
fn post_run_drift_inflight_when_the_drifting_sensor_arrives_during_a_rerun() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({"job": {"maxDriftReruns": 2}})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 600}));
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    sim.job("gold", RUN2, JobStatus::Running, None);
    let mark = sim.events.len();
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 900}));
    assert_eq!(since(&sim, mark), [POST_RUN_DRIFT_INFLIGHT]);
    let inflight = last(&sim, POST_RUN_DRIFT_INFLIGHT);
    assert_eq!(inflight.run_id.as_deref(), Some(RUN2));
    assert_eq!(inflight.detail["current"], json!(900.0));
    // Nothing else is started while the rerun is in flight, and no budget is spent.
    assert_eq!(run_ids(&sim), [RUN1, RUN2]);
    assert_eq!(gold_run(&sim).drift_reruns_used, 1);
    // A reading within the threshold during the rerun says nothing.
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 505}));
    assert_eq!(since(&sim, mark), [POST_RUN_DRIFT_INFLIGHT]);
}

#[test]
fn post_run_sensor_missing_after_the_sensor_timeout() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    let mark = sim.events.len();
    sim.advance(TimeDelta::hours(2) - TimeDelta::seconds(1));
    assert_eq!(since(&sim, mark), []);
    sim.advance(TimeDelta::seconds(1));
    assert_eq!(since(&sim, mark), [POST_RUN_SENSOR_MISSING]);
    let missing = last(&sim, POST_RUN_SENSOR_MISSING);
    assert_eq!(missing.detail["sensors"], json!(["quality"]));
    assert_eq!(missing.timestamp, t0() + TimeDelta::hours(2));
    assert!(missing.message.contains("2h"), "{}", missing.message);
    sim.advance(TimeDelta::days(1));
    assert_eq!(sim.of(POST_RUN_SENSOR_MISSING).len(), 1);
}

/// As the earlier design: a run with no post-run sensor to take a baseline of (the keys
/// are written elsewhere, or later) gets no baseline and no POST_RUN_SENSOR_MISSING; its
/// post-run rules still judge a reading that comes.
#[test]
fn no_post_run_baseline_no_sensor_missing() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({})));
    start(&mut sim);
    sim.job("gold", RUN1, JobStatus::Running, None);
    let mark = sim.events.len();
    sim.job("gold", RUN1, JobStatus::Succeeded, None);
    assert_eq!(since(&sim, mark), [JOB_COMPLETED]);
    sim.advance(TimeDelta::hours(5));
    assert_eq!(since(&sim, mark), [JOB_COMPLETED]);
    sim.sensor("gold", "quality", json!({"status": "corrupt", "count": 500}));
    assert_eq!(since(&sim, mark), [JOB_COMPLETED, POST_RUN_FAILED]);
}

/// The earlier design checked missing post-run sensors for today's daily run only: an
/// hourly run's baseline is taken, but nothing is ever missing.
#[test]
fn an_hourly_run_is_never_post_run_sensor_missing() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({})));
    let hour = Some(7);
    sim.sensor_scoped(
        "gold",
        "quality",
        json!({"status": "ok", "count": 500}),
        Some(DAY),
        hour,
        None,
    );
    sim.sensor_scoped("gold", "row-count", json!({"count": 2000}), Some(DAY), hour, None);
    sim.sensor_scoped("gold", "upstream", json!({"status": "ready"}), Some(DAY), hour, None);
    let date = format!("{DAY}T07");
    let mark = sim.events.len();
    sim.job_for("gold", "stream", &date, JobStatus::Succeeded);
    assert_eq!(
        since(&sim, mark),
        [JOB_TRIGGERED, JOB_COMPLETED, POST_RUN_BASELINE_CAPTURED]
    );
    sim.advance(TimeDelta::hours(5));
    assert!(sim.of(POST_RUN_SENSOR_MISSING).is_empty(), "{:?}", sim.types());
}

// ---- Dry run ----

/// `gold` in a dry run with an SLA at `deadline` and a 30-minute expected duration.
fn dry(deadline: &str) -> Value {
    gold_post_run(json!({
        "dryRun": true,
        "sla": {"deadline": deadline, "deadlineDay": "dataDate", "expectedDuration": "30m"},
        "job": {"maxRetries": 1, "maxDriftReruns": 1}
    }))
}

/// What a dry run may publish besides its DRY_RUN_* events: as Interlock's, nothing that
/// pages anyone.
fn allowed_in_a_dry_run(kind: EventType) -> bool {
    kind.category() == crate::core::events::Category::DryRun
        || matches!(
            kind,
            PIPELINE_EXCLUDED | CONFIG_ACCEPTED | CONFIG_REJECTED | INPUT_REJECTED
        )
}

fn assert_no_real_events(sim: &Sim) {
    let real: Vec<EventType> = sim.types().into_iter().filter(|k| !allowed_in_a_dry_run(*k)).collect();
    assert!(real.is_empty(), "a dry run published {real:?}");
}

/// The types a dry run would have reported (DRY_RUN_WOULD_REPORT's `wouldReport`).
fn would_report(sim: &Sim) -> Vec<String> {
    let told = sim.of(DRY_RUN_WOULD_REPORT).into_iter();
    told.map(|e| e.detail["wouldReport"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn dry_run_would_report_what_a_live_run_would_alert_and_pages_no_one() {
    // Rules that never pass, a cron time nothing starts by, a trigger deadline, a sensor no
    // rule reads: each a real alert in a live run.
    let mut sim = Sim::new();
    sim.config(gold(json!({"dryRun": true,
        "schedule": {"evaluation": {"window": "1h", "interval": "5m"}, "time": "09:00",
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready",
                "deadline": "10:00"}}})));
    sim.sensor("gold", "row-count", json!({"count": 10}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.sensor("gold", "rows-typo", json!({"count": 10}));
    sim.advance(TimeDelta::hours(4));
    assert_no_real_events(&sim);
    let told = would_report(&sim);
    for kind in ["VALIDATION_EXHAUSTED", "UNKNOWN_SENSOR"] {
        assert!(told.iter().any(|t| t == kind), "{kind} not in {told:?}");
    }
    let exhausted = sim
        .of(DRY_RUN_WOULD_REPORT)
        .into_iter()
        .find(|e| e.detail["wouldReport"] == "VALIDATION_EXHAUSTED");
    let exhausted = exhausted.unwrap();
    assert!(
        exhausted
            .message
            .starts_with("dry run: Sluice would report VALIDATION_EXHAUSTED"),
        "{}",
        exhausted.message
    );
    assert!(
        exhausted.detail.get("actionHint").is_none(),
        "nothing for a person to do"
    );
    // The same pipeline live raises the real alert.
    let mut live = Sim::new();
    live.config(gold(
        json!({"schedule": {"evaluation": {"window": "1h", "interval": "5m"},
        "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"}}}),
    ));
    live.sensor("gold", "row-count", json!({"count": 10}));
    live.sensor("gold", "upstream", json!({"status": "ready"}));
    live.advance(TimeDelta::hours(2));
    assert!(live.types().contains(&VALIDATION_EXHAUSTED), "{:?}", live.types());
}

#[test]
fn dry_run_would_trigger_with_no_effect_and_no_real_events() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, DRY_RUN_WOULD_TRIGGER, DRY_RUN_SLA_PROJECTION]
    );
    assert_eq!(last(&sim, DRY_RUN_WOULD_TRIGGER).detail["jobType"], json!("command"));
    assert!(sim.triggers().is_empty());
    assert!(matches!(gold_run(&sim).phase, Phase::WouldHaveTriggered { .. }));
    // Past the deadline and a whole day on: no SLA alert, no stale run.
    sim.advance(TimeDelta::days(1));
    assert_eq!(sim.events.len(), 3, "{:?}", sim.types());
    assert!(sim.only_expiry_left(), "{:?}", sim.timers);
    assert_no_real_events(&sim);
}

#[test]
fn dry_run_sla_projection_met_when_the_expected_duration_fits_before_the_deadline() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    let projection = last(&sim, DRY_RUN_SLA_PROJECTION);
    assert_eq!(projection.detail["met"], json!(true));
    assert_eq!(projection.detail["status"], json!("met"));
    assert_eq!(projection.detail["marginSeconds"], json!(90 * 60));
    assert_eq!(projection.detail["deadline"], json!("2026-11-22T10:00:00Z"));
    assert_eq!(projection.detail["projectedCompletion"], json!("2026-11-22T08:30:00Z"));
    assert!(projection.message.contains("would meet"));
}

#[test]
fn dry_run_sla_projection_missed_when_the_expected_duration_overruns_the_deadline() {
    let mut sim = Sim::new();
    sim.config(dry("08:15"));
    start(&mut sim);
    let projection = last(&sim, DRY_RUN_SLA_PROJECTION);
    assert_eq!(projection.detail["met"], json!(false));
    assert_eq!(projection.detail["status"], json!("breach"));
    assert_eq!(projection.detail["marginSeconds"], json!(-15 * 60));
    assert!(projection.message.contains("would miss"));
    sim.advance(TimeDelta::hours(2));
    assert_no_real_events(&sim);
}

#[test]
fn dry_run_late_data_when_a_validation_sensor_changes_after_the_would_be_trigger() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    let mark = sim.events.len();
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    assert_eq!(since(&sim, mark), [], "unchanged data is not late");
    sim.sensor("gold", "row-count", json!({"count": 3000}));
    assert_eq!(since(&sim, mark), [DRY_RUN_LATE_DATA]);
    assert_eq!(last(&sim, DRY_RUN_LATE_DATA).detail["sensor"], json!("row-count"));
    assert_no_real_events(&sim);
}

#[test]
fn dry_run_drift_when_a_post_run_sensor_moves_beyond_the_threshold() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    let mark = sim.events.len();
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 700}));
    assert!(since(&sim, mark).contains(&DRY_RUN_DRIFT), "{:?}", since(&sim, mark));
    let drift = last(&sim, DRY_RUN_DRIFT);
    assert_eq!(drift.detail["baseline"], json!(500.0));
    assert_eq!(drift.detail["current"], json!(700.0));
    assert!(drift.message.contains("a rerun would start"), "{}", drift.message);
    assert!(sim.triggers().is_empty());
    assert!(matches!(gold_run(&sim).phase, Phase::WouldHaveTriggered { .. }));
    assert_eq!(gold_run(&sim).drift_reruns_used, 0);
    assert_no_real_events(&sim);
}

#[test]
fn dry_run_completed_reports_the_old_orchestrators_job_with_the_sla_verdict() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    sim.advance(TimeDelta::minutes(20));
    let mark = sim.events.len();
    report(&mut sim, "gold", DAY, "airflow-manual-42", JobStatus::Running);
    report(&mut sim, "gold", DAY, "airflow-manual-42", JobStatus::Succeeded);
    assert_eq!(since(&sim, mark), [DRY_RUN_COMPLETED]);
    let completed = last(&sim, DRY_RUN_COMPLETED);
    assert_eq!(completed.run_id.as_deref(), Some("airflow-manual-42"));
    assert_eq!(completed.detail["sla"]["met"], json!(true));
    assert_eq!(completed.detail["sla"]["marginSeconds"], json!(100 * 60));
    assert_no_real_events(&sim);

    // Completed after the deadline: the verdict says so, and still no SLA event.
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    sim.advance(TimeDelta::minutes(150));
    report(&mut sim, "gold", DAY, "airflow-manual-43", JobStatus::Succeeded);
    let completed = last(&sim, DRY_RUN_COMPLETED);
    assert_eq!(completed.detail["sla"]["met"], json!(false));
    assert_eq!(completed.detail["sla"]["status"], json!("breach"));
    assert_no_real_events(&sim);
}

#[test]
fn dry_run_would_retry_then_dry_run_retry_exhausted_on_failure_reports() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    let mark = sim.events.len();
    report(&mut sim, "gold", DAY, "airflow-1", JobStatus::Failed);
    report(&mut sim, "gold", DAY, "airflow-2", JobStatus::Timeout);
    assert_eq!(since(&sim, mark), [DRY_RUN_WOULD_RETRY, DRY_RUN_RETRY_EXHAUSTED]);
    let retry = last(&sim, DRY_RUN_WOULD_RETRY);
    assert_eq!(retry.run_id.as_deref(), Some("airflow-1"));
    assert_eq!(retry.detail["budget"], json!("maxRetries"));
    assert_eq!(retry.detail["limit"], json!(1));
    let exhausted = last(&sim, DRY_RUN_RETRY_EXHAUSTED);
    assert_eq!(exhausted.detail["failureCategory"], json!("TIMEOUT"));
    assert!(sim.triggers().is_empty());
    assert_no_real_events(&sim);
}

#[test]
fn dry_run_would_rerun_and_dry_run_rerun_rejected_on_rerun_commands() {
    let mut sim = Sim::new();
    sim.config(dry("10:00"));
    start(&mut sim);
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [DRY_RUN_RERUN_REJECTED]);
    let why = last(&sim, DRY_RUN_RERUN_REJECTED).detail["rejection"].as_str().unwrap();
    assert!(why.contains("no sensor data changed"), "{why}");
    sim.sensor("gold", "row-count", json!({"count": 4000}));
    let mark = sim.events.len();
    command(&mut sim, "gold", CommandKind::Rerun, DAY);
    assert_eq!(since(&sim, mark), [DRY_RUN_WOULD_RERUN]);
    assert!(last(&sim, DRY_RUN_WOULD_RERUN).message.contains("would start"));
    // Nothing actually reran: no trigger, no budget spent, the phase is unchanged.
    assert!(sim.triggers().is_empty());
    assert_eq!(gold_run(&sim).manual_reruns_used, 0);
    assert!(matches!(gold_run(&sim).phase, Phase::WouldHaveTriggered { .. }));
    assert_no_real_events(&sim);
}

// ---- INPUT_REJECTED for clock skew; age rules never trust the future ----

#[test]
fn input_rejected_for_a_sensor_timestamped_beyond_the_clock_skew() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    let before = sim.states["gold"].clone();
    let ahead = sim.now + TimeDelta::minutes(6);
    let decision = sim.sensor_scoped("gold", "upstream", json!({"status": "ready"}), None, None, Some(ahead));
    assert_eq!(decision.state, StateChange::Unchanged);
    assert_eq!(sim.states["gold"], before);
    let reason = decision.dead_letter.expect("the record goes to the dead letters");
    assert!(reason.contains("in the future"), "{reason}");
    assert!(reason.contains("5m"), "{reason}");
    assert_eq!(since(&sim, 1), [INPUT_REJECTED]);
    assert_eq!(last(&sim, INPUT_REJECTED).detail["error"], json!(reason));
    assert!(sim.triggers().is_empty());
    // Within the allowed skew the same reading is accepted.
    let ahead = sim.now + TimeDelta::minutes(4);
    let decision = sim.sensor_scoped("gold", "upstream", json!({"status": "ready"}), None, None, Some(ahead));
    assert!(decision.dead_letter.is_none());
    assert_eq!(run_ids(&sim), [RUN1]);
}

// ---- Limits: INPUT_REJECTED / CONFIG_REJECTED naming the limit ----

#[test]
fn input_rejected_for_a_sensor_reading_beyond_the_pipelines_limit_of_readings() {
    let mut sim = Sim::new();
    sim.settings.limits.sensors = 2;
    sim.config(gold(json!({})));
    sim.sensor("gold", "row-count", json!({"count": 10}));
    sim.sensor("gold", "other", json!({"n": 1}));
    let before = sim.states["gold"].clone();
    let decision = sim.sensor("gold", "third", json!({"n": 1}));
    let reason = decision.dead_letter.expect("the record goes to the dead letters");
    assert!(reason.contains("--max-sensors-per-pipeline"), "{reason}");
    assert_eq!(
        since(&sim, 1),
        [UNKNOWN_SENSOR, INPUT_REJECTED],
        "\"other\" is read by no rule"
    );
    assert_eq!(sim.states["gold"], before);
    // A reading of a key already kept replaces it: not refused.
    let decision = sim.sensor("gold", "row-count", json!({"count": 2000}));
    assert!(decision.dead_letter.is_none());
    assert_eq!(sim.states["gold"].sensors["row-count"].data["count"], json!(2000));
}

#[test]
fn config_rejected_for_more_rules_than_the_limit_and_the_previous_config_stays() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.settings.limits.rules = 1;
    let decision = sim.config(gold(json!({"validation": {"rules": [
        {"key": "a", "check": "exists"}, {"key": "b", "check": "exists"}
    ]}})));
    let reason = decision.dead_letter.expect("the record goes to the dead letters");
    assert!(reason.contains("--max-rules"), "{reason}");
    assert_eq!(since(&sim, 1), [CONFIG_REJECTED]);
    assert_eq!(last(&sim, CONFIG_REJECTED).detail["previousConfigKept"], json!(true));
}

#[test]
fn validation_passed_never_comes_from_a_data_timestamp_in_the_future_for_an_age_lt_rule() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"validation": {"rules": [
        {"key": "fresh", "check": "age_lt", "field": "updatedAt", "value": "1h"}
    ]}})));
    let future = sim.now + TimeDelta::hours(1);
    sim.sensor("gold", "fresh", json!({"updatedAt": future.to_rfc3339()}));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert!(sim.of(VALIDATION_PASSED).is_empty());
    let verdict = gold_run(&sim).last_verdict.clone().unwrap();
    assert!(verdict.failures().contains("in the future"), "{}", verdict.failures());
    // A real, recent timestamp passes.
    let recent = sim.now - TimeDelta::minutes(10);
    sim.sensor("gold", "fresh", json!({"updatedAt": recent.timestamp()}));
    assert_eq!(sim.of(VALIDATION_PASSED).len(), 1);
}

// ---- Hourly executions ----

fn hourly_sensor(sim: &mut Sim, pipeline: &str, key: &str, data: Value, hour: u32) -> Decision {
    sim.sensor_scoped(pipeline, key, data, Some(DAY), Some(hour), None)
}

/// Under a daily deadline an hour's met SLA needs no breach timer, so the hour is quiet (not
/// read with every decision until 23:00); the day's own breach, the SLA chain's link, stays.
#[test]
fn sla_met_in_an_hourly_run_under_a_daily_deadline_leaves_the_hour_quiet() {
    let mut sim = Sim::new();
    sim.config(gold(json!({
        "job": {"config": {"command": "run ${DATE} ${HOUR} ${RUN_ID}"}},
        "sla": {"deadline": "23:00", "deadlineDay": "dataDate"}
    })));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    hourly_sensor(&mut sim, "gold", "upstream", json!({"status": "ready"}), 8);
    let (h8, run8) = ("2026-11-22T08", "gold.stream.2026-11-22T08.1");
    let hour: crate::core::execution::ExecutionId = format!("stream/{h8}").parse().unwrap();
    let breach = |execution| TimerKind::SlaBreach { execution };
    assert!(sim.due("gold", &breach(hour.clone())).is_some(), "armed while it runs");
    report(&mut sim, "gold", h8, run8, JobStatus::Running);
    report(&mut sim, "gold", h8, run8, JobStatus::Succeeded);
    assert_eq!(last(&sim, SLA_MET).date.as_deref(), Some(h8));
    assert_eq!(sim.due("gold", &breach(hour.clone())), None);
    assert!(!sim.states["gold"].live().contains(&hour), "the met hour is quiet");
    let day = breach(KEY.parse().unwrap());
    assert!(sim.due("gold", &day).is_some(), "the chain's daily link stays");
    sim.assert_timers_agree("gold");
}

#[test]
fn job_failed_in_an_hourly_run_retries_and_breaches_its_sla_within_its_hour() {
    let mut sim = Sim::new();
    sim.config(gold(json!({
        "job": {"config": {"command": "run ${DATE} ${HOUR} ${RUN_ID}"}, "maxRetries": 1, "jobPollWindowSeconds": 7200},
        "sla": {"deadline": ":30"}
    })));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    hourly_sensor(&mut sim, "gold", "upstream", json!({"status": "ready"}), 8);
    hourly_sensor(&mut sim, "gold", "upstream", json!({"status": "ready"}), 9);
    let (h8, h9) = ("2026-11-22T08", "2026-11-22T09");
    let (run8, run9) = ("gold.stream.2026-11-22T08.1", "gold.stream.2026-11-22T09.1");
    assert_eq!(run_ids(&sim), [run8, run9]);
    assert_eq!(
        sim.triggers()[0].config.json(),
        json!({"command": format!("run 2026-11-22 08 {run8}")})
    );
    assert_eq!(sim.triggers()[0].execution.date_text(), h8);

    report(&mut sim, "gold", h8, run8, JobStatus::Failed);
    let failed = last(&sim, JOB_FAILED);
    assert_eq!(failed.date.as_deref(), Some(h8));
    assert_eq!(failed.detail["willRetry"], json!(true));
    assert_eq!(run_ids(&sim), [run8, run9, "gold.stream.2026-11-22T08.2"]);
    assert_eq!(execution(&sim, "gold", &format!("stream/{h8}")).retries_used, 1);
    assert_eq!(execution(&sim, "gold", &format!("stream/{h9}")).retries_used, 0);
    report(&mut sim, "gold", h8, "gold.stream.2026-11-22T08.2", JobStatus::Failed);
    assert_eq!(last(&sim, RETRY_EXHAUSTED).date.as_deref(), Some(h8));
    // Hour 9 still has its whole budget.
    report(&mut sim, "gold", h9, run9, JobStatus::Failed);
    assert_eq!(last(&sim, JOB_FAILED).detail["willRetry"], json!(true));
    assert_eq!(sim.of(RETRY_EXHAUSTED).len(), 1);
    report(&mut sim, "gold", h9, "gold.stream.2026-11-22T09.2", JobStatus::Running);
    // Hour 8's SLA is 09:30 and hour 9's is 10:30; each breaches alone.
    sim.advance_to(super::at("2026-11-22T09:30:00Z"));
    // (Hour 7 breaches too, at 08:30: hourly SLAs are per hour whether or not data came.)
    let ours = |sim: &Sim| -> Vec<String> {
        sim.of(SLA_BREACH)
            .iter()
            .filter_map(|e| e.date.clone())
            .filter(|d| d.as_str() == h8 || d.as_str() == h9)
            .collect()
    };
    assert_eq!(ours(&sim), [h8]);
    report(
        &mut sim,
        "gold",
        h9,
        "gold.stream.2026-11-22T09.2",
        JobStatus::Succeeded,
    );
    sim.advance_to(super::at("2026-11-22T11:00:00Z"));
    assert_eq!(ours(&sim), [h8], "hour 9 completed in time");
    assert_eq!(last(&sim, SLA_MET).date.as_deref(), Some(h9));
}

// ---- dependsOn ----

/// Pipeline `id` started by sensor `landed` with no rules: it triggers at once.
fn source(id: &str) -> Value {
    json!({
        "pipeline": {"id": id, "owner": "data"},
        "schedule": {
            "trigger": {"key": "landed", "check": "exists"},
            "evaluation": {"window": "1h", "interval": "5m"}
        },
        "validation": {"trigger": "ALL", "rules": []},
        "job": {"type": "command", "config": {"command": "load ${DATE}"}}
    })
}

/// Pipeline `id` that runs when every upstream in `upstreams` has succeeded for the date.
fn downstream(id: &str, upstreams: &[&str]) -> Value {
    json!({
        "pipeline": {"id": id, "owner": "data"},
        "dependsOn": upstreams,
        "schedule": {"evaluation": {"window": "2h", "interval": "5m"}},
        "job": {"type": "command", "config": {"command": "build ${DATE} ${HOUR}"}}
    })
}

fn commands_to(records: &[Outbound], pipeline: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r.topic == OutboundTopic::Commands && r.key == pipeline)
        .map(|r| r.value.clone())
        .collect()
}

fn sensors_to(records: &[Outbound], pipeline: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r.topic == OutboundTopic::Sensors && r.key == pipeline)
        .map(|r| r.value.clone())
        .collect()
}

fn phase_of<'s>(sim: &'s Sim, pipeline: &str, date: &str) -> &'s Phase {
    &execution(sim, pipeline, &format!("stream/{date}")).phase
}

#[test]
fn config_accepted_for_a_downstream_sends_subscribe_to_its_upstream() {
    let mut sim = Sim::new();
    let decision = sim.config(downstream("silver", &["bronze"]));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    assert_eq!(decision.records.len(), 1);
    let record = &decision.records[0];
    assert_eq!((record.topic, record.key.as_str()), (OutboundTopic::Commands, "bronze"));
    assert_eq!(record.value["pipelineId"], json!("bronze"));
    assert_eq!(record.value["command"], json!("subscribe"));
    assert_eq!(record.value["subscriber"], json!("silver"));
    assert_eq!(record.value["key"], json!("upstream:bronze"));
    // The same config again subscribes again (an upstream re-created meanwhile is healed);
    // the upstream ignores the repeat.
    let again = sim.config(downstream("silver", &["bronze"]));
    assert_eq!(again.records.len(), 1, "{:?}", again.records);
    let moved = sim.config(downstream("silver", &["copper"]));
    assert_eq!(commands_to(&moved.records, "copper")[0]["command"], json!("subscribe"));
    assert_eq!(
        commands_to(&moved.records, "bronze")[0]["command"],
        json!("unsubscribe")
    );
}

#[test]
fn job_completed_upstream_sends_the_downstream_a_sensor_that_starts_and_passes_its_execution() {
    let mut sim = Sim::new();
    sim.config(source("bronze"));
    let subscribe = sim.config(downstream("silver", &["bronze"]));
    route(&mut sim, subscribe);
    assert_eq!(
        sim.states["bronze"].dependents.get("silver").map(String::as_str),
        Some("upstream:bronze")
    );
    sim.sensor("bronze", "landed", json!({"rows": 10}));
    let run_id = "bronze.stream.2026-11-22.1";
    report(&mut sim, "bronze", DAY, run_id, JobStatus::Running);
    sim.advance(TimeDelta::minutes(20));
    let done = report(&mut sim, "bronze", DAY, run_id, JobStatus::Succeeded);
    let sensors = sensors_to(&done.records, "silver");
    assert_eq!(sensors.len(), 1, "{:?}", done.records);
    let sensor = &sensors[0];
    assert_eq!(sensor["pipelineId"], json!("silver"));
    assert_eq!(sensor["key"], json!("upstream:bronze"));
    assert_eq!(sensor["date"], json!(DAY));
    assert!(sensor.get("hour").is_none());
    assert_eq!(sensor["data"]["status"], json!("succeeded"));
    assert_eq!(sensor["data"]["upstream"], json!("bronze"));
    assert_eq!(sensor["data"]["runId"], json!(run_id));
    // Fed to silver, it starts and passes silver's execution for the same date.
    let mark = sim.events.len();
    route(&mut sim, done);
    let silver: Vec<EventType> = sim.events[mark..]
        .iter()
        .filter(|e| e.pipeline_id == "silver")
        .map(|e| e.kind)
        .collect();
    assert_eq!(silver, [VALIDATION_PASSED]);
    assert_eq!(last(&sim, VALIDATION_PASSED).date.as_deref(), Some(DAY));
    let trigger = sim.triggers().into_iter().find(|t| t.pipeline_id == "silver").unwrap();
    assert_eq!(trigger.run_id, "silver.stream.2026-11-22.1");
    assert!(matches!(phase_of(&sim, "silver", DAY), Phase::AwaitingTrigger { .. }));
}

#[test]
fn job_completed_upstream_for_an_hourly_run_sends_the_downstream_the_same_hour() {
    let mut sim = Sim::new();
    sim.config(source("bronze"));
    let subscribe = sim.config(downstream("silver", &["bronze"]));
    route(&mut sim, subscribe);
    hourly_sensor(&mut sim, "bronze", "landed", json!({}), 7);
    let records = complete(&mut sim, "bronze", "2026-11-22T07");
    let sensor = &sensors_to(&records, "silver")[0];
    assert_eq!(sensor["date"], json!(DAY));
    assert_eq!(sensor["hour"], json!(7));
    assert_eq!(sensor["data"]["date"], json!("2026-11-22T07"));
    let trigger = sim.triggers().into_iter().find(|t| t.pipeline_id == "silver").unwrap();
    assert_eq!(trigger.execution.date_text(), "2026-11-22T07");
    assert_eq!(trigger.config.json(), json!({"command": "build 2026-11-22 07"}));
}

#[test]
fn validation_passed_for_a_fan_in_only_once_every_upstream_succeeded_for_the_same_date() {
    let mut sim = Sim::new();
    sim.config(source("bronze"));
    sim.config(source("orders"));
    let subscribe = sim.config(downstream("report", &["bronze", "orders"]));
    assert_eq!(commands_to(&subscribe.records, "bronze").len(), 1);
    assert_eq!(commands_to(&subscribe.records, "orders").len(), 1);
    route(&mut sim, subscribe);

    sim.sensor("bronze", "landed", json!({}));
    complete(&mut sim, "bronze", DAY);
    assert_eq!(*phase_of(&sim, "report", DAY), Phase::AwaitingRules);
    let waiting = execution(&sim, "report", KEY).last_verdict.clone().unwrap();
    assert!(waiting.failures().contains("upstream:orders"), "{}", waiting.failures());

    // orders completing another date does not help today's report.
    sim.sensor_scoped("orders", "landed", json!({}), Some("2026-11-21"), None, None);
    complete(&mut sim, "orders", "2026-11-21");
    assert_eq!(*phase_of(&sim, "report", DAY), Phase::AwaitingRules);
    assert!(sim
        .triggers()
        .iter()
        .all(|t| t.pipeline_id != "report" || t.execution.date_text() != DAY));

    sim.sensor("orders", "landed", json!({}));
    complete(&mut sim, "orders", DAY);
    assert!(matches!(phase_of(&sim, "report", DAY), Phase::AwaitingTrigger { .. }));
    let passed: Vec<&Event> = sim
        .of(VALIDATION_PASSED)
        .into_iter()
        .filter(|e| e.pipeline_id == "report" && e.date.as_deref() == Some(DAY))
        .collect();
    assert_eq!(passed.len(), 1);
}

#[test]
fn job_completed_before_the_subscription_is_replayed_to_the_new_subscriber() {
    let mut sim = Sim::new();
    sim.config(source("bronze"));
    sim.sensor("bronze", "landed", json!({}));
    let nothing = complete(&mut sim, "bronze", DAY);
    assert!(nothing.is_empty(), "no dependents yet");
    let subscribe = sim.config(downstream("silver", &["bronze"]));
    let routed = route(&mut sim, subscribe);
    let replayed = sensors_to(&routed, "silver");
    assert_eq!(replayed.len(), 1, "{routed:?}");
    assert_eq!(replayed[0]["data"]["runId"], json!("bronze.stream.2026-11-22.1"));
    assert!(matches!(phase_of(&sim, "silver", DAY), Phase::AwaitingTrigger { .. }));
}

#[test]
fn config_accepted_for_a_deleted_downstream_sends_unsubscribe() {
    let mut sim = Sim::new();
    sim.config(source("bronze"));
    let subscribe = sim.config(downstream("silver", &["bronze"]));
    route(&mut sim, subscribe);
    let deleted = sim.delete("silver");
    let unsubscribe = commands_to(&deleted.records, "bronze");
    assert_eq!(unsubscribe.len(), 1);
    assert_eq!(unsubscribe[0]["command"], json!("unsubscribe"));
    assert_eq!(unsubscribe[0]["subscriber"], json!("silver"));
    route(&mut sim, deleted);
    assert!(sim.states["bronze"].dependents.is_empty());
    sim.sensor("bronze", "landed", json!({}));
    let records = complete(&mut sim, "bronze", DAY);
    assert!(records.is_empty(), "{records:?}");
}

#[test]
fn job_completed_flows_down_a_bronze_silver_gold_chain() {
    let mut sim = Sim::new();
    // Configs in an order that makes subscriptions arrive both before and after.
    let gold = sim.config(downstream("gold", &["silver"]));
    route(&mut sim, gold);
    sim.config(source("bronze"));
    let silver = sim.config(downstream("silver", &["bronze"]));
    route(&mut sim, silver);

    sim.sensor("bronze", "landed", json!({}));
    complete(&mut sim, "bronze", DAY);
    assert!(matches!(phase_of(&sim, "silver", DAY), Phase::AwaitingTrigger { .. }));
    assert!(
        !sim.states["gold"].executions.contains_key(&KEY.parse().unwrap()),
        "gold waits for silver"
    );
    complete(&mut sim, "silver", DAY);
    assert!(matches!(phase_of(&sim, "gold", DAY), Phase::AwaitingTrigger { .. }));
    complete(&mut sim, "gold", DAY);
    assert!(matches!(phase_of(&sim, "gold", DAY), Phase::Succeeded { .. }));
    let order: Vec<&str> = sim.of(JOB_COMPLETED).iter().map(|e| e.pipeline_id.as_str()).collect();
    assert_eq!(order, ["bronze", "silver", "gold"]);
    let runs: Vec<&str> = run_ids(&sim);
    assert_eq!(
        runs,
        [
            "bronze.stream.2026-11-22.1",
            "silver.stream.2026-11-22.1",
            "gold.stream.2026-11-22.1"
        ]
    );
}

#[test]
fn post_run_passed_for_an_undated_sensor_after_midnight_is_about_the_run_that_succeeded() {
    let mut sim = Sim::new();
    sim.config(gold_post_run(json!({"postRun": {"sensorTimeout": "24h"}})));
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 500}));
    succeed(&mut sim);
    sim.advance_to(t0() + TimeDelta::minutes(16 * 60 + 30)); // 00:30 the next day
    let mark = sim.events.len();
    sim.sensor("gold", "quality", json!({"status": "ok", "count": 502}));
    assert_eq!(since(&sim, mark), [POST_RUN_PASSED]);
    assert_eq!(last(&sim, POST_RUN_PASSED).date.as_deref(), Some(DAY));
    sim.advance(TimeDelta::hours(12));
    assert_eq!(
        since(&sim, mark),
        [POST_RUN_PASSED],
        "no POST_RUN_SENSOR_MISSING for yesterday"
    );
}

#[test]
fn dry_run_completed_upstream_still_lets_its_downstream_run() {
    let mut sim = Sim::new();
    let mut upstream = source("bronze");
    upstream["dryRun"] = json!(true);
    sim.config(upstream);
    let subscribe = sim.config(downstream("silver", &["bronze"]));
    route(&mut sim, subscribe);
    sim.sensor("bronze", "landed", json!({"rows": 10}));
    // The old orchestrator ran the job and reports it.
    let done = report(&mut sim, "bronze", DAY, "legacy-run-7", JobStatus::Succeeded);
    assert!(sim.types().contains(&DRY_RUN_COMPLETED));
    let routed = route(&mut sim, done);
    assert_eq!(routed.len(), 1, "{routed:?}");
    assert_eq!(routed[0].value["data"]["runId"], json!("legacy-run-7"));
    let silver = &sim.states["silver"].executions[&crate::core::execution::id("stream", DAY)];
    assert!(silver.phase.is_running(), "{:?}", silver.phase);
}

/// A report on `gold`'s execution with metadata (a trigger's handle, say).
fn report_with(
    sim: &mut Sim,
    run_id: &str,
    status: JobStatus,
    category: Option<FailureCategory>,
    metadata: Value,
) -> Decision {
    let record = JobRecord {
        pipeline_id: "gold".into(),
        schedule_id: "stream".into(),
        date: DAY.into(),
        run_id: run_id.into(),
        status,
        failure_category: category,
        message: Some(format!("{} says {}", run_id, status.as_str())),
        metadata: Some(metadata),
        timestamp: sim.now,
    };
    sim.input("gold", Input::JobReported(record.parse().unwrap()))
}

/// `gold`'s first run reports running with Databricks run 42 as its handle.
fn still_running(sim: &mut Sim) {
    report_with(sim, RUN1, JobStatus::Running, None, json!({"handle": {"runId": 42}}));
}

fn status_checks(sim: &Sim) -> Vec<(String, Value)> {
    sim.effects
        .iter()
        .filter_map(|e| match e {
            Effect::CheckJob(c) => Some((c.request.run_id.to_string(), c.handle.clone())),
            _ => None,
        })
        .collect()
}

fn check_timer(run_id: &str) -> TimerKind {
    TimerKind::JobStatusCheck {
        execution: crate::core::execution::id("stream", DAY),
        run_id: run_id.into(),
    }
}

#[test]
fn status_checks_follow_the_handle_at_the_poll_interval() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"type": "databricks", "pollInterval": "1m",
        "config": {"host": "https://dbc.example", "jobId": 7, "token": "${env:DATABRICKS_TOKEN}"}}})));
    start(&mut sim);
    still_running(&mut sim);
    assert_eq!(gold_run(&sim).job_handle, Some(json!({"runId": 42})));
    assert_eq!(
        sim.due("gold", &check_timer(RUN1)),
        Some(sim.now + TimeDelta::minutes(1))
    );
    assert!(status_checks(&sim).is_empty());

    sim.advance(TimeDelta::minutes(1));
    assert_eq!(status_checks(&sim), [(RUN1.to_string(), json!({"runId": 42}))]);
    // The next check is armed before the answer comes: a lost answer is asked again.
    assert_eq!(
        sim.due("gold", &check_timer(RUN1)),
        Some(sim.now + TimeDelta::minutes(1))
    );
    let before = sim.events.len();
    still_running(&mut sim);
    assert_eq!(sim.events.len(), before, "a running status says nothing new");
    sim.advance(TimeDelta::minutes(1));
    assert_eq!(status_checks(&sim).len(), 2);
    // Secrets stay templates in the request: the runtime resolves them at the call.
    let Some(Effect::CheckJob(check)) = sim.effects.last() else {
        panic!("a status check")
    };
    assert_eq!(check.request.config.json()["token"], "${env:DATABRICKS_TOKEN}");

    report_with(
        &mut sim,
        RUN1,
        JobStatus::Succeeded,
        None,
        json!({"state": "TERMINATED"}),
    );
    assert_eq!(*sim.types().last().unwrap(), JOB_COMPLETED);
    assert_eq!(sim.due("gold", &check_timer(RUN1)), None);
    sim.advance(TimeDelta::minutes(10));
    assert_eq!(status_checks(&sim).len(), 2, "no checks after the run ended");
}

#[test]
fn a_job_that_reports_by_itself_is_not_polled() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    report_with(&mut sim, RUN1, JobStatus::Running, None, json!({"pid": 7}));
    assert_eq!(*sim.types().last().unwrap(), JOB_TRIGGERED);
    assert_eq!(sim.due("gold", &check_timer(RUN1)), None);
    sim.advance(TimeDelta::minutes(30));
    assert!(status_checks(&sim).is_empty());
}

#[test]
fn infra_failure_ends_the_run_without_spending_job_retries() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"job": {"maxRetries": 2}})));
    start(&mut sim);
    report_with(
        &mut sim,
        RUN1,
        JobStatus::Failed,
        Some(FailureCategory::Infra),
        json!({"attempts": 4}),
    );
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED, INFRA_FAILURE]);
    let event = sim.of(INFRA_FAILURE)[0];
    assert_eq!(event.run_id.as_deref(), Some(RUN1));
    assert_eq!(event.message, format!("{RUN1} says failed"));
    let run = gold_run(&sim);
    assert!(matches!(run.phase, Phase::Failed { .. }), "{:?}", run.phase);
    assert_eq!(run.retries_used, 0);
    assert_eq!(sim.triggers().len(), 1, "no second attempt");
    assert!(
        sim.only_expiry_left()
            || sim
                .due(
                    "gold",
                    &TimerKind::Watchdog {
                        execution: crate::core::execution::id("stream", DAY)
                    }
                )
                .is_none()
    );
}

/// `gold` as a Databricks job checked every minute, with a 10-minute poll window and
/// retries to spare, its first run started and watched.
fn watched_databricks_run() -> Sim {
    let mut sim = Sim::new();
    sim.config(gold(
        json!({"job": {"type": "databricks", "pollInterval": "1m", "maxRetries": 2,
        "maxCodeRetries": 1, "jobPollWindowSeconds": 600,
        "config": {"host": "https://dbc.example", "jobId": 7, "token": "${env:DATABRICKS_TOKEN}"}}}),
    ));
    start(&mut sim);
    still_running(&mut sim);
    sim
}

/// A status check of `run_id` that could not ask (`category`: INFRA, retries spent, or
/// PERMANENT, the question refused).
fn unanswered(sim: &mut Sim, run_id: &str, category: FailureCategory) -> Decision {
    report_with(sim, run_id, JobStatus::Unknown, Some(category), json!({}))
}

#[test]
fn job_status_unknown_never_ends_a_run_and_the_trigger_starts_no_second_copy() {
    let mut sim = watched_databricks_run();
    sim.advance(TimeDelta::minutes(1));
    let mark = sim.events.len();
    unanswered(&mut sim, RUN1, FailureCategory::Infra);
    assert_eq!(since(&sim, mark), [JOB_STATUS_UNKNOWN]);
    let told = last(&sim, JOB_STATUS_UNKNOWN);
    assert_eq!(told.run_id.as_deref(), Some(RUN1));
    assert_eq!(told.detail["failureCategory"], json!("INFRA"));
    assert_eq!(told.detail["actionNeeded"], json!(false));
    assert!(told.detail["actionHint"].as_str().unwrap().contains("no second copy"));
    assert!(gold_run(&sim).phase.is_running(), "{:?}", gold_run(&sim).phase);
    // The trigger sensor keeps arriving while the status API is down: nothing starts.
    for _ in 0..3 {
        sim.sensor("gold", "upstream", json!({"status": "ready"}));
        unanswered(&mut sim, RUN1, FailureCategory::Infra);
    }
    assert_eq!(since(&sim, mark), [JOB_STATUS_UNKNOWN], "told once per run");
    assert_eq!(run_ids(&sim), [RUN1]);
    assert_eq!((gold_run(&sim).retries_used, gold_run(&sim).code_retries_used), (0, 0));
    // The job answers again: its own outcome ends the run, as always.
    report_with(&mut sim, RUN1, JobStatus::Succeeded, None, json!({}));
    assert_eq!(since(&sim, mark), [JOB_STATUS_UNKNOWN, JOB_COMPLETED]);
    assert_eq!(gold_run(&sim).attempt, 1);
}

#[test]
fn job_status_unknown_when_refused_needs_a_person_and_the_poll_window_still_ends_the_run() {
    let mut sim = watched_databricks_run();
    let mark = sim.events.len();
    unanswered(&mut sim, RUN1, FailureCategory::Infra);
    // IAM lacks the permission to ask: told again, as something a person must fix.
    unanswered(&mut sim, RUN1, FailureCategory::Permanent);
    unanswered(&mut sim, RUN1, FailureCategory::Permanent);
    assert_eq!(since(&sim, mark), [JOB_STATUS_UNKNOWN, JOB_STATUS_UNKNOWN]);
    let refused = last(&sim, JOB_STATUS_UNKNOWN);
    assert_eq!(refused.detail["actionNeeded"], json!(true));
    assert!(refused.detail["actionHint"]
        .as_str()
        .unwrap()
        .contains("glue:GetJobRun"));
    assert_eq!(
        gold_run(&sim).code_retries_used,
        0,
        "a refused question spends no retry"
    );
    // Unanswered to the end: the poll window closes the run, never retried.
    sim.advance(TimeDelta::seconds(600));
    assert_eq!(
        since(&sim, mark),
        [JOB_STATUS_UNKNOWN, JOB_STATUS_UNKNOWN, JOB_POLL_EXHAUSTED]
    );
    assert!(matches!(gold_run(&sim).phase, Phase::Failed { .. }));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.advance(TimeDelta::hours(2));
    assert_eq!(run_ids(&sim), [RUN1], "no second copy beside a job that may still run");
}

#[test]
fn status_checks_back_off_while_unanswered_and_return_to_the_interval_once_answered() {
    let mut sim = watched_databricks_run();
    let due = |sim: &Sim| sim.due("gold", &check_timer(RUN1)).map(|at| at - sim.now);
    for want in [2, 4, 5, 5] {
        unanswered(&mut sim, RUN1, FailureCategory::Infra);
        assert_eq!(due(&sim), Some(TimeDelta::minutes(want)));
    }
    // An answer ends the streak: the next failure backs off from the start again.
    still_running(&mut sim);
    unanswered(&mut sim, RUN1, FailureCategory::Infra);
    assert_eq!(due(&sim), Some(TimeDelta::minutes(2)));
    // The checks keep coming while the run is unanswered.
    let checks = status_checks(&sim).len();
    sim.advance(TimeDelta::minutes(2));
    assert_eq!(status_checks(&sim).len(), checks + 1);
}

#[test]
fn status_check_backoff_doubles_up_to_five_minutes_or_the_interval() {
    use crate::core::lifecycle::job::status_check_backoff;
    let minute = TimeDelta::minutes(1);
    let waits: Vec<_> = (1..=5).map(|n| status_check_backoff(minute, n).num_seconds()).collect();
    assert_eq!(waits, [120, 240, 300, 300, 300]);
    assert_eq!(status_check_backoff(TimeDelta::seconds(10), 1), TimeDelta::seconds(20));
    assert_eq!(status_check_backoff(TimeDelta::minutes(10), 3), TimeDelta::minutes(10));
    assert_eq!(status_check_backoff(minute, u32::MAX), TimeDelta::minutes(5));
}

#[test]
fn an_unknown_status_before_the_job_started_changes_nothing() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    start(&mut sim);
    let mark = sim.events.len();
    unanswered(&mut sim, RUN1, FailureCategory::Infra);
    assert!(since(&sim, mark).is_empty());
    assert!(matches!(gold_run(&sim).phase, Phase::AwaitingTrigger { .. }));
}

// ---- per-period sensor keys (producers written for the earlier design) ----

/// A reading as a producer writes it, through the real decoder.
fn produced(sim: &mut Sim, pipeline: &str, key: &str, data: Value) -> Decision {
    let record = json!({"pipelineId": pipeline, "key": key, "data": data});
    let bytes = serde_json::to_vec(&record).unwrap();
    let reading = decode_sensor(Some(pipeline.as_bytes()), Some(&bytes)).unwrap();
    sim.input(pipeline, Input::SensorReceived(reading))
}

#[test]
fn validation_passed_on_per_period_keys_for_their_own_date_only() {
    let mut sim = Sim::new(); // 2026-11-22
    sim.config(gold(json!({})));
    // Yesterday's row count and today's trigger: today's rules do not see yesterday's rows.
    produced(&mut sim, "gold", "row-count#20261121", json!({"count": 5000}));
    produced(&mut sim, "gold", "upstream#2026-11-22", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED]);
    assert!(sim.triggers().is_empty());
    let today = execution(&sim, "gold", KEY);
    assert_eq!(today.phase, Phase::AwaitingRules);
    // Today's rows, under the compact form, count as key row-count for today.
    produced(&mut sim, "gold", "row-count#20261122", json!({"count": 2000}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers()[0].execution.date_text(), DAY);
    // Yesterday's trigger starts yesterday's execution, which sees yesterday's rows.
    produced(&mut sim, "gold", "upstream#2026-11-21", json!({"status": "ready"}));
    assert_eq!(sim.triggers().len(), 2);
    assert_eq!(sim.triggers()[1].execution.date_text(), "2026-11-21");
}

#[test]
fn validation_passed_on_an_hourly_per_period_key_starts_that_hour() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    produced(&mut sim, "gold", "row-count#20261122T05", json!({"count": 2000}));
    produced(&mut sim, "gold", "upstream#2026-11-22T05", json!({"status": "ready"}));
    assert_eq!(sim.types(), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(sim.triggers()[0].execution.date_text(), "2026-11-22T05");
}

#[test]
fn post_run_sensor_missing_is_never_reported_when_post_run_has_no_rules() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"postRun": {"rules": [], "sensorTimeout": "1h"}})));
    succeed(&mut sim);
    sim.advance(TimeDelta::hours(3));
    assert_eq!(
        sim.types(),
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    assert!(gold_run(&sim).baseline.is_none());
    assert!(!sim.states["gold"]
        .timers
        .values()
        .any(|t| matches!(t.timer, TimerKind::PostRunTimeout { .. })));
}
