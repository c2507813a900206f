//! A pipeline's sensor readings as a decision sees them: every one (a state read whole), or a
//! state read in part (issue 62): its undated readings, those scoped to the spans (days, or
//! single dates) the decision is likely to need (see [`super::Needs`]), and each key's
//! latest, and no other.
//!
//! A producer that scopes its readings to an execution's date or hour leaves one slot per
//! key and date; a week of hourly history is 168 slots a key, and decoding them all made a
//! reading's cost follow the history, as decoding every execution did (see
//! [`super::Executions`], whose rules this follows). Read in part, the readings answer every
//! question whose answer they hold:
//! - a slot loaded, or one a read would have loaded (its name is undated, or scoped to a
//!   date a span read holds): then it is known to be absent;
//! - a key's latest reading (the cadence of a new slot goes on from it): each key's latest
//!   is loaded, and what a decision adds is loaded;
//! - how many slots are stored (the `--max-sensors-per-pipeline` check), and the oldest day
//!   one is scoped to (whether any is older than the retention): kept in the head
//!   ([`ReadingsSummary`]) and followed through the decision.
//!
//! A question it cannot answer (a slot of a date not read, every reading of a day not read
//! whole, every reading) is noted as
//! executions note theirs ([`super::noting_unloaded`]), and the decision is made again from
//! the whole state. So is the removal of a key's latest reading: what is latest after it is
//! not loaded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::executions::note_unloaded;
use super::{Shared, SharedMap, Span, Spans, StoredSensor};
use crate::core::execution::ExecutionDate;

/// Sensor readings by slot (see [`StoredSensor::slot`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readings {
    loaded: SharedMap<String, Shared<StoredSensor>>,
    /// `None`: every reading is loaded. `Some`: the state was read in part.
    part: Option<Arc<Part>>,
}

/// What a pipeline's stored head says of its readings, so that a read in part knows which
/// to load and what it leaves out: written with every head, computed from the readings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadingsSummary {
    /// How many slots are stored.
    pub count: usize,
    /// The oldest day a stored reading is scoped to (at most: the removals of a state read
    /// in part are not followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest: Option<NaiveDate>,
    /// Each key's latest slot, by when it was received (then by slot): a read in part loads
    /// them.
    #[serde(default)]
    pub latest: BTreeMap<String, String>,
}

/// What readings read in part hold beside their undated and latest ones.
#[derive(Debug, Clone, Default, PartialEq)]
struct Part {
    /// The spans whose scoped slots are all loaded.
    spans: Spans,
    /// The summary as read, its count kept up with every slot added or removed since.
    summary: ReadingsSummary,
    /// Slots removed since the read: filling the state from the store must not bring them
    /// back.
    removed: BTreeSet<String>,
}

/// The date a slot's name is scoped to: what follows its last `@`, when that is an execution
/// date as a slot writes one. An undated key may hold `@` and a date itself: such a slot is
/// taken for a scoped one by its name, and a read in part loads it all the same (every
/// undated slot is loaded), so the rules below stay true.
pub fn slot_scope(slot: &str) -> Option<ExecutionDate> {
    let (_, scope) = slot.rsplit_once('@')?;
    ExecutionDate::canonical(scope)
}

impl Readings {
    /// Whether these readings can say if slot `slot` is stored: it is loaded, or the
    /// readings were read whole, or a read in part would have loaded it.
    fn knows(&self, slot: &str) -> bool {
        match &self.part {
            None => true,
            Some(part) => self.loaded.contains_key(slot) || slot_scope(slot).is_none_or(|date| part.spans.covers(date)),
        }
    }

    /// Notes a question about `slot` these readings cannot answer.
    fn ask(&self, slot: &str) {
        if !self.knows(slot) {
            note_unloaded();
        }
    }

    /// Notes a question that needs every reading, when not every one is loaded.
    fn ask_all(&self) {
        if self.part.is_some() {
            note_unloaded();
        }
    }

