//! Avro on the real broker with a schema registry: the processor registers its schemas,
//! reads Avro and JSON inputs side by side, and writes registry-framed Avro events and job
//! reports that `events tail` reads back. And input compressed with any codec.

use std::sync::{Arc, Mutex};

use serde_json::json;
use sluice::core::events::EventType::*;
use sluice::runtime::codec::{Codec, Formats};

use crate::support::{command_job, day, pipeline, serve, sluice_on, World};

/// A loopback server speaking the registry REST endpoints Sluice uses; the (subject,
/// schema) pairs it holds, in registration order (id = position + 1).
type Subjects = Arc<Mutex<Vec<(String, String)>>>;

fn registry() -> (String, Subjects) {
    let schemas: Subjects = Arc::default();
    let held = schemas.clone();
    let url = serve(move |r| {
        let mut all = held.lock().unwrap();
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
    });
    (url, schemas)
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
