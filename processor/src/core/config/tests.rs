use chrono::{TimeDelta, Weekday};
use chrono_tz::Tz;
use serde_json::{json, Value};

use super::*;

fn problems(value: Value) -> Vec<String> {
    match parse(&value, Variables::MustBeResolved) {
        Ok(_) => Vec::new(),
        Err(e) => e.problems.iter().map(|p| p.to_string()).collect(),
    }
}

fn minimal() -> Value {
    json!({
        "pipeline": {"id": "p1", "owner": "me"},
        "schedule": {"trigger": {"key": "k", "check": "exists"}},
        "job": {"type": "command", "config": {"command": "true"}}
    })
}

#[test]
fn the_example_pipelines_load_unchanged() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut count = 0;
    for dir in ["pipelines", "legacy"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let json = yaml_to_json(&text).unwrap();
            let parsed = parse(&json, Variables::MayBeUnresolved);
            assert!(parsed.is_ok(), "{}: {}", path.display(), parsed.unwrap_err());
            count += 1;
        }
    }
    assert!(count >= 4);
}

#[test]
fn a_legacy_config_keeps_every_field() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/legacy/gold-revenue.yaml"),
    )
    .unwrap();
    let config = parse(&yaml_to_json(&text).unwrap(), Variables::MayBeUnresolved)
        .unwrap()
        .config;
    assert_eq!(config.id, "gold-revenue");
    assert_eq!(config.schedule_id(), "cron");
    assert_eq!(config.schedule.timezone, chrono_tz::America::New_York);
    assert_eq!(
        config.schedule.evaluation,
        Evaluation {
            window: TimeDelta::hours(1),
            interval: TimeDelta::minutes(5)
        }
    );
    assert_eq!(
        config.sla.as_ref().unwrap().deadline,
        Some(Deadline::Daily(ClockTime { hour: 10, minute: 0 }))
    );
    assert_eq!(
        config.sla.as_ref().unwrap().expected_duration,
        Some(TimeDelta::minutes(30))
    );
    assert_eq!(config.validation.mode, Mode::All);
    assert_eq!(config.validation.rules.len(), 3);
    assert_eq!(
        config.validation.rules[1].check,
        Check::Compare(Comparison::Gte, 1000.0)
    );
    assert_eq!(
        config.validation.rules[2].check,
        Check::Age(AgeBound::YoungerThan, TimeDelta::hours(2))
    );
    assert_eq!(config.job.kind, JobKind::Glue);
    assert_eq!(
        (
            config.job.max_retries,
            config.job.max_code_retries,
            config.job.max_manual_reruns
        ),
        (2, 1, 1)
    );
    assert_eq!(config.job.poll_window, TimeDelta::hours(1));
    assert_eq!(config.exclusions.days, [Weekday::Sat, Weekday::Sun]);
    assert_eq!(
        config.exclusions.calendar.as_ref().map(|c| c.name.as_str()),
        Some("us-holidays")
    );
    assert_eq!(config.post_run.as_ref().unwrap().sensor_timeout, TimeDelta::hours(2));
}

#[test]
fn every_problem_is_reported_with_its_path() {
    let config = json!({
        "pipeline": {"id": "bad id!"},
        "schedule": {"timezone": "Mars/Olympus", "trigger": {"key": "k", "check": "gte", "field": "n", "value": "many"},
                     "evaluation": {"window": "5m", "interval": "10m"}},
        "sla": {"deadline": "25:00", "maxDuration": "30h"},
        "validation": {"trigger": "SOME", "rules": [{"key": "r", "check": "age_lt", "field": "t", "value": "soon"}, {"check": "equals"}]},
        "job": {"type": "command", "config": {}, "maxRetries": 11, "maxCodeRetries": -1, "maxDriftReruns": 6,
                "maxManualReruns": 2.5, "jobPollWindowSeconds": 30}
    });
    let found = problems(config);
    let expected_paths = [
        "pipeline.id:",
        "schedule.timezone:",
        "schedule.trigger.value:",
        "schedule.evaluation.interval:",
        "sla.deadline:",
        "sla.maxDuration: must not exceed 24h",
        "validation.trigger:",
        "validation.rules[0].value:",
        "validation.rules[1].key: is required",
        "validation.rules[1].value: is required for equals",
        "job.maxRetries: 11 is out of range [0,10]",
        "job.maxCodeRetries: -1 is out of range [0,3]",
        "job.maxDriftReruns: 6 is out of range [0,5]",
        "job.maxManualReruns: must be a whole number",
        "job.jobPollWindowSeconds: 30 is out of range [60,86400]",
        "job.config.command: is required",
    ];
    for path in expected_paths {
        assert!(
            found.iter().any(|p| p.starts_with(path)),
            "missing {path:?} in {found:#?}"
        );
    }
}

