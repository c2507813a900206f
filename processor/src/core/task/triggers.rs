//! Journaled triggers: what they wait on, and settling those that wait on nothing more.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use tracing::{debug, info};

use super::*;

impl<S: Store> Task<S> {
    pub fn triggers_waiting(&self) -> bool {
        !self.journaled.is_empty()
    }

    /// The journaled triggers that wait on nothing more, and those that wait on where the
    /// jobs topic ends. `jobs_positions`: the consumer's position on each partition of the
    /// jobs topic. Partition `p`'s jobs topic is read up to `end` when its last record below
    /// `end` was applied (here or, before the hand-over, by the previous owner), or the
    /// consumer's position is past it.
    pub fn poll_triggers(
        &mut self,
        now: DateTime<Utc>,
        jobs: &str,
        jobs_positions: &BTreeMap<PartitionId, i64>,
    ) -> TriggerPoll {
        let partitions = &self.partitions;
        let read_to = |p: PartitionId, end: i64| {
            let applied = partitions.get(&p).and_then(|o| o.store.applied_offset(jobs));
            let position = jobs_positions.get(&p);
            end <= 0 || applied.is_some_and(|a| a + 1 >= end) || position.is_some_and(|at| *at >= end)
        };
        let mut poll = TriggerPoll::default();
        for step in self.journaled.poll(now, read_to) {
            match step {
                Step::Due(due) => poll.due.push(due),
                Step::MeasureJobsEnd { partition, run_id } => poll.measure.push((partition, run_id)),
            }
        }
        poll
    }

    /// Where the jobs topic ended, measured for a journaled trigger past its deadline.
    pub fn jobs_end_measured(&mut self, p: PartitionId, run_id: &str, end: i64, now: DateTime<Utc>) {
        info!(partition = p.number(), run_id, jobs_end = end,
            "a journaled trigger's call is past its deadline (or, with no start mark, its time to begin): reading the jobs topic up to its end before requesting it again");
        self.journaled.measured(p, run_id, end, now);
    }

    /// Settles the journaled triggers that wait for nothing more (see [`Journaled`]):
    /// requested again (same idempotency key, a new deadline journaled first) if their run
    /// still awaits a report, forgotten otherwise. `assigned`: the partitions the consumer
    /// holds; `fences`: for each partition of [`TriggerPoll::fence_reads`], whether a newer
    /// owner's fence shows since this owner's last record (`None`: it could not be read,
    /// and its triggers wait). Nothing is started for a partition this instance may have
    /// lost. Returns the batch that journals and starts those requested again.
    pub fn settle_triggers(
        &mut self,
        due: Vec<Found>,
        now: DateTime<Utc>,
        assigned: &BTreeSet<PartitionId>,
        fences: &BTreeMap<PartitionId, Option<bool>>,
    ) -> Result<Staged> {
        let mut again = Staged::default();
        for due in due {
            let p = due.partition();
            let run_id = due.request().run_id.clone();
            let is_assigned = assigned.contains(&p) && self.is_open(p);
            let fenced = fences.get(&p).copied().flatten();
            let awaited = |request: &crate::core::lifecycle::TriggerRequest| -> Result<bool, HostError> {
                let Some(store) = self.partitions.get(&p).map(|o| &o.store) else {
                    return Ok(false);
                };
                // The open executions are in every read in part.
                let state = store.stored(&request.pipeline_id, &Needs::Part(Vec::new()))?;
                Ok(state.is_some_and(|s| s.state.awaits_trigger(&request.run_id)))
            };
            let awaited = match (is_assigned, fenced) {
                (true, Some(false)) => {
                    Some(awaited(due.request()).map_err(|source| TaskError::Store { partition: p, source })?)
                }
                _ => None,
            };
            match self.journaled.settle(
                due,
                now,
                is_assigned,
                || fenced,
                |_| Ok::<_, TaskError>(awaited == Some(true)),
            )? {
                Settled::LeftToNewOwner => debug!(
                    partition = p.number(),
                    %run_id, "a journaled trigger of a partition no longer assigned: left to its new owner"
                ),
                // The changelog could not be read: asked again in a second, never started blind.
                Settled::Waits => {}
                Settled::Fenced => return Err(self.give_up(vec![p])),
                Settled::Again(effect) => {
                    info!(partition = p.number(), %run_id, "a trigger requested before a restart or rebalance has no report on the jobs topic: requesting it again with the same idempotency key");
                    // Journaled with its new deadline before the call: a later owner leaves it
                    // to this one until then.
                    let effect = self.with_release_key(*effect);
                    again.store(p).put_effect(&run_id, &effect)?;
                    again.effects.push((p, effect));
                }
                Settled::Forgotten => debug!(
                    partition = p.number(),
                    %run_id,
                    "a journaled trigger is no longer awaited (its report came, or its run moved on): forgotten"
                ),
            }
        }
        Ok(again)
    }
}
