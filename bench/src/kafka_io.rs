//! Producing workloads and reading results on the broker, with the clients Sluice uses.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

/// A producer partitioning by key as Sluice's inputs require, with room for large backlogs.
pub fn producer(brokers: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("partitioner", sluice::runtime::kafka::PARTITIONER)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("a producer")
}

/// Queues one JSON record keyed by `key`, waiting while the client's queue is full.
pub fn send(producer: &BaseProducer, topic: &str, key: &str, value: &Value) {
    let payload = serde_json::to_vec(value).expect("JSON serialises");
    let mut record = BaseRecord::to(topic).key(key).payload(&payload);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((e, r)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                producer.poll(Duration::from_millis(10));
                record = r;
            }
            Err((e, _)) => panic!("producing to {topic}: {e}"),
        }
    }
}

/// Flushes the producer while calling `each` every millisecond: a latency measurement that
/// stopped reading for a flush would stamp the last records received late. Gives up after
/// two minutes: the records the broker has not taken by then (returned) never arrive, and a
/// measurement counts them as such rather than failing the run.
pub fn flush_while(producer: &BaseProducer, mut each: impl FnMut()) -> i32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
        producer.poll(Duration::from_millis(1));
        each();
    }
    producer.in_flight_count()
}

pub fn flush(producer: &BaseProducer) {
    producer
        .flush(Duration::from_secs(120))
        .expect("the broker takes the workload");
}

/// A consumer reading `topics` from their start, outside any group's offsets.
pub fn reader(brokers: &str, topics: &[&str]) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "sluice-bench-reader")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("a consumer");
    let mut list = TopicPartitionList::new();
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        for p in md.topics()[0].partitions() {
            // Offset 0, not the beginning: tansu 0.6 answers that with the batch written
            // first in time, not always the first (see `Quirks::Tansu`).
            list.add_partition_offset(topic, p.id(), Offset::Offset(0)).unwrap();
        }
    }
    consumer.assign(&list).expect("assign");
    consumer
}

/// Parsed lifecycle events of type `kind` that have arrived at `reader`, without waiting.
pub fn drain_events(reader: &BaseConsumer, kind: &str, mut on: impl FnMut(&Value)) {
    use rdkafka::message::Message;
    while let Some(Ok(m)) = reader.poll(Duration::ZERO) {
        if let Some(Ok(event)) = m.payload().map(serde_json::from_slice::<Value>) {
            if event["type"] == kind {
                on(&event);
            }
        }
    }
}

/// How many partitions `topic` has.
pub fn partitions(brokers: &str, topic: &str) -> i32 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("a client");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    md.topics()[0].partitions().len() as i32
}

/// Records of `topic` that `group` has committed past, over all partitions (the topics are
/// fresh, so this is how many it has finished with). The broker's high watermark is not
/// used: tansu reports it short after multi-record batches.
pub fn committed(brokers: &str, group: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let mut list = TopicPartitionList::new();
    for p in md.topics()[0].partitions() {
        list.add_partition(topic, p.id());
    }
    consumer
        .committed_offsets(list, Duration::from_secs(10))
        .map(|l| {
            l.elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => o,
                    _ => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}
