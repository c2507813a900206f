//! Test harness: a real broker (from deploy/test.sh), the real `sluice` binary, and
//! conditions awaited with deadlines.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use sluice::core::events::{Event, EventType};
use sluice::runtime::codec::{Codec, Family};

pub const DEADLINE: Duration = Duration::from_secs(60);

/// Kills the extra instances a test started, however it ends.
pub struct Instances(pub Vec<Child>);

impl Instances {
    /// Stops every instance cleanly (SIGTERM) and waits for it, so it leaves the group.
    pub fn terminate(mut self) {
        for child in &mut self.0 {
            Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for Instances {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn brokers() -> String {
    std::env::var("SLUICE_TEST_BROKERS")
        .expect("integration tests need a broker: run deploy/test.sh, which starts one, or set SLUICE_TEST_BROKERS")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn sluice() -> Command {
    sluice_on(&brokers())
}

/// `sluice` talking to `brokers`.
pub fn sluice_on(brokers: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.current_dir(repo())
        .env("SLUICE_BROKERS", brokers)
        .env_remove("SLUICE_TOPIC_PREFIX");
    // The test broker is tansu (deploy/test.sh says so too; this covers a bare cargo test).
    if std::env::var_os("SLUICE_BROKER_QUIRKS").is_none() {
        cmd.env("SLUICE_BROKER_QUIRKS", "tansu");
    }
    cmd
}

/// A consumer that never commits by itself.
fn consumer(group: &str) -> BaseConsumer {
    consumer_on(&brokers(), group)
}

fn consumer_on(brokers: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

/// A record's key and value.
pub type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Where the tests read a topic from its first record: offset 0, not `Offset::Beginning`.
/// tansu 0.6 answers "the beginning" with the batch written first in time, which among
/// concurrent writers (instances sharing the dead-letter topic) need not be the first.
const FIRST: Offset = Offset::Offset(0);

/// Adds every partition of `topic`, at `offset`, to `list`.
fn add_partitions(consumer: &BaseConsumer, list: &mut TopicPartitionList, topic: &str, offset: Offset) {
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    for p in md.topics()[0].partitions() {
        list.add_partition_offset(topic, p.id(), offset).unwrap();
    }
}

/// The test producer's delivery reports: what the broker refused, to be asserted on.
#[derive(Default)]
pub struct Deliveries {
    failed: std::sync::Mutex<Vec<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, record)) = result {
            let bytes = record.payload().map_or(0, <[u8]>::len);
            let what = format!("{error}: {bytes} bytes to {}", record.topic());
            self.failed.lock().unwrap().push(what);
        }
    }
}

/// One test's world: its own topic prefix, consumer group and state directory.
pub struct World {
    pub name: String,
    pub brokers: String,
    pub prefix: String,
    pub state: tempfile::TempDir,
    pub scratch: tempfile::TempDir,
    producer: BaseProducer<Deliveries>,
    events: BaseConsumer,
    seen: Vec<Event>,
    processor: Option<Child>,
    log: PathBuf,
    /// Extra environment for the processors this world starts (secrets, say).
    pub env: Vec<(String, String)>,
    /// Variables of this process's environment the processors do not inherit.
    pub unset_env: Vec<String>,
    /// `--allow-env` names: which of those `${env:NAME}` may read ([`World::secret`]).
    pub allow_env: Vec<String>,
    /// `--allow-target` ranges (SSRF guard): loopback by default, since the tests' job
    /// targets listen there; empty to test the guard itself.
    pub allow_targets: String,
    /// Reads events with this codec (Avro, a registry) instead of as plain JSON.
    codec: Option<(Codec, tokio::runtime::Runtime)>,
    /// How far the processors' clock runs ahead of the wall clock (`--clock-offset`).
    ahead: chrono::TimeDelta,
}

/// A topic prefix no other world shares.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("it-{name}-{}-{nanos}.", std::process::id())
}

impl World {
    /// Creates the world's topics with `sluice topics apply`.
    pub fn new(name: &str) -> Self {
        Self::on_broker(name, &brokers())
    }

    /// A world on a broker of the test's own (one it stops and starts, say).
    pub fn on_broker(name: &str, brokers: &str) -> Self {
        let prefix = unique(name);
        let status = sluice_on(brokers)
            .args(["topics", "apply", "--dir", "topics", "--topic-prefix", &prefix])
            .status()
            .unwrap();
        assert!(status.success(), "topics apply failed");
        Self::with_topics_on(name, prefix, brokers)
    }

    /// For worlds whose topics the test creates itself.
    pub fn with_topics(name: &str, prefix: String) -> Self {
        Self::with_topics_on(name, prefix, &brokers())
    }

    fn with_topics_on(name: &str, prefix: String, brokers: &str) -> Self {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("partitioner", sluice::runtime::kafka::PARTITIONER)
            // One record per batch: tansu 0.6 answers a fetch that starts inside a
            // multi-record batch with nothing, so a processor restarted with its committed
            // offset there would never see the rest of the partition.
            .set("batch.num.messages", "1")
            .create_with_context(Deliveries::default())
            .unwrap();
        let events = consumer_on(brokers, &format!("{prefix}reader"));
        let scratch = tempfile::tempdir().unwrap();
        let log = scratch.path().join("processor.log");
        World {
            name: name.to_string(),
            brokers: brokers.to_string(),
            prefix,
            state: tempfile::tempdir().unwrap(),
            scratch,
            producer,
            events,
            seen: Vec::new(),
            processor: None,
            log,
            env: Vec::new(),
            unset_env: Vec::new(),
            allow_env: Vec::new(),
            allow_targets: "127.0.0.0/8".into(),
            codec: None,
            ahead: chrono::TimeDelta::zero(),
        }
    }

    /// Runs this world's processors with their clock shifted (`--clock-offset`) so that the
    /// processors' next whole minute comes `lead` from now; returns that minute. A test of a
    /// deadline or a cron time waits seconds for it, not up to two minutes.
    pub fn next_minute_in(&mut self, lead: Duration) -> chrono::DateTime<chrono::Utc> {
        assert!(self.processor.is_none(), "shift the clock before the processor starts");
        let now = chrono::Utc::now();
        // At least a minute ahead, so that the shift is never backwards.
        let minute = chrono::DateTime::from_timestamp((now.timestamp().div_euclid(60) + 2) * 60, 0).unwrap();
        let lead = chrono::TimeDelta::from_std(lead).unwrap();
        self.ahead = chrono::TimeDelta::milliseconds((minute - lead - now).num_milliseconds());
        self.env.push((
            "SLUICE_CLOCK_OFFSET".into(),
            format!("{}ms", self.ahead.num_milliseconds()),
        ));
        minute
    }

    /// The processors' clock.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now() + self.ahead
    }

    /// The `Instant` at which the processors' clock reads `at` (now if it has).
    pub fn instant_at(&self, at: chrono::DateTime<chrono::Utc>) -> Instant {
        Instant::now() + (at - self.now()).to_std().unwrap_or(Duration::ZERO)
    }

    /// Reads the events topic with `codec` from now on (events written as Avro, say).
    pub fn read_events_with(&mut self, codec: Codec) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        self.codec = Some((codec, runtime));
    }

