//! What a decision produces, as records to write: an event, a dead letter, a record to
//! Sluice's own inputs or a changelog record ([`Output`]); and how a decision's records are
//! encoded for their topics ([`Encode`], the runtime's codec), measured against the limits
//! before anything of it is applied.

use super::lifecycle::Decision;
use super::limits::OverLimit;
use super::partitioning::PartitionId;
use super::state::Write;
use super::PipelineState;

/// A record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub topic: String,
    /// Set for changelog records, which follow the store's partition, not the key's hash,
    /// and for forwarded copies.
    pub partition: Option<PartitionId>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Output {
    /// Its size as the producer counts it against `message.max.bytes`: key, value and the
    /// headers with their framing (a few bytes each, over-counted here).
    pub fn size(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.len() + v.len() + 10).sum();
        self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len) + headers
    }
}

/// A pipeline's state before a decision, as the store holds it.
#[derive(Clone, Copy)]
pub struct Before<'s> {
    pub state: &'s PipelineState,
    /// Stored in parts: a write then only updates the parts that changed (a state not
    /// stored at all is written whole, its head too).
    pub in_parts: bool,
    /// Its head was written before reads in part: written again (see
    /// [`Stored::head_stale`](crate::core::task::Stored::head_stale)).
    pub head_stale: bool,
}

/// A decision's records, encoded.
pub struct Encoded {
    /// The state's writes, each one changelog record.
    pub writes: Vec<Write>,
    pub events: Vec<Output>,
    pub records: Vec<Output>,
}

/// A failure of a part the host lends the core (its codec, its store): the host's own
/// error, carried as it is.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

/// Encodes decisions' records for their topics (the runtime's codec: JSON, Avro or
/// Protobuf).
pub trait Encode {
    /// What `decision` would write for `pipeline`; `Ok(Err(over))` when a record of it is
    /// over a limit (`--max-state-bytes`, `--max-message-bytes`).
    fn encode(
        &self,
        pipeline: &str,
        before: Before<'_>,
        decision: &Decision,
    ) -> Result<Result<Encoded, OverLimit>, HostError>;
}
