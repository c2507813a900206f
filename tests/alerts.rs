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
    let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
    let record = seen.clone();
    let url = serve(move |r| {
        let mut all = record.lock().unwrap();
        all.push(r.clone());
        if all.len() == 1 {
            (503, "{}".into())
        } else {
            (204, String::new())
        }
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
    let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
    let record = seen.clone();
    let url = serve(move |r| {
        let mut all = record.lock().unwrap();
        all.push(r.clone());
        let body = r.json();
        match (all.len(), body["payload"]["class"].as_str()) {
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
    assert!(!logged.contains("R0UTINGKEY"), "the key is never logged");
}
