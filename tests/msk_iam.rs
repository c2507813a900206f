//! AWS MSK IAM, end to end as far as this machine can go: a command given AWS's own
//! `client.properties` for MSK IAM connects to a broker that speaks Kafka's protocol for
//! ApiVersions, SaslHandshake and SaslAuthenticate (MSK cannot run here, and tansu takes no
//! OAUTHBEARER). The broker checks the token as MSK would: a SigV4 presigned
//! `kafka-cluster:Connect` URL, its signature recomputed here from the secret key, written
//! from the SigV4 specification rather than with the signing library Sluice uses. It then
//! refuses the login, saying what it found, since it has no cluster to serve.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::support::{free_port, http_get, one_job_over, repo, wait_until, Instances, OwnBroker};

const ACCESS_KEY: &str = "AKIAMSKTEST0001";
const SECRET_KEY: &str = "msk/secret+key=do-not-log";
const SESSION_TOKEN: &str = "FwoGZXIvYXdzEMSK//session+token=";
const REGION: &str = "eu-west-1";

/// What the broker made of each connection's token, when: the session token it was signed
/// with, or what was wrong (no token at all included).
type Verdicts = Arc<Mutex<Vec<(Instant, Result<String, String>)>>>;

/// Whether a session token is one the credentials' issuer handed out and has not expired.
type Sessions = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// A broker that takes SASL/OAUTHBEARER and checks MSK IAM tokens. With an `upstream` (a
/// tansu port), a connection whose token verifies is then forwarded to it as it is: a real
/// broker behind MSK IAM. Without one, every login is refused, saying what the token was
/// found to be.
struct MskBroker {
    verdicts: Verdicts,
    /// The connections forwarded, for [`MskBroker::cut`].
    forwarded: Arc<Mutex<Vec<TcpStream>>>,
}

impl MskBroker {
    fn start(listener: TcpListener, upstream: Option<u16>, sessions: Sessions) -> MskBroker {
        let broker = MskBroker {
            verdicts: Arc::default(),
            forwarded: Arc::default(),
        };
        let (verdicts, forwarded) = (broker.verdicts.clone(), broker.forwarded.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (verdicts, forwarded, sessions) = (verdicts.clone(), forwarded.clone(), sessions.clone());
                std::thread::spawn(move || serve(stream, upstream, &verdicts, &forwarded, &*sessions));
            }
        });
        broker
    }

    /// What the broker made of the tokens it was sent, in order.
    fn verdicts(&self) -> Vec<Result<String, String>> {
        self.verdicts.lock().unwrap().iter().map(|(_, v)| v.clone()).collect()
    }

    /// Closes every forwarded connection, as a broker restart would: clients connect, and
    /// sign in, again.
    fn cut(&self) {
        for c in self.forwarded.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The one session token of the static credentials.
fn static_session() -> Sessions {
    Arc::new(|token: &str| match token == SESSION_TOKEN {
        true => Ok(()),
        false => Err("not the session token of the credentials".into()),
    })
}

/// One request or response: its size prefix, then its bytes.
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let mut frame = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    stream.read_exact(&mut frame).ok()?;
    Some(frame)
}

fn write_frame(stream: &mut TcpStream, body: &[u8]) -> Option<()> {
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend(body);
    stream.write_all(&frame).ok()
}

