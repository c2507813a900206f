//! Kafka clients: configuration, topic checks and creation, producing with acks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{Client, ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::info;

use super::topics::{TopicDefinition, Topics};

pub const PARTITIONER: &str = "murmur2_random";

pub const METADATA_TIMEOUT: Duration = Duration::from_secs(15);

/// Settings shared by every client.
pub fn base_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers).set("client.id", "sluice");
    config
}

/// The processor's input consumer settings (also what the benchmark's pass-through
/// baseline uses, so the two compare like for like).
pub fn input_consumer_config(brokers: &str, group: &str) -> ClientConfig {
    let mut config = base_config(brokers);
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        // Range assignment gives partition N of every input to the same member: the
        // co-partitioning that lets one task own a pipeline. Sticky/cooperative assignors do
        // not promise that, so eager range rebalancing it is.
        .set("partition.assignment.strategy", "range")
        .set("session.timeout.ms", "10000")
        .set("isolation.level", "read_committed")
        // The broker may hold a fetch this long when there is nothing new; it bounds how long
        // a record (a job report, say) waits before the processor sees it (tansu holds it the
        // whole time even when records arrive meanwhile).
        .set("fetch.wait.max.ms", "10");
    config
}

/// An idempotent producer that waits for all replicas.
pub fn producer(brokers: &str) -> Result<FutureProducer> {
    producer_config(brokers).create().context("creating Kafka producer")
}

/// A transactional producer: a new one with the same `id` fences the old one out.
pub fn transactional_producer(brokers: &str, id: &str) -> Result<FutureProducer> {
    producer_config(brokers)
        .set("transactional.id", id)
        .create()
        .context("creating transactional Kafka producer")
}

fn producer_config(brokers: &str) -> ClientConfig {
    let mut config = base_config(brokers);
    config
        .set("enable.idempotence", "true")
        // The Java client's partitioner: records keyed by pipeline id land on the same
        // partition whichever client produced them (librdkafka's default hashes differently).
        .set("partitioner", PARTITIONER)
        .set("acks", "all")
        // Sluice enqueues a whole batch's outputs and then waits for their acknowledgements:
        // lingering would only add to every batch's round trip (two per batch).
        .set("linger.ms", "0")
        .set("message.timeout.ms", "30000");
    config
}

/// Partition counts of `topics`, failing with a clear message if one is missing.
pub fn partition_counts<C: ClientContext>(client: &Client<C>, topics: &[&str]) -> Result<Vec<(String, usize)>> {
    let mut counts = Vec::new();
    for topic in topics {
        let metadata = client
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .with_context(|| format!("fetching metadata of {topic} (is the broker reachable?)"))?;
        let t = metadata
            .topics()
            .first()
            .ok_or_else(|| anyhow!("no metadata for {topic}"))?;
        if t.error().is_some() || t.partitions().is_empty() {
            bail!("topic {topic} does not exist: create it with `sluice topics apply`");
        }
        counts.push((topic.to_string(), t.partitions().len()));
    }
    Ok(counts)
}

/// Refuses inputs with different partition counts: one task must own all of a pipeline's
/// records, which holds only when every input is partitioned alike.
pub fn check_copartitioned(counts: &[(String, usize)]) -> Result<usize> {
    let first = counts
        .first()
        .map(|(_, n)| *n)
        .ok_or_else(|| anyhow!("no input topics"))?;
    if counts.iter().any(|(_, n)| *n != first) {
        let listing: Vec<String> = counts.iter().map(|(t, n)| format!("{t}={n}")).collect();
        bail!(
            "input topics must have the same partition count, found {}; recreate them with `sluice topics apply` or add partitions so they match",
            listing.join(", ")
        );
    }
    Ok(first)
}

/// Creates the topics that are missing and checks the partition count of the others.
/// What `topics apply` found for one topic.
#[derive(Debug)]
pub struct TopicReport {
    pub name: String,
    pub created: bool,
    /// Configs that differ from the definition (empty: it matches).
    pub drift: Vec<String>,
    /// The broker did not describe the topic's configs, so they were not checked.
    pub unchecked: Option<String>,
}

/// Creates the missing topics of `defs`, checks every partition count (a difference is an
/// error: it would break co-partitioning) and reports config drift of existing topics.
pub async fn apply_topics(brokers: &str, topics: &Topics, defs: &[TopicDefinition]) -> Result<Vec<TopicReport>> {
    let admin: AdminClient<DefaultClientContext> = base_config(brokers).create().context("creating admin client")?;
    let names: Vec<String> = defs.iter().map(|d| format!("{}{}", topics.prefix, d.name)).collect();
    let configs: Vec<Vec<(&str, String)>> = defs.iter().map(TopicDefinition::configs).collect::<Result<_>>()?;
    let new_topics: Vec<NewTopic> = defs
        .iter()
        .zip(&names)
        .zip(&configs)
        .map(|((def, name), configs)| {
            configs.iter().fold(
                NewTopic::new(name, def.partitions, TopicReplication::Fixed(1)),
                |topic, (k, v)| topic.set(k, v),
            )
        })
        .collect();
    let results = admin
        .create_topics(
            &new_topics,
            &AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT)),
        )
        .await
        .context("creating topics")?;
    let mut created = std::collections::HashSet::new();
    for result in results {
        match result {
            Ok(name) => {
                info!(topic = %name, "created topic");
                created.insert(name);
            }
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => info!(topic = %name, "topic exists"),
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let counts = partition_counts(admin.inner(), &refs)?;
    for ((name, count), def) in counts.iter().zip(defs) {
        if *count != def.partitions as usize {
            bail!(
                "topic {name} has {count} partitions but topics/ declares {}: the inputs must have the same count, and partitions cannot be removed; recreate the topic or change topics/ to match",
                def.partitions
            );
        }
    }
    let specifiers: Vec<ResourceSpecifier> = names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    let described = admin
        .describe_configs(
            &specifiers,
            &AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT)),
        )
        .await;
    let mut reports = Vec::new();
    for (i, (name, def)) in names.iter().zip(defs).enumerate() {
        let (drift, unchecked) = match described.as_ref().map(|all| all.get(i)) {
            Ok(Some(Ok(resource))) if !resource.entries.is_empty() => {
                let actual = resource
                    .entries
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect();
                (def.drift(&actual)?, None)
            }
            Ok(Some(Ok(_))) => (Vec::new(), Some("the broker described no configs".to_string())),
            Ok(Some(Err(code))) => (Vec::new(), Some(code.to_string())),
            Ok(None) => (Vec::new(), Some("no answer for this topic".to_string())),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        reports.push(TopicReport {
            name: name.clone(),
            created: created.contains(name),
            drift,
            unchecked,
        });
    }
    Ok(reports)
}