    pub fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Starts `sluice run` for this world.
    pub fn start(&mut self) {
        assert!(self.processor.is_none(), "processor already running");
        let child = self.spawn(self.state.path(), &[]);
        self.processor = Some(child);
    }

    /// Spawns one more `sluice run` instance of this world (same group), with its own state
    /// directory and `extra` arguments; its log goes to the world's log.
    pub fn spawn(&self, state_dir: &Path, extra: &[&str]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command = sluice_on(&self.brokers);
        for name in &self.unset_env {
            command.env_remove(name);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        match self.allow_targets.is_empty() {
            true => command.env_remove("SLUICE_ALLOW_TARGETS"),
            false => command.env("SLUICE_ALLOW_TARGETS", &self.allow_targets),
        };
        match self.allow_env.is_empty() {
            true => command.env_remove("SLUICE_ALLOW_ENV"),
            false => command.env("SLUICE_ALLOW_ENV", self.allow_env.join(",")),
        };
        command
            .args([
                "run",
                "--topic-prefix",
                &self.prefix,
                "--group",
                &format!("{}group", self.prefix),
            ])
            .arg("--state-dir")
            .arg(state_dir)
            .args(["--log", "info,sluice=debug"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Sets `name` in the processors' environment and lets job configs read it as
    /// `${env:NAME}` (`--allow-env`).
    pub fn secret(&mut self, name: &str, value: &str) {
        self.env.push((name.into(), value.into()));
        self.allow_env.push(name.into());
    }

    /// Starts this world's processor serving HTTP on `addr` (with `extra` arguments) and
    /// waits until `/readyz` answers 200, which needs no token.
    pub fn serve(&mut self, addr: &str, extra: &[&str]) {
        let mut args = vec!["--http", addr];
        args.extend_from_slice(extra);
        let child = self.spawn(self.state.path(), &args);
        assert!(self.swap_processor(Some(child)).is_none(), "processor already running");
        wait_until(
            "the processor ready",
            Duration::from_secs(60),
            || self.log_tail(),
            || http_get(addr, "/readyz").is_some_and(|(s, _)| s == 200),
        );
    }

    /// Replaces the running processor with `child` (or none), returning the previous one.
    pub fn swap_processor(&mut self, child: Option<Child>) -> Option<Child> {
        std::mem::replace(&mut self.processor, child)
    }

    /// Publishes a pipeline's config, starts the processor and waits until it accepted the
    /// config, so that the records a test sends next are handled with the config in force
    /// (input topics are consumed independently, so their relative order is not guaranteed).
    pub fn start_with(&mut self, config: &Value) {
        self.config(config);
        self.start();
        let id = config["pipeline"]["id"].as_str().unwrap();
        self.wait_for(id, "CONFIG_ACCEPTED", |es| {
            es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
        });
    }

    /// Commits offset 0 for every input partition in the processor's consumer group, as if
    /// the commits had been lost in a crash. Only while the processor is stopped.
    pub fn rewind_committed_offsets(&self) {
        assert!(self.processor.is_none(), "stop the processor first");
        let consumer = consumer_on(&self.brokers, &format!("{}group", self.prefix));
        let mut list = TopicPartitionList::new();
        for topic in ["config", "sensors", "jobs", "commands"] {
            add_partitions(&consumer, &mut list, &self.topic(topic), Offset::Offset(0));
        }
        consumer.commit(&list, rdkafka::consumer::CommitMode::Sync).unwrap();
        let committed = consumer.committed(Duration::from_secs(10)).unwrap();
        assert!(
            committed.elements().iter().all(|e| e.offset() == Offset::Offset(0)),
            "{committed:?}"
        );
    }

    /// The sum over partitions of the offsets the processor's group has committed on `topic`
    /// (without prefix): how many of its records the processor has handled.
    pub fn committed(&self, topic: &str) -> i64 {
        let consumer = consumer_on(&self.brokers, &format!("{}group", self.prefix));
        let mut list = TopicPartitionList::new();
        add_partitions(&consumer, &mut list, &self.topic(topic), Offset::Invalid);
        match consumer.committed_offsets(list, Duration::from_secs(10)) {
            Ok(committed) => committed
                .elements()
                .iter()
                .filter_map(|e| e.offset().to_raw())
                .filter(|o| *o > 0)
                .sum(),
            Err(_) => 0,
        }
    }

    /// Stops the processor with SIGTERM and returns its exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.processor.take().expect("processor running");
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "processor did not stop after SIGTERM:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The log's last 40 lines, after its last 30 lines about partitions, restores,
    /// signals, warnings and errors (what explains a stall that the tail alone does not).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let notable: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| {
                ["partition", "restored", "subscribed", "SIGTERM", " WARN ", " ERROR "]
                    .iter()
                    .any(|n| l.contains(n))
            })
            .collect();
        format!(
            "notable lines:\n{}\n\nlast lines:\n{}",
            notable[notable.len().saturating_sub(30)..].join("\n"),
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    pub fn produce(&self, topic: &str, key: Option<&str>, value: Option<&[u8]>) {
        self.produce_stamped(topic, key, value, None)
    }

    /// [`World::produce`] with the record's timestamp (ms since the epoch) set, as a
    /// producer whose clock differs would set it.
    pub fn produce_stamped(&self, topic: &str, key: Option<&str>, value: Option<&[u8]>, stamp: Option<i64>) {
        let topic = self.topic(topic);
        let mut record: BaseRecord<'_, str, [u8]> = BaseRecord::to(&topic);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(v) = value {
            record = record.payload(v);
        }
        if let Some(stamp) = stamp {
            record = record.timestamp(stamp);
        }
        self.producer.send(record).map_err(|(e, _)| e).unwrap();
        self.flush(Duration::from_secs(10));
    }

    /// Produces `records` (topic without prefix, key, value) in order and waits once for all.
    pub fn produce_many(&self, records: &[(&str, String, Vec<u8>)]) {
        for (topic, key, value) in records {
            let topic = self.topic(topic);
            let mut record: BaseRecord<'_, str, [u8]> =
                BaseRecord::to(&topic).key(key.as_str()).payload(value.as_slice());
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((e, r)) => {
                        assert!(
                            matches!(
                                e.rdkafka_error_code(),
                                Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                            ),
                            "{e}"
                        );
                        self.producer.poll(Duration::from_millis(50));
                        record = r;
                    }
                }
            }
        }
        self.flush(Duration::from_secs(30));
    }