#[test]
fn retry_bounds_accept_their_edges_and_defaults() {
    let mut config = minimal();
    config["job"]["maxRetries"] = json!(10);
    config["job"]["maxCodeRetries"] = json!(0);
    config["job"]["jobPollWindowSeconds"] = json!(0);
    let parsed = parse(&config, Variables::MustBeResolved).unwrap().config;
    assert_eq!(parsed.job.max_retries, 10);
    assert_eq!(parsed.job.max_code_retries, 0);
    assert_eq!(parsed.job.max_drift_reruns, 1);
    assert_eq!(parsed.job.poll_window, TimeDelta::seconds(3600), "0 means the default");
    config["job"]["jobPollWindowSeconds"] = json!(86_401);
    assert_eq!(problems(config).len(), 1);
}

#[test]
fn unknown_fields_warn_but_load() {
    let mut config = minimal();
    config["schedule"]["evaluaton"] = json!({"window": "1h"});
    let parsed = parse(&config, Variables::MustBeResolved).unwrap();
    assert!(
        parsed.warnings.iter().any(|w| w.path == "schedule.evaluaton"),
        "{:?}",
        parsed.warnings
    );
}

#[test]
fn a_pipeline_nothing_can_start_is_rejected() {
    let mut config = minimal();
    config["schedule"] = json!({});
    assert!(problems(config)[0].starts_with("schedule: nothing starts this pipeline"));
}

#[test]
fn cron_and_include_are_mutually_exclusive_and_cron_has_five_fields() {
    let mut config = minimal();
    config["schedule"]["cron"] = json!("0 8 * *");
    config["schedule"]["include"] = json!({"dates": ["2026-01-31", "31/01/2026"]});
    let found = problems(config);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("schedule.cron: \"0 8 * *\" has 4 fields")),
        "{found:?}"
    );
    assert!(found.iter().any(|p| p.contains("mutually exclusive")));
    assert!(found.iter().any(|p| p.starts_with("schedule.include.dates[1]")));
}

#[test]
fn deployment_variables_must_be_resolved_for_the_processor_only() {
    let mut config = minimal();
    config["job"]["config"]["command"] = json!("run --env ${environment} --date ${DATE} --token ${env:TOKEN}");
    assert!(parse(&config, Variables::MayBeUnresolved).is_ok());
    let found = problems(config);
    assert_eq!(
        found,
        ["job.config.command: ${environment} is not resolved: pass --var environment=VALUE to config apply"]
    );
}

#[test]
fn configs_round_trip_through_their_json() {
    let parsed = parse(&minimal(), Variables::MustBeResolved).unwrap().config;
    let json = serde_json::to_value(&parsed).unwrap();
    assert_eq!(json, minimal());
    let back: PipelineConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back, parsed);
}

#[test]
fn hourly_deadlines_and_exclusion_forms_parse() {
    let mut config = minimal();
    config["sla"] = json!({"deadline": ":15"});
    config["exclusions"] = json!({"days": ["saturday"], "dates": ["2026-12-25"]});
    config["schedule"]["exclude"] = json!({"weekends": true, "dates": ["2026-12-25", "2026-01-01"]});
    let parsed = parse(&config, Variables::MustBeResolved).unwrap().config;
    assert_eq!(parsed.sla.unwrap().deadline, Some(Deadline::Hourly { minute: 15 }));
    assert_eq!(parsed.exclusions.days, [Weekday::Sat, Weekday::Sun]);
    assert_eq!(parsed.exclusions.dates.len(), 2);
}

#[test]
fn an_hourly_sla_deadline_on_a_daily_cron_is_rejected() {
    let mut config = minimal();
    config["schedule"] = json!({"cron": "0 8 * * *"});
    config["sla"] = json!({"deadline": ":15"});
    let problems = parse(&config, Variables::MustBeResolved).unwrap_err().problems;
    assert!(problems.iter().any(|p| p.path == "sla.deadline"), "{problems:?}");
    config["schedule"] = json!({"cron": "0 * * * *"});
    assert!(
        parse(&config, Variables::MustBeResolved).is_ok(),
        "an hourly cron may have one"
    );
}

#[test]
fn retry_policies_default_like_the_state_machine_and_can_be_set_per_pipeline() {
    let defaults = parse(&minimal(), Variables::MustBeResolved).unwrap().config;
    assert_eq!(defaults.job.trigger_retry, RetryPolicy::trigger());
    assert_eq!(defaults.job.status_retry, RetryPolicy::status_check());
    let waits: Vec<_> = (1..=4).map(|n| RetryPolicy::trigger().delay(n)).collect();
    let s = std::time::Duration::from_secs;
    assert_eq!(waits, [Some(s(30)), Some(s(60)), Some(s(120)), None]);
    assert_eq!(RetryPolicy::trigger().total(), s(210));
    assert_eq!(RetryPolicy::status_check().total(), s(14));
    assert_eq!(
        defaults.job.poll_interval,
        TimeDelta::seconds(60),
        "command jobs default to 60 s"
    );

    let mut config = minimal();
    config["job"]["triggerRetry"] = json!({"interval": "5s", "maxAttempts": 1});
    config["job"]["statusCheckRetry"] = json!({"backoffRate": 1.5});
    config["job"]["pollInterval"] = json!("10s");
    let job = parse(&config, Variables::MustBeResolved).unwrap().config.job;
    assert_eq!(
        job.trigger_retry,
        RetryPolicy {
            interval_ms: 5_000,
            backoff_rate: 2.0,
            max_attempts: 1
        }
    );
    assert_eq!(job.status_retry.backoff_rate, 1.5);
    assert_eq!(job.status_retry.interval_ms, 2_000);
    assert_eq!(job.poll_interval, TimeDelta::seconds(10));

    config["job"]["triggerRetry"] = json!({"interval": "5s", "backoffRate": 0.5, "maxAttempts": 11, "jitter": true});
    let found = problems(config);
    assert!(
        found.iter().any(|p| p.contains("job.triggerRetry.backoffRate")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.contains("job.triggerRetry.maxAttempts")),
        "{found:?}"
    );
}

