//! Which changelog writes count: the rules a restore follows ([`Restore`]) and an owner
//! writes by ([`Writer`]), free of Kafka and RocksDB.
//!
//! A partition's store is mirrored to a compacted changelog partition. Writers come and go
//! with the partition's ownership, and a writer that lost the partition without noticing (a
//! zombie: a long GC or network pause past its session timeout) may keep writing after the
//! next owner took over. Compaction keeps only the last record of every key. A restore must
//! still rebuild exactly the state the newest owner holds. So every write is attributable:
//!
//! - **Fence.** An owner opening a partition first writes a fence; the fence's offset is its
//!   *epoch*, newer than every epoch before it. It then reads the changelog up to its fence,
//!   so it knows everything written before the fence and nothing after it.
//! - **Batches.** Each of its batches carries its epoch and a sequence number (1, 2, …), on
//!   every record and on the batch's end marker. A batch counts once its marker is written.
//!   Marker keys are per epoch, so compaction keeps each epoch's last marker, which closes
//!   every earlier batch of that epoch.
//! - **Acceptance.** Before its first batch the new owner writes which batches of the epoch
//!   before it it has restored: `accept(epoch, through)`. A record of an older epoch after a
//!   newer fence is a zombie's and never counts; batches of an older epoch whose markers
//!   compaction removed count exactly when the acceptance names them.
//!
//! - **Accountability.** Fences have keys of their own, so compaction never removes one: on a
//!   full restore every epoch that wrote has its fence in the log. A write, marker or
//!   acceptance of an epoch that no fence read accounts for (a record forged with a
//!   `sluice.batch` header, issue 60) never counts and never moves the partition's history:
//!   its key is written again by the owner, as a zombie's is.
//!
//! A store that is reused (its checkpoint read on) is checked against the log as it is read:
//! if a newer owner fenced before the store's checkpoint (the store kept writing as a
//! zombie), or accepted fewer of the store's batches than it applied, the store holds writes
//! that do not count, and [`Restore::push`] says so: the caller restores in full instead.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// An owner's epoch: the changelog offset of its fence. 0 is the epoch of writes made
/// before fences existed (they all count once a marker follows).
pub type Epoch = i64;

/// The newest epoch that wrote batches, and the last of its batches known to count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    pub epoch: Epoch,
    pub through: u64,
}

/// One changelog record, as a restore sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A store write of batch `seq` of `epoch`.
    Write {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        epoch: Epoch,
        seq: u64,
    },
    /// The end of batch `seq` of `epoch`: it and every earlier batch of the epoch count.
    Marker { epoch: Epoch, seq: u64 },
    /// A new owner's fence, at offset `epoch`.
    Fence { epoch: Epoch },
    /// The owner of a newer epoch restored the batches of `epoch` through `through`.
    Accept { epoch: Epoch, through: u64 },
}

/// One store write: key, and value (`None` deletes the key).
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// Why a reused store cannot be brought up to date by reading on from its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Diverged {
    #[error("a newer owner (epoch {newer}) took the partition over before this store's checkpoint: the store holds writes made after it lost the partition")]
    FencedBeforeCheckpoint { newer: Epoch },
    #[error("the owner after epoch {epoch} restored its batches through {accepted}, but this store applied {applied}: the store holds batches that do not count")]
    AheadOfAcceptance { epoch: Epoch, accepted: u64, applied: u64 },
}

/// Reads changelog entries in log order and yields the writes that count, in the order to
/// apply them.
#[derive(Debug)]
pub struct Restore {
    /// Whether the reading starts from a reused store's checkpoint (whose lineage is
    /// `lineage` at the start) rather than from the beginning with an empty store.
    reused: bool,
    /// The newest epoch seen (fenced or written).
    newest: Epoch,
    /// The newest epoch that wrote batches, and its last batch that counts.
    lineage: Lineage,
    /// Per epoch, writes whose batch has not been closed yet: (seq, write).
    open: BTreeMap<Epoch, Vec<(u64, Write)>>,
    /// Epochs a newer fence superseded: their open writes wait for the acceptance.
    superseded: BTreeSet<Epoch>,
    /// The epochs whose fences were read.
    fences: BTreeSet<Epoch>,
    /// Records whose epoch no fence accounts for (forged): ignored, and counted here.
    unaccounted: u64,
    /// Keys of writes that never count (a zombie's, or a batch never closed): the owner
    /// writes them again with the values it holds, so that compaction never leaves such a
    /// write as a key's only record.
    stale: BTreeSet<Vec<u8>>,
}

