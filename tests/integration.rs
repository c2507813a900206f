//! End-to-end tests: the real `sluice` binary against a real broker (deploy/test.sh starts
//! one with deploy/local-broker.sh), asserting the exact event sequence of each scenario.

mod alerts;
mod api;
mod aws_credentials;
mod bad_input;
mod cli;
mod evaluators;
mod formats;
mod interlock;
mod msk_iam;
mod producers;
mod replay;
mod secure;
mod support;
mod telemetry;
mod ui;

use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};
use sluice::core::events::{Category, Event, EventType::*};
use sluice::core::partitioning::PartitionId;
use sluice::runtime::store::{PartitionStore, StoreBatch};
use support::{command_job, day, http_target, pipeline, run_id, sluice, World};

/// Sends the row count, then the trigger sensor that starts the execution.
fn row_count_then_trigger(w: &World, pipeline: &str, count: Value) {
    w.sensor(pipeline, "row-count", json!({ "count": count }));
    w.sensor(pipeline, "upstream", json!({"status": "ready"}));
}

/// A pipeline whose job appends its run id to a file, so a test can count how often it ran.
fn recording_pipeline(w: &World, id: &str) -> (Value, std::path::PathBuf) {
    let runs = w.scratch.path().join("runs.txt");
    let job = command_job(&format!("echo \"$SLUICE_RUN_ID\" >> {}", runs.display()), 0);
    (pipeline(id, job), runs)
}

/// A malformed record on the sensors partition of `pipeline`: once its INPUT_REJECTED is
/// out, every sensor sent before it has been processed.
fn barrier(world: &mut World, pipeline: &str, expected_rejections: usize) {
    world.produce("sensors", Some(pipeline), Some(b"barrier: not json"));
    world.wait_for(pipeline, "barrier", |es| {
        es.iter().filter(|e| e.kind == INPUT_REJECTED).count() >= expected_rejections
    });
}

#[test]
fn happy_path_http_job_reported_by_its_runner() {
    let target = http_target();
    let mut w = World::new("happy");
    let job = json!({"type": "http", "config": {
        "url": target.url, "method": "POST", "awaitReport": true,
        "headers": {"Content-Type": "application/json"},
        "body": "{\"pipeline\": \"${PIPELINE}\", \"date\": \"${DATE}\", \"run\": \"${RUN_ID}\"}"
    }});
    w.start_with(&pipeline("happy", job));
    row_count_then_trigger(&w, "happy", json!(1500));
    let events = w.wait_for_sequence("happy", &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED]);
    let run = run_id("happy", 1);
    assert_eq!(events[2].run_id.as_deref(), Some(run.as_str()));
    let requests = target.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with("POST /run HTTP/1.1"), "{}", requests[0]);
    let body = format!(
        "{{\"pipeline\": \"happy\", \"date\": \"{}\", \"run\": \"{run}\"}}",
        day()
    );
    assert!(requests[0].ends_with(&body), "templates expanded: {}", requests[0]);

    w.job("happy", &run, "succeeded");
    let events = w.wait_for_sequence(
        "happy",
        &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
    );
    let completed = &events[3];
    assert_eq!((completed.date.as_deref(), completed.attempt), (Some(day()), Some(1)));
    let ids: std::collections::BTreeSet<_> = events.iter().map(|e| e.event_id.clone()).collect();
    assert_eq!(ids.len(), 4, "event ids are distinct");
    assert_eq!(w.stop().code(), Some(0), "SIGTERM closes cleanly");
}

