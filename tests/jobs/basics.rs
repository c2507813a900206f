//! `http` (with a status URL, retries, exhaustion, the SSRF guard, secrets), `command`
//! (exit codes, output, timeouts) and `kafka` (a request record and the runner's report)
//! end to end: the real processor on the real broker.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use serde_json::{json, Value};
use sluice::core::events::{Event, EventType::*};

use crate::support::{command_job, create_topics, day, pipeline, run_id, scripted_server, wait_until, RunLog, World};

pub(crate) fn go(w: &World, id: &str) {
    w.sensor(id, "row-count", json!({"count": 5000}));
    w.sensor(id, "upstream", json!({"status": "ready"}));
}

pub(crate) fn last(events: &[Event], kind: sluice::core::events::EventType) -> &Event {
    events.iter().rev().find(|e| e.kind == kind).expect("event present")
}

/// Fast retry policies so the tests run in seconds; the defaults are 30 s and 2 s.
pub(crate) fn quick(mut job: Value) -> Value {
    job["triggerRetry"] = json!({"interval": "200ms", "backoffRate": 2, "maxAttempts": 2});
    job["statusCheckRetry"] = json!({"interval": "100ms", "backoffRate": 2, "maxAttempts": 2});
    job["pollInterval"] = json!("1s");
    job
}

/// A job still running when its poll window closes ends its run, however many retries are
/// left: one call at the target, never a second copy beside the first. The job's success
/// reported later is told (JOB_REPORT_AFTER_END), and changes nothing else.
#[test]
fn a_job_past_its_poll_window_is_called_once_however_many_retries_are_left() {
    let server = scripted_server();
    server.script("/status", &[(200, r#"{"status": "running"}"#)]);
    let mut w = World::new("poll-window");
    let job = quick(json!({"type": "http", "config": {
        "url": format!("{}/start", server.base),
        "statusUrl": format!("{}/status", server.base)
    }, "maxRetries": 2, "jobPollWindowSeconds": 60}));
    w.start_with(&pipeline("pw", job));
    go(&w, "pw");
    let window = Instant::now() + Duration::from_secs(150);
    w.wait_for_until("pw", "the poll window to close", window, |es| {
        es.iter().any(|e| e.kind == JOB_POLL_EXHAUSTED)
    });
    // Before, the timeout spent a retry and attempt 2 was called at once: give it the time.
    let calls = || server.requests_to("POST /start").len();
    let settle = Instant::now() + Duration::from_secs(5);
    while Instant::now() < settle && calls() == 1 {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(calls(), 1, "one call: {:?}", server.requests_to("POST /start"));
    w.job("pw", &run_id("pw", 1), "succeeded");
    let events = w.wait_for("pw", "the late report", |es| {
        es.iter().any(|e| e.kind == JOB_REPORT_AFTER_END)
    });
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_POLL_EXHAUSTED,
            JOB_REPORT_AFTER_END
        ]
    );
    assert_eq!(calls(), 1);
    w.stop();
}

/// A target down for a while: the trigger's retries are spent (INFRA_FAILURE), but the
/// date is not closed. The next trigger sensor, once the target is back, runs it: no
/// rerun command needed.
#[test]
fn after_an_outage_the_next_trigger_sensor_runs_the_date() {
    let server = scripted_server();
    // Down for the first try and its 2 retries, then up.
    server.script("/start", &[(503, "down"), (503, "down"), (503, "down"), (200, "{}")]);
    let mut w = World::new("outage");
    let job = quick(json!({"type": "http", "config": {"url": format!("{}/start", server.base)}}));
    w.start_with(&pipeline("out", job));
    go(&w, "out");
    let events = w.wait_for("out", "the outage", |es| es.iter().any(|e| e.kind == INFRA_FAILURE));
    assert_eq!(last(&events, INFRA_FAILURE).detail["restartOnTrigger"], json!(true));
    assert_eq!(server.requests_to("POST /start").len(), 3);
    // The producer sends its trigger again, as hourly producers do.
    w.sensor("out", "upstream", json!({"status": "ready"}));
    let events = w.wait_for("out", "the run", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            INFRA_FAILURE,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED
        ]
    );
    assert_eq!(server.requests_to("POST /start").len(), 4);
    w.stop();
}

#[test]
fn http_with_a_status_url_is_polled_until_it_succeeds() {
    let server = scripted_server();
    server.script(
        "/status",
        &[
            (200, r#"{"state": {"phase": "RUNNING"}}"#),
            (503, "busy"),
            (200, r#"{"state": {"phase": "SUCCEEDED"}}"#),
        ],
    );
    let mut w = World::new("http-status");
    let job = quick(json!({"type": "http", "config": {
        "url": format!("{}/start", server.base),
        "statusUrl": format!("{}/status?run=${{RUN_ID}}", server.base),
        "statusField": "state.phase",
        "headers": {"Authorization": "Bearer ${env:SLUICE_TEST_TOKEN}"}
    }, "maxRetries": 0}));
    w.secret("SLUICE_TEST_TOKEN", "s3cret-token-value");
    w.start_with(&pipeline("hs", job));
    go(&w, "hs");
    let events = w.wait_for("hs", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let run = run_id("hs", 1);
    let starts = server.requests_to("POST /start");
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert!(starts[0]
        .to_ascii_lowercase()
        .contains(&format!("idempotency-key: {run}").to_ascii_lowercase()));
    // A W3C trace context: version 00, a 32-hex trace id, a 16-hex parent id, flags; the
    // status checks of the run share its trace.
    let traceparent = |request: &str| {
        request
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("traceparent: ").map(str::to_string))
            .unwrap_or_else(|| panic!("no traceparent in {request}"))
    };
    let trace = traceparent(&starts[0]);
    let parts: Vec<&str> = trace.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [2, 32, 16, 2],
        "{trace}"
    );
    assert!(
        parts.iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit())),
        "{trace}"
    );
    let checks = server.requests_to("GET /status");
    assert!(!checks.is_empty());
    assert_eq!(
        traceparent(&checks[0]).split('-').nth(1),
        Some(parts[1]),
        "one trace per run"
    );
    assert!(
        starts[0].contains("Bearer s3cret-token-value"),
        "the secret reaches the target: {}",
        starts[0]
    );
    // running, then a 503 retried within the same check, then succeeded.
    let checks = server.requests_to("GET /status");
    assert!(checks.len() >= 3, "{checks:?}");
    assert!(
        checks[0].starts_with(&format!("GET /status?run={run} HTTP/1.1")),
        "{}",
        checks[0]
    );
    let completed = last(&events, JOB_COMPLETED);
    assert_eq!(completed.attempt, Some(1), "a failed status check spends no job retry");
    assert_eq!(completed.detail["metadata"]["state"], "SUCCEEDED");
    // The secret is never in events or logs.
    for e in w.events_seen() {
        assert!(!serde_json::to_string(e).unwrap().contains("s3cret"), "{e:?}");
    }
    assert!(!w.log().contains("s3cret"));
    w.stop();
}

