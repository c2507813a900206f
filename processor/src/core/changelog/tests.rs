//! The changelog rules over a simulated log: owners taking over, zombies writing on, crashes
//! mid-batch and compaction, in random interleavings (proptest). The writers are the
//! processor's own [`Writer`]s; only the store and the log are simulated. tansu neither
//! compacts nor fences, so this is where those faults are shown.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// A key's identity for compaction: data keys and each epoch's marker are compacted (the
/// last record of each stays); fences and acceptances have keys of their own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum LogKey {
    Data(Vec<u8>),
    Marker(Epoch),
    Unique(usize),
}

#[derive(Debug, Default, Clone)]
struct Log {
    /// (offset, compaction key, entry); offsets stay as written when compaction removes
    /// records.
    records: Vec<(usize, LogKey, Entry)>,
    next: usize,
}

impl Log {
    fn append(&mut self, entry: Entry) -> usize {
        let offset = self.next;
        let key = match &entry {
            Entry::Write { key, .. } => LogKey::Data(key.clone()),
            Entry::Marker { epoch, .. } => LogKey::Marker(*epoch),
            Entry::Fence { .. } | Entry::Accept { .. } => LogKey::Unique(offset),
        };
        self.records.push((offset, key, entry));
        self.next += 1;
        offset
    }

    /// Keeps the last record of every compaction key.
    fn compact(&mut self) {
        let mut last: BTreeMap<LogKey, usize> = BTreeMap::new();
        for (offset, key, _) in &self.records {
            last.insert(key.clone(), *offset);
        }
        self.records.retain(|(offset, key, _)| last[key] == *offset);
    }

    /// What compaction left of the records in `ranges`.
    fn entries_in(&self, ranges: &[std::ops::Range<i64>]) -> Vec<Entry> {
        self.records
            .iter()
            .filter(|(o, _, _)| ranges.iter().any(|r| r.contains(&(*o as i64))))
            .map(|(_, _, e)| e.clone())
            .collect()
    }

    fn entries_after(&self, checkpoint: Option<usize>) -> Vec<Entry> {
        self.records
            .iter()
            .filter(|(o, _, _)| checkpoint.is_none_or(|c| *o > c))
            .map(|(_, _, e)| e.clone())
            .collect()
    }
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(state: &mut State, writes: Vec<Write>) {
    for (k, v) in writes {
        match v {
            Some(v) => state.insert(k, v),
            None => state.remove(&k),
        };
    }
}

/// Restores into `state` from `entries`; the state, the lineage and the stale keys.
fn restore(mut restore: Restore, mut state: State, entries: Vec<Entry>) -> Result<(State, Restore), Diverged> {
    for entry in entries {
        let writes = restore.push(entry)?;
        apply(&mut state, writes);
    }
    Ok((state, restore))
}

/// A writer of the partition: the owner, or a zombie that has not noticed it lost it. Its
/// changelog bookkeeping is the processor's own ([`Writer`]); the rest stands for its store.
#[derive(Debug, Clone)]
struct Owner {
    writer: Writer,
    state: State,
    /// The offset of its last counted marker (or acceptance): where its store's checkpoint
    /// stands.
    checkpoint: Option<usize>,
    /// Crashed, or gave the partition up on seeing a newer fence: it writes nothing more.
    stopped: bool,
}

#[derive(Debug, Clone)]
enum Step {
    /// A new owner fences, restores and accepts; the old owner lives on as a zombie.
    TakeOver,
    /// A batch by the owner (`zombie` false) or the zombie, of these writes; `crash` stops it
    /// after its writes (no marker, and the writer dead).
    Batch {
        zombie: bool,
        writes: Vec<(u8, Option<u8>)>,
        crash: bool,
        /// A new owner fences between the batch's writes and its marker: the writer sees
        /// the fence only where its marker lands.
        taken_over_midway: bool,
    },
    Compact,
}

fn step(compaction: bool) -> impl Strategy<Value = Step> {
    let write = (0u8..5, prop::option::weighted(0.8, 0u8..50));
    let batch = (
        any::<bool>(),
        prop::collection::vec(write, 1..4),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(zombie, writes, crash, taken_over_midway)| Step::Batch {
            zombie,
            writes,
            crash,
            taken_over_midway,
        });
    let compact_weight = if compaction { 2 } else { 0 };
    prop_oneof![2 => Just(Step::TakeOver), 8 => batch, compact_weight => Just(Step::Compact)]
}

/// Faults put back into the writer, to show the properties catch them.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// The writer never reads the records between its own (before fences existed, a zombie
    /// kept writing and marking batches after the next owner took over).
    unfenced: bool,
}

