use serde_json::{json, Value};

use super::*;
use crate::core::config::{parse, Parsed, Variables};
use crate::core::template::render_value;

/// A pipeline whose job is a `kind` job with `config`, read as the processor reads it.
fn read(kind: &str, config: Value) -> Parsed {
    let pipeline = json!({
        "pipeline": {"id": "p1", "owner": "me"},
        "schedule": {"trigger": {"key": "k", "check": "exists"}},
        "job": {"type": kind, "config": config}
    });
    parse(&pipeline, Variables::MustBeResolved).unwrap_or_else(|e| panic!("{e}"))
}

fn settings(kind: &str, config: Value) -> JobSettings {
    read(kind, config).config.job.config.settings().clone()
}

#[test]
fn each_job_type_reads_its_settings_typed() {
    let JobSettings::Http(http) = settings(
        "http",
        json!({"url": "https://x.example/run", "method": "put", "headers": {"X-Team": "data"},
               "statusUrl": "https://x.example/${RUN_ID}", "awaitReport": true}),
    ) else {
        panic!("http")
    };
    assert_eq!(http.method, Ok(HttpMethod::Put));
    assert_eq!(http.headers, Ok(Headers::from([("X-Team".into(), "data".into())])));
    assert_eq!(http.status_url.as_deref(), Some("https://x.example/${RUN_ID}"));
    assert!(http.await_report);
    assert_eq!(http.body, None);

    // Written as Interlock wrote it: other spellings, a JSON text for the conf.
    let JobSettings::Airflow(airflow) = settings(
        "airflow",
        json!({"URL": "https://airflow.example", "dagID": "daily", "body": "{\"a\": 1}", "version": "3"}),
    ) else {
        panic!("airflow")
    };
    assert_eq!(
        (airflow.url.as_str(), airflow.dag_id.as_str()),
        ("https://airflow.example", "daily")
    );
    assert_eq!(
        (airflow.version, airflow.conf),
        (AirflowVersion::V3, Some(json!({"a": 1})))
    );

    let JobSettings::Emr(emr) = settings(
        "emr",
        json!({"clusterId": "j-1", "stepName": "agg", "command": "s3://jars/agg.jar", "arguments": {"--day": "${DATE}"}}),
    ) else {
        panic!("emr")
    };
    let step = emr.step.unwrap();
    assert_eq!(
        (step.name.as_deref(), step.jar.as_deref()),
        (Some("agg"), Some("s3://jars/agg.jar"))
    );
    assert_eq!(step.args, ["--day=${DATE}"]);

    let JobSettings::Lambda(lambda) = settings(
        "lambda",
        json!({"functionName": "f", "invocationType": "Event", "payload": null}),
    ) else {
        panic!("lambda")
    };
    assert_eq!(lambda.invocation_type, Ok(InvocationType::Event));
    assert_eq!(lambda.payload, Some(Value::Null), "a null payload is sent as null");
    assert_eq!(lambda.aws.region, Ok(None));
}

#[test]
fn what_a_job_cannot_do_without_is_there_or_there_are_no_settings() {
    for (kind, message) in [
        (JobKind::Http, "job.config.url is missing"),
        (JobKind::Command, "job.config.command is missing"),
        (JobKind::Airflow, "job.config.url is missing"),
        (
            JobKind::Databricks,
            "job.config.jobId must be a Databricks job id (a number)",
        ),
        (JobKind::Glue, "job.config.jobName is missing"),
        (JobKind::Emr, "job.config.clusterId is missing"),
        (JobKind::EmrServerless, "job.config.applicationId is missing"),
        (JobKind::StepFunction, "job.config.stateMachineArn is missing"),
        (JobKind::Lambda, "job.config.functionName is missing"),
        (JobKind::Kafka, "job.config.topic is missing"),
    ] {
        let missing = JobConfig::from_json(kind, &json!({})).unwrap_err();
        assert_eq!(missing.message, message, "{}", kind.name());
    }
    let step = JobConfig::from_json(JobKind::Emr, &json!({"clusterId": "j-1", "step": "spark-submit x"}));
    assert_eq!(step.unwrap_err().message, "job.config.step must be an object");
    let list = JobConfig::from_json(JobKind::Command, &json!(["true"]));
    assert_eq!(list.unwrap_err().message, "job config is not a mapping");
}

