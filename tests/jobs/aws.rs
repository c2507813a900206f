//! The AWS job types (`glue`, `emr`, `emr-serverless`, `step-function`, `lambda`) at the
//! client level, against moto's server mode: `aws::trigger` and `aws::status` called
//! directly, as the executor calls them.
//!
//! moto comes from `SLUICE_TEST_MOTO` (its URL), or is started once per test binary by
//! `deploy/moto.sh start`, which stops it again once this process has exited. The resources
//! the jobs need (a Glue job, an EMR cluster, an EMR Serverless application, state
//! machines, a Lambda function) are made through moto itself with plain HTTP calls; moto
//! routes a call by the service and region named in its `Authorization` header and checks
//! no signature, so those calls carry a placeholder one. moto is set up through its own API:
//! Glue runs go STARTING → RUNNING → SUCCEEDED one step per status check, state machines
//! really execute (Wait, Pass, Fail, timeouts), and Lambda answers without Docker (echoing
//! the payload). Every name carries this process's tag, so a shared moto can serve many runs.
//!
//! What moto cannot do, unit tests in the module cover with captured answers: EMR steps
//! never leave RUNNING in moto (no COMPLETED/FAILED), Glue runs never fail, and throttling
//! answers (Infra) are not produced on demand.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::Method;
use serde_json::{json, Value};
use sluice::core::config::{JobConfig, JobKind};
use sluice::core::lifecycle::TriggerRequest;
use sluice::core::records::{FailureCategory, JobStatus};
use sluice::runtime::jobs::{aws, Call, CallError, Client, Guard, Outcome, Redactor};

use crate::support;

/// moto's default account, which every ARN here names.
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";

// The AWS jobs read their credentials from the process environment, so the tests need
// fake ones there, and they must never be real ones (nothing here should sign with a
// developer's keys). Changing the environment is only sound while no other thread reads
// it, and a test binary runs tests on many threads (some resolving names through libc,
// which reads the environment behind Rust's back). So the variables are set before `main`,
// from the ELF `.init_array`, when the process has a single thread. The session token
// exercises the `x-amz-security-token` path.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static FAKE_CREDENTIALS: extern "C" fn() = {
    extern "C" fn set() {
        std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDSLUICETEST");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "sluice-test-secret");
        std::env::set_var("AWS_SESSION_TOKEN", "sluice-test-session");
    }
    set
};

/// moto's URL, configured for these tests; started on first use unless given.
fn moto() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        assert_eq!(
            std::env::var("AWS_ACCESS_KEY_ID").as_deref(),
            Ok("AKIDSLUICETEST"),
            "the fake credentials are set before main (Linux only)"
        );
        let url = match std::env::var("SLUICE_TEST_MOTO") {
            Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
            _ => start_moto(),
        };
        // moto's settings are process-wide; set them from a thread of our own with its own
        // runtime (this may run inside a test's runtime, which cannot block on another).
        let configured = url.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(configure(&configured))
        })
        .join()
        .expect("configuring moto");
        url
    })
}

fn start_moto() -> String {
    let dir = std::env::temp_dir().join(format!("sluice-moto-{}", std::process::id()));
    let out = std::process::Command::new(support::repo().join("deploy/moto.sh"))
        .arg("start")
        .env("SLUICE_MOTO_DIR", &dir)
        .env("SLUICE_MOTO_PARENT", std::process::id().to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("running deploy/moto.sh");
    assert!(out.status.success(), "deploy/moto.sh start failed");
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout.lines().last().expect("moto's URL").trim().to_string()
}

async fn configure(url: &str) {
    let settings = [
        ("/moto-api/config", json!({"lambda": {"use_docker": false}})),
        (
            "/moto-api/config",
            json!({"stepfunctions": {"execute_state_machine": true}}),
        ),
        (
            "/moto-api/state-manager/set-transition",
            json!({"model_name": "glue::job_run", "transition": {"progression": "manual", "times": 1}}),
        ),
    ];
    for (path, body) in settings {
        let (status, answer) = plain(Method::POST, &format!("{url}{path}"), &[], body.to_string()).await;
        assert!(status < 300, "moto {path}: {status} {answer}");
    }
}

/// A tag for this process's resource names: unique across runs on a shared moto.
fn unique(what: &str) -> String {
    static TAG: OnceLock<String> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let tag = TAG.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        format!("{}-{nanos:x}", std::process::id())
    });
    format!("{what}-{tag}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn client() -> Client {
    Client::new(Guard::new(vec!["127.0.0.0/8".parse().unwrap()]), None).unwrap()
}

