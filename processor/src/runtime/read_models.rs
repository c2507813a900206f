//! The API's read models, apart from the loop that feeds them: the owned pipelines' latest
//! events (filled from the events topic as partitions open) and summaries, and the owned
//! partitions for the instance directory. They learn only what durable batches wrote.

use std::sync::Arc;

use anyhow::Result;
use tokio::sync::watch;

use super::api::{self, Query};
use super::opening::Openings;
use super::recent::{RecentEvents, TailReader};
use super::store::PartitionStore;
use super::summaries::Summaries;
use super::telemetry::Telemetry;
use crate::core::events::Event;
use crate::core::partitioning::PartitionId;
use crate::core::task::{Learned, Task};

pub struct ReadModels {
    /// The owned pipelines' latest events, for the API and the page.
    recent: RecentEvents,
    /// The owned pipelines' summaries, for the API's list.
    summaries: Summaries,
    /// Fills `recent` from the events topic for each opened partition; none when the events
    /// topic is not partitioned like the inputs.
    tail: Option<TailReader>,
    /// The owned partitions, for the instance directory.
    owned: watch::Sender<Vec<PartitionId>>,
    telemetry: Arc<Telemetry>,
}

impl ReadModels {
    pub fn new(tail: Option<TailReader>, telemetry: Arc<Telemetry>) -> Self {
        ReadModels {
            recent: RecentEvents::default(),
            summaries: Summaries::default(),
            tail,
            owned: watch::channel(Vec::new()).0,
            telemetry,
        }
    }

    /// The owned partitions, as they change.
    pub fn owned_partitions(&self) -> watch::Receiver<Vec<PartitionId>> {
        self.owned.subscribe()
    }

    /// The next partition's recent events read back from the events topic.
    pub async fn tail_loaded(&mut self) -> Option<(PartitionId, Vec<Event>)> {
        self.tail.as_mut()?.loaded.recv().await
    }

    /// Older events of a partition, read back from the events topic.
    pub fn backfill(&mut self, events: Vec<Event>) {
        self.recent.backfill(events);
    }

    /// Partition `p` was opened: its recent events are read back.
    pub fn opened(&self, p: PartitionId) {
        if let Some(tail) = &self.tail {
            tail.read(p);
        }
    }

    /// Says what the task owns now (telemetry, the instance directory), and forgets the
    /// partitions it no longer does.
    pub fn owned_changed(&mut self, task: &Task<PartitionStore>) {
        let owned = task.owned();
        let before = self.owned.send_replace(owned.clone());
        let partitions = task.settings().partitions;
        for p in before.into_iter().filter(|p| !owned.contains(p)) {
            self.summaries.forget(p);
            self.recent.retain(|id| api::partition_of(id, partitions) != p);
        }
        self.telemetry.partitions_owned(owned.len() as i64);
        self.telemetry.timers_pending(task.timers_pending() as i64);
    }

    /// Learns what a durable batch changed.
    pub fn learn(&mut self, learned: Learned) {
        for event in learned.events {
            self.telemetry.event(event.kind.name());
            if event.kind.is_sla_breach() {
                let owner = learned
                    .owners
                    .get(event.pipeline_id.as_str())
                    .map_or("", String::as_str);
                self.telemetry.sla_breach(event.kind.name(), &event.pipeline_id, owner);
            }
            self.recent.push(event);
        }
        for (p, pipeline) in learned.changed {
            self.summaries.changed(p, &pipeline);
        }
    }

    /// Answers an API question from the stores (between batches, so never half a batch).
    pub fn answer(
        &mut self,
        query: Query,
        task: &Task<PartitionStore>,
        openings: &Openings,
        instance: &str,
    ) -> Result<()> {
        api::answer(
            query,
            api::Served {
                stores: task.stores().collect(),
                openings,
                summaries: &mut self.summaries,
                recent: &self.recent,
                partitions: task.settings().partitions,
                instance,
            },
        )
    }
}
