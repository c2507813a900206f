//! `airflow` and `databricks` jobs against loopback servers that implement the endpoints
//! Sluice calls as those services document them: Airflow's stable REST API (v1 for Airflow
//! 2, v2 and `/auth/token` for Airflow 3, problem+json / FastAPI error shapes) and the
//! Databricks Jobs API 2.1 (`run-now` honouring `idempotency_token`, `runs/get`,
//! `{error_code, message}` errors, 429 REQUEST_LIMIT_EXCEEDED). Each test asserts the exact
//! requests Sluice made and the events the run produced, through the real processor.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::core::events::{Event, EventType, EventType::*};

use crate::support::{day, pipeline, run_id, serve, wait_until, Request, World};

const DAG_USER: &str = "sluice";
const DAG_PASSWORD: &str = "airflow-pw-31337";
const JWT: &str = "jwt-token-4242";
const DATABRICKS_TOKEN: &str = "dapi-secret-0707";

fn go(w: &World, id: &str) {
    w.sensor(id, "row-count", json!({"count": 5000}));
    w.sensor(id, "upstream", json!({"status": "ready"}));
}

fn kinds(events: &[Event]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}

fn no_secret_in(w: &World, secrets: &[&str]) {
    for e in w.events_seen() {
        let text = serde_json::to_string(e).unwrap();
        for s in secrets {
            assert!(!text.contains(s), "secret in an event: {text}");
        }
    }
    let log = w.log();
    for s in secrets {
        assert!(!log.contains(s), "secret in the log");
    }
}

/// Answers queued ahead of the normal behaviour (a 503, a 429), per path prefix.
type Faults = Arc<Mutex<Vec<(String, u16, String)>>>;

fn take_fault(faults: &Faults, path: &str) -> Option<(u16, String)> {
    let mut all = faults.lock().unwrap();
    let i = all
        .iter()
        .position(|(prefix, _, _)| path.starts_with(prefix.as_str()))?;
    let (_, code, body) = all.remove(i);
    Some((code, body))
}

// ---- Airflow -------------------------------------------------------------------------

/// An Airflow webserver (2) or API server (3): DAG runs go queued → running → the DAG's
/// outcome, one step per status read.
struct Airflow {
    base: String,
    requests: Arc<Mutex<Vec<Request>>>,
    faults: Faults,
}

// One closure answers every route, as the API does: long, so the fake's protocol reads in one place.
fn airflow(version: u8, dags: &[(&str, &str)]) -> Airflow {
    let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
    let faults: Faults = Arc::default();
    let outcomes: BTreeMap<String, String> = dags.iter().map(|(d, o)| (d.to_string(), o.to_string())).collect();
    let runs: Arc<Mutex<BTreeMap<String, Vec<&'static str>>>> = Arc::default();
    let (seen, queued) = (requests.clone(), faults.clone());
    let api = if version == 3 { "/api/v2" } else { "/api/v1" };
    let base = serve(move |r| {
        seen.lock().unwrap().push(r.clone());
        if let Some(fault) = take_fault(&queued, &r.path) {
            return fault;
        }
        let problem = |status: u16, title: &str, detail: String| {
            let body = match version {
                3 => json!({ "detail": detail }),
                _ => {
                    json!({"detail": detail, "status": status, "title": title, "type": "https://airflow.apache.org/docs/apache-airflow/stable/stable-rest-api-ref.html#section/Errors/NotFound"})
                }
            };
            (status, body.to_string())
        };
        if version == 3 && r.method == "POST" && r.path == "/auth/token" {
            let body = r.json();
            return match (body["username"].as_str(), body["password"].as_str()) {
                (Some(DAG_USER), Some(DAG_PASSWORD)) => {
                    (201, json!({"access_token": JWT, "token_type": "bearer"}).to_string())
                }
                _ => (401, json!({"detail": "Invalid credentials"}).to_string()),
            };
        }
        let authorised = match version {
            // base64("sluice:airflow-pw-31337")
            2 => r.header("authorization") == Some("Basic c2x1aWNlOmFpcmZsb3ctcHctMzEzMzc="),
            _ => r.header("authorization") == Some(&format!("Bearer {JWT}")),
        };
        if !authorised {
            return problem(401, "Unauthorized", "No credentials".into());
        }
        let Some(rest) = r.path.strip_prefix(&format!("{api}/dags/")) else {
            return problem(404, "Not Found", format!("no route {}", r.path));
        };
        let (dag, tail) = rest.split_once("/dagRuns").unwrap_or((rest, ""));
        let Some(outcome) = outcomes.get(dag) else {
            return problem(404, "DAG not found", format!("DAG with dag_id: '{dag}' not found"));
        };
        let mut runs = runs.lock().unwrap();
        match (r.method.as_str(), tail) {
            ("POST", "") => {
                let body = r.json();
                let id = body["dag_run_id"].as_str().unwrap_or("").to_string();
                if runs.contains_key(&id) {
                    return problem(
                        409,
                        "Conflict",
                        format!("DAGRun with dag_run_id: '{id}' already exists"),
                    );
                }
                let end: &'static str = if outcome == "success" { "success" } else { "failed" };
                runs.insert(id.clone(), vec!["running", end]);
                let answer = json!({"dag_id": dag, "dag_run_id": id, "state": "queued", "conf": body["conf"],
                                    "logical_date": body.get("logical_date").cloned().unwrap_or(Value::Null)});
                (200, answer.to_string())
            }
            ("GET", id) => {
                let id = id.trim_start_matches('/');
                match runs.get_mut(id) {
                    None => problem(
                        404,
                        "DAGRun not found",
                        format!("DAGRun with DAG ID: '{dag}' and DagRun ID: '{id}' not found"),
                    ),
                    Some(states) => {
                        let state = if states.len() > 1 { states.remove(0) } else { states[0] };
                        (
                            200,
                            json!({"dag_id": dag, "dag_run_id": id, "state": state}).to_string(),
                        )
                    }
                }
            }
            _ => problem(405, "Method Not Allowed", "method not allowed".into()),
        }
    });
    Airflow { base, requests, faults }
}