    /// Waits for every record sent to be acknowledged, and fails the test on one the broker
    /// refused: a flush alone returns once each has a delivery report, good or bad, so a lost
    /// input would show as the processor never seeing it.
    fn flush(&self, within: Duration) {
        self.producer.flush(within).unwrap();
        let failed = std::mem::take(&mut *self.producer.context().failed.lock().unwrap());
        assert!(
            failed.is_empty(),
            "the broker refused records the test sent: {failed:?}"
        );
    }

    /// Produces to an explicit partition with record headers.
    pub fn produce_with_headers(&self, topic: &str, partition: i32, key: &str, value: &[u8], headers: &[(&str, &str)]) {
        let topic = self.topic(topic);
        let headers = headers.iter().fold(rdkafka::message::OwnedHeaders::new(), |h, (k, v)| {
            h.insert(rdkafka::message::Header {
                key: k,
                value: Some(v.as_bytes()),
            })
        });
        let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(&topic)
            .partition(partition)
            .key(key)
            .payload(value)
            .headers(headers);
        self.producer.send(record).map_err(|(e, _)| e).unwrap();
        self.flush(Duration::from_secs(10));
    }

    /// Produces to an explicit partition, whatever the key hashes to.
    pub fn produce_to_partition(&self, topic: &str, partition: i32, key: &str, value: &[u8]) {
        self.produce_to_partition_at(topic, partition, key, value, None);
    }

