//! How a pipeline's state is laid out in the store, so that a decision writes (and mirrors to
//! the changelog) what it changed rather than the pipeline's whole retained history: an
//! hourly pipeline keeps a week of executions and their readings, and rewriting all of them
//! for every reading made the cost of a record grow with the history.
//!
//! Keys: the head `p/<pipeline>` holds the state without its executions, sensor readings
//! and timers; each execution is a part with the timers armed for it (they change together),
//! `p/<pipeline>\0x<execution id>`; each sensor reading `p/<pipeline>\0s<sensor slot>`; and
//! each other timer (a schedule's, or one whose execution is gone) `p/<pipeline>\0t<timer kind>`. A pipeline id never
//! contains `\0` (records naming one are refused), so one pipeline's parts never mix with
//! another's. A head written before parts holds them inline and still reads; the first write
//! after moves them to parts.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::Write;
use crate::core::config::SCHEDULE_IDS;
use crate::core::execution::{ExecutionId, ParseError};
use crate::core::lifecycle::{
    spans_kept, HeldExecution, PendingTimer, Phase, PipelineState, ReadingsSummary, SharedMap, Span, Spans,
    StoredSensor,
};
use crate::core::timers::TimerKind;

const SEPARATOR: u8 = 0;
pub(crate) const EXECUTION: u8 = b'x';
pub(crate) const SENSOR: u8 = b's';
pub(crate) const TIMER: u8 = b't';

pub fn head_key(pipeline: &str) -> Vec<u8> {
    [b"p/".as_slice(), pipeline.as_bytes()].concat()
}

/// The prefix of every part of `pipeline`.
pub fn parts_prefix(pipeline: &str) -> Vec<u8> {
    let mut key = head_key(pipeline);
    key.push(SEPARATOR);
    key
}

/// The first key past every part of `pipeline`: the parts' prefix with its separator
/// raised by one.
pub fn parts_end(pipeline: &str) -> Vec<u8> {
    let mut key = head_key(pipeline);
    key.push(SEPARATOR + 1);
    key
}

pub(crate) fn part_key(pipeline: &str, tag: u8, id: &str) -> Vec<u8> {
    let mut key = parts_prefix(pipeline);
    key.push(tag);
    key.extend_from_slice(id.as_bytes());
    key
}

/// The pipeline whose head or part `key` is.
pub fn pipeline_of(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(b"p/")?.split(|b| *b == SEPARATOR).next()
}

/// Whether `key` (under `p/`) is a pipeline's head, not one of its parts.
pub fn is_head(key: &[u8]) -> bool {
    key.starts_with(b"p/") && !key.contains(&SEPARATOR)
}

/// The writes that take a pipeline's stored state from `before` to `after`: the head if it
/// changed (or `head_stale`: it was written before reads in part), the parts that differ,
/// and deletes of the parts gone. `before` is `None` when the store does not hold the state
/// in parts (nothing stored, or a head from before parts): the head and every part are
/// written.
///
/// A decision touches a few executions, readings and timers of a history that can be a
/// week long, and its copy of the state shares the rest (each is a
/// [`SharedMap`](crate::core::lifecycle::SharedMap)): only what it touched is laid out and
/// compared, so the cost follows the decision, not the history.
pub fn writes(
    pipeline: &str,
    before: Option<&PipelineState>,
    after: &PipelineState,
    head_stale: bool,
) -> Result<Vec<Write>, serde_json::Error> {
    let mut out = Vec::new();
    let head = head(after);
    let changed = |before: &PipelineState| {
        // The readings' summary sums up every reading loaded (all of them, in a state read
        // whole): made for the state before only when its readings changed.
        let same = before.sensors.loaded().changes(after.sensors.loaded()).is_empty();
        let summary = match same {
            true => head.readings.clone(),
            false => Some(before.sensors.summary()),
        };
        head_with(before, summary) != head
    };
    if head_stale || before.is_none_or(changed) {
        out.push((head_key(pipeline), Some(serde_json::to_vec(&head)?)));
    }
    match before {
        Some(before) => touched_writes(&mut out, pipeline, before, after)?,
        None => whole_writes(&mut out, pipeline, &PipelineState::default(), after)?,
    }
    Ok(out)
}

