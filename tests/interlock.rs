//! Moving over from the earlier (serverless) design: its pipelines, producers and runbooks
//! behave as they did, on the real broker. Each test names the behaviour it keeps.

use std::time::Duration;

use chrono::{NaiveDate, TimeDelta, Timelike, Utc};
use serde_json::{json, Value};
use sluice::core::events::{Event, EventType, EventType::*};

use crate::support::{command_job, day, pipeline, sluice, RunLog, World};

fn kinds(events: &[Event]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}

fn today() -> NaiveDate {
    NaiveDate::parse_from_str(day(), "%Y-%m-%d").unwrap()
}

fn sensor_record(w: &World, pipeline: &str, key: &str, data: Value) {
    let record = json!({"pipelineId": pipeline, "key": key, "data": data});
    w.produce("sensors", Some(pipeline), Some(&serde_json::to_vec(&record).unwrap()));
}

/// A daily deadline an hour ago: under a same-day rule it has passed, so the run could not
/// meet it; measured on the day after the data date (the earlier design), it is met.
#[test]
fn sla_met_the_next_day_for_a_sensor_driven_daily_pipeline() {
    let mut w = World::new("nextday");
    let earlier = Utc::now() - TimeDelta::hours(1);
    let deadline = format!("{:02}:{:02}", earlier.hour(), earlier.minute());
    let mut config = pipeline("nextday", command_job("true", 0));
    config["sla"] = json!({"deadline": deadline});
    w.start_with(&config);
    w.sensor("nextday", "row-count", json!({"count": 1500}));
    w.sensor("nextday", "upstream", json!({"status": "ready"}));
    let events = w.wait_for("nextday", "SLA_MET", |es| es.iter().any(|e| e.kind == SLA_MET));
    let met = events.iter().find(|e| e.kind == SLA_MET).unwrap();
    let due = today()
        .succ_opt()
        .unwrap()
        .and_hms_opt(earlier.hour(), earlier.minute(), 0)
        .unwrap();
    assert_eq!(met.detail["deadline"], json!(due.and_utc()), "{met:?}");
    assert!(!kinds(&events).contains(&SLA_BREACH), "{:?}", kinds(&events));
}