/// Whether producing failed because the record exceeds the size the client or broker
/// accept: retrying the same record cannot succeed.
pub fn too_large(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<rdkafka::error::KafkaError>()
        .and_then(rdkafka::error::KafkaError::rdkafka_error_code)
        == Some(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// Produces one record and waits for the broker's acknowledgement.
pub async fn send(
    producer: &FutureProducer,
    topic: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, &[u8])],
) -> Result<(i32, i64)> {
    send_to(producer, topic, None, key, value, headers).await
}

/// [`send`] to an explicit partition, or by the key's hash when `partition` is `None`.
pub async fn send_to(
    producer: &FutureProducer,
    topic: &str,
    partition: Option<i32>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, &[u8])],
) -> Result<(i32, i64)> {
    let mut owned = OwnedHeaders::new();
    for (k, v) in headers {
        owned = owned.insert(Header {
            key: k,
            value: Some(*v),
        });
    }
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(owned);
    if let Some(p) = partition {
        record = record.partition(p);
    }
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    let delivery = producer
        .send(record, Duration::from_secs(30))
        .await
        .map_err(|(e, _)| anyhow::Error::new(e).context(format!("producing to {topic}")))?;
    Ok((delivery.partition, delivery.offset))
}

/// Where one partition's read starts, for [`read_span`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub topic: String,
    pub partition: i32,
    /// The first offset to read; below the retained range means the oldest retained record.
    pub offset: i64,
}

/// Reads every listed partition from its start to its end as of the call (the high watermark
/// first seen, or later records that a poll still returns), records in arrival order.
/// The end is confirmed by a poll that finds nothing more, because tansu 0.6 can report a
/// watermark short of the end after multi-record batches; control records of transactions
/// end a partition through the consumer's position.
pub fn read_span(consumer: &BaseConsumer, starts: &[Start]) -> Result<Vec<OwnedMessage>> {
    let mut list = TopicPartitionList::new();
    let mut ends: BTreeMap<(String, i32), (i64, bool)> = BTreeMap::new();
    for s in starts {
        let (low, high) = consumer
            .fetch_watermarks(&s.topic, s.partition, METADATA_TIMEOUT)
            .with_context(|| format!("reading the offsets of {}/{}", s.topic, s.partition))?;
        let start = s.offset.clamp(low, high);
        list.add_partition_offset(&s.topic, s.partition, Offset::Offset(start))?;
        ends.insert((s.topic.clone(), s.partition), (high, start >= high));
    }
    consumer.assign(&list).context("assigning the partitions to read")?;
    let mut records = Vec::new();
    let mut idle = 0;
    // Nothing arriving for this long while partitions are short of their end: the rest is
    // not coming (the broker's watermark overstated it).
    const GIVE_UP: u32 = 50;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(message) => {
                idle = 0;
                let message = message.context("reading records")?;
                if let Some(end) = ends.get_mut(&(message.topic().to_string(), message.partition())) {
                    end.1 |= message.offset() + 1 >= end.0;
                }
                records.push(message.detach());
            }
            None => {
                idle += 1;
                if let Ok(positions) = consumer.position() {
                    for e in positions.elements() {
                        if let (Offset::Offset(o), Some(end)) =
                            (e.offset(), ends.get_mut(&(e.topic().to_string(), e.partition())))
                        {
                            end.1 |= o >= end.0;
                        }
                    }
                }
                if ends.values().all(|(_, done)| *done) {
                    return Ok(records);
                }
                if idle >= GIVE_UP {
                    let short: Vec<String> = ends
                        .iter()
                        .filter(|(_, (_, done))| !done)
                        .map(|((t, p), (high, _))| format!("{t}/{p} (end {high})"))
                        .collect();
                    tracing::warn!(
                        "stopped reading {} short of the watermark the broker reported: nothing more arrived in 10 s",
                        short.join(", ")
                    );
                    return Ok(records);
                }
            }
        }
    }
}

/// A consumer for reading history: assigned partitions, no group offsets committed.
pub fn reader(brokers: &str, name: &str) -> Result<BaseConsumer> {
    base_config(brokers)
        .set("group.id", name)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create()
        .context("creating Kafka consumer")
}
