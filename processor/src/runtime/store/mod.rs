//! Per-partition state in RocksDB: pipeline states, durable timers, pending effects and the
//! applied-offset watermark of each input topic, written together in one atomic batch.
//!
//! Keys: `p/<pipeline>` and `p/<pipeline>\0…` → the state without its config, in parts (see
//! [`parts`]); `f/<pipeline>` → the config in force (JSON), written only when it changes, so
//! the state written for every input stays small (states of older stores hold their config
//! inline and still read); `e/<run id>` → a trigger requested and not yet reported on (JSON); `o/<topic>` → highest
//! applied offset. Every write to these keys is mirrored, key and value as they are, to the
//! changelog topic, followed by a batch end marker (see [`super::changelog`]); `c/` holds the
//! changelog offset the store is current with (the checkpoint), `c/lineage` the epoch and
//! batch it last wrote or restored and `c/repairs` the keys still to write again: the keys
//! that are not mirrored.
//!
//! Timers have no keys of their own: they are parts of their pipeline's state, and the
//! timer index is rebuilt from those parts when a partition opens ([`PartitionStore::timers`]).
//! Stores and changelogs of earlier versions also held each timer under
//! `t/<due ms><pipeline>\0<kind>` (a delete and a put for every reschedule, over half of
//! all changelog records); an opening partition deletes those ([`PartitionStore::legacy_timer_keys`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{DateTime, Utc};
use rocksdb::{
    BlockBasedOptions, Cache, Direction, IteratorMode, Options, ReadOptions, WriteBatch, WriteBufferManager,
    WriteOptions, DB,
};

use self::cache::RandomCache;
use crate::core::changelog::Lineage;
use crate::core::config::PipelineConfig;
use crate::core::forwarding::ForwardWindow;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::{Effect, Needs, Span};
use crate::core::partitioning::PartitionId;
use crate::core::timers::TimerKind;
use crate::core::PipelineState;

mod cache;
#[cfg(test)]
mod parts_tests;
use crate::core::output::HostError;
use crate::core::state::{config_key, effect_key, window_key, LEGACY_TIMERS};
pub use crate::core::state::{parts, StoreBatch, Write};
pub use crate::core::task::Stored;

/// What can go wrong with a partition's store, told apart by whether waiting mends it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB refused an operation: see [`StoreError::is_transient`].
    #[error("{doing} in {path}: {source}")]
    Db {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: rocksdb::Error,
    },
    /// The directory of the store cannot be made.
    #[error("creating {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Something stored does not decode.
    #[error("corrupt state: {what} in {path} does not decode ({detail}); stop the processor and delete that directory to restore it from the changelog")]
    Corrupt {
        what: String,
        path: PathBuf,
        detail: String,
    },
    /// A value of this process's own does not encode (a bug: nothing stored is lost).
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl From<crate::core::state::EncodeError> for StoreError {
    fn from(e: crate::core::state::EncodeError) -> Self {
        StoreError::Encode {
            what: e.what,
            source: e.source,
        }
    }
}

impl StoreError {
    /// Whether another attempt may succeed: an I/O error does (a lock still held by a
    /// process letting go of the store, a full disk being freed); a store that is corrupt,
    /// of a format this RocksDB does not read, or a value that does not encode does not.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Db { source, .. } => source.kind() == rocksdb::ErrorKind::IOError,
            StoreError::Create { .. } => true,
            StoreError::Corrupt { .. } | StoreError::Encode { .. } => false,
        }
    }

    fn db<'p>(doing: &'static str, path: &'p Path) -> impl FnOnce(rocksdb::Error) -> StoreError + 'p {
        move |source| StoreError::Db {
            doing,
            path: path.to_path_buf(),
            source,
        }
    }

    fn corrupt(what: impl Into<String>, path: &Path, detail: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            what: what.into(),
            path: path.to_path_buf(),
            detail: detail.to_string(),
        }
    }

    fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> StoreError {
        move |source| StoreError::Encode { what, source }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

const CHECKPOINT_KEY: &[u8] = b"c/";
const LINEAGE_KEY: &[u8] = b"c/lineage";
/// Keys whose last changelog record is another writer's, found and not yet written again
/// when the checkpoint moved past that record (see `Writer::repairs_to_keep`): a reopening
/// that reuses the store would not read that record again, so it must not forget them.
const REPAIRS_KEY: &[u8] = b"c/repairs";
/// When the checkpoint was last written (Unix milliseconds, wall clock): a store away from
/// its changelog longer than the changelog keeps tombstones cannot be brought up to date.
const CHECKPOINTED_AT_KEY: &[u8] = b"c/at";

pub struct PartitionStore {
    db: DB,
    path: PathBuf,
    /// Parsed configs by pipeline: a state read whose config JSON is the one a cached config
    /// was parsed from reuses it instead of validating it again (the most expensive part of
    /// reading a state). Bounded by [`CONFIG_CACHE_BYTES`].
    configs: Mutex<RandomCache<Arc<PipelineConfig>>>,
    /// Decoded states by pipeline, as stored: decoding a state from its parts costs in
    /// proportion to its history, and the loop reads a pipeline's state for every batch
    /// that touches it. Kept in step with every write (see [`StateCache`]).
    states: Mutex<StateCache>,
    /// The applied-offset watermark per input topic, read once at open and kept in step with
    /// every write: it is consulted for every record, so it must not cost a RocksDB read.
    applied: HashMap<String, i64>,
    /// Pipelines whose head sums up its readings otherwise than they are stored, found when
    /// the partition opens ([`parts::SummaryCheck`]): read whole until written again.
    unsummed: Mutex<HashSet<String>>,
}

/// A timer as stored: due time, pipeline, kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTimer {
    pub at: DateTime<Utc>,
    pub pipeline: PipelineId,
    pub kind: TimerKind,
}