impl Restore {
    /// A restore into an empty store, reading from the log's beginning.
    pub fn full() -> Self {
        Restore::starting(Lineage::default(), false)
    }

    /// A restore into a reused store whose lineage is `lineage`, reading on from its checkpoint.
    pub fn reusing(lineage: Lineage) -> Self {
        Restore::starting(lineage, true)
    }

    fn starting(lineage: Lineage, reused: bool) -> Self {
        Restore {
            reused,
            newest: lineage.epoch,
            lineage,
            open: BTreeMap::new(),
            superseded: BTreeSet::new(),
            fences: BTreeSet::new(),
            unaccounted: 0,
            stale: BTreeSet::new(),
        }
    }

    /// Whether a record of `epoch` may count: written before fences existed, by an owner
    /// whose fence was read, or (a reused store) by one fenced before the reading started.
    fn accounted(&mut self, epoch: Epoch) -> bool {
        let known = epoch == 0 || self.fences.contains(&epoch) || (self.reused && epoch <= self.newest);
        // A reused store meeting an epoch newer than it knows is told so (it diverges).
        let ok = known || self.reused;
        if !ok {
            self.unaccounted += 1;
        }
        ok
    }

    /// How many records named an epoch no fence accounts for (see the module comment).
    pub fn unaccounted(&self) -> u64 {
        self.unaccounted
    }

    /// Takes the next entry; returns the writes that now count.
    pub fn push(&mut self, entry: Entry) -> Result<Vec<Write>, Diverged> {
        match entry {
            Entry::Fence { epoch } => {
                self.fences.insert(epoch);
                if epoch > self.newest {
                    self.newest = epoch;
                    // Writes of older epochs still open wait for the new owner's acceptance.
                    let older: Vec<Epoch> = self.open.keys().copied().filter(|e| *e < epoch).collect();
                    self.superseded.extend(older);
                }
                Ok(Vec::new())
            }
            Entry::Write { key, value, epoch, seq } => {
                if epoch < self.newest || !self.accounted(epoch) {
                    self.stale.insert(key);
                    return Ok(Vec::new());
                }
                self.newer_without_fence(epoch)?;
                self.open.entry(epoch).or_default().push((seq, (key, value)));
                Ok(Vec::new())
            }
            Entry::Marker { epoch, seq } => {
                if epoch < self.newest || !self.accounted(epoch) {
                    // A zombie's marker: its batch does not count.
                    return Ok(Vec::new());
                }
                self.newer_without_fence(epoch)?;
                Ok(self.close(epoch, seq))
            }
            Entry::Accept { epoch, through } => {
                if !self.accounted(epoch) {
                    return Ok(Vec::new());
                }
                if self.reused && epoch == self.lineage.epoch && through < self.lineage.through {
                    return Err(Diverged::AheadOfAcceptance {
                        epoch,
                        accepted: through,
                        applied: self.lineage.through,
                    });
                }
                if !self.superseded.remove(&epoch) && epoch != self.lineage.epoch {
                    // Nothing of that epoch is pending here (all closed, or read before).
                    return Ok(Vec::new());
                }
                let writes = self.close(epoch, through);
                // Whatever of the epoch is still open never counts.
                for (_, (key, _)) in self.open.remove(&epoch).unwrap_or_default() {
                    self.stale.insert(key);
                }
                Ok(writes)
            }
        }
    }

    /// A write or marker of an epoch newer than any fence seen: its fence lies before where
    /// this reading started. From the beginning (or with the fence compacted away) that is
    /// simply the newest epoch; on a reused store it means a newer owner fenced before the
    /// store's checkpoint, so the store wrote as a zombie.
    fn newer_without_fence(&mut self, epoch: Epoch) -> Result<(), Diverged> {
        if epoch <= self.newest {
            return Ok(());
        }
        if self.reused && self.lineage.epoch != 0 {
            return Err(Diverged::FencedBeforeCheckpoint { newer: epoch });
        }
        self.newest = epoch;
        let older: Vec<Epoch> = self.open.keys().copied().filter(|e| *e < epoch).collect();
        self.superseded.extend(older);
        Ok(())
    }

