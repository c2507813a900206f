//! The Python producer helper (`clients/python`), installed with pip from the checkout, run
//! against the real broker: its readings land in the partitions Sluice reads them from
//! (nothing to forward) and start the run, whose job is called once.

use std::path::Path;
use std::process::Command;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::json;
use sluice::core::events::EventType::*;
use sluice::core::partitioning::partition_for;

use crate::support::{http_target, pipeline, repo, World};

/// The Python deploy/test.sh makes for the Python peers (confluent-kafka in it).
fn python() -> String {
    std::env::var("SLUICE_BENCH_PYTHON")
        .expect("SLUICE_BENCH_PYTHON is not set: run deploy/test.sh, which makes the Python environment")
}

fn run(command: &mut Command, what: &str) -> String {
    let out = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what}:\n{text}");
    text
}

/// `pip install` of the package from the checkout into `target` (no index needed: its
/// one dependency is already there).
fn install(target: &Path) {
    run(
        Command::new(python())
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
            ])
            .arg(target)
            .arg(repo().join("clients/python")),
        "pip install clients/python",
    );
}

/// A pipeline whose readings librdkafka's default partitioner (CRC32) would put elsewhere,
/// so that the helper's partitioner is what the test sees.
const PIPELINE: &str = "py-producer";

/// CRC-32 (IEEE), as librdkafka's `consistent_random` partitioner hashes keys.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn the_python_helper_publishes_where_sluice_reads_and_the_job_runs_once() {
    let site = tempfile::tempdir().unwrap();
    install(site.path());
    // Its own checks, on the installed copy.
    run(
        Command::new(python())
            .args(["-m", "unittest", "discover", "-s"])
            .arg(repo().join("clients/python/tests"))
            .env("PYTHONPATH", site.path()),
        "the helper's unit tests",
    );

    let target = http_target();
    let mut w = World::new(PIPELINE);
    let job = json!({"type": "http", "config": {"url": target.url}, "maxRetries": 0});
    w.start_with(&pipeline(PIPELINE, job));
    let script = r#"
import sys
from sluice_producer import SensorProducer
with SensorProducer(sys.argv[1], topic=sys.argv[2]) as sensors:
    sensors.put(sys.argv[3], "row-count", {"count": 5000})
    sensors.put(sys.argv[3], "upstream", {"status": "ready"})
print("sent")
"#;
    let out = run(
        Command::new(python())
            .args(["-c", script, &w.brokers, &w.topic("sensors"), PIPELINE])
            .env("PYTHONPATH", site.path()),
        "the producer script",
    );
    assert!(out.contains("sent"), "{out}");
    w.wait_for(PIPELINE, "JOB_TRIGGERED", |es| {
        es.iter().any(|e| e.kind == JOB_TRIGGERED)
    });
    assert_eq!(target.requests.lock().unwrap().len(), 1, "the job called once");

    // Both readings in the partition Sluice reads the pipeline from.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &w.brokers)
        .set("group.id", format!("{}py-check", w.prefix))
        .create()
        .unwrap();
    let topic = w.topic("sensors");
    let mut list = TopicPartitionList::new();
    for p in 0..w.partitions() {
        // From offset 0: tansu deletes nothing, and its "earliest" may not be the lowest.
        list.add_partition_offset(&topic, p, Offset::Offset(0)).unwrap();
    }
    consumer.assign(&list).unwrap();
    // The run started, so a forwarded copy of a misrouted reading would be on the broker by
    // now: the first two records of the pipeline are in its partition, and neither is a
    // copy (`sluice.forwarded`).
    let mut found = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while found.len() < 2 && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(std::time::Duration::from_millis(100)) {
            if m.key() == Some(PIPELINE.as_bytes()) {
                let copy = m
                    .headers()
                    .is_some_and(|h| h.iter().any(|h| h.key == "sluice.forwarded"));
                found.push((m.partition(), copy));
            }
        }
    }
    let home = partition_for(PIPELINE.as_bytes(), w.partitions()).number();
    let crc_partition = (crc32(PIPELINE.as_bytes()) % w.partitions() as u32) as i32;
    assert_ne!(crc_partition, home, "a pipeline CRC32 would misroute");
    assert_eq!(
        found,
        vec![(home, false), (home, false)],
        "murmur2, as Sluice partitions"
    );
    assert!(!w.log().contains("partitions with another hash"), "nothing forwarded");
}
