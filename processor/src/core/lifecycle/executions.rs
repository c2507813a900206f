//! A pipeline's executions as a decision sees them: every one (a state read whole), or a
//! state read in part (issue 62): the live executions (open, or holding a timer other than
//! their expiry) and every execution of the spans (days, or single dates) the decision is
//! likely to need ([`Span`]), and no other.
//!
//! A reading touches the one or two executions of its date; a week of hourly history is 168
//! more. Reading them all made a record's cost follow the history, and made a decoded state
//! too large for the store's cache. Read in part, a state answers every question whose answer
//! it holds: an execution loaded, or one of a span it read (then it is known to be absent),
//! the open executions (all of them are live, so loaded). A question it cannot answer (an
//! execution of a date it did not read, any execution of a day it did not read whole, a
//! scan of every execution) is answered as
//! if nothing were there and is noted ([`noting_unloaded`]); the decision is then made again
//! from the whole state. A decision that noted nothing received only the answers the whole
//! state would give, so it is the decision the whole state gives. The note is per thread and
//! per decision: a decision runs on one thread, start to end, and reads nothing else.

use std::cell::Cell;
use std::collections::BTreeSet;

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{HeldExecution, Phase, SharedMap, Span, Spans};
use crate::core::config::SCHEDULE_IDS;
use crate::core::execution::ExecutionId;

thread_local! {
    static ASKED_UNLOADED: Cell<bool> = const { Cell::new(false) };
}

pub(super) fn note_unloaded() {
    ASKED_UNLOADED.with(|asked| asked.set(true));
}

/// Runs `decide` and says whether it asked what a state read in part cannot answer (then its
/// answer may differ from the whole state's and must not be used).
pub fn noting_unloaded<T>(decide: impl FnOnce() -> T) -> (T, bool) {
    let before = ASKED_UNLOADED.with(|asked| asked.replace(false));
    let out = decide();
    let asked = ASKED_UNLOADED.with(|asked| asked.replace(before));
    (out, asked)
}

/// Executions by [`ExecutionId`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Executions {
    loaded: SharedMap<ExecutionId, HeldExecution>,
    /// `None`: every execution is loaded. `Some`: the state was read in part.
    part: Option<std::sync::Arc<Part>>,
}

/// What a state read in part holds beside its live executions.
#[derive(Debug, Clone, Default, PartialEq)]
struct Part {
    /// The spans whose executions (of every schedule) are all loaded.
    spans: Spans,
    /// Executions removed since the read: filling the state from the store must not bring
    /// them back.
    removed: BTreeSet<ExecutionId>,
    /// Executions known not to be stored: a timer armed for one is a part of its own only
    /// while it has no execution (an SLA armed before its date started).
    absent: BTreeSet<ExecutionId>,
}

impl Executions {
    pub fn new() -> Self {
        Executions::default()
    }

    /// Whether this state can say if it has execution `id`: it is loaded, or the state was
    /// read whole, or a span holding `id`'s date was.
    fn knows(&self, id: &ExecutionId) -> bool {
        match &self.part {
            None => true,
            Some(part) => self.loaded.contains_key(id) || part.knows_date_of(id) || part.absent.contains(id),
        }
    }

    /// Notes a question this state cannot answer (see [`noting_unloaded`]).
    fn ask(&self, id: &ExecutionId) {
        if !self.knows(id) {
            note_unloaded();
        }
    }

    /// Notes a question that needs every execution, when not every one is loaded.
    fn ask_all(&self) {
        if self.part.is_some() {
            note_unloaded();
        }
    }

    /// Every execution (noted when read in part).
    pub fn len(&self) -> usize {
        self.ask_all();
        self.loaded.len()
    }

    pub fn is_empty(&self) -> bool {
        if self.loaded.is_empty() {
            self.ask_all();
        }
        self.loaded.is_empty()
    }

    /// Whether the pipeline has execution `id`.
    pub fn contains_key(&self, id: &ExecutionId) -> bool {
        self.ask(id);
        self.loaded.contains_key(id)
    }

    /// Execution `id`.
    pub fn get(&self, id: &ExecutionId) -> Option<&HeldExecution> {
        self.ask(id);
        self.loaded.get(id)
    }