    /// [`Self::produce_to_partition`] with the record's timestamp (ms since the epoch).
    pub fn produce_to_partition_at(&self, topic: &str, partition: i32, key: &str, value: &[u8], at: Option<i64>) {
        let topic = self.topic(topic);
        let mut record: BaseRecord<'_, str, [u8]> = BaseRecord::to(&topic).partition(partition).key(key).payload(value);
        if let Some(at) = at {
            record = record.timestamp(at);
        }
        self.producer.send(record).map_err(|(e, _)| e).unwrap();
        self.flush(Duration::from_secs(10));
    }

    pub fn config(&self, config: &Value) {
        let id = config["pipeline"]["id"].as_str().unwrap();
        self.produce("config", Some(id), Some(&serde_json::to_vec(config).unwrap()));
    }

    pub fn sensor(&self, pipeline: &str, key: &str, data: Value) {
        let record = json!({"pipelineId": pipeline, "key": key, "data": data, "date": day()});
        self.produce("sensors", Some(pipeline), Some(&serde_json::to_vec(&record).unwrap()));
    }

    /// A sensor scoped to `date` (`YYYY-MM-DD[THH]` split into date and hour), or undated
    /// (`None`: it counts for every execution date).
    pub fn sensor_on(&self, pipeline: &str, key: &str, data: Value, date: Option<&str>) {
        let mut record = json!({"pipelineId": pipeline, "key": key, "data": data});
        if let Some(date) = date {
            let (day, hour) = match date.split_once('T') {
                Some((day, hour)) => (day, Some(hour.parse::<u32>().unwrap())),
                None => (date, None),
            };
            record["date"] = json!(day);
            if let Some(hour) = hour {
                record["hour"] = json!(hour);
            }
        }
        self.produce("sensors", Some(pipeline), Some(&serde_json::to_vec(&record).unwrap()));
    }

    /// Produces a record on the commands topic, keyed by `pipeline`: `record` is the value
    /// (`{pipelineId, command, date, ...}`).
    pub fn command(&self, pipeline: &str, record: &Value) {
        self.produce("commands", Some(pipeline), Some(&serde_json::to_vec(record).unwrap()));
    }

    /// An operator's `rerun` of `pipeline`'s execution for `date`.
    pub fn rerun(&self, pipeline: &str, date: &str, reason: &str) {
        let record = json!({"pipelineId": pipeline, "command": "rerun", "date": date,
                            "reason": reason, "requestedBy": "integration-tests"});
        self.command(pipeline, &record);
    }

    /// The partition count of the input topics (they are co-partitioned).
    pub fn partitions(&self) -> i32 {
        let md = self
            .events
            .fetch_metadata(Some(&self.topic("sensors")), Duration::from_secs(10))
            .unwrap();
        md.topics()[0].partitions().len() as i32
    }

