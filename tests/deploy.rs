//! The deployment files checked against the code they deploy: every flag, environment
//! variable, subcommand, port, path, topic and column they name must be one the binary and
//! the schemas actually have. No broker needed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_documents(path: &str) -> Vec<Yaml> {
    let text = read(path);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

/// `sluice ARGS --help`: its text, and whether clap accepted the arguments.
fn help(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every `[env: NAME]` the CLI declares, across the commands deployments use (values are
/// never shown, even when set).
fn declared_env() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for args in [
        &["run"][..],
        &["alerts", "slack"],
        &["alerts", "webhook"],
        &["topics", "apply"],
        &["status"],
    ] {
        let (ok, text) = help(args);
        assert!(ok, "sluice {args:?} --help");
        for part in text.split("[env: ").skip(1) {
            names.insert(part.split([']', '=']).next().unwrap().to_string());
        }
    }
    names
}

/// The environment names (keys) set in a YAML tree: compose `environment` maps and k8s
/// `env` lists.
fn env_names(node: &Yaml, out: &mut BTreeSet<String>) {
    match node {
        Yaml::Mapping(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    (Some("environment"), Yaml::Mapping(env)) => {
                        out.extend(env.keys().filter_map(|k| k.as_str().map(str::to_string)));
                    }
                    (Some("env"), Yaml::Sequence(env)) => {
                        out.extend(env.iter().filter_map(|e| e["name"].as_str().map(str::to_string)));
                    }
                    _ => {}
                }
                env_names(v, out);
            }
        }
        Yaml::Sequence(items) => items.iter().for_each(|i| env_names(i, out)),
        _ => {}
    }
}

fn sluice_env(names: &BTreeSet<String>) -> BTreeSet<String> {
    names
        .iter()
        .filter(|n| n.starts_with("SLUICE_") || n.starts_with("SLACK_"))
        .cloned()
        .collect()
}

#[test]
fn every_sluice_setting_in_the_deploy_files_exists() {
    let declared = declared_env();
    let mut used = BTreeSet::new();
    for doc in yaml_documents("deploy/compose.yaml") {
        env_names(&doc, &mut used);
    }
    for file in [
        "deploy/k8s/base/statefulset.yaml",
        "deploy/k8s/base/topics-job.yaml",
        "deploy/k8s/base/alerts.yaml",
    ] {
        for doc in yaml_documents(file) {
            env_names(&doc, &mut used);
        }
    }
    for line in read("Dockerfile").lines().filter(|l| l.contains("SLUICE_")) {
        used.extend(
            line.split_whitespace()
                .filter_map(|w| w.split('=').next())
                .filter(|w| w.starts_with("SLUICE_"))
                .map(str::to_string),
        );
    }
    let used = sluice_env(&used);
    assert!(used.len() >= 8, "{used:?}");
    // SLACK_BOT_TOKEN is read from the environment directly (never a flag default).
    let unknown: Vec<_> = used
        .iter()
        .filter(|n| !declared.contains(*n) && *n != "SLACK_BOT_TOKEN")
        .collect();
    assert!(
        unknown.is_empty(),
        "set in deploy files but not read by sluice: {unknown:?} (declared: {declared:?})"
    );
}

