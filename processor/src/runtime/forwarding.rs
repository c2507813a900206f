//! The runtime's side of forwarding misrouted records ([`crate::core::forwarding`] holds
//! the rules, and the partition task makes the copies): checking a copy's mark against
//! where its partition ends, and the misrouted keys' warning.

use std::collections::{HashMap, HashSet};

use rdkafka::consumer::{Consumer, ConsumerContext};
use tracing::warn;

use super::kafka::{Quirks, METADATA_TIMEOUT};
use crate::core::forwarding::{Forwarded, Implausible};
use crate::core::partitioning::PartitionId;

/// What happens to a keyed record on another partition than its key's (`run --misrouted`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Misrouted {
    /// Produce a copy to the key's partition of the same topic, where its pipeline's task
    /// applies it (once, even when a crash makes it forwarded again).
    #[default]
    Forward,
    /// Reject it to the dead-letter topic, naming the partitioner to use.
    Reject,
}

/// The ends (high watermarks) of the partitions copies name, as last looked up. An end only
/// grows, so a mark below the one known is plausible without asking the broker; only a mark
/// at or beyond it makes a new look-up (after the copy was fetched: a genuine copy's record
/// was read there before it was forwarded, so it lies below the end then), and a forged mark
/// beyond the new end is refused.
#[derive(Default)]
pub struct Ends(HashMap<(String, PartitionId), i64>);

impl Ends {
    /// Checks the mark of a copy read from partition `p` of `topic`, a topic of `partitions` partitions, against
    /// what Sluice can have written (see [`crate::core::forwarding::Implausible`]).
    pub async fn check<C: ConsumerContext + 'static>(
        &mut self,
        consumer: &(impl Consumer<C> + Sync),
        quirks: Quirks,
        partitions: i32,
        topic: &str,
        p: PartitionId,
        mark: Forwarded,
    ) -> Result<Forwarded, Implausible> {
        mark.check(p, partitions)?;
        // tansu 0.6 reports an end one short after a multi-record batch.
        let short = i64::from(quirks == Quirks::Tansu);
        let key = (topic.to_string(), mark.partition);
        if self.0.get(&key).is_some_and(|end| mark.check_end(end + short).is_ok()) {
            return Ok(mark);
        }
        let end = end_of(consumer, topic, mark.partition).await;
        self.0.insert(key, end);
        mark.check_end(end + short).map(|()| mark)
    }
}

/// Where `topic`'s `partition` ends (its high watermark), waiting out a broker that does not
/// answer: the copy is not at fault, so it is not rejected meanwhile.
async fn end_of<C: ConsumerContext + 'static>(
    consumer: &(impl Consumer<C> + Sync),
    topic: &str,
    partition: PartitionId,
) -> i64 {
    let mut backoff = crate::runtime::backoff::Backoff::outage();
    loop {
        match tokio::task::block_in_place(|| consumer.fetch_watermarks(topic, partition.number(), METADATA_TIMEOUT)) {
            Ok((_, high)) => return high,
            Err(e) => {
                warn!(%topic, partition = partition.number(), error = %e, "looking up where a forwarded copy's partition ends, to check its mark; the batch waits");
                backoff.wait().await;
            }
        }
    }
}

/// Keys already logged as misrouted, so a producer's every record does not log: a record
/// does not name its producer, so the key (a pipeline, one producer's in practice) stands in.
#[derive(Default)]
pub struct Warned(HashSet<(String, Vec<u8>)>);

/// Most keys remembered; past it, the set starts again (a key may then log again).
const WARNED_KEYS: usize = 10_000;

impl Warned {
    pub fn misrouted(&mut self, topic: &str, key: &[u8], partition: PartitionId, owner: PartitionId) {
        if self.0.len() >= WARNED_KEYS {
            self.0.clear();
        }
        if self.0.insert((topic.to_string(), key.to_vec())) {
            warn!(
                %topic,
                key = %String::from_utf8_lossy(key),
                partition = partition.number(),
                owner = owner.number(),
                "a producer partitions with another hash than murmur2 (librdkafka's default is CRC32): its records are forwarded to their key's partition, which costs a second write; set partitioner=murmur2_random on that producer (logged once per key)"
            );
        }
    }
}
