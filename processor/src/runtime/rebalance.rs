//! What librdkafka tells the processor of its group membership: partitions assigned and
//! revoked (a revocation first lets the partitions' in-flight triggers report), its
//! statistics and OAuth tokens.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::effects::InFlight;
use super::kafka;
use super::telemetry::Telemetry;
use crate::core::partitioning::PartitionId;

/// Partition ownership changes, reported by librdkafka during polls.
pub enum Ownership {
    Assigned(Vec<PartitionId>),
    /// `lost`: taken away, not handed over (the session expired: the process was paused or
    /// cut off for longer than `session.timeout.ms`).
    Revoked {
        partitions: Vec<PartitionId>,
        lost: bool,
    },
}

pub struct RebalanceContext {
    pub tx: UnboundedSender<Ownership>,
    pub telemetry: Arc<Telemetry>,
    /// Triggers in flight: a revoked partition is let go once theirs have reported.
    pub in_flight: Arc<InFlight>,
    /// How long a revocation waits for them.
    pub grace: Duration,
    pub tokens: kafka::Tokens,
}

impl ClientContext for RebalanceContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _: Option<&str>) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.generate()
    }

    /// librdkafka's statistics (every `statistics.interval.ms`): the consumer lag it
    /// measures per partition, from the high watermark its fetches see.
    fn stats(&self, statistics: rdkafka::Statistics) {
        for (topic, t) in &statistics.topics {
            for p in t.partitions.values() {
                // -1: not measured (a partition not owned, or not yet fetched from).
                if p.partition >= 0 && p.consumer_lag >= 0 {
                    self.telemetry
                        .consumer_lag(topic, PartitionId::new(p.partition), p.consumer_lag);
                }
            }
        }
    }
}

fn partitions_of(list: &TopicPartitionList) -> Vec<PartitionId> {
    let mut ps: Vec<PartitionId> = list
        .elements()
        .iter()
        .map(|e| PartitionId::new(e.partition()))
        .collect();
    ps.sort_unstable();
    ps.dedup();
    ps
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let partitions = partitions_of(list);
            let lost = consumer.assignment_lost();
            // The partitions stay ours until this returns: let their in-flight triggers
            // report first, so that the next owner finds the reports on the jobs topic
            // instead of calling the targets again (a slow target delays the rebalance, for
            // at most the shutdown grace).
            let in_flight = self.in_flight.count(&partitions);
            if in_flight > 0 {
                info!(
                    in_flight,
                    ?partitions,
                    "partitions revoked: waiting for their in-flight triggers to report"
                );
                let left = tokio::task::block_in_place(|| self.in_flight.wait_for(&partitions, self.grace));
                if left > 0 {
                    // They stop retrying and say so; their next owner calls again only then,
                    // on an answer, or at the calls' deadlines.
                    let released = self.in_flight.release(&partitions);
                    warn!(left, released, ?partitions, grace = ?self.grace, "partitions let go with triggers still in flight: released");
                }
            }
            let _ = self.tx.send(Ownership::Revoked { partitions, lost });
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                let _ = self.tx.send(Ownership::Assigned(partitions_of(list)));
            }
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
            Rebalance::Revoke(_) => {}
        }
    }
}