#[test]
fn every_job_type_names_the_settings_it_cannot_do_without() {
    for (kind, field) in [
        ("airflow", "job.config.dagId"),
        ("databricks", "job.config.jobId"),
        ("glue", "job.config.jobName"),
        ("emr", "job.config.clusterId"),
        ("emr-serverless", "job.config.applicationId"),
        ("step-function", "job.config.stateMachineArn"),
        ("lambda", "job.config.functionName"),
        ("kafka", "job.config.topic"),
    ] {
        let mut config = minimal();
        config["job"] = json!({"type": kind, "config": {}});
        let found = problems(config);
        assert!(found.iter().any(|p| p.contains(field)), "{kind}: {found:?}");
    }
    let mut config = minimal();
    config["job"] = json!({"type": "http", "config": {"url": "https://x.example/run", "statusUrl": "ftp://x"}});
    let found = problems(config);
    assert!(found.iter().any(|p| p.contains("job.config.statusUrl")), "{found:?}");
}

fn with_job(kind: &str, config: Value) -> Value {
    let mut c = minimal();
    c["job"] = json!({"type": kind, "config": config});
    c
}

fn parsed(value: Value) -> Parsed {
    parse(&value, Variables::MustBeResolved).unwrap_or_else(|e| panic!("{e}"))
}

fn warnings(parsed: &Parsed) -> Vec<String> {
    parsed.warnings.iter().map(|w| w.to_string()).collect()
}

#[test]
fn job_configs_as_interlock_wrote_them_load_under_one_spelling() {
    let airflow = parsed(with_job(
        "airflow",
        json!({"url": "https://airflow.example", "dagID": "daily", "headers": {"Authorization": "Bearer x"},
               "body": "{\"source\": \"sluice\"}"}),
    ));
    let config = airflow.config.job.config.json();
    assert_eq!(config["dagId"], json!("daily"));
    assert_eq!(
        config["conf"],
        json!({"source": "sluice"}),
        "a JSON body is the DAG run's conf"
    );
    assert!(
        !warnings(&airflow).iter().any(|w| w.starts_with("job.")),
        "{:?}",
        warnings(&airflow)
    );

    let databricks = parsed(with_job(
        "databricks",
        json!({"workspaceURL": "https://dbc.example", "jobId": "42",
               "headers": {"Authorization": "Bearer x"}, "arguments": {"day": "${DATE}"}}),
    ));
    let config = databricks.config.job.config.json();
    assert_eq!(config["host"], json!("https://dbc.example"));
    assert_eq!(config["notebookParams"], json!({"day": "${DATE}"}));
    assert!(
        config.get("token").is_none(),
        "an Authorization header stands for the token"
    );

    let emr = parsed(with_job(
        "emr",
        json!({"clusterID": "j-1", "stepName": "agg", "command": "s3://jars/agg.jar",
               "arguments": {"--day": "${DATE}", "--env": "prod"}}),
    ));
    assert_eq!(
        emr.config.job.config.json()["step"],
        json!({"name": "agg", "jar": "s3://jars/agg.jar", "args": ["--day=${DATE}", "--env=prod"]})
    );
    assert_eq!(emr.config.job.config.json()["clusterId"], json!("j-1"));

    let sfn = parsed(with_job(
        "step-function",
        json!({"stateMachineARN": "arn:aws:states:us-east-1:1:stateMachine:m", "arguments": {"day": "x"}}),
    ));
    assert_eq!(
        sfn.config.job.config.json()["stateMachineArn"],
        json!("arn:aws:states:us-east-1:1:stateMachine:m")
    );
    assert_eq!(sfn.config.job.config.json()["input"], json!({"day": "x"}));

    let serverless = parsed(with_job(
        "emr-serverless",
        json!({"applicationID": "00f", "jobName": "agg", "executionRoleArn": "arn:aws:iam::1:role/r",
               "jobDriver": {"sparkSubmit": {"entryPoint": "s3://x.py"}}}),
    ));
    assert_eq!(serverless.config.job.config.json()["applicationId"], json!("00f"));
    assert_eq!(serverless.config.job.config.json()["name"], json!("agg"));
}