/// The parts that differ, laying out both states whole.
pub(crate) fn whole_writes(
    out: &mut Vec<Write>,
    pipeline: &str,
    before: &PipelineState,
    after: &PipelineState,
) -> Result<(), serde_json::Error> {
    let (before, after) = (layout(before), layout(after));
    let executions = before.executions.changes(&after.executions);
    put(out, pipeline, EXECUTION, executions, |id| id.to_string())?;
    let sensors = (before.state.sensors.loaded()).changes(after.state.sensors.loaded());
    put(out, pipeline, SENSOR, sensors, String::clone)?;
    put(out, pipeline, TIMER, before.timers.changes(&after.timers), |kind| {
        kind.encode()
    })
}

/// The parts that differ, laying out only what the decision touched (see [`Touched`]).
pub(crate) fn touched_writes(
    out: &mut Vec<Write>,
    pipeline: &str,
    before: &PipelineState,
    after: &PipelineState,
) -> Result<(), serde_json::Error> {
    let touched = Touched::between(before, after);
    let executions = |state| -> SharedMap<&ExecutionId, ExecutionPart> {
        (touched.executions.iter())
            .filter_map(|id| Some((*id, execution_part(state, id)?)))
            .collect()
    };
    let (was, is) = (executions(before), executions(after));
    put(out, pipeline, EXECUTION, was.changes(&is), |id| id.to_string())?;
    put(
        out,
        pipeline,
        SENSOR,
        before.sensors.loaded().changes(after.sensors.loaded()),
        String::clone,
    )?;
    let loose = |state| -> SharedMap<&TimerKind, &PendingTimer> {
        (touched.loose.iter())
            .filter_map(|kind| Some((*kind, loose_timer(state, kind)?)))
            .collect()
    };
    let (was, is) = (loose(before), loose(after));
    put(out, pipeline, TIMER, was.changes(&is), |kind| kind.encode())
}

/// What a decision may have changed between two states of a pipeline: the executions whose
/// part may differ, and the timer kinds whose part of their own may. A superset is harmless
/// (an unchanged part compares equal and is not written); a part missing from it would be a
/// write lost, which `touched_writes_are_those_of_the_whole_layout` checks against laying
/// out both states whole.
struct Touched<'s> {
    executions: BTreeSet<&'s ExecutionId>,
    loose: BTreeSet<&'s TimerKind>,
}

impl<'s> Touched<'s> {
    fn between(before: &'s PipelineState, after: &'s PipelineState) -> Self {
        let mut executions = BTreeSet::new();
        let mut loose = BTreeSet::new();
        // Executions changed (an unchanged one is the same allocation), added or removed.
        let mut came_or_went = Vec::new();
        for (key, was, is) in (before.executions.loaded()).changes(after.executions.loaded()) {
            if was.is_none() || is.is_none() {
                came_or_went.push(key);
            }
            executions.insert(key);
        }
        // An execution that came or went takes its timers into its part or out of it.
        for key in came_or_went {
            for kind in before.timers.keys().chain(after.timers.keys()) {
                if armed_for(kind, key) {
                    loose.insert(kind);
                }
            }
        }
        // Timers set, moved or cancelled (a kept one is the same allocation).
        for (kind, _, _) in before.timers.changes(&after.timers) {
            loose.insert(kind);
            if let Some(id) = kind.execution() {
                if before.executions.contains_key(id) || after.executions.contains_key(id) {
                    executions.insert(id);
                }
            }
        }
        Touched { executions, loose }
    }
}

/// Whether `timer` is armed for execution `id`: [`layout`] puts it in that part.
fn armed_for(timer: &TimerKind, id: &ExecutionId) -> bool {
    timer.execution() == Some(id)
}

/// The part of execution `id` in `state`, if it has that execution: as [`layout`] makes it.
pub(crate) fn execution_part<'s>(state: &'s PipelineState, id: &ExecutionId) -> Option<ExecutionPart<'s>> {
    let execution = state.executions.loaded().get(id)?;
    // In kind order, as the map holds them.
    let timers: Vec<&PendingTimer> = (state.timers.values())
        .filter(|t| armed_for(&t.timer, id))
        .map(|t| &**t)
        .collect();
    Some(ExecutionPart::new(execution, timers))
}

/// The timer of `kind` in `state`, if it is a part of its own (no execution of `state` holds
/// it): as [`layout`] makes it.
fn loose_timer<'s>(state: &'s PipelineState, kind: &TimerKind) -> Option<&'s PendingTimer> {
    let timer = state.timers.get(kind)?;
    let held = (kind.execution()).is_some_and(|id| state.executions.contains_key(id));
    (!held).then_some(&**timer)
}