#[test]
fn rules_fail_until_a_later_sensor_fixes_them() {
    let mut w = World::new("fix");
    w.start_with(&pipeline("fix", command_job("true", 0)));
    row_count_then_trigger(&w, "fix", json!("10"));
    barrier(&mut w, "fix", 1);
    w.sensor("fix", "row-count", json!({"count": "2500"}));
    let events = w.wait_for_sequence(
        "fix",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    let results = &events[2].detail["results"];
    assert_eq!(
        results[1]["seen"],
        json!("2500"),
        "passed on the fixing sensor: {results}"
    );
}

#[test]
fn window_exhaustion_explains_why() {
    let mut w = World::new("exhaust");
    let mut config = pipeline("exhaust", command_job("true", 0));
    config["schedule"]["evaluation"] = json!({"window": "3s", "interval": "1s"});
    w.start_with(&config);
    row_count_then_trigger(&w, "exhaust", json!(3));
    let events = w.wait_for_sequence("exhaust", &[CONFIG_ACCEPTED, VALIDATION_EXHAUSTED]);
    assert!(
        events[1].message.contains("count is 3 but must be >= 1000"),
        "{}",
        events[1].message
    );
}

/// The events of a run whose first attempt fails and whose retry succeeds: the retry waits
/// for the rules to pass again (they still do).
const RETRIED: [sluice::core::events::EventType; 7] = [
    CONFIG_ACCEPTED,
    VALIDATION_PASSED,
    JOB_TRIGGERED,
    JOB_FAILED,
    VALIDATION_PASSED,
    JOB_TRIGGERED,
    JOB_COMPLETED,
];

/// A command job that fails on its first attempt (every run of it: `job.triggerRetry` runs
/// it once more, 100 ms later) and succeeds on the second, with one job retry.
fn fails_on_the_first_attempt(command: &str) -> Value {
    let mut job = command_job(&format!("test \"$SLUICE_ATTEMPT\" -ge 2 || {command}"), 1);
    job["triggerRetry"] = json!({"interval": "100ms", "maxAttempts": 1});
    job
}

#[test]
fn a_failed_job_is_retried_then_succeeds() {
    let mut w = World::new("retry");
    w.start_with(&pipeline(
        "retry",
        fails_on_the_first_attempt("{ echo busy >&2; exit 3; }"),
    ));
    row_count_then_trigger(&w, "retry", json!(1000));
    let events = w.wait_for_sequence("retry", &RETRIED);
    assert_eq!(events[3].run_id.as_deref(), Some(run_id("retry", 1).as_str()));
    assert!(
        events[3].message.contains("command exited 3: busy"),
        "{}",
        events[3].message
    );
    assert_eq!(events[6].run_id.as_deref(), Some(run_id("retry", 2).as_str()));
}

/// A failed attempt with retries left goes back to evaluation, as Interlock's retry
/// restarted its state machine: while the row count reads too low nothing runs; once it is
/// enough again, attempt 2 runs. Runs are counted where they land (the job's own file).
#[test]
fn a_failed_attempt_runs_again_only_once_its_rules_pass_again() {
    let mut w = World::new("retry-ready");
    let (runs, go) = (w.scratch.path().join("runs.txt"), w.scratch.path().join("go"));
    // Attempt 1 records itself, waits for the test's word, then fails; attempt 2 succeeds.
    let command = format!(
        "echo \"$SLUICE_RUN_ID\" >> {runs}; test \"$SLUICE_ATTEMPT\" -ge 2 && exit 0; \
         while [ ! -f {go} ]; do sleep 0.1; done; exit 3",
        runs = runs.display(),
        go = go.display()
    );
    let mut job = command_job(&command, 1);
    job["triggerRetry"] = json!({"interval": "100ms", "maxAttempts": 0});
    w.start_with(&pipeline("retry-ready", job));
    row_count_then_trigger(&w, "retry-ready", json!(5000));
    w.wait_for("retry-ready", "attempt 1", |es| {
        es.iter().any(|e| e.kind == JOB_TRIGGERED)
    });
    // The upstream's data goes bad while attempt 1 runs; then attempt 1 fails.
    w.sensor("retry-ready", "row-count", json!({"count": 10}));
    barrier(&mut w, "retry-ready", 1);
    std::fs::write(&go, "").unwrap();
    let events = w.wait_for("retry-ready", "the failure", |es| {
        es.iter().any(|e| e.kind == JOB_FAILED)
    });
    let failed = events.iter().find(|e| e.kind == JOB_FAILED).unwrap();
    assert_eq!(failed.detail["willRetry"], json!(true), "{failed:?}");
    let ran = || {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // Its rules were evaluated with the failure: had they passed, attempt 2 would be out.
    w.produce("sensors", Some("retry-ready"), Some(b"barrier: not json"));
    let events = w.wait_for("retry-ready", "the second barrier", |es| {
        es.iter().filter(|e| e.kind == INPUT_REJECTED).count() >= 2
    });
    assert_eq!(ran(), [run_id("retry-ready", 1)], "no attempt while the rules fail");
    assert_eq!(events.iter().filter(|e| e.kind == VALIDATION_PASSED).count(), 1);
    // Ready again: attempt 2 runs, once.
    w.sensor("retry-ready", "row-count", json!({"count": 5000}));
    let events = w.wait_for("retry-ready", "attempt 2", |es| {
        es.iter().any(|e| e.kind == JOB_COMPLETED)
    });
    let kinds: Vec<_> = events
        .iter()
        .filter(|e| e.kind != INPUT_REJECTED)
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, RETRIED);
    assert_eq!(ran(), [run_id("retry-ready", 1), run_id("retry-ready", 2)]);
}

#[test]
fn duplicate_sensor_delivery_triggers_once() {
    let mut w = World::new("dup");
    let (config, runs) = recording_pipeline(&w, "dup");
    w.start_with(&config);
    w.sensor("dup", "row-count", json!({"count": 5000}));
    for _ in 0..3 {
        w.sensor("dup", "upstream", json!({"status": "ready"}));
    }
    w.wait_for("dup", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    w.sensor("dup", "upstream", json!({"status": "ready"}));
    barrier(&mut w, "dup", 1);
    let events = w.wait_for_sequence(
        "dup",
        &[
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
            INPUT_REJECTED,
        ],
    );
    assert_eq!(events.len(), 5);
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n", run_id("dup", 1)),
        "the job ran once"
    );
}

#[test]
fn a_malformed_sensor_goes_to_the_dlq_and_the_next_good_one_is_processed() {
    let mut w = World::new("dlq");
    w.start_with(&pipeline("dlq", command_job("true", 0)));
    w.produce("sensors", Some("dlq"), Some(b"{\"pipelineId\": \"dlq\", \"key\": 42}"));
    row_count_then_trigger(&w, "dlq", json!(5000));
    let events = w.wait_for_sequence(
        "dlq",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    assert!(
        events[1].detail["error"]
            .as_str()
            .unwrap()
            .contains("does not match the schema"),
        "{:?}",
        events[1].detail
    );
    let dead = w.dead_letters(1);
    let (value, headers) = &dead[0];
    assert_eq!(
        value.as_deref(),
        Some(b"{\"pipelineId\": \"dlq\", \"key\": 42}".as_slice()),
        "the raw record is kept"
    );
    let header = |k: &str| headers.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone());
    assert_eq!(header("source.topic"), Some(w.topic("sensors")));
    assert!(header("error").unwrap().contains("key"), "{headers:?}");
    assert!(header("source.offset").unwrap().parse::<i64>().is_ok());
    assert!(header("source.partition").is_some());
}

#[test]
fn a_record_on_the_wrong_partition_is_rejected_not_split_off() {
    let mut w = World::new("misrouted");
    w.env.push(("SLUICE_MISROUTED".into(), "reject".into()));
    w.start_with(&pipeline("misrouted", command_job("true", 0)));
    let owner = sluice::core::partitioning::partition_for(b"misrouted", 3).number();
    let sensor = json!({"pipelineId": "misrouted", "key": "upstream", "data": {"status": "ready"}});
    w.produce_to_partition(
        "sensors",
        (owner + 1) % 3,
        "misrouted",
        &serde_json::to_vec(&sensor).unwrap(),
    );
    let events = w.wait_for_sequence("misrouted", &[CONFIG_ACCEPTED, INPUT_REJECTED]);
    let error = events[1].detail["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("its pipeline lives on partition {owner}")),
        "{error}"
    );
    assert_eq!(w.dead_letters(1).len(), 1);
}

/// What a default-configured librdkafka producer does (CRC32 puts most keys elsewhere): the
/// records are forwarded to their key's partition and the pipeline runs; a copy that comes
/// again (forwarded anew after a crash) changes nothing.
#[test]
fn a_record_on_the_wrong_partition_is_forwarded_and_applied_once() {
    let mut w = World::new("forwarded");
    let (config, runs) = recording_pipeline(&w, "forwarded");
    w.config(&config);
    let http = format!("127.0.0.1:{}", support::free_port());
    w.serve(&http, &[]);
    w.wait_for("forwarded", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    let owner = sluice::core::partitioning::partition_for(b"forwarded", 3).number();
    let elsewhere = (owner + 1) % 3;
    let reading = |key: &str, data: Value| {
        serde_json::to_vec(&json!({"pipelineId": "forwarded", "key": key, "data": data, "date": day()})).unwrap()
    };
    w.produce_to_partition(
        "sensors",
        elsewhere,
        "forwarded",
        &reading("row-count", json!({"count": 5000})),
    );
    w.produce_to_partition(
        "sensors",
        elsewhere,
        "forwarded",
        &reading("upstream", json!({"status": "ready"})),
    );
    w.wait_for_sequence(
        "forwarded",
        &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
    );
    // Records of a pipeline of `elsewhere`'s own, so that a copy from offset 7 there is
    // plausible (a mark beyond where its partition ends is rejected).
    let local = (0..)
        .map(|i| format!("local{i}"))
        .find(|k| sluice::core::partitioning::partition_for(k.as_bytes(), 3).number() == elsewhere)
        .unwrap();
    for i in 0..6 {
        let value = json!({"pipelineId": local, "key": "filler", "data": {"n": i}, "date": day()});
        w.produce_to_partition("sensors", elsewhere, &local, &serde_json::to_vec(&value).unwrap());
    }
    // Copies forwarded again (as after a crash before partition `elsewhere`'s state was
    // written) are skipped; a new copy is applied. The first duplicate is among the copies
    // applied, the second below the durable offset a later copy tells of.
    let marked = |offset: i64, durable: i64, status: &str| {
        let mark = format!("{elsewhere}:{offset}:{durable}");
        let value = reading("upstream", json!({ "status": status }));
        w.produce_with_headers("sensors", owner, "forwarded", &value, &[("sluice.forwarded", &mark)]);
    };
    marked(0, -1, "duplicate");
    marked(7, 1, "late");
    marked(1, -1, "duplicate");
    let metric = |name: &str| -> f64 {
        let body = support::http_get(&http, "/metrics").map(|(_, b)| b).unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains("sensors"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    support::wait_until(
        "both duplicates skipped",
        Duration::from_secs(30),
        || w.log_tail(),
        || metric("sluice_forwarded_duplicates_total") == 2.0,
    );
    let upstream = || -> Option<Value> {
        let (_, body) = support::http_get(&http, "/api/pipelines/forwarded")?;
        let view: Value = serde_json::from_str(&body).ok()?;
        let sensors = view["sensors"].as_array()?.clone();
        sensors.into_iter().find(|s| s["key"] == "upstream")
    };
    support::wait_until(
        "the new copy applied",
        Duration::from_secs(30),
        || format!("{:?}", upstream()),
        || upstream().is_some_and(|s| s["data"]["status"] == "late"),
    );
    assert_eq!(metric("sluice_forwarded_records_total"), 2.0);
    assert_eq!(w.dead_letters(0).len(), 0, "nothing dead-lettered");
    let ran = std::fs::read_to_string(&runs).unwrap();
    assert_eq!(ran.lines().count(), 1, "the job ran once: {ran}");
    assert!(
        w.log().contains("logged once per key"),
        "the producer's misrouting is logged"
    );
}

/// Anyone who may write an input topic may write a `sluice.forwarded` header too: a mark
/// Sluice cannot have written is a dead letter with the reason and moves nothing, so the
/// copies forwarded after it are applied (a mark far ahead used to make them look applied
/// before, and vanish).
#[test]
fn a_forged_forwarding_mark_is_a_dead_letter_and_hides_no_later_copy() {
    let mut w = World::new("forged");
    let (config, runs) = recording_pipeline(&w, "forged");
    w.start_with(&config);
    let owner = sluice::core::partitioning::partition_for(b"forged", 3).number();
    let (elsewhere, third) = ((owner + 1) % 3, (owner + 2) % 3);
    let reading = |key: &str, data: Value| {
        serde_json::to_vec(&json!({"pipelineId": "forged", "key": key, "data": data, "date": day()})).unwrap()
    };
    let forged = [
        (format!("{elsewhere}:1000000:999999"), "which ends at"),
        (format!("{owner}:0:-1"), "the one the record is on"),
        ("7:0:-1".to_string(), "but the topic has 3"),
        (format!("{third}:5:5"), "not below its offset 5"),
        ("not-a-mark".to_string(), "is not PARTITION:OFFSET:DURABLE"),
    ];
    for (mark, _) in &forged {
        let value = reading("upstream", json!({"status": "ready"}));
        w.produce_with_headers("sensors", owner, "forged", &value, &[("sluice.forwarded", mark)]);
    }
    // A producer that partitions with CRC32, after them: its readings are forwarded and apply.
    w.produce_to_partition(
        "sensors",
        elsewhere,
        "forged",
        &reading("row-count", json!({"count": 5000})),
    );
    w.produce_to_partition(
        "sensors",
        elsewhere,
        "forged",
        &reading("upstream", json!({"status": "ready"})),
    );
    let mut expected = vec![CONFIG_ACCEPTED];
    expected.extend([INPUT_REJECTED; 5]);
    expected.extend([VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]);
    let events = w.wait_for_sequence("forged", &expected);
    let dead = w.dead_letters(forged.len());
    assert_eq!(dead.len(), forged.len());
    for ((mark, why), (_, headers)) in forged.iter().zip(&dead) {
        let error = &headers.iter().find(|(k, _)| k == "error").unwrap().1;
        assert!(
            error.contains("sluice.forwarded") && error.contains(why),
            "{mark}: {error}"
        );
    }
    assert!(events[1].message.contains("which ends at"), "{:?}", events[1]);
    let ran = std::fs::read_to_string(&runs).unwrap();
    assert_eq!(ran.lines().count(), 1, "the job ran once: {ran}");
}

#[test]
fn an_invalid_config_is_rejected_while_the_previous_one_keeps_working() {
    let mut w = World::new("badcfg");
    w.start_with(&pipeline("badcfg", command_job("true", 0)));
    w.wait_for_sequence("badcfg", &[CONFIG_ACCEPTED]);
    let mut bad = pipeline("badcfg", command_job("true", 99));
    bad["validation"]["rules"][1]["value"] = json!("lots");
    w.config(&bad);
    let events = w.wait_for_sequence("badcfg", &[CONFIG_ACCEPTED, CONFIG_REJECTED]);
    let problems = events[1].detail["problems"].as_array().unwrap();
    let paths: Vec<&str> = problems.iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["validation.rules[1].value", "job.maxRetries"]);
    let dead = w.dead_letters(1);
    assert_eq!(dead[0].0.as_deref(), Some(serde_json::to_vec(&bad).unwrap().as_slice()));
    row_count_then_trigger(&w, "badcfg", json!(1000));
    w.wait_for_sequence(
        "badcfg",
        &[
            CONFIG_ACCEPTED,
            CONFIG_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
}

#[test]
fn a_restart_mid_evaluation_continues_from_rocksdb_without_a_second_trigger() {
    let mut w = World::new("restart");
    let (config, runs) = recording_pipeline(&w, "restart");
    w.start_with(&config);
    row_count_then_trigger(&w, "restart", json!(1));
    barrier(&mut w, "restart", 1);
    assert_eq!(w.stop().code(), Some(0), "SIGTERM closes cleanly:\n{}", w.log_tail());
    let stores = std::fs::read_dir(w.state.path()).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("partition-")
    });
    assert_eq!(stores.count(), 3, "one RocksDB per input partition");

    let first_run = w.log().len();
    w.start();
    // The trigger sensor again (a re-delivery): the execution exists, nothing restarts.
    w.sensor("restart", "upstream", json!({"status": "ready"}));
    w.sensor("restart", "row-count", json!({"count": 1200}));
    let events = w.wait_for_sequence(
        "restart",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    assert_eq!(events[2].detail["results"][1]["seen"], json!(1200));
    barrier(&mut w, "restart", 2);
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n", run_id("restart", 1))
    );
    // The execution's evaluation interval (and its watchdog) were pending at the stop.
    let log = w.log();
    let owner = sluice::core::partitioning::partition_for(b"restart", 3);
    let restored = log[first_run..]
        .lines()
        .filter(|l| l.contains("partition assigned: state opened") && l.contains(&format!("partition={owner} ")))
        .filter_map(|l| l.split("timers=").nth(1)?.split(' ').next()?.parse::<usize>().ok())
        .any(|n| n >= 1);
    assert!(restored, "the interval timer was restored from RocksDB:\n{log}");
}

#[test]
fn records_at_or_below_the_applied_offset_are_never_applied_twice() {
    let mut w = World::new("watermark");
    let (config, runs) = recording_pipeline(&w, "watermark");
    w.start_with(&config);
    row_count_then_trigger(&w, "watermark", json!(1000));
    let expected = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    w.wait_for_sequence("watermark", &expected);
    assert_eq!(w.stop().code(), Some(0));

    // Committed offsets lost (as in a crash between the state write and the commit): every
    // input is read again from offset 0, and the state's applied-offset watermark skips it.
    w.rewind_committed_offsets();
    w.start();
    barrier(&mut w, "watermark", 1);
    let events = w.wait_for_sequence(
        "watermark",
        &[
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
            INPUT_REJECTED,
        ],
    );
    assert_eq!(events.len(), 5, "nothing was applied twice");
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n", run_id("watermark", 1))
    );
    assert!(
        w.log_tail().contains("already applied: skipped"),
        "the records were read again:\n{}",
        w.log_tail()
    );
}

#[test]
fn run_refuses_inputs_with_different_partition_counts() {
    let prefix = format!("it-mismatch-{}.", std::process::id());
    support::create_topics(
        &prefix,
        &[
            ("config", 1),
            ("sensors", 2),
            ("jobs", 1),
            ("commands", 1),
            ("events", 1),
            ("dlq", 1),
        ],
    );
    let state = tempfile::tempdir().unwrap();
    let output = sluice()
        .args(["run", "--topic-prefix", &prefix])
        .arg("--state-dir")
        .arg(state.path())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("input topics must have the same partition count"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{prefix}sensors=2")), "{stderr}");
}

#[test]
fn config_validate_reports_every_problem_and_apply_publishes_valid_configs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "pipeline: {id: bad}\nschedule: {trigger: {key: k, check: exists}}\njob: {type: command, config: {command: x}, maxRetries: 12, maxCodeRetries: 9}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("broken.yaml"), "pipeline: [unclosed\n").unwrap();
    let output = sluice().args(["config", "validate"]).arg(dir.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.yaml: job.maxRetries: 12 is out of range [0,10]"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad.yaml: job.maxCodeRetries: 9 is out of range [0,3]"),
        "{stderr}"
    );
    assert!(stderr.contains("broken.yaml: not valid YAML"), "{stderr}");

    let output = sluice()
        .args(["config", "validate", "examples/pipelines"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let mut w = World::new("apply");
    let output = sluice()
        .args(["config", "apply", "examples/pipelines", "--topic-prefix", &w.prefix])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    w.start();
    for id in ["orders-daily", "flaky-report", "late-partner-feed", "orders-summary"] {
        w.wait_for_sequence(id, &[CONFIG_ACCEPTED]);
    }
}

/// A fire-and-forget HTTP job: the accepted request completes the run.
fn http_job(url: &str) -> Value {
    json!({"type": "http", "config": {"url": url, "method": "POST", "body": "${PIPELINE} ${DATE}/${HOUR} ${RUN_ID}"}})
}

/// How long before its SLA deadline a test's processor starts (its clock shifted so): time
/// for the config, the sensors and, in `timers_survive_a_restart`, a restart, all before the
/// warning [`EXPECTED_DURATION`] ahead of the deadline (a config accepted after the warning
/// time gets no warning).
const DEADLINE_LEAD: Duration = Duration::from_secs(50);

/// The SLA pipelines' `expectedDuration`: the warning comes this long before the deadline.
const EXPECTED_DURATION: TimeDelta = TimeDelta::seconds(25);

/// The first whole minute strictly after `t`.
fn next_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp((t.timestamp().div_euclid(60) + 1) * 60, 0).unwrap()
}

/// A sensor-driven pipeline whose row-count rule the test never satisfies, with a daily SLA
/// `deadline` (UTC) and an `expectedDuration` of [`EXPECTED_DURATION`].
fn sla_pipeline(id: &str, deadline: DateTime<Utc>) -> Value {
    let mut config = pipeline(id, command_job("true", 0));
    config["schedule"]["timezone"] = json!("UTC");
    // On the data date itself: the next-day default of sensor-driven pipelines would put the
    // deadline a day away.
    config["sla"] = json!({"deadline": deadline.format("%H:%M").to_string(), "deadlineDay": "dataDate",
                           "expectedDuration": format!("{}s", EXPECTED_DURATION.num_seconds())});
    config
}

fn of_kind(events: &[Event], kind: sluice::core::events::EventType) -> Vec<&Event> {
    events.iter().filter(|e| e.kind == kind).collect()
}

/// Checks the SLA alerts of `date`: one warning no earlier than [`EXPECTED_DURATION`] before the
/// deadline, then one breach published within a few seconds after the deadline.
fn assert_sla_alerts(events: &[Event], date: &str, deadline: DateTime<Utc>) {
    let warning = of_kind(events, SLA_WARNING);
    let breach = of_kind(events, SLA_BREACH);
    assert_eq!((warning.len(), breach.len()), (1, 1), "one warning, one breach");
    let (warning, breach) = (warning[0], breach[0]);
    for e in [warning, breach] {
        assert_eq!(e.date.as_deref(), Some(date), "{e:?}");
        assert_eq!(e.schedule_id.as_deref(), Some("stream"), "{e:?}");
        assert_eq!(e.detail["phase"], json!("awaitingRules"), "{e:?}");
        assert_eq!(e.detail["deadline"], json!(deadline), "{e:?}");
    }
    assert!(
        warning.timestamp >= deadline - EXPECTED_DURATION && warning.timestamp < deadline,
        "warning at {} for a deadline at {deadline}",
        warning.timestamp
    );
    let late = breach.timestamp - deadline;
    assert!(
        late >= TimeDelta::zero() && late <= TimeDelta::seconds(5),
        "breach at {} for a deadline at {deadline}",
        breach.timestamp
    );
}

#[test]
fn sla_breach_is_published_at_the_deadline() {
    let mut w = World::new("sla");
    let deadline = w.next_minute_in(DEADLINE_LEAD);
    let date = deadline.format("%Y-%m-%d").to_string();
    let mut config = sla_pipeline("sla", deadline);
    config["pipeline"]["owner"] = json!("analytics-team");
    w.config(&config);
    let http = format!("127.0.0.1:{}", support::free_port());
    w.serve(&http, &[]);
    w.sensor_on("sla", "row-count", json!({"count": 1}), Some(&date));
    w.sensor_on("sla", "upstream", json!({"status": "ready"}), Some(&date));
    barrier(&mut w, "sla", 1);
    w.wait_for_until(
        "sla",
        "SLA_BREACH",
        w.instant_at(deadline) + Duration::from_secs(30),
        |es| es.iter().any(|e| e.kind == SLA_BREACH),
    );
    // Anything the deadline's timers caused is out before this later record is answered.
    barrier(&mut w, "sla", 2);
    let events = w.wait_for_sequence(
        "sla",
        &[CONFIG_ACCEPTED, INPUT_REJECTED, SLA_WARNING, SLA_BREACH, INPUT_REJECTED],
    );
    assert_sla_alerts(&events, &date, deadline);
    // The breach is counted with its pipeline and owner, for alert rules routed by owner.
    let (_, metrics) = support::http_get(&http, "/metrics").expect("metrics");
    let series = r#"sluice_sla_breaches_total{type="SLA_BREACH",pipeline="sla",owner="analytics-team"} 1"#;
    assert!(metrics.contains(series), "{metrics}");
}

/// SLA_AT_RISK and SLA_RECOVERED through the real processor and broker. Three past dates
/// run first, each triggered now, so their trigger times lie one to three days into their
/// dates: the usual trigger time today is two days away, and the third run completing puts
/// today, whose deadline is minutes ahead, at risk. Today's trigger then runs a job of about
/// a second, which projects well before the deadline: recovered, then met.
#[test]
fn sla_at_risk_and_sla_recovered_are_forecast_from_the_run_history() {
    let mut w = World::new("forecast");
    // Minutes ahead (the clock is not shifted): the test is long over by then.
    let deadline = next_minute(w.now() + TimeDelta::minutes(4));
    let today = deadline.date_naive();
    let mut config = pipeline("forecast", command_job("true", 0));
    config["schedule"]["timezone"] = json!("UTC");
    config["sla"] = json!({"deadline": deadline.format("%H:%M").to_string(), "deadlineDay": "dataDate",
                           "forecast": {"minRuns": 3}});
    w.start_with(&config);
    w.sensor_on("forecast", "row-count", json!({"count": 5000}), None);
    for (n, days_ago) in [3, 2, 1].into_iter().enumerate() {
        let date = (today - TimeDelta::days(days_ago)).format("%Y-%m-%d").to_string();
        w.sensor_on("forecast", "upstream", json!({"status": "ready"}), Some(&date));
        w.wait_for("forecast", "a past date's run", |es| {
            es.iter().filter(|e| e.kind == JOB_COMPLETED).count() > n
        });
    }
    let today = today.format("%Y-%m-%d").to_string();
    let events = w.wait_for("forecast", "SLA_AT_RISK", |es| es.iter().any(|e| e.kind == SLA_AT_RISK));
    let risk = of_kind(&events, SLA_AT_RISK)[0];
    assert_eq!(risk.date.as_deref(), Some(today.as_str()), "{risk:?}");
    assert_eq!(risk.detail["basis"], json!("usualTrigger"), "{risk:?}");
    assert_eq!(risk.detail["runs"], json!(3), "{risk:?}");
    assert_eq!(risk.detail["deadline"], json!(deadline), "{risk:?}");
    assert_eq!(risk.detail["waitingFor"], json!(["upstream"]), "{risk:?}");

    w.sensor_on("forecast", "upstream", json!({"status": "ready"}), Some(&today));
    let events = w.wait_for("forecast", "SLA_MET", |es| es.iter().any(|e| e.kind == SLA_MET));
    let recovered = of_kind(&events, SLA_RECOVERED);
    assert_eq!(recovered.len(), 1, "{events:#?}");
    assert_eq!(recovered[0].detail["basis"], json!("running"));
    let projected: DateTime<Utc> = serde_json::from_value(recovered[0].detail["projectedCompletion"].clone()).unwrap();
    assert!(projected < deadline, "{projected} before {deadline}");
    assert_eq!(of_kind(&events, SLA_MET)[0].detail["atRisk"], json!(true));
    let kinds: Vec<_> = events
        .iter()
        .map(|e| e.kind)
        .filter(|k| k.category() == Category::Sla)
        .collect();
    assert_eq!(kinds, [SLA_AT_RISK, SLA_RECOVERED, SLA_MET], "no alert twice");
}

/// The sensor anomalies through the real processor and broker: a misspelled key, a trigger
/// sensor that flaps, and a row count that arrives at a steady pace and then stops.
#[test]
fn sensor_flapping_unknown_sensor_and_stale_sensor_warning_are_reported() {
    let mut w = World::new("anomalies");
    let mut config = pipeline("anomalies", command_job("true", 0));
    config["anomalies"] = json!({"flapping": {"changes": 1, "window": "10m"}});
    w.start_with(&config);
    w.sensor("anomalies", "row_count", json!({"count": 5000}));
    let events = w.wait_for("anomalies", "UNKNOWN_SENSOR", |es| {
        es.iter().any(|e| e.kind == UNKNOWN_SENSOR)
    });
    let unknown = of_kind(&events, UNKNOWN_SENSOR)[0];
    assert_eq!(unknown.detail["didYouMean"], json!("row-count"), "{unknown:?}");

    // ready → held → ready: the trigger rule's result changed twice, more than once.
    for status in ["ready", "held", "ready"] {
        w.sensor("anomalies", "upstream", json!({"status": status}));
    }
    let events = w.wait_for("anomalies", "SENSOR_FLAPPING", |es| {
        es.iter().any(|e| e.kind == SENSOR_FLAPPING)
    });
    let flapping = of_kind(&events, SENSOR_FLAPPING)[0];
    assert_eq!(flapping.detail["key"], json!("upstream"), "{flapping:?}");
    assert_eq!(flapping.date.as_deref(), Some(day()));

    // Six row counts, each once the previous is processed (too few rows to pass): a cadence
    // of a fraction of a second. Then silence: stale within a few of those intervals.
    for n in 1..=6 {
        w.sensor("anomalies", "row-count", json!({"count": 10}));
        barrier(&mut w, "anomalies", n);
    }
    let events = w.wait_for("anomalies", "STALE_SENSOR_WARNING", |es| {
        es.iter().any(|e| e.kind == STALE_SENSOR_WARNING)
    });
    let stale = of_kind(&events, STALE_SENSOR_WARNING)[0];
    assert_eq!(stale.detail["key"], json!("row-count"), "{stale:?}");
    let (usual, silent) = (
        stale.detail["usualIntervalSeconds"].as_f64(),
        stale.detail["silentSeconds"].as_f64(),
    );
    assert!(silent >= usual.map(|u| 2.0 * u), "{stale:?}");
    assert!(of_kind(&events, VALIDATION_PASSED).is_empty());
}

#[test]
fn timers_survive_a_restart() {
    let mut w = World::new("timers");
    let deadline = w.next_minute_in(DEADLINE_LEAD);
    let date = deadline.format("%Y-%m-%d").to_string();
    w.start_with(&sla_pipeline("timers", deadline));
    w.sensor_on("timers", "upstream", json!({"status": "ready"}), Some(&date));
    barrier(&mut w, "timers", 1);
    assert_eq!(w.stop().code(), Some(0), "SIGTERM closes cleanly:\n{}", w.log_tail());
    assert!(
        w.now() < deadline - TimeDelta::seconds(15),
        "restarted well before the deadline"
    );

    // A timer key as versions before timers lived only in the states wrote them: the
    // opening deletes it, and the index comes from the states' parts alone.
    let legacy = legacy_timer_key(deadline);
    let stores = partition_stores(&w);
    assert!(!stores.is_empty());
    for p in &stores {
        let mut store = PartitionStore::open(w.state.path(), *p).unwrap();
        let mut batch = StoreBatch::default();
        batch.mirror(&legacy, Some(&[1]));
        store.write(batch).unwrap();
    }

    let first_run = w.log().len();
    w.start();
    w.wait_for_until(
        "timers",
        "SLA_BREACH",
        w.instant_at(deadline) + Duration::from_secs(30),
        |es| es.iter().any(|e| e.kind == SLA_BREACH),
    );
    barrier(&mut w, "timers", 2);
    let events = w.wait_for_sequence(
        "timers",
        &[CONFIG_ACCEPTED, INPUT_REJECTED, SLA_WARNING, SLA_BREACH, INPUT_REJECTED],
    );
    assert_sla_alerts(&events, &date, deadline);
    let log = w.log();
    let restored = log[first_run..]
        .lines()
        .filter(|l| l.contains("partition assigned: state opened"))
        .any(|l| !l.contains("timers=0"));
    assert!(restored, "the second run restored the SLA timers from RocksDB:\n{log}");
    assert_eq!(w.stop().code(), Some(0));
    for p in stores {
        let store = PartitionStore::open(w.state.path(), p).unwrap();
        assert!(
            store.legacy_timer_keys().unwrap().is_empty(),
            "partition {p}'s old timer key deleted on opening"
        );
    }
}

/// An SLA timer key in the layout of versions before timers lived only in states.
fn legacy_timer_key(at: DateTime<Utc>) -> Vec<u8> {
    let mut key = b"t/".to_vec();
    key.extend_from_slice(&(at.timestamp_millis() as u64).to_be_bytes());
    key.extend_from_slice(b"timers\0{\"kind\":\"slaBreach\"}");
    key
}

/// The partitions with a store in the world's state directory.
fn partition_stores(w: &World) -> Vec<PartitionId> {
    (std::fs::read_dir(w.state.path()).unwrap())
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("partition-")?.parse().ok())
        .map(PartitionId::new)
        .collect()
}

#[test]
fn cron_pipeline_starts_at_its_cron_time() {
    let target = http_target();
    let mut w = World::new("cron");
    let config = json!({
        "pipeline": {"id": "cron", "owner": "tests"},
        "schedule": {"cron": "* * * * *", "timezone": "UTC", "evaluation": {"window": "10m", "interval": "1m"}},
        "validation": {"rules": [{"key": "row-count", "check": "gte", "field": "count", "value": 1000}]},
        "job": http_job(&target.url)
    });
    // The processor's clock reaches a whole minute 20 s after the start.
    w.next_minute_in(Duration::from_secs(20));
    w.start_with(&config);
    let accepted = w.wait_for_sequence("cron", &[CONFIG_ACCEPTED])[0].timestamp;
    // The first occurrence after the config was accepted.
    let boundary = next_minute(accepted);
    let date = boundary.format("%Y-%m-%dT%H").to_string();
    w.sensor_on("cron", "row-count", json!({"count": 1500}), None);
    barrier(&mut w, "cron", 1);
    assert!(
        target.requests.lock().unwrap().is_empty() || w.now() >= boundary,
        "nothing ran before the cron time"
    );

    let of_date = |es: &[Event]| -> Vec<Event> {
        es.iter()
            .filter(|e| e.date.as_deref() == Some(date.as_str()))
            .cloned()
            .collect()
    };
    let events = w.wait_for_until(
        "cron",
        "JOB_COMPLETED",
        w.instant_at(boundary) + Duration::from_secs(45),
        |es| of_date(es).iter().any(|e| e.kind == JOB_COMPLETED),
    );
    let before: Vec<_> = events
        .iter()
        .filter(|e| e.timestamp < boundary)
        .map(|e| e.kind)
        .collect();
    assert!(
        before.iter().all(|k| [CONFIG_ACCEPTED, INPUT_REJECTED].contains(k)),
        "nothing started before {boundary}: {before:?}"
    );
    let run = of_date(&events);
    let kinds: Vec<_> = run.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED], "{run:?}");
    let triggered = &run[1];
    assert!(
        triggered.timestamp >= boundary,
        "triggered at {} before the cron time {boundary}",
        triggered.timestamp
    );
    assert_eq!(triggered.schedule_id.as_deref(), Some("cron"));
    let run_id = format!("cron.cron.{date}.1");
    assert_eq!(triggered.run_id.as_deref(), Some(run_id.as_str()));
    let requests = target.requests.lock().unwrap().clone();
    let (day, hour) = date.split_once('T').unwrap();
    assert!(
        requests[0].ends_with(&format!("cron {day}/{hour} {run_id}")),
        "{requests:?}"
    );
}

