//! Bad input at volume: a seeded pseudo-random mix of malformed, misaddressed and oversized
//! records on every input topic, interleaved with the good records of real pipelines.
//!
//! The processor must stay up, put exactly the bad records on the dead-letter topic (each
//! with its error and source coordinates, its key and value untouched), keep the records
//! that are valid though unexpected (a sensor or a subscription for a pipeline with no config
//! yet, a late report of a run that is not current), and run the real pipelines as if
//! nothing else had arrived.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use serde_json::{json, Value};
use sluice::core::events::{Event, EventType, EventType::*};
use sluice::core::partitioning::partition_for;

use crate::support::{self, brokers, day, http_target, pipeline, run_id, World};

const SEED: u64 = 0x5eed_ba0d_1e55_f00d;

/// xorshift64: tiny, seeded, the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo)
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Letters and digits only, so no escaping anywhere inflates it.
    fn word(&mut self, n: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..n).map(|_| ALPHABET[self.below(ALPHABET.len())] as char).collect()
    }
}

/// What the processor must do with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expect {
    /// Rejected (INPUT_REJECTED or CONFIG_REJECTED) and put on the dead-letter topic.
    DeadLetter,
    /// Valid though unexpected: handled without an error, never dead-lettered.
    Accepted,
    /// A real pipeline's record.
    Good,
}

struct Record {
    topic: &'static str,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    /// An explicit partition (a misrouted record); else the key's murmur2 partition.
    partition: Option<i32>,
    kind: &'static str,
    expect: Expect,
}

impl Record {
    fn new(topic: &'static str, kind: &'static str, key: Option<&[u8]>, value: Option<Vec<u8>>) -> Self {
        Record {
            topic,
            key: key.map(<[u8]>::to_vec),
            value,
            partition: None,
            kind,
            expect: Expect::DeadLetter,
        }
    }

    fn json(topic: &'static str, kind: &'static str, key: Option<&[u8]>, value: &Value) -> Self {
        Self::new(topic, kind, key, Some(serde_json::to_vec(value).unwrap()))
    }

    fn expect(mut self, expect: Expect) -> Self {
        self.expect = expect;
        self
    }
}

/// A record as the broker stored it.
struct Sent {
    record: Record,
    partition: i32,
    offset: i64,
}

/// Where a record landed (partition, offset), or why it was not delivered.
type Delivery = Result<(i32, i64), String>;

/// Delivery reports by the sequence number given as the record's opaque.
#[derive(Clone, Default)]
struct Deliveries(Arc<Mutex<BTreeMap<usize, Delivery>>>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, id: usize) {
        let outcome = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        self.0.lock().unwrap().insert(id, outcome);
    }
}

/// Produces records in order (idempotent, so retries cannot reorder them) and tells where
/// each one landed.
struct Sender {
    producer: BaseProducer<Deliveries>,
    deliveries: Deliveries,
    prefix: String,
    sent: usize,
}

impl Sender {
    fn new(prefix: &str) -> Self {
        let deliveries = Deliveries::default();
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("partitioner", sluice::runtime::kafka::PARTITIONER)
            .set("enable.idempotence", "true")
            .create_with_context(deliveries.clone())
            .unwrap();
        Sender {
            producer,
            deliveries,
            prefix: prefix.to_string(),
            sent: 0,
        }
    }

    fn send(&mut self, records: Vec<Record>) -> Vec<Sent> {
        let first = self.sent;
        for (i, r) in records.iter().enumerate() {
            let topic = format!("{}{}", self.prefix, r.topic);
            let mut record: BaseRecord<'_, [u8], [u8], usize> = BaseRecord::with_opaque_to(&topic, first + i);
            if let Some(k) = &r.key {
                record = record.key(k.as_slice());
            }
            if let Some(v) = &r.value {
                record = record.payload(v.as_slice());
            }
            if let Some(p) = r.partition {
                record = record.partition(p);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        self.producer.poll(Duration::from_millis(100));
                    }
                    Err((e, _)) => panic!("producing a {:?} record to {topic}: {e}", r.kind),
                }
            }
        }
        self.producer.flush(Duration::from_secs(30)).unwrap();
        self.sent += records.len();
        let deliveries = self.deliveries.0.lock().unwrap();
        records
            .into_iter()
            .enumerate()
            .map(|(i, record)| {
                let report = deliveries
                    .get(&(first + i))
                    .unwrap_or_else(|| panic!("no delivery report for a {:?} record", record.kind));
                let (partition, offset) = report
                    .clone()
                    .unwrap_or_else(|e| panic!("a {:?} record was not delivered: {e}", record.kind));
                Sent {
                    record,
                    partition,
                    offset,
                }
            })
            .collect()
    }
}

fn command_job(command: &str) -> Value {
    support::command_job(command, 0)
}