#[test]
fn an_unknown_job_config_key_warns_with_the_known_keys() {
    let glue = parsed(with_job(
        "glue",
        json!({"jobName": "agg", "job_name": "agg", "workers": 5}),
    ));
    let said = warnings(&glue);
    let unknown: Vec<_> = said
        .iter()
        .filter(|w| w.contains("unknown key for job type glue"))
        .collect();
    assert_eq!(unknown.len(), 2, "{said:?}");
    assert!(
        unknown[0].contains("job.config.job_name") && unknown[0].contains("known: jobName, arguments"),
        "{said:?}"
    );
    // Two spellings of one key are a contradiction, not a choice.
    let twice = problems(with_job("lambda", json!({"functionName": "a", "FunctionName": "b"})));
    assert!(twice.iter().any(|p| p.contains("given twice")), "{twice:?}");
    // A databricks job with neither token nor Authorization header still needs its token.
    let bare = problems(with_job(
        "databricks",
        json!({"host": "https://dbc.example", "jobId": 1}),
    ));
    assert!(bare.iter().any(|p| p.contains("job.config.token")), "{bare:?}");
}

#[test]
fn a_cron_trigger_is_read_as_schedule_cron_with_a_warning() {
    let mut c = minimal();
    c["schedule"] = json!({"trigger": {"type": "cron", "expression": "0 * * * *"}});
    c["sla"] = json!({"maxDuration": "30m"});
    let p = parsed(c);
    assert_eq!(p.config.schedule_id(), "cron");
    assert!(p.config.schedule.trigger.is_none());
    assert!(
        warnings(&p).iter().any(|w| w.contains("read as schedule.cron")),
        "{:?}",
        warnings(&p)
    );

    let mut both = minimal();
    both["schedule"] = json!({"cron": "0 8 * * *", "trigger": {"type": "cron", "expression": "0 * * * *"}});
    assert!(problems(both).iter().any(|p| p.contains("keep one")));
}

#[test]
fn sla_deadline_day_defaults_to_the_next_day_without_cron() {
    let mut c = minimal();
    c["sla"] = json!({"deadline": "02:00"});
    assert_eq!(parsed(c.clone()).config.sla.unwrap().deadline_day, DeadlineDay::NextDay);
    c["schedule"]["cron"] = json!("0 1 * * *");
    assert_eq!(
        parsed(c.clone()).config.sla.unwrap().deadline_day,
        DeadlineDay::DataDate
    );
    c["sla"]["deadlineDay"] = json!("tomorrow");
    assert!(problems(c).iter().any(|p| p.contains("dataDate or nextDay")));
}

/// The earlier design read keys in any case (Go's decoding): `dryrun: true` is a dry run,
/// never the real job, and `job.maxretries` the retry budget; each respelling warns.
#[test]
fn keys_spelt_in_another_case_are_read_with_a_warning() {
    let mut c = minimal();
    c["dryrun"] = json!(true);
    c["job"]["MaxRetries"] = json!(2);
    let read = parsed(c);
    assert!(read.config.dry_run, "a dry run spelt dryrun is a dry run");
    assert_eq!(read.config.job.max_retries, 2);
    let said = warnings(&read);
    assert!(
        said.iter()
            .any(|w| w.starts_with("dryrun") && w.contains("read as dryRun")),
        "{said:?}"
    );
    assert!(said.iter().any(|w| w.starts_with("job.MaxRetries")), "{said:?}");
    assert!(!said.iter().any(|w| w.contains("unknown field")), "{said:?}");
    let mut twice = minimal();
    twice["dryRun"] = json!(false);
    twice["DRYRUN"] = json!(true);
    assert!(problems(twice).iter().any(|p| p.contains("set twice")));
}

#[test]
fn fields_read_but_not_acted_on_warn() {
    let mut c = minimal();
    c["sla"] = json!({"deadline": "02:00", "critical": true});
    c["postRun"] = json!({"rules": [], "evaluation": {"window": "1h", "interval": "5m"}});
    let said = warnings(&parsed(c));
    for path in ["sla.critical", "postRun.evaluation", "postRun.rules"] {
        assert!(said.iter().any(|w| w.starts_with(path)), "{path}: {said:?}");
    }
}

/// The earlier design read an unset `sla.timezone` as UTC, Sluice as the schedule's zone:
/// where they differ, `validate` says which zone a deadline is read in.
#[test]
fn an_sla_deadline_without_its_own_timezone_says_which_zone_it_is_read_in() {
    let warned = |schedule_zone: Option<&str>, sla_zone: Option<&str>| {
        let mut c = minimal();
        if let Some(zone) = schedule_zone {
            c["schedule"]["timezone"] = json!(zone);
        }
        c["sla"] = json!({"deadline": "08:00"});
        if let Some(zone) = sla_zone {
            c["sla"]["timezone"] = json!(zone);
        }
        warnings(&parsed(c)).into_iter().find(|w| w.starts_with("sla.timezone"))
    };
    let said = warned(Some("Asia/Tokyo"), None).expect("a warning");
    assert!(said.contains("Asia/Tokyo") && said.contains("UTC"), "{said}");
    assert_eq!(warned(Some("Asia/Tokyo"), Some("Asia/Tokyo")), None, "said which");
    assert_eq!(warned(None, None), None, "both read UTC");
}

