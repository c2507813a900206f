//! The operator page end to end: tests/ui/page.test.cjs drives headless Chromium with
//! playwright-core against a real processor on the real broker (deploy/test.sh installs
//! Chromium and playwright-core, and says where with SLUICE_TEST_NODE_MODULES).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use chrono::{TimeDelta, Timelike};
use serde_json::{json, Value};
use sluice::core::events::EventType::{JOB_COMPLETED, SLA_AT_RISK};

use crate::support::{command_job, day, free_port, http_get, pipeline, repo, wait_until, Instances, World};

/// The instances of a test all serve on loopback: each forwards to the others (`--peer`).
const LOOPBACK: &str = "http://127.0.0.1:*";

/// Runs one of the page script's checks (`SLUICE_UI_CHECK`) against the page at `addr`;
/// `extra`: more environment for it.
fn page_check(w: &World, check: &str, addr: &str, shots: &PathBuf, extra: &[(&str, &str)]) {
    let modules = std::env::var("SLUICE_TEST_NODE_MODULES").expect(
        "the page test needs Chromium and playwright-core: run deploy/test.sh, which installs them (deploy/install-browser.sh) and sets SLUICE_TEST_NODE_MODULES",
    );
    let out = Command::new("node")
        .arg(repo().join("tests/ui/page.test.cjs"))
        .env("NODE_PATH", &modules)
        .env("SLUICE_UI_CHECK", check)
        .env("SLUICE_UI_URL", format!("http://{addr}"))
        .env("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))
        .env("SLUICE_BROKERS", &w.brokers)
        .env("SLUICE_TOPIC_PREFIX", &w.prefix)
        .env("SLUICE_SCREENSHOTS", shots)
        .envs(extra.iter().copied())
        .output()
        .expect("running node (deploy/install-browser.sh installs it)");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "the page check {check} failed\nstdout:\n{}\nstderr:\n{}\nprocessor:\n{}",
        text(&out.stdout),
        text(&out.stderr),
        w.log_tail()
    );
}

