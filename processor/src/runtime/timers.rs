//! The in-memory index of pending timers across owned partitions, mirroring what the
//! partition stores hold. Ordered by (due, partition, pipeline, kind).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use crate::core::timers::TimerKind;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DueTimer {
    pub at: DateTime<Utc>,
    pub partition: i32,
    pub pipeline: String,
    pub kind: TimerKind,
}

#[derive(Default)]
pub struct TimerIndex {
    by_due: BTreeSet<DueTimer>,
    by_name: HashMap<(i32, String, TimerKind), DateTime<Utc>>,
}

impl TimerIndex {
    /// Sets a timer; returns the due time it replaced, if any.
    pub fn set(
        &mut self,
        partition: i32,
        pipeline: &str,
        kind: &TimerKind,
        at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let previous = self.cancel(partition, pipeline, kind);
        self.by_name.insert((partition, pipeline.to_string(), kind.clone()), at);
        self.by_due.insert(DueTimer {
            at,
            partition,
            pipeline: pipeline.to_string(),
            kind: kind.clone(),
        });
        previous
    }

    /// Removes a timer; returns its due time if it was set.
    pub fn cancel(&mut self, partition: i32, pipeline: &str, kind: &TimerKind) -> Option<DateTime<Utc>> {
        let at = self.by_name.remove(&(partition, pipeline.to_string(), kind.clone()))?;
        self.by_due.remove(&DueTimer {
            at,
            partition,
            pipeline: pipeline.to_string(),
            kind: kind.clone(),
        });
        Some(at)
    }

    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.by_due.first().map(|t| t.at)
    }

    /// Removes and returns every timer due at or before `now`, earliest first.
    pub fn pop_due(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<DueTimer> {
        let mut due = Vec::new();
        while due.len() < limit {
            match self.by_due.first() {
                Some(t) if t.at <= now => {
                    let t = self.by_due.pop_first().expect("first exists");
                    self.by_name.remove(&(t.partition, t.pipeline.clone(), t.kind.clone()));
                    due.push(t);
                }
                _ => break,
            }
        }
        due
    }

    /// Forgets the timers of a partition this instance no longer owns.
    pub fn drop_partition(&mut self, partition: i32) {
        self.by_due.retain(|t| t.partition != partition);
        self.by_name.retain(|(p, _, _), _| *p != partition);
    }

    pub fn len(&self) -> usize {
        self.by_due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(d: &str) -> TimerKind {
        TimerKind::Evaluate {
            schedule_id: "stream".into(),
            date: d.into(),
        }
    }

    #[test]
    fn setting_again_moves_and_cancel_removes() {
        let t = |s| DateTime::from_timestamp(s, 0).unwrap();
        let mut index = TimerIndex::default();
        assert_eq!(index.set(0, "a", &kind("d1"), t(30)), None);
        assert_eq!(index.set(1, "b", &kind("d1"), t(10)), None);
        assert_eq!(index.set(0, "a", &kind("d1"), t(20)), Some(t(30)));
        assert_eq!(index.len(), 2);
        assert_eq!(index.next_due(), Some(t(10)));
        let due = index.pop_due(t(25), 10);
        assert_eq!(due.iter().map(|d| d.pipeline.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        assert!(index.is_empty());
        index.set(2, "c", &kind("d2"), t(5));
        assert_eq!(index.cancel(2, "c", &kind("d2")), Some(t(5)));
        assert_eq!(index.cancel(2, "c", &kind("d2")), None);
        index.set(3, "d", &kind("d"), t(1));
        index.drop_partition(3);
        assert_eq!(index.next_due(), None);
    }
}