#[test]
fn sla_deadline_day_is_read_from_the_config() {
    let mut c = minimal();
    c["sla"] = json!({"deadline": "05:49", "deadlineDay": "dataDate", "expectedDuration": "1m"});
    assert_eq!(parsed(c).config.sla.unwrap().deadline_day, DeadlineDay::DataDate);
}

#[test]
fn sla_forecast_is_on_with_five_runs_unless_switched_off_or_set() {
    let forecast = |value: Value| {
        let mut c = minimal();
        c["sla"] = json!({"deadline": "05:00"});
        if !value.is_null() {
            c["sla"]["forecast"] = value;
        }
        parsed(c).config.sla.unwrap().forecast
    };
    assert_eq!(forecast(Value::Null), Some(5));
    assert_eq!(forecast(json!(true)), Some(5));
    assert_eq!(forecast(json!(false)), None);
    assert_eq!(forecast(json!({"minRuns": 12})), Some(12));
    assert_eq!(forecast(json!({})), Some(5));
    for (bad, says) in [
        (json!({"minRuns": 0}), "sla.forecast.minRuns: 0 is out of range [1,30]"),
        (
            json!({"minRuns": 31}),
            "sla.forecast.minRuns: 31 is out of range [1,30]",
        ),
        (
            json!({"minRuns": 2.5}),
            "sla.forecast.minRuns: must be a whole number in [1,30], found 2.5",
        ),
        (
            json!("often"),
            "sla.forecast: must be true, false or {minRuns: N}, not a string",
        ),
    ] {
        let mut c = minimal();
        c["sla"] = json!({"deadline": "05:00", "forecast": bad});
        assert_eq!(problems(c), [says]);
    }
    let mut c = minimal();
    c["sla"] = json!({"maxDuration": "1h", "forecast": {"minRuns": 3, "typo": 1}});
    let said = warnings(&parsed(c));
    assert!(
        said.iter()
            .any(|w| w.starts_with("sla.forecast: has no effect without sla.deadline")),
        "{said:?}"
    );
    assert!(said.iter().any(|w| w.contains("typo")), "{said:?}");
}

#[test]
fn anomalies_default_to_unknown_and_stale_checks_without_flapping() {
    let anomalies = |value: Value| {
        let mut c = minimal();
        if !value.is_null() {
            c["anomalies"] = value;
        }
        parsed(c).config.anomalies
    };
    assert_eq!(anomalies(Value::Null), Anomalies::default());
    let defaults = Anomalies::default();
    assert!(defaults.flapping.is_none() && defaults.unknown_sensors && defaults.stale_sensors);
    let set = anomalies(json!({"flapping": {"changes": 4, "window": "20m", "holdFor": "5m"},
                               "unknownSensors": false, "staleSensors": false}));
    assert_eq!(
        set.flapping,
        Some(Flapping {
            changes: 4,
            window: TimeDelta::minutes(20),
            hold_for: Some(TimeDelta::minutes(5))
        })
    );
    assert!(!set.unknown_sensors && !set.stale_sensors);
    let bare = anomalies(json!({"flapping": {}})).flapping.unwrap();
    assert_eq!(
        (bare.changes, bare.window, bare.hold_for),
        (3, TimeDelta::hours(1), None)
    );
    let mut c = minimal();
    c["anomalies"] = json!({"flapping": {"changes": 0, "window": "soon"}, "staleSensors": "yes", "other": 1});
    let said = problems(c.clone());
    assert!(
        said.contains(&"anomalies.flapping.changes: 0 is out of range [1,100]".to_string()),
        "{said:?}"
    );
    assert!(
        said.iter().any(|p| p.starts_with("anomalies.flapping.window:")),
        "{said:?}"
    );
    assert!(
        said.contains(&"anomalies.staleSensors: must be true or false, found a string".to_string()),
        "{said:?}"
    );
}

#[test]
fn rule_severity_is_error_unless_warn_and_only_on_validation_and_post_run_rules() {
    let mut c = minimal();
    c["validation"] = json!({"rules": [
        {"key": "a", "check": "exists", "severity": "warn"},
        {"key": "b", "check": "exists", "severity": "error"},
        {"key": "c", "check": "exists"}
    ]});
    c["postRun"] = json!({"rules": [{"key": "q", "check": "exists", "severity": "warn"}]});
    let config = parsed(c.clone()).config;
    let severities: Vec<Severity> = config.validation.rules.iter().map(|r| r.severity).collect();
    assert_eq!(severities, [Severity::Warn, Severity::Error, Severity::Error]);
    assert_eq!(config.post_run.unwrap().rules[0].severity, Severity::Warn);
    c["validation"]["rules"][0]["severity"] = json!("info");
    assert_eq!(
        problems(c.clone()),
        ["validation.rules[0].severity: \"info\" must be error or warn"]
    );
    // The trigger is no gate: a severity there is an unknown field.
    let mut c = minimal();
    c["schedule"]["trigger"]["severity"] = json!("warn");
    let said = warnings(&parsed(c));
    assert!(
        said.iter()
            .any(|w| w.starts_with("schedule.trigger") && w.contains("severity")),
        "{said:?}"
    );
}