#[test]
fn compose_runs_commands_the_binary_has_on_the_ports_it_serves() {
    let compose = &yaml_documents("deploy/compose.yaml")[0];
    let services = compose["services"].as_mapping().unwrap();
    for name in [
        "kafka",
        "schema-registry",
        "connect",
        "postgres",
        "sluice-0",
        "sluice-1",
        "topics",
    ] {
        assert!(services.contains_key(name), "compose has {name}");
    }
    assert!(
        compose["services"]["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
            .as_str()
            .unwrap()
            .contains("controller"),
        "KRaft"
    );
    // The topics job's commands parse.
    let script = compose["services"]["topics"]["command"][0].as_str().unwrap();
    for command in script.split("&&") {
        let words: Vec<&str> = command.split_whitespace().skip(1).collect();
        assert!(help(&words).0, "sluice {words:?} is a valid command line");
        for path in words.iter().filter(|w| w.starts_with("/etc/sluice")) {
            assert!(read("Dockerfile").contains(&format!(" {path}")), "the image has {path}");
        }
    }
    let alerts: Vec<&str> = compose["services"]["alerts"]["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(help(&alerts).0, "sluice {alerts:?}");
    // Both instances serve the API on 9464, each advertising its own name.
    for (i, instance) in ["sluice-0", "sluice-1"].iter().enumerate() {
        let s = &compose["services"][*instance];
        let env = &s["environment"];
        assert_eq!(env["SLUICE_HTTP"].as_str(), Some("0.0.0.0:9464"));
        assert_eq!(
            env["SLUICE_ADVERTISE_URL"].as_str(),
            Some(format!("http://{instance}:9464").as_str())
        );
        assert_eq!(s["ports"][0].as_str(), Some(format!("{}:9464", 9464 + i).as_str()));
    }
    assert!(read("Dockerfile").contains("EXPOSE 9464"));
    let (_, run_help) = help(&["run"]);
    assert!(run_help.contains("/healthz") && run_help.contains("/readyz") && run_help.contains("/api/pipelines"));
}

#[test]
fn kubernetes_manifests_agree_with_each_other_and_the_binary() {
    // deploy/check-k8s.sh renders these (base and overlays) and checks them against the
    // Kubernetes schemas and each other; this test checks them against the binary.
    let set = &yaml_documents("deploy/k8s/base/statefulset.yaml")[0];
    let services = yaml_documents("deploy/k8s/base/service.yaml");
    let headless = services
        .iter()
        .find(|s| s["spec"]["clusterIP"].as_str() == Some("None"))
        .expect("a headless service");
    let service_name = headless["metadata"]["name"].as_str().unwrap();
    assert_eq!(set["spec"]["serviceName"].as_str(), Some(service_name));
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let env: Vec<(&str, &str)> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap_or("")))
        .collect();
    let value = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    assert_eq!(
        value("SLUICE_ADVERTISE_URL"),
        Some(format!("http://$(SLUICE_INSTANCE).{service_name}:9464").as_str())
    );
    let state = value("SLUICE_STATE_DIR").unwrap();
    assert_eq!(container["volumeMounts"][0]["mountPath"].as_str(), Some(state));
    assert_eq!(
        container["volumeMounts"][0]["name"],
        set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    );
    assert_eq!(container["ports"][0]["containerPort"].as_u64(), Some(9464));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"));
    for s in &services {
        assert_eq!(s["spec"]["ports"][0]["port"].as_u64(), Some(9464));
    }
    // Prometheus scrapes a path the processor serves.
    let monitor = &yaml_documents("deploy/k8s/base/servicemonitor.yaml")[0];
    let metrics = monitor["spec"]["endpoints"][0]["path"].as_str().unwrap();
    let (_, run_help) = help(&["run"]);
    assert!(run_help.contains(metrics), "sluice run serves {metrics}");
    // The alerts Deployment runs a command the binary has.
    let alerts = yaml_documents("deploy/k8s/base/alerts.yaml")
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("the alerts Deployment");
    let args: Vec<&str> = alerts["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(help(&args).0, "sluice {args:?}");
    // The Job's commands parse, and the pipelines it publishes are valid.
    let job = &yaml_documents("deploy/k8s/base/topics-job.yaml")[0];
    let script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .unwrap();
    for command in script.split("&&") {
        let words: Vec<&str> = command.split_whitespace().skip(1).collect();
        assert!(help(&words).0, "sluice {words:?}");
    }
    let pipelines = tempfile::tempdir().unwrap();
    let map = &yaml_documents("deploy/k8s/base/configmap-pipelines.yaml")[0];
    for (name, text) in map["data"].as_mapping().unwrap() {
        std::fs::write(pipelines.path().join(name.as_str().unwrap()), text.as_str().unwrap()).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["config", "validate"])
        .arg(pipelines.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Every file the kustomizations name exists, and every settings file they mount
    // (sluice.toml, SLUICE_CONFIG) is one the binary reads: known keys, values its flags
    // take, [kafka] properties it accepts, with the ${env:...} credentials the pods get from
    // the Secret. `config validate` reads them all without a broker.
    let mut settings_files = 0;
    for dir in ["deploy/k8s", "deploy/k8s/base", "deploy/k8s/overlays/production"] {
        let kustomization = &yaml_documents(&format!("{dir}/kustomization.yaml"))[0];
        for resource in kustomization["resources"].as_sequence().unwrap() {
            let resource = resource.as_str().unwrap();
            assert!(repo().join(dir).join(resource).exists(), "{dir}: {resource}");
        }
        let generated = kustomization["configMapGenerator"]
            .as_sequence()
            .into_iter()
            .flatten()
            .flat_map(|g| g["files"].as_sequence().into_iter().flatten());
        for file in generated {
            let file = repo().join(dir).join(file.as_str().unwrap());
            assert!(file.exists(), "{}", file.display());
            if file.extension().is_some_and(|e| e == "toml") {
                settings_files += 1;
                let mut validate = Command::new(env!("CARGO_BIN_EXE_sluice"));
                // Only the file's settings (the test run's own SLUICE_* are for its broker).
                for (name, _) in std::env::vars_os().filter(|(n, _)| n.to_string_lossy().starts_with("SLUICE_")) {
                    validate.env_remove(name);
                }
                let out = validate
                    .arg("--config")
                    .arg(&file)
                    .args(["config", "validate"])
                    .arg(pipelines.path())
                    .env("KAFKA_SASL_USERNAME", "sluice")
                    .env("KAFKA_SASL_PASSWORD", "not-a-real-password")
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}: {}{}",
                    file.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    assert_eq!(settings_files, 2, "the base's sluice.toml and the production overlay's");
}

#[test]
fn connect_sinks_read_the_events_topic_into_the_documented_table() {
    let schema: Json = serde_json::from_str(&read("schemas/event.avsc")).unwrap();
    let fields: Vec<&str> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let topics: Yaml = serde_yaml_ng::from_str(&read("topics/topics.yaml")).unwrap();
    assert!(topics["topics"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|t| t["name"].as_str() == Some("events")));
    for file in [
        "jdbc-postgres-sink",
        "jdbc-postgres-sink-json",
        "s3-sink",
        "opensearch-sink",
    ] {
        let sink: Json = serde_json::from_str(&read(&format!("deploy/connect/{file}.json"))).unwrap();
        assert_eq!(
            sink["config"]["topics"], "sluice.events",
            "{file}: the default prefix's events topic"
        );
        assert!(sink["name"].is_string());
    }
    let jdbc: Json = serde_json::from_str(&read("deploy/connect/jdbc-postgres-sink.json")).unwrap();
    assert_eq!(jdbc["config"]["insert.mode"], "upsert");
    assert_eq!(jdbc["config"]["pk.fields"], "eventId");
    let table = jdbc["config"]["table.name.format"].as_str().unwrap();
    // The table's columns are exactly the event's fields.
    let sql = read("deploy/connect/events-table.sql");
    let create = &sql[sql
        .find(&format!("CREATE TABLE IF NOT EXISTS {table}"))
        .expect("the table is created")..];
    let body = &create[create.find('(').unwrap() + 1..create.find(");").unwrap()];
    let columns: Vec<&str> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .map(|l| l.split('"').next().unwrap())
        .collect();
    assert_eq!(columns, fields);
    assert!(body.contains("\"eventId\"    TEXT PRIMARY KEY"));
    let compose = read("deploy/compose.yaml");
    assert!(compose.contains("./connect/events-table.sql") && compose.contains("./connect/jdbc-postgres-sink.json"));
}