    /// The processor log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn job(&self, pipeline: &str, run_id: &str, status: &str) {
        let record = json!({"pipelineId": pipeline, "scheduleId": "stream", "date": day(), "runId": run_id,
                            "status": status, "timestamp": chrono::Utc::now()});
        self.produce("jobs", Some(pipeline), Some(&serde_json::to_vec(&record).unwrap()));
    }

    fn subscribe_events(&mut self) {
        if !self.events.assignment().unwrap().elements().is_empty() {
            return;
        }
        let topic = self.topic("events");
        let mut list = TopicPartitionList::new();
        add_partitions(&self.events, &mut list, &topic, FIRST);
        self.events.assign(&list).unwrap();
    }

    /// Waits until the events of `pipeline` satisfy `done`; returns them.
    pub fn wait_for(&mut self, pipeline: &str, what: &str, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        self.wait_for_until(pipeline, what, Instant::now() + DEADLINE, done)
    }

    /// [`World::wait_for`] with an explicit deadline, for conditions tied to the wall clock
    /// (cron occurrences, SLA deadlines) that may lie further ahead than [`DEADLINE`].
    pub fn wait_for_until(
        &mut self,
        pipeline: &str,
        what: &str,
        deadline: Instant,
        done: impl Fn(&[Event]) -> bool,
    ) -> Vec<Event> {
        self.wait_events(
            &format!("{what} of {pipeline}"),
            deadline,
            |e| e.pipeline_id == pipeline,
            done,
        )
    }

    /// Waits until the events of every pipeline satisfy `done`; returns them all.
    pub fn wait_for_all(&mut self, what: &str, deadline: Instant, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        self.wait_events(what, deadline, |_| true, done)
    }

    /// Every event read so far, in the order read.
    pub fn events_seen(&self) -> &[Event] {
        &self.seen
    }

    fn wait_events(
        &mut self,
        what: &str,
        deadline: Instant,
        mine: impl Fn(&Event) -> bool,
        done: impl Fn(&[Event]) -> bool,
    ) -> Vec<Event> {
        self.subscribe_events();
        let mut checked = usize::MAX;
        let mut selected: Vec<Event> = Vec::new();
        loop {
            if checked != self.seen.len() {
                selected = self.seen.iter().filter(|e| mine(e)).cloned().collect();
                checked = self.seen.len();
                if done(&selected) {
                    return selected;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "[{}] timed out waiting for {what}; {} events, the last: {:?}\nprocessor log:\n{}",
                    self.name,
                    selected.len(),
                    selected
                        .iter()
                        .rev()
                        .take(20)
                        .map(|e| e.kind.name())
                        .collect::<Vec<_>>(),
                    self.log_tail()
                );
            }
            if let Some(status) = self.processor.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "[{}] processor exited with {status} while waiting for {what}:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            // Read everything available before checking again: cheap with many events.
            let mut timeout = Duration::from_millis(100);
            while let Some(message) = self.events.poll(timeout) {
                timeout = Duration::ZERO;
                // A broker outage (some tests cause one) surfaces here; the client reconnects.
                let Ok(message) = message else { break };
                let event: Event = match &self.codec {
                    None => serde_json::from_slice(message.payload().unwrap()).unwrap(),
                    Some((codec, runtime)) => {
                        let json = runtime
                            .block_on(codec.decode(Family::Events, message.payload().unwrap()))
                            .unwrap();
                        serde_json::from_slice(&json).unwrap()
                    }
                };
                let header = message
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == "type"))
                    .and_then(|h| h.value);
                assert_eq!(
                    header,
                    Some(event.kind.name().as_bytes()),
                    "type header matches the event"
                );
                assert_eq!(
                    message.key(),
                    Some(event.pipeline_id.as_bytes()),
                    "events are keyed by pipeline id"
                );
                self.seen.push(event);
                if self.seen.len().is_multiple_of(1000) {
                    break;
                }
            }
        }
    }

    /// Waits until `pipeline` has published exactly `types` (in order), then returns them.
    pub fn wait_for_sequence(&mut self, pipeline: &str, types: &[EventType]) -> Vec<Event> {
        let events = self.wait_for(pipeline, &format!("{types:?}"), |es| es.len() >= types.len());
        let got: Vec<EventType> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            got,
            types,
            "[{}] event sequence of {pipeline}\nlog:\n{}",
            self.name,
            self.log_tail()
        );
        events
    }

    /// Reads `pipeline`'s records on the sensors topic, as JSON, until `done` says enough
    /// are there.
    pub fn wait_for_sensor_records(&self, pipeline: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let consumer = consumer_on(&self.brokers, &format!("{}sensor-reader", self.prefix));
        let topic = self.topic("sensors");
        let mut list = TopicPartitionList::new();
        for p in 0..self.partitions() {
            list.add_partition_offset(&topic, p, FIRST).unwrap();
        }
        consumer.assign(&list).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + DEADLINE;
        while !done(&out) {
            assert!(
                Instant::now() < deadline,
                "[{}] sensor records of {pipeline}: {out:#?}",
                self.name
            );
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            if m.key() == Some(pipeline.as_bytes()) {
                out.extend(m.payload().and_then(|p| serde_json::from_slice::<Value>(p).ok()));
            }
        }
        out
    }

    /// Reads the dead-letter topic until it holds `at_least` records.
    pub fn dead_letters(&self, at_least: usize) -> Vec<DeadLetter> {
        let out = self.dead_letters_within(at_least, DEADLINE);
        assert!(
            out.len() >= at_least,
            "[{}] dead letters: {} of {at_least}",
            self.name,
            out.len()
        );
        out
    }

    /// Reads the dead-letter topic until it holds `at_least` records or `within` has passed:
    /// what it holds by then.
    pub fn dead_letters_within(&self, at_least: usize, within: Duration) -> Vec<DeadLetter> {
        let consumer = consumer_on(&self.brokers, &format!("{}dlq-reader", self.prefix));
        let topic = self.topic("dlq");
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&topic, 0, FIRST).unwrap();
        consumer.assign(&list).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + within;
        while out.len() < at_least && Instant::now() < deadline {
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| {
                            (
                                h.key.to_string(),
                                String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push((m.payload().map(<[u8]>::to_vec), headers));
        }
        out
    }

    /// The records (key, value) of `topic` (without prefix) partition `p` from offset `from`
    /// up to its end now.
    pub fn records(&self, topic: &str, p: i32, from: i64) -> Vec<KeyValue> {
        let end = self.watermarks(topic, p).1;
        let consumer = consumer_on(&self.brokers, &format!("{}records-reader", self.prefix));
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic(topic), p, Offset::Offset(from))
            .unwrap();
        consumer.assign(&list).unwrap();
        let (mut out, mut next) = (Vec::new(), from);
        let deadline = Instant::now() + Duration::from_secs(30);
        while next < end {
            assert!(Instant::now() < deadline, "{topic}/{p} not read to {end} (at {next})");
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            if m.offset() < end {
                out.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
            }
            next = m.offset() + 1;
        }
        out
    }

    /// The low and high watermarks of `topic` (without prefix) partition `p`, as the broker
    /// reports them.
    pub fn watermarks(&self, topic: &str, p: i32) -> (i64, i64) {
        let consumer = consumer_on(&self.brokers, &format!("{}watermarks", self.prefix));
        consumer
            .fetch_watermarks(&self.topic(topic), p, Duration::from_secs(10))
            .unwrap()
    }
}