/// Answers one connection's requests until it is authenticated (then forwards it) or the
/// client hangs up.
fn serve(
    mut stream: TcpStream,
    upstream: Option<u16>,
    verdicts: &Verdicts,
    forwarded: &Mutex<Vec<TcpStream>>,
    sessions: &(dyn Fn(&str) -> Result<(), String> + Send + Sync),
) {
    let mut broker = upstream.map(|port| TcpStream::connect(("127.0.0.1", port)).unwrap());
    loop {
        let Some(request) = read_frame(&mut stream) else { return };
        let mut r = Reader(&request);
        let (api_key, version, correlation) = (r.i16(), r.i16(), r.i32());
        let client_id = r.string();
        let mut body = correlation.to_be_bytes().to_vec();
        let mut authenticated = false;
        match (api_key, broker.as_mut()) {
            // ApiVersions: the broker's own answer, when there is one.
            (18, Some(broker)) => {
                write_frame(broker, &request).unwrap();
                body = read_frame(broker).unwrap();
            }
            // Else the three this one speaks (v3 is flexible: compact arrays).
            (18, None) => {
                let apis: [(i16, i16, i16); 3] = [(18, 0, 3), (17, 0, 1), (36, 0, 1)];
                body.extend(0i16.to_be_bytes());
                if version >= 3 {
                    body.push(apis.len() as u8 + 1);
                } else {
                    body.extend((apis.len() as i32).to_be_bytes());
                }
                for (key, min, max) in apis {
                    body.extend(key.to_be_bytes());
                    body.extend(min.to_be_bytes());
                    body.extend(max.to_be_bytes());
                    if version >= 3 {
                        body.push(0);
                    }
                }
                if version >= 1 {
                    body.extend(0i32.to_be_bytes());
                }
                if version >= 3 {
                    body.push(0);
                }
            }
            // SaslHandshake: OAUTHBEARER only.
            (17, _) => {
                let mechanism = r.string().unwrap_or_default();
                let code: i16 = if mechanism == "OAUTHBEARER" { 0 } else { 33 };
                body.extend(code.to_be_bytes());
                body.extend(1i32.to_be_bytes());
                body.extend(short_string("OAUTHBEARER"));
            }
            // SaslAuthenticate: RFC 7628's client first message, `n,,\x01auth=Bearer T\x01\x01`.
            (36, _) => {
                let message = String::from_utf8_lossy(r.bytes()).into_owned();
                let verdict = message
                    .split('\u{1}')
                    .find_map(|kv| kv.strip_prefix("auth=Bearer "))
                    .ok_or_else(|| "no bearer token".to_string())
                    .and_then(|token| check_token(token, sessions));
                authenticated = verdict.is_ok() && upstream.is_some();
                let refusal = match &verdict {
                    _ if authenticated => None,
                    Ok(_) => Some(format!(
                        "test broker: MSK IAM token verified for {ACCESS_KEY}; no cluster here"
                    )),
                    Err(why) => Some(format!("test broker: MSK IAM token refused: {why}")),
                };
                let verdict = verdict.map_err(|e| format!("{e} [{client_id:?}]"));
                verdicts.lock().unwrap().push((Instant::now(), verdict));
                // SASL_AUTHENTICATION_FAILED with what the broker found, or success.
                match refusal {
                    Some(said) => {
                        body.extend(58i16.to_be_bytes());
                        body.extend(short_string(&said));
                    }
                    None => body.extend([0, 0, 0xff, 0xff]),
                }
                body.extend(0i32.to_be_bytes());
                if version >= 1 {
                    body.extend(0i64.to_be_bytes());
                }
            }
            (other, _) => {
                let refused = Err(format!("request {other} before authenticating"));
                verdicts.lock().unwrap().push((Instant::now(), refused));
                return;
            }
        }
        if write_frame(&mut stream, &body).is_none() {
            return;
        }
        if let Some(broker) = broker.take_if(|_| authenticated) {
            forwarded.lock().unwrap().push(stream.try_clone().unwrap());
            return forward(stream, broker);
        }
    }
}

/// Copies bytes both ways until either side closes.
fn forward(client: TcpStream, broker: TcpStream) {
    let (mut from_client, mut to_broker) = (client.try_clone().unwrap(), broker.try_clone().unwrap());
    let upstream = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_broker);
        let _ = to_broker.shutdown(std::net::Shutdown::Both);
    });
    let (mut from_broker, mut to_client) = (broker, client);
    let _ = std::io::copy(&mut from_broker, &mut to_client);
    let _ = to_client.shutdown(std::net::Shutdown::Both);
    let _ = upstream.join();
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap_or_default())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap_or_default())
    }
    fn string(&mut self) -> Option<String> {
        let n = self.i16();
        (n >= 0).then(|| String::from_utf8_lossy(self.take(n as usize)).into_owned())
    }
    fn bytes(&mut self) -> &'a [u8] {
        let n = self.i32().max(0) as usize;
        self.take(n)
    }
}

fn short_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as i16).to_be_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