/// Decoded states by pipeline (see [`RandomCache`]), and how reads were served.
struct StateCache {
    states: RandomCache<Stored>,
    reads: StateReads,
}

/// How the reads of pipelines' states were served since the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateReads {
    /// From the cache of decoded states.
    pub cached: u64,
    /// Read in part from the store (a cost in proportion to what a decision needs).
    pub decoded: u64,
    /// Read whole from the store (a cost in proportion to the pipeline's history): for the
    /// read models, a decision that asked for more than a read in part holds, or a head
    /// written before reads in part.
    pub whole: u64,
}

/// Estimated bytes of decoded state kept per partition by default (`--state-cache-mb`; an
/// instance holds one cache per partition it owns: 48 MiB at most with the default three).
/// Kept full, as random eviction keeps it, this holds about what a 32 MiB cache that
/// emptied when full held on average.
pub const STATE_CACHE_BYTES: usize = 16 << 20;

impl Default for StateCache {
    fn default() -> Self {
        StateCache::new(STATE_CACHE_BYTES, fastrand::Rng::new())
    }
}

impl StateCache {
    fn new(budget: usize, rng: fastrand::Rng) -> Self {
        StateCache {
            states: RandomCache::new(budget, rng),
            reads: StateReads::default(),
        }
    }

    fn get(&self, pipeline: &str) -> Option<&Stored> {
        self.states.get(pipeline)
    }

    fn insert(&mut self, pipeline: &PipelineId, stored: Stored) {
        let size = estimated_size(&stored.state);
        self.states.insert(pipeline, stored, size);
    }

    fn forget(&mut self, pipeline: &[u8]) {
        if let Ok(pipeline) = std::str::from_utf8(pipeline) {
            self.states.remove(pipeline);
        }
    }
}

/// A rough size of a decoded state in memory: enough to bound the cache, not to account it.
/// The config counts too (its text and the typed view, about twice the text): the cache
/// keeps it alive, and at a few executions it is most of a state. An execution no decision
/// needed since it was read is its JSON ([`HeldExecution`](crate::core::lifecycle::HeldExecution)),
/// and so is a reading's data no rule read.
pub fn estimated_size(state: &PipelineState) -> usize {
    let config = state.config.as_deref().map_or(0, config_size);
    let executions: usize = state.executions.loaded().values().map(|e| e.estimated_size()).sum();
    let sensors: usize = state
        .sensors
        .loaded()
        .values()
        .map(|s| 256 + s.data.estimated_size())
        .sum();
    // The head's bounded lists: small beside a week of executions, most of a state read in
    // part (a run on record, a forecast mark, a dependent, an unknown key).
    let head = 48 * state.history.runs.len()
        + 128 * (state.forecasts.len() + state.dependents.len() + state.unknown_sensors.len());
    // The state's own structure, and what a read in part keeps of what it read (the spans,
    // the readings' summary): 2 KiB by the `history` bench's count of a state read in part.
    2048 + head + config + executions + sensors + 256 * state.timers.len()
}

/// A rough size of a parsed config in memory: its text and the typed view, about twice the
/// text.
fn config_size(config: &PipelineConfig) -> usize {
    3 * config.json().len()
}

/// Estimated bytes of parsed configs kept per partition. The state cache holds the configs
/// of the states it keeps; this one saves parsing a config again when a state is decoded
/// after it left that cache. It was 10,000 configs whatever their size, and emptied when
/// full: with 100,000 pipelines, 79 MB of an instance's 401 MB heap (heaptrack), and a
/// cycle through more pipelines than it held found none of them.
const CONFIG_CACHE_BYTES: usize = 8 << 20;

/// RocksDB's memory, shared by every partition store of the process: memtables flush past
/// [`MEMTABLES`] together and blocks read are cached in [`BLOCK_CACHE`] together, rather
/// than each store taking RocksDB's defaults (64 MiB memtables, twice, and a cache of its
/// own): an instance owns many partitions, and the changelog, not the memtable, is what a
/// crash recovers from.
struct Memory {
    memtables: WriteBufferManager,
    blocks: Cache,
}

/// All partition stores' memtables together.
const MEMTABLES: usize = 64 << 20;
/// All partition stores' block cache together.
const BLOCK_CACHE: usize = 32 << 20;
/// One store's memtable: its writes are small and its reads go through the state cache.
const MEMTABLE: usize = 8 << 20;

fn options() -> Options {
    static MEMORY: OnceLock<Memory> = OnceLock::new();
    let memory = MEMORY.get_or_init(|| Memory {
        memtables: WriteBufferManager::new_write_buffer_manager(MEMTABLES, false),
        blocks: Cache::new_lru_cache(BLOCK_CACHE),
    });
    let mut options = Options::default();
    options.create_if_missing(true);
    options.set_write_buffer_size(MEMTABLE);
    options.set_write_buffer_manager(&memory.memtables);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&memory.blocks);
    // A state read asks for points that are mostly absent (a schedule the pipeline does not
    // use, a key's undated slot): a filter answers those without reading a block.
    table.set_bloom_filter(10.0, false);
    options.set_block_based_table_factory(&table);
    options
}

fn remember(cache: &mut RandomCache<Arc<PipelineConfig>>, pipeline: &PipelineId, config: Arc<PipelineConfig>) {
    let size = config_size(&config);
    cache.insert(pipeline, config, size);
}

