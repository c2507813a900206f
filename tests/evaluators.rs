//! Evaluators on the real broker: a pipeline that no producer feeds runs end to end on the
//! answers of loopback HTTP evaluators (one flaky, one slow past its timeout, one in the
//! earlier AWS variant's answer shape) and a `command` evaluator; the answers are recorded
//! on the sensors topic, so a replay reproduces the run without calling anything.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sluice::core::events::{Event, EventType::*};

use super::{http_job, next_minute};
use crate::support::{http_target, serve, sluice_on, World};

/// Calls per path at the loopback evaluator.
#[derive(Default, Clone)]
struct Calls(Arc<[AtomicUsize; 3]>);

const ROWS: usize = 0;
const PARTNER: usize = 1;
const SLOW: usize = 2;
/// The partner evaluator's credential, which the processor reads from its environment.
const TOKEN: &str = "partner-secret-0042";

impl Calls {
    fn of(&self, which: usize) -> usize {
        self.0[which].load(Ordering::SeqCst)
    }
}

/// `/rows` fails twice (503) then answers 1,500 rows; `/partner` answers as the earlier
/// variant's evaluators did, to a POST that carries the secret [`TOKEN`]; `/slow` answers
/// after 3 s, past its 1 s timeout.
fn evaluators() -> (String, Calls) {
    let calls = Calls::default();
    let seen = calls.clone();
    let base = serve(move |request| {
        let which = match request.path.as_str() {
            "/rows" => ROWS,
            "/partner" => PARTNER,
            "/slow" => SLOW,
            _ => return (404, "{}".into()),
        };
        let n = seen.0[which].fetch_add(1, Ordering::SeqCst) + 1;
        match which {
            ROWS if n <= 2 => (503, r#"{"error": "warehouse busy"}"#.into()),
            ROWS => (200, json!({"count": 1500, "day": request.query}).to_string()),
            PARTNER
                if request.header("authorization") != Some(&format!("Bearer {TOKEN}")) || request.method != "POST" =>
            {
                (401, r#"{"error": "who are you?"}"#.into())
            }
            PARTNER => (
                200,
                r#"{"status": "PASS", "value": {"lag": 3}, "reason": "lag 3s"}"#.into(),
            ),
            _ => {
                std::thread::sleep(Duration::from_secs(3));
                (200, r#"{"ok": true}"#.into())
            }
        }
    });
    (base, calls)
}

#[test]
fn a_pipeline_with_no_producer_runs_on_its_evaluators_and_replays_without_calling_them() {
    let target = http_target();
    let (base, calls) = evaluators();
    let mut w = World::new("evaluators");
    let asked = w.scratch.path().join("asked.txt");
    // The command evaluator reads its question on stdin and says which key it was asked.
    let command = format!(
        "read question; echo \"$question\" >> {asked}; test \"$SLUICE_SENSOR_KEY\" = flag && echo '{{\"ready\": true}}'",
        asked = asked.display()
    );
    let mut job = http_job(&target.url);
    job["triggerRetry"] = json!({"interval": "2s", "backoffRate": 2, "maxAttempts": 3});
    let config = json!({
        "pipeline": {"id": "pull", "owner": "tests"},
        "schedule": {"cron": "* * * * *", "timezone": "UTC", "evaluation": {"window": "10m", "interval": "1m"}},
        "validation": {"rules": [
            {"key": "rows", "check": "gte", "field": "count", "value": 1000,
             "evaluator": {"type": "http", "url": format!("{base}/rows?day=${{DATE}}"), "ttl": "10m"}},
            {"key": "partner", "check": "equals", "field": "status", "value": "PASS",
             "evaluator": {"type": "http", "url": format!("{base}/partner"), "method": "POST",
                           "headers": {"Authorization": "Bearer ${env:PARTNER_TOKEN}"}}},
            {"key": "partner", "check": "lte", "field": "value.lag", "value": 5},
            {"key": "flag", "check": "equals", "field": "ready", "value": true,
             "evaluator": {"type": "command", "command": command, "timeout": "10s"}},
            {"key": "slow", "check": "exists", "severity": "warn",
             "evaluator": {"type": "http", "url": format!("{base}/slow"), "timeout": "1s"}}
        ]},
        "job": job,
    });
    w.secret("PARTNER_TOKEN", TOKEN);
    // Replay runs in the records' event time, so this processor keeps the system clock (no
    // `--clock-offset`) and the run waits for the real next minute.
    w.start_with(&config);
    let accepted = w.wait_for_sequence("pull", &[CONFIG_ACCEPTED])[0].timestamp;
    let boundary = next_minute(accepted);
    let date = boundary.format("%Y-%m-%dT%H").to_string();
    let of_date = |es: &[Event]| -> Vec<Event> {
        (es.iter())
            .filter(|e| e.date.as_deref() == Some(date.as_str()))
            .cloned()
            .collect()
    };
    let events = w.wait_for_until(
        "pull",
        "JOB_COMPLETED",
        w.instant_at(boundary) + Duration::from_secs(60),
        |es| of_date(es).iter().any(|e| e.kind == JOB_COMPLETED),
    );
    let run = of_date(&events);
    let kinds: Vec<_> = run.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [VALIDATION_WARNED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
        "{run:#?}\n{}",
        w.log_tail()
    );

    // The slow evaluator timed out: its warn rule says so, and did not hold the run.
    let warned = &run[0].detail["results"];
    assert_eq!(warned[0]["key"], json!("slow"), "{warned}");
    let why = warned[0]["reason"].as_str().unwrap();
    assert!(
        why.starts_with("evaluator failed:") && why.contains("timed out"),
        "{why}"
    );
    // The answers were judged like any reading: flattened, with the run variables sent.
    let results = &run[1].detail["results"];
    let seen = |key: &str, field: &str| {
        (results.as_array().unwrap().iter())
            .find(|r| r["key"] == json!(key) && r["field"] == json!(field))
            .map(|r| r["seen"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(seen("rows", "count"), json!(1500), "{results}");
    assert_eq!(seen("partner", "value.lag"), json!(3), "{results}");
    assert_eq!(seen("flag", "ready"), json!(true), "{results}");

    // Counted where they land: two failures and one answer at /rows, then nothing more
    // once the rules passed.
    assert_eq!(calls.of(ROWS), 3, "503, 503 (retried after 2 s, 4 s), then 200");
    assert_eq!(calls.of(PARTNER), 1);
    let question: Value =
        serde_json::from_str(std::fs::read_to_string(&asked).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(
        question,
        json!({"pipelineId": "pull", "scheduleId": "cron", "date": date, "key": "flag"})
    );
    assert_eq!(target.requests.lock().unwrap().len(), 1, "the job ran once");
    let of = |rs: &[Value], key: &str| {
        rs.iter()
            .filter(|r| r["key"] == json!(key))
            .cloned()
            .collect::<Vec<_>>()
    };
    let answers = w.wait_for_sensor_records("pull", |rs| of(rs, "rows").len() >= 3 && !of(rs, "slow").is_empty());
    let by = |key: &str| of(&answers, key);
    assert_eq!(by("rows").len(), 3, "every call's outcome is recorded: {answers:#?}");
    assert!(by("rows")[0]["error"].as_str().unwrap().contains("503"), "{answers:#?}");
    assert!(
        answers.iter().all(|r| r["source"] == json!("evaluator")),
        "{answers:#?}"
    );
    assert_eq!(by("rows")[2]["data"]["count"], json!(1500));
    assert!(
        !format!("{answers:?}").contains(TOKEN),
        "the secret stays out of the readings"
    );
    assert!(!w.log().contains(TOKEN), "and out of the log");

    // Replay: the same decisions under the same ids, and not one call more.
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let before = (calls.of(ROWS), calls.of(PARTNER), calls.of(SLOW));
    let lines_before = std::fs::read_to_string(&asked).unwrap().lines().count();
    let output = w.scratch.path().join("replayed.jsonl");
    let out = sluice_on(&w.brokers)
        .args(["replay", "--topic-prefix", &w.prefix, "--pipeline", "pull"])
        .args(["--output", output.to_str().unwrap(), "--diff", "--exit-code"])
        .output()
        .unwrap();
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("1 pipelines, 0 changed"), "{report}");
    let replayed: Vec<Event> = (std::fs::read_to_string(&output).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids = |es: &[Event]| es.iter().map(|e| (e.kind, e.event_id.clone())).collect::<Vec<_>>();
    let live: Vec<Event> = w
        .events_seen()
        .iter()
        .filter(|e| e.pipeline_id == "pull")
        .cloned()
        .collect();
    assert_eq!(ids(&replayed), ids(&live), "{report}");
    assert_eq!(
        (calls.of(ROWS), calls.of(PARTNER), calls.of(SLOW)),
        before,
        "a replay calls nothing"
    );
    assert_eq!(std::fs::read_to_string(&asked).unwrap().lines().count(), lines_before);
}

#[test]
fn an_evaluator_the_ssrf_guard_refuses_is_a_sensor_error_not_a_crash() {
    let (base, calls) = evaluators();
    let mut w = World::new("evaluator-guard");
    w.allow_targets = String::new(); // loopback is refused, as by default in production
    let mut config = crate::support::pipeline("guarded", crate::support::command_job("true", 0));
    config["validation"]["rules"][1]["evaluator"] = json!({"type": "http", "url": format!("{base}/rows")});
    w.start_with(&config);
    w.sensor("guarded", "upstream", json!({"status": "ready"}));
    let answers = w.wait_for_sensor_records("guarded", |rs| rs.iter().any(|r| r["key"] == json!("row-count")));
    let refused = answers.iter().find(|r| r["key"] == json!("row-count")).unwrap();
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("is a loopback address"), "{refused:#}");
    assert_eq!(calls.of(ROWS), 0, "the guard stops the call before it is made");
    // A producer's reading of the same key and date takes the failed answer's place.
    w.sensor_on(
        "guarded",
        "row-count",
        json!({"count": 5000}),
        Some(crate::support::day()),
    );
    w.wait_for_sequence(
        "guarded",
        &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
    );
}

/// The earlier AWS variant's files through `config apply` on the real broker: an archetype
/// with `requiredTraits` and two trait-format pipelines (`id`, `archetype`, `traits` with
/// relative evaluator paths, a flat `trigger`, one daily window). Each trait is asked with the
/// variant's input at `EVALUATOR_BASE_URL`; the pipeline whose `record-count` trait answers
/// FAIL is held (VALIDATION_EXHAUSTED naming it) and never calls its job, the other runs.
/// Counted at the target.
#[test]
fn trait_format_pipelines_load_and_their_required_traits_hold_the_run() {
    let target = http_target();
    let asked = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let seen = asked.clone();
    let base = serve(move |request| {
        let input: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
        seen.lock().unwrap().push(json!({"path": request.path, "input": input}));
        let status = match (request.path.as_str(), input["pipelineId"].as_str()) {
            ("/evaluate/upstream-dependency", _) | ("/evaluate/record-count", Some("runs")) => "PASS",
            ("/evaluate/record-count", _) => "FAIL",
            _ => return (404, "{}".into()),
        };
        (200, json!({"status": status, "value": {"objects": 3}}).to_string())
    });
    let root = tempfile::tempdir().unwrap();
    let (pipelines, archetypes) = (root.path().join("pipelines"), root.path().join("archetypes"));
    std::fs::create_dir_all(&pipelines).unwrap();
    std::fs::create_dir_all(&archetypes).unwrap();
    std::fs::write(
        archetypes.join("gold.yaml"),
        "name: gold-etl\nrequiredTraits:\n  - {type: upstream-dependency, defaultConfig: {tableName: '${TABLE_NAME}'}, defaultTimeout: 10, defaultTtl: 300}\n  - {type: record-count, defaultConfig: {bucket: '${BUCKET_NAME}', minObjects: 1}, defaultTimeout: 10}\nreadinessRule: {type: all-required-pass}\n",
    )
    .unwrap();
    for id in ["runs", "held"] {
        let file = format!(
            "id: {id}\nname: {id} ETL\narchetype: gold-etl\ntraits:\n  - {{type: upstream-dependency, evaluator: evaluate/upstream-dependency, config: {{upstreamPipeline: silver}}}}\n  - {{type: record-count, evaluator: evaluate/record-count, config: {{prefix: silver/{id}/}}}}\ntrigger: {{type: http, url: '{}', method: POST}}\nschedules: [{{name: daily, after: '00:00', deadline: '00:01'}}]\n",
            target.url
        );
        std::fs::write(pipelines.join(format!("{id}.yaml")), file).unwrap();
    }
    let mut w = World::new("traits");
    let out = sluice_on(&w.brokers)
        .args([
            "config",
            "apply",
            pipelines.to_str().unwrap(),
            "--topic-prefix",
            &w.prefix,
        ])
        .args([
            "--var",
            &format!("EVALUATOR_BASE_URL={base}"),
            "--var",
            "TABLE_NAME=runs-table",
        ])
        .args(["--var", "BUCKET_NAME=lake"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    w.start();
    for id in ["runs", "held"] {
        w.wait_for(id, "CONFIG_ACCEPTED", |es| es.iter().any(|e| e.kind == CONFIG_ACCEPTED));
        w.rerun(id, crate::support::day(), "the variant's hourly run, by hand");
    }
    let events = w.wait_for("runs", "JOB_TRIGGERED", |es| es.iter().any(|e| e.kind == JOB_TRIGGERED));
    assert!(events.iter().any(|e| e.kind == VALIDATION_PASSED));
    // Its window is a minute (the schedule's 00:00 to 00:01): wait well past it.
    let past_the_window = std::time::Instant::now() + Duration::from_secs(180);
    let events = w.wait_for_until("held", "VALIDATION_EXHAUSTED", past_the_window, |es| {
        es.iter().any(|e| e.kind == VALIDATION_EXHAUSTED)
    });
    let exhausted = events.iter().find(|e| e.kind == VALIDATION_EXHAUSTED).unwrap();
    let failing: Vec<&Value> = (exhausted.detail["results"].as_array().unwrap().iter())
        .filter(|r| r["passed"] == json!(false))
        .map(|r| &r["key"])
        .collect();
    assert_eq!(failing, [&json!("record-count")], "{:?}", exhausted.detail);
    assert!(!events.iter().any(|e| e.kind == JOB_TRIGGERED));
    assert_eq!(
        target.requests.lock().unwrap().len(),
        1,
        "only the pipeline whose traits passed ran"
    );
    // The variant's input: the pipeline's config keys over the archetype's, variables given.
    let asked = asked.lock().unwrap().clone();
    let input = (asked.iter())
        .find(|a| a["path"] == json!("/evaluate/record-count") && a["input"]["pipelineId"] == json!("runs"))
        .map(|a| a["input"].clone());
    assert_eq!(
        input,
        Some(json!({"pipelineId": "runs", "traitType": "record-count",
                    "config": {"bucket": "lake", "minObjects": 1, "prefix": "silver/runs/"}})),
        "{asked:#?}"
    );
    w.stop();
}