/// What a run of steps left: the log, the newest owner, the zombie (if any), and the keys
/// written by batches that never counted (crashed or fenced): the only writes that may not
/// stand.
struct Run {
    log: Log,
    owner: Owner,
    zombie: Option<Owner>,
    doubtful: std::collections::BTreeSet<Vec<u8>>,
    /// Batches a writer counted (its store written, its triggers started) though a newer
    /// owner's fence came before their marker: a zombie acting on a partition it lost.
    counted_behind_a_fence: Vec<Lineage>,
}

/// Runs the steps.
fn simulate(steps: &[Step], faults: Faults) -> Run {
    let mut log = Log::default();
    let owner = take_over(&mut log);
    let mut run = Run {
        log,
        owner,
        zombie: None,
        doubtful: std::collections::BTreeSet::new(),
        counted_behind_a_fence: Vec::new(),
    };
    for s in steps {
        match s {
            Step::TakeOver => run.take_over(),
            Step::Compact => run.log.compact(),
            Step::Batch {
                zombie,
                writes,
                crash,
                taken_over_midway,
            } => run.batch(*zombie, writes, *crash, *taken_over_midway, faults),
        }
    }
    run
}

impl Run {
    /// Writers quiet but the owner, which (taking over first if it stopped) writes two
    /// ordinary batches: the first lands after anything others wrote and repairs what it
    /// knew of, the second what the first found between its records.
    fn settle(&mut self) {
        if self.owner.stopped {
            self.take_over();
        }
        for _ in 0..2 {
            self.batch(false, &[(99, Some(0))], false, false, Faults::default());
        }
    }

    fn take_over(&mut self) {
        let next = take_over(&mut self.log);
        self.zombie = Some(std::mem::replace(&mut self.owner, next)).filter(|w| !w.stopped);
    }

    /// One batch, as the processor writes it: the keys to repair (with the store's values)
    /// under the batch's own writes, each record checked where it landed, then the marker,
    /// checked too; the store written only once the marker is out and no newer fence seen.
    fn batch(
        &mut self,
        zombie: bool,
        writes: &[(u8, Option<u8>)],
        crash: bool,
        taken_over_midway: bool,
        faults: Faults,
    ) {
        let by_zombie = zombie && self.zombie.is_some();
        let w = if by_zombie {
            self.zombie.as_mut().unwrap()
        } else {
            &mut self.owner
        };
        if w.stopped {
            return;
        }
        let this = w.writer.next_batch();
        let mut batch: BTreeMap<Vec<u8>, Option<Vec<u8>>> = w
            .writer
            .take_repairs()
            .into_iter()
            .map(|k| {
                let v = w.state.get(&k).cloned();
                (k, v)
            })
            .collect();
        batch.extend(writes.iter().map(|(k, v)| (vec![*k], v.map(|v| vec![v]))));
        let offsets: Vec<i64> = batch
            .iter()
            .map(|(key, value)| {
                self.log.append(Entry::Write {
                    key: key.clone(),
                    value: value.clone(),
                    epoch: this.epoch,
                    seq: this.through,
                }) as i64
            })
            .collect();
        let fenced = |w: &mut Owner, log: &Log, landed: &[i64]| {
            let holes = w.writer.landed(landed);
            !faults.unfenced && w.writer.check(&log.entries_in(&holes)) == Checked::Fenced
        };
        if crash || fenced(w, &self.log, &offsets) {
            w.stopped = true;
            self.doubtful.extend(batch.into_keys());
            return;
        }
        if taken_over_midway {
            // The writer goes on as a zombie of the new owner.
            let next = take_over(&mut self.log);
            let old = std::mem::replace(&mut self.owner, next);
            if !by_zombie {
                self.zombie = Some(old);
            }
        }
        let w = if by_zombie || taken_over_midway {
            self.zombie.as_mut().unwrap()
        } else {
            &mut self.owner
        };
        let at = self.log.append(Entry::Marker {
            epoch: this.epoch,
            seq: this.through,
        });
        if fenced(w, &self.log, &[at as i64]) {
            w.stopped = true;
            self.doubtful.extend(batch.into_keys());
            return;
        }
        if (self.log.records.iter())
            .any(|(o, _, e)| *o < at && matches!(e, Entry::Fence { epoch } if *epoch > this.epoch))
        {
            self.counted_behind_a_fence.push(this);
        }
        w.writer.counted(this);
        w.checkpoint = Some(at);
        apply(&mut w.state, batch.into_iter().collect());
    }
}