/// An execution's part: its phase, the execution and the timers armed for it, in kind order.
#[derive(Clone, PartialEq, Serialize)]
pub(crate) struct ExecutionPart<'s> {
    /// The execution's phase (also inside it), so that a read learns it without scanning the
    /// execution's JSON a second time.
    phase: &'s Phase,
    execution: &'s HeldExecution,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) timers: Vec<&'s PendingTimer>,
}

impl<'s> ExecutionPart<'s> {
    fn new(execution: &'s HeldExecution, timers: Vec<&'s PendingTimer>) -> Self {
        let phase = execution.phase();
        ExecutionPart {
            phase,
            execution,
            timers,
        }
    }
}

/// An execution's part as read: the execution is kept as its JSON, with only its phase read
/// ([`HeldExecution`]), until a decision needs it. A part written before parts recorded the
/// phase has none: it is read from the execution.
#[derive(Deserialize)]
struct StoredExecution<'a> {
    #[serde(default)]
    phase: Option<Phase>,
    #[serde(borrow)]
    execution: &'a RawValue,
    #[serde(default)]
    timers: Vec<PendingTimer>,
}

/// The parts a state is stored in, borrowed from it (its sensor readings are parts as they
/// are): its executions with their timers, and the timers that go alone.
struct Layout<'s> {
    state: &'s PipelineState,
    executions: SharedMap<&'s ExecutionId, ExecutionPart<'s>>,
    timers: SharedMap<&'s TimerKind, &'s PendingTimer>,
}

fn layout(state: &PipelineState) -> Layout<'_> {
    let mut executions: SharedMap<&ExecutionId, ExecutionPart> = (state.executions.loaded().iter())
        .map(|(id, execution)| (id, ExecutionPart::new(execution, Vec::new())))
        .collect();
    let mut timers = SharedMap::new();
    for t in state.timers.values() {
        let part = (t.timer.execution()).and_then(|id| executions.get_mut(id));
        match part {
            Some(part) => part.timers.push(&**t),
            None => {
                timers.insert(&t.timer, &**t);
            }
        }
    }
    Layout {
        state,
        executions,
        timers,
    }
}

/// Puts the entries that `changes` says `after` lacks or holds otherwise; deletes the ones
/// gone. `id` names an entry's part.
fn put<K, V: Serialize>(
    out: &mut Vec<Write>,
    pipeline: &str,
    tag: u8,
    changes: Vec<(&K, Option<&V>, Option<&V>)>,
    id: impl Fn(&K) -> String,
) -> Result<(), serde_json::Error> {
    for (key, _, value) in changes {
        let value = value.map(serde_json::to_vec).transpose()?;
        out.push((part_key(pipeline, tag, &id(key)), value));
    }
    Ok(())
}

/// Deletes of every part `stored` has. `stored` is whole: a decision that deletes a
/// pipeline asks whether it has executions, which a state read in part cannot answer, so it
/// is made from the whole state (see `Executions`).
pub fn deletes(pipeline: &str, stored: &PipelineState) -> Vec<Vec<u8>> {
    debug_assert!(!stored.is_partial(), "{pipeline}: a delete from a state read in part");
    let layout = layout(stored);
    // Every execution's, loaded or not.
    let executions = (stored.executions.keys()).map(|id| part_key(pipeline, EXECUTION, id.as_str()));
    let sensors = (stored.sensors.loaded().keys()).map(|slot| part_key(pipeline, SENSOR, slot));
    let timers = layout
        .timers
        .keys()
        .map(|kind| part_key(pipeline, TIMER, &kind.encode()));
    executions.chain(sensors).chain(timers).collect()
}

/// The head: the state without its config (stored apart) and without its parts. Every field
/// is named, so a field added to the state must be given a place: the head or parts.
pub(crate) fn head(state: &PipelineState) -> PipelineState {
    head_with(state, Some(state.sensors.summary()))
}

/// [`head`], its readings' summary given.
fn head_with(state: &PipelineState, readings: Option<ReadingsSummary>) -> PipelineState {
    let PipelineState {
        config: _,
        sensors: _,
        executions: _,
        timers: _,
        dependents,
        history,
        forecasts,
        unknown_sensors,
        live: _,
        readings: _,
    } = state;
    // The history, the forecast marks and the unknown keys are bounded (30 runs, 48 dates,
    // 64 keys) and change at most once a run or a day: small enough for the head.
    // The live executions are few (open, or with an alert still owed): a read in part loads
    // them by id. The readings' summary is a count, a day and a slot per key.
    PipelineState {
        dependents: dependents.clone(),
        history: history.clone(),
        forecasts: forecasts.clone(),
        unknown_sensors: unknown_sensors.clone(),
        live: Some(state.live().into_iter().cloned().collect()),
        readings,
        ..PipelineState::default()
    }
}

