//! `sluice alerts` on the real broker: Slack threads per execution (kept across restarts),
//! 429s retried after Retry-After, SLA warnings after a breach suppressed, action hints, a
//! breach replying in a thread broadcast to the channel, SLA_MET sent by default, the token
//! never logged; the webhook sink retries a failing receiver.

use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{serve, serve_with_headers, sluice_on, wait_until, Request, World};

/// Publishes an event of pipeline `gold` (schedule daily) straight to the events topic.
fn publish_event(w: &World, id: &str, kind: &str, date: &str) {
    publish_event_with(w, id, kind, date, json!({}));
}

/// The same, with the event's `detail`.
fn publish_event_with(w: &World, id: &str, kind: &str, date: &str, detail: Value) {
    let event = json!({
        "eventId": id, "type": kind, "category": "sla", "pipelineId": "gold",
        "scheduleId": "daily", "date": date, "timestamp": "2026-11-21T06:00:00Z",
        "message": format!("{kind} for {date}"), "detail": detail,
    });
    w.produce("events", Some("gold"), Some(&serde_json::to_vec(&event).unwrap()));
}

fn alerts(w: &World, args: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    sluice_on(&w.brokers)
        .envs(env.iter().copied())
        .args(["alerts"])
        .args(args)
        .args(["--topic-prefix", &w.prefix, "--from", "beginning"])
        .args(["--group", &format!("{}alerts", w.prefix)])
        .arg("--state-dir")
        .arg(w.scratch.path().join("alerts-state"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// SIGTERM, and the exit it leads to.
fn stop(mut child: Child) {
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "alerts stop cleanly on SIGTERM: {status}");
}

#[test]
fn slack_threads_per_execution_retries_429_suppresses_warnings_after_a_breach_and_broadcasts_it() {
    let w = World::new("slack");
    let seen: Arc<Mutex<Vec<(Instant, Request)>>> = Arc::default();
    let record = seen.clone();
    let api = serve_with_headers(move |r| {
        let mut all = record.lock().unwrap();
        all.push((Instant::now(), r.clone()));
        if all.len() == 1 {
            return (
                429,
                vec![("Retry-After".into(), "1".into())],
                json!({"ok": false, "error": "ratelimited"}).to_string(),
            );
        }
        (
            200,
            vec![],
            json!({"ok": true, "channel": "C1", "ts": format!("1700000000.{:06}", all.len())}).to_string(),
        )
    });
    publish_event(&w, "e1", "SLA_WARNING", "2026-11-21");
    publish_event_with(&w, "e2", "SLA_BREACH", "2026-11-21", json!({"phase": "notStarted"}));
    publish_event(&w, "e3", "SLA_WARNING", "2026-11-21");
    publish_event(&w, "e4", "VALIDATION_PASSED", "2026-11-21");
    publish_event_with(&w, "e5", "JOB_FAILED", "2026-11-21", json!({"willRetry": false}));
    publish_event(&w, "e6", "JOB_FAILED", "2026-11-22");

    let token = "xoxb-test-secret-123";
    let env = [("SLACK_BOT_TOKEN", token)];
    let log = w.scratch.path().join("alerts.log");
    let args = ["slack", "--channel", "C1", "--api", api.as_str()];
    let posted = |n: usize| {
        let all = seen.lock().unwrap();
        all.len() > n
    };
    let context = || std::fs::read_to_string(&log).unwrap_or_default();
    let child = alerts(&w, &args, &env, &log);
    wait_until("five Slack calls", Duration::from_secs(60), context, || posted(4));
    stop(child);

    let calls = seen.lock().unwrap().clone();
    let bodies: Vec<Value> = calls.iter().map(|(_, r)| r.json()).collect();
    for (_, r) in &calls {
        assert_eq!(r.path, "/chat.postMessage");
        assert_eq!(r.header("authorization"), Some(format!("Bearer {token}").as_str()));
    }
    // The 429 is retried with the same message, after its Retry-After.
    assert_eq!(bodies[0], bodies[1]);
    assert!(
        calls[1].0 - calls[0].0 >= Duration::from_millis(950),
        "Retry-After honoured"
    );
    let texts: Vec<&str> = bodies[1..].iter().map(|b| b["text"].as_str().unwrap()).collect();
    assert!(
        texts[0].contains("SLA_WARNING") && texts[1].contains("SLA_BREACH"),
        "{texts:?}"
    );
    assert!(
        texts[2].contains("JOB_FAILED") && texts[2].contains("2026-11-21"),
        "e3 suppressed, e4 not selected: {texts:?}"
    );
    assert!(
        texts[3].contains("JOB_FAILED") && texts[3].contains("2026-11-22"),
        "{texts:?}"
    );
    // One thread per execution: the first message of 2026-11-21 (ts …02) holds the others.
    let threads: Vec<Option<&str>> = bodies[1..].iter().map(|b| b["thread_ts"].as_str()).collect();
    assert_eq!(
        threads,
        [None, Some("1700000000.000002"), Some("1700000000.000002"), None]
    );
    assert!(bodies[1]["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap()
        .contains("*gold*"));
    assert!(!context().contains(token), "the token is never logged:\n{}", context());

    // Each message says what to do next, in its own block and at the end of the fallback
    // text; the breach, a reply in the thread, is also shown in the channel.
    let hint = |b: &Value| b["blocks"][1]["text"]["text"].as_str().unwrap_or_default().to_string();
    let breach = &bodies[2];
    assert_eq!(breach["reply_broadcast"], true, "{breach}");
    assert!(
        hint(breach).starts_with("→ not started: investigate the trigger"),
        "{breach}"
    );
    assert!(breach["text"]
        .as_str()
        .unwrap()
        .ends_with(&format!("\n{}", hint(breach))));
    let failed = &bodies[3];
    assert!(
        hint(failed).contains("check the job's logs") && hint(failed).ends_with("`sluice rerun gold 2026-11-21`"),
        "{failed}"
    );
    // Not broadcast: the thread's first message (already in the channel), a retryable failure.
    for body in [&bodies[1], failed, &bodies[4]] {
        assert!(body.get("reply_broadcast").is_none(), "{body}");
    }

    // Restarted: earlier events are not sent again, and the thread is remembered. SLA_MET
    // is among the types sent by default.
    publish_event(&w, "e7", "JOB_COMPLETED", "2026-11-21");
    publish_event(&w, "e8", "SLA_MET", "2026-11-21");
    let child = alerts(&w, &args, &env, &log);
    wait_until("the posts after the restart", Duration::from_secs(60), context, || {
        posted(6)
    });
    // Give a wrongly re-sent backlog the time to show up behind it.
    wait_until("nothing more", Duration::from_secs(3), context, || {
        std::thread::sleep(Duration::from_millis(100));
        true
    });
    stop(child);
    let calls = seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 7, "only the new events are posted");
    let completed = calls[5].1.json();
    assert!(completed["text"].as_str().unwrap().contains("JOB_COMPLETED"));
    assert_eq!(completed["thread_ts"], "1700000000.000002");
    let met = calls[6].1.json();
    assert!(met["text"].as_str().unwrap().contains("SLA_MET"), "{met}");
    assert_eq!(met["thread_ts"], "1700000000.000002");
    assert!(met.get("reply_broadcast").is_none(), "{met}");
    assert!(!met["text"].as_str().unwrap().contains('→'), "nothing to do: {met}");
}

#[test]
fn the_webhook_sink_retries_until_the_receiver_takes_the_event() {
    let w = World::new("webhook");
    let (url, seen) = recording(|n, _| match n {
        1 => (503, "{}".into()),
        _ => (204, String::new()),
    });
    publish_event(&w, "e1", "SLA_BREACH", "2026-11-21");
    let log = w.scratch.path().join("webhook.log");
    let child = alerts(
        &w,
        &[
            "webhook",
            "--url",
            &format!("{url}/hooks/sluice"),
            "--header",
            "X-Team=data",
            "--type",
            "SLA_BREACH",
        ],
        &[],
        &log,
    );
    wait_until(
        "the retried delivery",
        Duration::from_secs(60),
        || std::fs::read_to_string(&log).unwrap_or_default(),
        || seen.lock().unwrap().len() >= 2,
    );
    stop(child);
    let calls = seen.lock().unwrap().clone();
    assert_eq!(calls[1].path, "/hooks/sluice");
    assert_eq!(calls[1].header("x-team"), Some("data"));
    assert_eq!(calls[1].json()["eventId"], "e1");
    assert_eq!(calls[0].body, calls[1].body);
}

/// PagerDuty (Events API v2, a loopback server answering as it does): a failure opens the
/// execution's incident, an event PagerDuty refuses (400) is skipped without holding up the
/// rest, a throttled one is sent again, and the run's success resolves the same incident.
/// Only the quiet default set is sent (no SLA warning).
#[test]
fn pagerduty_incidents_open_on_failure_and_resolve_on_success() {
    let w = World::new("pagerduty");
    let (url, seen) = recording(|n, r| {
        let body = r.json();
        match (n, body["payload"]["class"].as_str()) {
            (_, Some("STALE_RUN")) => (400, json!({"status": "invalid event", "errors": ["bad"]}).to_string()),
            (1, _) => (429, json!({"status": "throttled"}).to_string()),
            _ => (
                202,
                json!({"status": "success", "dedup_key": body["dedup_key"]}).to_string(),
            ),
        }
    });
    publish_event(&w, "p1", "SLA_WARNING", "2026-11-21");
    publish_event(&w, "p2", "JOB_FAILED", "2026-11-21");
    publish_event(&w, "p3", "STALE_RUN", "2026-11-21");
    publish_event(&w, "p4", "JOB_COMPLETED", "2026-11-21");
    let key_file = w.scratch.path().join("routing-key");
    std::fs::write(&key_file, "R0UTINGKEY-for-tests\n").unwrap();
    let log = w.scratch.path().join("pagerduty.log");
    let child = alerts(
        &w,
        &[
            "pagerduty",
            "--url",
            &format!("{url}/v2/enqueue"),
            "--routing-key-file",
            key_file.to_str().unwrap(),
            "--ui-url",
            "https://sluice.example",
        ],
        &[],
        &log,
    );
    let resolved = || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|r| r.json()["event_action"] == "resolve")
    };
    wait_until(
        "the incident resolved",
        Duration::from_secs(60),
        || std::fs::read_to_string(&log).unwrap_or_default(),
        resolved,
    );
    stop(child);
    let calls: Vec<Value> = seen.lock().unwrap().iter().map(|r| r.json()).collect();
    let actions: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            let class = c["payload"]["class"].as_str().unwrap_or("-");
            (c["event_action"].as_str().unwrap_or(""), class)
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("trigger", "JOB_FAILED"),
            ("trigger", "JOB_FAILED"),
            ("trigger", "STALE_RUN"),
            ("resolve", "-")
        ],
        "no SLA warning; the 429 sent again; the 400 skipped"
    );
    assert!(calls.iter().all(|c| c["dedup_key"] == "sluice/gold/daily/2026-11-21"));
    assert_eq!(calls[1]["routing_key"], "R0UTINGKEY-for-tests");
    assert_eq!(calls[1]["links"][0]["href"], "https://sluice.example/pipelines/gold");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("PagerDuty refused the event"), "{logged}");
    // Not lost: the refused event is on the dead-letter topic with PagerDuty's reason.
    let letters = w.dead_letters(1);
    let header = |k: &str| letters[0].1.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(header("alert.target").as_deref(), Some("pagerduty"));
    assert!(header("error").is_some_and(|e| e.contains("HTTP 400")), "{letters:?}");
    assert!(!logged.contains("R0UTINGKEY"), "the key is never logged");
}