fn sensor(pipeline: &str, key: &str, data: Value) -> Value {
    json!({"pipelineId": pipeline, "key": key, "data": data, "date": day()})
}

fn job_report(pipeline: &str, date: &str, run_id: &str, status: &str) -> Value {
    json!({"pipelineId": pipeline, "scheduleId": "stream", "date": date, "runId": run_id,
           "status": status, "timestamp": chrono::Utc::now()})
}

fn command(pipeline: &str, name: &str, date: &str) -> Value {
    json!({"pipelineId": pipeline, "command": name, "date": date, "reason": "bad input",
           "requestedBy": "integration-tests"})
}

/// A well-formed record of `topic` for `id`: what the bad variants start from.
fn valid(topic: &str, id: &str) -> Value {
    match topic {
        "config" => pipeline(id, command_job("true")),
        "sensors" => sensor(id, "upstream", json!({"status": "ready"})),
        "jobs" => job_report(id, day(), &run_id(id, 1), "succeeded"),
        "commands" => command(id, "rerun", day()),
        other => unreachable!("{other}"),
    }
}

/// A config of `id` that fails validation.
fn invalid_config(rng: &mut Rng, id: &str) -> Value {
    let mut config = pipeline(id, command_job("true"));
    match rng.below(13) {
        0 => return json!([1, 2]),
        1 => return json!("pipeline"),
        2 => return json!(42),
        3 => return json!(true),
        4 => return json!({}),
        5 => return json!({"pipeline": {"id": 42}}),
        6 => config["pipeline"]["id"] = json!(format!("{id}-other")),
        7 => config["job"]["maxRetries"] = json!(99),
        8 => config["schedule"] = json!("hourly"),
        9 => config["validation"]["rules"] = json!({"not": "a list"}),
        10 => config["job"]["type"] = json!("teleport"),
        11 => config["schedule"]["evaluation"]["window"] = json!("forever"),
        _ => config["validation"]["rules"][1]["value"] = json!("lots"),
    }
    config
}

/// A sensor, job report or command of `id` whose fields have the wrong types or values.
fn wrong_types(rng: &mut Rng, topic: &str, id: &str) -> Value {
    let today = day();
    let ahead = (chrono::Utc::now() + chrono::TimeDelta::days(1)).to_rfc3339();
    let ready = json!({"status": "ready"});
    let mut choices = match topic {
        "config" => return invalid_config(rng, id),
        "sensors" => vec![
            json!({"pipelineId": id, "key": 42}),
            json!({"pipelineId": id, "key": "row-count", "data": [1, 2]}),
            json!({"pipelineId": id, "key": "row-count", "data": "count=5000"}),
            json!({"pipelineId": 7, "key": "row-count"}),
            json!({"key": "row-count", "data": {"count": 5000}}),
            json!({"pipelineId": id, "key": "row-count", "date": "03/03/2026"}),
            json!({"pipelineId": id, "key": "row-count", "date": today, "hour": 24}),
            json!({"pipelineId": id, "key": "row-count", "hour": 5}),
            json!({"pipelineId": id, "key": "row-count", "timestamp": "yesterday"}),
            json!({"pipelineId": id, "key": ""}),
            json!({"pipelineId": "", "key": "row-count"}),
            // older than the execution retention
            json!({"pipelineId": id, "key": "upstream", "data": ready, "date": "2001-01-01"}),
            // further ahead than the allowed clock skew
            json!({"pipelineId": id, "key": "upstream", "data": ready, "timestamp": ahead}),
        ],
        "jobs" => {
            let report = job_report(id, today, &run_id(id, 1), "succeeded");
            let with = |field: &str, v: Value| {
                let mut r = report.clone();
                r[field] = v;
                r
            };
            let mut without_timestamp = report.clone();
            without_timestamp.as_object_mut().unwrap().remove("timestamp");
            vec![
                with("status", json!("exploded")),
                without_timestamp,
                with("runId", json!("")),
                with("date", json!("yesterday")),
                with("scheduleId", json!(5)),
                with("timestamp", json!("soon")),
                with("failureCategory", json!("MAYBE")),
                json!({"pipelineId": id}),
            ]
        }
        "commands" => {
            let rerun = command(id, "rerun", today);
            let with = |field: &str, v: Value| {
                let mut r = rerun.clone();
                r[field] = v;
                r
            };
            vec![
                with("command", json!("explode")),
                with("command", json!("RERUN")),
                with("command", json!(42)),
                with("date", json!("tomorrow")),
                with("reason", json!(7)),
                command(id, "cancel", "2026-13-45"),
                json!({"pipelineId": id, "command": "rerun"}),
                json!({"pipelineId": id, "command": "subscribe", "key": "upstream:x"}),
                json!({"pipelineId": id, "command": "subscribe", "subscriber": "ghost-sub"}),
                json!({"pipelineId": id, "command": "unsubscribe", "subscriber": ""}),
            ]
        }
        other => unreachable!("{other}"),
    };
    choices.extend([json!([id]), json!(5), Value::Null, json!("record")]);
    rng.pick(&choices)
}