    /// How many slots are stored (read in part: as the head counted them, kept up since).
    pub fn len(&self) -> usize {
        match &self.part {
            None => self.loaded.len(),
            Some(part) => part.summary.count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains_key(&self, slot: &str) -> bool {
        self.ask(slot);
        self.loaded.contains_key(slot)
    }

    /// The reading kept at `slot`.
    pub fn get(&self, slot: &str) -> Option<&Shared<StoredSensor>> {
        self.ask(slot);
        self.loaded.get(slot)
    }

    /// Keeps `sensor` at `slot`; returns the reading it replaces.
    pub fn insert(&mut self, slot: String, sensor: Shared<StoredSensor>) -> Option<Shared<StoredSensor>> {
        self.ask(&slot);
        let removed_before = self.part.as_ref().is_some_and(|p| p.removed.contains(&slot));
        let previous = self.loaded.insert(slot.clone(), sensor);
        if let (Some(part), None) = (&mut self.part, &previous) {
            let part = Arc::make_mut(part);
            part.summary.count += 1;
            if removed_before {
                part.removed.remove(&slot);
            }
        }
        previous
    }

    /// Forgets the reading at `slot`; returns it if it was there.
    pub fn remove(&mut self, slot: &str) -> Option<Shared<StoredSensor>> {
        self.ask(slot);
        let removed = self.loaded.remove(slot);
        if let (Some(part), Some(_)) = (&mut self.part, &removed) {
            // What is latest after a key's latest is gone may not be loaded.
            if part.summary.latest.values().any(|latest| latest == slot) {
                note_unloaded();
            }
            let part = Arc::make_mut(part);
            part.summary.count -= 1;
            part.removed.insert(slot.to_string());
        }
        removed
    }

    /// Keeps only the readings `keep` selects (noted when read in part: every reading).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &StoredSensor) -> bool) {
        self.ask_all();
        let gone: Vec<String> = (self.loaded.iter())
            .filter(|(slot, s)| !keep(slot, s))
            .map(|(slot, _)| slot.clone())
            .collect();
        for slot in gone {
            self.remove(&slot);
        }
    }

    /// Forgets the readings scoped to `day` that `keep` does not select: only that day's
    /// slots are looked at, so readings read in part with that day answer it.
    pub fn retain_of_day(&mut self, day: NaiveDate, mut keep: impl FnMut(&StoredSensor) -> bool) {
        let gone: Vec<String> = (self.of_day(day))
            .filter(|(_, s)| s.date == Some(day) && !keep(s))
            .map(|(slot, _)| slot.to_string())
            .collect();
        for slot in gone {
            self.remove(&slot);
        }
    }

    /// Every reading, in order of slot (noted when read in part).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &Shared<StoredSensor>)> + '_ {
        self.ask_all();
        self.loaded.iter()
    }