/// Publishes an event of `pipeline` (schedule daily, one date) with `message`.
fn publish_for(w: &World, pipeline: &str, id: &str, kind: &str, message: &str) {
    let event = json!({
        "eventId": id, "type": kind, "category": "job", "pipelineId": pipeline,
        "scheduleId": "daily", "date": "2026-11-21", "timestamp": "2026-11-21T06:00:00Z",
        "message": message,
    });
    w.produce("events", Some(pipeline), Some(&serde_json::to_vec(&event).unwrap()));
}

/// A loopback target that keeps what it was sent and answers with `answer`, given how many
/// requests it has had (this one included).
fn recording(
    answer: impl Fn(usize, &Request) -> (u16, String) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Request>>>) {
    let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
    let record = seen.clone();
    let url = serve(move |r| {
        let mut all = record.lock().unwrap();
        all.push(r.clone());
        answer(all.len(), r)
    });
    (url, seen)
}

#[test]
fn routes_send_by_owner_and_a_target_that_refuses_or_fails_holds_up_no_other() {
    let w = World::new("routes");
    // The owners, as `config apply` publishes them (the forwarder reads only the owner).
    for (id, owner) in [("gold", "analytics-team"), ("silver", "finance")] {
        let config = json!({"pipeline": {"id": id, "owner": owner}});
        w.produce("config", Some(id), Some(&serde_json::to_vec(&config).unwrap()));
    }
    let (team_url, team) = recording(|_, _| (200, "ok".into()));
    let (ops_url, ops) = recording(|_, r| match r.body.contains("STALE_RUN") {
        true => (422, json!({"message": "Request body is not processable"}).to_string()),
        false => (202, json!({"result": "Request will be processed"}).to_string()),
    });
    let (broken_url, broken) = recording(|_, _| (503, "down".into()));
    let secret = |name: &str, value: &str| {
        let path = w.scratch.path().join(name);
        std::fs::write(&path, value).unwrap();
        path.display().to_string()
    };
    let routes = w.scratch.path().join("routes.yaml");
    std::fs::write(
        &routes,
        format!(
            r#"
targets:
  team: {{type: slack-webhook, urlFile: "{}", mention: "<!subteam^S1>"}}
  ops: {{type: opsgenie, apiKeyFile: "{}", url: "{ops_url}"}}
  broken: {{type: webhook, url: "{broken_url}/hook"}}
routes:
  - owner: analytics-team
    to: [team, ops, broken]
unmatched: [team]
"#,
            secret("team-webhook", &format!("{team_url}/services/T1/B1/xyz\n")),
            secret("opsgenie-key", "G3NIEKEY-for-tests"),
        ),
    )
    .unwrap();
    publish_for(
        &w,
        "gold",
        "g1",
        "JOB_FAILED",
        "exit 1: <!channel> & <https://evil.example|click>",
    );
    publish_for(&w, "gold", "g2", "STALE_RUN", "no word from the job");
    publish_for(&w, "gold", "g3", "JOB_COMPLETED", "done");
    publish_for(&w, "silver", "s1", "SLA_BREACH", "late");
    let port = crate::support::free_port();
    let http = format!("127.0.0.1:{port}");
    let log = w.scratch.path().join("route.log");
    let child = alerts(
        &w,
        &[
            "route",
            "--routes",
            routes.to_str().unwrap(),
            "--give-up-after",
            "2s",
            "--http",
            &http,
            "--ui-url",
            "https://sluice.example",
        ],
        &[],
        &log,
    );
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // The failing target's two events give up and are dead-lettered, the refused one too.
    let letters = w.dead_letters(3);
    let posted = |seen: &Arc<Mutex<Vec<Request>>>| seen.lock().unwrap().len();
    wait_until(
        "the team's three alerts and the closed alert",
        Duration::from_secs(60),
        text,
        || posted(&team) >= 3 && posted(&ops) >= 3,
    );
    let metrics = crate::support::http_get(&http, "/metrics").expect("metrics").1;
    let ready = crate::support::http_get(&http, "/readyz").expect("readyz");
    stop(child);

    // Slack: its own payload (no raw event), the owner's pipeline mentioned, the unmatched
    // pipeline's breach to the catch-all, no success, the job's text unable to mention or link.
    let team: Vec<Value> = team.lock().unwrap().iter().map(|r| r.json()).collect();
    let texts: Vec<&str> = team.iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    // One pipeline's in order; the other pipeline's may be in another partition.
    let gold: Vec<&str> = texts.iter().copied().filter(|t| t.contains("· gold")).collect();
    let silver: Vec<&str> = texts.iter().copied().filter(|t| t.contains("· silver")).collect();
    assert!(
        gold[0].starts_with("<!subteam^S1> :x: JOB_FAILED · gold"),
        "{}",
        gold[0]
    );
    assert!(
        gold[0].contains("&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;"),
        "{}",
        gold[0]
    );
    assert!(gold[1].contains("STALE_RUN · gold"), "{}", gold[1]);
    assert!(silver[0].contains("SLA_BREACH · silver"), "{silver:?}");
    assert!(team
        .iter()
        .all(|m| m.get("type").is_none() && m.get("eventId").is_none()));
    let gold_first = team
        .iter()
        .find(|m| m["text"].as_str().unwrap().contains("JOB_FAILED"))
        .unwrap();
    let context = gold_first["blocks"].to_string();
    assert!(context.contains("https://sluice.example/pipelines/gold"), "{context}");
    // Opsgenie: created with its key, the refused one dead-lettered, closed by the success.
    let ops = ops.lock().unwrap();
    let calls: Vec<(&str, &str)> = ops.iter().map(|r| (r.path.as_str(), r.query.as_str())).collect();
    assert_eq!(
        calls,
        [
            ("/v2/alerts", ""),
            ("/v2/alerts", ""),
            (
                "/v2/alerts/sluice%2Fgold%2Fdaily%2F2026-11-21/close",
                "identifierType=alias"
            )
        ]
    );
    assert_eq!(ops[0].headers["authorization"], "GenieKey G3NIEKEY-for-tests");
    let created = ops[0].json();
    assert_eq!(
        (created["alias"].as_str(), created["priority"].as_str()),
        (Some("sluice/gold/daily/2026-11-21"), Some("P2"))
    );
    // The failing target was tried, then gave up; it held up neither other target.
    assert!(broken.lock().unwrap().len() >= 2);
    let mut reasons: Vec<(String, String)> = letters
        .iter()
        .map(|(_, headers)| {
            let get = |k: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (get("alert.target"), get("error"))
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].0 == "broken" && reasons[0].1.contains("still failing after"),
        "{reasons:?}"
    );
    assert!(reasons[1].0 == "broken", "{reasons:?}");
    assert!(
        reasons[2].0 == "ops" && reasons[2].1.contains("HTTP 422"),
        "{reasons:?}"
    );
    // Probes and metrics.
    assert_eq!(ready.0, 200, "{}", ready.1);
    assert!(
        metrics.contains(r#"sluice_alerts_delivered_total{target="team"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"sluice_alerts_dead_lettered_total{target="broken",reason="gave_up"} 2"#),
        "{metrics}"
    );
    let logged = text();
    assert!(
        !logged.contains("G3NIEKEY") && !logged.contains("/services/T1"),
        "no secret is logged"
    );
}

/// A pipeline applied while `alerts route` runs is routed by its owner from its first event:
/// the event of a pipeline whose config was not read yet makes the forwarder read the config
/// topic at once, instead of sending it to `unmatched` until its next read (30 s later).
#[test]
fn a_pipeline_applied_while_routing_is_routed_by_its_owner_from_its_first_event() {
    let w = World::new("routes-late");
    let (team_url, team) = recording(|_, _| (200, "ok".into()));
    let (rest_url, rest) = recording(|_, _| (200, "ok".into()));
    let routes = w.scratch.path().join("routes.yaml");
    std::fs::write(
        &routes,
        format!(
            "targets:\n  team: {{type: webhook, url: \"{team_url}/hook\"}}\n  rest: {{type: webhook, url: \"{rest_url}/hook\"}}\n\
             routes:\n  - owner: analytics-team\n    to: [team]\nunmatched: [rest]\n"
        ),
    )
    .unwrap();
    let log = w.scratch.path().join("route.log");
    let child = alerts(&w, &["route", "--routes", routes.to_str().unwrap()], &[], &log);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the owners read", Duration::from_secs(30), text, || {
        text().contains("read the pipelines' owners")
    });
    let config = json!({"pipeline": {"id": "late", "owner": "analytics-team"}});
    w.produce("config", Some("late"), Some(&serde_json::to_vec(&config).unwrap()));
    publish_for(&w, "late", "l1", "JOB_FAILED", "exit 1");
    wait_until("the owner's alert", Duration::from_secs(20), text, || {
        !team.lock().unwrap().is_empty()
    });
    stop(child);
    let sent: Vec<Value> = team.lock().unwrap().iter().map(|r| r.json()).collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["pipelineId"], "late", "{sent:?}");
    assert!(rest.lock().unwrap().is_empty(), "not sent to unmatched");
}