/// A new owner, as a partition is opened: fence, restore everything before the fence,
/// accept what it restored, check what landed between, repair the stale keys.
fn take_over(log: &mut Log) -> Owner {
    let before = log.entries_after(None);
    let fence = log.append(Entry::Fence {
        epoch: epoch_at(log.next as i64),
    });
    let mut writer = Writer::fenced_at(fence as i64);
    let (state, restored) = restore(Restore::full(), State::new(), before).expect("a full restore never diverges");
    let lineage = restored.lineage();
    // The new store is current through its acceptance.
    let accepted = log.append(Entry::Accept {
        epoch: lineage.epoch,
        through: lineage.through,
    });
    let between = writer.landed(&[accepted as i64]);
    assert_eq!(
        writer.check(&log.entries_in(&between)),
        Checked::Owner { stale: 0 },
        "nobody writes while an owner opens"
    );
    writer.repair(restored.stale_keys());
    Owner {
        writer,
        state,
        checkpoint: Some(accepted),
        stopped: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Without compaction, a restore from the beginning yields exactly the newest owner's
    /// state, whatever zombies and crashes wrote.
    #[test]
    fn a_restore_yields_the_newest_owners_state(steps in prop::collection::vec(step(false), 0..40)) {
        let run = simulate(&steps, Faults::default());
        the_newest_owner_wins(&run, false)?;
    }

    /// With compaction anywhere, a key can differ from the newest owner's state only when a
    /// zombie or a crashed batch wrote it, and then the restore names it stale (the owner
    /// writes it again with its value).
    #[test]
    fn after_compaction_only_keys_named_stale_can_differ(steps in prop::collection::vec(step(true), 0..40)) {
        let run = simulate(&steps, Faults::default());
        the_newest_owner_wins(&run, true)?;
    }

    /// A zombie's store (one that gave nothing up, having seen no newer fence) read on from
    /// its checkpoint is either refused or brought to exactly what a full restore gives.
    /// Once the owner has settled (see [`Run::settle`]), compaction loses nothing: a restore
    /// yields exactly its state, every write that did not count written over.
    #[test]
    fn once_the_owner_settles_compaction_keeps_exactly_its_state(steps in prop::collection::vec(step(true), 0..40)) {
        let mut run = simulate(&steps, Faults::default());
        run.settle();
        run.log.compact();
        let (state, _) = restore(Restore::full(), State::new(), run.log.entries_after(None)).unwrap();
        prop_assert_eq!(state, run.owner.state);
    }

    #[test]
    fn a_reused_store_is_current_or_refused(steps in prop::collection::vec(step(false), 0..40)) {
        let Run { log, zombie, counted_behind_a_fence, .. } = simulate(&steps, Faults::default());
        prop_assert!(counted_behind_a_fence.is_empty());
        let Some(zombie) = zombie else { return Ok(()) };
        let (full, _) = restore(Restore::full(), State::new(), log.entries_after(None)).unwrap();
        let reused = restore(Restore::reusing(zombie.writer.lineage()), zombie.state.clone(), log.entries_after(zombie.checkpoint));
        if let Ok((reused, _)) = reused {
            prop_assert_eq!(reused, full);
        }
    }
}

/// No writer counted a batch behind a newer owner's fence, and the restore's state against the newest owner's is equal, or (after compaction) different
/// only in keys the restore names stale and a batch that never counted wrote.
fn the_newest_owner_wins(run: &Run, compacted: bool) -> Result<(), TestCaseError> {
    prop_assert!(
        run.counted_behind_a_fence.is_empty(),
        "counted behind a newer fence: {:?}",
        run.counted_behind_a_fence
    );
    let (state, restored) = restore(Restore::full(), State::new(), run.log.entries_after(None))
        .map_err(|e| TestCaseError::fail(format!("a full restore diverged: {e}")))?;
    let stale = restored.stale_keys();
    let owner = &run.owner.state;
    if !compacted {
        prop_assert_eq!(&state, owner);
    }
    let keys: std::collections::BTreeSet<&Vec<u8>> = state.keys().chain(owner.keys()).collect();
    for key in keys {
        if state.get(key) != owner.get(key) {
            prop_assert!(
                stale.contains(key) && run.doubtful.contains(key),
                "key {:?}: restored {:?}, owner {:?}, stale {:?}, doubtful {:?}",
                key,
                state.get(key),
                owner.get(key),
                stale,
                run.doubtful
            );
        }
    }
    Ok(())
}

/// The historic fault put back: a writer that never looks between its own records keeps
/// writing and marking batches as a zombie. The properties above catch it within their budget.
#[test]
fn the_properties_catch_an_unfenced_writer() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let caught = runner.run(&prop::collection::vec(step(false), 0..40), |steps| {
        the_newest_owner_wins(&simulate(&steps, Faults { unfenced: true }), false)
    });
    assert!(caught.is_err(), "an unfenced writer went unnoticed");
}