    /// Every slot (see [`Self::iter`]).
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + '_ {
        self.iter().map(|(slot, _)| slot)
    }

    /// Every reading (see [`Self::iter`]).
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Shared<StoredSensor>> + '_ {
        self.iter().map(|(_, s)| s)
    }

    /// The readings an execution of `day` can see: the undated ones and those scoped to
    /// `day` (noted when read in part without that day).
    pub fn of_day(&self, day: NaiveDate) -> impl Iterator<Item = (&str, &StoredSensor)> + '_ {
        if self.part.as_deref().is_some_and(|part| !part.spans.has_day(day)) {
            note_unloaded();
        }
        (self.loaded.iter())
            .filter(move |(_, s)| s.date.is_none_or(|d| d == day))
            .map(|(slot, s)| (slot.as_str(), &**s))
    }

    /// The readings an execution of `date` sees: the undated ones, those scoped to `date`
    /// and, for an hour, those scoped to its whole day (noted when read in part without
    /// them).
    pub fn of_date(&self, date: ExecutionDate) -> impl Iterator<Item = (&str, &StoredSensor)> + '_ {
        let day = date.whole_day();
        if (self.part.as_deref()).is_some_and(|part| !part.spans.covers(date) || !part.spans.covers(day)) {
            note_unloaded();
        }
        (self.loaded.iter())
            .filter(move |(_, s)| s.scope().is_none_or(|scope| scope == date || scope == day))
            .map(|(slot, s)| (slot.as_str(), &**s))
    }

    /// The readings of sensor `key`, by slot: its undated reading, then those scoped to a
    /// date (noted when read in part: they are every day's). Looked up, not scanned: a key's
    /// slots sort together (`key`, then `key@<scope>`), so this costs the key's readings,
    /// not the pipeline's.
    pub fn of_key<'s>(&'s self, key: &'s str) -> impl Iterator<Item = (&'s str, &'s StoredSensor)> + 's {
        self.ask_all();
        self.loaded_of_key(key)
    }

    /// The loaded readings of `key`, without asking.
    fn loaded_of_key<'s>(&'s self, key: &'s str) -> impl Iterator<Item = (&'s str, &'s StoredSensor)> + 's {
        let scoped = format!("{key}@");
        let slots = (self.loaded.get_key_value(key).into_iter()).chain(
            self.loaded
                .range_from(scoped.as_str())
                .take_while(move |(slot, _)| slot.starts_with(&scoped)),
        );
        // A key may hold `@` itself: a slot under the prefix can be another key's.
        slots
            .filter(move |(slot, s)| s.key_in(slot) == key)
            .map(|(slot, s)| (slot.as_str(), &**s))
    }

    /// The latest reading of `key`, by when it was received (then by slot): read in part,
    /// each key's latest is loaded.
    pub fn latest_of<'s>(&'s self, key: &'s str) -> Option<(&'s str, &'s StoredSensor)> {
        self.loaded_of_key(key).max_by_key(|(slot, s)| (s.received_at, *slot))
    }

    /// The oldest day a stored reading is scoped to (read in part: at most). Its date, not
    /// its slot's name: no name is parsed for every new slot.
    pub fn oldest_day(&self) -> Option<NaiveDate> {
        let loaded = self.loaded.values().filter_map(|s| s.date).min();
        let read = self.part.as_ref().and_then(|part| part.summary.oldest);
        loaded.into_iter().chain(read).min()
    }

    /// What a stored head says of these readings (see [`ReadingsSummary`]).
    pub fn summary(&self) -> ReadingsSummary {
        let mut latest: BTreeMap<&str, (&StoredSensor, &str)> = BTreeMap::new();
        for (slot, s) in self.loaded.iter() {
            let (slot, s): (&str, &StoredSensor) = (slot, s);
            let key = s.key_in(slot);
            let later = |(was, at): &(&StoredSensor, &str)| (s.received_at, slot) > (was.received_at, *at);
            if latest.get(key).is_none_or(later) {
                latest.insert(key, (s, slot));
            }
        }
        ReadingsSummary {
            count: self.len(),
            oldest: self.oldest_day(),
            latest: (latest.into_iter())
                .map(|(key, (_, slot))| (key.to_string(), slot.to_string()))
                .collect(),
        }
    }

    /// Keeps the undated readings, those scoped to `spans` and each key's latest, as a read
    /// in part of those spans loads them; the others are left out. Spans these readings did
    /// not hold whole are not claimed. Returns how many were left out.
    pub fn read_in_part(&mut self, spans: &[Span]) -> usize {
        let spans = self.held(spans);
        let summary = self.summary();
        let latest: BTreeSet<&String> = summary.latest.values().collect();
        let out: Vec<String> = (self.loaded.iter())
            .filter(|(slot, s)| s.scope().is_some_and(|d| !spans.covers(d)) && !latest.contains(slot))
            .map(|(slot, _)| slot.clone())
            .collect();
        for slot in &out {
            self.loaded.remove(slot);
        }
        let removed = self.part.as_ref().map(|part| part.removed.clone()).unwrap_or_default();
        self.part = Some(Arc::new(Part {
            spans,
            summary,
            removed,
        }));
        out.len()
    }

    /// Those of `spans` these readings hold whole.
    fn held(&self, spans: &[Span]) -> Spans {
        Spans::held(self.part.as_ref().map(|part| &part.spans), spans)
    }

    /// Whether [`Self::read_in_part`] of `spans` would leave a reading out.
    pub fn has_quiet(&self, spans: &[Span]) -> bool {
        let summary = self.summary();
        let spans = self.held(spans);
        (self.loaded.iter()).any(|(slot, s)| {
            s.scope().is_some_and(|d| !spans.covers(d)) && summary.latest.get(s.key_in(slot)) != Some(slot)
        })
    }

    /// Adds what `whole` (the same readings read whole) has that these, read in part, left
    /// out: those removed since stay removed. The readings are whole after. Returns whether
    /// the oldest day they were read with is not the oldest one stored: the head is to be
    /// written again (a read in part does not follow its removals, so its oldest day is at
    /// most; the count and each key's latest are exact).
    pub fn fill(&mut self, whole: &Readings) -> bool {
        let read_with = self.oldest_day();
        let Some(part) = self.part.take() else {
            return false;
        };
        for (slot, sensor) in whole.loaded.iter() {
            if !self.loaded.contains_key(slot) && !part.removed.contains(slot) {
                self.loaded.insert(slot.clone(), sensor.clone());
            }
        }
        read_with != self.oldest_day()
    }

    /// Whether the readings were read in part.
    pub fn is_partial(&self) -> bool {
        self.part.is_some()
    }

    /// Whether every reading scoped to `spans` is here (readings read whole have them all).
    pub fn holds(&self, spans: &[Span]) -> bool {
        (self.part.as_ref()).is_none_or(|part| part.spans.holds_all(spans))
    }

    /// The loaded readings as a map, for those that lay them out or measure them (see
    /// `state::parts`): not a decision's question, so nothing is noted.
    pub(crate) fn loaded(&self) -> &SharedMap<String, Shared<StoredSensor>> {
        &self.loaded
    }

    /// Adds a reading as the store holds it, while a state is read.
    pub(crate) fn put_read(&mut self, slot: String, sensor: Shared<StoredSensor>) {
        self.loaded.insert(slot, sensor);
    }

    /// Marks the readings as read in part: those of `spans` loaded, with what the head said.
    pub(crate) fn read_spans(&mut self, spans: Spans, summary: ReadingsSummary) {
        self.part = Some(Arc::new(Part {
            spans,
            summary,
            removed: BTreeSet::new(),
        }));
    }
}

