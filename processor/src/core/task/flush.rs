//! Writing a batch out: sealing it (repairs, the changelog mirror), the end markers, and the
//! store writes once its outputs are safe.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tracing::warn;

use super::*;

impl<S: Store> Task<S> {
    /// Closes a batch: adds what opening partitions and other writers left for it (keys to
    /// write again, stale journal entries), mirrors its store writes to the changelog, and
    /// returns it with the [`Flush`] that writes it out.
    pub fn seal(&mut self, mut staged: Staged) -> Result<Sealed> {
        self.add_repairs(&mut staged)?;
        let first_changelog = staged.outputs.len();
        let sequenced = self.mirror_to_changelog(&mut staged);
        let mut flush = Flush::new(sequenced, self.settings.exactly_once);
        if staged.commits.is_empty() {
            flush = flush.without_inputs();
        }
        Ok(Sealed {
            flush,
            outputs: staged.outputs,
            first_changelog,
            commits: staged.commits,
            effects: staged.effects,
            ended_runs: staged.ended_runs,
            tallies: staged.tallies,
            stores: staged.stores,
            states: staged.states,
            configs: staged.configs,
            learned: staged.learned,
        })
    }

    /// Adds the keys to supersede (with the values the store holds now, under what the
    /// batch itself writes), and stale journal entries to delete.
    fn add_repairs(&mut self, staged: &mut Staged) -> Result<()> {
        for (p, owned) in &mut self.partitions {
            let keys = owned.writer.take_repairs();
            if keys.is_empty() {
                continue;
            }
            let mut repair = StoreBatch::default();
            for key in keys {
                let value = owned
                    .store
                    .raw(&key)
                    .map_err(|source| TaskError::Store { partition: *p, source })?;
                repair.mirror(&key, value.as_deref());
            }
            staged.store(*p).underlay(repair);
        }
        for (p, run_ids) in self.journaled.take_stale() {
            let batch = staged.store(p);
            for run_id in run_ids {
                batch.delete_effect(&run_id);
            }
        }
        Ok(())
    }

    /// Mirrors every store write, in order, to the changelog partition of the same number, as
    /// the next batch of this owner's epoch there; returns each partition's new lineage. A
    /// partition revoked meanwhile is left to its new owner, which redoes the work.
    fn mirror_to_changelog(&self, staged: &mut Staged) -> BTreeMap<PartitionId, Lineage> {
        let mut sequenced = BTreeMap::new();
        for (p, batch) in &staged.stores {
            let Some(owned) = self.partitions.get(p).filter(|_| !batch.changes().is_empty()) else {
                continue;
            };
            let this = owned.writer.next_batch();
            sequenced.insert(*p, this);
            let header = changelog::batch_header(this.epoch, this.through);
            for (key, value) in batch.changes() {
                staged.outputs.push(Output {
                    topic: self.settings.changelog.clone(),
                    partition: Some(*p),
                    key: Some(key.clone()),
                    value: value.clone(),
                    headers: vec![(changelog::BATCH_HEADER.to_string(), header.clone())],
                });
            }
        }
        sequenced
    }

    /// The changelog writers, for the [`Flush`] of a sealed batch.
    pub fn writers(&mut self) -> impl Writers + '_ {
        PartitionWriters(&mut self.partitions)
    }

    /// The end markers as changelog records.
    pub fn marker_outputs(&self, markers: &[Marker]) -> Vec<Output> {
        (markers.iter())
            .map(|m| {
                let (key, value) = changelog::marker(m.batch.epoch, m.batch.through, m.first);
                Output {
                    topic: self.settings.changelog.clone(),
                    partition: Some(m.partition),
                    key: Some(key),
                    value: Some(value),
                    headers: Vec::new(),
                }
            })
            .collect()
    }

    /// Writes each partition's batch, those in `counted` with their changelog checkpoint
    /// and lineage, and lets the stores keep what they now hold decoded. Returns what the
    /// read models learn.
    pub fn write_stores(
        &mut self,
        sealed: &mut Sealed,
        counted: &BTreeMap<PartitionId, (i64, Lineage)>,
        now: DateTime<Utc>,
    ) -> Result<Learned> {
        for (p, mut batch) in std::mem::take(&mut sealed.stores) {
            let Some(owned) = self.partitions.get_mut(&p) else {
                // Revoked mid-batch; its new owner redoes the work.
                if !batch.is_empty() {
                    warn!(partition = p.number(), "partition revoked before its batch was written");
                }
                continue;
            };
            if let Some((checkpoint, this)) = counted.get(&p) {
                batch.set_checkpoint(*checkpoint, now);
                batch.set_lineage(*this);
                // Found by this batch (others' records between its own), written by the next:
                // kept with the checkpoint that moves past those records.
                if let Some(keys) = owned.writer.repairs_to_keep() {
                    batch.set_repairs(keys);
                }
            }
            if batch.is_empty() {
                continue;
            }
            (owned.store.write(batch)).map_err(|source| TaskError::Store { partition: p, source })?;
        }
        // The stores hold these states now: their next reads need not decode them.
        for ((p, pipeline), state) in std::mem::take(&mut sealed.states) {
            if let (Some(store), Some(state)) = (self.store(p), state) {
                store.remember(&pipeline, state);
            }
        }
        for ((p, pipeline), config) in std::mem::take(&mut sealed.configs) {
            if let Some(store) = self.store(p) {
                store.config_written(&pipeline, &config);
            }
        }
        Ok(std::mem::take(&mut sealed.learned))
    }

    /// The changelog went back under partition `p` (see [`Writer::ended`]).
    pub fn changelog_went_back(&self, p: PartitionId) -> TaskError {
        TaskError::ChangelogWentBack(p, self.settings.changelog.clone())
    }
}
