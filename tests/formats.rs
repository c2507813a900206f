//! Avro on the real broker with a schema registry: the processor registers its schemas,
//! reads Avro and JSON inputs side by side, and writes registry-framed Avro events and job
//! reports that `events tail` reads back; with a registry that requires credentials, goes
//! down, and holds schemas that are not Avro. And input compressed with any codec.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sluice::core::events::EventType::*;
use sluice::runtime::codec::{protobuf, Codec, Family, Formats, Registry, RegistrySettings};

use crate::support::{command_job, day, pipeline, serve, sluice_on, wait_until, World};

/// The (subject, schema) pairs a test registry holds, in registration order (id = position
/// + 1); a schema whose text starts with `syntax` is a Protobuf one.
type Subjects = Arc<Mutex<Vec<(String, String)>>>;

/// A test registry: what it holds, what it requires and what it saw.
#[derive(Clone, Default)]
struct Fake {
    subjects: Subjects,
    /// The `Authorization` header every request must carry, if any.
    authorization: Option<String>,
    /// While set, fetching a schema by id answers 503.
    outage: Arc<AtomicBool>,
    /// A schema id the registry refuses to serve (403), answering everything else.
    refused: Option<usize>,
    /// Every request as `METHOD /path STATUS`.
    seen: Arc<Mutex<Vec<String>>>,
}

/// A loopback server speaking the registry REST endpoints Sluice uses.
fn registry() -> (String, Subjects) {
    let fake = Fake::default();
    (registry_for(&fake), fake.subjects)
}

fn registry_for(fake: &Fake) -> String {
    let fake = fake.clone();
    serve(move |r| {
        let (status, body) = answer(&fake, r);
        fake.seen
            .lock()
            .unwrap()
            .push(format!("{} {} {status}", r.method, r.path));
        (status, body)
    })
}

fn answer(fake: &Fake, r: &crate::support::Request) -> (u16, String) {
    if fake.authorization.is_some() && r.header("authorization") != fake.authorization.as_deref() {
        return (401, json!({"error_code": 401, "message": "Unauthorized"}).to_string());
    }
    if fake.outage.load(Ordering::SeqCst) && r.path.starts_with("/schemas/ids/") {
        return (
            503,
            json!({"error_code": 50003, "message": "store unavailable"}).to_string(),
        );
    }
    if fake.refused.is_some_and(|id| r.path == format!("/schemas/ids/{id}")) {
        return (
            403,
            json!({"error_code": 40301, "message": "User cannot access the resource."}).to_string(),
        );
    }
    if r.method == "GET" && r.path == "/subjects" {
        let names: Vec<String> = fake.subjects.lock().unwrap().iter().map(|(s, _)| s.clone()).collect();
        return (200, json!(names).to_string());
    }
    {
        let mut all = fake.subjects.lock().unwrap();
        let subject = r
            .path
            .strip_prefix("/subjects/")
            .and_then(|p| p.strip_suffix("/versions"));
        match (r.method.as_str(), subject, r.path.strip_prefix("/schemas/ids/")) {
            ("POST", Some(subject), _) => {
                let schema = r.json()["schema"].as_str().unwrap().to_string();
                let id = match all.iter().position(|(s, t)| s == subject && *t == schema) {
                    Some(i) => i + 1,
                    None => {
                        all.push((subject.to_string(), schema));
                        all.len()
                    }
                };
                (200, json!({ "id": id }).to_string())
            }
            ("GET", _, Some(id)) => match id.parse::<usize>().ok().and_then(|i| all.get(i.wrapping_sub(1))) {
                Some((_, schema)) if schema.starts_with("syntax") => {
                    (200, json!({ "schemaType": "PROTOBUF", "schema": schema }).to_string())
                }
                Some((_, schema)) => (200, json!({ "schema": schema }).to_string()),
                None => (
                    404,
                    json!({"error_code": 40403, "message": "Schema not found"}).to_string(),
                ),
            },
            _ => (
                404,
                json!({"error_code": 404, "message": "no such endpoint"}).to_string(),
            ),
        }
    }
}