/// Checks an MSK IAM token as MSK does: its session token (which `sessions` checks), or what
/// is wrong.
fn check_token(token: &str, sessions: &(dyn Fn(&str) -> Result<(), String> + Send + Sync)) -> Result<String, String> {
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|e| format!("not base64url: {e}"))?;
    let url = url::Url::parse(&String::from_utf8_lossy(&decoded)).map_err(|e| format!("not a URL: {e}"))?;
    let params: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or(format!("no {name}"))
    };
    let host = format!("kafka.{REGION}.amazonaws.com");
    if url.scheme() != "https" || url.host_str() != Some(&host) || url.path() != "/" {
        return Err(format!("not the Connect URL: {}", url.origin().ascii_serialization()));
    }
    for (name, want) in [
        ("Action", "kafka-cluster:Connect"),
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
        ("X-Amz-Expires", "900"),
        ("X-Amz-SignedHeaders", "host"),
    ] {
        if param(name)? != want {
            return Err(format!("{name} is not {want}"));
        }
    }
    let session = param("X-Amz-Security-Token")?;
    sessions(&session).map_err(|why| format!("X-Amz-Security-Token: {why}"))?;
    let date = param("X-Amz-Date")?;
    let signed_at = chrono::NaiveDateTime::parse_from_str(&date, "%Y%m%dT%H%M%SZ")
        .map_err(|e| format!("X-Amz-Date {date}: {e}"))?
        .and_utc();
    if (chrono::Utc::now() - signed_at).num_seconds().abs() > 300 {
        return Err(format!("signed at {signed_at}, not now"));
    }
    let credential = param("X-Amz-Credential")?;
    let scope = format!("{}/{REGION}/kafka-cluster/aws4_request", &date[..8]);
    if credential != format!("{ACCESS_KEY}/{scope}") {
        return Err(format!("credential scope {credential}"));
    }
    // SigV4: every parameter but the signature (and the User-Agent added after signing),
    // URI-encoded and sorted.
    let mut query: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| k != "X-Amz-Signature" && k != "User-Agent")
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    query.sort();
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let canonical = format!(
        "GET\n/\n{}\nhost:{host}\n\nhost\n{}",
        query.join("&"),
        hex(&Sha256::digest(b""))
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = format!("AWS4{SECRET_KEY}").into_bytes();
    for part in [&date[..8], REGION, "kafka-cluster", "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let expected = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    match param("X-Amz-Signature")? == expected {
        true => Ok(session),
        false => Err("the signature does not match".into()),
    }
}

/// RFC 2104 HMAC over SHA-256.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SigV4's URI encoding: all but the unreserved characters, as `%XX`.
fn uri_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `sluice --command-config FILE ARGS...` with only the AWS settings given: no profile
/// files, no instance metadata.
fn sluice(properties: &std::path::Path, aws: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_") || k.starts_with("AWS_")) {
        command.env_remove(k);
    }
    command
        .env("AWS_CONFIG_FILE", "/nonexistent/config")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(aws.iter().copied())
        .current_dir(repo())
        .arg("--command-config")
        .arg(properties)
        .args(args);
    command
}

/// Runs [`sluice`] to its end: exit code, stdout, stderr and how long it took.
fn run(properties: &std::path::Path, aws: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String, String, Duration) {
    let started = Instant::now();
    let Output { status, stdout, stderr } = sluice(properties, aws, args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (status.code(), text(&stdout), text(&stderr), started.elapsed())
}

const CREDENTIALS: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
    ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
    ("AWS_SESSION_TOKEN", SESSION_TOKEN),
    ("AWS_REGION", REGION),
];

/// The login lines of AWS's documented `client.properties` for Java clients, in its two
/// forms.
const IAM_LOGIN: &str = "sasl.mechanism=AWS_MSK_IAM\n\
    sasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required;\n\
    sasl.client.callback.handler.class=software.amazon.msk.auth.iam.IAMClientCallbackHandler\n";
const OAUTHBEARER_LOGIN: &str = "sasl.mechanism=OAUTHBEARER\n\
    sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n\
    sasl.login.callback.handler.class=software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler\n";

/// A `client.properties` in `dir` for `brokers` with `login`, plaintext (the test broker has
/// no TLS), with the local broker's client settings (deploy/local-broker.sh's).
fn properties_file(dir: &std::path::Path, brokers: &str, login: &str) -> std::path::PathBuf {
    let path = dir.join("client.properties");
    let settings = "session.timeout.ms=10000\nmessage.timeout.ms=30000\ncompression.type=none\n";
    let text = format!("bootstrap.servers={brokers}\nsecurity.protocol=SASL_PLAINTEXT\n{login}{settings}");
    std::fs::write(&path, text).unwrap();
    path
}

