//! AWS credentials as the AWS SDKs find them (the default provider chain), end to end: the
//! processor runs with no static keys, finds credentials at an EC2 instance metadata
//! endpoint (IMDSv2, served here on loopback with its real paths and headers) or through
//! web identity with moto's STS, and signs a Glue job's calls with them. The Glue endpoint
//! is a loopback server speaking Glue's JSON protocol, so each call's signing key is seen
//! where it lands.

use chrono::Utc;
use serde_json::{json, Value};
use sluice::core::events::EventType::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::support::{pipeline, serve, serve_with_headers, World};

/// One signed call as the Glue endpoint saw it.
#[derive(Debug, Clone)]
struct Seen {
    operation: String,
    access_key: String,
    session_token: Option<String>,
}

/// A Glue endpoint: StartJobRun answers a run id; GetJobRun says RUNNING until `runs_for`
/// status checks have passed, then SUCCEEDED. Returns its URL and what it saw.
fn glue(runs_for: usize) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let log = seen.clone();
    let url = serve(move |request| {
        let operation = request.headers.get("x-amz-target").cloned().unwrap_or_default();
        let authorization = request.headers.get("authorization").cloned().unwrap_or_default();
        let access_key = authorization
            .split("Credential=")
            .nth(1)
            .and_then(|c| c.split('/').next())
            .unwrap_or("")
            .to_string();
        let mut log = log.lock().unwrap();
        log.push(Seen {
            operation: operation.clone(),
            access_key,
            session_token: request.headers.get("x-amz-security-token").cloned(),
        });
        let checks = log.iter().filter(|s| s.operation.ends_with("GetJobRun")).count();
        match operation.as_str() {
            "AWSGlue.StartJobRun" => (200, json!({"JobRunId": "jr_1"}).to_string()),
            "AWSGlue.GetJobRun" => {
                let state = if checks > runs_for { "SUCCEEDED" } else { "RUNNING" };
                (200, json!({"JobRun": {"Id": "jr_1", "JobRunState": state}}).to_string())
            }
            _ => (400, json!({"__type": "UnknownOperationException"}).to_string()),
        }
    });
    (url, seen)
}

fn glue_job(endpoint: &str, role: Option<&str>) -> Value {
    let mut config = json!({"jobName": "nightly", "region": "us-east-1", "endpointUrl": endpoint});
    if let Some(role) = role {
        config["roleArn"] = json!(role);
    }
    json!({"type": "glue", "config": config, "pollInterval": "1s", "maxRetries": 0})
}