/// A key for a bad record: a real pipeline's id, an unknown pipeline's, a random word, or
/// bytes that are not UTF-8.
fn any_key(rng: &mut Rng, real: &[String]) -> Vec<u8> {
    match rng.below(10) {
        0..=2 => rng.pick(real).into_bytes(),
        3..=6 => ghost(rng).into_bytes(),
        7 | 8 => {
            let n = rng.range(1, 40);
            rng.word(n).into_bytes()
        }
        _ => {
            let n = rng.range(1, 32);
            let mut bytes = rng.bytes(n);
            bytes.insert(0, 0xff);
            bytes
        }
    }
}

/// An unknown pipeline's id.
fn ghost(rng: &mut Rng) -> String {
    format!("ghost-{}", rng.below(16))
}

fn huge(rng: &mut Rng) -> usize {
    rng.range(200_000, 850_000)
}

/// A bad record for `topic`, of a kind chosen by `rng`.
fn bad_record(rng: &mut Rng, topic: &'static str, real: &[String], partitions: i32) -> Record {
    let key = any_key(rng, real);
    let id = String::from_utf8_lossy(&key).into_owned();
    let k = Some(key.as_slice());
    match rng.below(12) {
        0 => {
            let n = rng.range(8, 2000);
            Record::new(topic, "random bytes", k, Some(rng.bytes(n)))
        }
        1 => {
            let full = serde_json::to_vec(&valid(topic, &id)).unwrap();
            let cut = rng.range(1, full.len());
            Record::new(topic, "truncated JSON", k, Some(full[..cut].to_vec()))
        }
        2 => match rng.below(4) {
            0 => {
                let n = huge(rng);
                Record::new(topic, "huge random bytes", k, Some(rng.bytes(n)))
            }
            1 => {
                // Valid JSON with a huge field and a small, unrelated error.
                let n = huge(rng);
                let blob = rng.word(n);
                let value = match topic {
                    "config" => {
                        let mut c = invalid_config(rng, &id);
                        if c["pipeline"].is_object() {
                            c["pipeline"]["owner"] = json!(blob);
                        } else {
                            c = json!({"pipeline": {"id": 42, "owner": blob}});
                        }
                        c
                    }
                    "sensors" => json!({"pipelineId": id, "key": 7, "data": {"blob": blob}}),
                    "jobs" => {
                        let mut r = job_report(&id, "2001-01-01", "r", "failed");
                        r["message"] = json!(blob);
                        r
                    }
                    _ => {
                        let mut c = command(&id, "cancel", "2001-01-01");
                        c["reason"] = json!(blob);
                        c
                    }
                };
                Record::json(topic, "huge valid-looking JSON", k, &value)
            }
            2 => {
                // A huge value where the error message quotes it.
                let n = rng.range(100_000, 300_000);
                let blob = rng.word(n);
                let value = match topic {
                    "config" => {
                        let mut c = pipeline(&id, command_job("true"));
                        c["schedule"]["cron"] = json!(blob);
                        c
                    }
                    "sensors" => json!({"pipelineId": id, "key": "row-count", "data": blob}),
                    "jobs" => job_report(&id, day(), "r", &blob),
                    _ => command(&id, &blob, day()),
                };
                Record::json(topic, "huge value quoted by the error", k, &value)
            }
            _ => {
                let n = rng.range(50_000, 150_000);
                let long = rng.word(n);
                let junk = rng.bytes(64);
                Record::new(topic, "huge key", Some(long.as_bytes()), Some(junk))
            }
        },
        3 | 4 => Record::json(topic, "wrong types", k, &wrong_types(rng, topic, &id)),
        5 => Record::json(topic, "no key", None, &valid(topic, &id)),
        6 => Record::json(
            topic,
            "key differs from pipelineId",
            k,
            &valid(topic, &format!("{id}-other")),
        ),
        7 => match topic {
            "config" => {
                let value = valid(topic, &id);
                let not_utf8 = [&[0xc3, 0x28][..], key.as_slice()].concat();
                Record::json(topic, "key not UTF-8", Some(&not_utf8), &value)
            }
            _ => Record::new(topic, "null value", k, None),
        },
        8 => {
            let owner = partition_for(&key, partitions).number();
            let mut r = Record::json(topic, "misrouted", k, &valid(topic, &id));
            r.partition = Some((owner + 1) % partitions);
            r
        }
        9 => {
            // Valid-looking, for a pipeline that has no config.
            let g = ghost(rng);
            let gk = Some(g.as_bytes());
            match topic {
                "config" => Record::json(topic, "unknown pipeline", gk, &invalid_config(rng, &g)),
                "sensors" => Record::json(topic, "unknown pipeline", gk, &wrong_types(rng, topic, &g)),
                "jobs" => Record::json(topic, "unknown pipeline", gk, &valid(topic, &g)),
                _ => {
                    let name = rng.pick(&["rerun", "cancel"]);
                    Record::json(topic, "unknown pipeline", gk, &command(&g, name, day()))
                }
            }
        }
        10 => Record::json(topic, "empty key", Some(b""), &valid(topic, &id)),
        _ => {
            // About a real pipeline, but for nothing it has.
            let p = rng.pick(real);
            let pk = Some(p.as_bytes());
            match topic {
                "config" => Record::json(topic, "invalid config of a real pipeline", pk, &invalid_config(rng, &p)),
                "sensors" => Record::json(topic, "real pipeline, bad sensor", pk, &wrong_types(rng, topic, &p)),
                "jobs" => Record::json(
                    topic,
                    "report of a date with no execution",
                    pk,
                    &job_report(&p, "2001-01-01", &run_id(&p, 1), "succeeded"),
                ),
                _ => Record::json(
                    topic,
                    "cancel with nothing to cancel",
                    pk,
                    &command(&p, "cancel", "2001-01-01"),
                ),
            }
        }
    }
}