/// Five late writes after a success: one LATE_DATA_ARRIVAL and one rerun (the drift
/// budget's), as the earlier design did; before, five alerts and no rerun. Counted at the
/// target: the job's own record of its runs.
#[test]
fn five_late_writes_give_one_alert_and_one_rerun() {
    let mut w = World::new("late");
    let runs = w.scratch.path().join("runs.txt");
    let go_on = w.scratch.path().join("go-on");
    // The rerun (attempt 2) holds until the test has seen every late write processed.
    let job = command_job(
        &format!(
            "echo \"$SLUICE_RUN_ID\" >> {}; [ \"$SLUICE_ATTEMPT\" -lt 2 ] || while [ ! -e {} ]; do sleep 0.1; done",
            runs.display(),
            go_on.display()
        ),
        0,
    );
    w.start_with(&pipeline("late", job));
    row_count_then_trigger(&w, "late", json!(1500));
    let done = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    w.wait_for_sequence("late", &done);
    for count in 2000..2005 {
        w.sensor("late", "row-count", json!({"count": count}));
    }
    // Every late write processed (the barrier after them was), the rerun still holding.
    barrier(&mut w, "late", 1);
    let seen = |kind| {
        w.events_seen()
            .iter()
            .filter(|e| e.kind == kind && e.pipeline_id == "late")
            .count()
    };
    assert_eq!((seen(LATE_DATA_ARRIVAL), seen(RERUN_ACCEPTED)), (1, 1));
    let accepted = w.events_seen().iter().find(|e| e.kind == RERUN_ACCEPTED).unwrap();
    assert_eq!(accepted.detail["requestedBy"], json!("sluice"));
    std::fs::write(&go_on, "").unwrap();
    let events = w.wait_for("late", "the rerun", |es| {
        es.iter().filter(|e| e.kind == JOB_COMPLETED).count() == 2
    });
    let count = |kind| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!((count(LATE_DATA_ARRIVAL), count(RERUN_ACCEPTED)), (1, 1), "{events:?}");
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n{}\n", run_id("late", 1), run_id("late", 2)),
        "the job ran twice"
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// "Fixed the code, rerun yesterday": `sluice rerun --force` runs a completed date again
/// although none of its inputs changed. Counted at the target: the job's record of its runs.
#[test]
fn a_forced_rerun_runs_a_date_whose_inputs_did_not_change() {
    let mut w = World::new("forced");
    let (config, runs) = recording_pipeline(&w, "forced");
    w.start_with(&config);
    row_count_then_trigger(&w, "forced", json!(1500));
    let done = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    w.wait_for_sequence("forced", &done);
    let output = sluice()
        .args(["rerun", "forced", day(), "--force", "--reason", "fixed the join"])
        .args(["--topic-prefix", &w.prefix])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let again = [RERUN_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    let events = w.wait_for_sequence("forced", &[done.as_slice(), &again].concat());
    assert_eq!(events[4].detail["force"], json!(true));
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n{}\n", run_id("forced", 1), run_id("forced", 2)),
        "the job ran twice"
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

#[test]
fn rerun_command_is_accepted_after_data_changes() {
    let mut w = World::new("rerun");
    let (mut config, runs) = recording_pipeline(&w, "rerun");
    // No drift budget: late data alone reruns nothing (RERUN_REJECTED); the operator does.
    config["job"]["maxDriftReruns"] = json!(0);
    w.start_with(&config);
    row_count_then_trigger(&w, "rerun", json!(1500));
    let done = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    w.wait_for_sequence("rerun", &done);

    w.rerun("rerun", day(), "same data");
    let events = w.wait_for_sequence("rerun", &[done.as_slice(), &[RERUN_REJECTED]].concat());
    assert!(
        events[4].message.contains("no sensor data changed"),
        "{}",
        events[4].message
    );
    assert_eq!(events[4].detail["reason"], json!("same data"));

    w.sensor("rerun", "row-count", json!({"count": 2500}));
    let late = [RERUN_REJECTED, LATE_DATA_ARRIVAL, RERUN_REJECTED];
    let events = w.wait_for_sequence("rerun", &[done.as_slice(), &late].concat());
    let spent = events[6].detail["rejection"].as_str().unwrap_or_default();
    assert!(spent.contains("maxDriftReruns (0)"), "{spent}");

    // The second rerun goes through the command line, as an operator would send it.
    let output = sluice()
        .args([
            "rerun",
            "rerun",
            day(),
            "--reason",
            "late rows",
            "--requested-by",
            "integration-tests",
        ])
        .args(["--topic-prefix", &w.prefix])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let events = w.wait_for_sequence(
        "rerun",
        &[
            done.as_slice(),
            &late,
            &[RERUN_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
        ]
        .concat(),
    );
    assert_eq!(events[7].detail["requestedBy"], json!("integration-tests"));
    assert_eq!(events[8].detail["results"][1]["seen"], json!(2500));
    let second = run_id("rerun", 2);
    assert_eq!(events[9].run_id.as_deref(), Some(second.as_str()));
    assert_eq!(events[9].attempt, Some(2));
    assert_eq!(events[10].run_id.as_deref(), Some(second.as_str()));
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n{second}\n", run_id("rerun", 1)),
        "the job ran twice"
    );
}

/// A `rerun` naming a schedule the pipeline does not have (`cron`, for this trigger-driven
/// pipeline) is refused with the reason and starts nothing: before, it opened a second
/// execution of the succeeded date and the job ran again, with a new run id, outside the
/// rerun budget. Counted at the target: the job's own record of its runs.
#[test]
fn a_rerun_naming_a_schedule_the_pipeline_does_not_have_starts_nothing() {
    let mut w = World::new("foreign-schedule");
    let (mut config, runs) = recording_pipeline(&w, "foreign");
    // No drift budget: the late data reruns nothing by itself.
    config["job"]["maxDriftReruns"] = json!(0);
    w.start_with(&config);
    row_count_then_trigger(&w, "foreign", json!(1500));
    let done = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    w.wait_for_sequence("foreign", &done);
    // New data, so that a rerun of the pipeline's own schedule would be accepted.
    w.sensor("foreign", "row-count", json!({"count": 2500}));
    w.command(
        "foreign",
        &json!({"pipelineId": "foreign", "command": "rerun", "scheduleId": "cron", "date": day(),
                "reason": "wrong schedule", "requestedBy": "integration-tests"}),
    );
    let late = [LATE_DATA_ARRIVAL, RERUN_REJECTED, RERUN_REJECTED];
    let events = w.wait_for_sequence("foreign", &[done.as_slice(), &late].concat());
    let why = events[6].detail["rejection"].as_str().unwrap_or_default();
    assert!(why.contains("no schedule \"cron\""), "{why}");
    // The pipeline's own rerun, then, is the only second run.
    w.rerun("foreign", day(), "new rows");
    let again = [RERUN_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    w.wait_for_sequence("foreign", &[done.as_slice(), &late, &again].concat());
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("{}\n{}\n", run_id("foreign", 1), run_id("foreign", 2)),
        "the job ran once per accepted run"
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// Pipeline ids starting with `bases`, each on a partition of its own while there are
/// partitions left (suffixes are tried until the murmur2 partitioner agrees).
fn ids_on_distinct_partitions(partitions: i32, bases: &[&str]) -> Vec<String> {
    let mut used = std::collections::BTreeSet::new();
    bases
        .iter()
        .map(|base| {
            let id = (0..)
                .map(|i| match i {
                    0 => base.to_string(),
                    i => format!("{base}-{i}"),
                })
                .find(|id| {
                    let p = sluice::core::partitioning::partition_for(id.as_bytes(), partitions);
                    used.len() >= partitions as usize || !used.contains(&p)
                })
                .unwrap();
            used.insert(sluice::core::partitioning::partition_for(id.as_bytes(), partitions));
            id
        })
        .collect()
}

#[test]
fn dependency_chain_runs_bronze_silver_gold() {
    let target = http_target();
    let mut w = World::new("chain");
    let partitions = w.partitions();
    let ids = ids_on_distinct_partitions(partitions, &["bronze", "silver", "gold"]);
    let (bronze, silver, gold) = (ids[0].as_str(), ids[1].as_str(), ids[2].as_str());
    let owners: std::collections::BTreeSet<i32> = ids
        .iter()
        .map(|id| sluice::core::partitioning::partition_for(id.as_bytes(), partitions).number())
        .collect();
    assert_eq!(owners.len(), ids.len().min(partitions as usize), "{ids:?}");

    let downstream = |id: &str, upstream: &str| {
        json!({
            "pipeline": {"id": id, "owner": "tests"},
            "dependsOn": [upstream],
            "schedule": {"evaluation": {"window": "10m", "interval": "1m"}},
            "job": http_job(&target.url)
        })
    };
    w.config(&pipeline(bronze, http_job(&target.url)));
    w.config(&downstream(silver, bronze));
    w.config(&downstream(gold, silver));
    w.start();
    for id in [bronze, silver, gold] {
        w.wait_for_sequence(id, &[CONFIG_ACCEPTED]);
    }

    row_count_then_trigger(&w, bronze, json!(1500));
    let run = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    let mut chain = Vec::new();
    for id in [bronze, silver, gold] {
        let events = w.wait_for_sequence(id, &run);
        for e in &events[1..] {
            assert_eq!(e.date.as_deref(), Some(day()), "{e:?}");
        }
        assert_eq!(
            events[3].run_id.as_deref(),
            Some(format!("{id}.stream.{}.1", day()).as_str())
        );
        chain.push(events);
    }
    for (upstream, down) in [(bronze, 1), (silver, 2)] {
        let (completed, passed) = (&chain[down - 1][3], &chain[down][1]);
        assert!(
            completed.timestamp <= passed.timestamp,
            "{} started before {upstream} completed",
            ids[down]
        );
        let results = passed.detail["results"].as_array().unwrap();
        let dependency = results
            .iter()
            .find(|r| r["key"] == json!(format!("upstream:{upstream}")))
            .unwrap_or_else(|| panic!("no dependency rule in {results:?}"));
        assert_eq!(dependency["seen"], json!("succeeded"), "{dependency}");
    }
    let requests = target.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "{requests:?}");
    for (request, id) in requests.iter().zip([bronze, silver, gold]) {
        assert!(
            request.ends_with(&format!("{id} {}/ {id}.stream.{}.1", day(), day())),
            "{request}"
        );
    }
}

/// As Interlock's watchdog checked only today's daily run: an hourly run that succeeded is
/// never POST_RUN_SENSOR_MISSING, even with a baseline and its post-run sensor silent past
/// `sensorTimeout`. A daily pipeline beside it, silent longer, is reported: by then the
/// hourly one has had its chance to be wrong.
#[test]
fn an_hourly_success_without_a_post_run_reading_is_never_missing() {
    use chrono::Timelike;
    let mut w = World::new("hourly-missing");
    let post_run = |timeout: &str| json!({"rules": [{"key": "audit", "check": "exists"}], "sensorTimeout": timeout});
    let mut hourly = pipeline("hourly", command_job("true", 0));
    hourly["postRun"] = post_run("2s");
    let mut daily = pipeline("daily", command_job("true", 0));
    daily["postRun"] = post_run("6s");
    w.config(&hourly);
    w.config(&daily);
    w.start();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    w.wait_for_all("both configs", deadline, |es| {
        es.iter().filter(|e| e.kind == CONFIG_ACCEPTED).count() == 2
    });
    // Each run has its post-run sensor before it succeeds (a baseline), then none after.
    let hour = format!("{}T{:02}", day(), Utc::now().hour());
    for (key, data) in [
        ("audit", json!({"rows": 1})),
        ("row-count", json!({"count": 5000})),
        ("upstream", json!({"status": "ready"})),
    ] {
        w.sensor_on("hourly", key, data.clone(), Some(&hour));
        w.sensor("daily", key, data);
    }
    let events = w.wait_for_all("the daily run's POST_RUN_SENSOR_MISSING", deadline, |es| {
        es.iter().any(|e| e.kind == POST_RUN_SENSOR_MISSING)
    });
    let of = |id: &str| -> Vec<_> { events.iter().filter(|e| e.pipeline_id == id).map(|e| e.kind).collect() };
    let hourly = of("hourly");
    assert!(
        hourly.contains(&JOB_COMPLETED) && hourly.contains(&POST_RUN_BASELINE_CAPTURED),
        "{hourly:?}"
    );
    assert!(!hourly.contains(&POST_RUN_SENSOR_MISSING), "{hourly:?}");
    let missing: Vec<_> = events.iter().filter(|e| e.kind == POST_RUN_SENSOR_MISSING).collect();
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].pipeline_id, "daily");
    assert_eq!(
        events
            .iter()
            .find(|e| e.pipeline_id == "hourly" && e.kind == JOB_COMPLETED)
            .and_then(|e| e.date.clone()),
        Some(hour)
    );
}