/// What a [`Source`] scan calls with each key and value.
pub type Each<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), PartError> + 'a;

/// A store's keys, as a read of a pipeline's state asks for them.
/// Keys from the first (included) to the second (excluded).
pub type KeyRange = (Vec<u8>, Vec<u8>);

pub trait Source {
    type Error;
    /// The value stored under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Self::Error>;
    /// Calls `each` with every key of each range, from its start (included) to its end
    /// (excluded), and its value, in order; stops at the first error `each` returns. The
    /// ranges are in order and apart, so one pass over the store serves them all (one
    /// iterator seeking forward, not one per range).
    fn scan(&self, ranges: &[KeyRange], each: &mut Each<'_>) -> Result<Result<(), PartError>, Self::Error>;
}

/// Why a state could not be read: the store failed, or what it holds does not decode.
#[derive(Debug, thiserror::Error)]
pub enum ReadError<E> {
    #[error(transparent)]
    Store(E),
    #[error("{0}")]
    Corrupt(String),
}

/// A pipeline's state as read from its head and parts (its config is the caller's to add).
pub struct Read {
    pub state: PipelineState,
    /// Whether the store holds it in parts (see [`in_parts`]).
    pub in_parts: bool,
    /// Whether its head was written before reads in part: the next write writes it again.
    pub head_stale: bool,
}

/// Reads `pipeline`'s state from `source`: whole, or in part when `spans` are given (the live
/// executions, those of `spans`, the readings [`Readings`](crate::core::lifecycle::Readings)
/// keeps, and every timer of its own, see
/// [`Executions`](crate::core::lifecycle::Executions)). A head written before reads in part
/// is read whole; one written before its readings' summary has its readings read whole.
pub fn read<S: Source>(
    source: &S,
    pipeline: &str,
    spans: Option<&[Span]>,
) -> Result<Option<Read>, ReadError<S::Error>> {
    let Some(head) = source.get(&head_key(pipeline)).map_err(ReadError::Store)? else {
        return Ok(None);
    };
    let corrupt = |e: &dyn std::fmt::Display| ReadError::Corrupt(e.to_string());
    let mut state: PipelineState = serde_json::from_slice(&head).map_err(|e| corrupt(&e))?;
    let in_parts = in_parts(&state);
    let live = state.live.take();
    let summary = state.readings.take();
    let prefix = parts_prefix(pipeline);
    let scan = |state: &mut PipelineState, ranges: Vec<KeyRange>| -> Result<(), ReadError<S::Error>> {
        let mut add = |key: &[u8], value: &[u8]| add_part(state, &key[prefix.len()..], value);
        (source.scan(&merged(ranges), &mut add).map_err(ReadError::Store)?).map_err(|e| corrupt(&e))
    };
    let (live, spans) = match (in_parts, live, spans) {
        (true, Some(live), Some(spans)) => (live, spans),
        (_, live, _) => {
            scan(&mut state, vec![(prefix.clone(), parts_end(pipeline))])?;
            return Ok(Some(Read {
                state,
                in_parts,
                head_stale: in_parts && (live.is_none() || summary.is_none()),
            }));
        }
    };
    // The spans asked for and the live executions' dates. A day is read as a range per
    // schedule (its daily date and its hours sort together); a single date as a point per
    // schedule.
    let tag = |tag: u8| [prefix.as_slice(), &[tag]].concat();
    let mut ranges = vec![(tag(TIMER), tag(TIMER + 1))];
    for id in live.iter().filter(|id| !SCHEDULE_IDS.contains(&id.schedule())) {
        // Never stored (a config names one of those), but read if it were.
        ranges.push(point(part_key(pipeline, EXECUTION, id.as_str())));
    }
    let read: Spans = spans_kept(spans, live.iter()).into_iter().collect();
    // What a span's key names: `2026-11-02` for a day (then a range: its hours,
    // `2026-11-02T05`, follow it), a date's own text for a date.
    let named = |span: &Span| match span {
        Span::Day(day) => (day.to_string(), true),
        Span::Date(date) => (date.to_string(), false),
    };
    for span in read.iter() {
        let (name, whole_day) = named(span);
        for schedule in SCHEDULE_IDS {
            let from = part_key(pipeline, EXECUTION, &format!("{schedule}/{name}"));
            ranges.push(match whole_day {
                true => {
                    let to = [from.as_slice(), &[u8::MAX]].concat();
                    (from, to)
                }
                false => point(from),
            });
        }
    }
    match &summary {
        // Every key's undated slot and latest slot, and its slots of each span read:
        // `rows@2026-11-02` and, for a day, its hours, `rows@2026-11-02T05`.
        Some(summary) => {
            let slot = |name: &str| part_key(pipeline, SENSOR, name);
            for (key, latest) in &summary.latest {
                ranges.push(point(slot(key)));
                ranges.push(point(slot(latest)));
                for span in read.iter() {
                    let (name, whole_day) = named(span);
                    let scoped = format!("{key}@{name}");
                    ranges.push(point(slot(&scoped)));
                    if whole_day {
                        ranges.push((slot(&format!("{scoped}T")), slot(&format!("{scoped}U"))));
                    }
                }
            }
        }
        // A head written before it kept the summary: every reading.
        None => ranges.push((tag(SENSOR), tag(SENSOR + 1))),
    }
    scan(&mut state, ranges)?;
    if let Some(summary) = summary.clone() {
        state.sensors.read_spans(read.clone(), summary);
    }
    state.executions.read_spans(read);
    state.know_timers_alone();
    Ok(Some(Read {
        state,
        in_parts,
        head_stale: summary.is_none(),
    }))
}

/// A range of one key: `key` to `key` and a zero byte, the next key there can be.
pub fn point(key: Vec<u8>) -> KeyRange {
    let to = [key.as_slice(), &[0]].concat();
    (key, to)
}

/// Whether `from`..`to` holds one key only (made by [`point`]).
pub fn is_point(from: &[u8], to: &[u8]) -> bool {
    to.len() == from.len() + 1 && to.starts_with(from) && to.last() == Some(&0)
}

/// `ranges` in order, those that overlap or touch joined: a scan takes them apart and in
/// order, and a key's latest slot may lie in a day read.
fn merged(mut ranges: Vec<KeyRange>) -> Vec<KeyRange> {
    ranges.sort();
    let mut out: Vec<KeyRange> = Vec::with_capacity(ranges.len());
    for (from, to) in ranges {
        match out.last_mut() {
            Some((_, end)) if from <= *end => {
                if to > *end {
                    *end = to;
                }
            }
            _ => out.push((from, to)),
        }
    }
    out
}

/// Whether a decoded head holds no parts inline: its state is stored in parts (or has none).
pub fn in_parts(head: &PipelineState) -> bool {
    head.executions.is_empty() && head.sensors.is_empty() && head.timers.is_empty()
}

/// An execution's part, or a head, read for its timers only (the rest is skipped, not
/// built): a head's inline timers are the same list under the same name.
#[derive(Deserialize)]
struct ExecutionTimers {
    #[serde(default)]
    timers: Vec<PendingTimer>,
}

/// The timers held under the stored `key` (under `p/`): an execution part's, a timer part's,
/// or those of a head written before parts (inline). This is how the timer index is rebuilt
/// when a partition opens: the state's parts are the timers' only record.
pub fn timers_of(key: &[u8], value: &[u8]) -> Result<Vec<PendingTimer>, PartError> {
    let Some(rest) = key.strip_prefix(b"p/") else {
        return Ok(Vec::new());
    };
    let bad = |source| PartError::Decode {
        id: String::from_utf8_lossy(rest).into_owned(),
        source,
    };
    // `None`: the head, whose timers (written before parts) are inline.
    let tag = rest.iter().position(|b| *b == SEPARATOR).map(|at| rest.get(at + 1));
    match tag {
        None | Some(Some(&EXECUTION)) => Ok(serde_json::from_slice::<ExecutionTimers>(value).map_err(bad)?.timers),
        Some(Some(&TIMER)) => Ok(vec![serde_json::from_slice(value).map_err(bad)?]),
        _ => Ok(Vec::new()),
    }
}

/// Follows a pass over every pipeline's head and parts, in key order (as a partition's
/// opening reads them for their timers), and names the pipelines whose head's readings
/// summary does not match the readings stored: a version from before the summary (a
/// rollback) added or removed readings without writing it. Such a pipeline is read whole
/// until its head is written again; a read in part would miss what the summary does not
/// name (a key it lacks, a slot it does not count). A reading an older version changed in
/// place, its count unchanged, is not detected: it moves at most which slot is a key's
/// latest, which a new slot's cadence goes on from.
#[derive(Default)]
pub struct SummaryCheck {
    /// The pipeline being followed: its head's summary and what its parts showed so far.
    current: Option<Followed>,
    off: Vec<String>,
}

struct Followed {
    pipeline: String,
    summary: ReadingsSummary,
    count: usize,
    latest_seen: usize,
    keys_named: bool,
}

/// A head read for its readings' summary only.
#[derive(Deserialize)]
struct HeadSummary {
    #[serde(default)]
    readings: Option<ReadingsSummary>,
}

impl SummaryCheck {
    /// Takes the next stored `key` (under `p/`) and its value.
    pub fn see(&mut self, key: &[u8], value: &[u8]) {
        let Some(rest) = key.strip_prefix(b"p/") else {
            return;
        };
        let Some(at) = rest.iter().position(|b| *b == SEPARATOR) else {
            self.close();
            // A head that does not decode is the state read's to report.
            let summary = serde_json::from_slice::<HeadSummary>(value)
                .ok()
                .and_then(|h| h.readings);
            self.current = summary.map(|summary| Followed {
                pipeline: String::from_utf8_lossy(rest).into_owned(),
                summary,
                count: 0,
                latest_seen: 0,
                keys_named: true,
            });
            return;
        };
        let (Some(f), Some(&SENSOR)) = (&mut self.current, rest.get(at + 1)) else {
            return;
        };
        // A part without its head (never written so) is not this pipeline's.
        if &rest[..at] != f.pipeline.as_bytes() {
            return;
        }
        let slot = String::from_utf8_lossy(&rest[at + 2..]);
        f.count += 1;
        if f.summary.latest.values().any(|latest| *latest == slot) {
            f.latest_seen += 1;
        }
        // Its key is its name, or its name but the scope.
        let key = slot.rsplit_once('@').map(|(key, _)| key);
        f.keys_named &= f.summary.latest.contains_key(&*slot) || key.is_some_and(|k| f.summary.latest.contains_key(k));
    }

