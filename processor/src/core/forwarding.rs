//! Records that reached the wrong partition, forwarded to their key's partition.
//!
//! librdkafka-based producers (confluent-kafka for Python, Go and .NET, kcat) hash keys with
//! CRC32 by default, not the Java client's murmur2, so most of their keys land on another
//! partition than the one whose task owns the pipeline. The task that reads such a record
//! produces a copy to the key's partition of the same topic (as Kafka Streams repartitions),
//! marked with where it came from ([`Forwarded`]); the owner applies the copy.
//!
//! A copy can arrive twice: the reading task produces a batch's outputs, and only then
//! writes its state (the applied offsets among it); a crash between the two makes the next
//! owner read the same records again and forward them again. Each copy therefore carries the
//! reading task's *durable* offset: the applied offset its store held when the batch began,
//! below which no record is ever read again. The owner keeps, per (topic, reading
//! partition), the highest durable offset it has seen and the offsets it applied above it
//! ([`ForwardWindow`]): a copy at or below the durable offset, or already among those
//! applied, is a duplicate and changes nothing. Copies of one batch may land in any order
//! (a failed send is retried alone), but every copy of a batch lands before the next batch
//! is produced, so a record whose batch became durable has always landed before a copy that
//! says so.
//!
//! Anyone who may write an input topic can also write a `sluice.forwarded` header, and one
//! forged durable offset far ahead would make every later copy from that partition look
//! applied before. So a mark is checked before it is believed ([`Implausible`]): it must name
//! another partition of the topic, a durable offset below its offset, and an offset below
//! that partition's end (its high watermark, looked up after the copy was fetched: a genuine
//! copy's record was read there before it was forwarded). A mark that fails is bad input, and
//! its record a dead letter with the reason. What is left is bounded: a forged mark can still
//! name a durable offset below the named partition's end, hiding copies of records there that
//! the reading task has not forwarded yet (it is behind the end).

use std::collections::BTreeSet;

use super::partitioning::PartitionId;

/// Where a forwarded copy came from: the partition and offset it was read at, and the
/// reading task's durable offset then (-1: none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarded {
    pub partition: PartitionId,
    pub offset: i64,
    pub durable: i64,
}

/// The record header that marks a forwarded copy.
pub const HEADER: &str = "sluice.forwarded";

/// Why a mark cannot be Sluice's: its record is rejected rather than let move a window.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Implausible {
    #[error("header sluice.forwarded is not PARTITION:OFFSET:DURABLE (offsets from 0, durable from -1)")]
    Malformed,
    #[error("header sluice.forwarded names partition {partition}, but the topic has {partitions}")]
    NoSuchPartition { partition: PartitionId, partitions: i32 },
    #[error("header sluice.forwarded names partition {0}, the one the record is on: Sluice forwards only to another")]
    SamePartition(PartitionId),
    #[error("header sluice.forwarded names durable offset {durable}, not below its offset {offset}")]
    DurableNotBelow { offset: i64, durable: i64 },
    #[error("header sluice.forwarded names offset {offset} of partition {partition}, which ends at {end}: no record there can have been read yet")]
    BeyondEnd {
        partition: PartitionId,
        offset: i64,
        end: i64,
    },
}

impl Forwarded {
    /// The header's value: `partition:offset:durable`.
    pub fn header_value(&self) -> String {
        format!("{}:{}:{}", self.partition, self.offset, self.durable)
    }

    /// A header's value as a mark, checked for what needs nothing else to know.
    pub fn parse(value: &[u8]) -> Result<Forwarded, Implausible> {
        let text = std::str::from_utf8(value).map_err(|_| Implausible::Malformed)?;
        let parts: Vec<&str> = text.split(':').collect();
        let [partition, offset, durable] = parts[..] else {
            return Err(Implausible::Malformed);
        };
        let number = |part: &str| part.parse::<i64>().map_err(|_| Implausible::Malformed);
        let (partition, offset, durable) = (number(partition)?, number(offset)?, number(durable)?);
        if offset < 0 || durable < -1 {
            return Err(Implausible::Malformed);
        }
        let partition = PartitionId::new(i32::try_from(partition).map_err(|_| Implausible::Malformed)?);
        if durable >= offset {
            return Err(Implausible::DurableNotBelow { offset, durable });
        }
        Ok(Forwarded {
            partition,
            offset,
            durable,
        })
    }

    /// Whether a copy on partition `arrived_on` of a topic of `partitions` can have come from
    /// where the mark says.
    pub fn check(&self, arrived_on: PartitionId, partitions: i32) -> Result<(), Implausible> {
        if !(0..partitions).contains(&self.partition.number()) {
            return Err(Implausible::NoSuchPartition {
                partition: self.partition,
                partitions,
            });
        }
        if self.partition == arrived_on {
            return Err(Implausible::SamePartition(arrived_on));
        }
        Ok(())
    }