/// Where a test keeps its logs as it ends: SLUICE_TEST_LOGS=DIR for every test, for
/// post-mortems; SLUICE_FAILED_TEST_LOGS=DIR for failing ones only (deploy/test.sh sets it).
pub fn kept_logs_dir() -> Option<std::ffi::OsString> {
    std::env::var_os("SLUICE_TEST_LOGS").or_else(|| {
        std::thread::panicking()
            .then(|| std::env::var_os("SLUICE_FAILED_TEST_LOGS"))
            .flatten()
    })
}

impl Drop for World {
    fn drop(&mut self) {
        // SLUICE_TEST_LOGS=DIR keeps every world's processor log, for post-mortems;
        // SLUICE_FAILED_TEST_LOGS=DIR the logs of failing tests only (deploy/test.sh sets it).
        if let Some(dir) = kept_logs_dir() {
            let _ = std::fs::create_dir_all(&dir);
            let kept = Path::new(&dir).join(format!("{}log", self.prefix));
            if std::fs::copy(&self.log, &kept).is_ok() && std::thread::panicking() {
                eprintln!("[{}] the processor log is kept at {}", self.name, kept.display());
            }
        }
        if let Some(mut child) = self.processor.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A record of the dead-letter topic: its value and headers.
pub type DeadLetter = (Option<Vec<u8>>, Vec<(String, String)>);

/// Creates topics with explicit partition counts (for tests of bad layouts).
pub fn create_topics(prefix: &str, partitions: &[(&str, i32)]) {
    create_topics_with(prefix, partitions, &[]);
}

/// [`create_topics`] with these topic configs.
pub fn create_topics_with(prefix: &str, partitions: &[(&str, i32)], configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let names: Vec<String> = partitions.iter().map(|(n, _)| format!("{prefix}{n}")).collect();
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .zip(partitions)
        .map(|(n, (_, p))| {
            configs
                .iter()
                .fold(NewTopic::new(n, *p, TopicReplication::Fixed(-1)), |t, (k, v)| {
                    t.set(k, v)
                })
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for result in rt.block_on(admin.create_topics(&topics, &AdminOptions::new())).unwrap() {
        result.unwrap();
    }
}

/// A real HTTP/1.1 server on loopback that records each request and answers 200.
pub struct HttpTarget {
    pub url: String,
    pub requests: Arc<Mutex<Vec<String>>>,
}

pub fn http_target() -> HttpTarget {
    let server = scripted_server();
    HttpTarget {
        url: format!("{}/run", server.base),
        requests: server.requests,
    }
}

/// Answers per path, in order.
type Script = Arc<Mutex<std::collections::HashMap<String, std::collections::VecDeque<(u16, String)>>>>;

/// A real HTTP/1.1 server on loopback whose answers a test scripts per path: each path
/// answers from its queue, the last entry repeating; unscripted paths answer 200 "ok".
/// Every request is recorded raw (head and body).
pub struct Scripted {
    pub base: String,
    pub requests: Arc<Mutex<Vec<String>>>,
    answers: Script,
}

impl Scripted {
    /// Queues answers for `path` (without the query string).
    pub fn script(&self, path: &str, answers: &[(u16, &str)]) {
        let mut all = self.answers.lock().unwrap();
        let queue = all.entry(path.to_string()).or_default();
        queue.extend(answers.iter().map(|(code, body)| (*code, body.to_string())));
    }

    /// The recorded requests whose request line starts with `start` (e.g. "GET /status").
    pub fn requests_to(&self, start: &str) -> Vec<String> {
        let all = self.requests.lock().unwrap();
        all.iter().filter(|r| r.starts_with(start)).cloned().collect()
    }
}

pub fn scripted_server() -> Scripted {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let answers: Script = Arc::default();
    let (seen, script) = (requests.clone(), answers.clone());
    let base = serve(move |request| {
        seen.lock().unwrap().push(request.raw.clone());
        let mut all = script.lock().unwrap();
        match all.get_mut(&request.path) {
            Some(queue) if queue.len() > 1 => queue.pop_front().unwrap(),
            Some(queue) if queue.len() == 1 => queue[0].clone(),
            _ => (200, "ok".to_string()),
        }
    });
    Scripted {
        base,
        requests,
        answers,
    }
}

/// One HTTP request as a loopback server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Without the query string.
    pub path: String,
    pub query: String,
    /// Header names lower-cased.
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: String,
    /// Head and body as received.
    pub raw: String,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A real HTTP/1.1 server on loopback: `handler` answers each request (status, JSON body),
/// one thread per connection so that a slow answer holds up no other. Returns its base URL.
pub fn serve(handler: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static) -> String {
    serve_with_headers(move |r| {
        let (code, body) = handler(r);
        (code, Vec::new(), body)
    })
}

/// [`serve`] whose handler also sets response headers.
pub fn serve_with_headers(
    handler: impl Fn(&Request) -> (u16, Vec<(String, String)>, String) + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let handler = handler.clone();
            std::thread::spawn(move || answer_one(stream, &*handler));
        }
    });
    base
}

type Handler = dyn Fn(&Request) -> (u16, Vec<(String, String)>, String);

fn answer_one(mut stream: std::net::TcpStream, handler: &Handler) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut headers = std::collections::BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let length = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body = String::from_utf8_lossy(&body).to_string();
    let mut line = head.split_whitespace();
    let method = line.next().unwrap_or("").to_string();
    let target = line.next().unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let request = Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        headers,
        raw: format!("{head}{body}"),
        body,
    };
    let (code, headers, answer) = handler(&request);
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let response = format!(
        "HTTP/1.1 {code} Answer\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{answer}",
        answer.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// The execution date the tests use: today (UTC) when the test binary started, so that no
/// date falls behind the processor's execution retention however late the suite runs.
pub fn day() -> &'static str {
    static DAY: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| chrono::Utc::now().date_naive().format("%Y-%m-%d").to_string());
    &DAY
}

