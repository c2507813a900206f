//! The order a decided batch is written out in, and where it stops: the partition runtime's
//! rules after [`super::admission`]'s. Sans-I/O, in quinn-proto's shape: [`Flush::poll`] says
//! what to do next, the runtime does it and reports back with the `on_*` methods.
//!
//! A batch counts only once all of it is safe. Its outputs (events, dead letters, records to
//! Sluice's inputs, changelog writes) are acknowledged first, then each changelog partition's
//! end marker; only then is its state written to the store, its input offsets committed and
//! its effects (triggers) started. A crash before the store write leaves nothing applied
//! here: the inputs come again and the batch is redone (its events again, with the same
//! `eventId`s), and a restore never applies changelog writes whose marker is missing.
//!
//! Between the steps it stops when this instance lost its assignment (a paused process: the
//! new owners redo the batch), and when a newer owner's fence shows between its own changelog
//! records (it gives those partitions up; a zombie must start nothing). Under exactly-once
//! one transaction carries the outputs, the markers and the input offsets, and the broker
//! fences: it refuses offsets sent under an old group generation. A batch with no input
//! (timers only) has no offsets of its own, so it sends the group's committed ones, which
//! move nothing but still make the broker check the generation; without them a woken zombie
//! would commit a transaction of fired timers and start their triggers a second time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

use super::changelog::{first_offsets, Checked, Entry, Lineage, WentBack, Writer};
use super::partitioning::PartitionId;

/// The changelog writers of the owned partitions, by partition.
pub trait Writers {
    fn writer(&mut self, partition: PartitionId) -> Option<&mut Writer>;
}

impl Writers for BTreeMap<PartitionId, Writer> {
    fn writer(&mut self, partition: PartitionId) -> Option<&mut Writer> {
        self.get_mut(&partition)
    }
}

/// A changelog partition's end marker for this batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub partition: PartitionId,
    pub batch: Lineage,
    /// Where the batch's first record in the partition landed.
    pub first: i64,
}

/// What the runtime does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Produce every output of the batch; then [`Flush::on_produced`].
    Produce,
    /// Read changelog partition `partition` in `ranges` (others' records between this
    /// owner's); then [`Flush::on_read`].
    ReadChangelog {
        partition: PartitionId,
        ranges: Vec<Range<i64>>,
    },
    /// Read where changelog partition `partition` ends (its high watermark): the batch's
    /// records there were acknowledged without a place ([`Writer::places`]); then
    /// [`Flush::on_end`].
    ReadEnd { partition: PartitionId },
    /// Produce these end markers; then [`Flush::on_markers`].
    ProduceMarkers(Vec<Marker>),
    /// Exactly-once, a batch without input offsets: read the group's committed offsets of
    /// the assigned partitions, to send with the transaction as its fence; then
    /// [`Flush::on_fence_offsets`].
    ReadFenceOffsets,
    /// Exactly-once: the outputs, their end markers ([`Flush::markers`]) and the input
    /// offsets (or the fence offsets) in one transaction; then [`Flush::on_transacted`].
    Transact,
    /// Write each partition's store batch, those named here with their changelog checkpoint
    /// (the marker's offset) and lineage; then [`Flush::on_stored`].
    WriteStores(BTreeMap<PartitionId, (i64, Lineage)>),
    /// Commit the input offsets; then [`Flush::on_committed`].
    CommitOffsets,
    /// Start the batch's effects; the batch is done.
    StartEffects,
    /// A newer owner fenced these partitions: give them up and stop. Nothing of the batch
    /// was written here or started.
    GiveUp(BTreeSet<PartitionId>),
    /// Changelog partition `partition` ends before where this owner's records had already
    /// landed (see [`Writer::ended`]): the changelog topic was recreated under it. Stop: nothing of the batch counts, and nothing more may be written there.
    ChangelogWentBack { partition: PartitionId },
    /// The assignment was lost: stop; the partitions' new owners redo the batch.
    Abandon,
    /// Nothing more to do.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Exactly-once with no input offsets: the fence offsets first.
    Fence,
    Outputs,
    /// Reading where the partitions end whose records were acknowledged without a place;
    /// the holes found so far are read after.
    Placing {
        unplaced: VecDeque<PartitionId>,
        holes: VecDeque<(PartitionId, Vec<Range<i64>>)>,
        then: AfterCheck,
    },
    /// Reading the holes in the changelog records just produced; `then` once all are read.
    Checking {
        holes: VecDeque<(PartitionId, Vec<Range<i64>>)>,
        then: AfterCheck,
    },
    Markers,
    Store,
    Commit,
    Effects,
    Finished(Action),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterCheck {
    Markers,
    Store,
}

