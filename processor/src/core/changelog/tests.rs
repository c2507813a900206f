//! The changelog rules over a simulated log: owners taking over, zombies writing on, crashes
//! mid-batch and compaction, in random interleavings (proptest). tansu neither compacts nor
//! fences, so this is where those faults are shown.

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

/// A writer of the partition: the owner, or a zombie that has not noticed it lost it.
#[derive(Debug, Clone)]
struct Writer {
    epoch: Epoch,
    seq: u64,
    state: State,
    /// The offset of its last marker: where its store's checkpoint stands.
    checkpoint: Option<usize>,
    /// The offset of its last record: a record of another writer after it shows up as a
    /// gap in its own offsets (see `Processor::check_changelog_gaps`).
    last: usize,
    crashed: bool,
}

impl Writer {
    fn lineage(&self) -> Lineage {
        Lineage {
            epoch: self.epoch,
            through: self.seq,
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// A new owner fences, restores and accepts; the old owner lives on as a zombie.
    TakeOver,
    /// A batch by the owner (`zombie` false) or the zombie, of these writes; `crash` leaves
    /// it without its marker (and the writer dead).
    Batch {
        zombie: bool,
        writes: Vec<(u8, Option<u8>)>,
        crash: bool,
        /// A zombie's marker goes out before it sees the newer fence (the fence landed
        /// between its writes and its marker).
        marked_anyway: bool,
    },
    Compact,
}

fn step(compaction: bool) -> impl Strategy<Value = Step> {
    let write = (0u8..5, prop::option::weighted(0.8, 0u8..50));
    let batch = (
        any::<bool>(),
        prop::collection::vec(write, 1..4),
        prop::bool::weighted(0.15),
        any::<bool>(),
    )
        .prop_map(|(zombie, writes, crash, marked_anyway)| Step::Batch {
            zombie,
            writes,
            crash,
            marked_anyway,
        });
    let compact_weight = if compaction { 2 } else { 0 };
    prop_oneof![2 => Just(Step::TakeOver), 8 => batch, compact_weight => Just(Step::Compact)]
}

/// What a run of steps left: the log, the newest owner, the zombie (if any), and the keys
/// written by batches that never got their marker (crashed or fenced): the only writes that
/// do not count.
struct Run {
    log: Log,
    owner: Writer,
    zombie: Option<Writer>,
    doubtful: std::collections::BTreeSet<Vec<u8>>,
}

/// Runs the steps.
fn simulate(steps: &[Step]) -> Run {
    let mut doubtful = std::collections::BTreeSet::new();
    let mut log = Log::default();
    let mut owner = take_over(&mut log);
    let mut zombie: Option<Writer> = None;
    for s in steps {
        match s {
            Step::TakeOver => {
                let next = take_over(&mut log);
                zombie = Some(std::mem::replace(&mut owner, next)).filter(|w| !w.crashed);
            }
            Step::Compact => log.compact(),
            Step::Batch {
                zombie: z,
                writes,
                crash,
                marked_anyway,
            } => {
                let writer = match (z, zombie.as_mut()) {
                    (true, Some(w)) => w,
                    _ => &mut owner,
                };
                if writer.crashed {
                    continue;
                }
                // A newer owner's fence among the records since this writer's last one: it
                // sees the gap in its offsets, finds the fence, and stops before its marker
                // and its store write, giving the partition up (its store is not reused).
                let fenced = log
                    .records
                    .iter()
                    .any(|(o, _, e)| *o > writer.last && matches!(e, Entry::Fence { epoch } if *epoch > writer.epoch));
                writer.seq += 1;
                for (k, v) in writes {
                    writer.last = log.append(Entry::Write {
                        key: vec![*k],
                        value: v.map(|v| vec![v]),
                        epoch: writer.epoch,
                        seq: writer.seq,
                    });
                }
                if *crash || fenced {
                    writer.crashed = true;
                    doubtful.extend(writes.iter().map(|(k, _)| vec![*k]));
                    if fenced && *marked_anyway {
                        log.append(Entry::Marker {
                            epoch: writer.epoch,
                            seq: writer.seq,
                        });
                    }
                } else {
                    let at = log.append(Entry::Marker {
                        epoch: writer.epoch,
                        seq: writer.seq,
                    });
                    writer.checkpoint = Some(at);
                    writer.last = at;
                    apply(
                        &mut writer.state,
                        writes.iter().map(|(k, v)| (vec![*k], v.map(|v| vec![v]))).collect(),
                    );
                }
            }
        }
    }
    Run {
        log,
        owner,
        zombie,
        doubtful,
    }
}

/// A new owner: fence, restore everything before the fence, accept what it restored.
fn take_over(log: &mut Log) -> Writer {
    let fence = log.next;
    let epoch = fence as Epoch + 1;
    let before = log.entries_after(None);
    log.append(Entry::Fence { epoch });
    let (state, restored) = restore(Restore::full(), State::new(), before).expect("a full restore never diverges");
    let lineage = restored.lineage();
    // The new store is current through its acceptance.
    let accepted = log.append(Entry::Accept {
        epoch: lineage.epoch,
        through: lineage.through,
    });
    Writer {
        epoch,
        seq: 0,
        state,
        checkpoint: Some(accepted),
        last: accepted,
        crashed: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Without compaction, a restore from the beginning yields exactly the newest owner's
    /// state, whatever zombies and crashes wrote.
    #[test]
    fn a_restore_yields_the_newest_owners_state(steps in prop::collection::vec(step(false), 0..40)) {
        let run = simulate(&steps);
        let (state, restored) = restore(Restore::full(), State::new(), run.log.entries_after(None)).unwrap();
        prop_assert_eq!(state, run.owner.state);
        let stale: std::collections::BTreeSet<Vec<u8>> = restored.stale_keys().into_iter().collect();
        prop_assert!(stale.is_subset(&run.doubtful), "stale {:?}, doubtful {:?}", stale, run.doubtful);
    }

    /// With compaction anywhere, a key can differ from the newest owner's state only when a
    /// zombie or a crashed batch wrote it, and then the restore names it stale (the owner
    /// writes it again with its value).
    #[test]
    fn after_compaction_only_keys_named_stale_can_differ(steps in prop::collection::vec(step(true), 0..40)) {
        let run = simulate(&steps);
        let (state, restored) = restore(Restore::full(), State::new(), run.log.entries_after(None)).unwrap();
        let stale = restored.stale_keys();
        let owner = &run.owner.state;
        let keys: std::collections::BTreeSet<&Vec<u8>> = state.keys().chain(owner.keys()).collect();
        for key in keys {
            if state.get(key) != owner.get(key) {
                prop_assert!(
                    stale.contains(key) && run.doubtful.contains(key),
                    "key {:?}: restored {:?}, owner {:?}, stale {:?}, doubtful {:?}",
                    key, state.get(key), owner.get(key), stale, run.doubtful
                );
            }
        }
    }

    /// A zombie's store (one that gave nothing up, having seen no newer fence) read on from
    /// its checkpoint is either refused or brought to exactly what a full restore gives.
    #[test]
    fn a_reused_store_is_current_or_refused(steps in prop::collection::vec(step(false), 0..40)) {
        let Run { log, zombie, .. } = simulate(&steps);
        let Some(zombie) = zombie else { return Ok(()) };
        let (full, _) = restore(Restore::full(), State::new(), log.entries_after(None)).unwrap();
        let reused = restore(Restore::reusing(zombie.lineage()), zombie.state.clone(), log.entries_after(zombie.checkpoint));
        if let Ok((reused, _)) = reused {
            prop_assert_eq!(reused, full);
        }
    }
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

#[test]
fn foreign_ranges_are_the_holes_in_a_writers_own_offsets() {
    assert_eq!(foreign_ranges(10, &[10, 11, 12]), (vec![], 13));
    assert_eq!(foreign_ranges(10, &[12, 11, 15]), (vec![10..11, 13..15], 16));
    assert_eq!(foreign_ranges(10, &[]), (vec![], 10));
}

#[test]
fn another_writers_records_are_a_fence_or_writes_to_repair() {
    let own = 5;
    assert_eq!(
        foreign_writes(&[write("a", "x", 3, 1), Entry::Fence { epoch: 9 }], own),
        Foreign::Fenced,
        "a newer fence makes this owner a zombie"
    );
    assert_eq!(
        foreign_writes(
            &[
                Entry::Fence { epoch: 2 },
                write("b", "x", 3, 1),
                write("a", "x", 3, 1),
                write("b", "y", 3, 2),
                write("own", "retried", own, 4),
                Entry::Marker { epoch: 3, seq: 2 },
            ],
            own
        ),
        Foreign::Stale(vec![b"a".to_vec(), b"b".to_vec()]),
        "an older writer's keys, each once; this owner's own retried write needs nothing"
    );
}