#[test]
fn the_earlier_aws_variants_deadlines_map_onto_the_sla_or_are_read_as_written() {
    let sla = |fields: Value| {
        let mut c = minimal();
        c["sla"] = fields;
        parsed(c).config.sla.unwrap()
    };
    let read = sla(json!({"completionDeadline": "10:00", "atRiskLeadTime": "15m",
                          "evaluationDeadline": "+45m", "validationTimeout": "07:30"}));
    assert_eq!(read.deadline, Some(Deadline::Daily(ClockTime { hour: 10, minute: 0 })));
    assert_eq!(
        read.expected_duration,
        Some(TimeDelta::minutes(15)),
        "the warning's lead"
    );
    assert_eq!(read.evaluation_deadline, Some(SlaTime::After(TimeDelta::minutes(45))));
    assert_eq!(
        read.validation_timeout,
        Some(SlaTime::At(ClockTime { hour: 7, minute: 30 }))
    );
    assert_eq!(read.at_risk_lead_time, Some(TimeDelta::minutes(15)));
    let relative = sla(json!({"completionDeadline": "2h"}));
    assert_eq!(
        (relative.deadline, relative.max_duration),
        (None, Some(TimeDelta::hours(2)))
    );
    // Sluice's own fields win, with a warning.
    let mut c = minimal();
    c["sla"] = json!({"deadline": "09:00", "completionDeadline": "10:00"});
    let both = parsed(c);
    assert_eq!(
        both.config.sla.as_ref().unwrap().deadline,
        Some(Deadline::Daily(ClockTime { hour: 9, minute: 0 }))
    );
    assert!(warnings(&both)
        .iter()
        .any(|w| w.starts_with("sla.completionDeadline: is ignored")));
    let mut c = minimal();
    c["sla"] = json!({"evaluationDeadline": "soon", "completionDeadline": "30h"});
    let said = problems(c);
    assert!(
        said.iter()
            .any(|p| p.starts_with("sla.evaluationDeadline: \"soon\" is neither")),
        "{said:?}"
    );
    assert!(
        said.contains(&"sla.completionDeadline: must not exceed 24h".to_string()),
        "{said:?}"
    );
}

#[test]
fn evaluators_are_read_per_key_with_their_call_as_a_jobs_settings() {
    let with = |rules: Value| {
        let mut c = minimal();
        c["validation"] = json!({"rules": rules});
        c
    };
    let rule = |key: &str, evaluator: Value| json!({"key": key, "check": "gte", "field": "count", "value": 1, "evaluator": evaluator});
    let config = parsed(with(json!([
        rule("rows", json!({"type": "http", "url": "https://dw.example/rows", "ttl": "30m", "every": "10m", "timeout": "15s",
                            "headers": {"Authorization": "Bearer ${env:DW_TOKEN}"}})),
        {"key": "rows", "check": "lte", "field": "count", "value": 10},
        rule("flag", json!({"type": "command", "command": "./check", "timeout": 5}))
    ])))
    .config;
    let evaluators = &config.validation.evaluators;
    assert_eq!(evaluators.len(), 2);
    let rows = config.validation.evaluator("rows").unwrap();
    assert_eq!(
        (rows.ttl, rows.every),
        (Some(TimeDelta::minutes(30)), Some(TimeDelta::minutes(10)))
    );
    assert_eq!(rows.call.kind(), JobKind::Http);
    assert_eq!(rows.call.json()["method"], json!("GET"), "GET unless method says");
    assert_eq!(rows.call.timeout(), Some(15), "a duration timeout is seconds");
    let flag = config.validation.evaluator("flag").unwrap();
    assert_eq!(
        (flag.call.kind(), flag.call.timeout(), flag.ttl, flag.every),
        (JobKind::Command, Some(5), None, None)
    );
    assert_eq!(config.validation.rules.len(), 3, "the rules are read as before");

    // Every mistake is named under the evaluator's own path.
    let said = problems(with(json!([
        rule("a", json!({"type": "ftp"})),
        rule("b", json!({"type": "http", "every": "1s"})),
        rule("c", json!({"type": "command", "timeout": "soon"})),
        rule("d", json!({"type": "command", "command": "x"})),
        rule("d", json!({"type": "command", "command": "y"})),
    ])));
    for expected in [
        "validation.rules[0].evaluator.type: \"ftp\" is not an evaluator type (http, command)",
        "validation.rules[1].evaluator.every: must be at least 10s: an evaluator is a remote call",
        "validation.rules[1].evaluator.url: is required",
        "validation.rules[2].evaluator.timeout: \"soon\" must be a duration of at least 1s, or seconds",
        "validation.rules[2].evaluator.command: is required",
        "validation.rules[4].evaluator: sensor \"d\" has another evaluator on an earlier rule: rules on one key share one evaluator",
    ] {
        assert!(said.iter().any(|p| p == expected), "{expected:?} in {said:#?}");
    }
    let mut c = minimal();
    c["postRun"] = json!({"rules": [rule("rows", json!({"type": "command", "command": "x"}))]});
    assert!(problems(c)
        .iter()
        .any(|p| p.starts_with("postRun.rules[0].evaluator: evaluators answer validation rules only")),);
}

