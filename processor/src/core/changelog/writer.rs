//! One owner's side of a changelog partition: the writer's rules, as [`super::Restore`] is the
//! reader's. Sans-I/O: the runtime writes the records, reads what it is told to read and
//! hands the answers back.
//!
//! An owner's epoch is its fence's offset + 1. Its batches are numbered 1, 2, … within the
//! epoch. Were it the partition's only writer, each of its records would land right after its
//! previous one: a hole before one of its records holds someone else's records, which it reads.
//! A newer owner's fence there means it lost the partition without being told (a zombie): it
//! gives the partition up before its batch counts for anything. Other writes there (a crashed
//! owner's unfinished batch, an older zombie's) never count, and the owner writes their keys
//! again with its own values, so that compaction never leaves one of those as a key's last
//! record.

use std::collections::BTreeSet;
use std::ops::Range;

use super::{Entry, Epoch, Lineage};
use crate::core::partitioning::PartitionId;

/// The epoch of an owner whose fence landed at `offset`.
pub fn epoch_at(offset: i64) -> Epoch {
    offset + 1
}

/// What another writer's records, read from the holes in this owner's offsets, mean to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Nothing that takes the partition away; `stale` keys of others' writes are kept to
    /// repair.
    Owner { stale: usize },
    /// A newer owner's fence is among them: give the partition up.
    Fenced,
}

/// The changelog partition ends where this owner had already seen its own records land:
/// it was recreated or truncated under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WentBack;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// Its epoch, and the last of its batches that counts.
    lineage: Lineage,
    /// Where its next record lands if it is the partition's only writer.
    next: i64,
    /// Keys whose last changelog record is not this owner's to stand by: the next batch
    /// writes them again with the store's values as they are then (a batch in between may
    /// have written them).
    repairs: BTreeSet<Vec<u8>>,
    /// Whether the store holds a non-empty list of keys to repair, as last written.
    kept: bool,
}

impl Writer {
    /// The owner whose fence landed at `fence`, before any other record of its own.
    pub fn fenced_at(fence: i64) -> Self {
        Writer {
            lineage: Lineage {
                epoch: epoch_at(fence),
                through: 0,
            },
            next: fence + 1,
            repairs: BTreeSet::new(),
            kept: false,
        }
    }

    pub fn epoch(&self) -> Epoch {
        self.lineage.epoch
    }

    /// Its epoch and the last of its batches that counts.
    pub fn lineage(&self) -> Lineage {
        self.lineage
    }

    /// The number its next batch carries.
    pub fn next_batch(&self) -> Lineage {
        Lineage {
            epoch: self.lineage.epoch,
            through: self.lineage.through + 1,
        }
    }

    /// Where its next record lands if nobody else writes: anything from here on that is not
    /// its own is someone else's.
    pub fn next_offset(&self) -> i64 {
        self.next
    }

    /// Whether an acknowledgement at `at` places a record of its own: at or past where its
    /// next record lands. One below says one of two things, and only where the partition
    /// ends tells which ([`Writer::ended`]): the changelog topic was recreated (or truncated)
    /// under the owner, or the acknowledgement names no real offset. librdkafka acknowledges
    /// a retried send that the broker found it already had (DUPLICATE_SEQUENCE_NUMBER, after
    /// a cut connection) with the broker's base offset, -1, counted on through the batch:
    /// its records are given offsets -1, 0, 1 … whatever they really are.
    pub fn places(&self, at: i64) -> bool {
        at >= self.next
    }

    /// Its records landed somewhere before `end`, the partition's end read after they were
    /// acknowledged without a place ([`Writer::places`]). `Err`: the partition ends before
    /// what this owner had already seen land, so it went back (recreated or truncated): what
    /// it wrote is gone, and a restore from it would lose state. `Ok`: the range to read and
    /// [`Writer::check`] (its own records among others'). An end just at its last records'
    /// is not taken for the topic gone back: tansu 0.6 reports a high watermark one short
    /// after a multi-record batch, and the record it leaves out is read with the next batch's
    /// holes.
    pub fn ended(&mut self, end: i64) -> Result<Range<i64>, WentBack> {
        if end < self.next {
            return Err(WentBack);
        }
        let between = self.next..end;
        self.next = end;
        Ok(between)
    }

    /// Its records landed at `offsets` (in any order): the ranges before them that hold
    /// someone else's records, to read and [`Writer::check`].
    pub fn landed(&mut self, offsets: &[i64]) -> Vec<Range<i64>> {
        let mut landed = offsets.to_vec();
        landed.sort_unstable();
        let mut foreign = Vec::new();
        for at in landed {
            if at > self.next {
                foreign.push(self.next..at);
            }
            self.next = self.next.max(at + 1);
        }
        foreign
    }

