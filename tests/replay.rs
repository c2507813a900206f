//! History on the real broker. `sluice replay`: a recorded run (an SLA breach, a failed
//! attempt and its retry) replayed in event time reproduces the live decisions and their
//! event ids; two replays are byte-identical; a changed config shows up in the diff.
//! `sluice reset`: a restart after a reset reprocesses from the state at the point.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde_json::json;
use sluice::core::events::{Event, EventType::*};

use super::{barrier, next_minute, row_count_then_trigger, sla_pipeline, DEADLINE_LEAD};
use crate::support::{pipeline, sluice_on, World};

fn replay(w: &World, args: &[&str]) -> Output {
    sluice_on(&w.brokers)
        .args(["replay", "--topic-prefix", &w.prefix])
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Event ids and types per pipeline, in order.
fn by_pipeline<'a>(events: impl IntoIterator<Item = &'a Event>) -> BTreeMap<String, Vec<(String, String)>> {
    let mut map: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for e in events {
        map.entry(e.pipeline_id.to_string())
            .or_default()
            .push((e.kind.name().to_string(), e.event_id.clone()));
    }
    map
}

#[test]
fn replay_reproduces_a_recorded_run_and_shows_a_config_change() {
    let mut w = World::new("replay");
    // Replay runs in the records' event time, so this processor keeps the system clock (no
    // `--clock-offset`) and the test waits for a real deadline.
    let lead = chrono::TimeDelta::from_std(DEADLINE_LEAD).unwrap();
    let deadline = next_minute(chrono::Utc::now() + lead);
    let date = deadline.format("%Y-%m-%d").to_string();
    w.start_with(&sla_pipeline("sla", deadline));
    let retry = pipeline("retry", super::fails_on_the_first_attempt("exit 3"));
    w.config(&retry);
    w.wait_for("retry", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    row_count_then_trigger(&w, "retry", json!(1000));
    w.sensor_on("sla", "row-count", json!({"count": 1}), Some(&date));
    w.sensor_on("sla", "upstream", json!({"status": "ready"}), Some(&date));
    w.wait_for_sequence("retry", &super::RETRIED);
    w.wait_for_until(
        "sla",
        "SLA_BREACH",
        w.instant_at(deadline) + Duration::from_secs(30),
        |es| es.iter().any(|e| e.kind == SLA_BREACH),
    );
    barrier(&mut w, "sla", 1);
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let live = by_pipeline(w.events_seen());
    assert_eq!(
        live["sla"].iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        ["CONFIG_ACCEPTED", "SLA_WARNING", "SLA_BREACH", "INPUT_REJECTED"]
    );

    // The whole log, replayed: the same decisions under the same ids, and a diff that says so.
    let first = w.scratch.path().join("first.jsonl");
    let out = replay(&w, &["--output", first.to_str().unwrap(), "--diff", "--exit-code"]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("2 pipelines, 0 changed"), "{report}");
    assert!(report.contains("0 missing, 0 extra, 0 retimed"), "{report}");
    assert!(report.contains("retry: 7 same"), "{report}");
    let replayed: Vec<Event> = std::fs::read_to_string(&first)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(by_pipeline(&replayed), live, "{report}");
    let breach = replayed.iter().find(|e| e.kind == SLA_BREACH).unwrap();
    assert_eq!(
        breach.timestamp, deadline,
        "the breach fires at the deadline in event time"
    );

    // Again: byte for byte the same.
    let second = w.scratch.path().join("second.jsonl");
    let out = replay(&w, &["--output", second.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read(&first).unwrap(), std::fs::read(&second).unwrap());

    // A stricter rule set for `retry`: the run would never have started.
    let dir = w.scratch.path().join("pipelines");
    std::fs::create_dir_all(&dir).unwrap();
    let mut stricter = retry.clone();
    stricter["validation"]["rules"][1]["value"] = json!(5000);
    std::fs::write(dir.join("retry.yaml"), serde_json::to_string_pretty(&stricter).unwrap()).unwrap();
    let out = replay(
        &w,
        &[
            "--pipelines",
            dir.to_str().unwrap(),
            "--pipeline",
            "retry",
            "--diff",
            "--exit-code",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "a change, so --exit-code fails:\n{report}");
    for line in [
        "- VALIDATION_PASSED",
        "- JOB_TRIGGERED            stream/",
        "- JOB_FAILED",
        "- JOB_COMPLETED",
        "1 pipelines, 1 changed",
    ] {
        assert!(report.contains(line), "{line:?} in\n{report}");
    }
    assert!(!report.contains("sla:"), "only the pipeline asked for:\n{report}");
}

#[test]
fn replay_refuses_the_live_events_topic_and_bad_positions() {
    let w = World::new("replay-refuse");
    let out = replay(&w, &["--output-topic", &w.topic("events")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("--allow-events-topic"), "{}", text(&out));
    let out = replay(&w, &["--from-offset", "events:0:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("TOPIC:PARTITION:OFFSET"), "{}", text(&out));
}

/// `sluice reset` for the world's group: exit code and stdout.
fn reset(w: &World, args: &[&str]) -> (Option<i32>, String) {
    let out = sluice_on(&w.brokers)
        .args([
            "reset",
            "--topic-prefix",
            &w.prefix,
            "--group",
            &format!("{}group", w.prefix),
        ])
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), text(&out))
}

/// The events of `kind` seen so far.
fn ids_of(w: &World, kind: sluice::core::events::EventType) -> Vec<String> {
    w.events_seen()
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.event_id.clone())
        .collect()
}

#[test]
fn reset_to_a_time_then_a_restart_reprocesses_from_the_state_at_that_time() {
    let mut w = World::new("reset");
    let (config, runs) = super::recording_pipeline(&w, "reset");
    w.start_with(&config);
    w.sensor("reset", "row-count", json!({"count": 10}));
    w.sensor("reset", "upstream", json!({"status": "ready"}));
    barrier(&mut w, "reset", 1);
    let point = Utc::now() + TimeDelta::milliseconds(5);
    crate::support::wait_until("the point to pass", Duration::from_secs(1), String::new, || {
        Utc::now() > point
    });
    w.sensor("reset", "row-count", json!({"count": 5000}));
    w.wait_for_sequence(
        "reset",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let decided = [VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED].map(|k| ids_of(&w, k));
    let point = point.to_rfc3339();
    let committed = w.committed("sensors");
    assert_eq!(committed, 4, "four sensor records handled");

    // Without --execute, a plan and nothing else (--dry-run says the same explicitly).
    let (code, plan) = reset(&w, &["--to-time", &point]);
    assert_eq!(code, Some(0), "{plan}");
    assert!(plan.contains("state after the changelog batch ending at"), "{plan}");
    assert!(
        plan.contains("sensors resumes at offset 3 (1 records to reprocess)"),
        "{plan}"
    );
    assert!(plan.contains("plan only: nothing written (add --execute"), "{plan}");
    assert_eq!(w.committed("sensors"), committed, "a plan changes nothing");
    let (code, again) = reset(&w, &["--to-time", &point, "--dry-run"]);
    assert_eq!(code, Some(0), "{again}");
    assert!(again.contains("plan only: nothing written"), "{again}");
    assert_eq!(w.committed("sensors"), committed, "a dry run changes nothing");

    // From the changelog, then from scratch: each time the restart decides the same again.
    for (round, extra) in [(2, None), (3, Some("--from-scratch"))] {
        let mut args = vec!["--to-time", point.as_str(), "--execute"];
        args.extend(extra);
        let (code, out) = reset(&w, &args);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("done: start the processors"), "{out}");
        assert_eq!(
            w.committed("sensors"),
            3,
            "sensors rewound to the record after the point:\n{out}"
        );
        w.start();
        w.wait_for("reset", "the decisions again", |es| {
            es.iter().filter(|e| e.kind == JOB_COMPLETED).count() >= round
        });
        assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
        for (kind, first) in [VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED].iter().zip(&decided) {
            let again = ids_of(&w, *kind);
            assert_eq!(again.len(), round, "{kind:?} once per round ({extra:?})");
            assert!(
                again.iter().all(|id| *id == first[0]),
                "{kind:?} under its first id, {again:?}"
            );
        }
        assert_eq!(
            ids_of(&w, CONFIG_ACCEPTED).len(),
            1,
            "the config came back with the state ({extra:?})"
        );
        assert_eq!(
            ids_of(&w, INPUT_REJECTED).len(),
            1,
            "the barrier before the point is not reprocessed"
        );
    }
    // Effects are on when reprocessing: the trigger decided again was sent again (same run id).
    let ran = std::fs::read_to_string(&runs).unwrap();
    let run = super::run_id("reset", 1);
    assert_eq!(ran.lines().collect::<Vec<_>>(), [run.as_str(); 3], "{ran}");
}

#[test]
fn reset_refuses_a_group_that_is_running() {
    let mut w = World::new("reset-running");
    let (config, _) = super::recording_pipeline(&w, "busy");
    w.start_with(&config);
    let (code, out) = reset(&w, &["--to-time", "1h"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("active member"), "{out}");
    w.stop();
}