/// A record that is valid though no pipeline expects it: never dead-lettered.
fn accepted_record(rng: &mut Rng) -> Record {
    let g = ghost(rng);
    let gk = Some(g.as_bytes());
    match rng.below(3) {
        0 => {
            let value = sensor(&g, "row-count", json!({"count": rng.below(10_000)}));
            Record::json("sensors", "sensor for a pipeline with no config", gk, &value)
        }
        1 => {
            let value = json!({"pipelineId": g, "command": "subscribe", "subscriber": format!("{g}-sub"),
                               "key": format!("upstream:{g}"), "requestedBy": "integration-tests"});
            Record::json("commands", "subscription to a pipeline with no config", gk, &value)
        }
        _ => {
            let n = rng.range(100_000, 400_000);
            let value = sensor(&g, "blob", json!({"blob": rng.word(n)}));
            Record::json("sensors", "huge sensor for a pipeline with no config", gk, &value)
        }
    }
    .expect(Expect::Accepted)
}

/// `n` bad and unexpected records, on every input topic.
fn noise(rng: &mut Rng, n: usize, real: &[String], partitions: i32) -> Vec<Record> {
    const TOPICS: [&str; 4] = ["config", "sensors", "jobs", "commands"];
    (0..n)
        .map(|_| match rng.below(100) {
            0..=7 => accepted_record(rng),
            _ => {
                let topic = rng.pick(&TOPICS);
                bad_record(rng, topic, real, partitions)
            }
        })
        .collect()
}

/// Puts `good` into `noise` at random places, keeping the order of each.
fn interleave(rng: &mut Rng, mut noise: Vec<Record>, good: Vec<Record>) -> Vec<Record> {
    let mut at: Vec<usize> = good.iter().map(|_| rng.below(noise.len() + 1)).collect();
    at.sort_unstable();
    for (i, record) in good.into_iter().enumerate().rev() {
        noise.insert(at[i], record.expect(Expect::Good));
    }
    noise
}

fn good_sensor(pipeline: &str, key: &str, data: Value) -> Record {
    Record::json(
        "sensors",
        "good sensor",
        Some(pipeline.as_bytes()),
        &sensor(pipeline, key, data),
    )
}

fn is_rejection(e: &Event) -> bool {
    matches!(e.kind, INPUT_REJECTED | CONFIG_REJECTED)
}

/// The events of a pipeline other than the rejections of bad records.
fn lifecycle(events: &[Event]) -> Vec<EventType> {
    events.iter().filter(|e| !is_rejection(e)).map(|e| e.kind).collect()
}

/// A pipeline id per partition, for records whose answer proves the partition was read up
/// to them.
fn barrier_ids(partitions: i32) -> Vec<String> {
    (0..partitions)
        .map(|p| {
            (0..)
                .map(|i| format!("barrier-{p}-{i}"))
                .find(|id| partition_for(id.as_bytes(), partitions).number() == p)
                .unwrap()
        })
        .collect()
}

/// Sends a bad record to every partition of every input and waits for their rejections
/// (the `round`th of each barrier pipeline): every record sent before has been handled and
/// its dead letter acknowledged.
fn barrier(w: &mut World, sender: &mut Sender, barriers: &[String], round: usize) -> Vec<Sent> {
    let mut records = Vec::new();
    for id in barriers {
        for topic in ["config", "sensors", "jobs", "commands"] {
            let value = Some(b"barrier: not json".to_vec());
            records.push(Record::new(topic, "barrier", Some(id.as_bytes()), value));
        }
    }
    let sent = sender.send(records);
    for id in barriers {
        w.wait_for(id, "the barrier's rejections", |es| {
            es.iter().filter(|e| is_rejection(e)).count() >= 4 * round
        });
    }
    sent
}

