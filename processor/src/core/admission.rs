//! Which input records a batch applies: the first of the partition runtime's rules, kept
//! here (pure, unit-tested) rather than in the loop that reads the records.
//!
//! A record is applied once. Its partition must still be this instance's (revoked since it
//! was fetched, or given up to a newer owner, it is that owner's) and open (while its store
//! is being opened, the record is read again once it is). A record at or below the offset
//! already applied, durably or earlier in the same batch, is a redelivery: committed, never
//! applied again. But a partition's offsets only go forward while it is read: a record at
//! or below one already delivered since the partition was opened means the topic was
//! recreated (or truncated) under the running processor, and its new records would be
//! taken for redeliveries and never applied; that stops the processor.

/// What a record's partition looks like when the record is delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Partition {
    /// The consumer still holds the partition.
    pub assigned: bool,
    /// Given up to a newer owner (its changelog was fenced).
    pub abandoned: bool,
    /// Its store is open; otherwise it is being opened.
    pub open: bool,
    /// The highest offset of the record's topic the store has applied.
    pub applied: Option<i64>,
    /// The highest offset of the record's topic seen earlier in this batch.
    pub seen_in_batch: Option<i64>,
    /// The highest offset of the record's topic delivered since the partition was opened.
    pub delivered: Option<i64>,
}

/// What becomes of a delivered record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Revoked since it was fetched: left to the new owner, not committed here.
    NotAssigned,
    /// Given up to a newer owner: left to it.
    GivenUp,
    /// Its partition is being opened: read again once it is.
    ReadAgainWhenOpen,
    /// At or below what was applied: committed, not applied again.
    AlreadyApplied,
    /// Applied; its offset becomes the applied one.
    Apply,
    /// The offsets went back (from the one named): the topic was recreated or truncated
    /// while it was read. Nothing more of it may be applied or committed.
    WentBack { from: i64 },
}

impl Admission {
    /// Whether the record's offset is committed with the batch.
    pub fn commits(self) -> bool {
        matches!(self, Admission::AlreadyApplied | Admission::Apply)
    }
}

/// What becomes of the record at `offset` of a partition that looks like `partition`.
pub fn admit(partition: &Partition, offset: i64) -> Admission {
    if !partition.assigned {
        return Admission::NotAssigned;
    }
    if partition.abandoned {
        return Admission::GivenUp;
    }
    if !partition.open {
        return Admission::ReadAgainWhenOpen;
    }
    let done = partition.applied.max(partition.seen_in_batch);
    // Only what would be skipped as applied is at stake; a record read again after a seek
    // (one skipped while its partition opened) was never applied.
    let skipped = done.is_some_and(|done| offset <= done);
    if let Some(from) = partition.delivered.filter(|d| offset <= *d && skipped) {
        return Admission::WentBack { from };
    }
    match done.is_some_and(|done| offset <= done) {
        true => Admission::AlreadyApplied,
        false => Admission::Apply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(applied: Option<i64>, seen_in_batch: Option<i64>) -> Partition {
        Partition {
            assigned: true,
            abandoned: false,
            open: true,
            applied,
            seen_in_batch,
            delivered: None,
        }
    }

    /// After a restart the first records delivered may be at or below the applied offset
    /// (the commit lagged): redeliveries. Once read on, a record at or below one delivered
    /// before is the topic starting over: recreated while it ran.
    #[test]
    fn offsets_that_go_back_while_a_partition_is_read_stop_it() {
        let mut p = open(Some(60), None);
        assert_eq!(admit(&p, 50), Admission::AlreadyApplied, "a redelivery after a restart");
        p.delivered = Some(50);
        assert_eq!(admit(&p, 51), Admission::AlreadyApplied);
        p.delivered = Some(61);
        assert_eq!(admit(&p, 62), Admission::Apply);
        p.applied = Some(62);
        p.delivered = Some(62);
        // The topic recreated: offset 0 again, below the old applied offset.
        assert_eq!(admit(&p, 0), Admission::WentBack { from: 62 });
        assert_eq!(admit(&p, 62), Admission::WentBack { from: 62 });
        assert!(!Admission::WentBack { from: 62 }.commits());
        // Read again after a seek, records never applied are applied as ever.
        let mut reread = open(Some(40), None);
        reread.delivered = Some(70);
        assert_eq!(admit(&reread, 41), Admission::Apply);
    }

    #[test]
    fn a_record_past_the_applied_offset_is_applied_once() {
        assert_eq!(admit(&open(None, None), 0), Admission::Apply);
        assert_eq!(admit(&open(Some(41), None), 42), Admission::Apply);
        assert!(Admission::Apply.commits());
    }

    #[test]
    fn a_redelivery_after_a_crash_is_committed_but_not_applied_again() {
        for offset in [0, 41, 42] {
            assert_eq!(admit(&open(Some(42), None), offset), Admission::AlreadyApplied);
        }
        assert!(Admission::AlreadyApplied.commits());
    }

    #[test]
    fn a_record_delivered_twice_in_one_batch_is_applied_once() {
        assert_eq!(admit(&open(Some(10), Some(15)), 15), Admission::AlreadyApplied);
        assert_eq!(admit(&open(Some(10), Some(15)), 12), Admission::AlreadyApplied);
        assert_eq!(admit(&open(None, Some(3)), 4), Admission::Apply);
    }

    #[test]
    fn a_partition_revoked_given_up_or_opening_applies_nothing_and_commits_nothing() {
        let revoked = Partition {
            assigned: false,
            ..open(None, None)
        };
        let given_up = Partition {
            abandoned: true,
            ..open(None, None)
        };
        let opening = Partition {
            open: false,
            ..open(None, None)
        };
        assert_eq!(admit(&revoked, 7), Admission::NotAssigned);
        assert_eq!(admit(&given_up, 7), Admission::GivenUp);
        assert_eq!(admit(&opening, 7), Admission::ReadAgainWhenOpen);
        for admission in [Admission::NotAssigned, Admission::GivenUp, Admission::ReadAgainWhenOpen] {
            assert!(!admission.commits(), "{admission:?}");
        }
        // Revocation wins over everything else: the record is the new owner's.
        let both = Partition {
            assigned: false,
            abandoned: true,
            open: false,
            ..open(None, None)
        };
        assert_eq!(admit(&both, 7), Admission::NotAssigned);
    }
}
