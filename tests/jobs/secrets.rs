//! Secrets stay put: what a `command` job's environment holds, which `${env:NAME}` a config
//! may read, job types an operator turned off, and the SSRF guard with a proxy in the
//! processor's environment. The real processor on the real broker.

use serde_json::json;
use sluice::core::events::EventType::*;

use crate::basics::{go, last, quick};
use crate::support::{command_job, pipeline, scripted_server, World};

/// The processor's own Kafka password, as the Kubernetes base gives it to the container.
const KAFKA_PASSWORD: &str = "kafka-sasl-pa55word";
const PARTNER_KEY: &str = "partner-k3y-value";

#[test]
fn commands_see_only_their_configured_environment_and_report_secrets_redacted() {
    let server = scripted_server();
    let mut w = World::new("command-env");
    w.env.push(("KAFKA_SASL_PASSWORD".into(), KAFKA_PASSWORD.into()));
    w.env.push(("SLUICE_TEST_UNALLOWED".into(), "not-for-jobs".into()));
    w.secret("SLUICE_TEST_PARTNER_KEY", PARTNER_KEY);
    // `env` is found on PATH, and lists every variable the command got. Then the way around
    // the cleared environment: the processor's own, read through /proc (the command's parent
    // is the processor).
    let mut reader = quick(command_job(
        "echo \"kafka=[$KAFKA_SASL_PASSWORD] partner=[$PARTNER]\"; env | cut -d= -f1 | sort | tr '\\n' ' '; \
         echo; echo \"proc=$( (tr '\\0' '\\n' < /proc/$PPID/environ) 2>/dev/null | grep -c ^KAFKA_SASL_PASSWORD=)\"; \
         echo \"$PARTNER\" >&2; exit 3",
        0,
    ));
    reader["config"]["env"] = json!({"PARTNER": "${env:SLUICE_TEST_PARTNER_KEY}"});
    // A secret the operator did not allow fails the trigger before any request.
    let unallowed = quick(json!({"type": "http", "maxRetries": 0, "config": {
        "url": format!("{}/run", server.base),
        "headers": {"X-Key": "${env:SLUICE_TEST_UNALLOWED}"}}}));
    w.config(&pipeline("unallowed", unallowed));
    w.start_with(&pipeline("reader", reader));
    go(&w, "reader");
    go(&w, "unallowed");

    let events = w.wait_for("reader", "failure", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = last(&events, JOB_FAILED);
    let stdout = failed.detail["metadata"]["stdout"].as_str().unwrap();
    let (first, names) = stdout.split_once('\n').unwrap_or((stdout, ""));
    assert_eq!(
        first, "kafka=[] partner=[***]",
        "the processor's credentials are not inherited; the configured secret reaches the command, redacted"
    );
    let (names, proc) = names.split_once("\nproc=").expect("the /proc line");
    assert_eq!(
        proc.trim(),
        "0",
        "the processor's environment was read through /proc/$PPID/environ"
    );
    let names: Vec<&str> = names.split_whitespace().collect();
    for needed in ["PATH", "PARTNER", "SLUICE_RUN_ID", "SLUICE_ATTEMPT"] {
        assert!(names.contains(&needed), "{needed} missing from {names:?}");
    }
    // What sh sets itself (PWD, SHLVL, _) aside, nothing else of the processor's.
    let expected = [
        "PATH",
        "HOME",
        "LANG",
        "PARTNER",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "SLUICE_PIPELINE_ID",
        "SLUICE_SCHEDULE_ID",
        "SLUICE_DATE",
        "SLUICE_RUN_ID",
        "SLUICE_ATTEMPT",
    ];
    let extra: Vec<_> = names.iter().filter(|n| !expected.contains(n)).collect();
    assert!(extra.is_empty(), "inherited from the processor: {extra:?}");
    assert_eq!(failed.detail["metadata"]["stderr"], "***");
    assert_eq!(failed.detail["jobMessage"], "command exited 3: ***");

    let events = w.wait_for("unallowed", "refusal", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = last(&events, JOB_FAILED);
    assert_eq!(failed.detail["failureCategory"], "PERMANENT");
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(
        message.contains("not allowed") && message.contains("--allow-env SLUICE_TEST_UNALLOWED"),
        "{message}"
    );
    assert!(server.requests.lock().unwrap().is_empty(), "nothing reached the target");

    for e in w.events_seen() {
        let text = serde_json::to_string(e).unwrap();
        for secret in [KAFKA_PASSWORD, PARTNER_KEY, "not-for-jobs"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
    w.stop();
}

#[test]
fn a_job_type_turned_off_fails_its_triggers_without_running() {
    let mut w = World::new("disabled-type");
    w.env.push(("SLUICE_DISABLE_JOB_TYPES".into(), "command".into()));
    let marker = w.scratch.path().join("ran");
    let job = command_job(&format!("touch {}", marker.display()), 0);
    w.start_with(&pipeline("off", job));
    go(&w, "off");
    let events = w.wait_for("off", "failure", |es| es.iter().any(|e| e.kind == JOB_FAILED));
    let failed = last(&events, JOB_FAILED);
    assert_eq!(failed.detail["failureCategory"], "PERMANENT");
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(message.contains("--disable-job-type command"), "{message}");
    // The failure is reported after the trigger was handled: the command never ran.
    assert!(!marker.exists(), "the command ran");
    w.stop();
}

#[test]
fn a_proxy_in_the_processors_environment_does_not_bypass_the_ssrf_guard() {
    let proxy = scripted_server();
    let mut w = World::new("env-proxy");
    w.allow_targets = String::new(); // loopback is refused, as by default in production
    for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"] {
        w.env.push((name.into(), proxy.base.clone()));
    }
    // `localhost` resolves to loopback: the guard refuses it when it resolves the name, which
    // a client sending the request to a proxy never does.
    let job = quick(json!({"type": "http", "maxRetries": 0, "maxCodeRetries": 0,
                           "config": {"url": "http://localhost:9/run"}}));
    w.start_with(&pipeline("proxied", job));
    go(&w, "proxied");
    let events = w.wait_for("proxied", "refusal", |es| {
        es.iter().any(|e| e.kind == JOB_FAILED || e.kind == JOB_COMPLETED)
    });
    let failed = (events.iter().find(|e| e.kind == JOB_FAILED))
        .unwrap_or_else(|| panic!("the job was not refused: {:?}", events.last()));
    let message = failed.detail["jobMessage"].as_str().unwrap();
    assert!(message.contains("loopback address"), "{message}");
    assert!(
        proxy.requests.lock().unwrap().is_empty(),
        "the request went to the proxy: {:?}",
        proxy.requests.lock().unwrap()
    );
    w.stop();
}