#[test]
fn avro_with_a_registry_end_to_end() {
    let (url, schemas) = registry();
    let mut w = World::new("avro");
    w.env = vec![
        ("SLUICE_FORMAT".into(), "avro".into()),
        ("SLUICE_SCHEMA_REGISTRY_URL".into(), url.clone()),
    ];
    w.read_events_with(Codec::new(Formats::default(), Some(&url)).unwrap());
    w.start_with(&pipeline("avro-p", command_job("true", 0)));

    // A JSON reading and an Avro one (from the CLI, which follows SLUICE_FORMAT).
    w.sensor("avro-p", "row-count", json!({"count": 1500}));
    let put = sluice_on(&w.brokers)
        .envs(w.env.iter().map(|(k, v)| (k, v)))
        .args(["sensor", "put", "avro-p", "upstream", "status=ready", "--date", day()])
        .args(["--topic-prefix", &w.prefix])
        .output()
        .unwrap();
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    // The executor's job report is Avro too, and read back by the processor.
    w.wait_for_sequence(
        "avro-p",
        &[CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED],
    );

    let subjects: Vec<String> = schemas.lock().unwrap().iter().map(|(s, _)| s.clone()).collect();
    for family in ["events", "sensors", "jobs", "commands"] {
        let subject = format!("{}{family}-value", w.prefix);
        assert!(subjects.contains(&subject), "{subject} registered: {subjects:?}");
    }

    // events tail reads the framed records with the registry, and says what it needs without.
    let tail = |env: &[(&str, &str)]| {
        let out = sluice_on(&w.brokers)
            .envs(env.iter().copied())
            .args([
                "events",
                "tail",
                "--output",
                "json",
                "--pipeline",
                "avro-p",
                "--topic-prefix",
                &w.prefix,
            ])
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (out, _) = tail(&[("SLUICE_SCHEMA_REGISTRY_URL", url.as_str())]);
    let types: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        types,
        ["CONFIG_ACCEPTED", "VALIDATION_PASSED", "JOB_TRIGGERED", "JOB_COMPLETED"]
    );
    let (out, err) = tail(&[]);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("--schema-registry-url"), "{err}");
}

/// A registry that requires basic auth, the processor's credential read from a file (as Kafka
/// properties can be): its schemas are registered and its events framed with it; a reading
/// framed by Confluent's Protobuf serializer is read (it passes validation); records framed
/// with an unknown id, or with the Protobuf schema's id but not its message, are
/// dead-lettered with the reason; a reading whose writer schema must be fetched while the
/// registry answers 503 waits for it instead of being dead-lettered.
#[test]
fn a_registry_requiring_basic_auth_going_down_and_holding_protobuf() {
    const PASSWORD: &str = "reg-pw-8f3k";
    let fake = Fake {
        authorization: Some("Basic c2x1aWNlOnJlZy1wdy04ZjNr".into()),
        ..Fake::default()
    };
    // Other producers' schemas: Sluice's sensor schema under their subject (id 1), and a
    // Protobuf one of their own (id 2).
    const PROTO: &str = "syntax = \"proto3\"; package acme; import \"google/protobuf/struct.proto\";
        message Reading { string pipeline_id = 1; string key = 2; google.protobuf.Struct data = 3; string date = 4; }";
    fake.subjects.lock().unwrap().extend([
        ("other-value".to_string(), Family::Sensors.schema_text().to_string()),
        ("proto-value".to_string(), PROTO.to_string()),
    ]);
    let url = registry_for(&fake);
    let mut w = World::new("registry-auth");
    let secret = w.scratch.path().join("registry-user-info");
    std::fs::write(&secret, format!("sluice:{PASSWORD}\n")).unwrap();
    w.env = vec![
        ("SLUICE_FORMAT".into(), "avro".into()),
        ("SLUICE_SCHEMA_REGISTRY_URL".into(), url.clone()),
        (
            "SLUICE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO".into(),
            format!("${{file:{}}}", secret.display()),
        ),
    ];
    let reader = Registry::connect(&RegistrySettings {
        basic_auth_user_info: Some(format!("sluice:{PASSWORD}")),
        ..RegistrySettings::new(&url)
    })
    .unwrap();
    w.read_events_with(Codec::with_registry(Formats::default(), Some(reader)));
    w.start_with(&pipeline("reg-p", command_job("true", 0)));

    w.produce("sensors", Some("reg-p"), Some(&[0, 0, 0, 0, 99, 0]));
    // Framed with the Protobuf schema's id, but not a Reading (a length past its end).
    w.produce("sensors", Some("reg-p"), Some(&[0, 0, 0, 0, 2, 0, 0x0a, 0xff]));
    // The row count as a Protobuf producer writes it.
    let schema = protobuf::compile(PROTO, Default::default()).unwrap();
    let row_count = json!({"pipelineId": "reg-p", "key": "row-count", "data": {"count": 1500}, "date": day()});
    let mut framed_proto = vec![0, 0, 0, 0, 2];
    framed_proto.extend(protobuf::frame(&schema, &[], &row_count.to_string()).unwrap());
    w.produce("sensors", Some("reg-p"), Some(&framed_proto));
    // The trigger reading as another producer writes it (schema id 1), while the registry is down.
    fake.outage.store(true, Ordering::SeqCst);
    let reading = json!({"pipelineId": "reg-p", "key": "upstream", "data": {"status": "ready"}, "date": day()});
    let single_object = Codec::new(Formats::parse(&["avro".into()]).unwrap(), None)
        .unwrap()
        .encode(Family::Sensors, "any", &reading)
        .unwrap();
    let mut framed = vec![0, 0, 0, 0, 1];
    framed.extend_from_slice(&single_object[10..]);
    w.produce("sensors", Some("reg-p"), Some(&framed));
    let refused = |seen: &[String]| seen.iter().filter(|r| *r == "GET /schemas/ids/1 503").count();
    wait_until(
        "the processor to meet the outage twice",
        Duration::from_secs(60),
        || format!("{:?}\n{}", fake.seen.lock().unwrap(), w.log_tail()),
        || refused(&fake.seen.lock().unwrap()) >= 2,
    );
    fake.outage.store(false, Ordering::SeqCst);

    w.wait_for_sequence(
        "reg-p",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    let dead = w.dead_letters(2);
    let reasons: Vec<&str> = dead
        .iter()
        .map(|(_, headers)| headers.iter().find(|(k, _)| k == "error").unwrap().1.as_str())
        .collect();
    assert!(reasons[0].contains("no schema with id 99"), "{reasons:?}");
    assert!(reasons[1].contains("undecodable Protobuf (schema id 2)"), "{reasons:?}");

    // Every request carried the credential; the events went out framed (the reader fetched
    // their schema by id); the password shows nowhere in the log.
    let seen = fake.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|r| !r.ends_with(" 401")), "{seen:?}");
    let events_id = fake
        .subjects
        .lock()
        .unwrap()
        .iter()
        .position(|(s, _)| *s == format!("{}events-value", w.prefix))
        .expect("events subject registered")
        + 1;
    assert!(seen.contains(&format!("GET /schemas/ids/{events_id} 200")), "{seen:?}");
    assert!(!w.log().contains(PASSWORD), "the password in the log");
}

