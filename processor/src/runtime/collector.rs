//! The collector: produces a batch's outputs and end markers and waits for their
//! acknowledgements, retrying for as long as an outage lasts, or under exactly-once writes
//! them in one transaction with the input offsets (Kafka Streams' record collector).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use rdkafka::consumer::{Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, warn};

use super::backoff::Backoff;
use super::error as runtime_error;
use super::kafka::{self, RenewableProducer};
use super::outputs::Output;
use super::processor::{Guarantee, Settings};
use super::store::PartitionStore;
use super::telemetry::Telemetry;
use crate::core::partitioning::PartitionId;
use crate::core::task::{omit_value, Sealed, Task};

pub struct Collector {
    producer: RenewableProducer,
    telemetry: Arc<Telemetry>,
    dlq: String,
    changelog: String,
}

/// How long a transactional call may take before it counts as failed.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long reading the group's committed offsets (a fence for a batch of timers) may take.
const FENCE_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl Collector {
    /// The producer of the batches' outputs: idempotent, or transactional under
    /// exactly-once (its transactions initialised, which fails on a broker without them).
    /// An outage its client sees turns readiness off at once, though a produce round then
    /// waiting ends only when the broker is back or `message.timeout.ms` runs out.
    pub fn start(settings: &Settings, telemetry: &Arc<Telemetry>) -> Result<Self> {
        let watched = telemetry.clone();
        let watch = kafka::Watch::on_brokers_down(move || watched.broker_down());
        let producer = match settings.guarantee {
            Guarantee::EffectivelyOnce => RenewableProducer::watched(&settings.kafka, watch)?,
            Guarantee::ExactlyOnce => {
                let id = format!("{}-{}", settings.group, settings.instance);
                let producer = kafka::transactional_producer(&settings.kafka, &id, &watch)?;
                tokio::task::block_in_place(|| producer.init_transactions(TRANSACTION_TIMEOUT))
                    .with_context(|| format!("initialising transactions for transactional id {id} (does the broker support transactions? use --guarantee effectively-once if not)"))?;
                RenewableProducer::fixed(producer)
            }
        };
        Ok(Collector {
            producer,
            telemetry: telemetry.clone(),
            dlq: settings.topics.dlq.clone(),
            changelog: settings.topics.changelog.clone(),
        })
    }

    pub fn producer(&self) -> &RenewableProducer {
        &self.producer
    }

    /// The producer, to flush and close.
    pub fn into_producer(self) -> RenewableProducer {
        self.producer
    }

    /// The group's committed offsets of the assigned partitions, sent with the transaction
    /// of a batch that has none of its own (see core::batch): they move nothing, and the
    /// broker refuses them, and so the transaction, under an old group generation. `None`
    /// when the group has none (then the transaction goes unfenced, as a first batch must).
    pub fn fence_offsets<C: ConsumerContext>(&self, consumer: &StreamConsumer<C>) -> Option<TopicPartitionList> {
        let read = consumer.assignment().and_then(|assigned| {
            tokio::task::block_in_place(|| consumer.committed_offsets(assigned, FENCE_READ_TIMEOUT))
        });
        let committed = match read {
            Ok(committed) => committed,
            Err(e) => {
                warn!(error = %e, "could not read the committed offsets to fence a batch of timers with; its transaction goes unfenced");
                return None;
            }
        };
        let mut list = TopicPartitionList::new();
        for e in committed.elements() {
            if let Offset::Offset(at) = e.offset() {
                let _ = list.add_partition_offset(e.topic(), e.partition(), Offset::Offset(at));
            }
        }
        if list.count() == 0 {
            warn!("no committed offsets to fence a batch of timers with (a group that never committed); its transaction goes unfenced");
            return None;
        }
        Some(list)
    }

    /// The consumer offsets to commit for a batch: the next record of each partition.
    pub fn input_offsets(commits: &BTreeMap<(String, PartitionId), i64>) -> Result<Option<TopicPartitionList>> {
        if commits.is_empty() {
            return Ok(None);
        }
        let mut list = TopicPartitionList::new();
        for ((topic, p), offset) in commits {
            list.add_partition_offset(topic, p.number(), Offset::Offset(offset + 1))?;
        }
        Ok(Some(list))
    }

    /// Produces every output and waits until all are acknowledged, retrying failures for as
    /// long as they last: the batch's state is not written before its outputs are safe.
    /// Returns where each output landed. A dead letter too large for the broker goes without
    /// its value (its headers say where the record is); any other output too large ends the
    /// run, the batch unapplied (`--max-state-bytes` or `--max-message-bytes` is over the
    /// broker's limit: a misconfiguration).
    pub async fn produce_all(&self, outputs: &mut [Output]) -> Result<Vec<(PartitionId, i64)>> {
        let mut delivered = vec![(PartitionId::new(0), 0); outputs.len()];
        let mut todo: Vec<usize> = (0..outputs.len()).collect();
        let mut backoff = Backoff::outage();
        while !todo.is_empty() {
            let mark = self.telemetry.broker_mark();
            let results = futures::future::join_all(todo.iter().map(|i| self.send(&outputs[*i]))).await;
            let mut failed = Vec::new();
            let mut transient = false;
            for (i, result) in todo.into_iter().zip(results) {
                match result {
                    Ok(at) => delivered[i] = at,
                    Err(e) if e.too_large() && outputs[i].topic == self.dlq && outputs[i].value.is_some() => {
                        let size = omit_value(&mut outputs[i]);
                        warn!(size, "dead letter too large for the broker: sent without its value");
                        failed.push(i);
                    }
                    // A changelog write left out would leave the state and its changelog apart:
                    // stop before the batch is marked or written (it is redone on restart).
                    Err(e) if e.too_large() && outputs[i].topic == self.changelog => {
                        bail!("a changelog record of {} bytes is too large for the broker ({e:#}): lower --max-state-bytes under the changelog topic's max.message.bytes, or raise that; the batch was not applied and is redone on restart", outputs[i].value.as_ref().map_or(0, Vec::len));
                    }
                    // Every output was sized under --max-message-bytes before it was decided
                    // on: the broker's limit is lower. Never leave it out of a batch that
                    // counts as done; stop before the batch is marked (it is redone).
                    Err(e) if e.too_large() => {
                        bail!("a record of {} bytes for {} is too large for the broker ({e:#}): lower --max-message-bytes to the broker's and the topic's max.message.bytes, or raise those; the batch was not applied and is redone on restart", outputs[i].size(), outputs[i].topic);
                    }
                    // A producer that can never send again (fenced, or fatal and not
                    // replaceable): stop, the batch unapplied, and let liveness say so.
                    Err(e) if e.fatal.is_some() => return Err(runtime_error::Error::from(e).into()),
                    Err(e) => {
                        error!(topic = %outputs[i].topic, error = %format!("{e:#}"), "produce failed; retrying");
                        transient = true;
                        failed.push(i);
                    }
                }
            }
            todo = failed;
            if transient {
                self.telemetry.broker_down();
                backoff.wait().await;
            } else {
                self.telemetry.broker_ok_since(mark);
            }
        }
        // One metric update per topic, not per record.
        let mut per_topic: BTreeMap<&str, u64> = BTreeMap::new();
        for o in outputs.iter() {
            *per_topic.entry(o.topic.as_str()).or_default() += 1;
        }
        per_topic
            .into_iter()
            .for_each(|(topic, n)| self.telemetry.record_out(topic, n));
        Ok(delivered)
    }

    async fn send(&self, o: &Output) -> Result<(PartitionId, i64), kafka::ProduceError> {
        let headers: Vec<(&str, &[u8])> = o.headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
        self.producer
            .send_to(&o.topic, o.partition, o.key.as_deref(), o.value.as_deref(), &headers)
            .await
    }

    /// `exactly-once`: the outputs and the input offsets in one transaction. A transaction
    /// that fails is aborted and the batch produced again in a new one (nothing was written
    /// locally yet); errors that no retry can mend end the run.
    pub async fn produce_in_transaction<C: ConsumerContext>(
        &self,
        consumer: &StreamConsumer<C>,
        task: &Task<PartitionStore>,
        sealed: &Sealed,
        offsets: Option<&TopicPartitionList>,
    ) -> Result<Option<Vec<(PartitionId, i64)>>> {
        let (outputs, first_changelog, flush) = (&sealed.outputs, sealed.first_changelog, &sealed.flush);
        let mut backoff = Backoff::outage();
        loop {
            let transactional = |r: KafkaResult<()>| r.map_err(runtime_error::Error::of_transaction);
            let producer = self.producer.current();
            let mark = self.telemetry.broker_mark();
            let attempt = async {
                transactional(tokio::task::block_in_place(|| producer.begin_transaction()))?;
                let sends = futures::future::join_all(outputs.iter().map(|o| self.send(o))).await;
                let delivered = sends.into_iter().collect::<Result<Vec<_>, _>>()?;
                let markers = task.marker_outputs(&flush.markers(&delivered[first_changelog..]));
                let sends = futures::future::join_all(markers.iter().map(|o| self.send(o))).await;
                let delivered = sends.into_iter().collect::<Result<Vec<_>, _>>()?;
                tokio::task::block_in_place(|| -> Result<(), runtime_error::Error> {
                    if let Some(list) = offsets {
                        let group = (consumer.group_metadata()).ok_or_else(|| anyhow!("no consumer group metadata"))?;
                        transactional(producer.send_offsets_to_transaction(list, &group, TRANSACTION_TIMEOUT))?;
                    }
                    transactional(producer.commit_transaction(TRANSACTION_TIMEOUT))
                })?;
                Ok::<_, runtime_error::Error>(delivered)
            }
            .await;
            match attempt {
                Ok(delivered) => {
                    self.telemetry.broker_ok_since(mark);
                    return Ok(Some(delivered));
                }
                Err(runtime_error::Error::Fatal(fatal)) => return Err(fatal.into()),
                // A fenced transactional producer is in a fatal state: no abort and no new
                // transaction of it can succeed, and another instance holds its id.
                Err(runtime_error::Error::Transient(e)) if kafka::fatal_error(&producer).is_some() => {
                    let fatal = kafka::fatal_error(&producer).unwrap_or_default();
                    return Err(runtime_error::FatalClient(format!("the transactional producer is in a fatal state ({fatal}) after: {e:#}; another instance took over with the same --instance, or the broker fenced it: stopping before anything of the batch counts")).into());
                }
                Err(runtime_error::Error::Transient(e)) => {
                    error!(error = %format!("{e:#}"), "transaction failed; aborting and retrying the batch");
                    self.telemetry.broker_down();
                    let _ = tokio::task::block_in_place(|| producer.abort_transaction(TRANSACTION_TIMEOUT));
                    // A member the group dropped (its session expired) has its transactions
                    // refused for good: trying again would never end. Nothing of the batch
                    // counted; its partitions' new owners redo it.
                    if consumer.assignment_lost() {
                        warn!("the assignment was lost while the batch's transaction was retried: the batch stops, its new owners redo it");
                        return Ok(None);
                    }
                    backoff.wait().await;
                }
            }
        }
    }
}