/// One batch on its way out.
#[derive(Debug)]
pub struct Flush {
    stage: Stage,
    exactly_once: bool,
    /// Per changelog partition written, the batch's number there; partitions found fenced
    /// leave it.
    sequenced: BTreeMap<PartitionId, Lineage>,
    fenced: BTreeSet<PartitionId>,
    /// Where each partition's marker landed.
    checkpoints: BTreeMap<PartitionId, i64>,
    markers: Vec<Marker>,
}

impl Flush {
    /// A batch whose store writes went to the changelog partitions in `sequenced` under
    /// those batch numbers ([`Writer::next_batch`]).
    pub fn new(sequenced: BTreeMap<PartitionId, Lineage>, exactly_once: bool) -> Self {
        Flush {
            stage: Stage::Outputs,
            exactly_once,
            sequenced,
            fenced: BTreeSet::new(),
            checkpoints: BTreeMap::new(),
            markers: Vec::new(),
        }
    }

    /// Marks a batch with no input offsets (only timers fired): under exactly-once its
    /// transaction first needs fence offsets ([`Action::ReadFenceOffsets`]).
    pub fn without_inputs(mut self) -> Self {
        if self.exactly_once && self.stage == Stage::Outputs {
            self.stage = Stage::Fence;
        }
        self
    }

    /// The fence offsets were read (with none to send, a group that never committed, the
    /// transaction goes without: the runtime says so).
    pub fn on_fence_offsets(&mut self) {
        if self.stage == Stage::Fence {
            self.stage = Stage::Outputs;
        }
    }

    /// What to do next. Asking again without reporting gives the same answer.
    pub fn poll(&self) -> Action {
        match &self.stage {
            Stage::Fence => Action::ReadFenceOffsets,
            Stage::Outputs if self.exactly_once => Action::Transact,
            Stage::Outputs => Action::Produce,
            Stage::Placing { unplaced, .. } => match unplaced.front() {
                Some(partition) => Action::ReadEnd { partition: *partition },
                None => unreachable!("placing with nothing to place moves on at once"),
            },
            Stage::Checking { holes, .. } => match holes.front() {
                Some((partition, ranges)) => Action::ReadChangelog {
                    partition: *partition,
                    ranges: ranges.clone(),
                },
                None => unreachable!("a check with nothing to read moves on at once"),
            },
            Stage::Markers => Action::ProduceMarkers(self.markers.clone()),
            Stage::Store => {
                let counted = (self.checkpoints.iter())
                    .filter_map(|(p, at)| Some((*p, (*at, *self.sequenced.get(p)?))))
                    .collect();
                Action::WriteStores(counted)
            }
            Stage::Commit => Action::CommitOffsets,
            Stage::Effects => Action::StartEffects,
            Stage::Finished(action) => action.clone(),
        }
    }

    /// The end markers of a batch whose changelog records landed at `landed` (partition,
    /// offset), for the partitions still sequenced.
    pub fn markers(&self, landed: &[(PartitionId, i64)]) -> Vec<Marker> {
        (first_offsets(landed).into_iter())
            .filter_map(|(partition, first)| {
                Some(Marker {
                    partition,
                    batch: *self.sequenced.get(&partition)?,
                    first,
                })
            })
            .collect()
    }

    /// The assignment is found lost before anything of the batch was produced: stop. (A
    /// zombie that already knows writes nothing.)
    pub fn on_lost(&mut self) {
        self.finish(Action::Abandon);
    }

