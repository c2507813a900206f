//! The operator page end to end: tests/ui/page.test.cjs drives headless Chromium with
//! playwright-core against a real processor on the real broker (deploy/test.sh installs
//! Chromium and playwright-core, and says where with SLUICE_TEST_NODE_MODULES).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{command_job, free_port, http_get, pipeline, repo, wait_until, Instances, World};

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

#[test]
fn the_operator_page_follows_pipelines_live() {
    let mut w = World::new("ui");
    w.config(&pipeline("ui-gold", command_job("true", 0)));
    // Never ready (no row count), with a relative SLA that breaches 5 s after its trigger.
    let mut late = pipeline("ui-late", command_job("true", 0));
    late["sla"] = json!({"maxDuration": "5s"});
    w.config(&late);
    let addr = format!("127.0.0.1:{}", free_port());
    w.serve(&addr, &["--instance", "a"]);

    let shots = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"))
        .join("ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    page_check(&w, "live", &addr, &shots, &[]);

    // A restarted processor reads its pipelines' recent events back: timelines are not empty.
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    w.serve(&addr, &["--instance", "a"]);
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
    let b = Instances(vec![w.spawn(dir.path(), &["--http", &other, "--instance", "b"])]);
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

    for name in [
        "list.png",
        "pipeline-waiting.png",
        "pipeline-completed.png",
        "pipeline-sla-breach.png",
        "pipeline-forwarded.png",
    ] {
        let shot = shots.join(name);
        assert!(
            std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000),
            "{} saved",
            shot.display()
        );
    }
    eprintln!("[ui] screenshots in {}", shots.display());
    w.stop();
}
