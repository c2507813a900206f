//! The ceiling: a consumer→producer pass-through with the processor's client settings,
//! batch size and commit pattern (produce the batch, wait for its acknowledgements, commit
//! the input offsets), doing no work per record. It can also write `extra` more records per
//! input to a side topic, as many as the processor writes beside its decisions (the
//! changelog, job reports), to tell the broker's share of the latency from the processor's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::TopicPartitionList;
use sluice::runtime::kafka::Connection;

/// The processor's `--batch-size` default.
const BATCH: usize = 500;

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
            let copies = batch.iter().map(|m| (output, m));
            let sends = copies.chain(extras).map(|(topic, m)| {
                let mut record = FutureRecord::to(topic).payload(m.payload().unwrap_or_default());
                if let Some(key) = m.key() {
                    record = record.key(key);
                }
                producer.send(record, Duration::from_secs(30))
            });
            for sent in futures::future::join_all(sends).await {
                sent.map_err(|(e, _)| e).context("producing")?;
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