    /// The outputs are acknowledged; the batch's changelog records landed at `changelog`.
    /// `lost`: the assignment was found lost meanwhile.
    pub fn on_produced(&mut self, changelog: &[(PartitionId, i64)], lost: bool, writers: &mut dyn Writers) {
        if lost {
            return self.finish(Action::Abandon);
        }
        self.markers = self.markers(changelog);
        self.check(changelog, AfterCheck::Markers, writers);
    }

    /// Others' records read from the holes being checked. `None`: they could not be read
    /// because the assignment was lost. Returns what they meant to the writer.
    pub fn on_read(&mut self, entries: Option<&[Entry]>, writers: &mut dyn Writers) -> Option<Checked> {
        let Stage::Checking { holes, then } = &mut self.stage else {
            return None;
        };
        let (partition, _) = holes.pop_front()?;
        let then = *then;
        let Some(entries) = entries else {
            self.finish(Action::Abandon);
            return None;
        };
        let checked = writers.writer(partition).map(|w| w.check(entries));
        if checked == Some(Checked::Fenced) {
            self.fenced.insert(partition);
            self.sequenced.remove(&partition);
            self.markers.retain(|m| m.partition != partition);
        }
        self.next_hole_or(then);
        checked
    }

    /// The markers are acknowledged, at `landed`.
    pub fn on_markers(&mut self, landed: &[(PartitionId, i64)], lost: bool, writers: &mut dyn Writers) {
        if lost {
            return self.finish(Action::Abandon);
        }
        self.checkpoints = landed.iter().copied().collect();
        self.check(landed, AfterCheck::Store, writers);
    }

    /// Exactly-once: the transaction committed, its markers at `landed`.
    pub fn on_transacted(&mut self, landed: &[(PartitionId, i64)], lost: bool) {
        if lost {
            return self.finish(Action::Abandon);
        }
        self.checkpoints = landed.iter().copied().collect();
        self.stage = Stage::Store;
    }

    /// The stores are written: the batch counts, for its writers too. `lost`: the
    /// assignment is found lost now (the state is kept; the effects are the new owners').
    pub fn on_stored(&mut self, lost: bool, writers: &mut dyn Writers) {
        if let Action::WriteStores(counted) = self.poll() {
            for (p, (_, batch)) in counted {
                if let Some(w) = writers.writer(p) {
                    w.counted(batch);
                }
            }
        }
        self.stage = match (lost, self.exactly_once) {
            (true, _) => Stage::Finished(Action::Abandon),
            // The transaction committed the offsets.
            (false, true) => Stage::Effects,
            (false, false) => Stage::Commit,
        };
    }

    /// The input offsets are committed (or the commit failed: the applied offsets keep a
    /// redelivery from being applied again).
    pub fn on_committed(&mut self) {
        self.stage = Stage::Effects;
    }

    /// The effects are started.
    pub fn on_started(&mut self) {
        self.finish(Action::Done);
    }

    fn finish(&mut self, action: Action) {
        self.stage = Stage::Finished(action);
    }

    /// Looks for holes where records landed, then goes on to `then`. A partition none of
    /// whose records the acknowledgements place (see [`Writer::places`]) is placed by where
    /// it ends first.
    fn check(&mut self, landed: &[(PartitionId, i64)], then: AfterCheck, writers: &mut dyn Writers) {
        let mut per_partition: BTreeMap<PartitionId, Vec<i64>> = BTreeMap::new();
        for (p, offset) in landed {
            per_partition.entry(*p).or_default().push(*offset);
        }
        let mut unplaced = VecDeque::new();
        let mut holes = VecDeque::new();
        for (p, offsets) in per_partition {
            let Some(writer) = writers.writer(p) else { continue };
            // Some placed: the others are retried sends' (found duplicates) before them,
            // inside the holes read anyway.
            let mut placed = offsets;
            placed.retain(|o| writer.places(*o));
            if placed.is_empty() {
                unplaced.push_back(p);
                continue;
            }
            let ranges = writer.landed(&placed);
            if !ranges.is_empty() {
                holes.push_back((p, ranges));
            }
        }
        if !unplaced.is_empty() {
            self.stage = Stage::Placing { unplaced, holes, then };
            return;
        }
        self.stage = Stage::Checking { holes, then };
        self.next_hole_or(then);
    }