fn get_json(addr: &str, path: &str) -> Option<Value> {
    let (status, body) = http_get(addr, path)?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Where the page tests save their screenshots.
fn screenshots() -> PathBuf {
    let shots = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"))
        .join("ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

fn assert_saved(shots: &std::path::Path, names: &[&str]) {
    for name in names {
        let shot = shots.join(name);
        assert!(
            std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000),
            "{} saved",
            shot.display()
        );
    }
    eprintln!("[ui] screenshots in {}", shots.display());
}

#[test]
fn the_operator_page_follows_pipelines_live() {
    let mut w = World::new("ui");
    w.config(&pipeline("ui-gold", command_job("true", 0)));
    // Never ready (its row-count evaluator answers too few rows), with a relative SLA that
    // breaches 5 s after its trigger.
    let mut late = pipeline("ui-late", command_job("true", 0));
    late["sla"] = json!({"maxDuration": "5s"});
    let warehouse = crate::support::serve(|_| (200, r#"{"count": 10}"#.into()));
    late["validation"]["rules"][1]["evaluator"] =
        json!({"type": "http", "url": format!("{warehouse}/rows"), "ttl": "1h"});
    w.config(&late);
    let addr = format!("127.0.0.1:{}", free_port());
    w.serve(&addr, &["--instance", "a", "--peer", LOOPBACK]);

    let shots = screenshots();
    page_check(&w, "live", &addr, &shots, &[]);

    // A restarted processor reads its pipelines' recent events back: timelines are not empty.
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    w.serve(&addr, &["--instance", "a", "--peer", LOOPBACK]);
    let timeline_has = |addr: &str, id: &str, kind: &str| {
        get_json(addr, &format!("/api/pipelines/{id}")).is_some_and(|v| {
            v["recentEvents"]
                .as_array()
                .is_some_and(|es| es.iter().any(|e| e["type"] == kind))
        })
    };
    wait_until(
        "the timeline back after a restart",
        Duration::from_secs(60),
        || w.log_tail(),
        || timeline_has(&addr, "ui-gold", "JOB_COMPLETED"),
    );

    // A second instance joins: each shows every pipeline, whichever instance owns it. The
    // page is opened on the instance that does not own ui-gold, so its page is forwarded.
    let other = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let b =
        Instances(vec![w.spawn(
            dir.path(),
            &["--http", &other, "--instance", "b", "--peer", LOOPBACK],
        )]);
    // Settled: both ready, both listing both pipelines, and agreeing on ui-gold's owner.
    let owner_of_gold = || -> Option<String> {
        let mut owners = Vec::new();
        for addr in [&addr, &other] {
            let list = get_json(addr, "/api/pipelines")?;
            let ready = http_get(addr, "/readyz").is_some_and(|(s, _)| s == 200)
                && list["complete"] == true
                && list["instances"].as_array()?.len() == 2
                && list["pipelines"].as_array()?.len() == 2
                && timeline_has(addr, "ui-gold", "JOB_COMPLETED")
                && timeline_has(addr, "ui-late", "RELATIVE_SLA_BREACH");
            let view = get_json(addr, "/api/pipelines/ui-gold")?;
            owners.push(ready.then(|| view["servedBy"].as_str().map(str::to_string))??);
        }
        (owners[0] == owners[1]).then(|| owners.remove(0))
    };
    wait_until(
        "both instances listing both pipelines with their timelines",
        Duration::from_secs(90),
        || w.log_tail(),
        || owner_of_gold().is_some(),
    );
    let owner = owner_of_gold().unwrap();
    let (serving, name) = if owner == "a" { (&other, "b") } else { (&addr, "a") };
    page_check(&w, "instances", serving, &shots, &[("SLUICE_UI_SERVING", name)]);
    // b leaves cleanly, so that a gets every partition back.
    b.terminate();

    // With API tokens the page asks for one.
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let token = "page-token-for-the-tests-0003";
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    w.serve(
        &addr,
        &["--instance", "a", "--api-token-file", tokens.to_str().unwrap()],
    );
    page_check(&w, "token", &addr, &shots, &[("SLUICE_UI_TOKEN", token)]);

    assert_saved(
        &shots,
        &[
            "list.png",
            "pipeline-waiting.png",
            "pipeline-completed.png",
            "pipeline-sla-breach.png",
            "pipeline-forwarded.png",
        ],
    );
    w.stop();
}

/// bronze → silver → gold, and ref → gold: bronze and ref complete, silver waits for its row
/// count, so gold waits for silver. Beside them an hourly pipeline with three past hours run
/// (each triggered now, long after its hour) and an SLA forecast for the hour under way.
#[test]
fn the_operator_page_draws_the_dependency_graph_and_the_run_history() {
    let mut w = World::new("ui-graph");
    let downstream = |id: &str, depends_on: Value| {
        json!({
            "pipeline": {"id": id, "owner": "tests"},
            "dependsOn": depends_on,
            "schedule": {"evaluation": {"window": "10m", "interval": "1m"}},
            "validation": {"rules": [{"key": "row-count", "check": "gte", "field": "count", "value": 1000}]},
            "job": command_job("true", 0)
        })
    };
    let mut bronze = pipeline("bronze", command_job("true", 0));
    bronze["schedule"]["timezone"] = json!("UTC");
    bronze["sla"] = json!({"deadline": "06:00"});
    w.config(&bronze);
    w.config(&pipeline("ref", command_job("true", 0)));
    w.config(&downstream("silver", json!(["bronze"])));
    w.config(&downstream(
        "gold",
        json!(["silver", {"pipeline": "ref", "key": "ref-done"}]),
    ));
    // Deadline minute 00: every past hour's deadline has passed, the hour under way's is ahead.
    let mut hourly = pipeline("hourly", command_job("true", 0));
    hourly["schedule"]["timezone"] = json!("UTC");
    hourly["sla"] = json!({"deadline": ":00", "forecast": {"minRuns": 3}});
    w.config(&hourly);
    let addr = format!("127.0.0.1:{}", free_port());
    w.serve(&addr, &["--instance", "a", "--peer", LOOPBACK]);

    // silver never gets its row count.
    for id in ["bronze", "ref", "gold", "hourly"] {
        w.sensor_on(id, "row-count", json!({"count": 5000}), None);
    }
    for id in ["bronze", "ref"] {
        w.sensor_on(id, "upstream", json!({"status": "ready"}), Some(day()));
    }
    let hour = w.now().with_minute(0).unwrap().with_second(0).unwrap();
    let hours: Vec<String> = (1..=3)
        .rev()
        .map(|n| (hour - TimeDelta::hours(n)).format("%Y-%m-%dT%H").to_string())
        .collect();
    for date in &hours {
        w.sensor_on("hourly", "upstream", json!({"status": "ready"}), Some(date));
    }
    w.wait_for("hourly", "three past hours run and a forecast", |es| {
        es.iter().filter(|e| e.kind == JOB_COMPLETED).count() == 3 && es.iter().any(|e| e.kind == SLA_AT_RISK)
    });
    // The API first: gold is held back by silver alone (ref has completed).
    let graph = || get_json(&addr, "/api/graph").unwrap_or_default();
    wait_until(
        "gold waiting for silver in the graph",
        Duration::from_secs(60),
        || format!("{}\n{}", graph(), w.log_tail()),
        || graph()["heldBack"] == json!([{"pipelineId": "gold", "state": "waiting", "by": ["silver"]}]),
    );
    let graph = graph();
    assert_eq!(graph["date"], day(), "{graph}");
    let states: Vec<(&str, &str, u64)> = (graph["nodes"].as_array().unwrap().iter())
        .map(|n| {
            (
                n["pipelineId"].as_str().unwrap(),
                n["state"].as_str().unwrap(),
                n["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("bronze", "completed", 0),
            ("gold", "waiting", 2),
            ("ref", "completed", 0),
            ("silver", "waiting", 1)
        ],
        "the hourly pipeline, with no dependency, is not drawn: {graph}"
    );
    let view = get_json(&addr, "/api/pipelines/hourly").unwrap();
    let dates: Vec<&str> = (view["runHistory"].as_array().unwrap().iter())
        .map(|r| r["date"].as_str().unwrap())
        .collect();
    assert_eq!(dates.len(), 3, "{view}");
    assert!(hours.iter().all(|h| dates.contains(&h.as_str())), "{dates:?} {hours:?}");
    assert_eq!(view["slaProjection"]["type"], "SLA_AT_RISK", "{view}");

    let shots = screenshots();
    let runs = dates.join(",");
    page_check(
        &w,
        "graph",
        &addr,
        &shots,
        &[("SLUICE_UI_DAY", day()), ("SLUICE_UI_RUNS", &runs)],
    );
    assert_saved(&shots, &["graph.png", "pipeline-chart.png"]);

    // A second instance joins and the partitions are shared out: each instance draws the
    // whole graph, its peer's pipelines included (one of them owns few or none of them).
    let other = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let b =
        Instances(vec![w.spawn(
            dir.path(),
            &["--http", &other, "--instance", "b", "--peer", LOOPBACK],
        )]);
    let held = json!([{"pipelineId": "gold", "state": "waiting", "by": ["silver"]}]);
    let whole = |addr: &str| {
        get_json(addr, "/api/graph").is_some_and(|g| {
            g["complete"] == true
                && g["instances"].as_array().map_or(0, Vec::len) == 2
                && g["nodes"].as_array().map_or(0, Vec::len) == 4
                && g["heldBack"] == held
        })
    };
    wait_until(
        "both instances drawing the whole graph",
        Duration::from_secs(90),
        || w.log_tail(),
        || whole(&addr) && whole(&other),
    );
    b.terminate();
    w.stop();
}
