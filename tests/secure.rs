//! Kafka over TLS with SASL/SCRAM: deploy/test.sh starts a second broker that requires both
//! (SLUICE_TEST_SECURE_*: its address, its CA, a user and a password made up for the run).
//! Every command reaches it through the config file's `[kafka]` table, the password read
//! from a file; the password never shows in logs, events, the API or `--help`; a wrong
//! password and an untrusted certificate stop a command at once, saying which.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{http_get, one_job_over, repo, wait_until};

struct Secure {
    brokers: String,
    ca: String,
    user: String,
    password: String,
    dir: tempfile::TempDir,
    prefix: String,
}

impl Secure {
    fn new(name: &str) -> Secure {
        let var = |v: &str| {
            std::env::var(v)
                .unwrap_or_else(|_| panic!("{v} is not set: run deploy/test.sh, which starts the TLS+SASL broker"))
        };
        Secure {
            brokers: var("SLUICE_TEST_SECURE_BROKERS"),
            ca: var("SLUICE_TEST_SECURE_CA"),
            user: var("SLUICE_TEST_SECURE_USER"),
            password: var("SLUICE_TEST_SECURE_PASSWORD"),
            dir: tempfile::tempdir().unwrap(),
            prefix: format!(
                "it-{name}-{}-{}.",
                std::process::id(),
                chrono::Utc::now().timestamp_millis()
            ),
        }
    }

    /// A config file for this broker with `password`, read from a file; `ca`: trust the
    /// broker's CA or not.
    fn config(&self, name: &str, password: &str, ca: bool) -> PathBuf {
        let secret = self.dir.path().join(format!("{name}.password"));
        std::fs::write(&secret, format!("{password}\n")).unwrap();
        let path = self.dir.path().join(format!("{name}.toml"));
        let ca = if ca {
            format!("\"ssl.ca.location\" = \"{}\"\n", self.ca)
        } else {
            String::new()
        };
        std::fs::write(
            &path,
            format!(
                "brokers = \"{}\"\nbroker-quirks = \"tansu\"\ntopic-prefix = \"{}\"\nstate-dir = \"{}\"\nlog = \"debug\"\n\n[kafka]\n\
                 \"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
                 \"sasl.username\" = \"{}\"\n\"sasl.password\" = \"${{file:{}}}\"\n{ca}",
                self.brokers,
                self.prefix,
                self.dir.path().join("state").display(),
                self.user,
                secret.display()
            ),
        )
        .unwrap();
        path
    }

    /// `sluice --config CONFIG ARGS...`, in a clean environment (no SLUICE_* from outside).
    fn sluice(&self, config: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")) {
            command.env_remove(k);
        }
        command.current_dir(repo()).arg("--config").arg(config).args(args);
        command
    }

    fn run(&self, config: &Path, args: &[&str]) -> (Option<i32>, String, String, Duration) {
        let started = Instant::now();
        let Output { status, stdout, stderr } = self.sluice(config, args).output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (status.code(), text(&stdout), text(&stderr), started.elapsed())
    }
}

#[test]
fn the_processor_runs_over_tls_and_sasl_and_never_shows_the_password() {
    let s = Secure::new("secure");
    let config = s.config("good", &s.password, true);
    let (code, out, err, _) = s.run(&config, &["topics", "apply", "--dir", "topics"]);
    assert_eq!(code, Some(0), "topics apply over SASL_SSL\n{out}\n{err}");
    let (_processor, addr, log) = one_job_over(s.dir.path(), "secure-gold", &|args| s.run(&config, args), &|args| {
        s.sluice(&config, args)
    });
    let log_tail = || std::fs::read_to_string(&log).unwrap_or_default();

    // Everything Sluice printed or published: the log (at debug), the events, the API, the
    // metrics and the help (with the config file in force).
    let (_, events, _, _) = s.run(&config, &["events", "tail", "--output", "json"]);
    assert!(events.contains("JOB_COMPLETED"), "{events}");
    let (_, help, _, _) = s.run(&config, &["run", "--help"]);
    let shown = [
        log_tail(),
        events,
        http_get(&addr, "/api/pipelines/secure-gold").unwrap().1,
        http_get(&addr, "/metrics").unwrap().1,
        help,
    ];
    for text in &shown {
        assert!(
            !text.contains(&s.password),
            "the password shows in:\n{}",
            &text[..text.len().min(4000)]
        );
    }
    assert!(log_tail().contains("DEBUG"), "the log was at debug level");
}

#[test]
fn a_wrong_password_or_an_untrusted_certificate_stops_a_command_at_once_saying_which() {
    let s = Secure::new("refused");
    let wrong = format!("not-{}", s.password);
    let cases = [
        ("wrong-password", s.config("wrong", &wrong, true), "SASL"),
        (
            "untrusted-certificate",
            s.config("untrusted", &s.password, false),
            "certificate verify failed",
        ),
    ];
    for (name, config, says) in &cases {
        for args in [&["topics", "apply", "--dir", "topics"][..], &["run"][..]] {
            let (code, out, err, took) = s.run(config, args);
            assert_ne!(code, Some(0), "{name}: {args:?} must fail\n{out}\n{err}");
            assert!(err.contains(says), "{name}: {args:?} says why\n{err}");
            assert!(
                took < Duration::from_secs(20),
                "{name}: {args:?} failed only after {took:?}"
            );
            assert!(!err.contains(&wrong) && !err.contains(&s.password), "{name}: {err}");
        }
    }
}