    /// Where the partition asked for ends (`None`: it could not be read because the
    /// assignment was lost). Its records lie before it, after the owner's last ones, among
    /// others' maybe: that range is read as a hole; its marker's checkpoint becomes the
    /// end's last offset, so that a reopening reads on from there. An end before the
    /// owner's last records is the topic gone back ([`Writer::ended`]).
    pub fn on_end(&mut self, end: Option<i64>, writers: &mut dyn Writers) {
        let Stage::Placing { unplaced, holes, then } = &mut self.stage else {
            return;
        };
        let (Some(partition), Some(end)) = (unplaced.pop_front(), end) else {
            return self.finish(Action::Abandon);
        };
        if let Some(writer) = writers.writer(partition) {
            match writer.ended(end) {
                Err(WentBack) => return self.finish(Action::ChangelogWentBack { partition }),
                Ok(between) if between.is_empty() => {}
                Ok(between) => holes.push_back((partition, vec![between])),
            }
            if *then == AfterCheck::Store {
                if let Some(checkpoint) = self.checkpoints.get_mut(&partition) {
                    *checkpoint = end - 1;
                }
            }
        }
        if unplaced.is_empty() {
            let (holes, then) = (std::mem::take(holes), *then);
            self.stage = Stage::Checking { holes, then };
            self.next_hole_or(then);
        }
    }

    /// Stays checking while holes are left; else goes on.
    fn next_hole_or(&mut self, then: AfterCheck) {
        if matches!(&self.stage, Stage::Checking { holes, .. } if !holes.is_empty()) {
            return;
        }
        self.stage = match then {
            AfterCheck::Markers if !self.fenced.is_empty() && self.sequenced.is_empty() => {
                Stage::Finished(Action::GiveUp(self.fenced.clone()))
            }
            AfterCheck::Markers if self.markers.is_empty() => self.after_markers(),
            AfterCheck::Markers => Stage::Markers,
            AfterCheck::Store => self.after_markers(),
        };
    }