    /// Takes the records read from those ranges (what compaction left of them). Writes of
    /// its own epoch are its own retried sends and need nothing.
    pub fn check(&mut self, others: &[Entry]) -> Checked {
        if self.fenced_by(others) {
            return Checked::Fenced;
        }
        let own = self.lineage.epoch;
        let stale: BTreeSet<&Vec<u8>> = (others.iter())
            .filter_map(|e| match e {
                Entry::Write { key, epoch, .. } if *epoch != own => Some(key),
                _ => None,
            })
            .collect();
        let found = stale.len();
        self.repairs.extend(stale.into_iter().cloned());
        Checked::Owner { stale: found }
    }

    /// Takes what others wrote since its last record (from [`Writer::next_offset`] up to
    /// `end`, the partition's end when read), read while none of its own is in flight: an
    /// owner that writes nothing for a while still learns of a zombie's write before
    /// compaction may keep that write as its key's last record (the changelog keeps records
    /// for `min.compaction.lag.ms` only), and of a newer owner's fence.
    pub fn watched(&mut self, others: &[Entry], end: i64) -> Checked {
        let checked = self.check(others);
        // Read: its next batch need not read them again.
        self.next = self.next.max(end);
        checked
    }

    /// Whether `entries` hold a newer owner's fence. Asked before anything is started outside
    /// a batch (a journaled trigger), of what was written since [`Writer::next_offset`].
    pub fn fenced_by(&self, entries: &[Entry]) -> bool {
        entries
            .iter()
            .any(|e| matches!(e, Entry::Fence { epoch } if *epoch > self.lineage.epoch))
    }

    /// Keys to write again (a restore named them stale, or they belong to an earlier
    /// version's layout).
    pub fn repair(&mut self, keys: impl IntoIterator<Item = Vec<u8>>) {
        self.repairs.extend(keys);
    }

    /// The keys waiting to be written again, for the store to keep with the checkpoint it
    /// writes now (a checkpoint past the records that made them stale would otherwise let a
    /// reopening forget them); `None` when the store's list needs no write: it is empty and
    /// stays so, as in almost every batch. Asked when the store is first written at an
    /// opening (after the keys the store kept were taken back with [`Writer::repair`]) and
    /// with every checkpoint after.
    pub fn repairs_to_keep(&mut self) -> Option<Vec<Vec<u8>>> {
        if self.repairs.is_empty() && !self.kept {
            return None;
        }
        self.kept = !self.repairs.is_empty();
        Some(self.repairs.iter().cloned().collect())
    }

    /// Whether keys wait to be written again: the runtime writes them at once rather than
    /// with the next input, so that compaction never gets to leave others' writes as those
    /// keys' last records.
    pub fn has_repairs(&self) -> bool {
        !self.repairs.is_empty()
    }

    /// The keys the next batch writes again.
    pub fn take_repairs(&mut self) -> BTreeSet<Vec<u8>> {
        std::mem::take(&mut self.repairs)
    }

    /// Batch `batch` counts: its end marker is acknowledged and the store holds it.
    pub fn counted(&mut self, batch: Lineage) {
        debug_assert_eq!(batch.epoch, self.lineage.epoch, "a batch of another epoch");
        if batch.through > self.lineage.through {
            self.lineage = batch;
        }
    }
}