/// A world whose processors find no credentials but the ones a test points them at: no
/// keys, no shared files, no metadata endpoint unless set.
fn isolated(name: &str) -> World {
    let mut w = World::new(name);
    let inherited = std::env::vars().map(|(k, _)| k).filter(|k| k.starts_with("AWS_"));
    w.unset_env.extend(inherited);
    set(
        &mut w,
        &[
            ("AWS_CONFIG_FILE", "/nonexistent/aws-config"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    w
}

/// Sets variables in the world's processors' environment (the last value of a name wins).
fn set(w: &mut World, vars: &[(&str, &str)]) {
    w.env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
}

fn trigger(w: &World, pipeline: &str) {
    w.sensor(pipeline, "row-count", json!({"count": 5000}));
    w.sensor(pipeline, "upstream", json!({"status": "ready"}));
}

/// IMDSv2 on loopback: a session token first (PUT), then the role's name and its
/// credentials, each asked with that token. The `n`th credentials handed out are
/// `ASIAIMDS{n}`, expiring `lifetime` after they are handed out.
fn metadata_endpoint(lifetime: chrono::TimeDelta) -> (String, Arc<Mutex<BTreeMap<String, usize>>>) {
    const TOKEN: &str = "imds-session-token";
    let asked = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let log = asked.clone();
    let url = serve_with_headers(move |request| {
        let mut asked = log.lock().unwrap();
        *asked.entry(format!("{} {}", request.method, request.path)).or_default() += 1;
        let plain = |body: &str| {
            (
                200,
                vec![("content-type".into(), "text/plain".into())],
                body.to_string(),
            )
        };
        if request.method == "PUT" && request.path == "/latest/api/token" {
            let ttl = request.headers.get("x-aws-ec2-metadata-token-ttl-seconds");
            // The token's lifetime comes back beside it, as IMDS answers.
            return match ttl {
                Some(ttl) => (
                    200,
                    vec![("x-aws-ec2-metadata-token-ttl-seconds".into(), ttl.clone())],
                    TOKEN.to_string(),
                ),
                None => (400, vec![], String::new()),
            };
        }
        if request.headers.get("x-aws-ec2-metadata-token").map(String::as_str) != Some(TOKEN) {
            return (401, vec![], String::new());
        }
        match request.path.as_str() {
            "/latest/meta-data/iam/security-credentials/" => plain("sluice-node-role"),
            "/latest/meta-data/iam/security-credentials/sluice-node-role" => {
                let n = asked
                    .get("GET /latest/meta-data/iam/security-credentials/sluice-node-role")
                    .copied()
                    .unwrap_or(1)
                    - 1;
                let body = json!({
                    "Code": "Success",
                    "LastUpdated": Utc::now().to_rfc3339(),
                    "Type": "AWS-HMAC",
                    "AccessKeyId": format!("ASIAIMDS{n}"),
                    "SecretAccessKey": format!("imds-secret-{n}"),
                    "Token": format!("imds-token-{n}"),
                    "Expiration": (Utc::now() + lifetime).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                });
                plain(&body.to_string())
            }
            _ => (404, vec![], String::new()),
        }
    });
    (url, asked)
}

/// On EC2 (or EKS nodes without IRSA) credentials come from instance metadata, and
/// temporary ones are fetched again before they expire: a run that outlives them is
/// checked with the next ones, never with expired ones.
#[test]
fn instance_metadata_credentials_sign_the_calls_and_are_renewed_before_they_expire() {
    let mut w = isolated("awsimds");
    // Five minutes and a few seconds: inside the refresh margin a few seconds from now.
    let (metadata, asked) = metadata_endpoint(chrono::TimeDelta::seconds(5 * 60 + 6));
    set(
        &mut w,
        &[
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &metadata),
        ],
    );
    let (endpoint, seen) = glue(12);
    w.start_with(&pipeline("awsimds", glue_job(&endpoint, None)));
    trigger(&w, "awsimds");
    let events = w.wait_for("awsimds", "the Glue run completed", |es| {
        es.iter().any(|e| e.kind == JOB_COMPLETED)
    });
    let seen = seen.lock().unwrap().clone();
    let starts: Vec<&Seen> = seen.iter().filter(|s| s.operation == "AWSGlue.StartJobRun").collect();
    assert_eq!(starts.len(), 1, "started once: {seen:?}\n{events:?}");
    assert_eq!(starts[0].access_key, "ASIAIMDS0", "{seen:?}");
    assert_eq!(starts[0].session_token.as_deref(), Some("imds-token-0"));
    let keys: Vec<&str> = seen.iter().map(|s| s.access_key.as_str()).collect();
    assert!(keys.contains(&"ASIAIMDS1"), "renewed within the run: {keys:?}");
    let renewed_at = keys.iter().position(|k| *k == "ASIAIMDS1").unwrap();
    assert!(
        keys[renewed_at..].iter().all(|k| *k != "ASIAIMDS0"),
        "never the old ones after: {keys:?}"
    );
    let asked = asked.lock().unwrap().clone();
    let fetched = asked["GET /latest/meta-data/iam/security-credentials/sluice-node-role"];
    assert!(
        fetched >= 2 && fetched < seen.len(),
        "kept between calls, fetched again as they near expiry ({fetched} fetches, {} calls): {asked:?}",
        seen.len()
    );
    assert!(asked.contains_key("PUT /latest/api/token"), "IMDSv2: {asked:?}");
}

/// EKS with IRSA: a web identity token file and a role, exchanged at STS (moto's) for
/// credentials; a job naming a role of its own assumes it from those.
#[test]
fn web_identity_credentials_from_sts_and_a_jobs_own_role() {
    let moto =
        std::env::var("SLUICE_TEST_MOTO").expect("SLUICE_TEST_MOTO is not set: run deploy/test.sh, which starts moto");
    let mut w = isolated("awsirsa");
    let token = w.scratch.path().join("web-identity-token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl").unwrap();
    set(
        &mut w,
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.to_str().unwrap()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/sluice-irsa"),
            ("AWS_ROLE_SESSION_NAME", "sluice-test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL_STS", moto.trim()),
        ],
    );
    let (endpoint, seen) = glue(0);
    w.config(&pipeline(
        "awsirsa-own",
        glue_job(&endpoint, Some("arn:aws:iam::123456789012:role/etl")),
    ));
    w.start_with(&pipeline("awsirsa", glue_job(&endpoint, None)));
    trigger(&w, "awsirsa");
    trigger(&w, "awsirsa-own");
    for p in ["awsirsa", "awsirsa-own"] {
        w.wait_for(p, "the Glue run completed", |es| {
            es.iter().any(|e| e.kind == JOB_COMPLETED)
        });
    }
    let seen = seen.lock().unwrap().clone();
    let starts: Vec<&Seen> = seen.iter().filter(|s| s.operation == "AWSGlue.StartJobRun").collect();
    assert_eq!(starts.len(), 2, "one start per pipeline: {seen:?}");
    for s in &starts {
        assert!(
            s.access_key.starts_with("ASIA") && s.session_token.is_some(),
            "temporary credentials from STS: {s:?}"
        );
    }
    assert_ne!(
        starts[0].access_key, starts[1].access_key,
        "the job with a role of its own signs with that role's credentials: {starts:?}"
    );
}

/// Nowhere to find credentials: the trigger is refused at once, naming where the chain
/// looked, and the job is never called.
#[test]
fn no_credentials_anywhere_refuses_the_trigger_naming_where_it_looked() {
    let mut w = isolated("awsnone");
    let (endpoint, seen) = glue(0);
    w.start_with(&pipeline("awsnone", glue_job(&endpoint, None)));
    trigger(&w, "awsnone");
    let events = w.wait_for("awsnone", "the trigger refused", |es| {
        es.iter().any(|e| {
            e.message.contains("no AWS credentials")
                || e.detail.values().any(|v| v.to_string().contains("no AWS credentials"))
        })
    });
    let refused = events
        .iter()
        .find(|e| {
            e.message.contains("no AWS credentials")
                || e.detail.values().any(|v| v.to_string().contains("no AWS credentials"))
        })
        .unwrap();
    let text = format!("{} {:?}", refused.message, refused.detail);
    assert!(
        text.contains("AWS_WEB_IDENTITY_TOKEN_FILE") && text.contains("instance metadata"),
        "{text}"
    );
    assert!(seen.lock().unwrap().is_empty(), "the job was never called");
}