    /// Whether the named partition, ending at `end` (its high watermark, looked up after the
    /// copy was fetched), can have held the record: a task reads only below the end.
    pub fn check_end(&self, end: i64) -> Result<(), Implausible> {
        match self.offset < end {
            true => Ok(()),
            false => Err(Implausible::BeyondEnd {
                partition: self.partition,
                offset: self.offset,
                end,
            }),
        }
    }
}

/// What an owner has applied of the copies forwarded from one partition of one topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardWindow {
    /// The highest durable offset of the reading task seen so far (-1: none).
    durable: i64,
    /// Offsets above `durable` whose copies were applied.
    applied: BTreeSet<i64>,
}

impl ForwardWindow {
    /// Whether `copy` moves the window's durable offset on (so the window changes even when
    /// the copy is a duplicate).
    pub fn advances(&self, copy: &Forwarded) -> bool {
        copy.durable > self.durable
    }

    /// Whether the copy is new (apply it) or a duplicate (skip it). Either way the window
    /// learns from it.
    pub fn admit(&mut self, copy: &Forwarded) -> bool {
        if copy.durable > self.durable {
            self.durable = copy.durable;
            self.applied = self.applied.split_off(&(copy.durable + 1));
        }
        copy.offset > self.durable && self.applied.insert(copy.offset)
    }

    /// The stored form: the durable offset, then each applied offset, 8 bytes each.
    pub fn encode(&self) -> Vec<u8> {
        std::iter::once(self.durable)
            .chain(self.applied.iter().copied())
            .flat_map(i64::to_be_bytes)
            .collect()
    }

    /// `None` when `bytes` is not a stored window.
    pub fn decode(bytes: &[u8]) -> Option<ForwardWindow> {
        if bytes.is_empty() || !bytes.len().is_multiple_of(8) {
            return None;
        }
        let mut offsets = bytes
            .chunks_exact(8)
            .map(|c| i64::from_be_bytes(c.try_into().expect("8 bytes")));
        Some(ForwardWindow {
            durable: offsets.next()?,
            applied: offsets.collect(),
        })
    }