/// A plain HTTP call (no signature) through a loopback-allowed client.
async fn plain(method: Method, url: &str, headers: &[(&str, String)], body: String) -> (u16, String) {
    let mut request = client().request(method, url, Duration::from_secs(30)).unwrap();
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.body(body).send().await.expect("moto answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The placeholder `Authorization` moto routes by.
fn routing(service: &str, region: &str) -> (&'static str, String) {
    (
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIDSLUICETEST/20260101/{region}/{service}/aws4_request, \
             SignedHeaders=host, Signature=0"
        ),
    )
}

/// A JSON-protocol call to moto, for setting things up; panics unless it succeeds.
async fn setup_json(service: &str, version: &str, target: &str, input: Value) -> Value {
    let headers = [
        routing(service, REGION),
        ("content-type", format!("application/x-amz-json-{version}")),
        ("x-amz-target", target.to_string()),
    ];
    let (status, body) = plain(Method::POST, &format!("{}/", moto()), &headers, input.to_string()).await;
    assert!(status < 300, "{target}: {status} {body}");
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

/// A REST-JSON call to moto, for setting things up; panics unless it succeeds.
async fn setup_rest(service: &str, region: &str, method: Method, path: &str, input: Option<Value>) -> Value {
    let mut headers = vec![routing(service, region)];
    if input.is_some() {
        headers.push(("content-type", "application/json".to_string()));
    }
    let body = input.map(|i| i.to_string()).unwrap_or_default();
    let (status, answer) = plain(method, &format!("{}{path}", moto()), &headers, body).await;
    assert!(status < 300, "{path}: {status} {answer}");
    serde_json::from_str(&answer).unwrap_or(Value::Null)
}

/// One job's call: run `{pipeline}.daily.2026-11-22.1` of a `kind` job with `config`
/// (pointed at moto), through a client that may reach loopback.
struct Job {
    request: TriggerRequest,
    client: Client,
}

impl Job {
    fn new(kind: JobKind, config: Value) -> Self {
        Job::on(kind, config, "2026-11-22")
    }

    /// The job's run for execution date `date` (`YYYY-MM-DD`, or `YYYY-MM-DDTHH` for an
    /// hourly run).
    fn on(kind: JobKind, mut config: Value, date: &str) -> Self {
        config["endpointUrl"] = json!(moto());
        if config.get("region").is_none() {
            config["region"] = json!(REGION);
        }
        config["timeout"] = json!(20);
        let config = JobConfig::from_json(kind, &config).unwrap();
        Job {
            request: TriggerRequest::new(&unique("p"), &crate::execution("daily", date), 1, config),
            client: client(),
        }
    }

    fn call(&self) -> Call<'_> {
        Call {
            request: &self.request,
            config: &self.request.config,
            client: &self.client,
            producer: None,
            redactor: Redactor::none(),
        }
    }

    async fn trigger(&self) -> Result<Outcome, CallError> {
        aws::trigger(&self.call()).await
    }

    async fn status(&self, handle: &Value) -> Result<Outcome, CallError> {
        aws::status(&self.call(), handle).await
    }

    /// Starts the run and expects it running: its handle.
    async fn started(&self) -> (Outcome, Value) {
        let outcome = self.trigger().await.expect("trigger");
        assert_eq!(outcome.status, JobStatus::Running, "{outcome:?}");
        let handle = outcome.metadata.as_ref().unwrap()["handle"].clone();
        (outcome, handle)
    }

    /// Status checks until the run ends (or 20 s pass): every outcome seen, in order.
    async fn settle(&self, handle: &Value) -> Vec<Outcome> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = vec![];
        loop {
            let outcome = self.status(handle).await.expect("status check");
            let running = outcome.status == JobStatus::Running;
            if running {
                assert_eq!(outcome.metadata.as_ref().unwrap()["handle"], *handle, "same handle");
            }
            seen.push(outcome);
            if !running || Instant::now() > deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn permanent(result: Result<Outcome, CallError>, expect: &str) -> String {
    match result {
        Err(CallError::Permanent(message)) => {
            assert!(message.contains(expect), "{message:?} should say {expect:?}");
            assert!(!message.contains("sluice-test-secret") && !message.contains("sluice-test-session"));
            message
        }
        other => panic!("expected a PERMANENT error saying {expect:?}, got {other:?}"),
    }
}

fn last(outcomes: &[Outcome]) -> &Outcome {
    outcomes.last().unwrap()
}

// ---- glue ----------------------------------------------------------------------------

async fn glue_job() -> String {
    let name = unique("glue");
    setup_json(
        "glue",
        "1.1",
        "AWSGlue.CreateJob",
        json!({
            "Name": name,
            "Role": format!("arn:aws:iam::{ACCOUNT}:role/glue"),
            "Command": {"Name": "glueetl", "ScriptLocation": "s3://scripts/load.py"},
            "ExecutionProperty": {"MaxConcurrentRuns": 1}
        }),
    )
    .await;
    name
}

#[tokio::test]
async fn glue_run_is_started_then_checked_until_it_succeeds() {
    let name = glue_job().await;
    let job = Job::new(
        JobKind::Glue,
        json!({"jobName": name, "arguments": {"--day": "2026-11-22"}, "workerType": "G.1X",
               "numberOfWorkers": 2, "jobTimeoutMinutes": 30}),
    );
    let (started, handle) = job.started().await;
    assert_eq!(handle["jobName"], json!(name));
    let run_id = handle["jobRunId"].as_str().unwrap();
    assert!(run_id.starts_with("jr_"), "{handle}");
    assert_eq!(started.metadata.unwrap()["jobRunId"], json!(run_id));
    let seen = job.settle(&handle).await;
    assert_eq!(seen[0].metadata.as_ref().unwrap()["state"], "RUNNING", "{seen:?}");
    let done = last(&seen);
    assert_eq!(done.status, JobStatus::Succeeded, "{seen:?}");
    assert_eq!(
        done.message.as_deref(),
        Some(format!("Glue job run {run_id} SUCCEEDED").as_str())
    );
}

/// Writes `lines` to `stream` of a Glue run's log group (moto names every run's group
/// `test/log`), as Glue writes a run's driver output and its RCA insights.
async fn glue_logs(stream: &str, lines: &[&str]) {
    let group = "test/log";
    let headers = |target: &str| {
        [
            routing("logs", REGION),
            ("content-type", "application/x-amz-json-1.1".to_string()),
            ("x-amz-target", format!("Logs_20140328.{target}")),
        ]
    };
    // The group is shared by every run, and may exist already.
    let input = json!({"logGroupName": group}).to_string();
    let (status, body) = plain(Method::POST, &format!("{}/", moto()), &headers("CreateLogGroup"), input).await;
    assert!(
        status < 300 || body.contains("ResourceAlreadyExists"),
        "{status} {body}"
    );
    let input = json!({"logGroupName": group, "logStreamName": stream}).to_string();
    let (status, body) = plain(
        Method::POST,
        &format!("{}/", moto()),
        &headers("CreateLogStream"),
        input,
    )
    .await;
    assert!(status < 300, "{status} {body}");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let events: Vec<Value> = (lines.iter().enumerate())
        .map(|(i, line)| json!({"timestamp": now + i as u64, "message": line}))
        .collect();
    let input = json!({"logGroupName": group, "logStreamName": stream, "logEvents": events}).to_string();
    let (status, body) = plain(Method::POST, &format!("{}/", moto()), &headers("PutLogEvents"), input).await;
    assert!(status < 300, "{status} {body}");
}

/// Glue reports SUCCEEDED when a Spark driver exits 0 after a failure. As Interlock did, a
/// SUCCEEDED run whose logs hold an RCA insight or an ERROR line is a failed (TRANSIENT) run
/// quoting the evidence, never a success passed on to dependents. (moto cannot filter by
/// Interlock's `?" ERROR " ?" FATAL "` pattern: it returns any line, so only the evidence
/// side of the driver check is shown here; a run without logs stays SUCCEEDED above.)
#[tokio::test]
async fn glue_succeeded_with_a_failure_in_its_logs_is_a_failed_run() {
    let settled = |stream: &'static str, lines: &'static [&'static str]| async move {
        let name = glue_job().await;
        let job = Job::new(JobKind::Glue, json!({"jobName": name}));
        let (_, handle) = job.started().await;
        let run_id = handle["jobRunId"].as_str().unwrap().to_string();
        glue_logs(&stream.replace("RUN", &run_id), lines).await;
        let seen = job.settle(&handle).await;
        assert_eq!(seen[0].metadata.as_ref().unwrap()["state"], "RUNNING", "{seen:?}");
        last(&seen).clone()
    };
    let rca = settled(
        "RUN-job-insights-rca-driver",
        &[
            r#"{"Event":"GlueJobStart"}"#,
            r#"{"Event":"GlueExceptionAnalysisJobFailed","Failure Reason":"No space left on device","Stack Trace":[]}"#,
        ],
    )
    .await;
    assert_eq!(rca.status, JobStatus::Failed, "{rca:?}");
    assert_eq!(rca.category, Some(FailureCategory::Transient));
    let message = rca.message.unwrap();
    assert!(
        message.contains("SUCCEEDED, but its logs say it failed (RCA: No space left on device)"),
        "{message}"
    );
    let driver = settled(
        "RUN",
        &["26/11/26 02:00:01 ERROR Executor: Task 3 failed: SparkException"],
    )
    .await;
    assert_eq!(driver.status, JobStatus::Failed, "{driver:?}");
    let message = driver.message.unwrap();
    assert!(
        message.contains("(driver log: 26/11/26 02:00:01 ERROR Executor"),
        "{message}"
    );
    // Logs elsewhere (another run's) are no evidence against this one.
    let clean = settled("RUN-other", &["26/11/26 02:00:01 ERROR Executor: not this run"]).await;
    assert_eq!(clean.status, JobStatus::Succeeded, "{clean:?}");
}

/// Interlock's date arguments (internal/lambda/orchestrator/trigger.go:113-135): the exact
/// `Arguments` each job run got, as GetJobRun reports them.
#[tokio::test]
async fn glue_runs_get_par_day_and_par_hour_unless_the_config_sets_them() {
    let arguments_of = |name: String, handle: Value| async move {
        let run = setup_json(
            "glue",
            "1.1",
            "AWSGlue.GetJobRun",
            json!({"JobName": name, "RunId": handle["jobRunId"]}),
        )
        .await;
        run["JobRun"]["Arguments"].clone()
    };
    // Daily: --par_day only, next to the configured arguments.
    let name = glue_job().await;
    let job = Job::new(
        JobKind::Glue,
        json!({"jobName": name, "arguments": {"--day": "2026-11-22", "--rows": 3}}),
    );
    let (_, handle) = job.started().await;
    assert_eq!(
        arguments_of(name, handle).await,
        json!({"--day": "2026-11-22", "--rows": "3", "--par_day": "20261122"})
    );
    // Hourly, no arguments configured: both.
    let name = glue_job().await;
    let job = Job::on(JobKind::Glue, json!({"jobName": name}), "2026-03-03T10");
    let (_, handle) = job.started().await;
    assert_eq!(
        arguments_of(name, handle).await,
        json!({"--par_day": "20260303", "--par_hour": "10"})
    );
    // Hourly with a --par_day of the config's own: left as it is, --par_hour added.
    let name = glue_job().await;
    let job = Job::on(
        JobKind::Glue,
        json!({"jobName": name, "arguments": {"--par_day": "19990101"}}),
        "2026-03-03T10",
    );
    let (_, handle) = job.started().await;
    assert_eq!(
        arguments_of(name, handle).await,
        json!({"--par_day": "19990101", "--par_hour": "10"})
    );
}

#[tokio::test]
async fn glue_start_over_the_concurrency_limit_is_infra() {
    let name = glue_job().await;
    let job = Job::new(JobKind::Glue, json!({"jobName": name}));
    job.started().await;
    match job.trigger().await {
        Err(CallError::Infra(message)) => {
            assert!(message.contains("ConcurrentRunsExceededException"), "{message}");
            assert!(message.starts_with("Glue StartJobRun answered 400"), "{message}");
        }
        other => panic!("expected INFRA, got {other:?}"),
    }
}

#[tokio::test]
async fn glue_unknown_job_or_run_is_permanent() {
    let job = Job::new(JobKind::Glue, json!({"jobName": unique("missing")}));
    permanent(job.trigger().await, "EntityNotFoundException");
    let name = glue_job().await;
    let job = Job::new(JobKind::Glue, json!({"jobName": name}));
    let handle = json!({"jobName": name, "jobRunId": "jr_nope"});
    permanent(job.status(&handle).await, "Glue GetJobRun answered 400");
    // A job name is a setting a Glue job cannot do without: no settings without it.
    let missing = JobConfig::from_json(JobKind::Glue, &json!({})).unwrap_err();
    assert_eq!(missing.to_string(), "job.config.jobName is missing");
}

// ---- emr -----------------------------------------------------------------------------

async fn emr_cluster() -> String {
    let answer = setup_json(
        "elasticmapreduce",
        "1.1",
        "ElasticMapReduce.RunJobFlow",
        json!({
            "Name": unique("cluster"),
            "ReleaseLabel": "emr-6.10.0",
            "Instances": {"MasterInstanceType": "m5.xlarge", "SlaveInstanceType": "m5.xlarge",
                          "InstanceCount": 1, "KeepJobFlowAliveWhenNoSteps": true},
            "JobFlowRole": "EMR_EC2_DefaultRole",
            "ServiceRole": "EMR_DefaultRole"
        }),
    )
    .await;
    answer["JobFlowId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn emr_step_is_added_once_and_reported_running() {
    let cluster = emr_cluster().await;
    let job = Job::new(
        JobKind::Emr,
        json!({"clusterId": cluster, "step": {"args": ["spark-submit", "s3://b/load.py"]}}),
    );
    let (started, handle) = job.started().await;
    let step_id = handle["stepId"].as_str().unwrap().to_string();
    assert_eq!(handle, json!({"clusterId": cluster, "stepId": step_id}));
    assert_eq!(started.metadata.unwrap().get("adopted"), None);
    // moto's steps stay RUNNING: terminal states are covered by the module's unit tests.
    let checked = job.status(&handle).await.unwrap();
    assert_eq!(checked.status, JobStatus::Running);
    assert_eq!(checked.metadata.unwrap()["state"], "RUNNING");
    // The same trigger again (a crash, a lost answer) adopts the step named after the run.
    let again = job.trigger().await.unwrap();
    let meta = again.metadata.unwrap();
    assert_eq!(meta["handle"], handle);
    assert_eq!(meta["adopted"], json!(true));
    let steps = setup_json(
        "elasticmapreduce",
        "1.1",
        "ElasticMapReduce.ListSteps",
        json!({"ClusterId": cluster}),
    )
    .await;
    assert_eq!(steps["Steps"].as_array().unwrap().len(), 1, "{steps}");
}

#[tokio::test]
async fn emr_unknown_step_and_bad_steps_are_permanent() {
    let cluster = emr_cluster().await;
    let job = Job::new(JobKind::Emr, json!({"clusterId": cluster, "step": {"args": ["true"]}}));
    let handle = json!({"clusterId": cluster, "stepId": "s-NOPE"});
    permanent(job.status(&handle).await, "knows no step s-NOPE");
    let job = Job::new(
        JobKind::Emr,
        json!({"clusterId": cluster, "step": {"jar": "command-runner.jar"}}),
    );
    permanent(job.trigger().await, "job.config.step.args is required");
}

// ---- emr-serverless ------------------------------------------------------------------

async fn emr_application() -> String {
    let answer = setup_rest(
        "emr-serverless",
        REGION,
        Method::POST,
        "/applications",
        Some(
            json!({"name": unique("app"), "releaseLabel": "emr-6.10.0", "type": "SPARK",
                    "clientToken": unique("token")}),
        ),
    )
    .await;
    answer["applicationId"].as_str().unwrap().to_string()
}

fn serverless_config(application: &str) -> Value {
    json!({
        "applicationId": application,
        "executionRoleArn": format!("arn:aws:iam::{ACCOUNT}:role/emr-serverless"),
        "jobDriver": {"sparkSubmit": {"entryPoint": "s3://b/load.py", "entryPointArguments": ["2026-11-22"]}},
        "configurationOverrides": {"monitoringConfiguration": {}},
        "jobTimeoutMinutes": 60
    })
}

#[tokio::test]
async fn emr_serverless_run_is_started_then_succeeds() {
    let application = emr_application().await;
    let job = Job::new(JobKind::EmrServerless, serverless_config(&application));
    let (started, handle) = job.started().await;
    let run_id = handle["jobRunId"].as_str().unwrap().to_string();
    assert_eq!(handle, json!({"applicationId": application, "jobRunId": run_id}));
    assert!(started.metadata.unwrap()["arn"].as_str().unwrap().ends_with(&run_id));
    // moto's job runs are SUCCESS from the start.
    let seen = job.settle(&handle).await;
    let done = last(&seen);
    assert_eq!(done.status, JobStatus::Succeeded, "{seen:?}");
    assert_eq!(
        done.message.as_deref(),
        Some(format!("EMR Serverless job run {run_id} SUCCESS").as_str())
    );
}

/// A cancelled job run fails TRANSIENT, as Interlock categorised it (a retry may pass).
#[tokio::test]
async fn emr_serverless_cancelled_run_fails_transient_as_in_interlock() {
    let application = emr_application().await;
    let job = Job::new(JobKind::EmrServerless, serverless_config(&application));
    let (_, handle) = job.started().await;
    let run_id = handle["jobRunId"].as_str().unwrap();
    let path = format!("/applications/{application}/jobruns/{run_id}");
    setup_rest("emr-serverless", REGION, Method::DELETE, &path, None).await;
    let outcome = job.status(&handle).await.unwrap();
    assert_eq!(outcome.status, JobStatus::Failed, "{outcome:?}");
    assert_eq!(outcome.category, None, "TRANSIENT");
    assert_eq!(outcome.metadata.unwrap()["state"], "CANCELLED");
}

#[tokio::test]
async fn emr_serverless_unknown_application_or_foreign_role_is_permanent() {
    let job = Job::new(JobKind::EmrServerless, serverless_config("00nope"));
    let message = permanent(job.trigger().await, "ResourceNotFoundException");
    assert!(
        message.starts_with("EMR Serverless StartJobRun answered 400"),
        "{message}"
    );
    let application = emr_application().await;
    let mut config = serverless_config(&application);
    config["executionRoleArn"] = json!("arn:aws:iam::999999999999:role/elsewhere");
    let job = Job::new(JobKind::EmrServerless, config);
    permanent(job.trigger().await, "AccessDeniedException");
}

// ---- step-function -------------------------------------------------------------------

async fn state_machine(definition: Value) -> String {
    let answer = setup_json(
        "states",
        "1.0",
        "AWSStepFunctions.CreateStateMachine",
        json!({
            "name": unique("machine"),
            "definition": definition.to_string(),
            "roleArn": format!("arn:aws:iam::{ACCOUNT}:role/sfn")
        }),
    )
    .await;
    answer["stateMachineArn"].as_str().unwrap().to_string()
}

fn wait_then_pass(seconds: u64) -> Value {
    json!({"StartAt": "Wait", "States": {
        "Wait": {"Type": "Wait", "Seconds": seconds, "Next": "Done"},
        "Done": {"Type": "Pass", "End": true}}})
}

#[tokio::test]
async fn step_function_execution_succeeds_with_its_output() {
    let machine = state_machine(wait_then_pass(1)).await;
    let job = Job::new(
        JobKind::StepFunction,
        json!({"stateMachineArn": machine, "input": {"day": "2026-11-22"}}),
    );
    let (started, handle) = job.started().await;
    let meta = started.metadata.unwrap();
    let name = meta["executionName"].as_str().unwrap();
    assert!(name.starts_with(&job.request.run_id.replace('.', "_")), "{name}");
    let arn = handle["executionArn"].as_str().unwrap();
    assert_eq!(
        arn,
        format!("{}:{name}", machine.replace(":stateMachine:", ":execution:"))
    );
    let seen = job.settle(&handle).await;
    assert_eq!(seen[0].status, JobStatus::Running, "{seen:?}");
    let done = last(&seen);
    assert_eq!(done.status, JobStatus::Succeeded, "{seen:?}");
    let message = done.message.as_deref().unwrap();
    assert!(message.starts_with(&format!("execution {name} SUCCEEDED")), "{message}");
    assert!(message.contains("2026-11-22"), "the output: {message}");
}

#[tokio::test]
async fn step_function_trigger_requested_again_adopts_the_execution() {
    let machine = state_machine(wait_then_pass(1)).await;
    let job = Job::new(JobKind::StepFunction, json!({"stateMachineArn": machine}));
    let (_, handle) = job.started().await;
    // While it runs, Step Functions answers a start with the same name and input with the
    // same execution (as moto does).
    let (_, same) = job.started().await;
    assert_eq!(same, handle);
    // Once it has ended, with ExecutionAlreadyExists: the execution is adopted, and the next
    // status check reports how it ended.
    assert_eq!(last(&job.settle(&handle).await).status, JobStatus::Succeeded);
    let (again, after) = job.started().await;
    assert_eq!(after, handle);
    assert_eq!(again.metadata.unwrap()["adopted"], json!(true));
    assert_eq!(job.status(&after).await.unwrap().status, JobStatus::Succeeded);
}

#[tokio::test]
async fn step_function_fail_state_fails_with_error_and_cause() {
    let machine = state_machine(json!({"StartAt": "Boom", "States": {
        "Boom": {"Type": "Fail", "Error": "LoadFailed", "Cause": "table x is missing"}}}))
    .await;
    let job = Job::new(
        JobKind::StepFunction,
        json!({"stateMachineArn": machine, "input": "{\"a\": 1}"}),
    );
    let (_, handle) = job.started().await;
    let done = last(&job.settle(&handle).await).clone();
    assert_eq!(done.status, JobStatus::Failed, "{done:?}");
    assert_eq!(done.category, None);
    assert!(
        done.message
            .as_deref()
            .unwrap()
            .ends_with("FAILED: LoadFailed: table x is missing"),
        "{done:?}"
    );
}

#[tokio::test]
async fn step_function_execution_past_its_timeout_is_timed_out() {
    let mut definition = wait_then_pass(5);
    definition["TimeoutSeconds"] = json!(1);
    let machine = state_machine(definition).await;
    let job = Job::new(JobKind::StepFunction, json!({"stateMachineArn": machine}));
    let (_, handle) = job.started().await;
    let done = last(&job.settle(&handle).await).clone();
    assert_eq!(done.status, JobStatus::Timeout, "{done:?}");
    assert_eq!(done.category, Some(FailureCategory::Timeout));
}

/// A stopped (ABORTED) execution fails TRANSIENT, as Interlock categorised it.
#[tokio::test]
async fn step_function_stopped_execution_fails_transient_as_in_interlock() {
    let machine = state_machine(wait_then_pass(60)).await;
    let job = Job::new(JobKind::StepFunction, json!({"stateMachineArn": machine}));
    let (_, handle) = job.started().await;
    setup_json(
        "states",
        "1.0",
        "AWSStepFunctions.StopExecution",
        json!({"executionArn": handle["executionArn"], "error": "Operator", "cause": "stopped by hand"}),
    )
    .await;
    // The stop reaches the execution's worker thread asynchronously (as on AWS, where
    // DescribeExecution is eventually consistent): a check or two may still see it running.
    let outcome = last(&job.settle(&handle).await).clone();
    assert_eq!(outcome.status, JobStatus::Failed, "{outcome:?}");
    assert_eq!(outcome.category, None, "TRANSIENT");
    assert_eq!(outcome.metadata.unwrap()["state"], "ABORTED");
}

#[tokio::test]
async fn step_function_unknown_state_machine_is_permanent() {
    let machine = format!("arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{}", unique("missing"));
    let job = Job::new(JobKind::StepFunction, json!({"stateMachineArn": machine}));
    let message = permanent(job.trigger().await, "StateMachineDoesNotExist");
    assert!(
        message.starts_with("Step Functions StartExecution answered 400"),
        "{message}"
    );
}

// ---- lambda --------------------------------------------------------------------------

/// A deployment package: `f.py` holding `def h(event, context): return event`.
const ZIP: &str = "UEsDBBQAAAAAAAAAIVzPMRGLKAAAACgAAAAEAAAAZi5weWRlZiBoKGV2ZW50LCBjb250ZXh0KToKICAgIHJldHVybiBldmVudApQSwECFAMUAAAAAAAAACFczzERiygAAAAoAAAABAAAAAAAAAAAAAAAgAEAAAAAZi5weVBLBQYAAAAAAQABADIAAABKAAAAAAA=";

/// An IAM role Lambda may assume, and a function in `region` running as it.
async fn lambda_function(region: &str) -> String {
    let role = unique("lambda-role");
    let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
    let form: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "CreateRole")
        .append_pair("Version", "2010-05-08")
        .append_pair("RoleName", &role)
        .append_pair("AssumeRolePolicyDocument", &trust.to_string())
        .finish();
    let headers = [
        routing("iam", REGION),
        ("content-type", "application/x-www-form-urlencoded".to_string()),
    ];
    let (status, body) = plain(Method::POST, &format!("{}/", moto()), &headers, form).await;
    assert!(status < 300, "CreateRole: {status} {body}");
    let name = unique("fn");
    setup_rest(
        "lambda",
        region,
        Method::POST,
        "/2015-03-31/functions",
        Some(json!({"FunctionName": name, "Runtime": "python3.11", "Handler": "f.h",
                    "Role": format!("arn:aws:iam::{ACCOUNT}:role/{role}"), "Code": {"ZipFile": ZIP}})),
    )
    .await;
    name
}

#[tokio::test]
async fn lambda_request_response_succeeds_with_the_payload() {
    let function = lambda_function(REGION).await;
    let job = Job::new(JobKind::Lambda, json!({"functionName": function}));
    let outcome = job.trigger().await.unwrap();
    assert_eq!(outcome.status, JobStatus::Succeeded, "{outcome:?}");
    // moto's Lambda echoes the payload: by default, the run's identity.
    let message = outcome.message.unwrap();
    assert!(message.starts_with("Lambda answered 200: {"), "{message}");
    assert!(
        message.contains(&format!("\"runId\":\"{}\"", job.request.run_id)),
        "{message}"
    );
    assert_eq!(outcome.metadata.unwrap()["httpStatus"], 200);
    // Named by ARN (percent-encoded in the path), with an explicit payload.
    let arn = format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}");
    let job = Job::new(JobKind::Lambda, json!({"functionName": arn, "payload": {"table": "x"}}));
    let outcome = job.trigger().await.unwrap();
    assert_eq!(
        outcome.message.as_deref(),
        Some("Lambda answered 200: {\"table\":\"x\"}")
    );
    permanent(job.status(&json!({})).await, "lambda runs have no status check");
}

/// A string payload reaches the function as its own bytes (Interlock,
/// internal/trigger/lambda.go:30-32), not JSON-encoded into a JSON string. moto's
/// Docker-less Lambda answers with the exact bytes it was invoked with.
#[tokio::test]
async fn lambda_string_payload_is_sent_as_its_raw_bytes() {
    let function = lambda_function(REGION).await;
    let answer = |payload: Value| {
        let function = function.clone();
        async move {
            let job = Job::new(JobKind::Lambda, json!({"functionName": function, "payload": payload}));
            let outcome = job.trigger().await.unwrap();
            assert_eq!(outcome.status, JobStatus::Succeeded, "{outcome:?}");
            outcome.message.unwrap()
        }
    };
    // A YAML string holding JSON, as Interlock pipelines write it: spacing and key order kept.
    let raw = r#"{"body": {"pipeline": "x", "day": "20261122"},  "a": [1, 2]}"#;
    assert_eq!(answer(json!(raw)).await, format!("Lambda answered 200: {raw}"));
    // Not JSON at all: still the bytes as written, no quotes added.
    assert_eq!(
        answer(json!("day=20261122 é")).await,
        "Lambda answered 200: day=20261122 é"
    );
    // Other JSON values stay JSON-encoded.
    assert_eq!(
        answer(json!([1, {"b": "c"}])).await,
        r#"Lambda answered 200: [1,{"b":"c"}]"#
    );
}

#[tokio::test]
async fn lambda_event_invocation_succeeds_asynchronously() {
    let function = lambda_function(REGION).await;
    let job = Job::new(
        JobKind::Lambda,
        json!({"functionName": function, "invocationType": "Event"}),
    );
    let outcome = job.trigger().await.unwrap();
    assert_eq!(outcome.status, JobStatus::Succeeded, "{outcome:?}");
    assert_eq!(
        outcome.message.as_deref(),
        Some("invoked asynchronously (Lambda answered 202)")
    );
    let job = Job::new(
        JobKind::Lambda,
        json!({"functionName": function, "invocationType": "DryRun"}),
    );
    permanent(job.trigger().await, "invocationType must be RequestResponse or Event");
}

#[tokio::test]
async fn lambda_function_error_fails_the_run() {
    // moto's Docker-less Lambda flags a function error only for an answer over Lambda's
    // 6 MB limit: queue one (in a region of this test's own, the queue is per region).
    let region = "eu-west-3";
    let function = lambda_function(region).await;
    let oversized = "x".repeat(6_000_001);
    let (status, body) = plain(
        Method::POST,
        &format!("{}/moto-api/static/lambda-simple/response", moto()),
        &[],
        json!({"account_id": ACCOUNT, "region": region, "results": [oversized]}).to_string(),
    )
    .await;
    assert!(status < 300, "{status} {body}");
    let job = Job::new(JobKind::Lambda, json!({"functionName": function, "region": region}));
    let outcome = job.trigger().await.unwrap();
    assert_eq!(outcome.status, JobStatus::Failed, "{outcome:?}");
    assert_eq!(outcome.category, None);
    assert_eq!(
        outcome.message.as_deref(),
        Some(
            "function error (Unhandled): Function.ResponseSizeTooLarge: Response payload size exceeded maximum \
             allowed payload size (6291556 bytes)."
        )
    );
}

// ---- all -----------------------------------------------------------------------------

#[tokio::test]
async fn a_loopback_endpoint_needs_the_guard_to_allow_it() {
    let job = Job::new(JobKind::Glue, json!({"jobName": "x"}));
    let guarded = Client::new(Guard::default(), None).unwrap();
    let call = Call {
        request: &job.request,
        config: &job.request.config,
        client: &guarded,
        producer: None,
        redactor: Redactor::none(),
    };
    permanent(aws::trigger(&call).await, "loopback");
}

#[test]
fn targets_name_the_aws_resource() {
    let config = json!({"region": "eu-west-1", "jobName": "nightly"});
    assert_eq!(
        sluice::runtime::jobs::target(&JobConfig::from_json(JobKind::Glue, &config).unwrap()),
        "glue:eu-west-1:nightly"
    );
}

// ---- end to end: the processor on the broker, polling moto ---------------------------

/// A `step-function` job through the real processor: the trigger starts an execution named
/// after the run, status checks (timers in state, every second here) follow it, and the
/// run completes; a failing state machine ends the run with JOB_FAILED and RETRY_EXHAUSTED.
#[test]
fn step_function_runs_end_to_end_through_the_processor() {
    use sluice::core::events::EventType::*;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let passing = rt.block_on(state_machine(wait_then_pass(2)));
    let failing = rt.block_on(state_machine(json!({"StartAt": "Boom", "States": {
        "Boom": {"Type": "Fail", "Error": "DataMissing", "Cause": "no rows for the day"}}})));
    let job = |machine: &str| {
        json!({"type": "step-function", "pollInterval": "1s", "maxRetries": 0,
               "config": {"stateMachineArn": machine, "endpointUrl": moto(), "region": REGION,
                          "input": {"date": "${DATE}", "run": "${RUN_ID}"}}})
    };
    let mut w = support::World::new("sfn");
    w.config(&support::pipeline("sfn-bad", job(&failing)));
    w.start_with(&support::pipeline("sfn-ok", job(&passing)));
    for id in ["sfn-ok", "sfn-bad"] {
        w.sensor(id, "row-count", json!({"count": 5000}));
        w.sensor(id, "upstream", json!({"status": "ready"}));
    }
    let events = w.wait_for("sfn-ok", "completion", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED]
    );
    let handle = &events[2].detail["metadata"]["handle"];
    assert!(
        handle["executionArn"].as_str().unwrap().contains(":execution:"),
        "the handle names the execution: {handle}"
    );
    assert!(events[3].message.contains("SUCCEEDED"), "{}", events[3].message);
    assert!(
        events[3].message.contains(support::day()),
        "the input was rendered: {}",
        events[3].message
    );

    let events = w.wait_for("sfn-bad", "failure", |es| es.iter().any(|e| e.kind == RETRY_EXHAUSTED));
    let failed = events.iter().find(|e| e.kind == JOB_FAILED).expect("JOB_FAILED");
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(
        message.contains("DataMissing") && message.contains("no rows for the day"),
        "{message}"
    );
    for e in w.events_seen() {
        let text = serde_json::to_string(e).unwrap();
        assert!(
            !text.contains("sluice-test-secret") && !text.contains("sluice-test-session"),
            "{text}"
        );
    }
    w.stop();
}

/// A synchronous Lambda that runs longer than the usual 30-second try (45 s here, with no
/// `timeout` in its config and no trigger retries): its call's deadline covers what Lambda
/// allows a function (15 minutes), so the call is not cut while the function runs, the run
/// completes with the function's answer, and the function is invoked once. Before, the
/// deadline (30 s a try, plus 10 s) cut it: INFRA_FAILURE while it still ran, and the next
/// trigger sensor invoked it again. Lambda's Invoke is served on loopback (moto's answers at
/// once, whatever the function).
#[test]
fn a_synchronous_lambda_longer_than_a_try_is_not_cut_while_it_runs() {
    use sluice::core::events::EventType::*;
    let invoked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = invoked.clone();
    let lambda = support::serve(move |request| {
        if request.method != "POST" || request.path != "/2015-03-31/functions/slow-report/invocations" {
            return (404, r#"{"Type": "User", "Message": "not found"}"#.into());
        }
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_secs(45));
        (200, r#"{"rows": 1234}"#.into())
    });
    let job = json!({"type": "lambda", "maxRetries": 0,
        "triggerRetry": {"interval": "200ms", "backoffRate": 2, "maxAttempts": 0},
        "config": {"functionName": "slow-report", "endpointUrl": lambda, "region": REGION}});
    let mut w = support::World::new("lambda-long");
    w.start_with(&support::pipeline("slow", job));
    w.sensor("slow", "row-count", json!({"count": 5000}));
    w.sensor("slow", "upstream", json!({"status": "ready"}));
    let events = w.wait_for_until(
        "slow",
        "the function's answer",
        std::time::Instant::now() + std::time::Duration::from_secs(120),
        |es| {
            es.iter()
                .any(|e| matches!(e.kind, JOB_COMPLETED | INFRA_FAILURE | JOB_FAILED))
        },
    );
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
        "{:?}",
        events.last().map(|e| &e.message)
    );
    assert!(events[3].message.contains("1234"), "{}", events[3].message);
    assert_eq!(invoked.load(std::sync::atomic::Ordering::SeqCst), 1);
    w.stop();
}
