//! The HTTP API of two real processors sharing a group: each lists every pipeline, and
//! answers for a pipeline the other owns by forwarding to it.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use sluice::core::events::EventType;

use crate::support::{command_job, free_port, http_get, pipeline, sluice, wait_until, Instances, World};

fn get_json(addr: &str, path: &str) -> Option<(u16, Value)> {
    let (status, body) = http_get(addr, path)?;
    Some((status, serde_json::from_str(&body).ok()?))
}

#[test]
fn any_instance_lists_every_pipeline_and_forwards_to_the_owner() {
    let mut w = World::new("api");
    let ids: Vec<String> = (0..8).map(|i| format!("api{i}")).collect();
    for id in &ids {
        w.config(&pipeline(id, command_job("true", 0)));
    }
    w.sensor(&ids[0], "row-count", json!({"count": 42}));
    let (a, b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let _instances = Instances(vec![
        w.spawn(dirs[0].path(), &["--http", &a, "--instance", "a"]),
        w.spawn(dirs[1].path(), &["--http", &b, "--instance", "b"]),
    ]);
    for id in &ids {
        w.wait_for(id, "CONFIG_ACCEPTED", |es| {
            es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
        });
    }

    // Both ready, and each one's list holds every pipeline, gathered from both instances.
    let listed = |addr: &str| -> Option<(BTreeSet<String>, usize)> {
        let (status, page) = get_json(addr, "/api/pipelines")?;
        if status != 200 || page["complete"] != true {
            return None;
        }
        let names = page["pipelines"]
            .as_array()?
            .iter()
            .map(|p| p["pipelineId"].as_str().unwrap().to_string());
        Some((names.collect(), page["instances"].as_array()?.len()))
    };
    let all: BTreeSet<String> = ids.iter().cloned().collect();
    wait_until(
        "both instances to list every pipeline from both",
        Duration::from_secs(90),
        || w.log_tail(),
        || [&a, &b].iter().all(|addr| listed(addr) == Some((all.clone(), 2))),
    );
    for addr in [&a, &b] {
        assert_eq!(http_get(addr, "/readyz").map(|(s, _)| s), Some(200));
    }
    // The client's statistics report the lag of the owned input partitions.
    let config_topic = w.topic("config");
    wait_until(
        "consumer lag and commit latency in /metrics",
        Duration::from_secs(30),
        || http_get(&a, "/metrics").map(|(_, body)| body).unwrap_or_default(),
        || {
            http_get(&a, "/metrics").is_some_and(|(_, body)| {
                body.contains(&format!("sluice_consumer_lag{{topic=\"{config_topic}\""))
                    && body.contains("sluice_commit_seconds_count")
            })
        },
    );

    // Every pipeline's detail from either instance; the owner serves it, so asking one
    // instance for all of them reaches both.
    let served_by = |addr: &str| -> Option<BTreeSet<String>> {
        let mut by = BTreeSet::new();
        for id in &ids {
            let (status, view) = get_json(addr, &format!("/api/pipelines/{id}"))?;
            if status != 200 || view["pipelineId"] != id.as_str() {
                return None;
            }
            by.insert(view["servedBy"].as_str()?.to_string());
        }
        Some(by)
    };
    let both: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
    wait_until(
        "each instance to answer for every pipeline, through its owner",
        Duration::from_secs(60),
        || w.log_tail(),
        || served_by(&a) == Some(both.clone()) && served_by(&b) == Some(both.clone()),
    );

    // The detail is the pipeline's state: its config, the sensor sent, and its events.
    let (_, view) = get_json(&a, &format!("/api/pipelines/{}", ids[0])).unwrap();
    assert_eq!(view["config"]["pipeline"]["owner"], "tests", "{view}");
    let sensor = &view["sensors"][0];
    assert_eq!(
        (&sensor["key"], &sensor["data"]["count"]),
        (&json!("row-count"), &json!(42)),
        "{view}"
    );
    assert!(
        view["recentEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "CONFIG_ACCEPTED"),
        "{view}"
    );
    assert_eq!(view["summary"]["owner"], "tests", "{view}");

    // Filters, and a pipeline no one knows.
    let (_, page) = get_json(&b, "/api/pipelines?q=api3").unwrap();
    assert_eq!(page["pipelines"].as_array().unwrap().len(), 1, "{page}");
    let (_, page) = get_json(&b, "/api/pipelines?owner=nobody").unwrap();
    assert_eq!(page["pipelines"].as_array().unwrap().len(), 0, "{page}");
    let (status, body) = get_json(&a, "/api/pipelines/never-configured").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("never-configured"), "{body}");

    // Pages over every instance's pipelines, with the counts by state of the whole match.
    let (_, page) = get_json(&b, "/api/pipelines?limit=3&offset=6").unwrap();
    let listed: Vec<&str> = page["pipelines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pipelineId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["api6", "api7"], "{page}");
    assert_eq!(
        (page["total"].as_u64(), &page["counts"]),
        (Some(8), &json!({"idle": 8})),
        "{page}"
    );
    let (_, page) = get_json(&b, "/api/pipelines?state=idle&q=API1").unwrap();
    assert_eq!(page["total"], 1, "name filters ignore letter case: {page}");
    let (_, page) = get_json(&b, "/api/pipelines?state=running").unwrap();
    assert_eq!(
        (page["total"].as_u64(), &page["counts"]["idle"]),
        (Some(0), &json!(8)),
        "{page}"
    );

    // The config in sentences, and every recent event by its id, through either instance.
    assert_eq!(
        view["rules"][1]["sentence"], "row-count.count is at least 1000",
        "{view}"
    );
    assert!(
        view["about"][0]
            .as_str()
            .unwrap()
            .starts_with("A run starts when upstream.status equals"),
        "{view}"
    );
    let event = &view["recentEvents"][0];
    let id = event["eventId"].as_str().unwrap();
    let (status, raw) = get_json(&b, &format!("/api/pipelines/{}/events/{id}", ids[0])).unwrap();
    assert_eq!((status, &raw), (200, event), "the event as published");
    let (status, body) = get_json(&b, &format!("/api/pipelines/{}/events/nope", ids[0])).unwrap();
    assert_eq!(status, 404, "{body}");

    // The page itself: one document for the list and every pipeline, and its assets.
    for path in ["/", &format!("/pipelines/{}", ids[0])] {
        let (status, html) = http_get(&a, path).unwrap();
        assert_eq!(status, 200, "{path}");
        assert!(html.contains("<script src=\"/ui/app.js\""), "{html}");
    }
    let (status, script) = http_get(&a, "/ui/app.js").unwrap();
    assert!(status == 200 && script.contains("/api/pipelines"), "{script}");

    // `sluice status` reads the same API, through either instance.
    let status = |args: &[&str]| {
        let out = sluice().arg("status").args(args).output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let api_b = format!("http://{b}");
    let (code, table, _) = status(&["--api", &api_b]);
    assert_eq!(code, Some(0));
    for id in &ids {
        assert!(
            table.lines().any(|l| l.starts_with(id.as_str())),
            "{id} listed:\n{table}"
        );
    }
    assert!(table.contains("8 pipelines: idle 8"), "{table}");
    let (code, detail, _) = status(&["--api", &api_b, &ids[0]]);
    assert_eq!(code, Some(0));
    assert!(
        detail.contains("row-count") && detail.contains("CONFIG_ACCEPTED"),
        "{detail}"
    );
    let (code, json, _) = status(&["--api", &api_b, &ids[0], "--output", "json"]);
    assert_eq!(code, Some(0));
    let parsed: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["pipelineId"], ids[0].as_str());
    let (code, _, err) = status(&["--api", &api_b, "never-configured"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("never-configured") && err.contains("`sluice status` lists"),
        "{err}"
    );
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let (code, _, err) = status(&["--api", &nobody]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cannot reach the Sluice API") && err.contains("SLUICE_API"),
        "{err}"
    );
}
