//! The command line for people, on the real broker: `events tail` from an offset and from a
//! time, its filters, and the errors that say what to do instead.

use chrono::{TimeDelta, Utc};
use serde_json::{json, Value};

use crate::support::{sluice_on, World};

/// Six events of pipeline `tail`, an hour apart (the oldest six hours ago), all on partition
/// 0 of the events topic, so their offsets are 0..6; every other one a JOB_FAILED.
fn recorded_history(w: &World) -> Vec<(String, chrono::DateTime<Utc>)> {
    let now = Utc::now();
    (0..6)
        .map(|k| {
            let at = now - TimeDelta::hours(6 - k);
            let (kind, category) = if k % 2 == 0 {
                ("JOB_TRIGGERED", "job")
            } else {
                ("JOB_FAILED", "job")
            };
            let id = format!("e{k}");
            let event = json!({
                "eventId": id, "type": kind, "category": category, "pipelineId": "tail",
                "timestamp": at, "message": format!("event {k}"),
            });
            let value = serde_json::to_vec(&event).unwrap();
            w.produce_to_partition_at("events", 0, "tail", &value, Some(at.timestamp_millis()));
            (id, at)
        })
        .collect()
}

/// Runs `sluice events tail ARGS --output json`: exit code, the event ids printed, stderr.
fn tail(w: &World, args: &[&str]) -> (Option<i32>, Vec<String>, String) {
    let out = sluice_on(&w.brokers)
        .args(["events", "tail", "--topic-prefix", &w.prefix, "--output", "json"])
        .args(args)
        .output()
        .unwrap();
    let ids = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["eventId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    (
        out.status.code(),
        ids,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn events_tail_starts_at_an_offset_or_a_time_and_filters() {
    let w = World::new("tail");
    let history = recorded_history(&w);
    let ids = |from: usize| history[from..].iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();

    assert_eq!(tail(&w, &[]).1, ids(0), "from the beginning by default");
    assert_eq!(tail(&w, &["--from", "end"]).1, Vec::<String>::new());
    assert_eq!(tail(&w, &["--from-offset", "0:4"]).1, ids(4));

    // Half an hour after the third event: the fourth is the first at or after it.
    let time = (history[3].1 - TimeDelta::minutes(30)).to_rfc3339();
    assert_eq!(tail(&w, &["--from-time", &time]).1, ids(3));
    assert_eq!(tail(&w, &["--from-time", "150m"]).1, ids(4), "a duration ago");

    let (code, failed, _) = tail(&w, &["--from-offset", "0:1", "--type", "job_failed"]);
    assert_eq!(
        (code, failed),
        (Some(0), vec!["e1".to_string(), "e3".into(), "e5".into()])
    );
    assert_eq!(tail(&w, &["--pipeline", "other"]).1, Vec::<String>::new());

    // Mistakes name the way out.
    let (code, _, err) = tail(&w, &["--type", "JOB_EXPLODED"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("known types") && err.contains("JOB_FAILED"), "{err}");
    let (code, _, err) = tail(&w, &["--from-offset", "7:0"]);
    assert!(code == Some(1) && err.contains("partitions 0 to 2"), "{err}");
    let (code, _, err) = tail(&w, &["--from-time", "last tuesday"]);
    assert!(code == Some(2) && err.contains("RFC 3339"), "{err}");
}

#[test]
fn topics_apply_creates_verifies_and_reports_drift() {
    let prefix = format!("it-drift-{}.", std::process::id());
    // An events topic made by hand, keeping a day where topics/ says 90 days.
    let configs = [("cleanup.policy", "delete"), ("retention.ms", "86400000")];
    crate::support::create_topics_with(&prefix, &[("events", 3)], &configs);
    let apply_with = |flags: &[&str]| {
        let out = sluice_on(&crate::support::brokers())
            .args(["topics", "apply", "--dir", "topics", "--topic-prefix", &prefix])
            .args(flags)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let apply = || apply_with(&[]);
    // Created with the broker's replication factor and the flag's min.insync.replicas.
    let (code, out, err) = apply_with(&["--min-insync-replicas", "1"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains(&format!("{prefix}config: created")), "{out}");
    assert!(
        out.contains(&format!("{prefix}events: drift: retention.ms is")),
        "{out}"
    );
    assert!(
        err.contains("kafka-configs") && err.contains("1 existing topic(s)"),
        "{err}"
    );
    // Again: what was created now matches; the drift is still reported.
    let (code, out, _) = apply();
    assert_eq!(code, Some(1));
    assert!(out.contains(&format!("{prefix}config: exists, matches")), "{out}");
    assert!(out.contains(&format!("{prefix}events: drift")), "{out}");
    // A setup step that goes on to publish the pipelines: the same report, exit 0.
    let (code, out, err) = apply_with(&["--drift", "warn"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(&format!("{prefix}events: drift")), "{out}");
    assert!(err.contains("warning: 1 existing topic(s) differ"), "{err}");
    // Declared now, replication is checked against what the broker has.
    let (code, out, _) = apply_with(&["--replication-factor", "2", "--min-insync-replicas", "1"]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains(&format!(
            "{prefix}config: drift: replication factor is 1, topics/ declares 2"
        )),
        "{out}"
    );
    assert!(!out.contains(&format!("{prefix}config: drift: min.insync")), "{out}");
    let (_, out, _) = apply_with(&["--min-insync-replicas", "2"]);
    assert!(
        out.contains(&format!(
            r#"{prefix}config: drift: min.insync.replicas is "1", topics/ declares "2""#
        )),
        "{out}"
    );
}

#[test]
fn sensor_put_reads_json_lines_from_stdin_and_names_the_lines_it_refuses() {
    use std::io::Write;
    let mut w = World::new("bulk");
    let (config, runs) = super::recording_pipeline(&w, "bulk");
    w.start_with(&config);
    let day = crate::support::day();
    let lines = [
        json!({"pipelineId": "bulk", "key": "row-count", "data": {"count": 5000}, "date": day}).to_string(),
        "{not json".to_string(),
        String::new(),
        json!({"pipelineId": "bulk", "key": "upstream", "data": {"status": "ready"}, "date": day}).to_string(),
        json!({"pipelineId": "bulk", "key": "upstream", "date": "tomorrow"}).to_string(),
    ];
    let mut child = sluice_on(&w.brokers)
        .args(["sensor", "put", "-", "--topic-prefix", &w.prefix])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.join("\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("published 2 readings"), "{stdout}");
    assert!(
        stderr.contains("line 2: not a sensor record") && stderr.contains("line 5: date"),
        "{stderr}"
    );
    // The two readings are the pipeline's whole readiness: its job runs, once.
    use sluice::core::events::EventType::{CONFIG_ACCEPTED, JOB_COMPLETED, JOB_TRIGGERED, VALIDATION_PASSED};
    w.wait_for_sequence(
        "bulk",
        &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
    );
    crate::support::wait_until(
        "the job's run",
        std::time::Duration::from_secs(30),
        || w.log_tail(),
        || std::fs::read_to_string(&runs).is_ok_and(|r| r.lines().count() == 1),
    );
}

/// What scripts and CI read: `config validate`, `config apply` and `topics apply` with
/// `--output json` print one JSON document on stdout, the readable lines on stderr.
#[test]
fn validate_apply_and_topics_apply_speak_json_to_scripts() {
    let w = World::new("json-out");
    let json_of = |args: &[&str]| -> (Option<i32>, Value) {
        let out = sluice_on(&w.brokers)
            .args(args)
            .args(["--output", "json", "--topic-prefix", &w.prefix])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let doc = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "not one JSON document ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), doc)
    };
    let (code, valid) = json_of(&["config", "validate", "examples/pipelines"]);
    assert_eq!((code, &valid["valid"]), (Some(0), &json!(true)), "{valid}");
    let files = valid["files"].as_array().unwrap();
    assert!(
        files.len() > 3 && files.iter().all(|f| f["pipelineId"].is_string()),
        "{valid}"
    );

    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("bad.yaml"), "pipeline:\n  id: bad\nschedule: {}\n").unwrap();
    let dir = broken.path().to_str().unwrap();
    let (code, invalid) = json_of(&["config", "validate", dir]);
    assert_eq!((code, &invalid["valid"]), (Some(1), &json!(false)), "{invalid}");
    let problems = invalid["files"][0]["problems"].as_array().unwrap();
    assert!(
        !problems.is_empty()
            && problems
                .iter()
                .all(|p| p["path"].is_string() && p["reason"].is_string())
    );

    // The world made its topics already: they match.
    let (code, topics) = json_of(&["topics", "apply", "--dir", "topics"]);
    assert_eq!((code, &topics["ready"]), (Some(0), &json!(true)), "{topics}");
    assert!(
        topics["topics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state"] == "matches"),
        "{topics}"
    );

    let (code, applied) = json_of(&["config", "apply", "examples/pipelines"]);
    assert_eq!((code, &applied["published"]), (Some(0), &json!(true)), "{applied}");
    let first = &applied["applied"][0];
    assert!(first["partition"].is_i64() && first["offset"].is_i64(), "{applied}");
    assert_eq!(first["topic"], w.topic("config"));
    let (code, refused) = json_of(&["config", "apply", dir]);
    assert_eq!((code, &refused["published"]), (Some(1), &json!(false)), "{refused}");
}

/// An archetype (`archetypes/NAME.yaml` beside the pipelines folder) merged in by `config
/// validate --explain` and `config apply`: the processor then holds the run to the
/// archetype's rule for a key the pipeline does not name.
#[test]
fn config_apply_merges_the_archetype_that_validate_explains() {
    let mut w = World::new("archetype");
    let root = tempfile::tempdir().unwrap();
    let (pipelines, archetypes) = (root.path().join("pipelines"), root.path().join("archetypes"));
    std::fs::create_dir_all(&pipelines).unwrap();
    std::fs::create_dir_all(&archetypes).unwrap();
    std::fs::write(
        archetypes.join("counted.yaml"),
        "validation:\n  trigger: ALL\n  rules:\n    - {key: row-count, check: gte, field: count, value: 1000}\njob: {maxRetries: 1}\n",
    )
    .unwrap();
    std::fs::write(
        pipelines.join("arch.yaml"),
        "pipeline: {id: arch, owner: tests}\narchetype: counted\nschedule:\n  trigger: {key: upstream, check: equals, field: status, value: ready}\nvalidation:\n  rules:\n    - {key: upstream, check: equals, field: status, value: ready}\njob: {type: command, config: {command: 'true'}}\n",
    )
    .unwrap();
    let dir = pipelines.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = sluice_on(&w.brokers)
            .args(args)
            .args(["--topic-prefix", &w.prefix])
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, stdout, stderr) = run(&["config", "validate", dir, "--explain", "--output", "json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let file = &doc["files"][0];
    assert_eq!(file["archetype"], json!("counted"), "{doc}");
    assert_eq!(
        file["inherited"],
        json!(["job.maxRetries", "validation.rules[row-count]", "validation.trigger"])
    );
    assert_eq!(file["config"]["validation"]["rules"].as_array().unwrap().len(), 2);
    let (code, stdout, _) = run(&["config", "validate", dir, "--explain"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("archetype counted gave job.maxRetries"), "{stdout}");
    // Unknown, it is a problem naming the known ones.
    std::fs::write(pipelines.join("other.yaml"), "pipeline: {id: other}\narchetype: countd\nschedule:\n  trigger: {key: k, check: exists}\njob: {type: command, config: {command: 'true'}}\n").unwrap();
    let (code, _, stderr) = run(&["config", "validate", dir]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("archetype: unknown archetype \"countd\" (known: counted)"),
        "{stderr}"
    );
    std::fs::remove_file(pipelines.join("other.yaml")).unwrap();

    let (code, stdout, stderr) = run(&["config", "apply", dir]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    w.start();
    w.wait_for("arch", "CONFIG_ACCEPTED", |es| {
        es.iter()
            .any(|e| e.kind == sluice::core::events::EventType::CONFIG_ACCEPTED)
    });
    w.sensor("arch", "upstream", json!({"status": "ready"}));
    w.sensor("arch", "row-count", json!({"count": 10}));
    w.sensor("arch", "row-count", json!({"count": 5000}));
    let events = w.wait_for("arch", "VALIDATION_PASSED", |es| {
        es.iter()
            .any(|e| e.kind == sluice::core::events::EventType::VALIDATION_PASSED)
    });
    let passed = events
        .iter()
        .find(|e| e.kind == sluice::core::events::EventType::VALIDATION_PASSED)
        .unwrap();
    let keys: Vec<&Value> = passed.detail["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["key"])
        .collect();
    assert_eq!(
        keys,
        [&json!("row-count"), &json!("upstream")],
        "the archetype's rule held the run until 5000 rows"
    );
}

/// `config validate` names the days a pipeline will skip that the earlier design ran (it
/// applied no holiday calendar, and inclusion dates did not gate its triggers), before a
/// run does not happen.
#[test]
fn validate_names_the_days_skipped_that_the_earlier_design_ran() {
    let root = tempfile::tempdir().unwrap();
    let (pipelines, calendars) = (root.path().join("pipelines"), root.path().join("calendars"));
    std::fs::create_dir_all(&pipelines).unwrap();
    std::fs::create_dir_all(&calendars).unwrap();
    let today = Utc::now().date_naive();
    let (soon, later) = (today + TimeDelta::days(10), today + TimeDelta::days(40));
    std::fs::write(
        calendars.join("closed.yaml"),
        format!("name: closed\ndates: [\"{soon}\", \"{later}\"]\n"),
    )
    .unwrap();
    std::fs::write(
        pipelines.join("ledger.yaml"),
        "pipeline: {id: ledger, owner: finance}\n\
         schedule:\n  timezone: UTC\n  trigger: {key: ready, check: exists}\n  include: {dates: [\"2031-01-31\"]}\n\
         exclusions: {calendar: closed}\n\
         job: {type: command, config: {command: \"true\"}}\n",
    )
    .unwrap();
    let out = sluice_on("127.0.0.1:1")
        .args(["config", "validate", pipelines.to_str().unwrap(), "--output", "json"])
        .output()
        .unwrap();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(doc["valid"], json!(true), "{doc}");
    let warnings = doc["files"][0]["warnings"].as_array().unwrap();
    let said = |path: &str| {
        (warnings.iter())
            .find(|w| w["path"] == path)
            .and_then(|w| w["reason"].as_str())
            .unwrap_or_else(|| panic!("no warning at {path}: {doc}"))
            .to_string()
    };
    let calendar = said("exclusions.calendar");
    assert!(calendar.ends_with(&format!("skips 2 days in the next 365 days that the earlier design ran (it applied no holiday calendar): {soon}, {later}")), "{calendar}");
    assert!(said("schedule.include.dates").contains("(1 ahead)"));
}

/// GitOps: the folder is the whole truth. `config apply --prune` deletes what left it (the
/// plan printed first; `--dry-run` only prints it), `config delete` deletes by id and
/// refuses an id the topic does not hold; the owner drops each deleted pipeline.
#[test]
fn apply_prune_and_delete_remove_pipelines_that_left_the_folder() {
    use sluice::core::events::EventType::CONFIG_ACCEPTED;
    let mut w = World::new("prune");
    let folder = tempfile::tempdir().unwrap();
    let write = |id: &str| {
        let config = crate::support::pipeline(id, crate::support::command_job("true", 0));
        std::fs::write(folder.path().join(format!("{id}.yaml")), config.to_string()).unwrap();
    };
    for id in ["prune-a", "prune-b", "prune-c"] {
        write(id);
    }
    let dir = folder.path().to_str().unwrap().to_string();
    let (brokers, prefix) = (w.brokers.clone(), w.prefix.clone());
    let sluice = |args: &[&str]| {
        let out = sluice_on(&brokers)
            .args(args)
            .args(["--topic-prefix", &prefix])
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = sluice(&["config", "apply", &dir]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    w.start();
    let deleted = |es: &[sluice::core::events::Event], id: &str| {
        es.iter()
            .any(|e| e.kind == CONFIG_ACCEPTED && e.pipeline_id == id && e.detail.get("deleted") == Some(&json!(true)))
    };
    for id in ["prune-a", "prune-b", "prune-c"] {
        w.wait_for(id, "CONFIG_ACCEPTED", |es| es.iter().any(|e| e.kind == CONFIG_ACCEPTED));
    }

    // prune-c leaves the folder: a dry run plans its deletion and deletes nothing.
    std::fs::remove_file(folder.path().join("prune-c.yaml")).unwrap();
    let (code, out, err) = sluice(&["config", "apply", &dir, "--prune", "--dry-run", "--output", "json"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plan["delete"], json!(["prune-c"]), "{plan}");
    assert_eq!(plan["published"], json!(false));
    assert!(err.contains("plan: delete 1"), "{err}");
    let (code, out, err) = sluice(&["config", "apply", &dir, "--prune"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("deleted prune-c"), "{out}");
    w.wait_for("prune-c", "its deletion", |es| deleted(es, "prune-c"));

    // By id: an unknown one refuses the whole command; then prune-b alone.
    let (code, _, err) = sluice(&["config", "delete", "prune-b", "prune-zzz"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not on") && err.contains("prune-zzz"), "{err}");
    let (code, out, err) = sluice(&["config", "delete", "prune-b"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let events = w.wait_for("prune-b", "its deletion", |es| deleted(es, "prune-b"));
    assert!(!deleted(&events, "prune-a"), "the rest stays");
    // Deleted pipelines are no longer on the topic: deleting again is refused.
    let (code, _, err) = sluice(&["config", "delete", "prune-c"]);
    assert_eq!(code, Some(1), "{err}");
}
