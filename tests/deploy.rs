//! The deployment files checked against the code they deploy: every flag, environment
//! variable, subcommand, port, path, topic and column they name must be one the binary and
//! the schemas actually have, and every metric and label the dashboard and the alert rules
//! query one the processor exposes. No broker needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use prometheus_client::metrics::MetricType;
use serde_json::Value as Json;
use serde_json::Value as Yaml;
use sluice::core::events::EventType;
use sluice::core::partitioning::PartitionId;
use sluice::runtime::instances::PeerPattern;
use sluice::runtime::telemetry::Telemetry;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_documents(path: &str) -> Vec<Yaml> {
    let text = read(path);
    sluice::core::config::yaml::from_str_multiple(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
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
        &["alerts", "route"],
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
        Yaml::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("environment", Yaml::Object(env)) => out.extend(env.keys().cloned()),
                    ("env", Yaml::Array(env)) => {
                        out.extend(env.iter().filter_map(|e| e["name"].as_str().map(str::to_string)));
                    }
                    _ => {}
                }
                env_names(v, out);
            }
        }
        Yaml::Array(items) => items.iter().for_each(|i| env_names(i, out)),
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
fn the_kubernetes_settings_run_no_shell_commands() {
    for file in [
        "deploy/k8s/base/sluice.toml",
        "deploy/k8s/overlays/production/sluice.toml",
    ] {
        let settings: toml::Table = read(file).parse().unwrap();
        let disabled = settings.get("disable-job-type").and_then(|v| v.as_array());
        assert!(
            disabled.is_some_and(|types| types.iter().any(|t| t.as_str() == Some("command"))),
            "{file} turns `command` jobs off: {disabled:?}"
        );
    }
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
        "deploy/k8s/base/setup-job.yaml",
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
    let services = compose["services"].as_object().unwrap();
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
    // The topics job's commands parse, and the folders they read are in the image (the
    // topic definitions) or mounted from the checkout (the examples: never in the image).
    let topics = &compose["services"]["topics"];
    let mounts: Vec<&str> = topics["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str()?.split(':').nth(1))
        .collect();
    let script = topics["command"][0].as_str().unwrap();
    for command in script.split("&&") {
        let words: Vec<&str> = command.split_whitespace().skip(1).collect();
        assert!(help(&words).0, "sluice {words:?} is a valid command line");
        for path in words.iter().filter(|w| w.starts_with("/etc/sluice")) {
            assert!(
                read("Dockerfile").contains(&format!(" {path}")) || mounts.contains(path),
                "the image or a mount has {path}"
            );
        }
    }
    assert!(!read("Dockerfile").contains("examples/"), "no examples in the image");
    let alerts: Vec<&str> = compose["services"]["alerts"]["command"]
        .as_array()
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
        let url = format!("http://{instance}:9464");
        assert_eq!(env["SLUICE_ADVERTISE_URL"].as_str(), Some(url.as_str()));
        assert!(
            admitted(env["SLUICE_PEERS"].as_str().unwrap(), &url),
            "{instance} forwards to the other"
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
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap_or("")))
        .collect();
    let value = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    let advertised = format!("http://$(SLUICE_INSTANCE).{service_name}.$(POD_NAMESPACE).svc:9464");
    assert_eq!(value("SLUICE_ADVERTISE_URL"), Some(advertised.as_str()));
    // As the kubelet expands them: every pod's URL is a peer of the others, and nothing else.
    let expand = |v: &str, pod: &str| v.replace("$(SLUICE_INSTANCE)", pod).replace("$(POD_NAMESPACE)", "prod");
    let peers = expand(value("SLUICE_PEERS").unwrap(), "sluice-0");
    assert!(admitted(&peers, &expand(&advertised, "sluice-1")), "{peers}");
    assert!(!admitted(&peers, "http://evil.sluice:9464"), "{peers}");
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
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(help(&args).0, "sluice {args:?}");
    // The Job's commands parse, and the pipelines it publishes are valid.
    let job = &yaml_documents("deploy/k8s/base/setup-job.yaml")[0];
    let script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .unwrap();
    for command in script.split("&&") {
        let words: Vec<&str> = command.split_whitespace().skip(1).collect();
        assert!(help(&words).0, "sluice {words:?}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["config", "validate", "deploy/k8s/base/pipelines"])
        .args(["--calendars", "deploy/k8s/base/calendars"])
        .current_dir(repo())
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
    let mut listed = std::collections::HashSet::new();
    for dir in ["deploy/k8s", "deploy/k8s/base", "deploy/k8s/overlays/production"] {
        let kustomization = &yaml_documents(&format!("{dir}/kustomization.yaml"))[0];
        for resource in kustomization["resources"].as_array().unwrap() {
            let resource = resource.as_str().unwrap();
            assert!(repo().join(dir).join(resource).exists(), "{dir}: {resource}");
        }
        let generated = kustomization["configMapGenerator"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["files"].as_array().into_iter().flatten());
        for file in generated {
            listed.insert(repo().join(dir).join(file.as_str().unwrap()));
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
                    .args(["config", "validate", "deploy/k8s/base/pipelines"])
                    .args(["--calendars", "deploy/k8s/base/calendars"])
                    .current_dir(repo())
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
    // The alert routes files are ones `alerts route` takes, and every secret they read is a
    // key of the Secret, mounted where they look.
    let secret = &yaml_documents("deploy/k8s/base/secret.example.yaml")[0];
    for file in [
        "deploy/k8s/base/alert-routes.yaml",
        "deploy/k8s/overlays/production/alert-routes.yaml",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["alerts", "route", "--check", "--routes", file])
            .current_dir(repo())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && said.contains("targets:"), "{file}: {said}");
        let routes = &yaml_documents(file)[0];
        for (name, target) in routes["targets"].as_object().unwrap() {
            for (field, value) in target.as_object().unwrap().iter().filter(|(k, _)| k.ends_with("File")) {
                let key = value.as_str().unwrap().strip_prefix("/run/secrets/sluice/");
                assert!(
                    key.is_some_and(|k| secret["stringData"].get(k).is_some()),
                    "{file}: target {name}'s {field} is not a key of secret.example.yaml under /run/secrets/sluice"
                );
            }
        }
    }
    // kustomize takes no folders: a pipeline or calendar file not named by the generator
    // would never be published.
    for folder in ["pipelines", "calendars"] {
        for entry in std::fs::read_dir(repo().join("deploy/k8s/base").join(folder)).unwrap() {
            let path = entry.unwrap().path();
            assert!(
                listed.contains(&path),
                "{} is not in base/kustomization.yaml",
                path.display()
            );
        }
    }
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
    let topics: Yaml = sluice::core::config::yaml::from_str(&read("topics/topics.yaml")).unwrap();
    assert!(topics["topics"]
        .as_array()
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

// ---- Monitoring: deploy/grafana/sluice.json and deploy/prometheus/alerts.yaml ----

/// Labels every scraped series carries besides its own: the scrape's `job` and `instance`, and
/// the Prometheus Operator's `namespace` and `pod`.
const TARGET_LABELS: [&str; 4] = ["job", "instance", "namespace", "pod"];

/// PromQL's aggregation operators.
const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Variables Grafana itself defines.
const GRAFANA_VARIABLES: [&str; 3] = ["__rate_interval", "__interval", "__range"];

/// What a processor serves on `/metrics`, by the names Prometheus stores: a counter as
/// `NAME_total`, a histogram as `NAME_bucket`, `NAME_sum` and `NAME_count`, a gauge as `NAME`.
struct Exposed {
    /// Each series name with the labels its samples carry.
    series: BTreeMap<String, BTreeSet<String>>,
    /// Registered counters and histograms, by their own names (no suffix).
    counters: BTreeSet<String>,
    histograms: BTreeSet<String>,
    /// The registered names (`process_*` included), each with the series it is exposed as.
    metrics: BTreeMap<String, Vec<String>>,
    /// Each histogram's largest finite bucket bound: no quantile of it goes above.
    top_bucket: BTreeMap<String, f64>,
}

impl Exposed {
    /// From a fresh `Telemetry` (what the binary registers), after one sample of every
    /// labelled metric so that each shows its labels.
    fn read() -> Exposed {
        let t = Telemetry::new();
        t.records_in("sluice.sensors", 1);
        t.record_out("sluice.events", 1);
        t.event("SLA_BREACH");
        t.sla_breach("SLA_BREACH", "gold", "analytics-team");
        t.dead_letter("sluice.sensors", "invalid");
        t.consumer_lag("sluice.sensors", PartitionId::new(0), 5);
        t.effect_outcome("http", "succeeded", 0.1);
        t.circuit("airflow.example", true);
        t.peer_clock_ahead("sluice-1", 0.2);
        t.clock_stepped(180.0);
        t.restore_progress(PartitionId::new(0), 10, 0, 0.5);
        t.state_size(PartitionId::new(0), 4096);
        t.state_reads(sluice::runtime::store::StateReads {
            cached: 3,
            decoded: 1,
            whole: 1,
        });
        t.rebalanced("assigned");
        t.forwarded("sluice.sensors", 1);
        t.forwarded_duplicates("sluice.sensors", 1);
        let text = t.encode_text();

        let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut top_bucket: BTreeMap<String, f64> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let end = line.find(['{', ' ']).unwrap_or_else(|| panic!("a sample line: {line}"));
            let name = &line[..end];
            let labels = series.entry(name.to_string()).or_default();
            if let Some(inside) = line[end..].strip_prefix('{') {
                // The values recorded above hold no commas, quotes or braces.
                let inside = &inside[..inside.find('}').unwrap()];
                for pair in inside.split(',') {
                    let (label, value) = pair.split_once('=').unwrap();
                    labels.insert(label.to_string());
                    let bound = value.trim_matches('"').parse::<f64>();
                    if let (Some(histogram), "le", Ok(bound)) = (name.strip_suffix("_bucket"), label, bound) {
                        if bound.is_finite() {
                            let top = top_bucket.entry(histogram.to_string()).or_insert(bound);
                            *top = top.max(bound);
                        }
                    }
                }
            }
        }

        let (mut counters, mut histograms, mut metrics) = (BTreeSet::new(), BTreeSet::new(), BTreeMap::new());
        for d in t.descriptors() {
            let names = match d.kind {
                MetricType::Counter => {
                    counters.insert(d.name.clone());
                    vec![format!("{}_total", d.name)]
                }
                MetricType::Histogram => {
                    histograms.insert(d.name.clone());
                    ["_bucket", "_sum", "_count"].map(|s| format!("{}{s}", d.name)).to_vec()
                }
                MetricType::Gauge => vec![d.name.clone()],
                other => panic!("{}: {other:?}, a kind this test does not know", d.name),
            };
            for name in &names {
                assert!(
                    series.contains_key(name),
                    "{name} is not in /metrics: record a sample of {} in Exposed::read\n{text}",
                    d.name
                );
            }
            metrics.insert(d.name.clone(), names);
        }
        // Read from /proc at each scrape, besides the registered ones.
        for name in ["process_resident_memory_bytes", "process_cpu_seconds_total"] {
            assert!(series.contains_key(name), "{name} in:\n{text}");
            metrics.insert(name.to_string(), vec![name.to_string()]);
        }
        Exposed {
            series,
            counters,
            histograms,
            metrics,
            top_bucket,
        }
    }

    /// The labels of the series `name`, or why Prometheus has no such series.
    fn labels(&self, name: &str) -> Result<&BTreeSet<String>, String> {
        if let Some(labels) = self.series.get(name) {
            return Ok(labels);
        }
        // A histogram's series are its name with a suffix: `_bucket` of a gauge is no series,
        // nor is a histogram's own name.
        Err(if self.histograms.contains(name) {
            format!("{name} is a histogram: its series are {name}_bucket, {name}_sum and {name}_count")
        } else if self.counters.contains(name) {
            format!("{name} is a counter: Prometheus stores it as {name}_total")
        } else {
            format!("{name}: the processor exposes no such metric")
        })
    }
}

/// A token of a PromQL expression; numbers and durations are `Num`, Grafana's `$name` and
/// `${name}` are `Var`, anything else one `Punct` per character.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Token<'a> {
    Ident(&'a str),
    Str(&'a str),
    Num(&'a str),
    Var(&'a str),
    Punct(char),
}

fn promql_tokens(expr: &str) -> Vec<Token<'_>> {
    let b = expr.as_bytes();
    let ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_' || c == b':';
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let (mut tokens, mut i) = (Vec::new(), 0);
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if matches!(c, b'"' | b'\'' | b'`') {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' && c != b'`' { 2 } else { 1 };
            }
            tokens.push(Token::Str(&expr[start + 1..i.min(b.len())]));
            i += 1;
        } else if c == b'$' {
            i += 1;
            let braced = b.get(i) == Some(&b'{');
            i += usize::from(braced);
            let name = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            tokens.push(Token::Var(&expr[name..i]));
            if braced {
                while i < b.len() && b[i] != b'}' {
                    i += 1;
                }
                i += 1;
            }
        } else if c.is_ascii_digit() || c == b'.' {
            while i < b.len() && (ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
            tokens.push(Token::Num(&expr[start..i]));
        } else if ident_start(c) {
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            tokens.push(Token::Ident(&expr[start..i]));
        } else {
            tokens.push(Token::Punct(c as char));
            i += 1;
        }
    }
    tokens
}

/// The index of the bracket that closes (or, backwards, opens) the one at `at`.
fn matching(tokens: &[Token], at: usize) -> Option<usize> {
    let (open, close, forward) = match tokens[at] {
        Token::Punct('(') => ('(', ')', true),
        Token::Punct(')') => (')', '(', false),
        _ => return None,
    };
    let mut depth = 0;
    let mut i = at;
    loop {
        match tokens[i] {
            Token::Punct(c) if c == open => depth += 1,
            Token::Punct(c) if c == close => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return Some(i);
        }
        i = if forward { i + 1 } else { i.checked_sub(1)? };
        if i >= tokens.len() {
            return None;
        }
    }
}

fn is_sluice_metric(name: &str) -> bool {
    name.starts_with("sluice_") || name.starts_with("process_")
}

/// Checks one PromQL expression against what the processor exposes: every `sluice_*` and
/// `process_*` series it names, the labels of their matchers (event types by name), and every
/// label of a `by (...)` over them. Adds what is wrong to `problems`; returns the metrics it
/// names and the labels its results can carry: those of its first `by (...)` when it
/// aggregates (written `AGG by (labels) (expr)`), else its series' own and the target's.
fn check_promql(
    place: &str,
    expr: &str,
    exposed: &Exposed,
    problems: &mut Vec<String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let tokens = promql_tokens(expr);
    let mut named = BTreeSet::new();
    let mut labels: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    let metric_labels = |name: &str| -> BTreeSet<String> {
        let mut all: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        all.extend(exposed.labels(name).into_iter().flatten().cloned());
        all
    };
    for (i, token) in tokens.iter().enumerate() {
        let Token::Ident(name) = *token else { continue };
        if !is_sluice_metric(name) {
            continue;
        }
        named.insert(name.to_string());
        if let Err(e) = exposed.labels(name) {
            problems.push(format!("{place}: {e}"));
            continue;
        }
        let own = metric_labels(name);
        labels.extend(own.iter().cloned());
        if tokens.get(i + 1) != Some(&Token::Punct('{')) {
            continue;
        }
        // Matchers: label, operator, "value", separated by commas.
        let mut j = i + 2;
        while let Some(Token::Ident(label)) = tokens.get(j) {
            let mut op = String::new();
            j += 1;
            while let Some(Token::Punct(c @ ('=' | '!' | '~'))) = tokens.get(j) {
                op.push(*c);
                j += 1;
            }
            let Some(Token::Str(value)) = tokens.get(j) else { break };
            if !own.contains(*label) {
                problems.push(format!(
                    "{place}: {name}{{{label}{op}...}}: {name} has the labels {own:?}"
                ));
            }
            if name == "sluice_events_total" && *label == "type" && matches!(op.as_str(), "=" | "=~") {
                for kind in value.split('|') {
                    if !EventType::ALL.iter().any(|t| t.name() == kind) {
                        problems.push(format!("{place}: {name}{{type{op}...}}: {kind} is no event type"));
                    }
                }
            }
            j += 1;
            if tokens.get(j) == Some(&Token::Punct(',')) {
                j += 1;
            }
        }
    }
    // `AGG by (labels) (expr)` and `AGG (expr) by (labels)`: the labels must be the metrics'.
    let aggregates = tokens
        .windows(2)
        .any(|w| matches!(w, [Token::Ident(op), Token::Ident("by") | Token::Punct('(')] if AGGREGATIONS.contains(op)));
    let mut result: Option<BTreeSet<String>> = None;
    for (i, token) in tokens.iter().enumerate() {
        if !matches!(token, Token::Ident("by")) || tokens.get(i + 1) != Some(&Token::Punct('(')) {
            continue;
        }
        let Some(close) = matching(&tokens, i + 1) else {
            problems.push(format!("{place}: unbalanced parentheses"));
            return (named, labels);
        };
        let grouped: Vec<&str> = tokens[i + 2..close]
            .iter()
            .filter_map(|t| match t {
                Token::Ident(l) => Some(*l),
                _ => None,
            })
            .collect();
        if result.is_none() {
            result = Some(grouped.iter().map(|l| l.to_string()).collect());
        }
        let scope = if tokens.get(close + 1) == Some(&Token::Punct('(')) {
            matching(&tokens, close + 1).map(|end| &tokens[close + 1..=end])
        } else {
            i.checked_sub(1)
                .and_then(|before| matching(&tokens, before).map(|start| &tokens[start..i]))
        };
        let Some(scope) = scope else {
            problems.push(format!("{place}: by ({grouped:?}) over nothing this test finds"));
            continue;
        };
        // (A metric the processor lacks is reported above.)
        for metric in scope.iter().filter_map(|t| match t {
            Token::Ident(m) if is_sluice_metric(m) && exposed.labels(m).is_ok() => Some(*m),
            _ => None,
        }) {
            let own = metric_labels(metric);
            for label in grouped.iter().filter(|l| !own.contains(**l)) {
                problems.push(format!(
                    "{place}: by ({label}) over {metric}, which has the labels {own:?}"
                ));
            }
        }
    }
    match result {
        Some(grouped) if aggregates => (named, grouped),
        None if aggregates => (named, BTreeSet::new()),
        _ => (named, labels),
    }
}

/// The Grafana variables (`$name`, `${name}`, `${name:format}`) an expression uses, in label
/// values too.
fn grafana_variables(expr: &str) -> Vec<&str> {
    expr.split('$')
        .skip(1)
        .map(|after| {
            let after = after.strip_prefix('{').unwrap_or(after);
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            &after[..end]
        })
        .collect()
}

/// Every panel of a dashboard, those inside rows included.
fn panels(dashboard: &Json) -> Vec<&Json> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

#[test]
fn grafana_dashboard_shows_metrics_the_processor_exposes() {
    let path = "deploy/grafana/sluice.json";
    let dashboard: Json = serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let exposed = Exposed::read();
    let mut problems = Vec::new();
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());

    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    let names: BTreeSet<&str> = variables.iter().map(|v| v["name"].as_str().unwrap()).collect();
    let source = variables
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a data source variable");
    assert_eq!(source["query"], "prometheus");
    let source_uid = format!("${{{}}}", source["name"].as_str().unwrap());
    assert!(names.contains("job") && names.contains("instance"), "{names:?}");
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .unwrap();
        let place = format!("{path}: variable {}", variable["name"]);
        check_promql(&place, query, &exposed, &mut problems);
        assert_eq!(
            variable["datasource"]["uid"].as_str(),
            Some(source_uid.as_str()),
            "{place}"
        );
    }

    let all = panels(&dashboard);
    let rows: Vec<&str> = all
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        rows,
        ["Overview", "Throughput", "Latency", "Effects", "State", "Process"]
    );
    let mut ids = BTreeSet::new();
    let mut shown = BTreeSet::new();
    for panel in &all {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        let id = panel["id"].as_u64().unwrap_or_else(|| panic!("{path}: {title}: no id"));
        assert!(ids.insert(id), "{path}: panel id {id} ({title}) is used twice");
        let grid = &panel["gridPos"];
        let [h, w, x, _] = ["h", "w", "x", "y"].map(|k| {
            grid[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{path}: {title}: gridPos.{k}"))
        });
        assert!(h > 0 && w > 0 && x + w <= 24, "{path}: {title}: gridPos {grid}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"].as_str(),
            Some(source_uid.as_str()),
            "{title}"
        );
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        for target in targets.unwrap_or_else(|| panic!("{path}: {title}: no targets")) {
            let expr = target["expr"].as_str().unwrap();
            let place = format!("{path}: {title}");
            let (named, labels) = check_promql(&place, expr, &exposed, &mut problems);
            shown.extend(named);
            let legend = target["legendFormat"].as_str().unwrap_or("");
            for part in legend.split("{{").skip(1) {
                let label = part.split("}}").next().unwrap().trim();
                if !labels.contains(label) {
                    problems.push(format!(
                        "{place}: legend {{{{{label}}}}}: the query's series have {labels:?}"
                    ));
                }
            }
            for var in grafana_variables(expr) {
                if !names.contains(var) && !GRAFANA_VARIABLES.contains(&var) {
                    problems.push(format!("{place}: ${var} is no variable of the dashboard"));
                }
            }
        }
    }
    // Every metric is on the dashboard: a new one needs a panel.
    for (metric, series) in &exposed.metrics {
        if !series.iter().any(|s| shown.contains(s)) {
            problems.push(format!("{path}: no panel shows {metric}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `README.md: Section → Bold paragraph; Section`: each section a heading of README.md, each
/// paragraph one that starts in bold in it.
fn check_runbook(place: &str, runbook: &str, readme: &str, problems: &mut Vec<String>) {
    let Some(references) = runbook.strip_prefix("README.md: ") else {
        problems.push(format!("{place}: runbook {runbook:?}: README.md: Section → Paragraph"));
        return;
    };
    for reference in references.split("; ") {
        let (heading, paragraph) = match reference.split_once(" → ") {
            Some((h, p)) => (h, Some(p)),
            None => (reference, None),
        };
        let start = readme
            .lines()
            .position(|l| l.trim_start_matches('#').trim() == heading && l.starts_with("##"));
        let Some(start) = start else {
            problems.push(format!("{place}: runbook: README.md has no section {heading:?}"));
            continue;
        };
        let section: Vec<&str> = readme
            .lines()
            .skip(start + 1)
            .take_while(|l| !l.starts_with("## ") && !l.starts_with("### "))
            .collect();
        if let Some(paragraph) = paragraph {
            if !section.iter().any(|l| l.starts_with(&format!("**{paragraph}"))) {
                problems.push(format!("{place}: runbook: {heading:?} has no paragraph {paragraph:?}"));
            }
        }
    }
}

#[test]
fn alert_rules_name_metrics_the_processor_exposes_and_readme_sections() {
    let path = "deploy/prometheus/alerts.yaml";
    let rules = &yaml_documents(path)[0];
    let exposed = Exposed::read();
    let readme = read("README.md");
    let mut problems = Vec::new();
    // The pods' job: the Service the ServiceMonitor scrapes them through (it sets no jobLabel).
    let monitor = &yaml_documents("deploy/k8s/base/servicemonitor.yaml")[0];
    assert!(monitor["spec"]["jobLabel"].is_null());
    let selector = monitor["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let service = yaml_documents("deploy/k8s/base/service.yaml")
        .into_iter()
        .find(|s| {
            let labels = s["metadata"]["labels"].as_object().unwrap();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .expect("the Service the ServiceMonitor selects");
    let job = service["metadata"]["name"].as_str().unwrap().to_string();

    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("an alert (no recording rules here)");
            let place = format!("{path}: {name}");
            assert!(alerts.insert(name.to_string()), "{place}: defined twice");
            let expr = rule["expr"].as_str().unwrap_or_else(|| panic!("{place}: expr"));
            let (_, labels) = check_promql(&place, expr, &exposed, &mut problems);

            let tokens = promql_tokens(expr);
            for window in tokens.windows(5) {
                if let [Token::Ident("up"), Token::Punct('{'), Token::Ident("job"), Token::Punct('='), Token::Str(j)] =
                    window
                {
                    if *j != job {
                        problems.push(format!("{place}: up{{job=\"{j}\"}}: the pods' job is {job}"));
                    }
                }
            }
            if tokens.contains(&Token::Ident("histogram_quantile")) {
                if let [.., Token::Punct('>'), Token::Num(threshold)] = tokens.as_slice() {
                    let threshold: f64 = threshold.parse().unwrap();
                    for metric in tokens.iter().filter_map(|t| match t {
                        Token::Ident(m) => m.strip_suffix("_bucket"),
                        _ => None,
                    }) {
                        let top = exposed.top_bucket.get(metric).copied().unwrap_or(f64::INFINITY);
                        if threshold >= top {
                            problems.push(format!(
                                "{place}: a quantile of {metric} never exceeds its last bucket, {top} s: > {threshold} never fires"
                            ));
                        }
                    }
                }
            }
            for key in ["summary", "description", "runbook"] {
                if rule["annotations"][key].as_str().is_none_or(|v| v.trim().is_empty()) {
                    problems.push(format!("{place}: no {key} annotation"));
                }
            }
            if !matches!(
                rule["labels"]["severity"].as_str(),
                Some("critical" | "warning" | "info")
            ) {
                problems.push(format!("{place}: severity critical, warning or info"));
            }
            check_runbook(
                &place,
                rule["annotations"]["runbook"].as_str().unwrap_or(""),
                &readme,
                &mut problems,
            );
            for (key, text) in rule["annotations"].as_object().into_iter().flatten() {
                let (key, text) = (key.as_str(), text.as_str().unwrap_or(""));
                // Template labels are ones the alert's series carry.
                for part in text.split("$labels.").skip(1) {
                    let label: String = part.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !labels.contains(&label) {
                        problems.push(format!(
                            "{place}: {key}: $labels.{label}: the alert's series carry {labels:?}"
                        ));
                    }
                }
                // Commands are ones the binary takes.
                for command in text.split('`').skip(1).step_by(2) {
                    if let Some(args) = command.strip_prefix("sluice ") {
                        let args: Vec<&str> = args.split_whitespace().collect();
                        if !help(&args).0 {
                            problems.push(format!("{place}: {key}: `{command}` is no valid command line"));
                        }
                    }
                }
            }
        }
    }
    // What README.md's Telemetry section promises.
    for name in [
        "SluiceSlaBreached",
        "SluiceDeadLettersGrowing",
        "SluiceConsumerLagHigh",
        "SluicePartitionStuck",
        "SluiceNotReady",
        "SluiceDown",
        "SluiceAbsent",
        "SluiceCircuitOpen",
        "SluiceTimersLate",
        "SluiceRetriesExhausted",
    ] {
        if !alerts.contains(name) {
            problems.push(format!("{path}: no alert {name}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The Prometheus Operator's copy in the Kubernetes base holds the same groups.
    let operator = &yaml_documents("deploy/k8s/base/prometheusrule.yaml")[0];
    assert_eq!(operator["kind"].as_str(), Some("PrometheusRule"));
    assert!(
        operator["spec"]["groups"] == rules["groups"],
        "deploy/k8s/base/prometheusrule.yaml's spec.groups differ from {path}'s groups: copy them over"
    );
}

/// Whether `url` is admitted by `peers`, a SLUICE_PEERS value (patterns separated by commas).
fn admitted(peers: &str, url: &str) -> bool {
    peers.split(',').any(|p| p.parse::<PeerPattern>().unwrap().admits(url))
}