    /// The phase of execution `id`.
    pub fn phase(&self, id: &ExecutionId) -> Option<&Phase> {
        self.get(id).map(HeldExecution::phase)
    }

    /// Execution `id` to change.
    pub fn get_mut(&mut self, id: &ExecutionId) -> Option<&mut HeldExecution> {
        self.ask(id);
        self.loaded.get_mut(id)
    }

    /// Adds or replaces execution `id`.
    pub fn insert(&mut self, id: ExecutionId, execution: HeldExecution) -> Option<HeldExecution> {
        self.ask(&id);
        self.loaded.insert(id, execution)
    }

    /// Removes execution `id`; returns it if it was there.
    pub fn remove(&mut self, id: &ExecutionId) -> Option<HeldExecution> {
        self.ask(id);
        let removed = self.loaded.remove(id);
        if let (Some(part), Some(_)) = (&mut self.part, &removed) {
            std::sync::Arc::make_mut(part).removed.insert(id.clone());
        }
        removed
    }

    /// Every execution's id, in order (noted when read in part).
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &ExecutionId> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// Every execution's id and phase, in order of id (noted when read in part).
    pub fn phases(&self) -> impl DoubleEndedIterator<Item = (&ExecutionId, &Phase)> + '_ {
        self.iter().map(|(id, e)| (id, e.phase()))
    }

    /// Every execution, in order of id (noted when read in part).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&ExecutionId, &HeldExecution)> + '_ {
        self.ask_all();
        self.loaded.iter()
    }

    /// Every execution (see [`Executions::iter`]).
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &HeldExecution> + '_ {
        self.iter().map(|(_, e)| e)
    }

    /// The first execution (see [`Executions::iter`]).
    pub fn first_key_value(&self) -> Option<(&ExecutionId, &HeldExecution)> {
        self.iter().next()
    }

    /// The open executions (awaiting rules, a trigger or the job), in order of id: a state
    /// read in part has them all.
    pub fn open(&self) -> impl Iterator<Item = (&ExecutionId, &HeldExecution)> + '_ {
        self.loaded.iter().filter(|(_, e)| e.phase().is_open())
    }

    /// The executions of `day` under `schedule`, in order of id (noted when read in part
    /// without that day).
    pub fn on_day<'s>(
        &'s self,
        schedule: &'s str,
        day: NaiveDate,
    ) -> impl Iterator<Item = (&'s ExecutionId, &'s HeldExecution)> + 's {
        let read = |part: &Part| part.spans.has_day(day) && SCHEDULE_IDS.contains(&schedule);
        if self.part.as_deref().is_some_and(|part| !read(part)) {
            note_unloaded();
        }
        (self.loaded.iter()).filter(move |(id, _)| id.date().day == day && id.schedule() == schedule)
    }

    /// Whether some execution of `day` is kept (noted when read in part without that day).
    /// A day is read for the schedules a config can name: no other's execution is stored.
    pub fn any_of_day(&self, day: NaiveDate) -> bool {
        if self.part.as_deref().is_some_and(|part| !part.spans.has_day(day)) {
            note_unloaded();
        }
        self.loaded.keys().any(|id| id.date().day == day)
    }

    /// Whether the state was read in part.
    pub fn is_partial(&self) -> bool {
        self.part.is_some()
    }

    /// Whether every execution of `spans` is here (a state read whole has them all).
    pub fn holds(&self, spans: &[Span]) -> bool {
        self.part.as_ref().is_none_or(|part| part.spans.holds_all(spans))
    }

    /// The spans read, if read in part.
    pub fn spans_read(&self) -> Option<Vec<Span>> {
        self.part.as_ref().map(|part| part.spans.to_vec())
    }

    /// Whether the state holds (or knows it lacks) execution `id` without being asked.
    pub(crate) fn is_known(&self, id: &ExecutionId) -> bool {
        self.knows(id)
    }

    /// Keeps the executions `keep` selects and those of `spans`, as a read in part that
    /// loaded them would have them; the others are left out. Spans this state did not hold
    /// whole are not claimed. Returns the ids left out.
    pub fn read_in_part(
        &mut self,
        spans: &[Span],
        keep: impl Fn(&ExecutionId, &HeldExecution) -> bool,
    ) -> Vec<ExecutionId> {
        let spans = Spans::held(self.part.as_ref().map(|part| &part.spans), spans);
        let out: Vec<ExecutionId> = (self.loaded.iter())
            .filter(|(id, e)| !spans.covers(id.date()) && !keep(id, e))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &out {
            self.loaded.remove(id);
        }
        let removed = self.part.as_ref().map(|part| part.removed.clone()).unwrap_or_default();
        self.part = Some(std::sync::Arc::new(Part {
            spans,
            removed,
            absent: BTreeSet::new(),
        }));
        out
    }

    /// Adds what `whole` (the same executions read whole) has that this state read in part
    /// left out: those removed since stay removed. Returns the ids added; the state is whole.
    pub fn fill(&mut self, whole: &Executions) -> Vec<ExecutionId> {
        let Some(part) = self.part.take() else {
            return Vec::new();
        };
        let mut added = Vec::new();
        for (id, execution) in whole.loaded.iter() {
            if !self.loaded.contains_key(id) && !part.knows_date_of(id) && !part.removed.contains(id) {
                self.loaded.insert(id.clone(), execution.clone());
                added.push(id.clone());
            }
        }
        added
    }

    /// The loaded executions as a map, for those that lay them out (see `state::parts`).
    pub(crate) fn loaded(&self) -> &SharedMap<ExecutionId, HeldExecution> {
        &self.loaded
    }

    /// Marks the state as read in part, with every execution of `spans` loaded.
    pub(crate) fn read_spans(&mut self, spans: Spans) {
        self.part = Some(std::sync::Arc::new(Part {
            spans,
            ..Part::default()
        }));
    }

    /// Notes that the executions `ids` (those not loaded) are not stored, when read in part.
    pub(crate) fn know_absent<'i>(&mut self, ids: impl Iterator<Item = &'i ExecutionId>) {
        let Some(part) = &mut self.part else {
            return;
        };
        let absent: Vec<ExecutionId> = ids.filter(|id| !self.loaded.contains_key(*id)).cloned().collect();
        if !absent.is_empty() {
            std::sync::Arc::make_mut(part).absent.extend(absent);
        }
    }
}