fn write(key: &str, value: &str, epoch: Epoch, seq: u64) -> Entry {
    Entry::Write {
        key: key.as_bytes().to_vec(),
        value: Some(value.as_bytes().to_vec()),
        epoch,
        seq,
    }
}

fn replay(restore: &mut Restore, entries: Vec<Entry>) -> State {
    let mut state = State::new();
    for entry in entries {
        apply(&mut state, restore.push(entry).unwrap());
    }
    state
}

fn state_of(pairs: &[(&str, &str)]) -> State {
    pairs
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

#[test]
fn a_zombie_batch_after_the_fence_never_counts_even_when_compaction_keeps_only_its_marker() {
    // Owner 1 writes two batches; owner 8 fences while batch 3 of owner 1 is open, restores,
    // accepts batches 1..2 of epoch 1; the zombie closes batch 3 and writes batch 4.
    let log = vec![
        Entry::Fence { epoch: 1 },
        Entry::Accept { epoch: 0, through: 0 },
        write("a", "1", 1, 1),
        Entry::Marker { epoch: 1, seq: 1 },
        write("b", "1", 1, 2),
        Entry::Marker { epoch: 1, seq: 2 },
        write("c", "zombie", 1, 3),
        Entry::Fence { epoch: 8 },
        Entry::Accept { epoch: 1, through: 2 },
        Entry::Marker { epoch: 1, seq: 3 },
        write("a", "zombie", 1, 4),
        Entry::Marker { epoch: 1, seq: 4 },
        write("d", "8", 8, 1),
        Entry::Marker { epoch: 8, seq: 1 },
    ];
    let mut r = Restore::full();
    assert_eq!(
        replay(&mut r, log.clone()),
        state_of(&[("a", "1"), ("b", "1"), ("d", "8")])
    );
    assert_eq!(r.lineage(), Lineage { epoch: 8, through: 1 });
    assert_eq!(r.stale_keys(), [b"a".to_vec(), b"c".to_vec()]);
    // Compacted: epoch 1's earlier markers are gone, its last (the zombie's) survives.
    let mut compacted = Log::default();
    for entry in log {
        compacted.append(entry);
    }
    compacted.compact();
    let compacted = compacted.entries_after(None);
    assert_eq!(
        compacted.len(),
        10,
        "a, three of epoch 1's markers and none else removed"
    );
    // "a"'s only record is the zombie's: the owner's "a" is lost to compaction, and the
    // restore says so (the owner's repair writes it again).
    let mut r = Restore::full();
    assert_eq!(replay(&mut r, compacted), state_of(&[("b", "1"), ("d", "8")]));
    assert!(r.stale_keys().contains(&b"a".to_vec()));
}

#[test]
fn writes_from_before_fences_count_once_marked() {
    let mut r = Restore::full();
    let state = replay(
        &mut r,
        vec![
            write("a", "1", 0, 0),
            Entry::Marker { epoch: 0, seq: 0 },
            write("b", "unmarked", 0, 0),
        ],
    );
    assert_eq!(state, state_of(&[("a", "1")]));
    assert_eq!(r.stale_keys(), [b"b".to_vec()]);
}

#[test]
fn a_reused_store_that_wrote_after_losing_the_partition_is_refused() {
    // The store of epoch 1 applied its batches 1..3; its checkpoint is batch 3's marker.
    let reused = Lineage { epoch: 1, through: 3 };
    // Owner 5 fenced before that checkpoint: its writes appear with no fence in the range.
    let mut r = Restore::reusing(reused);
    assert_eq!(
        r.push(write("x", "5", 5, 1)),
        Err(Diverged::FencedBeforeCheckpoint { newer: 5 })
    );
    // Owner 9 fenced after it but accepted only batches 1..2: batch 3 does not count.
    let mut r = Restore::reusing(reused);
    assert_eq!(r.push(Entry::Fence { epoch: 9 }), Ok(Vec::new()));
    assert_eq!(
        r.push(Entry::Accept { epoch: 1, through: 2 }),
        Err(Diverged::AheadOfAcceptance {
            epoch: 1,
            accepted: 2,
            applied: 3
        })
    );
    // Accepted whole, the store reads on.
    let mut r = Restore::reusing(reused);
    let state = replay(
        &mut r,
        vec![
            Entry::Fence { epoch: 9 },
            Entry::Accept { epoch: 1, through: 3 },
            write("y", "9", 9, 1),
            Entry::Marker { epoch: 9, seq: 1 },
        ],
    );
    assert_eq!(state, state_of(&[("y", "9")]));
}

/// Issue 60, item 1: one record forged with a `sluice.batch` header of an epoch far ahead
/// (sixteen `~`) once made every later write of the real owner stale, rolling the partition
/// back on each full restore. No fence accounts for that epoch: it never counts, and the
/// owner's batches after it still do.
#[test]
fn a_write_whose_epoch_no_fence_accounts_for_never_counts_nor_moves_the_history() {
    let forged = i64::from_be_bytes(*b"~~~~~~~~");
    let mut r = Restore::full();
    let state = replay(
        &mut r,
        vec![
            Entry::Fence { epoch: 10 },
            write("run", "1", 10, 1),
            Entry::Marker { epoch: 10, seq: 1 },
            write("pipeline", "forged", forged, 1),
            Entry::Marker { epoch: forged, seq: 1 },
            write("run", "2", 10, 2),
            Entry::Marker { epoch: 10, seq: 2 },
        ],
    );
    assert_eq!(state, state_of(&[("run", "2")]));
    assert_eq!(r.lineage(), Lineage { epoch: 10, through: 2 });
    assert_eq!(r.unaccounted(), 2);
    // Its key is written again by the owner, with what it holds.
    assert_eq!(r.stale_keys(), [b"pipeline".to_vec()]);
    // An epoch below the real one with no fence of its own is no better.
    let mut r = Restore::full();
    let state = replay(
        &mut r,
        vec![
            Entry::Fence { epoch: 10 },
            write("x", "forged", 7, 1),
            Entry::Marker { epoch: 7, seq: 1 },
            write("x", "real", 10, 1),
            Entry::Marker { epoch: 10, seq: 1 },
        ],
    );
    assert_eq!(state, state_of(&[("x", "real")]));
}