/// A dry run never calls its job: Interlock's emr-serverless configs (only `applicationId`
/// and `jobName`) load as dry runs, each missing setting a warning, so a team can shadow the
/// earlier design before it fixes the job; the same config with dryRun off is refused.
#[test]
fn a_dry_run_loads_with_a_job_config_only_a_real_call_would_refuse() {
    let interlock = json!({"applicationId": "00f1", "jobName": "silver-load"});
    let mut dry = with_job("emr-serverless", interlock.clone());
    dry["dryRun"] = json!(true);
    let read = parsed(dry);
    assert!(read.config.dry_run);
    assert_eq!(read.config.job.config.kind(), JobKind::EmrServerless);
    let said = warnings(&read);
    for missing in ["job.config.executionRoleArn", "job.config.jobDriver"] {
        let named: Vec<&String> = said.iter().filter(|w| w.starts_with(missing)).collect();
        assert_eq!(named.len(), 1, "{missing} is named once: {said:?}");
        assert!(named[0].contains("before turning dryRun off"), "{said:?}");
    }
    let found = problems(with_job("emr-serverless", interlock));
    assert!(
        found.iter().any(|p| p.contains("job.config.executionRoleArn")),
        "{found:?}"
    );
    // Every job type, its essentials all missing, loads as a dry run.
    for kind in JobKind::names() {
        let mut dry = with_job(kind, json!({}));
        dry["dryRun"] = json!(true);
        assert_eq!(problems(dry), Vec::<String>::new(), "{kind}");
    }
}

/// Every section reads its keys in any case, as Go decoded the earlier design's configs:
/// nothing a team wrote in another case is dropped as an unknown field.
#[test]
fn keys_of_every_section_are_read_in_any_case() {
    let read = parsed(json!({
        "Pipeline": {"ID": "p1", "Owner": "me"},
        "Schedule": {"Trigger": {"Key": "k", "Check": "exists"}, "Timezone": "Europe/Paris",
                     "Exclude": {"Weekends": true}},
        "SLA": {"Deadline": "08:00"},
        "Validation": {"Trigger": "ALL", "Rules": [{"KEY": "rows", "check": "gte", "Field": "count", "Value": 5}]},
        "Job": {"Type": "command", "Config": {"command": "true"}, "TriggerRetry": {"MaxAttempts": 1}},
        "PostRun": {"Rules": [{"key": "rows", "check": "exists"}]},
        "DependsOn": [{"Pipeline": "bronze"}]
    }));
    let c = &read.config;
    assert_eq!(c.id, "p1");
    assert_eq!(c.owner.as_deref(), Some("me"));
    assert_eq!(c.schedule.trigger.as_ref().map(|t| t.key.as_str()), Some("k"));
    assert_eq!(c.schedule.timezone.name(), "Europe/Paris");
    assert_eq!(c.exclusions.days, [Weekday::Sat, Weekday::Sun]);
    assert!(c.sla.is_some());
    assert_eq!(c.validation.rules.len(), 1);
    assert_eq!(c.validation.rules[0].key, "rows");
    assert_eq!(c.validation.rules[0].field.as_deref(), Some("count"));
    assert_eq!(c.job.trigger_retry.max_attempts, 1);
    assert_eq!(c.post_run.as_ref().map(|p| p.rules.len()), Some(1));
    assert_eq!(c.depends_on[0].pipeline, "bronze");
    let said = warnings(&read);
    assert!(!said.iter().any(|w| w.contains("unknown field")), "{said:?}");
    for respelt in [
        "schedule.Trigger",
        "schedule.trigger.Key",
        "sla.Deadline",
        "validation.rules[0].KEY",
        "dependsOn[0].Pipeline",
    ] {
        assert!(
            said.iter().any(|w| w.starts_with(respelt) && w.contains("read as")),
            "{respelt}: {said:?}"
        );
    }
}