impl Airflow {
    fn requests(&self, method: &str, path: &str) -> Vec<Request> {
        let all = self.requests.lock().unwrap();
        all.iter()
            .filter(|r| r.method == method && r.path == path)
            .cloned()
            .collect()
    }
}

fn airflow_job(server: &Airflow, dag: &str, version: u8) -> Value {
    json!({"type": "airflow", "pollInterval": "1s", "maxRetries": 0, "maxCodeRetries": 0,
           "triggerRetry": {"interval": "200ms", "maxAttempts": 2},
           "config": {"url": server.base, "dagId": dag, "version": version,
                      "username": DAG_USER, "password": "${env:SLUICE_TEST_AIRFLOW_PASSWORD}",
                      "conf": {"date": "${DATE}", "table": "gold.revenue"}}})
}

fn airflow_world(name: &str) -> World {
    let mut w = World::new(name);
    w.secret("SLUICE_TEST_AIRFLOW_PASSWORD", DAG_PASSWORD);
    w
}

#[test]
fn airflow_2_dag_run_is_triggered_with_basic_auth_and_polled_to_success() {
    let server = airflow(2, &[("etl", "success")]);
    server
        .faults
        .lock()
        .unwrap()
        .push(("/api/v1/dags/etl/dagRuns".into(), 503, "Service Unavailable".into()));
    let mut w = airflow_world("airflow2");
    w.start_with(&pipeline("af2", airflow_job(&server, "etl", 2)));
    go(&w, "af2");
    let events = w.wait_for("af2", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    assert_eq!(
        kinds(&events),
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let run = run_id("af2", 1);
    let triggers = server.requests("POST", "/api/v1/dags/etl/dagRuns");
    assert_eq!(triggers.len(), 2, "a 503, retried");
    assert_eq!(
        triggers[1].json(),
        json!({"dag_run_id": run, "conf": {"date": day(), "table": "gold.revenue"}})
    );
    assert_eq!(triggers[1].header("content-type"), Some("application/json"));
    let polls = server.requests("GET", &format!("/api/v1/dags/etl/dagRuns/{run}"));
    assert!(polls.len() >= 2, "running, then success: {polls:?}");
    assert_eq!(events[2].detail["metadata"]["handle"], json!({"dagRunId": run}));
    assert_eq!(events[3].message, format!("DAG run {run} is success"));
    no_secret_in(&w, &[DAG_PASSWORD, "c2x1aWNl"]);
    w.stop();
}

#[test]
fn airflow_3_exchanges_credentials_for_a_token_and_reports_a_failed_run() {
    let server = airflow(3, &[("etl", "failed")]);
    let mut w = airflow_world("airflow3");
    w.config(&pipeline("af-missing", airflow_job(&server, "no-such-dag", 3)));
    w.start_with(&pipeline("af3", airflow_job(&server, "etl", 3)));
    go(&w, "af3");
    go(&w, "af-missing");
    let events = w.wait_for("af3", "failure", |es| es.iter().any(|e| e.kind == RETRY_EXHAUSTED));
    assert_eq!(
        kinds(&events),
        [
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_FAILED,
            RETRY_EXHAUSTED
        ]
    );
    let run = run_id("af3", 1);
    assert_eq!(events[3].detail["jobMessage"], format!("DAG run {run} is failed"));
    let logins = server.requests("POST", "/auth/token");
    assert!(!logins.is_empty());
    assert_eq!(
        logins[0].json(),
        json!({"username": DAG_USER, "password": DAG_PASSWORD})
    );
    let triggers = server.requests("POST", "/api/v2/dags/etl/dagRuns");
    assert_eq!(triggers.len(), 1);
    assert_eq!(
        triggers[0].header("authorization"),
        Some(format!("Bearer {JWT}").as_str())
    );
    assert_eq!(
        triggers[0].json(),
        json!({"dag_run_id": run, "logical_date": null, "conf": {"date": day(), "table": "gold.revenue"}}),
        "Airflow 3 needs logical_date, null when not configured"
    );

    // A DAG that does not exist: refused at once (PERMANENT), quoting Airflow's detail.
    let events = w.wait_for("af-missing", "refusal", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = events.iter().find(|e| e.kind == JOB_FAILED).unwrap();
    assert_eq!(failed.detail["failureCategory"], "PERMANENT");
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(
        message.contains("404") && message.contains("DAG with dag_id: 'no-such-dag' not found"),
        "{message}"
    );
    no_secret_in(&w, &[DAG_PASSWORD, JWT]);
    w.stop();
}

#[tokio::test]
async fn airflow_trigger_requested_again_adopts_the_dag_run() {
    use sluice::core::config::{JobConfig, JobKind};
    use sluice::core::lifecycle::TriggerRequest;
    use sluice::core::records::JobStatus;
    use sluice::runtime::jobs::{airflow as client, Call, Client, Guard, Redactor};
    let server = airflow(2, &[("etl", "success")]);
    let config = json!({"url": server.base, "dagId": "etl", "username": DAG_USER, "password": DAG_PASSWORD});
    let config = JobConfig::from_json(JobKind::Airflow, &config).unwrap();
    let request = TriggerRequest::new("p", &crate::execution("stream", "2026-11-22"), 1, config);
    let client_ = Client::new(Guard::new(vec!["127.0.0.0/8".parse().unwrap()]), None).unwrap();
    let call = Call {
        request: &request,
        config: &request.config,
        client: &client_,
        producer: None,
        redactor: Redactor::none(),
    };
    let first = client::trigger(&call).await.unwrap();
    let again = client::trigger(&call).await.unwrap();
    assert_eq!((first.status, again.status), (JobStatus::Running, JobStatus::Running));
    assert_eq!(
        again.metadata.unwrap()["adopted"],
        json!(true),
        "409 Conflict: this run was started before"
    );
    assert_eq!(server.requests("POST", "/api/v1/dags/etl/dagRuns").len(), 2);
}

// ---- Databricks ----------------------------------------------------------------------

/// A Databricks workspace: run-now starts a run (or returns the one its idempotency token
/// started), and runs/get walks it PENDING → RUNNING → TERMINATED with the job's result.
struct Databricks {
    base: String,
    requests: Arc<Mutex<Vec<Request>>>,
    faults: Faults,
    /// Runs started, by idempotency token.
    started: Arc<Mutex<BTreeMap<String, u64>>>,
    /// How long run-now holds its answer after starting the run (a crash test kills the
    /// processor meanwhile).
    hold: Arc<Mutex<Duration>>,
}

// One closure answers every route, as the API does: long, so the fake's protocol reads in one place.
fn databricks(jobs: &[(u64, &str)]) -> Databricks {
    let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
    let faults: Faults = Arc::default();
    let started: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let hold: Arc<Mutex<Duration>> = Arc::default();
    let results: BTreeMap<u64, String> = jobs.iter().map(|(j, r)| (*j, r.to_string())).collect();
    let runs: Arc<Mutex<BTreeMap<u64, (u64, usize)>>> = Arc::default();
    let (seen, queued, tokens, held) = (requests.clone(), faults.clone(), started.clone(), hold.clone());
    let base = serve(move |r| {
        seen.lock().unwrap().push(r.clone());
        if let Some(fault) = take_fault(&queued, &r.path) {
            return fault;
        }
        let error = |status: u16, code: &str, message: String| {
            (status, json!({"error_code": code, "message": message}).to_string())
        };
        if r.header("authorization") != Some(&format!("Bearer {DATABRICKS_TOKEN}")) {
            return error(401, "UNAUTHENTICATED", "Invalid access token.".into());
        }
        match (r.method.as_str(), r.path.as_str()) {
            ("POST", "/api/2.1/jobs/run-now") => {
                let body = r.json();
                let Some(job) = body["job_id"].as_u64().filter(|j| results.contains_key(j)) else {
                    return error(
                        400,
                        "INVALID_PARAMETER_VALUE",
                        format!("Job {} does not exist.", body["job_id"]),
                    );
                };
                let token = body["idempotency_token"].as_str().unwrap_or("").to_string();
                let run = {
                    let mut tokens = tokens.lock().unwrap();
                    let next = 1000 + tokens.len() as u64;
                    let run = *tokens.entry(token).or_insert(next);
                    runs.lock().unwrap().entry(run).or_insert((job, 0));
                    run
                };
                let wait = *held.lock().unwrap();
                std::thread::sleep(wait);
                (200, json!({"run_id": run, "number_in_job": run}).to_string())
            }
            ("GET", "/api/2.1/jobs/runs/get") => {
                let run: u64 = r
                    .query
                    .strip_prefix("run_id=")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut runs = runs.lock().unwrap();
                let Some((job, reads)) = runs.get_mut(&run) else {
                    return error(400, "INVALID_PARAMETER_VALUE", format!("Run {run} does not exist."));
                };
                *reads += 1;
                let state = match *reads {
                    1 => json!({"life_cycle_state": "PENDING", "state_message": "Waiting for cluster"}),
                    2 => json!({"life_cycle_state": "RUNNING", "state_message": ""}),
                    _ => json!({"life_cycle_state": "TERMINATED", "result_state": results[job],
                                "state_message": if results[job] == "SUCCESS" { "" } else { "Task ingest failed with message: table not found" }}),
                };
                (
                    200,
                    json!({"job_id": job, "run_id": run, "state": state,
                             "run_page_url": format!("https://dbc.example/#job/{job}/run/{run}")})
                    .to_string(),
                )
            }
            _ => error(
                404,
                "ENDPOINT_NOT_FOUND",
                format!("No API found for '{} {}'", r.method, r.path),
            ),
        }
    });
    Databricks {
        base,
        requests,
        faults,
        started,
        hold,
    }
}

impl Databricks {
    fn run_nows(&self) -> Vec<Value> {
        let all = self.requests.lock().unwrap();
        all.iter()
            .filter(|r| r.path == "/api/2.1/jobs/run-now")
            .map(Request::json)
            .collect()
    }
}

fn databricks_job(server: &Databricks, job: u64) -> Value {
    json!({"type": "databricks", "pollInterval": "1s", "maxRetries": 0,
           "triggerRetry": {"interval": "300ms", "maxAttempts": 3},
           "config": {"host": server.base, "jobId": job, "token": "${env:SLUICE_TEST_DATABRICKS_TOKEN}",
                      "jobParameters": {"date": "${DATE}"}}})
}

fn databricks_world(name: &str) -> World {
    let mut w = World::new(name);
    w.secret("SLUICE_TEST_DATABRICKS_TOKEN", DATABRICKS_TOKEN);
    w
}

#[test]
fn databricks_run_now_survives_throttling_and_is_polled_to_success_or_failure() {
    let server = databricks(&[(7, "SUCCESS"), (8, "FAILED")]);
    let limit = json!({"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "Too many requests. Please wait a moment and try again."});
    server
        .faults
        .lock()
        .unwrap()
        .push(("/api/2.1/jobs/run-now".into(), 429, limit.to_string()));
    let mut w = databricks_world("databricks");
    w.config(&pipeline("db-bad", databricks_job(&server, 8)));
    w.start_with(&pipeline("db-ok", databricks_job(&server, 7)));
    go(&w, "db-ok");
    let events = w.wait_for("db-ok", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    assert_eq!(
        kinds(&events),
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let run = run_id("db-ok", 1);
    let run_nows = server.run_nows();
    assert_eq!(run_nows.len(), 2, "429, then accepted: {run_nows:?}");
    for body in &run_nows {
        assert_eq!(
            *body,
            json!({"job_id": 7, "idempotency_token": run, "job_parameters": {"date": day()}})
        );
    }
    let handle = &events[2].detail["metadata"]["handle"];
    let run_number = handle["runId"].as_u64().unwrap();
    assert_eq!(events[3].detail["metadata"]["resultState"], "SUCCESS");
    assert_eq!(
        events[3].detail["metadata"]["runPageUrl"],
        format!("https://dbc.example/#job/7/run/{run_number}")
    );
    let gets: Vec<Request> = server
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.path == "/api/2.1/jobs/runs/get")
        .cloned()
        .collect();
    assert!(gets.len() >= 3, "PENDING, RUNNING, TERMINATED");
    assert!(gets.iter().all(|g| g.query == format!("run_id={run_number}")));

    go(&w, "db-bad");
    let events = w.wait_for("db-bad", "failure", |es| es.iter().any(|e| e.kind == RETRY_EXHAUSTED));
    let failed = events.iter().find(|e| e.kind == JOB_FAILED).unwrap();
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(message.contains("TERMINATED (FAILED): Task ingest failed"), "{message}");
    no_secret_in(&w, &[DATABRICKS_TOKEN]);
    w.stop();
}

/// The processor is killed while Databricks is answering run-now (the run has started, its
/// report not yet written). The restarted processor cannot know the call ended with the
/// process: it waits for the call's deadline (here 6 s tries, 4 of them, 300 + 600 + 1200 ms
/// of backoff, 10 s for a slot), then requests the trigger again with the same idempotency
/// token: Databricks returns the same run, and only one run ever starts.
#[test]
fn a_crash_between_trigger_and_report_starts_one_databricks_run() {
    let server = databricks(&[(7, "SUCCESS")]);
    *server.hold.lock().unwrap() = Duration::from_secs(4);
    let mut w = databricks_world("db-crash");
    let mut job = databricks_job(&server, 7);
    job["config"]["timeout"] = json!(6);
    w.config(&pipeline("crash", job));
    let child = w.spawn(w.state.path(), &["--instance", "only"]);
    w.swap_processor(Some(child));
    w.wait_for("crash", "config", |es| es.iter().any(|e| e.kind == CONFIG_ACCEPTED));
    go(&w, "crash");
    wait_until(
        "run-now to be received",
        Duration::from_secs(60),
        || w.log_tail(),
        || !server.run_nows().is_empty(),
    );
    let mut killed = w.swap_processor(None).unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    *server.hold.lock().unwrap() = Duration::ZERO;

    let restart = Instant::now();
    let child = w.spawn(w.state.path(), &["--instance", "only"]);
    w.swap_processor(Some(child));
    let events = w.wait_for("crash", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let run = run_id("crash", 1);
    let run_nows = server.run_nows();
    assert!(run_nows.len() >= 2, "requested again after the restart: {run_nows:?}");
    assert!(run_nows.iter().all(|b| b["idempotency_token"] == run.as_str()));
    assert_eq!(server.started.lock().unwrap().len(), 1, "one run started");
    assert_eq!(events.iter().filter(|e| e.kind == JOB_COMPLETED).count(), 1);
    assert!(restart.elapsed() < Duration::from_secs(120));
    assert!(
        w.log().contains("past its deadline"),
        "requested again only once the call's deadline passed: {}",
        w.log_tail()
    );
    w.stop();
}

// ---- configured headers ----------------------------------------------------------------

/// One call's parts for a client-level test: a run of `kind` with `config`, through a
/// client that may reach loopback.
struct Direct {
    request: sluice::core::lifecycle::TriggerRequest,
    client: sluice::runtime::jobs::Client,
}

impl Direct {
    fn new(kind: sluice::core::config::JobKind, config: Value) -> Self {
        use sluice::core::config::JobConfig;
        use sluice::runtime::jobs::{Client, Guard};
        let config = JobConfig::from_json(kind, &config).unwrap();
        Direct {
            request: sluice::core::lifecycle::TriggerRequest::new(
                "p",
                &crate::execution("stream", "2026-11-22"),
                1,
                config,
            ),
            client: Client::new(Guard::new(vec!["127.0.0.0/8".parse().unwrap()]), None).unwrap(),
        }
    }

    fn call(&self) -> sluice::runtime::jobs::Call<'_> {
        sluice::runtime::jobs::Call {
            request: &self.request,
            config: &self.request.config,
            client: &self.client,
            producer: None,
            redactor: sluice::runtime::jobs::Redactor::none(),
        }
    }
}

/// How many `Authorization` headers a request carried.
fn authorizations(r: &Request) -> usize {
    r.raw.to_ascii_lowercase().matches("\r\nauthorization:").count()
}

/// `headers` go on the trigger and on every status check (Interlock sent them on the
/// trigger only); an `Authorization` among them replaces `token` and username + password.
#[tokio::test]
async fn airflow_headers_go_on_the_trigger_and_the_status_checks() {
    use sluice::core::config::JobKind;
    use sluice::core::records::JobStatus;
    use sluice::runtime::jobs::airflow as client;
    let server = airflow(2, &[("etl", "success")]);
    // base64("sluice:airflow-pw-31337"), as the server expects; the token must not be sent.
    let basic = "Basic c2x1aWNlOmFpcmZsb3ctcHctMzEzMzc=";
    let job = Direct::new(
        JobKind::Airflow,
        json!({"url": server.base, "dagId": "etl", "token": "not-this-one",
               "headers": {"Authorization": basic, "X-Tenant": "data"}}),
    );
    let started = client::trigger(&job.call()).await.unwrap();
    assert_eq!(started.status, JobStatus::Running, "{started:?}");
    let handle = started.metadata.unwrap()["handle"].clone();
    let checked = client::status(&job.call(), &handle).await.unwrap();
    assert_eq!(checked.metadata.unwrap()["state"], "running");
    let triggers = server.requests("POST", "/api/v1/dags/etl/dagRuns");
    let checks = server.requests("GET", "/api/v1/dags/etl/dagRuns/p.stream.2026-11-22.1");
    assert_eq!((triggers.len(), checks.len()), (1, 1));
    for r in triggers.iter().chain(&checks) {
        assert_eq!(r.header("x-tenant"), Some("data"), "{}", r.raw);
        assert_eq!(r.header("authorization"), Some(basic), "{}", r.raw);
        assert_eq!(authorizations(r), 1, "{}", r.raw);
    }

    // Airflow 3: with an Authorization header, no username + password exchange.
    let server = airflow(3, &[("etl", "success")]);
    let job = Direct::new(
        JobKind::Airflow,
        json!({"url": server.base, "dagId": "etl", "version": 3,
               "username": DAG_USER, "password": DAG_PASSWORD,
               "headers": {"Authorization": format!("Bearer {JWT}")}}),
    );
    let started = client::trigger(&job.call()).await.unwrap();
    assert_eq!(started.status, JobStatus::Running, "{started:?}");
    assert!(server.requests("POST", "/auth/token").is_empty(), "no login");
}

/// Databricks: `headers` on run-now and on runs/get; with an `Authorization` among them,
/// no `token` is needed.
#[tokio::test]
async fn databricks_headers_go_on_run_now_and_runs_get_and_may_replace_the_token() {
    use sluice::core::config::JobKind;
    use sluice::core::records::JobStatus;
    use sluice::runtime::jobs::{databricks as client, CallError};
    let server = databricks(&[(7, "SUCCESS")]);
    let job = Direct::new(
        JobKind::Databricks,
        json!({"host": server.base, "jobId": 7,
               "headers": {"Authorization": format!("Bearer {DATABRICKS_TOKEN}"), "X-Databricks-Org-Id": "42"}}),
    );
    let started = client::trigger(&job.call()).await.unwrap();
    assert_eq!(started.status, JobStatus::Running, "{started:?}");
    let handle = started.metadata.unwrap()["handle"].clone();
    let checked = client::status(&job.call(), &handle).await.unwrap();
    assert_eq!(checked.metadata.unwrap()["lifeCycleState"], "PENDING");
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "run-now and runs/get");
    for r in &requests {
        assert_eq!(r.header("x-databricks-org-id"), Some("42"), "{}", r.raw);
        assert_eq!(authorizations(r), 1, "{}", r.raw);
    }
    // Neither a token nor an Authorization header: refused before any request.
    let job = Direct::new(
        JobKind::Databricks,
        json!({"host": server.base, "jobId": 7, "headers": {"X-Databricks-Org-Id": "42"}}),
    );
    match client::trigger(&job.call()).await {
        Err(CallError::Permanent(m)) => assert!(m.contains("job.config.token is missing"), "{m}"),
        other => panic!("expected PERMANENT, got {other:?}"),
    }
    assert_eq!(server.requests.lock().unwrap().len(), 2);
}