impl PartitionStore {
    pub fn open(state_dir: &Path, partition: PartitionId) -> Result<Self> {
        let path = state_dir.join(format!("partition-{partition}"));
        std::fs::create_dir_all(&path).map_err(|source| StoreError::Create {
            path: path.clone(),
            source,
        })?;
        let db = DB::open(&options(), &path).map_err(StoreError::db("opening RocksDB", &path))?;
        let mut applied = HashMap::new();
        for item in db.iterator(IteratorMode::From(b"o/", Direction::Forward)) {
            let (key, value) = item.map_err(StoreError::db("reading applied offsets", &path))?;
            if !key.starts_with(b"o/") {
                break;
            }
            track_applied(&mut applied, &key, Some(&value), &path)?;
        }
        Ok(PartitionStore {
            db,
            path,
            configs: Mutex::new(RandomCache::new(CONFIG_CACHE_BYTES, fastrand::Rng::new())),
            states: Mutex::default(),
            applied,
            unsummed: Mutex::default(),
        })
    }

    /// The store, keeping up to `bytes` of decoded states (estimated) instead of
    /// [`STATE_CACHE_BYTES`].
    pub fn with_state_cache(self, bytes: usize) -> Self {
        *self.states.lock().expect("state cache") = StateCache::new(bytes, fastrand::Rng::new());
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A pipeline's state read whole (the read models' view: every execution).
    pub fn pipeline(&self, pipeline: &str) -> Result<Option<PipelineState>> {
        Ok(self
            .stored(&pipeline.into(), &Needs::Whole)?
            .map(|s| Arc::unwrap_or_clone(s.state)))
    }

    /// A pipeline's state, and whether it is stored in parts (see [`parts`]): read in part
    /// unless `needs` is the whole (see [`Executions`](crate::core::lifecycle::Executions)).
    /// The cache keeps states read in part, and serves a read whose days one holds; a whole
    /// read is never kept, or the cache would fill with history again.
    pub fn stored(&self, pipeline: &PipelineId, needs: &Needs) -> Result<Option<Stored>> {
        if self.unsummed.lock().expect("unsummed").contains(pipeline.as_str()) {
            // Its head is written again with the state's next write.
            let stored = self.decode(pipeline, None)?;
            self.states.lock().expect("state cache").reads.whole += 1;
            return Ok(stored.map(|s| Stored { head_stale: true, ..s }));
        }
        let spans = needs.spans();
        if let Some(spans) = spans {
            let mut cache = self.states.lock().expect("state cache");
            let cached = cache.get(pipeline).filter(|c| c.state.holds(spans)).cloned();
            if let Some(cached) = cached {
                cache.reads.cached += 1;
                return Ok(Some(cached));
            }
        }
        let stored = self.decode(pipeline, spans)?;
        let mut cache = self.states.lock().expect("state cache");
        match &stored {
            Some(s) if s.state.is_partial() => {
                cache.reads.decoded += 1;
                cache.insert(pipeline, s.clone());
            }
            Some(_) => cache.reads.whole += 1,
            None => cache.reads.decoded += 1,
        }
        Ok(stored)
    }

    /// How state reads were served since the store opened (see [`Self::stored`]).
    pub fn state_reads(&self) -> StateReads {
        self.states.lock().expect("state cache").reads
    }

    /// [`Self::state_reads`] since the last time this was called.
    pub fn take_state_reads(&self) -> StateReads {
        std::mem::take(&mut self.states.lock().expect("state cache").reads)
    }

    /// Notes that `state` is what the store now holds for `pipeline`, in parts (just
    /// written by the caller): the next read need not decode it. Kept without its quiet
    /// executions but for the spans it read (see [`PipelineState::leave_out_quiet`]).
    pub fn remember(&self, pipeline: &PipelineId, mut state: Arc<PipelineState>) {
        self.unsummed.lock().expect("unsummed").remove(pipeline.as_str());
        if state.has_quiet_to_leave_out() {
            Arc::make_mut(&mut state).leave_out_quiet();
        }
        let stored = Stored {
            state,
            in_parts: true,
            head_stale: false,
        };
        self.states.lock().expect("state cache").insert(pipeline, stored);
    }

    fn decode(&self, pipeline: &PipelineId, spans: Option<&[Span]>) -> Result<Option<Stored>> {
        let corrupt =
            |e: String| StoreError::corrupt(format!("the stored state of pipeline {pipeline}"), &self.path, e);
        let read = parts::read(self, pipeline, spans).map_err(|e| match e {
            parts::ReadError::Store(e) => e,
            parts::ReadError::Corrupt(e) => corrupt(e),
        })?;
        let Some(mut read) = read else {
            return Ok(None);
        };
        if read.state.config.is_none() {
            if let Some(json) = self.get("reading a pipeline config", &config_key(pipeline))? {
                let config = self
                    .parsed_config(pipeline, &json)
                    .map_err(|e| corrupt(e.to_string()))?;
                read.state.config = Some(config);
            }
        }
        Ok(Some(Stored::of(read)))
    }

    /// The config stored for `pipeline`, parsed once per distinct JSON.
    fn parsed_config(&self, pipeline: &PipelineId, json: &[u8]) -> Result<Arc<PipelineConfig>, serde_json::Error> {
        let mut cache = self.configs.lock().expect("config cache");
        if let Some(config) = cache.get(pipeline) {
            if config.json().as_bytes() == json {
                return Ok(config.clone());
            }
        }
        let config = Arc::new(serde_json::from_slice::<PipelineConfig>(json)?);
        remember(&mut cache, pipeline, config.clone());
        Ok(config)
    }

    /// Whether `config` is the one stored for `pipeline` (as read or written by this
    /// process): if so a state write need not write it again.
    pub fn holds_config(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>) -> bool {
        let held = |c: Option<&Arc<PipelineConfig>>| c.is_some_and(|held| Arc::ptr_eq(held, config));
        // A cached state is as stored, its config included (both caches follow every write).
        held(self.configs.lock().expect("config cache").get(pipeline))
            || held((self.states.lock().expect("state cache").get(pipeline)).and_then(|s| s.state.config.as_ref()))
    }