impl std::ops::Index<&str> for Readings {
    type Output = Shared<StoredSensor>;

    /// # Panics
    /// If there is no loaded reading at `slot` (as a map's index does).
    fn index(&self, slot: &str) -> &Shared<StoredSensor> {
        &self.loaded[slot]
    }
}

impl std::ops::Index<&String> for Readings {
    type Output = Shared<StoredSensor>;

    fn index(&self, slot: &String) -> &Shared<StoredSensor> {
        &self.loaded[slot.as_str()]
    }
}

impl FromIterator<(String, Shared<StoredSensor>)> for Readings {
    fn from_iter<I: IntoIterator<Item = (String, Shared<StoredSensor>)>>(iter: I) -> Self {
        Readings {
            loaded: iter.into_iter().collect(),
            part: None,
        }
    }
}

/// Written as the readings by slot; readings read in part are never written whole (their
/// parts are written one by one, see `state::parts`).
impl Serialize for Readings {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_partial() {
            return Err(serde::ser::Error::custom(
                "readings read in part cannot be written whole",
            ));
        }
        self.loaded.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Readings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Readings {
            loaded: SharedMap::deserialize(deserializer)?,
            part: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::*;
    use crate::core::lifecycle::noting_unloaded;

    fn day(date: &str) -> NaiveDate {
        date.parse().unwrap()
    }

    /// A reading of `key` for `date` (`None`: undated), received `minute` minutes in.
    fn reading(date: Option<&str>, hour: Option<u32>, minute: i64) -> Shared<StoredSensor> {
        StoredSensor {
            received_at: DateTime::<Utc>::UNIX_EPOCH + TimeDelta::minutes(minute),
            date: date.map(day),
            hour,
            ..StoredSensor::default()
        }
        .into()
    }

    fn week() -> Readings {
        let mut readings = Readings::default();
        readings.insert("rows".into(), reading(None, None, 0));
        for (i, d) in ["2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23"]
            .into_iter()
            .enumerate()
        {
            readings.insert(format!("rows@{d}T05"), reading(Some(d), Some(5), 10 + i as i64));
            readings.insert(format!("ready@{d}"), reading(Some(d), None, 20 + i as i64));
        }
        // A backfill: received last, for the oldest day.
        readings.insert("ready@2026-11-19".into(), reading(Some("2026-11-19"), None, 99));
        readings
    }

    #[test]
    fn readings_read_in_part_answer_what_they_hold_and_note_what_they_do_not() {
        let whole = week();
        let summary = whole.summary();
        assert_eq!(summary.count, 10);
        assert_eq!(summary.oldest, Some(day("2026-11-19")));
        assert_eq!(summary.latest["rows"], "rows@2026-11-23T05");
        assert_eq!(
            summary.latest["ready"], "ready@2026-11-19",
            "received last, whatever its day"
        );
        let mut part = whole.clone();
        assert!(part.has_quiet(&[Span::Day(day("2026-11-22"))]));
        let out = part.read_in_part(&[Span::Day(day("2026-11-22"))]);
        assert_eq!(out, 5, "the other days' readings but each key's latest");
        assert!(!part.has_quiet(&[Span::Day(day("2026-11-22"))]));
        let asked = |f: &dyn Fn() -> bool| noting_unloaded(f);
        // What it holds, and what it knows it lacks, need nothing more.
        assert_eq!(asked(&|| part.contains_key("rows@2026-11-22T05")), (true, false));
        assert_eq!(
            asked(&|| part.contains_key("rows@2026-11-22T06")),
            (false, false),
            "a day read"
        );
        assert_eq!(
            asked(&|| part.contains_key("other")),
            (false, false),
            "undated: all loaded"
        );
        assert_eq!(asked(&|| part.len() == 10), (true, false), "the head's count");
        assert_eq!(asked(&|| part.of_day(day("2026-11-22")).count() == 3), (true, false));
        let latest = |key: &'static str| {
            let part = part.clone();
            move || part.latest_of(key).map(|(slot, _)| slot.to_string())
        };
        assert_eq!(
            noting_unloaded(latest("ready")),
            (Some("ready@2026-11-19".into()), false)
        );
        assert_eq!(
            noting_unloaded(latest("rows")),
            (Some("rows@2026-11-23T05".into()), false)
        );
        assert_eq!(part.oldest_day(), Some(day("2026-11-19")));
        // A day it did not read, or every reading, is noted.
        assert_eq!(asked(&|| part.contains_key("rows@2026-11-21T05")), (false, true));
        assert!(asked(&|| part.of_day(day("2026-11-21")).count() == 1).1);
        assert!(asked(&|| part.keys().count() == 5).1);
        // Counted as it changes; the removal of a key's latest is noted (what is latest after
        // it may not be loaded).
        let mut changed = part.clone();
        assert_eq!(
            asked(&|| changed
                .clone()
                .insert("rows@2026-11-22T06".into(), reading(None, None, 1))
                .is_none()),
            (true, false)
        );
        changed.insert("rows@2026-11-22T06".into(), reading(Some("2026-11-22"), Some(6), 100));
        assert_eq!(changed.len(), 11);
        assert_eq!(
            asked(&|| changed.clone().remove("rows@2026-11-22T05").is_some()),
            (true, false)
        );
        assert_eq!(
            asked(&|| changed.clone().remove("ready@2026-11-19").is_some()),
            (true, true)
        );
        assert!(changed.remove("ready@2026-11-22").is_some());
        assert_eq!(changed.len(), 10);
        // Its summary is the whole's, as the head would be written.
        let mut whole_changed = whole.clone();
        whole_changed.insert("rows@2026-11-22T06".into(), reading(Some("2026-11-22"), Some(6), 100));
        whole_changed.remove("ready@2026-11-22");
        assert_eq!(changed.summary(), whole_changed.summary());
        // Written whole it cannot be; filled from the whole, it is the whole again, less
        // what was removed since.
        assert!(serde_json::to_string(&part).is_err());
        let mut filled = changed.clone();
        filled.fill(&whole);
        assert!(!filled.is_partial());
        assert_eq!(filled, whole_changed);
        // A second read in part claims no day the first did not read.
        let mut again = part.clone();
        again.read_in_part(&[Span::Day(day("2026-11-21")), Span::Day(day("2026-11-22"))]);
        assert!(asked(&|| again.contains_key("rows@2026-11-21T05")).1);
    }

    #[test]
    fn a_slot_is_scoped_by_the_date_its_name_ends_with() {
        let hour = ExecutionDate {
            day: day("2026-11-22"),
            hour: Some(5),
        };
        assert_eq!(slot_scope("rows@2026-11-22T05"), Some(hour));
        assert_eq!(slot_scope("rows@2026-11-22"), Some(hour.whole_day()));
        assert_eq!(slot_scope("a@b@2026-11-22"), Some(hour.whole_day()));
        assert_eq!(slot_scope("rows"), None);
        assert_eq!(slot_scope("me@example.com"), None);
    }
}