/// A tansu broker of the test's own behind an [`MskBroker`] that checks sessions with
/// `sessions`; the bootstrap address is the checking broker's.
fn msk_over_tansu(sessions: Sessions) -> (OwnBroker, MskBroker, String) {
    let tansu = OwnBroker::new();
    let listener = TcpListener::bind(("127.0.0.1", tansu.port)).unwrap();
    let broker = MskBroker::start(listener, Some(tansu.listen), sessions);
    let brokers = tansu.start();
    (tansu, broker, brokers)
}

#[test]
fn awss_msk_iam_properties_send_a_token_msk_would_verify_signed_with_the_chains_credentials() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let broker = listener.local_addr().unwrap().to_string();
    let broker_check = MskBroker::start(listener, None, static_session());
    let dir = tempfile::tempdir().unwrap();
    let properties = properties_file(dir.path(), &broker, IAM_LOGIN);
    let apply = ["--topic-prefix", "it-msk.", "topics", "apply", "--dir", "topics"];
    let (code, _, stderr, took) = run(&properties, &CREDENTIALS, &apply);
    let seen = broker_check.verdicts();
    assert!(!seen.is_empty(), "the broker was sent no token\n{stderr}");
    assert!(
        seen.iter().all(|v| v.as_deref() == Ok(SESSION_TOKEN)),
        "{seen:?}\n{stderr}"
    );
    // The broker's refusal stops the command at once, in its words.
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("MSK IAM token verified for AKIAMSKTEST0001"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(12), "{took:?}");
    assert!(
        !stderr.contains(SECRET_KEY) && !stderr.contains(SESSION_TOKEN),
        "{stderr}"
    );

    // Without credentials anywhere in the chain: refused before any client is made, saying
    // where it looked.
    let before = broker_check.verdicts().len();
    let (code, _, stderr, _) = run(&properties, &[("AWS_REGION", REGION)], &apply);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("AWS MSK IAM") && stderr.contains("no AWS credentials"),
        "{stderr}"
    );
    assert_eq!(broker_check.verdicts().len(), before, "no token was sent");
}

/// The processor and its commands over MSK IAM in the OAUTHBEARER form AWS documents: tansu
/// behind the checking broker, which lets a connection through once its token verifies.
/// Every connection any client made (the admin client, the producers, the group consumer,
/// the readers of the changelog and of recent events, the instance directory) came with a
/// token signed with the chain's credentials.
#[test]
fn the_processor_runs_over_msk_iam_every_connection_signed() {
    let (_tansu, broker, brokers) = msk_over_tansu(static_session());
    let dir = tempfile::tempdir().unwrap();
    let properties = properties_file(dir.path(), &brokers, OAUTHBEARER_LOGIN);
    let common = ["--broker-quirks", "tansu", "--topic-prefix", "it-msk-run."];
    let with = |args: &[&str]| -> Vec<String> { common.iter().chain(args).map(|a| a.to_string()).collect() };
    let call = |args: &[&str]| {
        let all = with(args);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run(&properties, &CREDENTIALS, &refs)
    };
    let (code, out, err, _) = call(&["topics", "apply", "--dir", "topics"]);
    assert_eq!(
        code,
        Some(0),
        "topics apply over MSK IAM\n{out}\n{err}\n{:?}",
        broker.verdicts()
    );
    let state = dir.path().join("state");
    let start = |args: &[&str]| {
        let all = with(&[args, &["--state-dir", state.to_str().unwrap()]].concat());
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        sluice(&properties, &CREDENTIALS, &refs)
    };
    let (_processor, _, log) = one_job_over(dir.path(), "msk-gold", &call, &start);
    let log_tail = || std::fs::read_to_string(&log).unwrap_or_default();
    let (_, events, err, _) = call(&["events", "tail", "--output", "json"]);
    assert!(events.contains("JOB_COMPLETED"), "{events}\n{err}");

    let seen = broker.verdicts();
    let refused: Vec<&String> = seen.iter().filter_map(|v| v.as_ref().err()).collect();
    assert!(refused.is_empty(), "connections without a good token: {refused:?}");
    // topics apply, config apply, the processor's clients, two sensor puts and the tail
    // each connect at least once.
    assert!(seen.len() >= 8, "{} signed connections", seen.len());
    for text in [log_tail(), events] {
        assert!(!text.contains(SECRET_KEY) && !text.contains(SESSION_TOKEN));
    }
}