    fn close(&mut self) {
        if let Some(f) = self.current.take() {
            if f.count != f.summary.count || f.latest_seen != f.summary.latest.len() || !f.keys_named {
                self.off.push(f.pipeline);
            }
        }
    }

    /// The pipelines whose summary is off.
    pub fn finish(mut self) -> Vec<String> {
        self.close();
        self.off
    }
}

/// Why a stored part does not decode.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("an empty part key")]
    EmptyKey,
    #[error("a part key that is not UTF-8")]
    NotUtf8,
    #[error("part {id}: {source}")]
    Decode {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("part {id}: {source}")]
    Id {
        id: String,
        #[source]
        source: ParseError,
    },
    #[error("a part of unknown kind {0:?}")]
    UnknownKind(char),
}

/// Adds the part stored under `suffix` (the key after [`parts_prefix`]) to `state`; `Err`
/// says why it does not decode.
pub fn add_part(state: &mut PipelineState, suffix: &[u8], value: &[u8]) -> Result<(), PartError> {
    let (&tag, id) = suffix.split_first().ok_or(PartError::EmptyKey)?;
    let id = std::str::from_utf8(id).map_err(|_| PartError::NotUtf8)?;
    let bad = |source| PartError::Decode {
        id: id.to_string(),
        source,
    };
    match tag {
        EXECUTION => {
            let part: StoredExecution = serde_json::from_slice(value).map_err(bad)?;
            let execution = HeldExecution::from_stored(part.execution.get().into(), part.phase).map_err(bad)?;
            let id: ExecutionId = id.parse().map_err(|source| PartError::Id {
                id: id.to_string(),
                source,
            })?;
            state.executions.insert(id, execution);
            for timer in part.timers {
                state.arm(timer);
            }
        }
        SENSOR => {
            let sensor: StoredSensor = serde_json::from_slice(value).map_err(bad)?;
            state.sensors.put_read(id.to_string(), sensor.into());
        }
        TIMER => state.arm(serde_json::from_slice::<PendingTimer>(value).map_err(bad)?),
        other => return Err(PartError::UnknownKind(other as char)),
    }
    Ok(())
}
