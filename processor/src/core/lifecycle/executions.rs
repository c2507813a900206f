//! A pipeline's executions as a decision sees them: each one loaded, or a settled one the
//! store holds but this read left out, known by its id and phase only (issue 62).
//!
//! A reading touches the one or two executions of its date; a week of hourly history is 168
//! more. Reading them all made a record's cost follow the history, and made a decoded state
//! too large for the store's cache. A state may therefore be read with its settled
//! executions *unloaded*: present to every question that needs only ids and phases
//! ([`Executions::contains_key`], [`Executions::keys`], [`Executions::phases`]), absent
//! to one that needs an execution itself ([`Executions::get`] answers `None`).
//!
//! An answer given without an execution the store holds may be wrong, so it is noted
//! ([`noting_unloaded`]) and the decision is made again from the whole state: a decision
//! that asked for nothing unloaded is the decision the whole state gives, because every
//! answer it was given is the one the whole state gives. The note is per thread and per
//! decision: a decision runs on one thread, start to end, and reads nothing else.

use std::borrow::Borrow;
use std::cell::Cell;
use std::iter::Peekable;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{HeldExecution, Phase, SharedMap};
use crate::core::execution::ExecutionId;

thread_local! {
    static ASKED_UNLOADED: Cell<bool> = const { Cell::new(false) };
}

fn note_unloaded() {
    ASKED_UNLOADED.with(|asked| asked.set(true));
}

/// Runs `decide` and says whether it asked for an execution left unloaded (then its answer
/// may differ from the whole state's and must not be used).
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
    /// Settled executions the store holds that this read left out: their phase only.
    unloaded: SharedMap<ExecutionId, Phase>,
}

impl Executions {
    pub fn new() -> Self {
        Executions::default()
    }

    /// Every execution, loaded or not.
    pub fn len(&self) -> usize {
        self.loaded.len() + self.unloaded.len()
    }

    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty() && self.unloaded.is_empty()
    }

    /// Whether the pipeline has execution `id`, loaded or not.
    pub fn contains_key<Q: Ord + ?Sized>(&self, id: &Q) -> bool
    where
        ExecutionId: Borrow<Q>,
    {
        self.loaded.contains_key(id) || self.unloaded.contains_key(id)
    }

    /// Execution `id`. `None` for one left unloaded too, which is noted.
    pub fn get<Q: Ord + ?Sized>(&self, id: &Q) -> Option<&HeldExecution>
    where
        ExecutionId: Borrow<Q>,
    {
        self.loaded.get(id).or_else(|| self.asked(id))
    }

    /// The phase of execution `id`, loaded or not.
    pub fn phase<Q: Ord + ?Sized>(&self, id: &Q) -> Option<&Phase>
    where
        ExecutionId: Borrow<Q>,
    {
        (self.loaded.get(id).map(HeldExecution::phase)).or_else(|| self.unloaded.get(id))
    }

    /// Execution `id` to change. `None` for one left unloaded too, which is noted.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, id: &Q) -> Option<&mut HeldExecution>
    where
        ExecutionId: Borrow<Q>,
    {
        if self.loaded.contains_key(id) {
            return self.loaded.get_mut(id);
        }
        self.asked::<(), Q>(id);
        None
    }

    fn asked<T, Q: Ord + ?Sized>(&self, id: &Q) -> Option<T>
    where
        ExecutionId: Borrow<Q>,
    {
        if self.unloaded.contains_key(id) {
            note_unloaded();
        }
        None
    }

    /// Adds or replaces execution `id`; replacing one left unloaded is noted (the decision
    /// never saw what it replaced).
    pub fn insert(&mut self, id: ExecutionId, execution: HeldExecution) -> Option<HeldExecution> {
        if self.unloaded.remove(&id).is_some() {
            note_unloaded();
        }
        self.loaded.insert(id, execution)
    }

    /// Removes execution `id`, loaded or not (removing needs no more than its id); returns
    /// it if it was loaded.
    pub fn remove<Q: Ord + ?Sized>(&mut self, id: &Q) -> Option<HeldExecution>
    where
        ExecutionId: Borrow<Q>,
    {
        self.unloaded.remove(id);
        self.loaded.remove(id)
    }

    /// Every execution's id, loaded or not, in order.
    pub fn keys(&self) -> impl Iterator<Item = &ExecutionId> + '_ {
        self.phases().map(|(id, _)| id)
    }

    /// Every execution's id and phase, loaded or not, in order of id.
    pub fn phases(&self) -> impl Iterator<Item = (&ExecutionId, &Phase)> + '_ {
        Merged {
            loaded: self.loaded.iter().map(|(id, e)| (id, e.phase())).peekable(),
            unloaded: self.unloaded.iter().peekable(),
        }
    }

    /// The loaded executions, in order of id. A scan of the executions themselves cannot
    /// see those left unloaded: that is noted when there are any.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&ExecutionId, &HeldExecution)> + '_ {
        if !self.unloaded.is_empty() {
            note_unloaded();
        }
        self.loaded.iter()
    }

    /// The loaded executions (see [`Executions::iter`]).
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &HeldExecution> + '_ {
        self.iter().map(|(_, e)| e)
    }

    /// The first loaded execution (see [`Executions::iter`]).
    pub fn first_key_value(&self) -> Option<(&ExecutionId, &HeldExecution)> {
        self.iter().next()
    }

    /// Leaves settled execution `id` out, keeping its id and phase: as a read that did not
    /// load it would have it. Returns whether it was loaded and settled.
    pub fn unload(&mut self, id: &ExecutionId) -> bool {
        let Some(phase) = (self.loaded.get(id))
            .map(|e| e.phase().clone())
            .filter(|p| !p.is_open())
        else {
            return false;
        };
        self.loaded.remove(id);
        self.unloaded.insert(id.clone(), phase);
        true
    }

    /// Loads what was left unloaded from `whole`, the same executions read whole (those the
    /// decision removed stay removed; one `whole` lacks stays unloaded).
    pub fn fill(&mut self, whole: &Executions) {
        let ids: Vec<ExecutionId> = self.unloaded.keys().cloned().collect();
        for id in ids {
            if let Some(execution) = whole.loaded.get(&id) {
                self.unloaded.remove(&id);
                self.loaded.insert(id, execution.clone());
            }
        }
    }

    /// Whether execution `id` was left unloaded.
    pub fn is_unloaded(&self, id: &ExecutionId) -> bool {
        self.unloaded.contains_key(id)
    }

    /// Whether some execution was left unloaded.
    pub fn is_partial(&self) -> bool {
        !self.unloaded.is_empty()
    }

    /// The loaded executions as a map, for those that lay them out (see `state::parts`).
    pub(crate) fn loaded(&self) -> &SharedMap<ExecutionId, HeldExecution> {
        &self.loaded
    }

    /// The ids of executions left unloaded in `self` that `after` no longer has: their
    /// parts are deleted.
    pub(crate) fn unloaded_removed<'s>(&'s self, after: &'s Executions) -> impl Iterator<Item = &'s ExecutionId> + 's {
        (self.unloaded.keys()).filter(|id| !after.contains_key(*id))
    }
}