impl Part {
    /// Whether every execution of `id`'s date was read: a span is read for the schedules a
    /// config can name, so an id of any other schedule is not known absent.
    fn knows_date_of(&self, id: &ExecutionId) -> bool {
        self.spans.covers(id.date()) && SCHEDULE_IDS.contains(&id.schedule())
    }
}

impl<Q: Ord + ?Sized> std::ops::Index<&Q> for Executions
where
    ExecutionId: std::borrow::Borrow<Q>,
{
    type Output = HeldExecution;

    /// # Panics
    /// If there is no loaded execution `id` (as a map's index does).
    fn index(&self, id: &Q) -> &HeldExecution {
        &self.loaded[id]
    }
}

impl FromIterator<(ExecutionId, HeldExecution)> for Executions {
    fn from_iter<I: IntoIterator<Item = (ExecutionId, HeldExecution)>>(iter: I) -> Self {
        Executions {
            loaded: iter.into_iter().collect(),
            part: None,
        }
    }
}

/// Written as the executions by id; a state read in part is never written whole (its parts
/// are written one by one, see `state::parts`).
impl Serialize for Executions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_partial() {
            return Err(serde::ser::Error::custom(
                "a state read in part cannot be written whole",
            ));
        }
        self.loaded.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Executions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Executions {
            loaded: SharedMap::deserialize(deserializer)?,
            part: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::*;
    use crate::core::lifecycle::Execution;

    fn id(date: &str) -> ExecutionId {
        ExecutionId::of("cron", date).unwrap()
    }

    fn day(date: &str) -> NaiveDate {
        date.parse().unwrap()
    }

    fn execution(date: &str, settled: bool) -> HeldExecution {
        let mut e = Execution::new(id(date), DateTime::<Utc>::UNIX_EPOCH, TimeDelta::hours(1));
        if settled {
            e.phase = Phase::Succeeded {
                at: DateTime::<Utc>::UNIX_EPOCH,
            };
        }
        e.into()
    }

    fn three() -> Executions {
        [("2026-11-21", true), ("2026-11-22", true), ("2026-11-23", false)]
            .into_iter()
            .map(|(d, settled)| (id(d), execution(d, settled)))
            .collect()
    }

    #[test]
    fn a_state_read_in_part_answers_what_it_holds_and_notes_what_it_does_not() {
        let whole = three();
        let mut part = whole.clone();
        let out = part.read_in_part(&[Span::Day(day("2026-11-22"))], |_, e| e.phase().is_open());
        assert_eq!(out, [id("2026-11-21")], "the settled execution of a day not needed");
        // What it holds, and what it knows it lacks, need nothing more.
        let asked = |f: &dyn Fn() -> bool| noting_unloaded(f);
        assert_eq!(asked(&|| part.contains_key(&id("2026-11-22"))), (true, false));
        assert_eq!(
            asked(&|| part.contains_key(&id("2026-11-22T05"))),
            (false, false),
            "its day was read"
        );
        assert_eq!(
            asked(&|| part.get(&id("2026-11-23")).is_some()),
            (true, false),
            "open: loaded"
        );
        assert_eq!(asked(&|| part.open().count() == 1), (true, false));
        assert_eq!(
            asked(&|| part.on_day("cron", day("2026-11-22")).count() == 1),
            (true, false)
        );
        // An execution of a day it did not read, or every execution, does.
        assert_eq!(asked(&|| part.contains_key(&id("2026-11-21"))), (false, true));
        assert_eq!(
            asked(&|| part.on_day("cron", day("2026-11-21")).count() == 0),
            (true, true)
        );
        assert!(asked(&|| part.keys().count() == 2).1);
        assert!(
            asked(&|| part
                .clone()
                .insert(id("2026-11-21"), execution("2026-11-21", false))
                .is_none())
            .1
        );
        assert!(asked(&|| part.clone().remove(&id("2026-11-21")).is_none()).1);
        // A day is read for the schedules a config names: another's ids are not known absent.
        assert_eq!(
            asked(&|| part.contains_key(&ExecutionId::of("daily", "2026-11-22").unwrap())),
            (false, true)
        );
        // Written whole it cannot be; filled from the whole, it is the whole again, less
        // what was removed since the read.
        assert!(serde_json::to_string(&part).is_err());
        let mut filled = part.clone();
        assert_eq!(filled.fill(&whole), [id("2026-11-21")]);
        assert_eq!(filled, whole);
        let mut removed = part.clone();
        assert!(removed.remove(&id("2026-11-22")).is_some());
        removed.fill(&whole);
        assert!(!removed.is_partial());
        assert_eq!(
            removed.loaded.keys().collect::<Vec<_>>(),
            [&id("2026-11-21"), &id("2026-11-23")]
        );
        // A second read in part claims no day the first did not read.
        let mut again = part.clone();
        again.read_in_part(&[Span::Day(day("2026-11-21")), Span::Day(day("2026-11-22"))], |_, _| {
            false
        });
        assert!(asked(&|| again.contains_key(&id("2026-11-21"))).1);
    }

    #[test]
    fn a_cache_leaves_out_only_what_a_read_in_part_would() {
        // A settled execution of an open one's date (under another schedule) is kept by a
        // read in part (the open one's date is read), so there is nothing to leave out for
        // it; a settled hour beside it is not.
        let mut state = crate::core::lifecycle::PipelineState::default();
        state
            .executions
            .insert(id("2026-11-22T06"), execution("2026-11-22T06", false));
        let other = ExecutionId::of("sensor", "2026-11-22T06").unwrap();
        state.executions.insert(other, execution("2026-11-22T06", true));
        assert!(!state.has_quiet_to_leave_out());
        assert_eq!(state.clone().leave_out_quiet(), 0);
        state
            .executions
            .insert(id("2026-11-22T05"), execution("2026-11-22T05", true));
        assert!(state.has_quiet_to_leave_out());
        assert_eq!(state.leave_out_quiet(), 1);
        assert!(!state.has_quiet_to_leave_out());
    }
}