/// A sensor-triggered pipeline: `upstream` ready starts it, and it needs a row count of at
/// least 1,000.
pub fn pipeline(id: &str, job: Value) -> Value {
    json!({
        "pipeline": {"id": id, "owner": "tests"},
        "schedule": {
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            "evaluation": {"window": "10m", "interval": "1m"}
        },
        "validation": {"trigger": "ALL", "rules": [
            {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            {"key": "row-count", "check": "gte", "field": "count", "value": 1000}
        ]},
        "job": job
    })
}

/// A `command` job with a 30 s timeout.
pub fn command_job(command: &str, max_retries: u32) -> Value {
    json!({"type": "command", "config": {"command": command, "timeout": 30}, "maxRetries": max_retries})
}

/// The run id of `pipeline`'s attempt on [`day`].
pub fn run_id(pipeline: &str, attempt: u32) -> String {
    format!("{pipeline}.stream.{}.{attempt}", day())
}

/// Waits until `done` holds, checking every 50 ms, and fails naming `what` (and the log
/// `context` gives) after `within`.
pub fn wait_until(what: &str, within: Duration, context: impl Fn() -> String, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", context());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET over plain HTTP/1.1: status code and body.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path, &[], "")
}

/// One HTTP/1.1 request on loopback with extra `headers` and a `body`: status and body.
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let headers: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Some((status, body))
}

