//! A partition's store as the task uses it: read by key, written a batch at a time. The
//! store is the task's own, as a Kafka Streams task owns its state stores: the runtime's is
//! RocksDB on disk, the simulator's and the test driver's are memory. What the network
//! holds (the broker, the registry, the job targets) is never read through it.

use std::sync::Arc;

use crate::core::config::PipelineConfig;
use crate::core::forwarding::ForwardWindow;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::{Effect, Needs};
use crate::core::output::HostError;
use crate::core::partitioning::PartitionId;
use crate::core::state::StoreBatch;
use crate::core::PipelineState;

/// A pipeline's state as read from the store. Shared with the store's cache: a read of a
/// cached state copies a pointer, not the maps of a week's history.
#[derive(Clone, Default)]
pub struct Stored {
    pub state: Arc<PipelineState>,
    /// Whether the store holds it in parts: if not (a head from before parts), its next write
    /// writes every part.
    pub in_parts: bool,
    /// Whether its head was written before reads in part (it names no live executions): the
    /// state is read whole until its next write writes the head again.
    pub head_stale: bool,
}

impl Stored {
    /// As a read of `read` has it.
    pub fn of(read: crate::core::state::parts::Read) -> Self {
        Stored {
            state: Arc::new(read.state),
            in_parts: read.in_parts,
            head_stale: read.head_stale,
        }
    }
}

pub trait Store {
    /// A pipeline's state, if stored: read in part unless `needs` is the whole (see
    /// [`Executions`](crate::core::lifecycle::Executions)).
    fn stored(&self, pipeline: &PipelineId, needs: &Needs) -> Result<Option<Stored>, HostError>;
    /// The highest offset of `topic` applied (the applied-offset watermark).
    fn applied_offset(&self, topic: &str) -> Option<i64>;
    /// The journaled trigger of a run, if any.
    fn effect(&self, run_id: &str) -> Result<Option<Effect>, HostError>;
    /// What was applied of the copies forwarded from partition `origin` of `topic`.
    fn forward_window(&self, topic: &str, origin: PartitionId) -> Result<ForwardWindow, HostError>;
    /// Whether `config` is the one stored for `pipeline` (then a write need not store it).
    fn holds_config(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>) -> bool;
    /// A key's value as stored.
    fn raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError>;
    /// Applies a batch atomically.
    fn write(&mut self, batch: StoreBatch) -> Result<(), HostError>;
    /// A state a durable batch wrote: the next read need not decode it.
    fn remember(&self, pipeline: &PipelineId, state: Arc<PipelineState>);
    /// A config a durable batch wrote.
    fn config_written(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>);
    /// Forgets the checkpoint: the store may hold writes that do not count, and is restored
    /// in full if the partition comes back.
    fn disown(&mut self) -> Result<(), HostError>;
}