/// Credentials that expire within a minute, as a container credentials endpoint (ECS, EKS
/// Pod Identity) may hand out: the processor fetches new ones before the held ones expire,
/// and its clients take fresh tokens as librdkafka asks for them. Once the first
/// credentials have expired, the broker cuts every connection: each client connects again,
/// and signs in with a session that is still live.
#[test]
fn a_running_processor_signs_in_again_with_fresh_credentials_after_the_first_expired() {
    use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
    // The session tokens the endpoint handed out, with their expiry.
    type Issued = Arc<Mutex<Vec<(String, DateTime<Utc>)>>>;
    let issued: Issued = Arc::default();
    let record = issued.clone();
    let endpoint = crate::support::serve(move |_| {
        let mut all = record.lock().unwrap();
        let token = format!("session-{}", all.len() + 1);
        let expires = Utc::now() + TimeDelta::seconds(30);
        all.push((token.clone(), expires));
        let credentials = serde_json::json!({
            "AccessKeyId": ACCESS_KEY, "SecretAccessKey": SECRET_KEY, "Token": token,
            "Expiration": expires.to_rfc3339_opts(SecondsFormat::Secs, true),
        });
        (200, credentials.to_string())
    });
    let known = issued.clone();
    let sessions: Sessions =
        Arc::new(
            move |token: &str| match known.lock().unwrap().iter().find(|(t, _)| t == token) {
                None => Err("not a session the credentials endpoint issued".into()),
                Some((_, at)) if *at <= Utc::now() => Err(format!("{token} expired at {at}")),
                Some(_) => Ok(()),
            },
        );
    let (_tansu, broker, brokers) = msk_over_tansu(sessions);
    let dir = tempfile::tempdir().unwrap();
    let properties = properties_file(dir.path(), &brokers, "sasl.mechanism=AWS_MSK_IAM\n");
    let uri = format!("{endpoint}/v2/credentials");
    let aws = [
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.as_str()),
        ("AWS_REGION", REGION),
    ];
    let prefix = ["--broker-quirks", "tansu", "--topic-prefix", "it-msk-long."];
    let (code, out, err, _) = run(
        &properties,
        &aws,
        &[&prefix[..], &["topics", "apply", "--dir", "topics"]].concat(),
    );
    assert_eq!(code, Some(0), "{out}\n{err}\n{:?}", broker.verdicts());

    let addr = format!("127.0.0.1:{}", free_port());
    let state = dir.path().join("state");
    let log = dir.path().join("run.log");
    let args = [
        &prefix[..],
        &["run", "--http", &addr, "--state-dir", state.to_str().unwrap()],
    ]
    .concat();
    let processor = sluice(&properties, &aws, &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _processor = Instances(vec![processor]);
    let log_tail = || std::fs::read_to_string(&log).unwrap_or_default();
    let ready = || http_get(&addr, "/readyz").is_some_and(|(status, _)| status == 200);
    wait_until(
        "the processor ready over MSK IAM",
        Duration::from_secs(60),
        log_tail,
        ready,
    );
    // The processor's first credentials are the endpoint's first since it started.
    let first = issued.lock().unwrap().len() - 1;
    wait_until(
        "the processor's first credentials expired, and new ones fetched",
        Duration::from_secs(90),
        log_tail,
        || {
            let issued = issued.lock().unwrap();
            issued.len() >= first + 3 && issued[first].1 + TimeDelta::seconds(1) < Utc::now()
        },
    );
    let cut_at = Instant::now();
    broker.cut();
    let signed_after = || {
        let verdicts = broker.verdicts.lock().unwrap();
        verdicts.iter().filter(|(at, v)| *at > cut_at && v.is_ok()).count()
    };
    wait_until(
        "the processor's clients signed in again",
        Duration::from_secs(60),
        log_tail,
        || signed_after() >= 2 && ready(),
    );
    let refused: Vec<String> = broker.verdicts().into_iter().filter_map(Result::err).collect();
    assert!(refused.is_empty(), "connections refused: {refused:?}\n{}", log_tail());
    let stale = format!("session-{}", first + 1);
    let verdicts = broker.verdicts.lock().unwrap();
    let after: Vec<&String> = verdicts
        .iter()
        .filter(|(at, _)| *at > cut_at)
        .filter_map(|(_, v)| v.as_ref().ok())
        .collect();
    assert!(!after.iter().any(|s| **s == stale), "{after:?}");
    assert!(!log_tail().contains(SECRET_KEY));
}