    /// Closes the batches of `epoch` through `seq`: their writes, in log order.
    fn close(&mut self, epoch: Epoch, seq: u64) -> Vec<Write> {
        if epoch >= self.lineage.epoch {
            self.lineage = Lineage {
                epoch,
                through: if epoch == self.lineage.epoch {
                    self.lineage.through.max(seq)
                } else {
                    seq
                },
            };
        }
        let Some(open) = self.open.get_mut(&epoch) else {
            return Vec::new();
        };
        let (closed, still): (Vec<_>, Vec<_>) = std::mem::take(open).into_iter().partition(|(s, _)| *s <= seq);
        *open = still;
        if open.is_empty() {
            self.open.remove(&epoch);
        }
        closed.into_iter().map(|(_, w)| w).collect()
    }

    /// The newest epoch that wrote batches and its last batch that counts: what the next
    /// owner accepts, and what a reused store is checked against.
    pub fn lineage(&self) -> Lineage {
        self.lineage
    }

    /// Keys whose writes never count (a zombie's, or a batch never closed): the new owner
    /// writes them again with the values it holds.
    pub fn stale_keys(&self) -> Vec<Vec<u8>> {
        let mut keys = self.stale.clone();
        for writes in self.open.values() {
            keys.extend(writes.iter().map(|(_, (k, _))| k.clone()));
        }
        keys.into_iter().collect()
    }
}

mod writer;
/// The header of every store write on the changelog: epoch and batch, 16 bytes big-endian.
pub const BATCH_HEADER: &str = "sluice.batch";
/// The key prefix of a batch's end marker.
pub const MARKER_PREFIX: &[u8] = b"b/";

pub fn batch_header(epoch: Epoch, seq: u64) -> Vec<u8> {
    [epoch.to_be_bytes(), seq.to_be_bytes()].concat()
}

/// The end marker of batch `seq` of `epoch`, whose first record is at `first`.
pub fn marker(epoch: Epoch, seq: u64, first: i64) -> (Vec<u8>, Vec<u8>) {
    (
        [MARKER_PREFIX, &epoch.to_be_bytes()].concat(),
        [seq.to_be_bytes(), first.to_be_bytes()].concat(),
    )
}

/// The key prefix of a fence.
pub const FENCE_PREFIX: &[u8] = b"n/";
/// The key prefix of an acceptance.
pub const ACCEPT_PREFIX: &[u8] = b"a/";

/// The acceptance of `lineage`'s batches.
pub fn acceptance(lineage: Lineage) -> (Vec<u8>, Vec<u8>) {
    (
        [ACCEPT_PREFIX, &lineage.epoch.to_be_bytes()].concat(),
        lineage.through.to_be_bytes().to_vec(),
    )
}

fn be8(bytes: &[u8]) -> Option<[u8; 8]> {
    bytes.try_into().ok()
}

/// A changelog record as the restore rules see it; `None` for a record of no known kind.
pub fn entry(offset: i64, key: &[u8], value: Option<&[u8]>, batch: Option<&[u8]>) -> Option<Entry> {
    if let Some(rest) = key.strip_prefix(MARKER_PREFIX) {
        if rest.is_empty() {
            return Some(Entry::Marker { epoch: 0, seq: 0 });
        }
        let seq = value.and_then(|v| be8(v.get(..8)?))?;
        return Some(Entry::Marker {
            epoch: i64::from_be_bytes(be8(rest)?),
            seq: u64::from_be_bytes(seq),
        });
    }
    if key.starts_with(FENCE_PREFIX) {
        return Some(Entry::Fence {
            epoch: epoch_at(offset),
        });
    }
    if let Some(rest) = key.strip_prefix(ACCEPT_PREFIX) {
        return Some(Entry::Accept {
            epoch: i64::from_be_bytes(be8(rest)?),
            through: u64::from_be_bytes(be8(value?)?),
        });
    }
    let (epoch, seq) = match batch {
        None => (0, 0),
        Some(h) if h.len() == 16 => (i64::from_be_bytes(be8(&h[..8])?), u64::from_be_bytes(be8(&h[8..])?)),
        Some(_) => return None,
    };
    Some(Entry::Write {
        key: key.to_vec(),
        value: value.map(<[u8]>::to_vec),
        epoch,
        seq,
    })
}

pub use writer::{epoch_at, first_offsets, Checked, WentBack, Writer};

#[cfg(test)]
mod tests;