impl<Q: Ord + ?Sized> std::ops::Index<&Q> for Executions
where
    ExecutionId: Borrow<Q>,
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
            unloaded: SharedMap::new(),
        }
    }
}

/// Two maps' entries in order of id (their ids never overlap).
struct Merged<L: Iterator, U: Iterator> {
    loaded: Peekable<L>,
    unloaded: Peekable<U>,
}

impl<'m, L, U> Iterator for Merged<L, U>
where
    L: Iterator<Item = (&'m ExecutionId, &'m Phase)>,
    U: Iterator<Item = L::Item>,
{
    type Item = L::Item;

    fn next(&mut self) -> Option<Self::Item> {
        match (self.loaded.peek(), self.unloaded.peek()) {
            (Some((a, _)), Some((b, _))) if b < a => self.unloaded.next(),
            (Some(_), _) => self.loaded.next(),
            (None, _) => self.unloaded.next(),
        }
    }
}

/// Written as the loaded executions by id; a state with executions left unloaded is never
/// written whole (its parts are written one by one, see `state::parts`).
impl Serialize for Executions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_partial() {
            return Err(serde::ser::Error::custom(
                "a state read without its settled executions cannot be written whole",
            ));
        }
        self.loaded.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Executions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Executions {
            loaded: SharedMap::deserialize(deserializer)?,
            unloaded: SharedMap::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::*;
    use crate::core::lifecycle::Execution;

    fn id(date: &str) -> ExecutionId {
        ExecutionId::of("daily", date).unwrap()
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
    fn an_unloaded_execution_is_there_by_id_and_phase_and_asking_for_it_is_noted() {
        let whole = three();
        let mut part = whole.clone();
        assert!(part.unload(&id("2026-11-22")));
        assert!(!part.unload(&id("2026-11-23")), "an open execution stays loaded");
        let ids: Vec<_> = part.keys().map(|i| i.to_string()).collect();
        assert_eq!(
            ids,
            ["daily/2026-11-21", "daily/2026-11-22", "daily/2026-11-23"],
            "in order of id"
        );
        assert_eq!(part.len(), 3);
        assert!(part.contains_key(&id("2026-11-22")));
        let phases: Vec<bool> = part.phases().map(|(_, p)| p.is_open()).collect();
        assert_eq!(phases, [false, false, true]);
        assert!(part.phase(&id("2026-11-22")).is_some_and(|p| !p.is_open()));
        // Ids and phases need nothing unloaded.
        assert!(!noting_unloaded(|| part.keys().count() + part.phases().count()).1);
        assert!(!noting_unloaded(|| part.get(&id("2026-11-21")).is_some()).1);
        // The execution itself, or a scan of all of them, does.
        assert_eq!(noting_unloaded(|| part.get(&id("2026-11-22")).is_none()), (true, true));
        assert!(noting_unloaded(|| part.values().count()).1);
        assert!(noting_unloaded(|| part.clone().insert(id("2026-11-22"), execution("2026-11-22", false))).1);
        // Written whole it cannot be; filled from the whole, it is the whole again.
        assert!(serde_json::to_string(&part).is_err());
        let mut filled = part.clone();
        filled.fill(&whole);
        assert_eq!(filled, whole);
        // Removed without being loaded: the part is deleted.
        let mut after = part.clone();
        assert!(after.remove(&id("2026-11-22")).is_none());
        let removed: Vec<_> = part.unloaded_removed(&after).collect();
        assert_eq!(removed, [&id("2026-11-22")]);
    }
}