    fn after_markers(&self) -> Stage {
        match self.fenced.is_empty() {
            true => Stage::Store,
            false => Stage::Finished(Action::GiveUp(self.fenced.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 10;
    const P0: PartitionId = PartitionId::new(0);
    const P1: PartitionId = PartitionId::new(1);

    fn batch(through: u64) -> Lineage {
        Lineage { epoch: EPOCH, through }
    }

    /// Owners of changelog partitions 0 and 1 whose fences landed at offset 9, their next
    /// records expected at 10.
    fn writers() -> BTreeMap<PartitionId, Writer> {
        [(P0, Writer::fenced_at(9)), (P1, Writer::fenced_at(9))]
            .into_iter()
            .collect()
    }

    fn read(partition: PartitionId, range: Range<i64>) -> Action {
        Action::ReadChangelog {
            partition,
            ranges: vec![range],
        }
    }

    fn both() -> Flush {
        Flush::new([(P0, batch(1)), (P1, batch(1))].into_iter().collect(), false)
    }

    #[test]
    fn outputs_then_markers_then_state_then_offsets_then_effects() {
        let mut w = writers();
        let mut f = both();
        assert_eq!(f.poll(), Action::Produce);
        f.on_produced(&[(P0, 10), (P1, 11), (P0, 11), (P1, 10)], false, &mut w);
        assert_eq!(
            f.poll(),
            Action::ProduceMarkers(vec![
                Marker {
                    partition: P0,
                    batch: batch(1),
                    first: 10
                },
                Marker {
                    partition: P1,
                    batch: batch(1),
                    first: 10
                },
            ])
        );
        f.on_markers(&[(P0, 12), (P1, 12)], false, &mut w);
        assert_eq!(
            f.poll(),
            Action::WriteStores([(P0, (12, batch(1))), (P1, (12, batch(1)))].into_iter().collect())
        );
        assert_eq!(w[&P0].lineage().through, 0, "nothing counts before the store holds it");
        f.on_stored(false, &mut w);
        assert_eq!(w[&P0].lineage().through, 1);
        assert_eq!(f.poll(), Action::CommitOffsets);
        f.on_committed();
        assert_eq!(f.poll(), Action::StartEffects);
        f.on_started();
        assert_eq!(f.poll(), Action::Done);
    }

    /// A changelog topic recreated under its owner: the batch's records land below where
    /// the owner's last ones did, and the partition ends there too. The batch stops there,
    /// before its markers, state and effects.
    #[test]
    fn records_landing_below_the_owners_last_ones_stop_the_batch_when_the_partition_ends_there() {
        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 10)], false, &mut w);
        f.on_markers(&[(P0, 11), (P1, 11)], false, &mut w);
        let mut f = both();
        f.on_produced(&[(P0, 12), (P1, 0)], false, &mut w);
        assert_eq!(f.poll(), Action::ReadEnd { partition: P1 });
        f.on_end(Some(1), &mut w);
        assert_eq!(f.poll(), Action::ChangelogWentBack { partition: P1 });
        // Not when it ends where the owner's last records were (a watermark one short).
        let mut f = both();
        f.on_produced(&[(P0, 0)], false, &mut w);
        f.on_end(Some(w[&P0].next_offset()), &mut w);
        assert!(matches!(f.poll(), Action::ProduceMarkers(_)));
    }

    /// A retried send the broker found it had (seen on tansu after a cut connection) is
    /// acknowledged with offsets counted from -1: not the topic gone back. Where the
    /// partition ends places the records; what lies between is read as others' may be, and
    /// the marker acknowledged the same way is checkpointed at the end.
    #[test]
    fn records_acknowledged_without_a_place_are_placed_by_the_partitions_end() {
        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, -1), (P0, 0), (P1, 10)], false, &mut w);
        assert_eq!(f.poll(), Action::ReadEnd { partition: P0 });
        f.on_end(Some(13), &mut w);
        assert_eq!(f.poll(), read(P0, 10..13));
        f.on_read(Some(&[]), &mut w);
        assert!(matches!(f.poll(), Action::ProduceMarkers(_)));
        f.on_markers(&[(P0, -1), (P1, 11)], false, &mut w);
        assert_eq!(f.poll(), Action::ReadEnd { partition: P0 });
        f.on_end(Some(14), &mut w);
        assert_eq!(f.poll(), read(P0, 13..14));
        f.on_read(Some(&[]), &mut w);
        assert_eq!(
            f.poll(),
            Action::WriteStores([(P0, (13, batch(1))), (P1, (11, batch(1)))].into_iter().collect())
        );
        // Lost while placing: the batch stops.
        let mut f = both();
        f.on_produced(&[(P1, 3)], false, &mut w);
        f.on_end(None, &mut w);
        assert_eq!(f.poll(), Action::Abandon);
    }

    #[test]
    fn an_assignment_known_lost_before_the_outputs_stops_the_batch_before_anything_is_produced() {
        let mut f = both();
        f.on_lost();
        assert_eq!(f.poll(), Action::Abandon);
    }

    #[test]
    fn a_batch_without_changelog_writes_has_no_markers() {
        let mut w = writers();
        let mut f = Flush::new(BTreeMap::new(), false);
        f.on_produced(&[], false, &mut w);
        assert_eq!(f.poll(), Action::WriteStores(BTreeMap::new()));
    }

    #[test]
    fn a_lost_assignment_stops_the_batch_before_its_markers_its_state_and_its_effects() {
        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 10)], true, &mut w);
        assert_eq!(f.poll(), Action::Abandon);

        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 10)], false, &mut writers());
        f.on_markers(&[(P0, 11), (P1, 11)], true, &mut w);
        assert_eq!(f.poll(), Action::Abandon);

        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 10)], false, &mut w);
        f.on_markers(&[(P0, 11), (P1, 11)], false, &mut w);
        f.on_stored(true, &mut w);
        assert_eq!(
            f.poll(),
            Action::Abandon,
            "no effect of a batch whose partitions are gone"
        );
        assert_eq!(w[&P0].lineage().through, 1, "the state written counts");
    }

    #[test]
    fn a_newer_fence_between_its_writes_gives_the_partition_up_before_anything_counts() {
        let mut w = writers();
        let mut f = both();
        // Partition 1's record landed at 12: 10..12 is someone else's.
        f.on_produced(&[(P0, 10), (P1, 12)], false, &mut w);
        assert_eq!(f.poll(), read(P1, 10..12));
        let checked = f.on_read(Some(&[Entry::Fence { epoch: 11 }]), &mut w);
        assert_eq!(checked, Some(Checked::Fenced));
        // Partition 0's marker still goes out (its own batch is sound), but nothing is
        // stored or started: the process stops as a zombie.
        assert_eq!(
            f.poll(),
            Action::ProduceMarkers(vec![Marker {
                partition: P0,
                batch: batch(1),
                first: 10
            }])
        );
        f.on_markers(&[(P0, 11)], false, &mut w);
        assert_eq!(f.poll(), Action::GiveUp([P1].into_iter().collect()));
        assert_eq!(w[&P0].lineage().through, 0);
    }

    #[test]
    fn a_fence_seen_only_where_a_marker_landed_still_gives_up() {
        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 10)], false, &mut w);
        f.on_markers(&[(P0, 11), (P1, 13)], false, &mut w);
        assert_eq!(f.poll(), read(P1, 11..13));
        f.on_read(Some(&[Entry::Fence { epoch: 12 }]), &mut w);
        assert_eq!(f.poll(), Action::GiveUp([P1].into_iter().collect()));
    }

    #[test]
    fn others_writes_between_its_own_are_repaired_not_fatal() {
        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 11)], false, &mut w);
        let stale = Entry::Write {
            key: b"k".to_vec(),
            value: None,
            epoch: 3,
            seq: 7,
        };
        assert_eq!(f.on_read(Some(&[stale]), &mut w), Some(Checked::Owner { stale: 1 }));
        assert!(matches!(f.poll(), Action::ProduceMarkers(m) if m.len() == 2));
        assert_eq!(w.get_mut(&P1).unwrap().take_repairs().len(), 1);
    }

    #[test]
    fn holes_that_cannot_be_read_once_the_assignment_is_lost_stop_the_batch() {
        let mut w = writers();
        let mut f = both();
        f.on_produced(&[(P0, 10), (P1, 11)], false, &mut w);
        f.on_read(None, &mut w);
        assert_eq!(f.poll(), Action::Abandon);
    }

    #[test]
    fn under_exactly_once_one_transaction_carries_it_all_and_no_commit_comes_apart() {
        let mut w = writers();
        let mut f = Flush::new([(P0, batch(1))].into_iter().collect(), true);
        assert_eq!(f.poll(), Action::Transact);
        assert_eq!(
            f.markers(&[(P0, 14), (P0, 13)]),
            vec![Marker {
                partition: P0,
                batch: batch(1),
                first: 13
            }]
        );
        f.on_transacted(&[(P0, 15)], false);
        assert_eq!(
            f.poll(),
            Action::WriteStores([(P0, (15, batch(1)))].into_iter().collect())
        );
        f.on_stored(false, &mut w);
        assert_eq!(f.poll(), Action::StartEffects);
        let mut lost = Flush::new(BTreeMap::new(), true);
        lost.on_transacted(&[], true);
        assert_eq!(lost.poll(), Action::Abandon);
    }

    /// A batch of fired timers has no input offsets; its transaction must still carry some,
    /// or the broker never checks the group generation and a woken zombie's triggers start.
    #[test]
    fn under_exactly_once_a_batch_of_timers_only_is_fenced_by_the_committed_offsets() {
        let mut f = Flush::new([(P0, batch(1))].into_iter().collect(), true).without_inputs();
        assert_eq!(f.poll(), Action::ReadFenceOffsets);
        assert_eq!(f.poll(), Action::ReadFenceOffsets, "asking again changes nothing");
        f.on_fence_offsets();
        assert_eq!(f.poll(), Action::Transact);
        // Without exactly-once the changelog fence checks it, as before.
        let plain = Flush::new([(P0, batch(1))].into_iter().collect(), false).without_inputs();
        assert_eq!(plain.poll(), Action::Produce);
    }
}