#[test]
fn bad_input_at_volume_is_dead_lettered_and_good_pipelines_run() {
    let mut rng = Rng(SEED);
    let target = http_target();
    let mut w = World::new("badinput");
    // Misrouted records are among the rejects here (forwarding has its own test).
    w.env.push(("SLUICE_MISROUTED".into(), "reject".into()));
    let partitions = w.partitions();
    let (alpha, beta, orphan) = ("alpha", "beta", "orphan");
    let real = vec![alpha.to_string(), beta.to_string()];
    let runs = w.scratch.path().join("runs.txt");
    let alpha_job = command_job(&format!("echo \"$SLUICE_RUN_ID\" >> {}", runs.display()));
    let beta_job = json!({"type": "http", "config": {"url": target.url, "awaitReport": true}});
    w.config(&pipeline(alpha, alpha_job));
    w.config(&pipeline(beta, beta_job));
    w.start();
    for id in [alpha, beta] {
        w.wait_for(id, "CONFIG_ACCEPTED", |es| es.iter().any(|e| e.kind == CONFIG_ACCEPTED));
    }

    let mut sender = Sender::new(&w.prefix);
    let mut sent = Vec::new();

    // Noise around sensors that fail alpha's rules, open its run, then fix it; beta passes
    // at once; orphan (no config yet) collects sensors that are kept for later.
    let good = vec![
        good_sensor(alpha, "row-count", json!({"count": 10})),
        good_sensor(beta, "row-count", json!({"count": 2000})),
        good_sensor(orphan, "row-count", json!({"count": 3000})),
        good_sensor(alpha, "upstream", json!({"status": "ready"})),
        good_sensor(beta, "upstream", json!({"status": "ready"})),
        good_sensor(orphan, "upstream", json!({"status": "ready"})),
        good_sensor(alpha, "row-count", json!({"count": 5000})),
    ];
    let bad = noise(&mut rng, 340, &real, partitions);
    let records = interleave(&mut rng, bad, good);
    sent.extend(sender.send(records));
    w.wait_for(alpha, "JOB_COMPLETED", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    w.wait_for(beta, "JOB_TRIGGERED", |es| es.iter().any(|e| e.kind == JOB_TRIGGERED));
    // orphan's sensors are stored before its config is sent.
    let barriers = barrier_ids(partitions);
    sent.extend(barrier(&mut w, &mut sender, &barriers, 1));

    // Noise around beta's runner reporting success, a rerun of alpha with unchanged data,
    // late reports of runs that are not current, and orphan's config at last.
    let mut good = vec![
        Record::json(
            "jobs",
            "good job report",
            Some(beta.as_bytes()),
            &job_report(beta, day(), &run_id(beta, 1), "succeeded"),
        ),
        Record::json(
            "commands",
            "good rerun",
            Some(alpha.as_bytes()),
            &command(alpha, "rerun", day()),
        ),
    ];
    for p in [alpha, beta] {
        let report = job_report(p, day(), &run_id(p, 7), "failed");
        good.push(Record::json(
            "jobs",
            "report of a run that is not current",
            Some(p.as_bytes()),
            &report,
        ));
    }
    let bad = noise(&mut rng, 60, &real, partitions);
    let mut records = interleave(&mut rng, bad, good);
    records.push(
        Record::json(
            "config",
            "good config",
            Some(orphan.as_bytes()),
            &pipeline(orphan, command_job("true")),
        )
        .expect(Expect::Good),
    );
    sent.extend(sender.send(records));
    w.wait_for(beta, "JOB_COMPLETED", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    w.wait_for(alpha, "RERUN_REJECTED", |es| {
        es.iter().any(|e| e.kind == RERUN_REJECTED)
    });
    w.wait_for(orphan, "JOB_COMPLETED", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));

    sent.extend(barrier(&mut w, &mut sender, &barriers, 2));

    // Summary of what was thrown at the processor.
    let mut kinds: BTreeMap<(Expect, &str, &str), usize> = BTreeMap::new();
    for s in &sent {
        *kinds
            .entry((s.record.expect, s.record.kind, s.record.topic))
            .or_default() += 1;
    }
    for ((expect, kind, topic), n) in &kinds {
        println!("{expect:?} {topic} {kind}: {n}");
    }
    let bad: Vec<&Sent> = sent.iter().filter(|s| s.record.expect == Expect::DeadLetter).collect();
    let huge = bad
        .iter()
        .filter(|s| s.record.value.as_ref().is_some_and(|v| v.len() > 100_000))
        .count();
    println!("{} records, {} bad ({huge} over 100 KB)", sent.len(), bad.len());
    assert!(bad.len() >= 300, "{} bad records", bad.len());
    for topic in ["config", "sensors", "jobs", "commands"] {
        assert!(
            bad.iter().filter(|s| s.record.topic == topic).count() >= 50,
            "bad records on {topic}"
        );
    }

    // The dead-letter topic holds exactly the bad records, unchanged, each with its error.
    let by_source: BTreeMap<(String, i32, i64), &Sent> = sent
        .iter()
        .map(|s| ((w.topic(s.record.topic), s.partition, s.offset), s))
        .collect();
    let dead = w.dead_letters(bad.len());
    let dlq_end = dlq_end(&w.topic("dlq"));
    let dead = match dlq_end as usize > dead.len() {
        true => w.dead_letters(dlq_end as usize),
        false => dead,
    };
    let mut problems = Vec::new();
    let mut lettered = BTreeSet::new();
    for (value, headers) in &dead {
        let header = |k: &str| headers.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone());
        let source = (
            header("source.topic").unwrap_or_default(),
            header("source.partition").and_then(|p| p.parse().ok()).unwrap_or(-1),
            header("source.offset").and_then(|o| o.parse().ok()).unwrap_or(-1),
        );
        let error = header("error").unwrap_or_default();
        match by_source.get(&source) {
            None => problems.push(format!("dead letter from no record of this test: {source:?}: {error}")),
            Some(s) if s.record.expect != Expect::DeadLetter => problems.push(format!(
                "{:?} {} record {source:?} ({:?}) was dead-lettered: {}",
                s.record.expect,
                s.record.topic,
                s.record.kind,
                error.chars().take(300).collect::<String>()
            )),
            Some(s) => {
                if error.trim().is_empty() {
                    problems.push(format!(
                        "{} {:?} {source:?}: no error header",
                        s.record.topic, s.record.kind
                    ));
                }
                if value != &s.record.value {
                    problems.push(format!(
                        "{} {:?} {source:?}: value changed",
                        s.record.topic, s.record.kind
                    ));
                }
            }
        }
        if !lettered.insert(source.clone()) {
            problems.push(format!("dead-lettered twice: {source:?}"));
        }
    }
    for s in &bad {
        let source = (w.topic(s.record.topic), s.partition, s.offset);
        if !lettered.contains(&source) {
            let value = s.record.value.as_deref().unwrap_or_default();
            problems.push(format!(
                "not dead-lettered: {} {:?} {source:?}: {}",
                s.record.topic,
                s.record.kind,
                String::from_utf8_lossy(&value[..value.len().min(200)])
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert_eq!(dead.len(), bad.len(), "one dead letter per bad record");

    // The real pipelines ran as if nothing else had arrived, and answered every bad record
    // addressed to them with a rejection.
    let run = [CONFIG_ACCEPTED, VALIDATION_PASSED, JOB_TRIGGERED, JOB_COMPLETED];
    for (id, expected) in [
        (alpha, [run.as_slice(), &[RERUN_REJECTED]].concat()),
        (beta, run.to_vec()),
        // Its trigger sensor was kept: the config recovers it.
        (
            orphan,
            vec![
                CONFIG_ACCEPTED,
                TRIGGER_RECOVERED,
                VALIDATION_PASSED,
                JOB_TRIGGERED,
                JOB_COMPLETED,
            ],
        ),
    ] {
        let addressed = bad
            .iter()
            .filter(|s| s.record.key.as_deref() == Some(id.as_bytes()))
            .count();
        let events = w.wait_for(id, "a rejection per bad record", |es| {
            es.iter().filter(|e| is_rejection(e)).count() >= addressed
        });
        assert_eq!(lifecycle(&events), expected, "{id}");
        assert_eq!(events.iter().filter(|e| is_rejection(e)).count(), addressed, "{id}");
        let completed = events.iter().find(|e| e.kind == JOB_COMPLETED).unwrap();
        assert_eq!(completed.run_id.as_deref(), Some(run_id(id, 1).as_str()), "{id}");
    }
    let events = w.wait_for(alpha, "events", |_| true);
    let passed = events.iter().find(|e| e.kind == VALIDATION_PASSED).unwrap();
    assert_eq!(
        passed.detail["results"][1]["seen"],
        json!(5000),
        "passed on the fixing sensor"
    );
    let rerun = events.iter().find(|e| e.kind == RERUN_REJECTED).unwrap();
    assert!(rerun.message.contains("no sensor data changed"), "{}", rerun.message);
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        format!("{}\n", run_id(alpha, 1))
    );
    assert_eq!(
        target.requests.lock().unwrap().len(),
        1,
        "beta's job was requested once"
    );

    let log = w.log();
    let panics: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert!(panics.is_empty(), "the processor panicked:\n{}", panics.join("\n"));
    assert_eq!(w.stop().code(), Some(0), "SIGTERM closes cleanly:\n{}", w.log_tail());
}

/// The end offset of the dead-letter topic's single partition.
fn dlq_end(topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", format!("{topic}-watermarks"))
        .create()
        .unwrap();
    let (_, high) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)).unwrap();
    high
}

/// An error message that quotes a huge value must not make the INPUT_REJECTED event (which
/// carries the error twice) or the dead letter (the value plus the error header) larger than
/// the producer's 1 MB `message.max.bytes`: reasons are cut to 1,000 bytes. (Before they
/// were, the processor retried that produce forever and every partition stalled.)
#[test]
fn a_rejection_quoting_a_huge_value_is_dead_lettered() {
    let mut w = World::new("hugequote");
    w.start_with(&pipeline("hq", command_job("true")));
    let blob = "x".repeat(600_000);
    let record = json!({"pipelineId": "hq", "key": "row-count", "data": blob});
    w.produce("sensors", Some("hq"), Some(&serde_json::to_vec(&record).unwrap()));
    w.produce("sensors", Some("hq"), Some(b"after: not json"));
    w.wait_for("hq", "both rejections", |es| {
        es.iter().filter(|e| is_rejection(e)).count() >= 2
    });
    let dead = w.dead_letters(2);
    assert_eq!(
        dead[0].0.as_ref().map(Vec::len),
        Some(serde_json::to_vec(&record).unwrap().len()),
        "the value is kept whole"
    );
    let error = &dead[0].1.iter().find(|(k, _)| k == "error").unwrap().1;
    assert!(error.len() < 1_100 && error.contains("more bytes)"), "{error}");
    assert_eq!(dead[1].0.as_deref(), Some(b"after: not json".as_slice()));
    assert_eq!(w.stop().code(), Some(0), "SIGTERM closes cleanly:\n{}", w.log_tail());
}

/// Limits (`--max-record-bytes`, `--max-sensors-per-pipeline`): a record or reading over one
/// is an INPUT_REJECTED naming the limit, dead-lettered whole, and the pipeline goes on.
#[test]
fn records_over_the_limits_are_rejected_naming_the_limit() {
    let mut w = World::new("limits");
    w.config(&pipeline("lim", command_job("true")));
    let child = w.spawn(
        w.state.path(),
        &["--max-record-bytes", "4096", "--max-sensors-per-pipeline", "2"],
    );
    w.swap_processor(Some(child));
    w.wait_for("lim", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    let big = json!({"pipelineId": "lim", "key": "row-count", "data": {"count": 5000, "pad": "x".repeat(8000)}});
    let big = serde_json::to_vec(&big).unwrap();
    w.produce("sensors", Some("lim"), Some(&big));
    // The pipeline goes on without it: two readings (its limit) run the job.
    w.sensor("lim", "row-count", json!({"count": 5000}));
    w.sensor("lim", "upstream", json!({"status": "ready"}));
    w.wait_for("lim", "JOB_COMPLETED", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    // A third key: over the pipeline's limit of two readings.
    w.sensor("lim", "third", json!({"n": 1}));
    w.wait_for("lim", "both rejections", |es| {
        es.iter().filter(|e| is_rejection(e)).count() >= 2
    });
    let dead = w.dead_letters(2);
    let error = |i: usize| dead[i].1.iter().find(|(k, _)| k == "error").unwrap().1.clone();
    assert_eq!(dead[0].0.as_deref(), Some(big.as_slice()), "the record is kept whole");
    assert!(
        error(0).contains("--max-record-bytes") && error(0).contains("4096"),
        "{}",
        error(0)
    );
    assert!(error(1).contains("--max-sensors-per-pipeline"), "{}", error(1));
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// Each record of a pipeline's state is one changelog record, which must fit the broker's
/// largest message: an input that would grow one past `--max-state-bytes` is rejected to the
/// dead-letter topic naming the limit, the state stays as it was, and the pipeline goes on.
#[test]
fn an_input_that_would_grow_the_state_past_its_limit_is_rejected() {
    let mut w = World::new("state-limit");
    w.config(&pipeline("fat", command_job("true")));
    let child = w.spawn(w.state.path(), &["--max-state-bytes", "6000"]);
    w.swap_processor(Some(child));
    w.wait_for("fat", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == CONFIG_ACCEPTED)
    });
    // Readings are records of their own: two of 2,000 bytes fit; one of 7,000 does not.
    for (key, pad) in [("a", 2000), ("b", 2000), ("c", 7000)] {
        w.sensor("fat", key, json!({"pad": "x".repeat(pad)}));
    }
    w.wait_for("fat", "the rejection", |es| es.iter().any(is_rejection));
    let dead = w.dead_letters(1);
    let error = dead[0].1.iter().find(|(k, _)| k == "error").unwrap().1.clone();
    assert!(error.contains("--max-state-bytes") && error.contains("6000"), "{error}");
    assert!(
        dead[0]
            .0
            .as_deref()
            .is_some_and(|v| String::from_utf8_lossy(v).contains("\"key\":\"c\"")),
        "the third reading is the dead letter"
    );
    // The state kept the first two readings, and the pipeline goes on: they run the job.
    w.sensor("fat", "row-count", json!({"count": 5000}));
    w.sensor("fat", "upstream", json!({"status": "ready"}));
    w.wait_for("fat", "JOB_COMPLETED", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// No poison pill: a record under `--max-record-bytes` whose fields would make a changelog
/// key or an event larger than any broker takes is dead-lettered with the reason, and the
/// processor goes on. Before, a job report with a 1,040,000-byte run id (its journal entry's
/// key) and a sensor with a ~1 MB key for a pipeline without config (its stored slot's key)
/// each made a changelog record the producer refused, and the processor exited 1; every
/// restart and every new owner would have died on the same record.
#[test]
fn a_record_whose_fields_would_outgrow_a_broker_record_is_dead_lettered_and_nothing_stops() {
    let mut w = World::new("poison");
    w.start_with(&pipeline("pp", command_job("true")));
    // The test's own producer takes records up to 2 MB, as a broker configured so would.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("message.max.bytes", "2000000")
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    let send = |topic: &str, key: &str, value: &Value| {
        let topic = w.topic(topic);
        let value = serde_json::to_vec(value).unwrap();
        producer
            .send(BaseRecord::to(&topic).key(key).payload(&value))
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(Duration::from_secs(30)).unwrap();
    };
    send(
        "jobs",
        "pp",
        &job_report("pp", day(), &"r".repeat(1_040_000), "succeeded"),
    );
    send(
        "sensors",
        "ghost",
        &json!({"pipelineId": "ghost", "key": "k".repeat(1_030_000)}),
    );
    let dead = w.dead_letters(2);
    let error = |i: usize| dead[i].1.iter().find(|(k, _)| k == "error").unwrap().1.clone();
    let errors = [error(0), error(1)];
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("runId is 1040000 bytes, over the limit")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("key is 1030000 bytes, over the limit")),
        "{errors:?}"
    );
    for (value, headers) in &dead {
        // Whole, the record and its headers would be over the producer's 1 MB: it goes
        // without its value, saying so, and its coordinates say where to read it.
        assert!(value.is_none(), "{headers:?}");
        assert!(headers.iter().any(|(k, _)| k == "value.omitted"), "{headers:?}");
    }
    w.wait_for("ghost", "the sensor's rejection", |es| es.iter().any(is_rejection));
    // The processor is alive and the pipeline runs.
    w.sensor("pp", "row-count", json!({"count": 5000}));
    w.sensor("pp", "upstream", json!({"status": "ready"}));
    let events = w.wait_for("pp", "JOB_COMPLETED", |es| es.iter().any(|e| e.kind == JOB_COMPLETED));
    assert!(events.iter().any(is_rejection), "the report's rejection is pp's event");
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// Producers whose clocks all run 10 minutes ahead of the processor's (as when the
/// processor's clock is 10 minutes behind): readings stamped more than the allowed skew (5
/// minutes) in the future were each dead-lettered, so nothing ever ran. Now the processor
/// sees most of its inputs stamped that far ahead, takes its own clock to be behind, widens
/// the allowance by as much and says so; the pipeline runs.
#[test]
fn a_processor_clock_behind_its_producers_accepts_their_readings_and_says_so() {
    let mut w = World::new("clock-behind");
    let id = "ahead";
    w.start_with(&pipeline(id, support::command_job("true", 0)));
    let ahead = chrono::Utc::now() + chrono::TimeDelta::minutes(10);
    let reading = |key: &str, data: Value| {
        let record =
            json!({"pipelineId": id, "key": key, "data": data, "date": day(), "timestamp": ahead.to_rfc3339()});
        serde_json::to_vec(&record).unwrap()
    };
    let stamp = Some(ahead.timestamp_millis());
    // Readings of a pipeline without a config first: stamps to judge the clock by.
    for i in 0..8 {
        let filler = reading("noise", json!({"i": i}));
        w.produce_stamped("sensors", Some("unconfigured"), Some(&filler), stamp);
    }
    w.produce_stamped(
        "sensors",
        Some(id),
        Some(&reading("row-count", json!({"count": 5000}))),
        stamp,
    );
    w.produce_stamped(
        "sensors",
        Some(id),
        Some(&reading("upstream", json!({"status": "ready"}))),
        stamp,
    );
    w.wait_for(id, "JOB_TRIGGERED", |es| es.iter().any(|e| e.kind == JOB_TRIGGERED));
    let rejected: Vec<_> = (w.events_seen().iter())
        .filter(|e| e.pipeline_id == id && e.kind == INPUT_REJECTED)
        .map(|e| e.message.clone())
        .collect();
    assert!(rejected.is_empty(), "{rejected:?}");
    assert!(
        w.log()
            .contains("runs behind the times its producers stamp sensor records with"),
        "{}",
        w.log_tail()
    );
}