    /// Notes that `config` is being stored for `pipeline`.
    pub fn config_written(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>) {
        remember(
            &mut self.configs.lock().expect("config cache"),
            pipeline,
            config.clone(),
        );
    }

    pub fn applied_offset(&self, topic: &str) -> Option<i64> {
        self.applied.get(topic).copied()
    }

    /// Every timer the stored states hold, read from their parts (not decoding the
    /// states whole: an execution part is read for its timers only). The same pass checks
    /// each head's summary of its readings ([`parts::SummaryCheck`]).
    pub fn timers(&self) -> Result<Vec<StoredTimer>> {
        let mut timers = Vec::new();
        let mut summaries = parts::SummaryCheck::default();
        for item in self.db.iterator(IteratorMode::From(b"p/", Direction::Forward)) {
            let (key, value) = item.map_err(StoreError::db("reading timers", &self.path))?;
            if !key.starts_with(b"p/") {
                break;
            }
            let pipeline = parts::pipeline_of(&key).and_then(|p| std::str::from_utf8(p).ok());
            let corrupt = |detail: String| {
                StoreError::corrupt(
                    format!("the timers under {}", String::from_utf8_lossy(&key)),
                    &self.path,
                    detail,
                )
            };
            let pipeline = pipeline.ok_or_else(|| corrupt("not a pipeline's key".into()))?;
            summaries.see(&key, &value);
            for t in parts::timers_of(&key, &value).map_err(|e| corrupt(e.to_string()))? {
                timers.push(StoredTimer {
                    at: t.at,
                    pipeline: pipeline.into(),
                    kind: t.timer,
                });
            }
        }
        let off = summaries.finish();
        if !off.is_empty() {
            tracing::warn!(
                pipelines = off.len(),
                first = %off[0],
                "pipelines whose stored readings their head does not sum up (written by an older version): read whole until their next write"
            );
        }
        *self.unsummed.lock().expect("unsummed") = off.into_iter().collect();
        Ok(timers)
    }

