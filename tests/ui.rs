//! The operator page end to end: tests/ui/page.test.cjs drives headless Chromium with
//! playwright-core against a real processor on the real broker (deploy/test.sh installs
//! Chromium and playwright-core, and says where with SLUICE_TEST_NODE_MODULES).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::{command_job, free_port, http_get, pipeline, repo, wait_until, World};

#[test]
fn the_operator_page_follows_pipelines_live() {
    let modules = std::env::var("SLUICE_TEST_NODE_MODULES").expect(
        "the page test needs Chromium and playwright-core: run deploy/test.sh, which installs them (deploy/install-browser.sh) and sets SLUICE_TEST_NODE_MODULES",
    );
    let mut w = World::new("ui");
    w.config(&pipeline("ui-gold", command_job("true", 0)));
    // Never ready (no row count), with a relative SLA that breaches 5 s after its trigger.
    let mut late = pipeline("ui-late", command_job("true", 0));
    late["sla"] = json!({"maxDuration": "5s"});
    w.config(&late);
    let addr = format!("127.0.0.1:{}", free_port());
    let child = w.spawn(w.state.path(), &["--http", &addr]);
    w.swap_processor(Some(child));
    wait_until(
        "the processor ready",
        Duration::from_secs(60),
        || w.log_tail(),
        || http_get(&addr, "/readyz").is_some_and(|(s, _)| s == 200),
    );

    let shots = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"))
        .join("ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let out = Command::new("node")
        .arg(repo().join("tests/ui/page.test.cjs"))
        .env("NODE_PATH", &modules)
        .env("SLUICE_UI_URL", format!("http://{addr}"))
        .env("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))
        .env("SLUICE_BROKERS", &w.brokers)
        .env("SLUICE_TOPIC_PREFIX", &w.prefix)
        .env("SLUICE_SCREENSHOTS", &shots)
        .output()
        .expect("running node (deploy/install-browser.sh installs it)");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "the page test failed\nstdout:\n{}\nstderr:\n{}\nprocessor:\n{}",
        text(&out.stdout),
        text(&out.stderr),
        w.log_tail()
    );
    for name in [
        "list.png",
        "pipeline-waiting.png",
        "pipeline-completed.png",
        "pipeline-sla-breach.png",
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