/// Settings of the wrong type that configs were accepted with before job configs were
/// typed: the config still loads (stored ones must), its author is warned, and the trigger
/// is refused with the message it always was.
#[test]
fn settings_no_trigger_can_use_load_with_a_warning() {
    let parsed = read(
        "glue",
        json!({"jobName": "j", "numberOfWorkers": "four", "workerType": 1, "region": null}),
    );
    let warnings: Vec<String> = parsed.warnings.iter().map(|w| w.to_string()).collect();
    for expected in [
        "job.config.workerType: every trigger of this job will be refused: job.config.workerType must be a string",
        "job.config.numberOfWorkers: every trigger of this job will be refused: job.config.numberOfWorkers must be a whole number",
        "job.config.region: every trigger of this job will be refused: job.config.region must be a string",
    ] {
        assert!(warnings.iter().any(|w| w == expected), "{expected:?} in {warnings:#?}");
    }
    let JobSettings::Glue(glue) = parsed.config.job.config.settings() else {
        panic!("glue")
    };
    assert_eq!(
        glue.number_of_workers.as_ref().unwrap_err().path,
        "job.config.numberOfWorkers"
    );

    // A blank method was read as no method, and refused by the client.
    let JobSettings::Http(http) = settings("http", json!({"url": "https://x.example", "method": ""})) else {
        panic!("http")
    };
    assert_eq!(http.method.unwrap_err().message, "\"\" is not an HTTP method");
    let JobSettings::Lambda(lambda) = settings("lambda", json!({"functionName": "f", "invocationType": " "})) else {
        panic!("lambda")
    };
    assert_eq!(
        lambda.invocation_type.unwrap_err().message,
        "job.config.invocationType must be RequestResponse or Event, not \" \""
    );
}

#[test]
fn rendering_reads_the_settings_again_from_the_rendered_json() {
    let config = JobConfig::from_json(
        JobKind::Databricks,
        &json!({"host": "https://${env:HOST}", "jobId": "${env:JOB}", "token": "${INTERLOCK_TOKEN}",
                "notebookParams": {"day": "${env:DAY}"}, "timeout": 5}),
    )
    .unwrap();
    let env = |name: &str| match name {
        "env:HOST" => Some("dbc.example".to_string()),
        "env:JOB" => Some("42".to_string()),
        "env:INTERLOCK_TOKEN" => Some("t0k".to_string()),
        "env:DAY" => Some("2026-11-22".to_string()),
        _ => None,
    };
    let rendered = config.rendered(|json| render_value(json, &mut |n| env(n))).unwrap();
    let JobSettings::Databricks(job) = rendered.settings() else {
        panic!("databricks")
    };
    assert_eq!(job.host, "https://dbc.example");
    assert_eq!(job.job_id, JobId::Text("42".into()));
    assert_eq!(job.token.as_deref(), Some("t0k"));
    assert_eq!(job.notebook_params, Some(json!({"day": "2026-11-22"})));
    assert_eq!(rendered.timeout(), Some(5));
    assert_eq!(
        rendered.json()["host"],
        "https://dbc.example",
        "the JSON is what was rendered"
    );
    assert_eq!(
        config.json()["host"],
        "https://${env:HOST}",
        "and the original is left as it was"
    );
}

/// Issue 60, item 1: a `kafka` job aimed at Sluice's own topics (default prefix) or the
/// broker's, or setting a `sluice*` header, loads (stored configs must) with a warning, and
/// every trigger of it is refused.
#[test]
fn kafka_jobs_aimed_at_sluices_own_topics_or_headers_are_refused() {
    for (config, path, said) in [
        (
            json!({"topic": "sluice.changelog"}),
            "job.config.topic",
            "Sluice's or the broker's own",
        ),
        (
            json!({"topic": "__consumer_offsets"}),
            "job.config.topic",
            "Sluice's or the broker's own",
        ),
        (
            json!({"topic": "requests", "headers": {"Sluice.Batch": "~~~~~~~~~~~~~~~~"}}),
            "job.config.headers",
            "Sluice's own",
        ),
        (
            json!({"topic": "requests", "headers": {"sluice-run-id": "x"}}),
            "job.config.headers",
            "Sluice's own",
        ),
    ] {
        let parsed = read("kafka", config.clone());
        let warned = parsed.warnings.iter().find(|w| w.path == path);
        assert!(
            warned.is_some_and(|w| w.reason.contains(said) && w.reason.contains("every trigger")),
            "{config}: {:?}",
            parsed.warnings
        );
        assert_eq!(parsed.config.job.config.settings().unusable().len(), 1, "{config}");
    }
    let fine = settings("kafka", json!({"topic": "jobs.requests", "headers": {"team": "a"}}));
    assert!(fine.unusable().is_empty());
}