/// The first offset of each partition's records of a batch, from where they landed: what
/// the batch's end marker names.
pub fn first_offsets(landed: &[(PartitionId, i64)]) -> std::collections::BTreeMap<PartitionId, i64> {
    let mut first = std::collections::BTreeMap::new();
    for (p, offset) in landed {
        let f = first.entry(*p).or_insert(*offset);
        *f = (*f).min(*offset);
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(key: &str, epoch: Epoch) -> Entry {
        Entry::Write {
            key: key.as_bytes().to_vec(),
            value: Some(b"v".to_vec()),
            epoch,
            seq: 1,
        }
    }

    #[test]
    fn an_owners_epoch_is_its_fences_offset_plus_one_and_its_batches_count_from_one() {
        let w = Writer::fenced_at(41);
        assert_eq!(w.epoch(), 42);
        assert_eq!(w.next_offset(), 42);
        assert_eq!(w.next_batch(), Lineage { epoch: 42, through: 1 });
    }

    #[test]
    fn holes_in_its_own_offsets_are_someone_elses_records() {
        let mut w = Writer::fenced_at(9);
        // The acceptance right after the fence: nothing in between.
        assert!(w.landed(&[10]).is_empty());
        assert!(
            !w.places(9) && !w.places(-1) && w.places(11),
            "its next record lands at 11"
        );
        // A batch landing out of order, with two others' records before it and one inside.
        assert_eq!(w.landed(&[15, 13, 16]), vec![11..13, 14..15]);
        assert_eq!(w.next_offset(), 17);
        // Retried sends land twice: an offset already passed is no hole.
        assert!(w.landed(&[12, 17]).is_empty());
        assert_eq!(w.next_offset(), 18);
    }

    #[test]
    fn records_acknowledged_without_a_place_are_placed_by_where_the_partition_ends() {
        let mut w = Writer::fenced_at(9);
        assert!(w.landed(&[10, 11]).is_empty());
        // A retried send found a duplicate: its records told -1, 0 (librdkafka's base -1).
        assert!(!w.places(-1) && !w.places(0));
        // The partition ends past them: they are somewhere in 12..15, among others' maybe.
        assert_eq!(w.ended(15), Ok(12..15));
        assert_eq!(w.next_offset(), 15);
        // Ending before its records had already landed: the topic went back.
        assert_eq!(w.ended(14), Err(WentBack));
        assert_eq!(w.ended(3), Err(WentBack));
        // Just where they had: a watermark reported short (tansu), nothing to read.
        assert_eq!(w.ended(15), Ok(15..15));
        assert_eq!(w.next_offset(), 15);
    }

    #[test]
    fn a_newer_fence_among_others_records_takes_the_partition_away() {
        let mut w = Writer::fenced_at(9);
        assert_eq!(
            w.check(&[Entry::Fence { epoch: 5 }, write("a", 5)]),
            Checked::Owner { stale: 1 }
        );
        assert_eq!(w.check(&[write("b", 3), Entry::Fence { epoch: 30 }]), Checked::Fenced);
        assert!(w.fenced_by(&[Entry::Fence { epoch: 11 }]));
        assert!(!w.fenced_by(&[Entry::Fence { epoch: 10 }]), "its own fence");
    }

    #[test]
    fn others_writes_are_repaired_and_its_own_retried_sends_are_not() {
        let mut w = Writer::fenced_at(9);
        w.repair([b"legacy".to_vec()]);
        let own = w.epoch();
        let found = w.check(&[
            write("zombie", 4),
            write("mine", own),
            write("zombie", 4),
            Entry::Marker { epoch: 4, seq: 2 },
        ]);
        assert_eq!(
            found,
            Checked::Owner { stale: 1 },
            "each key once; its own retried send is none"
        );
        let repairs: Vec<Vec<u8>> = w.take_repairs().into_iter().collect();
        assert_eq!(repairs, vec![b"legacy".to_vec(), b"zombie".to_vec()]);
        assert!(w.take_repairs().is_empty(), "repaired once");
    }

    #[test]
    fn an_idle_owner_watching_its_changelog_repairs_a_zombies_write_and_reads_it_once() {
        let mut w = Writer::fenced_at(9);
        assert_eq!(w.landed(&[10, 11]), vec![]);
        // Idle since: a zombie wrote at 12 and 13.
        let read = [write("zombie", 4), Entry::Marker { epoch: 4, seq: 2 }];
        assert_eq!(w.watched(&read, 14), Checked::Owner { stale: 1 });
        assert!(w.has_repairs(), "written again at once");
        assert_eq!(w.next_offset(), 14);
        // Its next batch lands after them: nothing between to read again.
        assert_eq!(w.landed(&[14, 15]), vec![]);
        // Nothing new: nothing to do.
        w.take_repairs();
        assert_eq!(w.watched(&[], 16), Checked::Owner { stale: 0 });
        assert!(!w.has_repairs());
        // A newer owner's fence takes the partition away.
        let newer = Entry::Fence { epoch: epoch_at(16) };
        assert_eq!(w.watched(&[newer], 17), Checked::Fenced);
    }

    #[test]
    fn keys_to_repair_are_kept_while_they_wait_and_cleared_once_written() {
        let mut w = Writer::fenced_at(0);
        assert_eq!(w.repairs_to_keep(), None, "nothing kept, nothing to keep: no write");
        w.repair([b"k".to_vec()]);
        assert_eq!(w.repairs_to_keep(), Some(vec![b"k".to_vec()]));
        assert_eq!(w.repairs_to_keep(), Some(vec![b"k".to_vec()]), "still waiting: kept");
        w.take_repairs();
        assert_eq!(w.repairs_to_keep(), Some(vec![]), "written: the kept list is cleared");
        assert_eq!(w.repairs_to_keep(), None, "and then left alone");
    }

    #[test]
    fn a_batch_counts_once_and_never_goes_back() {
        let mut w = Writer::fenced_at(0);
        let first = w.next_batch();
        w.counted(first);
        assert_eq!(w.lineage().through, 1);
        w.counted(first);
        assert_eq!(w.next_batch().through, 2);
    }

    #[test]
    fn a_markers_first_offset_is_its_batchs_lowest_per_partition() {
        let (p0, p1) = (PartitionId::new(0), PartitionId::new(1));
        let first = first_offsets(&[(p1, 9), (p0, 4), (p1, 7), (p0, 5)]);
        assert_eq!(first.into_iter().collect::<Vec<_>>(), vec![(p0, 4), (p1, 7)]);
    }
}
