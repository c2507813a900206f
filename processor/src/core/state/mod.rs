//! What a partition stores, as keys and values: the layout of its state ([`parts`]), its
//! journaled triggers, the applied offset of each input and the forwarded copies applied,
//! and the batch of writes that lands together ([`StoreBatch`]). Pure: the runtime's store
//! (RocksDB) and the simulator's (memory) hold these bytes as they are, and the changelog
//! mirrors them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::changelog::Lineage;
use super::config::PipelineConfig;
use super::forwarding::ForwardWindow;
use super::lifecycle::Effect;
use super::partitioning::PartitionId;
use super::PipelineState;

pub mod parts;

/// One write: a key and its value, `None` to delete it.
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// A value of this process's own does not encode (a bug: nothing stored is lost).
#[derive(Debug, thiserror::Error)]
#[error("encoding {what}: {source}")]
pub struct EncodeError {
    pub what: &'static str,
    #[source]
    pub source: serde_json::Error,
}

impl EncodeError {
    pub fn of(what: &'static str) -> impl FnOnce(serde_json::Error) -> EncodeError {
        move |source| EncodeError { what, source }
    }
}

pub(crate) fn config_key(pipeline: &str) -> Vec<u8> {
    [b"f/".as_slice(), pipeline.as_bytes()].concat()
}

pub(crate) fn effect_key(run_id: &str) -> Vec<u8> {
    [b"e/".as_slice(), run_id.as_bytes()].concat()
}

pub(crate) fn offset_key(topic: &str) -> Vec<u8> {
    [b"o/".as_slice(), topic.as_bytes()].concat()
}

/// Where the copies forwarded from `origin` of `topic` that were applied are kept.
pub(crate) fn window_key(topic: &str, origin: PartitionId) -> Vec<u8> {
    format!("w/{topic}/{origin}").into_bytes()
}

/// Where earlier versions kept timers, apart from the state (see the module's notes).
pub(crate) const LEGACY_TIMERS: &[u8] = b"t/";

/// Writes that must land together, kept as a list so the same writes can be mirrored to
/// the changelog.
#[derive(Default)]
pub struct StoreBatch {
    /// Key and value; `None` deletes the key. One entry per key: a later write to a key
    /// replaces the earlier one in place, so a batch that touches a pipeline (or an input's
    /// applied offset) 500 times writes it, and mirrors it to the changelog, once.
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Where each key's entry is in `ops`.
    index: HashMap<Vec<u8>, usize>,
    /// The changelog offset the store is current with once this batch is written, and when
    /// (on the processor's clock).
    checkpoint: Option<(i64, DateTime<Utc>)>,
    /// The epoch and batch the store holds once this batch is written.
    lineage: Option<Lineage>,
    /// The keys still to write again once this batch is written (see the runtime store's `c/repairs`).
    repairs: Option<Vec<Vec<u8>>>,
}

impl StoreBatch {
    /// Writes all of `state`, and its config too when `with_config` (the store does not hold
    /// this config yet: see the store's `holds_config`).
    pub fn put_pipeline(
        &mut self,
        pipeline: &str,
        state: &PipelineState,
        with_config: bool,
    ) -> Result<(), EncodeError> {
        let writes = parts::writes(pipeline, None, state, false).map_err(EncodeError::of("pipeline state"))?;
        self.put_state(
            writes,
            state.config.as_deref().filter(|_| with_config).map(|c| (pipeline, c)),
        );
        Ok(())
    }

    /// Writes what [`parts::writes`] made of a state, and `config` (pipeline, config) when given.
    pub fn put_state(&mut self, writes: Vec<Write>, config: Option<(&str, &PipelineConfig)>) {
        for (key, value) in writes {
            self.set(key, value);
        }
        if let Some((pipeline, config)) = config {
            self.set(config_key(pipeline), Some(config.json().as_bytes().to_vec()));
        }
    }

    /// Deletes a pipeline: its head, its config, and the parts of `stored` (its state as
    /// stored).
    pub fn delete_pipeline(&mut self, pipeline: &str, stored: &PipelineState) {
        self.set(parts::head_key(pipeline), None);
        self.set(config_key(pipeline), None);
        for key in parts::deletes(pipeline, stored) {
            self.set(key, None);
        }
    }

    /// Deletes `key` whatever it holds.
    pub fn delete_key(&mut self, key: &[u8]) {
        self.set(key.to_vec(), None);
    }

    /// Journals a trigger until a report on its run arrives.
    pub fn put_effect(&mut self, run_id: &str, effect: &Effect) -> Result<(), EncodeError> {
        let bytes = serde_json::to_vec(effect).map_err(EncodeError::of("effect"))?;
        self.set(effect_key(run_id), Some(bytes));
        Ok(())
    }

    pub fn delete_effect(&mut self, run_id: &str) {
        self.set(effect_key(run_id), None);
    }

    pub fn set_applied_offset(&mut self, topic: &str, offset: i64) {
        self.set(offset_key(topic), Some(offset.to_be_bytes().to_vec()));
    }

    /// Keeps what was applied of the copies forwarded from `origin` of `topic`.
    pub fn set_forward_window(&mut self, topic: &str, origin: PartitionId, window: &ForwardWindow) {
        self.set(window_key(topic, origin), Some(window.encode()));
    }

    /// Records the write of `key`, replacing an earlier write of it in this batch.
    fn set(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        match self.index.get(&key) {
            Some(&at) => self.ops[at].1 = value,
            None => {
                self.index.insert(key.clone(), self.ops.len());
                self.ops.push((key, value));
            }
        }
    }

    pub fn set_checkpoint(&mut self, changelog_offset: i64, at: DateTime<Utc>) {
        self.checkpoint = Some((changelog_offset, at));
    }

    pub fn set_lineage(&mut self, lineage: Lineage) {
        self.lineage = Some(lineage);
    }

    /// The keys still to write again, with the checkpoint this batch sets.
    pub fn set_repairs(&mut self, keys: Vec<Vec<u8>>) {
        self.repairs = Some(keys);
    }

    /// The changelog checkpoint (offset, when) the batch sets.
    pub fn checkpoint(&self) -> Option<(i64, DateTime<Utc>)> {
        self.checkpoint
    }

    /// The lineage the batch sets.
    pub fn lineage(&self) -> Option<Lineage> {
        self.lineage
    }

    /// The keys still to write again the batch sets (`Some(empty)`: none are left).
    pub fn repairs(&self) -> Option<&[Vec<u8>]> {
        self.repairs.as_deref()
    }

    /// The writes to mirror to the changelog.
    pub fn changes(&self) -> &[(Vec<u8>, Option<Vec<u8>>)] {
        &self.ops
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.checkpoint.is_none() && self.lineage.is_none() && self.repairs.is_none()
    }

    /// Applies a changelog record as it was written: the key and value of one store write.
    pub fn mirror(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.set(key.to_vec(), value.map(<[u8]>::to_vec));
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Adds the writes of `other` to keys this batch does not write.
    pub fn underlay(&mut self, other: StoreBatch) {
        for (key, value) in other.ops {
            if !self.index.contains_key(&key) {
                self.mirror(&key, value.as_deref());
            }
        }
    }
}