#[test]
fn an_aws_job_may_name_a_role_to_assume_and_a_malformed_one_is_a_problem() {
    let glue = |role: Value| with_job("glue", json!({"jobName": "agg", "roleArn": role}));
    let parsed = parsed(glue(json!("arn:aws:iam::123456789012:role/etl-runner")));
    let warned = warnings(&parsed);
    assert!(!warned.iter().any(|w| w.contains("roleArn")), "a known key: {warned:?}");
    let aws = parsed.config.job.config.settings().aws().unwrap();
    assert_eq!(
        aws.role_arn.as_ref().unwrap().as_deref(),
        Some("arn:aws:iam::123456789012:role/etl-runner")
    );
    for bad in [
        json!("etl-runner"),
        json!("arn:aws:iam::123456789012:user/bob"),
        json!("arn:aws:iam::12345:role/x"),
        json!("arn:aws:s3:::bucket"),
        json!(5),
    ] {
        let found = problems(glue(bad.clone()));
        assert!(
            found.iter().any(|p| p.contains("roleArn") && p.contains("IAM role")),
            "{bad}: {found:?}"
        );
    }
}

#[test]
fn two_calendars_named_in_one_config_both_apply() {
    let mut c = minimal();
    c["exclusions"] = json!({"calendar": {"name": "us-holidays", "dates": ["2026-11-26"]}});
    c["schedule"]["exclude"] =
        json!({"holidays": {"name": "uk-holidays", "days": ["saturday"], "dates": ["2026-12-26"]}});
    let config = parsed(c.clone()).config;
    let calendar = config.exclusions.calendar.as_ref().unwrap();
    assert_eq!(calendar.name, "us-holidays+uk-holidays");
    let day = |d: &str| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").unwrap();
    for excluded in ["2026-11-26", "2026-12-26", "2026-11-28"] {
        assert!(config.exclusions.excludes(day(excluded)).is_some(), "{excluded}");
    }
    assert!(config.exclusions.excludes(day("2026-11-27")).is_none());
    // The same calendar named twice is one.
    c["schedule"]["exclude"] = json!({"holidays": {"name": "us-holidays", "dates": ["2026-11-26"]}});
    assert_eq!(parsed(c).config.exclusions.calendar.unwrap().name, "us-holidays");
}

#[test]
fn validate_names_where_a_sensor_started_pipeline_dates_runs_otherwise_than_the_earlier_design() {
    let said_on = |c: &Value, path: &str| -> Vec<String> {
        warnings(&parsed(c.clone()))
            .into_iter()
            .filter(|w| w.starts_with(path))
            .collect()
    };
    let mut c = minimal();
    c["schedule"]["timezone"] = json!("America/New_York");
    c["exclusions"] = json!({"days": ["saturday", "sunday"]});
    // The defaults are the earlier design's rules: said, with how to choose the other.
    let zone = said_on(&c, "schedule.undatedReadings");
    assert!(
        zone.len() == 1 && zone[0].contains("in UTC, as the earlier design did"),
        "{zone:?}"
    );
    let by = said_on(&c, "schedule.excludeBy");
    assert!(by.len() == 1 && by[0].contains("day a trigger arrives"), "{by:?}");
    let config = parsed(c.clone()).config;
    assert_eq!(config.schedule.undated_zone(), Tz::UTC);
    assert_eq!(config.schedule.exclude_by, ExcludeBy::RunDay);
    // Chosen as the earlier design did: nothing to say.
    c["schedule"]["undatedReadings"] = json!("utc");
    c["schedule"]["excludeBy"] = json!("runDay");
    assert!(said_on(&c, "schedule.undatedReadings").is_empty());
    assert!(said_on(&c, "schedule.excludeBy").is_empty());
    // Chosen otherwise: named as a difference.
    c["schedule"]["undatedReadings"] = json!("timezone");
    c["schedule"]["excludeBy"] = json!("dataDate");
    assert!(said_on(&c, "schedule.undatedReadings")[0].contains("the earlier design dated it in UTC"));
    assert!(said_on(&c, "schedule.excludeBy")[0].contains("data date"));
    let config = parsed(c.clone()).config;
    assert_eq!(config.schedule.undated_zone(), chrono_tz::America::New_York);
    assert_eq!(config.schedule.exclude_by, ExcludeBy::DataDate);
    // In UTC, without exclusions, or run by a cron (dated by its occurrence): nothing to say.
    let mut utc = minimal();
    utc["schedule"]["timezone"] = json!("UTC");
    assert!(said_on(&utc, "schedule.undatedReadings").is_empty());
    assert!(said_on(&utc, "schedule.excludeBy").is_empty());
    c["schedule"] = json!({"cron": "0 8 * * *", "timezone": "America/New_York"});
    assert!(said_on(&c, "schedule.").is_empty(), "{:?}", said_on(&c, "schedule."));
    // A choice that is neither is an error.
    let mut wrong = minimal();
    wrong["schedule"]["undatedReadings"] = json!("local");
    wrong["schedule"]["excludeBy"] = json!("today");
    let err = parse(&wrong, Variables::MayBeUnresolved).unwrap_err().to_string();
    assert!(
        err.contains("must be utc or timezone") && err.contains("must be runDay or dataDate"),
        "{err}"
    );
}
