//! The ceiling: a consumer→producer pass-through with the processor's client settings,
//! batch size and commit pattern (produce the batch, wait for its acknowledgements, produce
//! and await an end marker per changelog partition written, commit the input offsets), doing
//! no work per record. It can also write `extra` more records per
//! input to a side topic, as many as the processor writes beside its decisions (the
//! changelog, job reports), to tell the broker's share of the latency from the processor's.
//! Its records carry the headers the processor's do (an event's `type`, a changelog record's
//! batch), which some brokers store and look up at a cost of their own (tansu's sqlite).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::TopicPartitionList;
use sluice::runtime::changelog::{batch_header, BATCH_HEADER};
use sluice::runtime::kafka::Connection;

/// The processor's `--batch-size` default.
pub const BATCH: usize = 500;

/// Records the pass-through writes besides each copy: `per_input` of them (a fraction is
/// spread over the inputs) to `topic`.
pub struct Extra {
    pub topic: String,
    pub per_input: f64,
}

/// Copies `inputs` to `output` until `done` says enough records went through; the time
/// from the first record to the last batch's commit, and how many batches it took.
pub fn run(
    kafka: &Connection,
    inputs: &[String],
    output: &str,
    extra: Option<Extra>,
    done: impl Fn(usize) -> bool,
) -> Result<(Duration, usize)> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let group = format!("{output}.passthrough");
        let consumer: StreamConsumer = sluice::runtime::kafka::input_consumer_config(kafka, &group)
            .create()
            .context("creating the pass-through consumer")?;
        let topics: Vec<&str> = inputs.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        let producer = sluice::runtime::kafka::producer(kafka)?;
        let mut copied = 0;
        let mut batches = 0;
        let mut first = None;
        let mut owed = 0.0;
        while !done(copied) {
            let mut batch = vec![consumer.recv().await?.detach()];
            first.get_or_insert_with(Instant::now);
            while batch.len() < BATCH {
                match consumer.recv().now_or_never() {
                    Some(m) => batch.push(m?.detach()),
                    None => break,
                }
            }
            let mut extras = Vec::new();
            if let Some(extra) = &extra {
                for m in &batch {
                    owed += extra.per_input;
                    while owed >= 1.0 {
                        owed -= 1.0;
                        extras.push((extra.topic.as_str(), m));
                    }
                }
            }
            let batch_value = batch_header(1, batches as u64);
            let copies = batch.iter().map(|m| (output, m));
            let sends = copies.chain(extras).map(|(topic, m)| {
                // A copy is an event, an extra record a changelog write: each with its header.
                let header = if topic == output {
                    ("type", b"VALIDATION_PASSED".as_slice())
                } else {
                    (BATCH_HEADER, batch_value.as_slice())
                };
                let headers = OwnedHeaders::new().insert(Header {
                    key: header.0,
                    value: Some(header.1),
                });
                let mut record = FutureRecord::to(topic)
                    .payload(m.payload().unwrap_or_default())
                    .headers(headers);
                if let Some(key) = m.key() {
                    record = record.key(key);
                }
                producer.send(record, Duration::from_secs(30))
            });
            for sent in futures::future::join_all(sends).await {
                sent.map_err(|(e, _)| e).context("producing")?;
            }
            // As the processor ends a batch: a second awaited round, one end marker on the
            // side topic for each input partition of the batch (the processor's changelog is
            // partitioned as its inputs), before the offsets are committed.
            if let Some(extra) = &extra {
                let (key, value) = sluice::runtime::changelog::marker(1, batches as u64, 0);
                let partitions: std::collections::BTreeSet<i32> = batch.iter().map(|m| m.partition()).collect();
                let markers = partitions.iter().map(|&partition| {
                    let record = FutureRecord::to(&extra.topic)
                        .partition(partition)
                        .key(&key)
                        .payload(&value);
                    producer.send(record, Duration::from_secs(30))
                });
                for sent in futures::future::join_all(markers).await {
                    sent.map_err(|(e, _)| e).context("producing an end marker")?;
                }
            }
            let mut offsets = TopicPartitionList::new();
            for m in &batch {
                offsets.add_partition_offset(m.topic(), m.partition(), rdkafka::Offset::Offset(m.offset() + 1))?;
            }
            copied += batch.len();
            batches += 1;
            // The last commit is awaited, so the time measured includes it.
            let mode = if done(copied) {
                CommitMode::Sync
            } else {
                CommitMode::Async
            };
            consumer.commit(&offsets, mode)?;
        }
        Ok((first.map(|f| f.elapsed()).unwrap_or_default(), batches))
    })
}