#[test]
fn trigger_retries_recover_from_throttling_and_exhaustion_is_an_infra_failure() {
    let server = scripted_server();
    server.script(
        "/flaky",
        &[(429, r#"{"error": "slow down"}"#), (502, "bad gateway"), (200, "{}")],
    );
    server.script("/dead", &[(503, r#"{"error": "down"}"#)]);
    let mut w = World::new("http-retry");
    let flaky = quick(json!({"type": "http", "config": {"url": format!("{}/flaky", server.base)}, "maxRetries": 2}));
    let dead = quick(json!({"type": "http", "config": {"url": format!("{}/dead", server.base)}, "maxRetries": 2}));
    w.config(&pipeline("dead", dead));
    w.start_with(&pipeline("flaky", flaky));
    go(&w, "flaky");
    go(&w, "dead");
    let events = w.wait_for("flaky", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    assert_eq!(server.requests_to("POST /flaky").len(), 3, "two retries, then accepted");
    assert_eq!(last(&events, JOB_COMPLETED).attempt, Some(1));

    let events = w.wait_for("dead", "infra failure", |es| es.iter().any(|e| e.kind == INFRA_FAILURE));
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [CONFIG_ACCEPTED, VALIDATION_PASSED, INFRA_FAILURE]);
    let failure = last(&events, INFRA_FAILURE);
    assert_eq!(failure.run_id.as_deref(), Some(run_id("dead", 1).as_str()));
    assert!(
        failure.message.contains("trigger failed 3 time(s), retries spent"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("503"), "{}", failure.message);
    assert_eq!(failure.detail["failureCategory"], "INFRA");
    assert_eq!(server.requests_to("POST /dead").len(), 3);
    // The run ended: no second job attempt although maxRetries allows two.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(server.requests_to("POST /dead").len(), 3);
    w.stop();
}

#[test]
fn the_ssrf_guard_refuses_loopback_targets_unless_allowed() {
    let server = scripted_server();
    let mut w = World::new("ssrf");
    w.allow_targets = String::new();
    let job = quick(
        json!({"type": "http", "config": {"url": format!("{}/run", server.base)}, "maxRetries": 0, "maxCodeRetries": 0}),
    );
    w.start_with(&pipeline("ssrf", job));
    go(&w, "ssrf");
    let events = w.wait_for("ssrf", "refusal", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = last(&events, JOB_FAILED);
    assert_eq!(failed.detail["failureCategory"], "PERMANENT");
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(message.contains("127.0.0.1 is a loopback address"), "{message}");
    assert!(message.contains("--allow-target"), "the remedy is named: {message}");
    assert!(server.requests.lock().unwrap().is_empty(), "nothing reached the target");
    w.stop();
}

#[test]
fn command_jobs_report_exit_codes_output_and_timeouts() {
    let mut w = World::new("command");
    let failing = quick(command_job("echo partial-output; echo broken-input >&2; exit 3", 0));
    let mut slow = quick(command_job("sleep 30", 0));
    slow["config"]["timeout"] = json!(1);
    let missing = command_job("no-such-program-anywhere", 0);
    w.config(&pipeline("slow", slow));
    w.config(&pipeline("missing", missing));
    w.start_with(&pipeline("failing", failing));
    for id in ["failing", "slow", "missing"] {
        go(&w, id);
    }
    let events = w.wait_for("failing", "failure", |es| es.iter().any(|e| e.kind == RETRY_EXHAUSTED));
    let failed = last(&events, JOB_FAILED);
    assert_eq!(failed.detail["jobMessage"], "command exited 3: broken-input");
    assert_eq!(failed.detail["metadata"]["exitCode"], 3);
    assert_eq!(failed.detail["metadata"]["stdout"], "partial-output");
    // Run three times (the first, and job.triggerRetry's 2 retries) before it cost the run.
    assert_eq!(failed.detail["metadata"]["tries"], 3);
    let events = w.wait_for("slow", "timeout", |es| es.iter().any(|e| e.kind == JOB_TIMEOUT));
    let timeout = last(&events, JOB_TIMEOUT);
    assert_eq!(timeout.detail["failureCategory"], "TIMEOUT");
    assert!(timeout.message.contains("timed out after 1s"), "{}", timeout.message);
    let events = w.wait_for("missing", "failure", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = last(&events, JOB_FAILED);
    assert_eq!(
        failed.detail["failureCategory"], "PERMANENT",
        "exit 127: the program is not there"
    );
    assert_eq!(failed.detail["metadata"]["exitCode"], 127);
    assert!(
        failed.detail["metadata"].get("tries").is_none(),
        "a refusal is not run again"
    );
    w.stop();
}

/// A trigger that fails once (a command's first run, as a Lambda's cold start would) is
/// tried again by `job.triggerRetry` before it costs the run: with `maxRetries: 0` the run
/// still completes, on its first attempt.
#[test]
fn a_trigger_failing_once_then_succeeding_completes_without_spending_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran-once");
    let mut w = World::new("flaky-command");
    let flaky = quick(command_job(
        &format!(
            "if [ -e {0} ]; then echo second; else touch {0}; echo cold >&2; exit 1; fi",
            marker.display()
        ),
        0,
    ));
    w.start_with(&pipeline("flaky", flaky));
    go(&w, "flaky");
    let events = w.wait_for("flaky", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let completed = last(&events, JOB_COMPLETED);
    assert_eq!(completed.attempt, Some(1), "no job retry was spent");
    assert_eq!(completed.detail["metadata"]["stdout"], "second");
    w.stop();
}

#[test]
fn kafka_jobs_publish_a_request_and_the_runner_reports_back() {
    let mut w = World::new("kafka-job");
    let requests = w.topic("job-requests");
    create_topics(&w.prefix, &[("job-requests", 1)]);
    let job = json!({"type": "kafka", "config": {
        "topic": requests, "payload": {"table": "gold.revenue", "date": "${DATE}"},
        "headers": {"team": "analytics"}
    }});
    w.start_with(&pipeline("kj", job));
    go(&w, "kj");
    w.wait_for("kj", "trigger", |es| es.iter().any(|e| e.kind == JOB_TRIGGERED));

    // The runner: reads the request, does the work, reports on sluice.jobs.
    let runner: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &w.brokers)
        .set("group.id", format!("{}runner", w.prefix))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    runner.subscribe(&[&requests]).unwrap();
    let mut request = None;
    wait_until("the job request", Duration::from_secs(30), String::new, || {
        if let Some(Ok(m)) = runner.poll(Duration::from_millis(200)) {
            let run = m
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "sluice-run-id"))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).to_string());
            let team = m.headers().and_then(|h| h.iter().find(|h| h.key == "team")).is_some();
            let value: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            request = Some((m.key().map(|k| k.to_vec()), run, team, value));
        }
        request.is_some()
    });
    let (key, header_run, team, value) = request.unwrap();
    let run = run_id("kj", 1);
    assert_eq!(key.as_deref(), Some(&b"kj"[..]));
    assert_eq!(header_run.as_deref(), Some(run.as_str()));
    assert!(team, "configured headers are sent");
    assert_eq!(
        value,
        json!({"pipelineId": "kj", "scheduleId": "stream", "date": day(), "runId": run,
        "attempt": 1, "payload": {"table": "gold.revenue", "date": day()}})
    );
    w.job("kj", &run, "succeeded");
    let events = w.wait_for("kj", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let triggered = last(&events, JOB_TRIGGERED);
    assert_eq!(triggered.detail["metadata"]["topic"], requests);
    w.stop();
}

/// Issue 60, item 1: a config author cannot write Sluice's own topics through a `kafka` job.
/// One aimed at the changelog (under this deployment's prefix) is refused at call time,
/// PERMANENT; one that sets a `sluice.batch` header (the changelog's attribution) is warned
/// about when its config is read and refused too. Counted where it would land: no record
/// keyed by either pipeline reaches the changelog.
#[test]
fn kafka_jobs_cannot_write_sluices_own_topics_or_headers() {
    let mut w = World::new("kafka-forge");
    let requests = w.topic("job-requests");
    create_topics(&w.prefix, &[("job-requests", 1)]);
    let quick_kafka = |config: Value| quick(json!({"type": "kafka", "maxCodeRetries": 0, "config": config}));
    w.config(&pipeline("aim", quick_kafka(json!({"topic": w.topic("changelog")}))));
    let forged = json!({"topic": requests, "headers": {"sluice.batch": "~~~~~~~~~~~~~~~~"}});
    w.start_with(&pipeline("forge", quick_kafka(forged)));
    let accepted = w.wait_for("forge", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    let warnings = last(&accepted, CONFIG_ACCEPTED).detail["warnings"].to_string();
    assert!(
        warnings.contains("sluice.batch") && warnings.contains("every trigger of this job will be refused"),
        "{warnings}"
    );
    for id in ["aim", "forge"] {
        go(&w, id);
        let events = w.wait_for(id, "the refusal", |es| es.iter().any(|e| e.kind == JOB_FAILED));
        let failed = last(&events, JOB_FAILED);
        assert_eq!(failed.detail["failureCategory"], "PERMANENT", "{failed:?}");
        let said = failed.detail["jobMessage"].as_str().unwrap_or_default();
        assert!(said.contains("Sluice's own"), "{id}: {said}");
    }
    for p in 0..w.partitions() {
        let keys: Vec<_> = w
            .records("changelog", p, 0)
            .into_iter()
            .filter_map(|(k, _)| k)
            .collect();
        assert!(
            !keys.iter().any(|k| k == b"aim" || k == b"forge"),
            "a job's record reached the changelog"
        );
    }
    assert_eq!(
        w.watermarks("job-requests", 0).1,
        0,
        "nothing was published with a forged header"
    );
    w.stop();
}

/// Issue 60, item 1, tried from outside: one record on the changelog with a forged
/// `sluice.batch` header (an epoch of sixteen `~`, ahead of every real one) used to make
/// every later write of the owner stale, so after the state directory was lost the restore
/// forgot the run that succeeded since, and the same reading ran the date a second time.
/// No fence accounts for that epoch now: the restore ignores it and says so, and the date
/// runs once. Counted at the target: the command appends its run id to a file.
#[test]
fn a_forged_changelog_record_cannot_roll_a_partition_back() {
    let log = RunLog::new();
    let mut w = World::new("forged-batch");
    w.start_with(&pipeline("ran", command_job(&log.command(), 0)));
    w.wait_for("ran", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    for p in 0..w.partitions() {
        w.produce_with_headers("changelog", p, "forged", b"x", &[("sluice.batch", "~~~~~~~~~~~~~~~~")]);
    }
    go(&w, "ran");
    w.wait_for("ran", "the run", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    assert_eq!(log.runs().len(), 1);
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    for entry in std::fs::read_dir(w.state.path()).unwrap() {
        std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
    }
    w.start();
    // The same reading again, then a rerun whose answer says what the state holds.
    go(&w, "ran");
    let (answer, events) = rerun_answer(&mut w, "ran", "after the restore");
    assert_eq!(answer.kind, RERUN_REJECTED, "{answer:?}");
    assert!(
        answer.detail["rejection"]
            .as_str()
            .unwrap()
            .contains("no sensor data changed"),
        "the restored state holds the completed run: {answer:?}"
    );
    assert_eq!(events.iter().filter(|e| e.kind == JOB_TRIGGERED).count(), 1);
    assert_eq!(log.runs().len(), 1, "the date ran once");
    assert!(w.log().contains("no fence accounts for"), "the restore said so");
    w.stop();
}

/// Asks for a rerun of `pipeline`'s date: its answer (accepted or rejected), which says
/// what the state holds, and the pipeline's events by then.
fn rerun_answer(w: &mut World, pipeline: &str, reason: &str) -> (Event, Vec<Event>) {
    w.rerun(pipeline, day(), reason);
    let answered = |e: &Event| e.kind == RERUN_REJECTED || e.kind == RERUN_ACCEPTED;
    let events = w.wait_for(pipeline, "the rerun's answer", |es| es.iter().any(answered));
    let answer = events.iter().find(|e| answered(e)).unwrap().clone();
    (answer, events)
}

/// `config delete`, then `config apply` of the same pipeline and the same reading again:
/// the date that ran is not called a second time under the run id the target has already
/// seen (it was, when a deletion dropped every execution). Counted at the target.
#[test]
fn a_date_that_ran_is_not_run_again_after_its_config_is_deleted_and_applied_again() {
    let log = RunLog::new();
    let mut w = World::new("delete-reapply");
    let config = pipeline("again", command_job(&log.command(), 0));
    w.start_with(&config);
    go(&w, "again");
    w.wait_for("again", "the run", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    w.produce("config", Some("again"), None);
    w.wait_for("again", "the deletion", |es| {
        es.iter()
            .any(|e| e.kind == CONFIG_ACCEPTED && e.detail.get("deleted") == Some(&json!(true)))
    });
    w.config(&config);
    go(&w, "again");
    let (answer, events) = rerun_answer(&mut w, "again", "after the apply");
    assert_eq!(answer.kind, RERUN_REJECTED, "the completed run was kept: {answer:?}");
    assert_eq!(events.iter().filter(|e| e.kind == JOB_TRIGGERED).count(), 1);
    assert_eq!(log.runs(), [run_id("again", 1)], "the date ran once");
    w.stop();
}

/// A status API that fails for longer than a check's retries (503), or refuses the question
/// (403: Sluice's identity may not read runs), while the trigger sensor keeps arriving: the
/// run goes on (JOB_STATUS_UNKNOWN, the refusal as something a person must fix), nothing
/// starts a second copy, and the job's own answer, once the API is back, ends the run. As
/// Interlock's `checkjob.go` kept polling; before, the first was INFRA_FAILURE and the next
/// trigger sensor started attempt 2 beside the running job, the second a PERMANENT failure
/// that `maxCodeRetries` retried at once.
#[test]
fn a_status_check_that_cannot_ask_never_ends_the_run_nor_starts_a_second_copy() {
    let server = scripted_server();
    server.script("/down-status", &[(503, r#"{"error": "status service down"}"#)]);
    server.script(
        "/denied-status",
        &[(403, r#"{"message": "not authorized to read runs"}"#)],
    );
    let mut w = World::new("status-unknown");
    let job = |name: &str| {
        quick(json!({"type": "http", "maxRetries": 3, "maxCodeRetries": 2, "config": {
            "url": format!("{}/{name}-start", server.base),
            "statusUrl": format!("{}/{name}-status", server.base)}}))
    };
    w.config(&pipeline("denied", job("denied")));
    w.start_with(&pipeline("down", job("down")));
    for id in ["down", "denied"] {
        go(&w, id);
        w.wait_for(id, "the unknown status", |es| {
            es.iter().any(|e| e.kind == JOB_STATUS_UNKNOWN)
        });
        // The producer keeps sending its trigger, as hourly producers do; then a reading no
        // rule reads, whose UNKNOWN_SENSOR shows every reading before it was handled.
        for _ in 0..3 {
            w.sensor(id, "upstream", json!({"status": "ready"}));
        }
        w.sensor(id, "handled-up-to-here", json!({}));
        w.wait_for(id, "the barrier", |es| es.iter().any(|e| e.kind == UNKNOWN_SENSOR));
    }
    let starts = |name: &str| server.requests_to(&format!("POST /{name}-start")).len();
    assert_eq!((starts("down"), starts("denied")), (1, 1), "one start each");
    assert!(
        server.requests_to("GET /down-status").len() >= 3,
        "the first check and its retries"
    );
    // The status API answers again: the job's own outcome ends each run.
    for name in ["down", "denied"] {
        server.script(&format!("/{name}-status"), &[(200, r#"{"status": "succeeded"}"#)]);
    }
    // Each run's checks have backed off meanwhile, by at most 5 minutes (its next check may be
    // that far): wait for the check after the longest backoff, not the usual minute.
    let backed_off = Instant::now() + Duration::from_secs(6 * 60);
    for (id, category, action) in [("down", "INFRA", false), ("denied", "PERMANENT", true)] {
        let events = w.wait_for_until(id, "completion", backed_off, |es| {
            es.iter().any(|e| e.kind == JOB_COMPLETED)
        });
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                CONFIG_ACCEPTED,
                VALIDATION_PASSED,
                JOB_TRIGGERED,
                JOB_STATUS_UNKNOWN,
                UNKNOWN_SENSOR,
                JOB_COMPLETED
            ],
            "{id}"
        );
        let unknown = last(&events, JOB_STATUS_UNKNOWN);
        assert_eq!(unknown.detail["failureCategory"], category, "{id}");
        assert_eq!(unknown.detail["actionNeeded"], action, "{id}");
        assert_eq!(last(&events, JOB_COMPLETED).attempt, Some(1), "{id}");
    }
    assert_eq!((starts("down"), starts("denied")), (1, 1), "still one start each");
    w.stop();
}

/// A trigger whose request outlasts the job's own `timeout` (1 s) on every try: its retries
/// spent, the run ends with INFRA_FAILURE naming the timeout.
#[test]
fn a_request_that_times_out_ends_with_infra_failure() {
    // An endpoint that answers after 3 s, past the job's 1 s request timeout.
    let slow = crate::support::serve(|_| {
        std::thread::sleep(Duration::from_secs(3));
        (200, "{}".into())
    });
    let mut w = World::new("http-infra");
    let mut late =
        quick(json!({"type": "http", "maxRetries": 3, "config": {"url": format!("{slow}/start"), "timeout": 1}}));
    late["triggerRetry"]["maxAttempts"] = json!(1);
    w.start_with(&pipeline("late", late));
    go(&w, "late");
    let events = w.wait_for("late", "infra failure", |es| es.iter().any(|e| e.kind == INFRA_FAILURE));
    let failure = last(&events, INFRA_FAILURE);
    assert!(
        failure.message.contains("trigger failed 2 time(s)"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("timed out"), "{}", failure.message);
    w.stop();
}

/// A command job that records each run it makes (see [`RunLog`]), then fails.
fn recorded_failure() -> (RunLog, Value) {
    let log = RunLog::new();
    let job = quick(command_job(&format!("{}; exit 1", log.command()), 0));
    (log, job)
}

/// A command that keeps failing (its tries and `maxRetries` spent) releases its date as
/// Interlock released its trigger lock: RETRY_EXHAUSTED says so, and the next trigger sensor
/// runs it again. Counted where the runs land: the file the command appends to.
#[test]
fn a_trigger_that_keeps_failing_releases_the_date_for_the_next_trigger_sensor() {
    let (log, mut job) = recorded_failure();
    let mut w = World::new("trigger-release");
    job["triggerRetry"]["maxAttempts"] = json!(0);
    w.start_with(&pipeline("rel", job));
    go(&w, "rel");
    let events = w.wait_for("rel", "the first exhaustion", |es| {
        es.iter().any(|e| e.kind == RETRY_EXHAUSTED)
    });
    assert_eq!(last(&events, RETRY_EXHAUSTED).detail["restartOnTrigger"], json!(true));
    assert_eq!(log.runs().len(), 1);
    w.sensor("rel", "upstream", json!({"status": "ready"}));
    w.wait_for("rel", "the second exhaustion", |es| {
        es.iter().filter(|e| e.kind == RETRY_EXHAUSTED).count() == 2
    });
    assert_eq!(log.runs().len(), 2, "the next trigger sensor ran the date again, once");
    w.stop();
}

/// A failing command whose run is cancelled while the executor waits to run it again is
/// never run again: the run's end reaches the executor, which gives the retry up.
#[test]
fn a_failing_command_is_not_run_again_after_its_run_was_cancelled() {
    let (log, mut job) = recorded_failure();
    let mut w = World::new("cancel-retry");
    job["triggerRetry"] = json!({"interval": "20s", "backoffRate": 1, "maxAttempts": 2});
    w.start_with(&pipeline("cr", job));
    go(&w, "cr");
    wait_until(
        "the first run",
        Duration::from_secs(60),
        || w.log_tail(),
        || log.runs().len() == 1,
    );
    w.command("cr", &json!({"pipelineId": "cr", "command": "cancel", "date": day()}));
    w.wait_for("cr", "the cancel", |es| es.iter().any(|e| e.kind == RUN_CANCELLED));
    wait_until(
        "the executor to give the retry up",
        Duration::from_secs(30),
        || w.log_tail(),
        || w.log().contains("command not run again: its run ended"),
    );
    assert_eq!(log.runs().len(), 1, "the retry 20 s later never ran");
    w.stop();
}

/// A dry run shadowing a live orchestrator pages no one: its rules never pass, a sensor no
/// rule reads arrives, and what a live run would alert on (VALIDATION_EXHAUSTED,
/// UNKNOWN_SENSOR) is published as DRY_RUN_WOULD_REPORT; no real alert type, no call.
#[test]
fn a_dry_run_whose_rules_never_pass_publishes_only_dry_run_events() {
    let server = scripted_server();
    let mut w = World::new("dry-quiet");
    let mut config = pipeline(
        "dry",
        quick(json!({"type": "http", "config": {"url": format!("{}/start", server.base)}})),
    );
    config["dryRun"] = json!(true);
    config["schedule"]["evaluation"] = json!({"window": "5s", "interval": "1s"});
    w.start_with(&config);
    w.sensor("dry", "row-count", json!({"count": 10}));
    w.sensor("dry", "upstream", json!({"status": "ready"}));
    w.sensor("dry", "rows-typo", json!({"count": 10}));
    let events = w.wait_for("dry", "what the dry run would report", |es| {
        let told = |kind: &str| {
            es.iter()
                .any(|e| e.kind == DRY_RUN_WOULD_REPORT && e.detail["wouldReport"] == kind)
        };
        told("VALIDATION_EXHAUSTED") && told("UNKNOWN_SENSOR")
    });
    let real: Vec<_> = events
        .iter()
        .map(|e| e.kind)
        .filter(|k| k.category() != sluice::core::events::Category::DryRun && *k != CONFIG_ACCEPTED)
        .collect();
    assert!(real.is_empty(), "a dry run published {real:?}");
    assert!(server.requests_to("POST /start").is_empty(), "nothing called");
    w.stop();
}

/// The body of a recorded raw request (what follows the head).
fn body_of(raw: &str) -> &str {
    raw.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or("")
}

/// Interlock's http bodies and variables through the real processor: a string `body` is sent
/// byte for byte once its templates are rendered (internal/trigger/trigger.go:107-125), a
/// job without one sends the run's date arguments (internal/lambda/orchestrator/trigger.go),
/// and `${INTERLOCK_NAME}` is read from the processor's environment like `${env:NAME}`: an
/// unset one fails the run, naming it.
#[test]
fn http_string_bodies_are_sent_raw_and_bodyless_jobs_send_par_day() {
    let server = scripted_server();
    let mut w = World::new("http-bodies");
    w.env
        .push(("INTERLOCK_SLUICE_TEST_KEY".into(), "k3y-from-the-env".into()));
    // Interlock's rule, every INTERLOCK_ variable, as a migrated deployment allows it.
    w.allow_env.push("INTERLOCK_*".into());
    let raw = quick(json!({"type": "http", "maxRetries": 0, "config": {
        "url": format!("{}/raw", server.base),
        "body": "{\"body\": {\"pipeline\": \"${PIPELINE}\",  \"day\": \"${DATE_COMPACT}\"}}",
        "headers": {"X-Api-Key": "${INTERLOCK_SLUICE_TEST_KEY}"}
    }}));
    let bare = quick(json!({"type": "http", "maxRetries": 0, "config": {"url": format!("{}/bare", server.base)}}));
    let unset = quick(json!({"type": "http", "maxRetries": 0, "maxCodeRetries": 0, "config": {
        "url": format!("{}/unset", server.base),
        "headers": {"X-Api-Key": "${INTERLOCK_SLUICE_SURELY_UNSET}"}
    }}));
    w.config(&pipeline("bare", bare));
    w.config(&pipeline("unset", unset));
    w.start_with(&pipeline("raw", raw));
    for id in ["raw", "bare", "unset"] {
        go(&w, id);
    }
    let compact = day().replace('-', "");
    w.wait_for("raw", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let posts = server.requests_to("POST /raw");
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(
        body_of(&posts[0]),
        format!("{{\"body\": {{\"pipeline\": \"raw\",  \"day\": \"{compact}\"}}}}"),
        "the string as written, not a JSON string"
    );
    let head = posts[0].to_ascii_lowercase();
    assert!(head.contains("content-type: application/json\r\n"), "{head}");
    assert!(head.contains("x-api-key: k3y-from-the-env\r\n"), "{head}");

    w.wait_for("bare", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let posts = server.requests_to("POST /bare");
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(body_of(&posts[0]), format!(r#"{{"par_day":"{compact}"}}"#));
    assert!(posts[0]
        .to_ascii_lowercase()
        .contains("content-type: application/json\r\n"));

    let events = w.wait_for("unset", "failure", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = last(&events, JOB_FAILED);
    assert_eq!(failed.detail["failureCategory"], "PERMANENT");
    assert_eq!(
        failed.detail["jobMessage"],
        "secret environment variable(s) not set: INTERLOCK_SLUICE_SURELY_UNSET"
    );
    assert!(server.requests_to("POST /unset").is_empty(), "nothing was sent");
    for e in w.events_seen() {
        assert!(!serde_json::to_string(e).unwrap().contains("k3y-from"), "{e:?}");
    }
    assert!(!w.log().contains("k3y-from"));
    w.stop();
}

/// An hourly run of a bodyless http job: `par_hour` joins `par_day`, exactly as Interlock
/// encoded them.
#[tokio::test]
async fn an_hourly_bodyless_http_job_sends_par_day_and_par_hour() {
    use sluice::core::config::{JobConfig, JobKind};
    use sluice::core::lifecycle::TriggerRequest;
    use sluice::core::records::JobStatus;
    use sluice::runtime::jobs::{http, Call, Client, Guard, Redactor};
    let server = scripted_server();
    let client = Client::new(Guard::new(vec!["127.0.0.0/8".parse().unwrap()]), None).unwrap();
    let config = json!({"url": format!("{}/hourly", server.base), "method": "put"});
    let config = JobConfig::from_json(JobKind::Http, &config).unwrap();
    let request = TriggerRequest::new("p", &crate::execution("cron", "2026-03-03T10"), 1, config);
    let call = Call {
        request: &request,
        config: &request.config,
        client: &client,
        producer: None,
        redactor: Redactor::none(),
    };
    let outcome = http::trigger(&call).await.unwrap();
    assert_eq!(outcome.status, JobStatus::Succeeded, "{outcome:?}");
    let puts = server.requests_to("PUT /hourly");
    assert_eq!(puts.len(), 1, "{puts:?}");
    assert_eq!(body_of(&puts[0]), r#"{"par_day":"20260303","par_hour":"10"}"#);
}
