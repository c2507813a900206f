//! A batch as the task decides it ([`Staged`]), and on its way out ([`Sealed`]): nothing
//! of it is written anywhere until the runtime carries out its [`Flush`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::core::batch::Flush;
use crate::core::config::PipelineConfig;
use crate::core::events::Event;
use crate::core::execution::RunId;
use crate::core::forwarding::ForwardWindow;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::Effect;
use crate::core::output::Output;
use crate::core::partitioning::PartitionId;
use crate::core::state::StoreBatch;
use crate::core::PipelineState;

/// What one batch has decided, not yet written anywhere.
#[derive(Default)]
pub struct Staged {
    /// Latest state per (partition, pipeline); `None` = deleted.
    pub(super) states: HashMap<(PartitionId, PipelineId), Option<Arc<PipelineState>>>,
    pub(super) outputs: Vec<Output>,
    pub(super) stores: BTreeMap<PartitionId, StoreBatch>,
    /// The highest offset applied or passed over per input (topic, partition): what the
    /// batch commits.
    pub(super) commits: BTreeMap<(String, PartitionId), i64>,
    /// Effects with the input partition of their pipeline.
    pub(super) effects: Vec<(PartitionId, Effect)>,
    /// Runs that ended in the batch: their calls still in flight stop trying again.
    pub(super) ended_runs: Vec<RunId>,
    /// What the read models learn once the batch is durable.
    pub(super) learned: Learned,
    /// Configs the batch writes, by partition and pipeline.
    pub(super) configs: HashMap<(PartitionId, PipelineId), Arc<PipelineConfig>>,
    /// Forwarded copies applied, by (partition, topic, partition they came from), as the
    /// batch leaves them.
    pub(super) windows: HashMap<(PartitionId, String, PartitionId), ForwardWindow>,
    pub(super) tallies: Tallies,
}

impl Staged {
    /// Stages an effect for partition `p` (its journaling is the caller's).
    pub(super) fn store(&mut self, p: PartitionId) -> &mut StoreBatch {
        self.stores.entry(p).or_default()
    }

    /// Nothing to write, commit or start.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty() && self.stores.is_empty() && self.commits.is_empty() && self.effects.is_empty()
    }

    /// What the batch counted so far.
    pub fn tallies(&self) -> &Tallies {
        &self.tallies
    }
}

/// Read-model updates of one batch, for once it is durable (never before: a batch that
/// fails or loses its partitions must not show in the API).
#[derive(Default)]
pub struct Learned {
    pub events: Vec<Event>,
    /// The owner (`pipeline.owner`, empty if none) of each SLA breach's pipeline.
    pub owners: HashMap<PipelineId, String>,
    /// Pipelines whose state changed (their summaries are stale).
    pub changed: HashSet<(PartitionId, PipelineId)>,
}

/// What a batch counted, for the metrics.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tallies {
    /// Records taken in (applied or passed over), by topic.
    pub records_in: BTreeMap<String, u64>,
    /// Records forwarded to their key's partition, by topic.
    pub forwarded: BTreeMap<String, u64>,
    /// Forwarded copies applied before, passed over, by topic.
    pub forwarded_duplicates: BTreeMap<String, u64>,
    /// Dead letters, by source topic and rejection kind.
    pub dead_letters: Vec<(String, &'static str)>,
    /// How late each fired timer was, in seconds.
    pub timers_late: Vec<f64>,
    /// Retention expiries held since the clock's last forward step, when timers were staged.
    pub expiries_held: Option<i64>,
}

/// A batch on its way out: its [`Flush`] says what to do next.
pub struct Sealed {
    pub flush: Flush,
    /// Every output: events, dead letters, records to Sluice's inputs, forwarded copies,
    /// then the changelog records from `first_changelog` on.
    pub outputs: Vec<Output>,
    pub first_changelog: usize,
    pub commits: BTreeMap<(String, PartitionId), i64>,
    pub effects: Vec<(PartitionId, Effect)>,
    pub ended_runs: Vec<RunId>,
    pub tallies: Tallies,
    pub(super) stores: BTreeMap<PartitionId, StoreBatch>,
    pub(super) states: HashMap<(PartitionId, PipelineId), Option<Arc<PipelineState>>>,
    pub(super) configs: HashMap<(PartitionId, PipelineId), Arc<PipelineConfig>>,
    pub(super) learned: Learned,
}