    /// The timer keys an earlier version wrote (see the module's notes), to delete.
    pub fn legacy_timer_keys(&self) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        for item in self.db.iterator(IteratorMode::From(LEGACY_TIMERS, Direction::Forward)) {
            let (key, _) = item.map_err(StoreError::db("reading timers", &self.path))?;
            if !key.starts_with(LEGACY_TIMERS) {
                break;
            }
            keys.push(key.to_vec());
        }
        Ok(keys)
    }

    /// The changelog offset this store is current with; `None` for a store never written
    /// with a changelog (new, or from before there was one).
    pub fn checkpoint(&self) -> Result<Option<i64>> {
        self.get_i64("the changelog checkpoint", CHECKPOINT_KEY)
    }

    /// When the checkpoint was last written; `None` for a store from before this was kept.
    pub fn checkpointed_at(&self) -> Result<Option<DateTime<Utc>>> {
        let millis = self.get_i64("the checkpoint time", CHECKPOINTED_AT_KEY)?;
        Ok(millis.and_then(DateTime::from_timestamp_millis))
    }

    /// The epoch and batch this store last wrote or restored; `None` for a store from
    /// before epochs (or never written).
    pub fn lineage(&self) -> Result<Option<Lineage>> {
        match self.get("reading the lineage", LINEAGE_KEY)? {
            None => Ok(None),
            Some(raw) => serde_json::from_slice(&raw)
                .map(Some)
                .map_err(|e| StoreError::corrupt("the changelog lineage", &self.path, e)),
        }
    }

    /// Forgets where the store stands on the changelog: the next opening restores it in full.
    /// For a store that may hold writes that do not count (its owner found a newer owner's
    /// fence among its own writes).
    pub fn disown(&mut self) -> Result<()> {
        let mut write = WriteBatch::default();
        write.delete(CHECKPOINT_KEY);
        write.delete(CHECKPOINTED_AT_KEY);
        write.delete(LINEAGE_KEY);
        write.delete(REPAIRS_KEY);
        (self.db.write(write)).map_err(StoreError::db("forgetting the changelog checkpoint", &self.path))
    }

    /// The keys an earlier opening or batch of this store found to write again and had not
    /// written yet (see [`REPAIRS_KEY`]).
    pub fn repairs(&self) -> Result<Vec<Vec<u8>>> {
        match self.get("reading the keys to repair", REPAIRS_KEY)? {
            None => Ok(Vec::new()),
            Some(raw) => {
                serde_json::from_slice(&raw).map_err(|e| StoreError::corrupt("the keys to repair", &self.path, e))
            }
        }
    }

    /// The trigger journaled for `run_id`, if any.
    pub fn effect(&self, run_id: &str) -> Result<Option<Effect>> {
        let Some(raw) = self.get("reading a journaled trigger", &effect_key(run_id))? else {
            return Ok(None);
        };
        (serde_json::from_slice(&raw).map(Some)).map_err(|e| StoreError::corrupt("a journaled trigger", &self.path, e))
    }

    /// Every journaled trigger: run id and effect.
    pub fn effects(&self) -> Result<Vec<(String, Effect)>> {
        let mut effects = Vec::new();
        for item in self.db.iterator(IteratorMode::From(b"e/", Direction::Forward)) {
            let (key, value) = item.map_err(StoreError::db("reading journaled triggers", &self.path))?;
            let Some(run_id) = key.strip_prefix(b"e/") else { break };
            let effect = serde_json::from_slice(&value)
                .map_err(|e| StoreError::corrupt("a journaled trigger", &self.path, e))?;
            effects.push((String::from_utf8_lossy(run_id).into_owned(), effect));
        }
        Ok(effects)
    }

    /// RocksDB's estimate of the live data this store holds on disk (0 if it has none).
    pub fn estimated_bytes(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.estimate-live-data-size")
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// What was applied of the copies forwarded from `origin` of `topic` (empty: none yet).
    pub fn forward_window(&self, topic: &str, origin: PartitionId) -> Result<ForwardWindow> {
        match self.get("reading forwarded copies", &window_key(topic, origin))? {
            None => Ok(ForwardWindow::empty()),
            Some(raw) => ForwardWindow::decode(&raw).ok_or_else(|| {
                StoreError::corrupt(
                    format!("the forwarded copies of {topic} partition {origin}"),
                    &self.path,
                    format!("{} bytes", raw.len()),
                )
            }),
        }
    }

    /// The value stored under `key`, as the changelog carries it.
    pub fn raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get("reading a key", key)
    }

    fn get(&self, doing: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get(key).map_err(StoreError::db(doing, &self.path))
    }

    /// A big-endian `i64` stored under `key`.
    fn get_i64(&self, what: &str, key: &[u8]) -> Result<Option<i64>> {
        let Some(raw) = self.get("reading a checkpoint", key)? else {
            return Ok(None);
        };
        let raw = <[u8; 8]>::try_from(raw.as_slice())
            .map_err(|_| StoreError::corrupt(what, &self.path, format!("{} bytes, not 8", raw.len())))?;
        Ok(Some(i64::from_be_bytes(raw)))
    }

    /// Deletes everything, before a full restore from the changelog.
    pub fn clear(&mut self) -> Result<()> {
        let mut batch = WriteBatch::default();
        let clearing = || StoreError::db("clearing state before a restore", &self.path);
        for item in self.db.iterator(IteratorMode::Start) {
            let (key, _) = item.map_err(clearing())?;
            batch.delete(key);
        }
        self.db.write(batch).map_err(clearing())?;
        self.applied.clear();
        self.unsummed.lock().expect("unsummed").clear();
        self.states.lock().expect("state cache").states.clear();
        self.configs.lock().expect("config cache").clear();
        Ok(())
    }

    /// Every pipeline id with stored state: each head, skipping over its parts.
    pub fn pipelines(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        let mut it = self.db.raw_iterator();
        it.seek(b"p/");
        while let Some(key) = it.key() {
            let Some(id) = key.strip_prefix(b"p/") else { break };
            if parts::is_head(key) {
                ids.push(String::from_utf8_lossy(id).into_owned());
                it.seek(parts::parts_end(&ids[ids.len() - 1]));
            } else {
                it.next();
            }
        }
        it.status().map_err(StoreError::db("listing pipelines", &self.path))?;
        Ok(ids)
    }

    /// Applies a batch atomically. The WAL is not fsynced per batch: a process crash loses
    /// nothing, and machine loss is what the changelog is for.
    pub fn write(&mut self, batch: StoreBatch) -> Result<()> {
        let mut options = WriteOptions::default();
        options.set_sync(false);
        let mut write = WriteBatch::default();
        for (key, value) in batch.changes() {
            match value {
                Some(v) => write.put(key, v),
                None => write.delete(key),
            }
        }
        if let Some((offset, at)) = batch.checkpoint() {
            write.put(CHECKPOINT_KEY, offset.to_be_bytes());
            write.put(CHECKPOINTED_AT_KEY, at.timestamp_millis().to_be_bytes());
        }
        if let Some(lineage) = batch.lineage() {
            write.put(
                LINEAGE_KEY,
                serde_json::to_vec(&lineage).map_err(StoreError::encode("the lineage"))?,
            );
        }
        match batch.repairs() {
            None => {}
            Some([]) => write.delete(REPAIRS_KEY),
            Some(keys) => write.put(
                REPAIRS_KEY,
                serde_json::to_vec(keys).map_err(StoreError::encode("the keys to repair"))?,
            ),
        }
        (self.db.write_opt(write, &options)).map_err(StoreError::db("writing a state batch", &self.path))?;
        // The watermark follows every write of its keys, a restored or reset one (which may
        // lower or delete it) as much as an applied input's; a cached state, every write of
        // its pipeline's keys.
        let mut states = self.states.lock().expect("state cache");
        for (key, value) in batch.changes() {
            track_applied(&mut self.applied, key, value.as_deref(), &self.path)?;
            if let Some(pipeline) = parts::pipeline_of(key).or_else(|| key.strip_prefix(b"f/")) {
                states.forget(pipeline);
            }
        }
        Ok(())
    }
}

/// Keeps `applied` in step with a write of `key` (ignored unless an applied offset's).
fn track_applied(applied: &mut HashMap<String, i64>, key: &[u8], value: Option<&[u8]>, path: &Path) -> Result<()> {
    let Some(topic) = key.strip_prefix(b"o/") else {
        return Ok(());
    };
    let topic = String::from_utf8_lossy(topic).into_owned();
    match value {
        None => {
            applied.remove(&topic);
        }
        Some(raw) => {
            let raw: [u8; 8] = raw.try_into().map_err(|_| {
                StoreError::corrupt(
                    format!("the applied offset of {topic}"),
                    path,
                    format!("{} bytes, not 8", raw.len()),
                )
            })?;
            applied.insert(topic, i64::from_be_bytes(raw));
        }
    }
    Ok(())
}

