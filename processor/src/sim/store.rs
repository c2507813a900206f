//! A partition store in memory, for the simulator: the same keys and values the runtime's
//! RocksDB store holds ([`crate::core::state`]), on a disk that outlives the process that
//! wrote it (a crash loses the task, not the disk).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::core::changelog::Lineage;
use crate::core::config::PipelineConfig;
use crate::core::forwarding::ForwardWindow;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::{Effect, Needs, PipelineState};
use crate::core::output::HostError;
use crate::core::partitioning::PartitionId;
use crate::core::state::{config_key, effect_key, parts, window_key, StoreBatch};
use crate::core::task::{Store, Stored};
use crate::core::timers::TimerKind;

/// What a partition's state directory holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disk {
    pub kv: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Where the store stands on the changelog, and the lineage there.
    pub checkpoint: Option<(i64, Lineage)>,
    /// Keys still to write again, kept with the checkpoint.
    pub repairs: Vec<Vec<u8>>,
}

impl Disk {
    /// Applies one write.
    pub fn apply(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        match value {
            Some(v) => self.kv.insert(key, v),
            None => self.kv.remove(&key),
        };
    }

    /// The timers the stored states hold: (pipeline, kind, due).
    pub fn timers(&self) -> Vec<(PipelineId, TimerKind, chrono::DateTime<chrono::Utc>)> {
        let mut found = Vec::new();
        for (key, value) in self.kv.range(b"p/".to_vec()..b"p0".to_vec()) {
            let Some(pipeline) = parts::pipeline_of(key) else {
                continue;
            };
            let pipeline = PipelineId::from(String::from_utf8_lossy(pipeline).as_ref());
            for timer in parts::timers_of(key, value).unwrap_or_default() {
                found.push((pipeline.clone(), timer.timer, timer.at));
            }
        }
        found
    }

    /// The journaled triggers.
    pub fn effects(&self) -> Vec<Effect> {
        (self.kv.range(b"e/".to_vec()..b"e0".to_vec()))
            .filter_map(|(_, v)| serde_json::from_slice(v).ok())
            .collect()
    }
}

/// A partition's store on a shared [`Disk`].
#[derive(Debug, Clone)]
pub struct MemoryStore(pub Rc<RefCell<Disk>>, bool);

impl MemoryStore {
    pub fn new(disk: Rc<RefCell<Disk>>) -> Self {
        MemoryStore(disk, false)
    }

    /// A store that never says what was applied (the stale watermark put back).
    pub fn forgetting_applied_offsets(self) -> Self {
        MemoryStore(self.0, true)
    }
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> HostError {
    format!("corrupt {what}: {e}").into()
}

impl parts::Source for Disk {
    type Error = std::convert::Infallible;

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(self.kv.get(key).cloned())
    }

    fn scan(
        &self,
        ranges: &[parts::KeyRange],
        each: &mut parts::Each<'_>,
    ) -> Result<Result<(), parts::PartError>, Self::Error> {
        Ok((ranges.iter())
            .try_for_each(|(from, to)| (self.kv.range(from.clone()..to.clone())).try_for_each(|(k, v)| each(k, v))))
    }
}

impl Store for MemoryStore {
    fn stored(&self, pipeline: &PipelineId, needs: &Needs) -> Result<Option<Stored>, HostError> {
        let disk = self.0.borrow();
        let Some(mut read) = parts::read(&*disk, pipeline, needs.spans()).map_err(|e| corrupt("a state", e))? else {
            return Ok(None);
        };
        if read.state.config.is_none() {
            if let Some(json) = disk.kv.get(&config_key(pipeline)) {
                let config: PipelineConfig = serde_json::from_slice(json).map_err(|e| corrupt("a config", e))?;
                read.state.config = Some(Arc::new(config));
            }
        }
        Ok(Some(Stored::of(read)))
    }

    fn applied_offset(&self, topic: &str) -> Option<i64> {
        if self.1 {
            return None;
        }
        let key = [b"o/".as_slice(), topic.as_bytes()].concat();
        let bytes = self.0.borrow().kv.get(&key)?.clone();
        Some(i64::from_be_bytes(bytes.try_into().ok()?))
    }

    fn effect(&self, run_id: &str) -> Result<Option<Effect>, HostError> {
        match self.0.borrow().kv.get(&effect_key(run_id)) {
            None => Ok(None),
            Some(raw) => serde_json::from_slice(raw)
                .map(Some)
                .map_err(|e| corrupt("a trigger", e)),
        }
    }

    fn forward_window(&self, topic: &str, origin: PartitionId) -> Result<ForwardWindow, HostError> {
        match self.0.borrow().kv.get(&window_key(topic, origin)) {
            None => Ok(ForwardWindow::empty()),
            Some(raw) => ForwardWindow::decode(raw).ok_or_else(|| corrupt("a window", raw.len())),
        }
    }

    fn holds_config(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>) -> bool {
        (self.0.borrow().kv.get(&config_key(pipeline))).is_some_and(|json| json == config.json().as_bytes())
    }

    fn raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        Ok(self.0.borrow().kv.get(key).cloned())
    }

    fn write(&mut self, batch: StoreBatch) -> Result<(), HostError> {
        let mut disk = self.0.borrow_mut();
        for (key, value) in batch.changes() {
            disk.apply(key.clone(), value.clone());
        }
        if let (Some((offset, _)), Some(lineage)) = (batch.checkpoint(), batch.lineage()) {
            disk.checkpoint = Some((offset, lineage));
        }
        if let Some(keys) = batch.repairs() {
            disk.repairs = keys.to_vec();
        }
        Ok(())
    }

    fn remember(&self, _: &PipelineId, _: Arc<PipelineState>) {}

    fn config_written(&self, _: &PipelineId, _: &Arc<PipelineConfig>) {}

    fn disown(&mut self) -> Result<(), HostError> {
        let mut disk = self.0.borrow_mut();
        disk.checkpoint = None;
        disk.repairs.clear();
        Ok(())
    }
}
