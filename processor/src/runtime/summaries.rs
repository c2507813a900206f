//! The list's pipeline summaries, kept between lists. Summarizing every owned pipeline means
//! decoding every state from RocksDB, and the processor answers the API between batches: with
//! thousands of pipelines and a page polling every few seconds, that would hold up
//! processing. So a partition's summaries are built by its first list, and afterwards only
//! the pipelines a batch changed since are summarized again. Nothing is built until the list
//! is asked for: an instance nobody looks at keeps no summaries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::Result;

use super::store::PartitionStore;
use crate::core::partitioning::PartitionId;
use crate::core::status::{self, PipelineSummary};

#[derive(Default)]
pub struct Summaries {
    /// Per owned partition whose list was asked for, its pipelines' summaries by id.
    partitions: BTreeMap<PartitionId, BTreeMap<String, Arc<PipelineSummary>>>,
    /// Pipelines changed since they were summarized.
    stale: BTreeSet<(PartitionId, String)>,
}

impl Summaries {
    /// A batch changed (or deleted) the pipeline's state in partition `p`.
    pub fn changed(&mut self, p: PartitionId, pipeline: &str) {
        if self.partitions.contains_key(&p) {
            self.stale.insert((p, pipeline.to_string()));
        }
    }

    /// Partition `p` is no longer owned.
    pub fn forget(&mut self, p: PartitionId) {
        self.partitions.remove(&p);
        self.stale.retain(|(q, _)| *q != p);
    }

    /// Every pipeline of the stores, summarized as the stores hold it now (shared: a list
    /// copies pointers, not summaries).
    pub fn all(&mut self, stores: &BTreeMap<PartitionId, &PartitionStore>) -> Result<Vec<Arc<PipelineSummary>>> {
        for (p, id) in std::mem::take(&mut self.stale) {
            let (Some(store), Some(summaries)) = (stores.get(&p), self.partitions.get_mut(&p)) else {
                continue;
            };
            match store.pipeline(&id)? {
                Some(state) => summaries.insert(id.clone(), Arc::new(status::summarize(&id, &state))),
                None => summaries.remove(&id),
            };
        }
        let mut all = Vec::new();
        for (p, store) in stores {
            if !self.partitions.contains_key(p) {
                let mut summaries = BTreeMap::new();
                for id in store.pipelines()? {
                    if let Some(state) = store.pipeline(&id)? {
                        summaries.insert(id.clone(), Arc::new(status::summarize(&id, &state)));
                    }
                }
                self.partitions.insert(*p, summaries);
            }
            all.extend(self.partitions[p].values().cloned());
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::{PendingTimer, PipelineState};
    use crate::core::timers::TimerKind;
    use crate::runtime::store::StoreBatch;

    fn write(store: &mut PartitionStore, id: &str, state: Option<PipelineState>) {
        let mut batch = StoreBatch::default();
        match state {
            Some(state) => batch.put_pipeline(id, &state, true).unwrap(),
            None => {
                let stored = store.pipeline(id).unwrap().unwrap_or_default();
                batch.delete_pipeline(id, &stored)
            }
        }
        store.write(batch).unwrap();
    }

    /// The stores as the processor lends them.
    fn lent(stores: &BTreeMap<PartitionId, PartitionStore>) -> BTreeMap<PartitionId, &PartitionStore> {
        stores.iter().map(|(p, s)| (*p, s)).collect()
    }

    fn ids(summaries: &[Arc<PipelineSummary>]) -> Vec<&str> {
        summaries.iter().map(|s| s.pipeline_id.as_str()).collect()
    }

    #[test]
    fn the_list_follows_changed_pipelines_and_owned_partitions() {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let (p0, p1) = (PartitionId::new(0), PartitionId::new(1));
        let mut stores = BTreeMap::new();
        stores.insert(p0, PartitionStore::open(dirs[0].path(), p0).unwrap());
        stores.insert(p1, PartitionStore::open(dirs[1].path(), p1).unwrap());
        write(stores.get_mut(&p0).unwrap(), "a", Some(PipelineState::default()));
        write(stores.get_mut(&p1).unwrap(), "b", Some(PipelineState::default()));
        let mut summaries = Summaries::default();
        summaries.changed(p0, "a");
        assert!(summaries.stale.is_empty(), "nothing is tracked before the first list");
        assert_eq!(ids(&summaries.all(&lent(&stores)).unwrap()), ["a", "b"]);

        // A new pipeline and a deleted one, as batches report them.
        write(stores.get_mut(&p0).unwrap(), "c", Some(PipelineState::default()));
        summaries.changed(p0, "c");
        write(stores.get_mut(&p1).unwrap(), "b", None);
        summaries.changed(p1, "b");
        assert_eq!(ids(&summaries.all(&lent(&stores)).unwrap()), ["a", "c"]);

        // A changed state is summarized again.
        assert!(summaries.all(&lent(&stores)).unwrap()[0].next_timer.is_none());
        let mut timed = PipelineState::default();
        timed.arm(PendingTimer {
            timer: TimerKind::CronTick,
            at: chrono::DateTime::UNIX_EPOCH,
        });
        write(stores.get_mut(&p0).unwrap(), "a", Some(timed));
        summaries.changed(p0, "a");
        assert!(summaries.all(&lent(&stores)).unwrap()[0].next_timer.is_some());

        // A revoked partition's pipelines leave the list.
        stores.remove(&p0);
        summaries.forget(p0);
        assert!(summaries.all(&lent(&stores)).unwrap().is_empty());
        assert!(!summaries.partitions.contains_key(&p0));
    }
}