/// A read of a state's head and parts (see [`parts::read`]): a range is read in place (no
/// copy of each key and value) and only as far as it goes.
impl parts::Source for PartitionStore {
    type Error = StoreError;

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        PartitionStore::get(self, "reading a pipeline state", key)
    }

    fn scan(&self, ranges: &[parts::KeyRange], each: &mut parts::Each<'_>) -> Result<Result<(), parts::PartError>> {
        let Some(last) = ranges.iter().map(|(_, to)| to).max() else {
            return Ok(Ok(()));
        };
        let failed = |e: rocksdb::Error| StoreError::db("reading a pipeline state", &self.path)(e);
        // One iterator for every range, bounded by the last one's end: creating one costs
        // more than a seek, and a read in part asks for several ranges. A range of one key
        // is read by key instead: the table's filter answers an absent one without a seek
        // through every level.
        let mut it = None;
        for (from, to) in ranges {
            if parts::is_point(from, to) {
                if let Some(value) = self.db.get_pinned(from).map_err(failed)? {
                    if let Err(e) = each(from, &value) {
                        return Ok(Err(e));
                    }
                }
                continue;
            }
            let it = it.get_or_insert_with(|| {
                let mut bounded = ReadOptions::default();
                bounded.set_iterate_upper_bound(last.clone());
                self.db.raw_iterator_opt(bounded)
            });
            it.seek(from);
            while let (Some(key), Some(value)) = (it.key(), it.value()) {
                if key >= to.as_slice() {
                    break;
                }
                if let Err(e) = each(key, value) {
                    return Ok(Err(e));
                }
                it.next();
            }
            it.status().map_err(failed)?;
        }
        Ok(Ok(()))
    }
}

/// The partition task's view of its store (see [`crate::core::task::Store`]).
impl crate::core::task::Store for PartitionStore {
    fn stored(&self, pipeline: &PipelineId, needs: &Needs) -> Result<Option<Stored>, HostError> {
        Ok(PartitionStore::stored(self, pipeline, needs)?)
    }

    fn applied_offset(&self, topic: &str) -> Option<i64> {
        PartitionStore::applied_offset(self, topic)
    }

    fn effect(&self, run_id: &str) -> Result<Option<Effect>, HostError> {
        Ok(PartitionStore::effect(self, run_id)?)
    }

    fn forward_window(&self, topic: &str, origin: PartitionId) -> Result<ForwardWindow, HostError> {
        Ok(PartitionStore::forward_window(self, topic, origin)?)
    }

    fn holds_config(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>) -> bool {
        PartitionStore::holds_config(self, pipeline, config)
    }

