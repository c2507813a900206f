//! The HTTP API of two real processors sharing a group: each lists every pipeline, and
//! answers for a pipeline the other owns by forwarding to it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice::core::events::EventType;

use crate::support::{
    self, command_job, day, free_port, http_get, http_request, pipeline, sluice, wait_until, Instances, World,
};

fn get_json(addr: &str, path: &str) -> Option<(u16, Value)> {
    let (status, body) = http_get(addr, path)?;
    Some((status, serde_json::from_str(&body).ok()?))
}

/// Two instances of a world's group, `a` and `b`, each serving HTTP and admitting the other
/// as a peer; `b` with `b_extra` arguments too.
struct Pair {
    a: String,
    b: String,
    instances: Instances,
    _dirs: [tempfile::TempDir; 2],
}

fn pair(w: &World, b_extra: &[&str]) -> Pair {
    let (a, b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let peers = format!("http://{a},http://{b}");
    let mut b_args = vec!["--http", &b, "--instance", "b", "--peer", &peers];
    b_args.extend_from_slice(b_extra);
    let instances = Instances(vec![
        w.spawn(dirs[0].path(), &["--http", &a, "--instance", "a", "--peer", &peers]),
        w.spawn(dirs[1].path(), &b_args),
    ]);
    Pair {
        a,
        b,
        instances,
        _dirs: dirs,
    }
}

#[test]
fn any_instance_lists_every_pipeline_and_forwards_to_the_owner() {
    let mut w = World::new("api");
    let ids: Vec<String> = (0..8).map(|i| format!("api{i}")).collect();
    for id in &ids {
        w.config(&pipeline(id, command_job("true", 0)));
    }
    // A secret written into the config itself, and one read from the environment.
    let mut job = command_job("true", 0);
    job["config"]["env"] = json!({"WRITTEN": "plain-s3cret", "READ": "${env:API_TEST_SECRET}"});
    w.config(&pipeline(&ids[0], job));
    w.sensor(&ids[0], "row-count", json!({"count": 42}));
    let Pair {
        a,
        b,
        instances: _instances,
        _dirs,
    } = pair(&w, &[]);
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
    assert_eq!(
        view["config"]["job"]["config"]["env"],
        json!({"WRITTEN": "***", "READ": "${env:API_TEST_SECRET}"}),
        "the API shows secrets as their placeholders, never a literal one"
    );
    assert!(!view.to_string().contains("plain-s3cret"), "{view}");
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
    // Without token files the API is read-only.
    let (status, answer) = http_request(
        &a,
        "POST",
        "/api/pipelines/api0/rerun",
        &[],
        r#"{"date": "2026-01-01"}"#,
    )
    .unwrap();
    assert!(status == 403 && answer.contains("read-only"), "{status} {answer}");

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

/// With token files, every request but the probes and the page's files needs a token; only a
/// write token reruns, and `sluice status` reads with a token.
/// Two instances whose clocks differ by 30 s (`--clock-offset` on one): the one behind
/// measures the other ahead from its directory records, exports it and warns; the one
/// ahead measures nothing ahead of it.
#[test]
fn an_instance_measures_how_far_another_ones_clock_runs_ahead() {
    let w = World::new("skew");
    w.config(&pipeline("skew", command_job("true", 0)));
    let Pair {
        a,
        b,
        instances: _instances,
        _dirs,
    } = pair(&w, &["--clock-offset", "30s"]);
    let ahead = |addr: &str, peer: &str| -> Option<f64> {
        let (_, body) = http_get(addr, "/metrics")?;
        let series = format!("sluice_peer_clock_ahead_seconds{{peer=\"{peer}\"}} ");
        let line = body.lines().find(|l| l.starts_with(&series))?;
        line[series.len()..].trim().parse().ok()
    };
    wait_until(
        "a to measure b's clock ahead, and b to measure a's",
        Duration::from_secs(90),
        || {
            let metrics = |addr: &str| http_get(addr, "/metrics").map(|(_, body)| body).unwrap_or_default();
            let clocks = |m: String| {
                m.lines()
                    .filter(|l| l.contains("clock_ahead"))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            format!("{}\n{}\n{}", clocks(metrics(&a)), clocks(metrics(&b)), w.log_tail())
        },
        || ahead(&a, "b").is_some_and(|s| s > 25.0) && ahead(&b, "a").is_some(),
    );
    assert!(ahead(&a, "b").unwrap() <= 30.0, "never more than the difference");
    assert_eq!(ahead(&b, "a"), Some(0.0), "a's clock is behind, not ahead");
    assert!(
        w.log().contains("another instance's clock runs ahead of this one's"),
        "{}",
        w.log_tail()
    );
}

/// The API's "today" is the processor's day: with `--clock-offset 48h` the dependency graph
/// of pipelines that have not run yet draws the day after tomorrow, not the machine's day.
#[test]
fn the_graph_draws_the_processors_today() {
    let mut w = World::new("graph-today");
    w.config(&pipeline("up", command_job("true", 0)));
    let mut down = pipeline("down", command_job("true", 0));
    down["dependsOn"] = json!(["up"]);
    w.config(&down);
    let addr = format!("127.0.0.1:{}", free_port());
    let child = w.spawn(w.state.path(), &["--http", &addr, "--clock-offset", "48h"]);
    w.swap_processor(Some(child));
    let graph = || {
        get_json(&addr, "/api/graph")
            .filter(|(status, body)| *status == 200 && body["nodes"].as_array().is_some_and(|n| n.len() == 2))
    };
    wait_until(
        "the graph of up and down",
        Duration::from_secs(90),
        || w.log_tail(),
        || graph().is_some(),
    );
    // The processor's day before and after the read (the day may turn in between).
    let processors_day = || {
        (chrono::Utc::now() + chrono::TimeDelta::hours(48))
            .date_naive()
            .to_string()
    };
    let before = processors_day();
    let (_, body) = graph().unwrap();
    let after = processors_day();
    let drawn = body["date"].as_str().unwrap();
    assert!(drawn == before || drawn == after, "{drawn} is not {before}: {body}");
    w.stop();
}

/// Serves `w` on a loopback port with a `read` and a `write` token (their files in `dir`,
/// the read file with a comment line), and waits until `pipeline`'s config is accepted:
/// ready means restored, not caught up with the inputs. The address and the read token's
/// file.
fn serve_with_tokens(
    w: &mut World,
    dir: &std::path::Path,
    pipeline: &str,
    read: &str,
    write: &str,
) -> (String, std::path::PathBuf) {
    let (read_file, write_file) = (dir.join("read"), dir.join("write"));
    std::fs::write(&read_file, format!("# readers\n{read}\n")).unwrap();
    std::fs::write(&write_file, format!("{write}\n")).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let files = [
        "--api-token-file",
        read_file.to_str().unwrap(),
        "--api-write-token-file",
        write_file.to_str().unwrap(),
    ];
    w.serve(&addr, &files);
    w.wait_for(pipeline, "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
    });
    (addr, read_file)
}

#[test]
fn tokens_guard_the_api_and_only_a_write_token_reruns() {
    let mut w = World::new("auth");
    w.config(&pipeline("auth1", command_job("true", 0)));
    let dir = tempfile::tempdir().unwrap();
    let (read, write) = ("read-token-for-the-tests-0001", "write-token-for-the-tests-0002");
    let (addr, read_file) = serve_with_tokens(&mut w, dir.path(), "auth1", read, write);
    let bearer = |t: &str| format!("Bearer {t}");
    let get = |path: &str, token: Option<&str>| {
        let auth = token.map(bearer);
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        http_request(&addr, "GET", path, &headers, "").unwrap()
    };
    assert_eq!(get("/healthz", None).0, 200);
    assert_eq!(get("/", None).0, 200, "the page's files are open; its data is not");
    for path in ["/api/pipelines", "/api/pipelines/auth1", "/metrics"] {
        assert_eq!(get(path, None).0, 401, "{path} without a token");
        assert_eq!(
            get(path, Some("read-token-for-the-tests-0009")).0,
            401,
            "{path} with a wrong token"
        );
        assert_eq!(get(path, Some(read)).0, 200, "{path} with a read token");
        assert_eq!(get(path, Some(write)).0, 200, "{path} with a write token");
    }

    w.sensor("auth1", "row-count", json!({"count": 5000}));
    w.sensor("auth1", "upstream", json!({"status": "ready"}));
    w.wait_for("auth1", "JOB_COMPLETED", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    let post = |token: &str, body: &str| {
        let auth = bearer(token);
        http_request(
            &addr,
            "POST",
            "/api/pipelines/auth1/rerun",
            &[("Authorization", &auth)],
            body,
        )
        .unwrap()
    };
    let body = json!({"date": day(), "reason": "checking the API", "requestedBy": "tests"}).to_string();
    let (status, answer) = post(read, &body);
    assert!(status == 403 && answer.contains("may read"), "{status} {answer}");
    let (status, answer) = post(write, r#"{"date": "yesterday"}"#);
    assert!(status == 400 && answer.contains("not a date"), "{status} {answer}");
    let (status, answer) = post(write, &body);
    assert_eq!(status, 202, "{answer}");
    // The owner answers on the events topic: the run succeeded and no data changed.
    let events = w.wait_for("auth1", "the rerun's answer", |es| {
        es.iter().any(|e| e.kind == EventType::RERUN_REJECTED)
    });
    let answer = events.iter().find(|e| e.kind == EventType::RERUN_REJECTED).unwrap();
    assert_eq!(
        (&answer.detail["requestedBy"], &answer.detail["reason"]),
        (&json!("tests"), &json!("checking the API")),
        "{answer:?}"
    );

    // `sluice status` with and without a token.
    let status = |token: Option<&std::path::Path>| {
        let mut command = sluice();
        command
            .args(["status", "--api", &format!("http://{addr}")])
            .env_remove("SLUICE_API_TOKEN_FILE");
        if let Some(t) = token {
            command.arg("--api-token-file").arg(t);
        }
        command.output().unwrap()
    };
    let out = status(Some(&read_file));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("auth1"));
    let out = status(None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--api-token-file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    w.stop();
}

/// Anyone who may write the instances topic can publish an instance record claiming every
/// partition: one whose URL no `--peer` admits is ignored, so it receives no forwarded request
/// and never the caller's token, while the real instances forward to each other.
#[test]
fn a_forged_instance_record_gets_no_request_and_no_token() {
    let w = World::new("peers");
    let ids: Vec<String> = (0..6).map(|i| format!("peer{i}")).collect();
    for id in &ids {
        w.config(&pipeline(id, command_job("true", 0)));
    }
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    let thief = support::serve(move |r| {
        let token = r.headers.get("authorization").cloned().unwrap_or_default();
        seen.lock().unwrap().push(format!("{} {token}", r.path));
        (200, r#"{"pipelines": []}"#.into())
    });
    // Published before the instances start, newer than theirs will be, on the same host.
    let forged = json!({
        "instance": "evil", "group": format!("{}group", w.prefix), "url": thief,
        "partitions": [0, 1, 2], "at": (chrono::Utc::now() + chrono::TimeDelta::seconds(40)).to_rfc3339(),
    });
    w.produce("instances", Some("evil"), Some(forged.to_string().as_bytes()));

    let token = "read-token-for-the-peer-test-0001";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let (a, b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let peers = format!("http://{a},http://{b}");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let spawn = |i: usize, addr: &str, name: &str| {
        let tokens = tokens.to_str().unwrap();
        w.spawn(
            dirs[i].path(),
            &[
                "--http",
                addr,
                "--instance",
                name,
                "--api-token-file",
                tokens,
                "--peer",
                &peers,
            ],
        )
    };
    let _instances = Instances(vec![spawn(0, &a, "a"), spawn(1, &b, "b")]);

    let auth = format!("Bearer {token}");
    let get = |addr: &str, path: &str| -> Option<(u16, Value)> {
        let (status, body) = http_request(addr, "GET", path, &[("Authorization", &auth)], "")?;
        Some((status, serde_json::from_str(&body).ok()?))
    };
    // Each instance lists both real instances and every pipeline, and answers for every
    // pipeline through its owner (the forged record claims them all, and is newest).
    let all: BTreeSet<String> = ids.iter().cloned().collect();
    let settled = |addr: &str| -> Option<bool> {
        let (status, page) = get(addr, "/api/pipelines")?;
        let names: BTreeSet<String> = page["pipelines"]
            .as_array()?
            .iter()
            .filter_map(|p| Some(p["pipelineId"].as_str()?.to_string()))
            .collect();
        let mut servers = BTreeSet::new();
        for id in &ids {
            let (status, view) = get(addr, &format!("/api/pipelines/{id}"))?;
            (status == 200).then_some(())?;
            servers.insert(view["servedBy"].as_str()?.to_string());
        }
        Some(
            status == 200
                && page["complete"] == true
                && page["instances"].as_array()?.len() == 2
                && names == all
                && servers.len() == 2,
        )
    };
    wait_until(
        "both instances to answer for every pipeline, through each other only",
        Duration::from_secs(90),
        || format!("{:?}\n{}", asked.lock().unwrap(), w.log_tail()),
        || [&a, &b].iter().all(|addr| settled(addr) == Some(true)),
    );
    assert_eq!(
        *asked.lock().unwrap(),
        Vec::<String>::new(),
        "the forged instance got requests"
    );
    assert!(w.log().contains("no --peer admits"), "the forged record is logged");
}

/// A producer that cannot speak Kafka (a Lambda, an Airflow task) posts its readings over
/// HTTP with a write token: they are checked as the processor checks them, published
/// keyed by pipeline, and start the run, whose job is called once. A batch with one bad
/// reading (or one over `--max-record-bytes`) publishes nothing.
#[test]
fn readings_posted_over_http_start_the_run_and_a_bad_batch_publishes_nothing() {
    let target = support::http_target();
    let mut w = World::new("ingest");
    let job = json!({"type": "http", "config": {"url": target.url}, "maxRetries": 0});
    w.config(&pipeline("ingest1", job));
    let dir = tempfile::tempdir().unwrap();
    let (read, write) = ("read-token-for-the-ingest-0001", "write-token-for-the-ingest-0002");
    let (addr, _) = serve_with_tokens(&mut w, dir.path(), "ingest1", read, write);
    let post = |token: &str, body: &Value| {
        let auth = format!("Bearer {token}");
        let (status, answer) = http_request(
            &addr,
            "POST",
            "/api/sensors",
            &[("Authorization", &auth), ("Content-Type", "application/json")],
            &body.to_string(),
        )
        .unwrap();
        (
            status,
            serde_json::from_str::<Value>(&answer).unwrap_or(Value::String(answer)),
        )
    };
    let rows = json!({"pipelineId": "ingest1", "key": "row-count", "data": {"count": 5000}});
    let ready = json!({"pipelineId": "ingest1", "key": "upstream", "data": {"status": "ready"}});
    let (status, answer) = post(read, &json!([rows]));
    assert_eq!(status, 403, "a read token may not publish: {answer}");
    // One bad reading (no key) refuses the batch: the good one is not published either.
    let (status, answer) = post(write, &json!([ready, {"pipelineId": "ingest1", "data": {}}]));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["problems"][0]["index"], json!(1), "{answer}");
    // So does one over --max-record-bytes (1 MiB), which the processor would dead-letter.
    let huge = json!({"pipelineId": "ingest1", "key": "row-count", "data": {"blob": "x".repeat(1_100_000)}});
    let (status, answer) = post(write, &json!([ready, huge]));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["problems"][0]["index"], json!(1), "{answer}");
    let reason = answer["problems"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("--max-record-bytes"), "{answer}");
    let (status, answer) = post(write, &rows);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["published"].as_array().map(Vec::len), Some(1), "{answer}");
    // Had the refused batch's good reading been published, the run would start now.
    let (status, answer) = post(write, &json!([ready]));
    assert_eq!(status, 202, "{answer}");
    w.wait_for("ingest1", "JOB_TRIGGERED", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_TRIGGERED)
    });
    assert_eq!(target.requests.lock().unwrap().len(), 1, "the job called once");
    // In the partition's order: the refused batch left nothing before the row count.
    let records = w.wait_for_sensor_records("ingest1", |rs| rs.len() >= 2);
    let keys: Vec<&str> = records.iter().map(|r| r["key"].as_str().unwrap_or("")).collect();
    assert_eq!(
        keys,
        ["row-count", "upstream"],
        "only the accepted readings: {records:?}"
    );
    assert!(
        records.iter().all(|r| r["timestamp"].is_string()),
        "stamped: {records:?}"
    );
}

/// A second process started under the name of a live one (a Deployment's replicas all given
/// one `--instance`, say) would fence it in turn, and the two would take the partitions from
/// each other for as long as both run. It refuses to start, naming the other; once that one
/// has stopped, the name starts again.
#[test]
fn a_second_process_under_a_live_instances_name_refuses_to_start() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;

    let w = World::new("namesake");
    let (a, b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let peers = format!("http://{a},http://{b}");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let args = |addr: &str| -> Vec<String> {
        ["--http", addr, "--instance", "same", "--peer", &peers]
            .map(str::to_string)
            .to_vec()
    };
    let first_args = args(&a);
    let first = w.spawn(
        dirs[0].path(),
        &first_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let first = Instances(vec![first]);
    wait_until(
        "the first process ready",
        Duration::from_secs(60),
        || w.log_tail(),
        || http_get(&a, "/readyz").is_some_and(|(s, _)| s == 200),
    );
    // Its directory record on the topic.
    let reader: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("group.id", format!("{}reader", w.prefix))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition_offset(&w.topic("instances"), 0, rdkafka::Offset::Beginning)
        .unwrap();
    reader.assign(&list).unwrap();
    wait_until(
        "the first process's directory record",
        Duration::from_secs(60),
        || w.log_tail(),
        || {
            (reader.poll(Duration::from_millis(200)))
                .is_some_and(|m| m.is_ok_and(|m| m.key() == Some(b"same".as_slice()) && m.payload().is_some()))
        },
    );
    let second_args = args(&b);
    let mut second = w.spawn(
        dirs[1].path(),
        &second_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = w.log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "the second process did not refuse to start\n{}",
        w.log_tail()
    );
    assert!(
        log.contains("another process runs as --instance same") && log.contains(&format!("http://{a}/healthz")),
        "{}",
        w.log_tail()
    );
    assert!(
        http_get(&a, "/healthz").is_some_and(|(s, _)| s == 200),
        "the first runs on"
    );
    // Stopped cleanly (its tombstone published), the name starts again.
    first.terminate();
    let again = Instances(vec![w.spawn(
        dirs[1].path(),
        &second_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )]);
    wait_until(
        "the name started again",
        Duration::from_secs(60),
        || w.log_tail(),
        || http_get(&b, "/readyz").is_some_and(|(s, _)| s == 200),
    );
    again.terminate();
}