/// Issue 60, item 2: a record framed with a schema id the registry refuses (403) used to
/// hold the whole batch, every partition of the instance, for as long as the refusal lasted.
/// Past `--record-patience`, with the registry answering otherwise, it is dead-lettered with
/// the reason, and the pipeline's next readings run it.
#[test]
fn a_record_whose_schema_the_registry_refuses_is_dead_lettered_and_holds_nothing_up() {
    let fake = Fake {
        refused: Some(77),
        ..Fake::default()
    };
    let url = registry_for(&fake);
    let mut w = World::new("registry-refuses");
    w.env = vec![
        ("SLUICE_FORMAT".into(), "avro".into()),
        ("SLUICE_SCHEMA_REGISTRY_URL".into(), url.clone()),
        ("SLUICE_RECORD_PATIENCE".into(), "8s".into()),
    ];
    let reader = Registry::connect(&RegistrySettings::new(&url)).unwrap();
    w.read_events_with(Codec::with_registry(Formats::default(), Some(reader)));
    w.config(&pipeline("ref-p", command_job("true", 0)));
    let http = format!("127.0.0.1:{}", crate::support::free_port());
    w.serve(&http, &[]);
    w.produce("sensors", Some("ref-p"), Some(&[0, 0, 0, 0, 77, 0]));
    // Meanwhile readiness says which record holds the instance up, and why.
    crate::support::wait_until(
        "readiness to name the record",
        std::time::Duration::from_secs(30),
        || w.log_tail(),
        || {
            crate::support::http_get(&http, "/readyz").is_some_and(|(status, body)| {
                status == 503 && body.contains("waits to read") && body.contains("sensors/")
            })
        },
    );
    w.sensor("ref-p", "row-count", json!({"count": 1500}));
    w.sensor("ref-p", "upstream", json!({"status": "ready"}));
    w.wait_for_sequence(
        "ref-p",
        &[
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED,
        ],
    );
    let dead = w.dead_letters(1);
    let reason = dead[0].1.iter().find(|(k, _)| k == "error").unwrap().1.clone();
    assert!(
        reason.contains("answers, but not for this record") && reason.contains("403"),
        "{reason}"
    );
    let seen = fake.seen.lock().unwrap().clone();
    assert!(seen.contains(&"GET /schemas/ids/77 403".to_string()), "{seen:?}");
    assert!(seen.contains(&"GET /subjects 200".to_string()), "{seen:?}");
}

/// Producers compress as they please: a librdkafka producer with each codec Kafka knows
/// feeds a pipeline, and every one of them triggers its job.
#[test]
fn sensors_compressed_with_any_codec_are_read() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::time::Duration;
    let codecs = ["gzip", "snappy", "lz4", "zstd"];
    let mut w = World::new("codecs");
    w.start();
    for codec in codecs {
        let id = format!("codec-{codec}");
        w.config(&pipeline(&id, command_job("true", 0)));
    }
    for codec in codecs {
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &w.brokers)
            .set("partitioner", sluice::runtime::kafka::PARTITIONER)
            .set("compression.type", codec)
            .create()
            .unwrap();
        let id = format!("codec-{codec}");
        let topic = w.topic("sensors");
        for (key, data) in [
            ("row-count", json!({"count": 5000})),
            ("upstream", json!({"status": "ready"})),
        ] {
            let record = json!({"pipelineId": id, "key": key, "data": data, "date": day()});
            // Large enough that every codec compresses it rather than sending it as is.
            let mut value = serde_json::to_vec(&record).unwrap();
            value.extend(std::iter::repeat_n(b' ', 4096));
            producer
                .send(BaseRecord::to(&topic).key(id.as_str()).payload(&value))
                .map_err(|(e, _)| e)
                .unwrap();
            producer.flush(Duration::from_secs(10)).unwrap();
        }
    }
    for codec in codecs {
        w.wait_for(&format!("codec-{codec}"), &format!("{codec} readings"), |es| {
            es.iter().any(|e| e.kind == JOB_TRIGGERED)
        });
    }
}