    /// A window that has seen nothing yet.
    pub fn empty() -> ForwardWindow {
        ForwardWindow {
            durable: -1,
            applied: BTreeSet::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_header_round_trips_and_nonsense_is_not_a_copy() {
        let f = Forwarded {
            partition: PartitionId::new(2),
            offset: 41,
            durable: 39,
        };
        assert_eq!(Forwarded::parse(f.header_value().as_bytes()), Ok(f));
        for bad in [
            "",
            "2:41",
            "2:41:39:1",
            "x:41:39",
            "2:-1:-2",
            "2:5:-2",
            "9999999999:5:1",
        ] {
            assert_eq!(Forwarded::parse(bad.as_bytes()), Err(Implausible::Malformed), "{bad}");
        }
        assert_eq!(
            Forwarded::parse(b"2:41:41"),
            Err(Implausible::DurableNotBelow {
                offset: 41,
                durable: 41
            })
        );
    }

    #[test]
    fn a_mark_must_name_another_partition_of_the_topic_and_an_offset_read_there() {
        let mark = |partition| Forwarded {
            partition: PartitionId::new(partition),
            offset: 41,
            durable: 39,
        };
        let p0 = PartitionId::new(0);
        assert_eq!(mark(2).check(p0, 3), Ok(()));
        assert_eq!(mark(0).check(p0, 3), Err(Implausible::SamePartition(p0)));
        for partition in [3, -1] {
            assert_eq!(
                mark(partition).check(p0, 3),
                Err(Implausible::NoSuchPartition {
                    partition: PartitionId::new(partition),
                    partitions: 3
                })
            );
        }
        assert_eq!(mark(2).check_end(42), Ok(()), "offset 41 is the last record");
        assert_eq!(
            mark(2).check_end(41),
            Err(Implausible::BeyondEnd {
                partition: PartitionId::new(2),
                offset: 41,
                end: 41
            })
        );
    }

    #[test]
    fn a_duplicate_changes_the_window_only_when_it_advances_the_durable_offset() {
        let copy = |offset, durable| Forwarded {
            partition: PartitionId::new(0),
            offset,
            durable,
        };
        let mut w = ForwardWindow::empty();
        assert!(w.admit(&copy(5, -1)));
        let before = w.clone();
        assert!(!w.advances(&copy(5, -1)));
        assert!(!w.admit(&copy(5, -1)));
        assert_eq!(w, before, "a plain duplicate teaches nothing");
        assert!(w.advances(&copy(5, 5)));
        assert!(!w.admit(&copy(5, 5)));
        assert_ne!(
            w, before,
            "a re-sent copy with a later durable offset moves the window on"
        );
    }

    #[test]
    fn a_window_survives_its_stored_form() {
        let mut w = ForwardWindow::empty();
        for (offset, durable) in [(5, -1), (7, -1), (9, 5)] {
            assert!(w.admit(&Forwarded {
                partition: PartitionId::new(0),
                offset,
                durable
            }));
        }
        assert_eq!(ForwardWindow::decode(&w.encode()), Some(w.clone()));
        assert_eq!(ForwardWindow::decode(&[1, 2, 3]), None);
        // Only what is above the durable offset is kept.
        assert_eq!(w.encode().len(), 8 * 3);
    }

    /// One reading partition's records, `misrouted[i]` telling whether record `i` belongs
    /// on the owner's partition; batches of the sizes given; a crash after the batch given by
    /// `crashes` has produced (some of) its copies but before its state is written.
    #[derive(Debug, Clone)]
    struct Run {
        misrouted: Vec<bool>,
        batch_sizes: Vec<usize>,
        /// Per batch attempt: crash (and how many of its copies landed first), or not.
        crashes: Vec<Option<usize>>,
        /// Per batch attempt: the order its copies land in (a permutation seed).
        shuffles: Vec<u64>,
    }

    fn runs() -> impl Strategy<Value = Run> {
        (
            prop::collection::vec(any::<bool>(), 1..60),
            prop::collection::vec(1usize..12, 1..40),
            prop::collection::vec(prop::option::weighted(0.3, 0usize..12), 1..40),
            prop::collection::vec(any::<u64>(), 1..40),
        )
            .prop_map(|(misrouted, batch_sizes, crashes, shuffles)| Run {
                misrouted,
                batch_sizes,
                crashes,
                shuffles,
            })
    }

    /// The reading task and the owner over a simulated log: the owner applies each
    /// misrouted record exactly once, however often the reading task crashes and forwards
    /// again, and in whatever order a batch's copies land.
    fn simulate(run: &Run) -> (Vec<i64>, Vec<i64>) {
        let mut durable: i64 = -1;
        let mut landed: Vec<Forwarded> = Vec::new();
        let mut attempt = 0;
        while durable + 1 < run.misrouted.len() as i64 {
            let size = run.batch_sizes[attempt % run.batch_sizes.len()];
            let start = durable + 1;
            let end = (start + size as i64).min(run.misrouted.len() as i64);
            let mut copies: Vec<Forwarded> = (start..end)
                .filter(|o| run.misrouted[*o as usize])
                .map(|offset| Forwarded {
                    partition: PartitionId::new(1),
                    offset,
                    durable,
                })
                .collect();
            // Retried sends reorder a batch's copies.
            let mut seed = run.shuffles[attempt % run.shuffles.len()];
            for i in (1..copies.len()).rev() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                copies.swap(i, (seed >> 33) as usize % (i + 1));
            }
            match run.crashes[attempt % run.crashes.len()] {
                // Some copies landed, the state was not written: the batch is read again.
                Some(landed_first) if attempt < 200 => {
                    landed.extend(copies.into_iter().take(landed_first));
                }
                _ => {
                    landed.extend(copies);
                    durable = end - 1;
                }
            }
            attempt += 1;
        }
        let mut window = ForwardWindow::empty();
        let mut applied: Vec<i64> = Vec::new();
        for copy in &landed {
            // The owner's window survives its own restarts as stored bytes.
            window = ForwardWindow::decode(&window.encode()).unwrap();
            if window.admit(copy) {
                applied.push(copy.offset);
            }
        }
        let expected = (0..run.misrouted.len() as i64)
            .filter(|o| run.misrouted[*o as usize])
            .collect();
        applied.sort();
        (applied, expected)
    }

    proptest! {
        #[test]
        fn every_forwarded_record_is_applied_once_through_crashes_and_reordering(run in runs()) {
            let (applied, expected) = simulate(&run);
            prop_assert_eq!(applied, expected);
        }
    }

    #[test]
    fn a_copy_sent_again_after_a_crash_changes_nothing() {
        let run = Run {
            misrouted: vec![true, false, true, true, false, true],
            batch_sizes: vec![4, 6],
            // The first batch crashes after all three copies landed.
            crashes: vec![Some(3), None],
            shuffles: vec![1, 2],
        };
        let (applied, expected) = simulate(&run);
        assert_eq!(applied, expected);
        assert_eq!(applied, [0, 2, 3, 5]);
    }
}