/// A client properties file as Confluent Cloud's console writes it for Java clients (the
/// brokers in it, a single-quoted JAAS entry, `acks=all`, a serializer class), with a PEM
/// trust store for this broker's CA: taken unchanged, with no `--brokers` and no config file.
#[test]
fn a_confluent_style_client_properties_file_is_all_a_command_needs() {
    let s = Secure::new("properties");
    let file = |name: &str, password: &str| {
        let path = s.dir.path().join(format!("{name}.properties"));
        std::fs::write(
            &path,
            format!(
                "# Required connection configs for Kafka producer, consumer, and admin\n\
                 bootstrap.servers={}\nsecurity.protocol=SASL_SSL\n\
                 sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username='{}' password='{password}';\n\
                 sasl.mechanism=SCRAM-SHA-512\nclient.dns.lookup=use_all_dns_ips\nsession.timeout.ms=45000\nacks=all\n\
                 ssl.truststore.type=PEM\nssl.truststore.location={}\n\
                 key.serializer=org.apache.kafka.common.serialization.StringSerializer\n",
                s.brokers, s.user, s.ca
            ),
        )
        .unwrap();
        path
    };
    let run = |properties: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")) {
            command.env_remove(k);
        }
        let args = [
            "--broker-quirks",
            "tansu",
            "--topic-prefix",
            &s.prefix,
            "--command-config",
        ];
        let out = (command.current_dir(repo()).args(args).arg(properties))
            .args(["topics", "apply", "--dir", "topics"])
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = run(&file("good", &s.password));
    assert_eq!(
        code,
        Some(0),
        "topics apply with the properties file alone\n{out}\n{err}"
    );
    assert!(err.contains("key.serializer"), "the skipped setting is named\n{err}");
    assert!(!out.contains(&s.password) && !err.contains(&s.password));
    // The file's credentials are the ones used: a wrong password in it is refused.
    let wrong = format!("not-{}", s.password);
    let (code, out, err) = run(&file("wrong", &wrong));
    assert_ne!(code, Some(0), "a wrong password in the file must fail\n{out}\n{err}");
    assert!(err.contains("SASL") && !err.contains(&wrong), "{err}");
}

#[test]
fn the_help_never_shows_environment_values() {
    let secret = "hunter2-in-a-url";
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--help"])
        .env(
            "SLUICE_SCHEMA_REGISTRY_URL",
            format!("https://sluice:{secret}@registry.internal"),
        )
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("SLUICE_SCHEMA_REGISTRY_URL"), "{help}");
    assert!(!help.contains(secret), "{help}");
}

/// Confluent Cloud's OAuth `client.properties` (client credentials against an identity
/// provider's token endpoint) works unchanged: librdkafka, built with curl, asks the token
/// endpoint (a loopback one speaking OAuth 2.0's client credentials grant) for a token with
/// the file's client id, secret and scope. What the broker then does with the token is not
/// shown: tansu takes no OAUTHBEARER.
#[test]
fn an_oauth_client_properties_file_fetches_its_token_from_the_identity_provider() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<crate::support::Request>>> = Arc::default();
    let record = seen.clone();
    // A JWT (unsigned: librdkafka reads its subject and expiry, the broker would check it).
    let jwt = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJzbHVpY2UtYXBwIiwiaWF0IjoxNzk1MDAwMDAwLCJleHAiOjQxMDI0NDQ4MDB9.c2ln";
    let idp = crate::support::serve(move |r| {
        record.lock().unwrap().push(r.clone());
        let token = serde_json::json!({"access_token": jwt, "token_type": "bearer", "expires_in": 3600});
        (200, token.to_string())
    });
    let dir = tempfile::tempdir().unwrap();
    let properties = dir.path().join("client.properties");
    std::fs::write(
        &properties,
        format!(
            "bootstrap.servers={}\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n\
             sasl.oauthbearer.token.endpoint.url={idp}/oauth2/v1/token\n\
             sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler\n\
             sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\\n  \
             clientId='sluice-app' \\\n  scope='kafka' \\\n  clientSecret='s3cr=et' \\\n  \
             extension_logicalCluster='lkc-abc12' \\\n  extension_identityPoolId='pool-XyZ';\n",
            crate::support::brokers()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")) {
        command.env_remove(k);
    }
    let log = dir.path().join("stderr.log");
    let mut child = command
        .current_dir(repo())
        .args(["--topic-prefix", "it-oauth.", "--command-config"])
        .arg(&properties)
        .args(["topics", "apply", "--dir", "topics"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until(
        "the token request",
        Duration::from_secs(30),
        || std::fs::read_to_string(&log).unwrap_or_default(),
        || !seen.lock().unwrap().is_empty(),
    );
    let _ = child.kill();
    let _ = child.wait();
    let request = seen.lock().unwrap()[0].clone();
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/oauth2/v1/token")
    );
    // RFC 6749 client credentials: the client authenticates with HTTP Basic.
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some("Basic c2x1aWNlLWFwcDpzM2NyPWV0"),
        "{}",
        request.raw
    );
    assert!(
        request.body.contains("grant_type=client_credentials"),
        "{}",
        request.body
    );
    assert!(request.body.contains("scope=kafka"), "{}", request.body);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains("s3cr=et"), "the client secret is never logged");
}