/// A rerun of a date that has no execution starts it, as the earlier design's runbooks
/// expect; the run reads that date's sensors.
#[test]
fn rerun_accepted_for_a_date_that_never_ran() {
    let mut w = World::new("rerunnew");
    w.start_with(&pipeline("rerunnew", command_job("true", 0)));
    let yesterday = today().pred_opt().unwrap().to_string();
    w.wait_for_sequence("rerunnew", &[CONFIG_ACCEPTED]);
    w.rerun("rerunnew", &yesterday, "backfill");
    w.wait_for_sequence("rerunnew", &[CONFIG_ACCEPTED, RERUN_ACCEPTED]);
    w.sensor_on("rerunnew", "row-count", json!({"count": 1500}), Some(&yesterday));
    w.sensor_on("rerunnew", "upstream", json!({"status": "ready"}), Some(&yesterday));
    let events = w.wait_for_sequence(
        "rerunnew",
        &[
            CONFIG_ACCEPTED,
            RERUN_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    for e in &events[1..] {
        assert_eq!(e.date.as_deref(), Some(yesterday.as_str()), "{e:?}");
    }
}

/// Producers written for the earlier design put the period in the key. Such a reading
/// counts for its own date only, and a record whose date field contradicts its key is
/// dead-lettered with the reason.
#[test]
fn validation_passed_on_per_period_sensor_keys_for_their_own_date() {
    let mut w = World::new("period");
    w.start_with(&pipeline("period", command_job("true", 0)));
    let compact = |d: NaiveDate| d.format("%Y%m%d").to_string();
    let yesterday = today().pred_opt().unwrap();
    sensor_record(
        &w,
        "period",
        &format!("row-count#{}", compact(yesterday)),
        json!({"count": 5000}),
    );
    sensor_record(&w, "period", &format!("upstream#{}", day()), json!({"status": "ready"}));
    let contradiction = json!({"pipelineId": "period", "key": format!("row-count#{}", day()),
                               "date": yesterday.to_string(), "data": {"count": 1}});
    w.produce(
        "sensors",
        Some("period"),
        Some(&serde_json::to_vec(&contradiction).unwrap()),
    );
    let events = w.wait_for("period", "INPUT_REJECTED", |es| {
        es.iter().any(|e| e.kind == INPUT_REJECTED)
    });
    assert_eq!(
        kinds(&events),
        [CONFIG_ACCEPTED, INPUT_REJECTED],
        "yesterday's rows do not count today"
    );
    let rejected = format!("{:?}", events[1]);
    assert!(rejected.contains("names its period in the key"), "{rejected}");
    let dead = w.dead_letters(1);
    assert_eq!(
        dead[0].0.as_deref(),
        Some(serde_json::to_vec(&contradiction).unwrap().as_slice())
    );

    sensor_record(
        &w,
        "period",
        &format!("row-count#{}", compact(today())),
        json!({"count": 2000}),
    );
    let events = w.wait_for_sequence(
        "period",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    assert_eq!(events[2].date.as_deref(), Some(day()));
}

/// `postRun: {rules: []}` watches nothing: by the time a pipeline with a post-run rule has
/// reported its missing sensor, the one with no rules has captured and reported nothing.
#[test]
fn post_run_sensor_missing_never_reported_for_a_post_run_without_rules() {
    let mut w = World::new("norules");
    let mut empty = pipeline("norules", command_job("true", 0));
    empty["postRun"] = json!({"rules": [], "sensorTimeout": "3s"});
    let mut watched = pipeline("watched", command_job("true", 0));
    watched["postRun"] = json!({"rules": [{"key": "audit", "check": "exists"}], "sensorTimeout": "3s"});
    w.start_with(&empty);
    w.config(&watched);
    // A post-run sensor before the run: the baseline MISSING is measured against.
    w.sensor("watched", "audit", json!({"rows": 1}));
    for id in ["norules", "watched"] {
        w.sensor(id, "row-count", json!({"count": 1500}));
        w.sensor(id, "upstream", json!({"status": "ready"}));
    }
    w.wait_for("watched", "POST_RUN_SENSOR_MISSING", |es| {
        es.iter().any(|e| e.kind == POST_RUN_SENSOR_MISSING)
    });
    let events = w.wait_for_sequence(
        "norules",
        &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
    );
    assert_eq!(events.len(), 4);
}

/// `cron` with `trigger`: the cron time reports SCHEDULE_MISSED when the trigger has not
/// started the day, and the trigger still starts it afterwards (the earlier design's path).
#[test]
fn schedule_missed_at_the_cron_time_then_the_trigger_starts_the_day() {
    let mut w = World::new("crontrig");
    let mut config = pipeline("crontrig", command_job("true", 0));
    config["schedule"]["cron"] = json!("* * * * *");
    let minute = w.next_minute_in(Duration::from_secs(15));
    w.start_with(&config);
    let within = w.instant_at(minute) + Duration::from_secs(60);
    let events = w.wait_for_until("crontrig", "SCHEDULE_MISSED", within, |es| {
        es.iter().any(|e| e.kind == SCHEDULE_MISSED)
    });
    assert!(!kinds(&events).contains(&JOB_TRIGGERED));
    w.sensor("crontrig", "row-count", json!({"count": 1500}));
    w.sensor("crontrig", "upstream", json!({"status": "ready"}));
    let events = w.wait_for("crontrig", "JOB_COMPLETED", |es| {
        es.iter().any(|e| e.kind == JOB_COMPLETED)
    });
    let passed = events.iter().find(|e| e.kind == VALIDATION_PASSED).unwrap();
    assert_eq!(passed.schedule_id.as_deref(), Some("cron"));
    assert_eq!(passed.date.as_deref(), Some(day()));
}

/// `config validate` on a folder of pipelines in the earlier design's shapes passes, and
/// names every difference a migrating team must know about.
#[test]
fn config_validate_reports_every_interlock_difference() {
    let output = sluice()
        .args(["config", "validate", "examples/interlock"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for expected in [
        "forecast-prep.yaml: schedule.trigger: {type: cron} is read as schedule.cron",
        "meter-hourly.yaml: postRun.rules: no rules: nothing is watched after the run",
        "risk-batch.yaml: job.config.pollInterval: unknown key for job type airflow",
        "ledger-close.yaml: sla.critical: is read but changes nothing",
        // Interlock read its 21:00 in UTC, Sluice in Europe/London: said, not guessed.
        "ledger-close.yaml: sla.timezone: is not set: sla.deadline is read in schedule.timezone (Europe/London)",
        // Bounds Interlock did not have, and its dating rules, named where they apply.
        "ledger-close.yaml: schedule.trigger: a trigger that keeps failing releases its date for the next trigger sensor at most 3 times",
        "ledger-close.yaml: schedule.undatedReadings: a reading without a date is dated in UTC, as the earlier design did, not in Europe/London",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?} in\n{stderr}");
    }

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("serverless.yaml"),
        "pipeline: {id: s, owner: o}\nschedule: {trigger: {key: k, check: exists}}\n\
         job: {type: emr-serverless, config: {applicationID: 00f, jobName: agg}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("glue.yaml"),
        "pipeline: {id: g, owner: o}\nschedule: {trigger: {key: k, check: exists}}\n\
         job: {type: glue, config: {jobName: agg, arguments: {--par_day: '20260101'}}}\n",
    )
    .unwrap();
    let output = sluice().args(["config", "validate"]).arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("serverless.yaml: job.config.executionRoleArn: is required"),
        "{stderr}"
    );
    assert!(
        stderr.contains("glue.yaml: job.config.arguments.--par_day: is sent as written"),
        "{stderr}"
    );
}

/// Interlock's dating, by default: an undated trigger takes its date in UTC whatever the
/// schedule's zone (`ResolveExecutionDate` on Lambda's clock), exclusions are checked
/// against the day the trigger arrives there (`IsExcluded(cfg, now)`), and its producers'
/// numeric `date` and one-digit `hour` in the data make a daily run of the day named.
/// `undatedReadings: timezone` with `excludeBy: dataDate` is Sluice's other rule. Counted
/// at the target: each command appends its run id to a file.
#[test]
fn undated_triggers_are_dated_in_utc_and_exclusions_follow_the_day_they_arrive() {
    // A zone whose date is not UTC's for the next hour: 12 hours behind before 11:00 UTC,
    // 14 ahead after.
    let now = Utc::now();
    let (zone, ahead) = if now.hour() < 11 {
        ("Etc/GMT+12", -12)
    } else {
        ("Etc/GMT-14", 14)
    };
    let utc_day = today();
    let local_day = (now + TimeDelta::hours(ahead)).date_naive();
    assert_ne!(utc_day, local_day);
    let dir = tempfile::tempdir().unwrap();
    let runs = |id: &str| std::fs::read_to_string(dir.path().join(id)).unwrap_or_default();
    let config = |id: &str, patch: Value| {
        let command = format!("echo ${{RUN_ID}} >> {}", dir.path().join(id).display());
        let mut c = pipeline(id, command_job(&command, 0));
        c["validation"]["rules"] = json!([]);
        c["schedule"]["timezone"] = json!(zone);
        for (k, v) in patch.as_object().unwrap() {
            match k.as_str() {
                "schedule" => c["schedule"]
                    .as_object_mut()
                    .unwrap()
                    .extend(v.as_object().unwrap().clone()),
                _ => c[k] = v.clone(),
            }
        }
        c
    };
    let mut w = World::new("dating");
    // The UTC date is excluded, not the day the trigger arrives in its zone: it runs.
    w.config(&config("utc", json!({"exclusions": {"dates": [utc_day.to_string()]}})));
    // The day it arrives is excluded: passed over.
    w.config(&config(
        "wall",
        json!({"exclusions": {"dates": [local_day.to_string()]}}),
    ));
    // Sluice's other rule: dated in the zone, excluded by that date.
    let local = json!({"schedule": {"undatedReadings": "timezone", "excludeBy": "dataDate"}});
    w.config(&config("local", local));
    w.start_with(&config("numeric", json!({})));
    for id in ["utc", "wall", "local"] {
        sensor_record(&w, id, "upstream", json!({"status": "ready"}));
    }
    let compact: u64 = utc_day.format("%Y%m%d").to_string().parse().unwrap();
    sensor_record(
        &w,
        "numeric",
        "upstream",
        json!({"status": "ready", "date": compact, "hour": 5}),
    );

    for (id, date) in [("utc", utc_day), ("local", local_day), ("numeric", utc_day)] {
        let events = w.wait_for(id, "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
        let completed = events.iter().find(|e| e.kind == JOB_COMPLETED).unwrap();
        assert_eq!(completed.date.as_deref(), Some(date.to_string().as_str()), "{id}");
        assert_eq!(
            runs(id),
            format!("{id}.stream.{date}.1\n"),
            "{id}: one daily run of {date}"
        );
    }
    let events = w.wait_for("wall", "the exclusion", |es| {
        es.iter().any(|e| e.kind == PIPELINE_EXCLUDED)
    });
    let excluded = events.iter().find(|e| e.kind == PIPELINE_EXCLUDED).unwrap();
    assert_eq!(excluded.date.as_deref(), Some(utc_day.to_string().as_str()));
    assert!(
        excluded.detail["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("arrived on {local_day}")),
        "{excluded:?}"
    );
    assert_eq!(runs("wall"), "", "nothing ran on the excluded day");
    w.stop();
}

/// Interlock ran any date; Sluice forgets a date after the retention and then refuses its
/// readings and a plain rerun (it cannot know whether the date ran), so last month is run
/// on purpose: `sluice backfill PIPELINE FROM TO`. Each date is one execution, its readings
/// count once it is open, and its run ids are new (`.b<millis>.1`): counted at the target,
/// each date ran once, and a second backfill of an unchanged date is refused.
#[test]
fn a_backfill_runs_dates_older_than_the_retention_once_each() {
    let log = RunLog::new();
    let mut w = World::new("backfill");
    w.start_with(&pipeline("bf", command_job(&log.command(), 0)));
    w.wait_for("bf", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    let first = today() - TimeDelta::days(40);
    let second = first.succ_opt().unwrap();
    let (first_s, second_s) = (first.to_string(), second.to_string());
    // Before: the old date's reading is refused, and so is a plain rerun.
    w.sensor_on("bf", "upstream", json!({"status": "ready"}), Some(&first_s));
    w.rerun("bf", &first_s, "last month");
    let events = w.wait_for("bf", "the refusals", |es| {
        es.iter().any(|e| e.kind == INPUT_REJECTED) && es.iter().any(|e| e.kind == RERUN_REJECTED)
    });
    let refused = events.iter().find(|e| e.kind == RERUN_REJECTED).unwrap();
    assert!(
        refused.detail["rejection"]
            .as_str()
            .unwrap()
            .contains("sluice backfill"),
        "{refused:?}"
    );
    let backfill = |w: &World| {
        let out = crate::support::sluice_on(&w.brokers)
            .args(["backfill", "bf", &first_s, &second_s, "--reason", "last month"])
            .args(["--topic-prefix", &w.prefix])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    backfill(&w);
    w.wait_for("bf", "two backfills accepted", |es| {
        es.iter().filter(|e| e.kind == RERUN_ACCEPTED).count() == 2
    });
    for date in [&first_s, &second_s] {
        w.sensor_on("bf", "upstream", json!({"status": "ready"}), Some(date));
        w.sensor_on("bf", "row-count", json!({"count": 1500}), Some(date));
    }
    w.wait_for("bf", "both dates completed", |es| {
        es.iter().filter(|e| e.kind == JOB_COMPLETED).count() == 2
    });
    let runs = log.runs();
    let mut dates: Vec<&str> = runs.iter().map(|l| l.split('.').nth(2).unwrap()).collect();
    dates.sort();
    assert_eq!(dates, [first_s.as_str(), second_s.as_str()], "{runs:?}");
    for line in &runs {
        let tag = line.split('.').nth(3).unwrap();
        assert!(
            tag.starts_with('b') && tag[1..].parse::<i64>().is_ok() && line.ends_with(".1"),
            "{line}"
        );
    }
    // Again, with nothing changed: refused, nothing runs.
    backfill(&w);
    w.wait_for("bf", "the second backfill refused", |es| {
        es.iter().filter(|e| e.kind == RERUN_REJECTED).count() == 3
    });
    assert_eq!(log.runs(), runs);
    w.stop();
}