    fn raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        Ok(PartitionStore::raw(self, key)?)
    }

    fn write(&mut self, batch: StoreBatch) -> Result<(), HostError> {
        Ok(PartitionStore::write(self, batch)?)
    }

    fn remember(&self, pipeline: &PipelineId, state: Arc<PipelineState>) {
        PartitionStore::remember(self, pipeline, state)
    }

    fn config_written(&self, pipeline: &PipelineId, config: &Arc<PipelineConfig>) {
        PartitionStore::config_written(self, pipeline, config)
    }

    fn disown(&mut self) -> Result<(), HostError> {
        Ok(PartitionStore::disown(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::PendingTimer;

    #[test]
    fn a_batch_writes_each_key_once_with_its_last_value() {
        let mut batch = StoreBatch::default();
        for offset in 0..500 {
            batch.set_applied_offset("sluice.sensors", offset);
        }
        batch.mirror(b"e/run-1", Some(b"{}"));
        batch.put_pipeline("p1", &PipelineState::default(), true).unwrap();
        batch.delete_key(b"e/run-1");
        batch.set_applied_offset("sluice.jobs", 7);
        let changes: Vec<(&[u8], Option<&[u8]>)> = batch
            .changes()
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        assert_eq!(changes.len(), 4, "one write per key");
        assert_eq!(
            changes[0],
            (b"o/sluice.sensors".as_slice(), Some(499i64.to_be_bytes().as_slice()))
        );
        assert_eq!(
            changes[1].1, None,
            "the journal entry's last write, a delete, replaced its put"
        );
        assert_eq!(
            changes[3],
            (b"o/sluice.jobs".as_slice(), Some(7i64.to_be_bytes().as_slice()))
        );
        let dir = tempfile::tempdir().unwrap();
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        store.write(batch).unwrap();
        assert_eq!(store.applied_offset("sluice.sensors"), Some(499));
        assert!(store.timers().unwrap().is_empty());
    }

    fn test_config(id: &str, description: &str) -> Arc<PipelineConfig> {
        let raw = serde_json::json!({
            "pipeline": {"id": id, "owner": "team", "description": description},
            "schedule": {"trigger": {"key": "k", "check": "exists", "field": "x"}},
            "validation": {"trigger": "ALL", "rules": [{"key": "k", "check": "exists", "field": "x"}]},
            "job": {"type": "command", "config": {"command": "true"}}
        });
        Arc::new(PipelineConfig::from_json(&raw).unwrap().config)
    }

    /// A config and a state that holds it.
    fn configured(id: &str) -> (Arc<PipelineConfig>, PipelineState) {
        let config = test_config(id, "");
        let state = PipelineState {
            config: Some(config.clone()),
            ..PipelineState::default()
        };
        (config, state)
    }

    #[test]
    fn configs_are_stored_apart_once_and_parsed_once() {
        let dir = tempfile::tempdir().unwrap();
        let (config, state) = configured("p1");
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        assert!(!store.holds_config(&"p1".into(), &config));
        let mut batch = StoreBatch::default();
        batch.put_pipeline("p1", &state, true).unwrap();
        store.config_written(&"p1".into(), &config);
        assert!(state.config.is_some(), "the caller's state keeps its config");
        // An older store's state, config inline, still reads.
        batch.mirror(b"p/old", Some(&serde_json::to_vec(&state).unwrap()));
        store.write(batch).unwrap();
        assert!(store.holds_config(&"p1".into(), &config));
        let state_bytes = store.db.get(b"p/p1").unwrap().unwrap();
        assert!(
            !String::from_utf8_lossy(&state_bytes).contains("owner"),
            "the state is written without its config"
        );
        // The next write of the state alone leaves the config as it was.
        let mut batch = StoreBatch::default();
        batch.put_pipeline("p1", &state, false).unwrap();
        assert_eq!(batch.changes().len(), 1);
        store.write(batch).unwrap();
        let first = store.pipeline("p1").unwrap().unwrap();
        assert_eq!(first, state);
        assert!(
            Arc::ptr_eq(first.config.as_ref().unwrap(), &config),
            "the known config is not parsed again"
        );
        assert_eq!(store.pipeline("old").unwrap().unwrap(), state);
        let mut batch = StoreBatch::default();
        batch.delete_pipeline("p1", &state);
        store.write(batch).unwrap();
        assert!(store.db.get(b"f/p1").unwrap().is_none());
    }

    #[test]
    fn a_config_a_cached_state_holds_is_known_stored_after_the_config_cache_let_it_go() {
        let dir = tempfile::tempdir().unwrap();
        let (config, state) = configured("p1");
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        let mut batch = StoreBatch::default();
        batch.put_pipeline("p1", &state, true).unwrap();
        store.write(batch).unwrap();
        store.config_written(&"p1".into(), &config);
        store.remember(&"p1".into(), Arc::new(state.clone()));
        store.configs.lock().unwrap().clear();
        assert!(
            store.holds_config(&"p1".into(), &config),
            "the cached state says it is stored"
        );
        // Once the state cache lets go too, the config is written again: never assumed.
        let mut batch = StoreBatch::default();
        batch.put_pipeline("p1", &state, false).unwrap();
        store.write(batch).unwrap();
        assert!(!store.holds_config(&"p1".into(), &config));
    }

    #[test]
    fn the_config_cache_keeps_to_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        // Ids of one length: every config the same size, so the count that fits is exact.
        let config = |i: usize| test_config(&format!("p{i:06}"), &"x".repeat(4096));
        let one = config_size(&config(0));
        for i in 0..2 * CONFIG_CACHE_BYTES / one {
            store.config_written(&format!("p{i:06}").into(), &config(i));
        }
        let held = store.configs.lock().unwrap().len();
        assert_eq!(held, CONFIG_CACHE_BYTES / one, "as many as fit, never emptied at once");
    }

    #[test]
    fn state_reads_say_whether_the_cache_served_them_or_a_decode() {
        let dir = tempfile::tempdir().unwrap();
        let state = PipelineState::default();
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        let mut batch = StoreBatch::default();
        batch.put_pipeline("p1", &state, true).unwrap();
        store.write(batch).unwrap();
        assert_eq!(store.state_reads(), StateReads::default());
        store.stored(&"p1".into(), &Needs::Part(Vec::new())).unwrap().unwrap();
        store.stored(&"p1".into(), &Needs::Part(Vec::new())).unwrap().unwrap();
        // A pipeline not stored is a decode attempt too: the cache cannot say it is absent.
        assert!(store
            .stored(&"absent".into(), &Needs::Part(Vec::new()))
            .unwrap()
            .is_none());
        assert_eq!(
            store.state_reads(),
            StateReads {
                cached: 1,
                decoded: 2,
                whole: 0
            }
        );
        // A state the batch just wrote is remembered: its next read is from the cache.
        store.remember(&"p2".into(), state.into());
        store.stored(&"p2".into(), &Needs::Part(Vec::new())).unwrap().unwrap();
        assert_eq!(
            store.state_reads(),
            StateReads {
                cached: 2,
                decoded: 2,
                whole: 0
            }
        );
        // Taken (for the metric), they count again from nothing.
        assert_eq!(
            store.take_state_reads(),
            StateReads {
                cached: 2,
                decoded: 2,
                whole: 0
            }
        );
        store.stored(&"p2".into(), &Needs::Part(Vec::new())).unwrap().unwrap();
        assert_eq!(
            store.take_state_reads(),
            StateReads {
                cached: 1,
                decoded: 0,
                whole: 0
            }
        );
    }

    /// `--state-cache-mb`: a store keeps the states its cache has room for, and decodes the
    /// others from their parts on every read.
    #[test]
    fn a_store_keeps_as_many_states_as_its_cache_has_room_for() {
        let reads = |cache: usize| {
            let dir = tempfile::tempdir().unwrap();
            let mut store = PartitionStore::open(dir.path(), PartitionId::new(0))
                .unwrap()
                .with_state_cache(cache);
            let mut batch = StoreBatch::default();
            for p in ["p1", "p2", "p3"] {
                batch.put_pipeline(p, &PipelineState::default(), true).unwrap();
            }
            store.write(batch).unwrap();
            for _ in 0..2 {
                for p in ["p1", "p2", "p3"] {
                    store
                        .stored(&PipelineId::from(p), &Needs::Part(Vec::new()))
                        .unwrap()
                        .unwrap();
                }
            }
            store.state_reads()
        };
        let one = estimated_size(&PipelineState::default());
        assert_eq!(
            reads(1 << 20),
            StateReads {
                cached: 3,
                decoded: 3,
                whole: 0
            }
        );
        // Room for one state: the second round finds at most one of the three.
        assert!(reads(one).cached <= 1, "{:?}", reads(one));
        assert_eq!(
            reads(one - 1),
            StateReads {
                cached: 0,
                decoded: 6,
                whole: 0
            }
        );
    }

    /// Keys to repair live as long as the checkpoint they came with: a reopening reads them
    /// back, a batch that wrote them clears them, and neither is mirrored to the changelog.
    #[test]
    fn keys_to_repair_are_kept_with_the_checkpoint_and_never_mirrored() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        assert!(store.repairs().unwrap().is_empty());
        let mut batch = StoreBatch::default();
        batch.set_repairs(vec![b"s/p/h".to_vec(), vec![0xff, 0x00]]);
        assert!(!batch.is_empty() && batch.changes().is_empty(), "not a changelog write");
        store.write(batch).unwrap();
        drop(store);
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        assert_eq!(store.repairs().unwrap(), vec![b"s/p/h".to_vec(), vec![0xff, 0x00]]);
        let mut batch = StoreBatch::default();
        batch.set_repairs(Vec::new());
        store.write(batch).unwrap();
        assert!(store.repairs().unwrap().is_empty(), "written again: cleared");
        let mut batch = StoreBatch::default();
        batch.set_repairs(vec![b"k".to_vec()]);
        store.write(batch).unwrap();
        store.disown().unwrap();
        assert!(
            store.repairs().unwrap().is_empty(),
            "a disowned store is restored in full"
        );
    }

    /// A restore or a reset writes applied offsets as changelog records: lowered or deleted,
    /// the watermark in memory must follow, or inputs would be skipped as applied.
    #[test]
    fn the_watermark_follows_mirrored_writes_down_and_away() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        let mut batch = StoreBatch::default();
        batch.set_applied_offset("sluice.sensors", 900);
        batch.set_applied_offset("sluice.jobs", 40);
        store.write(batch).unwrap();
        let mut reset = StoreBatch::default();
        reset.mirror(b"o/sluice.sensors", Some(&120i64.to_be_bytes()));
        reset.mirror(b"o/sluice.jobs", None);
        store.write(reset).unwrap();
        assert_eq!(store.applied_offset("sluice.sensors"), Some(120), "lowered");
        assert_eq!(store.applied_offset("sluice.jobs"), None, "deleted");
        let mut batch = StoreBatch::default();
        batch.set_applied_offset("sluice.jobs", 7);
        batch.mirror(b"o/sluice.jobs", None);
        store.write(batch).unwrap();
        assert_eq!(
            store.applied_offset("sluice.jobs"),
            None,
            "a batch's last write of a key counts"
        );
        drop(store);
        let store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        assert_eq!(store.applied_offset("sluice.sensors"), Some(120));
        assert_eq!(store.applied_offset("sluice.jobs"), None);
    }

    #[test]
    fn state_timers_and_offsets_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let kind = |date: &str| TimerKind::Evaluate {
            execution: crate::core::execution::id("stream", date),
        };
        // Timers of executions the states do not hold: each is a part of its own.
        let with_timer = |kind: TimerKind, at| {
            let mut state = PipelineState::default();
            state.arm(PendingTimer { timer: kind, at });
            state
        };
        let t1 = DateTime::from_timestamp(2_000_000_000, 0).unwrap();
        let t0 = DateTime::from_timestamp(1_000_000_000, 0).unwrap();
        let p3 = with_timer(kind("2026-01-03"), t0);
        {
            let mut store = PartitionStore::open(dir.path(), PartitionId::new(2)).unwrap();
            let mut batch = StoreBatch::default();
            batch
                .put_pipeline("p1", &with_timer(kind("2026-01-02"), t1), true)
                .unwrap();
            batch
                .put_pipeline("p2", &with_timer(kind("2026-01-01"), t0), true)
                .unwrap();
            batch.put_pipeline("p3", &p3, true).unwrap();
            batch.set_applied_offset("sluice.sensors", 41);
            store.write(batch).unwrap();
            assert_eq!(
                store.applied_offset("sluice.sensors"),
                Some(41),
                "known without reopening"
            );
            let mut batch = StoreBatch::default();
            batch.delete_pipeline("p3", &p3);
            store.write(batch).unwrap();
        }
        let store = PartitionStore::open(dir.path(), PartitionId::new(2)).unwrap();
        assert_eq!(store.pipeline("p1").unwrap(), Some(with_timer(kind("2026-01-02"), t1)));
        assert_eq!(store.pipeline("nope").unwrap(), None);
        assert_eq!(store.applied_offset("sluice.sensors"), Some(41));
        assert_eq!(store.applied_offset("sluice.jobs"), None);
        let mut timers: Vec<_> = (store.timers().unwrap().into_iter())
            .map(|t| (t.at, t.pipeline.to_string(), t.kind))
            .collect();
        timers.sort();
        assert_eq!(
            timers,
            [
                (t0, "p2".to_string(), kind("2026-01-01")),
                (t1, "p1".to_string(), kind("2026-01-02"))
            ],
            "the timers of the states kept, read from their parts"
        );
        assert_eq!(store.pipelines().unwrap(), ["p1", "p2"]);
        assert!(
            store.legacy_timer_keys().unwrap().is_empty(),
            "no timer keys of their own"
        );
    }

    #[test]
    fn timer_keys_of_an_earlier_version_are_found_to_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        let mut legacy = b"t/".to_vec();
        legacy.extend_from_slice(&1_000_000_000_000u64.to_be_bytes());
        legacy.extend_from_slice(b"p1\0cronTick");
        let mut batch = StoreBatch::default();
        batch.mirror(&legacy, Some(&[1]));
        batch.put_pipeline("p1", &PipelineState::default(), true).unwrap();
        store.write(batch).unwrap();
        assert_eq!(store.legacy_timer_keys().unwrap(), [legacy.clone()]);
        assert!(store.timers().unwrap().is_empty(), "the index comes from states only");
        let mut batch = StoreBatch::default();
        batch.delete_key(&legacy);
        store.write(batch).unwrap();
        assert!(store.legacy_timer_keys().unwrap().is_empty());
    }
}