/// A broker of a test's own, reached through a proxy of the test's: tansu listens on
/// `listen` and advertises `port`, where the proxy forwards to it.
pub struct OwnBroker {
    dir: tempfile::TempDir,
    pub port: u16,
    pub listen: u16,
}

impl OwnBroker {
    #[allow(clippy::new_without_default)]
    pub fn new() -> OwnBroker {
        OwnBroker {
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            listen: free_port(),
        }
    }

    /// Starts tansu; its bootstrap address (the proxy's).
    pub fn start(&self) -> String {
        let out = Command::new(repo().join("deploy/local-broker.sh"))
            .arg("start")
            .env("SLUICE_BROKER_DIR", self.dir.path())
            .env("SLUICE_BROKER_PORT", self.port.to_string())
            .env("SLUICE_BROKER_LISTEN_PORT", self.listen.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("deploy/local-broker.sh"))
            .arg("stop")
            .env("SLUICE_BROKER_DIR", self.dir.path())
            .status();
        // The broker's own log, for a failing test's post-mortem (as World keeps its own).
        if let Some(dir) = kept_logs_dir() {
            let _ = std::fs::create_dir_all(&dir);
            let kept = Path::new(&dir).join(format!("tansu-{}.log", self.port));
            if std::fs::copy(self.dir.path().join("tansu.log"), &kept).is_ok() {
                eprintln!("the broker's log is kept at {}", kept.display());
            }
        }
    }
}

/// A command's end: exit code, stdout, stderr and how long it took.
pub type Ran = (Option<i32>, String, String, Duration);

/// One whole run over a connection a test sets up (TLS and SASL, MSK IAM): the pipeline `id`
/// published with `call` (which runs a `sluice` command to its end), the processor spawned
/// with `start` (given `run --http ADDR`) logging to `dir/run.log`, its two sensors put and
/// its job seen completed. Returns the processor (stopped when dropped), its API address and
/// its log.
pub fn one_job_over(
    dir: &Path,
    id: &str,
    call: &dyn Fn(&[&str]) -> Ran,
    start: &dyn Fn(&[&str]) -> Command,
) -> (Instances, String, PathBuf) {
    let pipelines = dir.join("pipelines");
    std::fs::create_dir_all(&pipelines).unwrap();
    std::fs::write(
        pipelines.join(format!("{id}.yaml")),
        serde_json::to_string(&pipeline(id, command_job("true", 0))).unwrap(),
    )
    .unwrap();
    let (code, out, err, _) = call(&["config", "apply", pipelines.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let log = dir.join("run.log");
    let addr = format!("127.0.0.1:{}", free_port());
    let processor = start(&["run", "--http", &addr])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let processor = Instances(vec![processor]);
    let log_tail = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the processor ready", Duration::from_secs(60), log_tail, || {
        http_get(&addr, "/readyz").is_some_and(|(status, _)| status == 200)
    });
    for (key, field) in [("row-count", "count=5000"), ("upstream", "status=ready")] {
        let (code, out, err, _) = call(&["sensor", "put", id, key, field]);
        assert_eq!(code, Some(0), "{out}\n{err}");
    }
    wait_until("the job completed", Duration::from_secs(60), log_tail, || {
        http_get(&addr, &format!("/api/pipelines/{id}"))
            .is_some_and(|(status, body)| status == 200 && body.contains("JOB_COMPLETED"))
    });
    (processor, addr, log)
}

/// A file a test's `command` job appends its run id to: the runs that reached the target,
/// counted where they land.
pub struct RunLog {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl RunLog {
    pub fn new() -> RunLog {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runs");
        RunLog { _dir: dir, file }
    }

    /// The shell command that records the run (its run id, one line).
    pub fn command(&self) -> String {
        format!("echo ${{RUN_ID}} >> {}", self.file.display())
    }

    /// The run ids recorded so far, in order.
    pub fn runs(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    }
}
